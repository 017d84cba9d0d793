//! C's directory walkers: `glob`, `nftw`, `ftw` and `fts`.
//!
//! glibc's implementations read directories through its own internal
//! `opendir` and `readdir`, which the shim's hooks do not stand in front
//! of, so a test that globs `data/*.json` through libc (or C code that
//! walks a tree) would depend on nothing it listed. `glob` is described
//! from its pattern, `nftw`, `ftw` and `fts_read` from the entries they
//! hand the caller.

use super::{event, observe, probe_kind, unavailable};
use crate::{real, trace};
use libc::{c_char, c_int, c_void};
use std::cell::Cell;

/// Whether a pattern byte makes `glob` list a directory (`{` only counts
/// with `GLOB_BRACE`, but treating it so is merely cautious).
fn is_meta(b: u8) -> bool {
    matches!(b, b'*' | b'?' | b'[' | b'{')
}

/// Records what matching `pattern` read: the listing of the directory its
/// last component is matched in; the existence of a pattern without
/// wildcards. A wildcard before the last component (`*/x.txt`) lists
/// directories that depend on what matched, and `~` the home directory:
/// neither can be named here, so the test cannot be trusted.
///
/// # Safety
/// `pattern` is null or a C string.
unsafe fn describe(pattern: *const c_char) {
    if pattern.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::ffi::CStr::from_ptr(pattern) }.to_bytes();
    let split = bytes.iter().rposition(|b| *b == b'/');
    let (dir, last) = match split {
        Some(0) => (&b"/"[..], &bytes[1..]),
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (&b"."[..], bytes),
    };
    if bytes.first() == Some(&b'~') || dir.iter().any(|b| is_meta(*b)) {
        return trace::record_lost();
    }
    if !last.iter().any(|b| is_meta(*b)) {
        // A plain path: `glob` only looks it up.
        // SAFETY: `pattern` is a C string.
        unsafe {
            match probe_kind(libc::AT_FDCWD, pattern, false) {
                0 => event(libc::AT_FDCWD, pattern, trace::MISSING, 0),
                kind => event(libc::AT_FDCWD, pattern, trace::EXISTS, kind),
            }
        }
        return;
    }
    let mut path = [0u8; 4096];
    if dir.len() >= path.len() {
        return trace::record_lost();
    }
    path[..dir.len()].copy_from_slice(dir);
    // SAFETY: `path` is NUL-terminated.
    unsafe { event(libc::AT_FDCWD, path.as_ptr().cast(), trace::LISTED, 0) };
}

type GlobFn = unsafe extern "C" fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;

/// Runs glibc's `glob` (or `glob64`), then describes what it listed.
///
/// # Safety
/// As the libc function.
unsafe fn globbed(
    real: Option<GlobFn>,
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    let Some(real) = real else {
        return unavailable(libc::GLOB_ABORTED);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(pattern, flags, errfunc, pglob);
        observe(|_| describe(pattern));
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { globbed(real::glob(), pattern, flags, errfunc, pglob) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { globbed(real::glob64(), pattern, flags, errfunc, pglob) }
}

/// `<ftw.h>`'s type flags for a directory: entered (`FTW_D`), and left
/// after its entries with `FTW_DEPTH` (`FTW_DP`). Not in the `libc` crate.
const FTW_D: c_int = 1;
const FTW_DP: c_int = 5;

type NftwFn = unsafe extern "C" fn(*const c_char, *const c_void, c_int, *mut c_void) -> c_int;

thread_local! {
    // The caller's callback of the `nftw` this thread is in: `nftw` passes
    // its callback no data of the caller's, so the shim's own callback
    // finds it here. Restored after the call, for a walk inside a walk.
    static CALLER: Cell<usize> = const { Cell::new(0) };
}

/// Records each directory the walk enters (its listing), then hands the
/// entry to the caller's callback.
unsafe extern "C" fn each(
    path: *const c_char,
    stat: *const c_void,
    typeflag: c_int,
    ftw: *mut c_void,
) -> c_int {
    if matches!(typeflag, FTW_D | FTW_DP) {
        // SAFETY: `nftw` passes the entry's path as a C string.
        observe(|_| unsafe { event(libc::AT_FDCWD, path, trace::LISTED, 0) });
    }
    let caller = CALLER.with(Cell::get);
    // SAFETY: set by `walk` from the caller's callback before this runs.
    let caller = unsafe { std::mem::transmute::<usize, NftwFn>(caller) };
    // SAFETY: the arguments `nftw` gave, passed on.
    unsafe { caller(path, stat, typeflag, ftw) }
}

/// Runs `real` with the shim's callback in front of the caller's.
unsafe fn walk(
    real: unsafe extern "C" fn(*const c_char, NftwFn, c_int, c_int) -> c_int,
    dir: *const c_char,
    callback: NftwFn,
    fds: c_int,
    flags: c_int,
) -> c_int {
    if !trace::enabled() {
        // SAFETY: the caller's contract is libc's.
        return unsafe { real(dir, callback, fds, flags) };
    }
    let before = CALLER.with(|c| c.replace(callback as usize));
    // SAFETY: as above, with a callback of the same signature.
    let result = unsafe { real(dir, each, fds, flags) };
    CALLER.with(|c| c.set(before));
    result
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nftw(
    dir: *const c_char,
    callback: NftwFn,
    fds: c_int,
    flags: c_int,
) -> c_int {
    let Some(real) = real::nftw() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe { walk(real, dir, callback, fds, flags) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nftw64(
    dir: *const c_char,
    callback: NftwFn,
    fds: c_int,
    flags: c_int,
) -> c_int {
    let Some(real) = real::nftw64() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe { walk(real, dir, callback, fds, flags) }
}

type FtwFn = unsafe extern "C" fn(*const c_char, *const c_void, c_int) -> c_int;

thread_local! {
    // As `CALLER`, for `ftw`'s callback.
    static FTW_CALLER: Cell<usize> = const { Cell::new(0) };
}

unsafe extern "C" fn each_ftw(path: *const c_char, stat: *const c_void, typeflag: c_int) -> c_int {
    if typeflag == FTW_D {
        // SAFETY: `ftw` passes the entry's path as a C string.
        observe(|_| unsafe { event(libc::AT_FDCWD, path, trace::LISTED, 0) });
    }
    // SAFETY: set by `ftw_walk` from the caller's callback before this runs.
    let caller = unsafe { std::mem::transmute::<usize, FtwFn>(FTW_CALLER.with(Cell::get)) };
    // SAFETY: the arguments `ftw` gave, passed on.
    unsafe { caller(path, stat, typeflag) }
}

unsafe fn ftw_walk(
    real: unsafe extern "C" fn(*const c_char, FtwFn, c_int) -> c_int,
    dir: *const c_char,
    callback: FtwFn,
    fds: c_int,
) -> c_int {
    if !trace::enabled() {
        // SAFETY: the caller's contract is libc's.
        return unsafe { real(dir, callback, fds) };
    }
    let before = FTW_CALLER.with(|c| c.replace(callback as usize));
    // SAFETY: as above, with a callback of the same signature.
    let result = unsafe { real(dir, each_ftw, fds) };
    FTW_CALLER.with(|c| c.set(before));
    result
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftw(dir: *const c_char, callback: FtwFn, fds: c_int) -> c_int {
    let Some(real) = real::ftw() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe { ftw_walk(real, dir, callback, fds) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftw64(dir: *const c_char, callback: FtwFn, fds: c_int) -> c_int {
    let Some(real) = real::ftw64() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe { ftw_walk(real, dir, callback, fds) }
}

/// Where glibc's `FTSENT` (and `FTSENT64`, the same on 64-bit targets)
/// keeps the path to reach the entry from the current directory, and what
/// the entry is (`<fts.h>`; the `libc` crate has no `FTSENT`).
#[cfg(target_pointer_width = "64")]
const FTS_ACCPATH_AT: usize = 40;
#[cfg(target_pointer_width = "64")]
const FTS_INFO_AT: usize = 98;
/// `fts_info` of a directory on the way in (`FTS_D`).
const FTS_D: u16 = 1;

/// Records the listing of a directory `fts_read` returned on the way in:
/// it is about to read its entries.
///
/// # Safety
/// `entry` is null or an `FTSENT` that `fts_read` returned.
#[cfg(target_pointer_width = "64")]
unsafe fn fts_entry(entry: *const c_void) {
    if entry.is_null() {
        return;
    }
    let entry = entry.cast::<u8>();
    // SAFETY: the fields at glibc's offsets of a live `FTSENT`.
    let (info, accpath) = unsafe {
        (
            entry.add(FTS_INFO_AT).cast::<u16>().read_unaligned(),
            entry
                .add(FTS_ACCPATH_AT)
                .cast::<*const c_char>()
                .read_unaligned(),
        )
    };
    if info == FTS_D {
        // SAFETY: `fts_accpath` is a C string, relative to the current
        // directory as `fts_read` returns.
        observe(|_| unsafe { event(libc::AT_FDCWD, accpath, trace::LISTED, 0) });
    }
}

/// Runs glibc's `fts_read` (or `fts64_read`), then describes its entry.
///
/// # Safety
/// As the libc function.
#[cfg(target_pointer_width = "64")]
unsafe fn fts_read_with(
    real: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    fts: *mut c_void,
) -> *mut c_void {
    let Some(real) = real else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's; the entry is fresh from it.
    unsafe {
        let entry = real(fts);
        fts_entry(entry);
        entry
    }
}

/// # Safety
/// As the libc function.
#[cfg(target_pointer_width = "64")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_read(fts: *mut c_void) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { fts_read_with(real::fts_read(), fts) }
}

/// # Safety
/// As the libc function.
#[cfg(target_pointer_width = "64")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_read(fts: *mut c_void) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { fts_read_with(real::fts64_read(), fts) }
}
