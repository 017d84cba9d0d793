//! Reading symbolic links and resolving paths: `readlink`, `readlinkat`,
//! `realpath` (and its `_FORTIFY_SOURCE` and GNU forms).
//!
//! The answer the call gave goes into the event, so that the dependency is
//! checksummed as the test saw it, not as the link is after the test.

use super::{existence, observe, unavailable};
use crate::path::{EventBuf, Unresolved};
use crate::{real, trace};
use libc::{c_char, c_int, size_t, ssize_t};

/// Records `path` (resolved against `dirfd`), a NUL and `answer`.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn answered(dirfd: c_int, path: *const c_char, tag: u8, flags: u8, answer: &[u8]) {
    // SAFETY: forwarded from the caller.
    match unsafe { EventBuf::resolve(dirfd, path) } {
        Ok(mut buf) => {
            if buf.push_bytes(b"\0") && buf.push_bytes(answer) {
                trace::record(tag, flags, &mut buf);
            } else {
                trace::record_lost();
            }
        }
        Err(Unresolved::NotAPath) => {}
        Err(Unresolved::Lost) => trace::record_lost(),
    }
}

/// # Safety
/// `path` is null or a C string; `buf` holds `n` bytes when `n > 0`.
unsafe fn describe_readlink(
    dirfd: c_int,
    path: *const c_char,
    buf: *const c_char,
    size: size_t,
    n: ssize_t,
) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if n >= 0 {
            let target = std::slice::from_raw_parts(buf.cast::<u8>(), n as usize);
            // A target that filled the buffer may have been cut short.
            let flags = if n as size_t == size {
                trace::FLAG_OPTION
            } else {
                0
            };
            answered(dirfd, path, trace::LINK, flags, target);
        } else if err == libc::EINVAL {
            // Not a symbolic link: what it is instead is what the test saw.
            existence(dirfd, path, libc::EEXIST, true);
        } else {
            existence(dirfd, path, err, true);
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    let Some(real) = real::readlink() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let n = real(path, buf, size);
        describe_readlink(libc::AT_FDCWD, path, buf, size, n);
        n
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    let Some(real) = real::readlinkat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let n = real(dirfd, path, buf, size);
        describe_readlink(dirfd, path, buf, size, n);
        n
    }
}

/// # Safety
/// `path` is null or a C string; `resolved` is null or a C string.
unsafe fn describe_resolve(path: *const c_char, resolved: *const c_char) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if resolved.is_null() {
            existence(libc::AT_FDCWD, path, err, false);
        } else {
            let answer = std::ffi::CStr::from_ptr(resolved).to_bytes();
            answered(libc::AT_FDCWD, path, trace::RESOLVED, 0, answer);
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let Some(real) = real::realpath() else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let out = real(path, resolved);
        describe_resolve(path, out);
        out
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    size: size_t,
) -> *mut c_char {
    let Some(real) = real::__realpath_chk() else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let out = real(path, resolved, size);
        describe_resolve(path, out);
        out
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    let Some(real) = real::canonicalize_file_name() else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let out = real(path);
        describe_resolve(path, out);
        out
    }
}
