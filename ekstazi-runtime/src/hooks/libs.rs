//! Shared libraries: the loader maps them without going through `open`, so
//! the shim lists them from the loader itself (`dl_iterate_phdr`) when the
//! process starts and after every `dlopen`.

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
    }
    handle
}
