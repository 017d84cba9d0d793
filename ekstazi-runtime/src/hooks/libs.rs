//! Shared libraries: the loader maps them without going through `open`, so
//! the shim lists them from the loader itself (`dl_iterate_phdr`) when the
//! process starts and after every `dlopen`, and names the places a failed
//! `dlopen` searched.

use super::{observe, unavailable};
use crate::path::{EventBuf, Unresolved};
use crate::{real, trace};
use libc::{c_char, c_int, c_void, size_t};

/// Records every library mapped into this process. A library belongs to the
/// process, not to the thread that noticed it, so the events carry no
/// harness flag (the test binary's libraries are listed on its main thread).
pub fn record_libraries() {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: size_t,
        _data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid entry.
        let name = unsafe { (*info).dlpi_name };
        // The main program has an empty name; the vDSO a bare one. Names
        // the loader found are absolute; a relative one comes from a
        // `dlopen` of a relative path, which its hook resolves.
        // SAFETY: `name` is null or a C string.
        if name.is_null() || unsafe { *name } != b'/' as c_char {
            return 0;
        }
        // SAFETY: as above.
        match unsafe { EventBuf::resolve(libc::AT_FDCWD, name) } {
            Ok(mut buf) if !is_vdso(buf.path()) => trace::record_as(trace::LIBRARY, 0, &mut buf),
            Ok(_) | Err(Unresolved::NotAPath) => {}
            Err(Unresolved::Lost) => trace::record_lost(),
        }
        0
    }
    // SAFETY: the callback only reads the entries it is given.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::null_mut()) };
}

fn is_vdso(path: &[u8]) -> bool {
    path.ends_with(b"/linux-vdso.so.1") || path.ends_with(b"/linux-gate.so.1")
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let Some(real) = real::dlopen() else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's.
    let handle = unsafe { real(file, mode) };
    if !handle.is_null() {
        observe(|_| {
            record_libraries();
            // The loader keeps a relative path as it was given: name it
            // now, against the directory it was opened from.
            // SAFETY: `file` is null or a C string (the caller's contract).
            let relative = !file.is_null()
                && unsafe { *file } != b'/' as c_char
                && unsafe { std::ffi::CStr::from_ptr(file) }
                    .to_bytes()
                    .contains(&b'/');
            if relative {
                // SAFETY: as above.
                match unsafe { EventBuf::resolve(libc::AT_FDCWD, file) } {
                    Ok(mut buf) => trace::record_as(trace::LIBRARY, 0, &mut buf),
                    Err(Unresolved::NotAPath) => {}
                    Err(Unresolved::Lost) => trace::record_lost(),
                }
            }
        });
    } else if !file.is_null() {
        // SAFETY: `file` is a C string (the caller's contract).
        observe(|_| unsafe { failed(file) });
    }
    handle
}

/// The directories the loader searches for a bare library name, after
/// `LD_LIBRARY_PATH`: the system's defaults (Debian's multiarch ones
/// first). A program's own `RUNPATH` and further `ld.so.conf` entries are
/// not followed.
const DEFAULT_DIRS: &[&[u8]] = &[
    #[cfg(target_arch = "x86_64")]
    b"/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "x86_64")]
    b"/usr/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    b"/lib/aarch64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    b"/usr/lib/aarch64-linux-gnu",
    b"/usr/local/lib",
    b"/lib64",
    b"/usr/lib64",
    b"/lib",
    b"/usr/lib",
];

/// Records what a failed `dlopen` searched: the path it was given, or, for
/// a bare name, that name in every directory the loader looks in. The
/// loader opens them itself (not through an interposable `open`), so a
/// library that appears later where the search failed is seen only this
/// way. A candidate that is there (and failed to load) is read: its
/// content is what failed.
///
/// # Safety
/// `file` is a C string.
unsafe fn failed(file: *const c_char) {
    // SAFETY: forwarded from the caller.
    let name = unsafe { std::ffi::CStr::from_ptr(file) }.to_bytes();
    if name.contains(&b'/') {
        // SAFETY: as above.
        return unsafe { candidate(file) };
    }
    // SAFETY: reading the environment without recording it (the loader's
    // search is the dependency, not the variable).
    let paths = unsafe { crate::environ::lookup(b"LD_LIBRARY_PATH") };
    let paths: &[u8] = if paths.is_null() {
        b""
    } else {
        // SAFETY: a value from `environ` is a C string.
        unsafe { std::ffi::CStr::from_ptr(paths) }.to_bytes()
    };
    let dirs = paths
        .split(|b| *b == b':' || *b == b';')
        .filter(|dir| !dir.is_empty())
        .chain(DEFAULT_DIRS.iter().copied());
    for dir in dirs {
        let mut joined = [0u8; 4096];
        let len = dir.len() + 1 + name.len();
        if len >= joined.len() {
            trace::record_lost();
            continue;
        }
        joined[..dir.len()].copy_from_slice(dir);
        joined[dir.len()] = b'/';
        joined[dir.len() + 1..len].copy_from_slice(name);
        // SAFETY: `joined` is NUL-terminated.
        unsafe { candidate(joined.as_ptr().cast()) };
    }
}

/// One place a failed `dlopen` looked: its absence, or its content.
///
/// # Safety
/// `path` is a C string.
unsafe fn candidate(path: *const c_char) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match super::probe_kind(libc::AT_FDCWD, path, false) {
            0 => super::event(libc::AT_FDCWD, path, trace::MISSING, 0),
            _ => super::event(libc::AT_FDCWD, path, trace::READ, 0),
        }
    }
}
