//! Looking paths up without opening them: the `stat` and `access` families.
//!
//! Rust's std reaches `statx` through `dlsym(RTLD_DEFAULT, "statx")`, which
//! finds this definition first because the shim is preloaded.

use super::{event, is_absence, kind_flags, observe, probe_kind, unavailable};
use crate::{real, trace};
use libc::{c_char, c_int, c_uint, c_void};

/// Records what a lookup of `path` revealed: that it exists (and as what),
/// or that it does not. `kind` is the kind bits the call itself returned,
/// 0 when it returns none (then the shim looks).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_lookup(
    dirfd: c_int,
    path: *const c_char,
    result: c_int,
    nofollow: bool,
    kind: u8,
) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        let nofollow_flag = if nofollow { trace::FLAG_NOFOLLOW } else { 0 };
        if result == 0 || err == libc::EACCES {
            let kind = if kind != 0 {
                kind
            } else {
                probe_kind(dirfd, path, nofollow)
            };
            event(dirfd, path, trace::EXISTS, nofollow_flag | kind);
        } else if is_absence(err) {
            event(dirfd, path, trace::MISSING, nofollow_flag);
        }
    });
}

/// The kind bits in a `struct stat` the call filled (unknown on failure).
///
/// # Safety
/// `buf` is what the caller passed to a stat call that returned `result`.
unsafe fn stat_kind(result: c_int, buf: *mut c_void) -> u8 {
    if result != 0 || buf.is_null() {
        return 0;
    }
    // SAFETY: a successful stat filled a `struct stat`, which on the 64-bit
    // Linux targets the shim supports has the layout of `stat64`.
    kind_flags(unsafe { (*buf.cast::<libc::stat64>()).st_mode })
}

macro_rules! stat_path {
    ($($name:ident => $nofollow:expr),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut c_void) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(path, buf);
                describe_lookup(libc::AT_FDCWD, path, result, $nofollow, stat_kind(result, buf));
                result
            }
        }
    )*};
}
stat_path!(stat => false, stat64 => false, lstat => true, lstat64 => true);

macro_rules! stat_at {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(dirfd, path, buf, flags);
                describe_lookup(dirfd, path, result, flags & libc::AT_SYMLINK_NOFOLLOW != 0, stat_kind(result, buf));
                result
            }
        }
    )*};
}
stat_at!(fstatat, fstatat64);

// The versioned entry points of programs built against glibc before 2.33.
macro_rules! xstat_path {
    ($($name:ident => $nofollow:expr),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(version: c_int, path: *const c_char, buf: *mut c_void) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(version, path, buf);
                describe_lookup(libc::AT_FDCWD, path, result, $nofollow, stat_kind(result, buf));
                result
            }
        }
    )*};
}
xstat_path!(__xstat => false, __xstat64 => false, __lxstat => true, __lxstat64 => true);

macro_rules! xstat_at {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(version: c_int, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(version, dirfd, path, buf, flags);
                describe_lookup(dirfd, path, result, flags & libc::AT_SYMLINK_NOFOLLOW != 0, stat_kind(result, buf));
                result
            }
        }
    )*};
}
xstat_at!(__fxstatat, __fxstatat64);

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut c_void,
) -> c_int {
    let Some(real) = real::statx() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(dirfd, path, flags, mask, buf);
        let kind = if result == 0 && !buf.is_null() {
            // SAFETY: a successful statx filled a `struct statx`.
            let stx = &*buf.cast::<libc::statx>();
            if stx.stx_mask & libc::STATX_TYPE != 0 {
                kind_flags(libc::mode_t::from(stx.stx_mode))
            } else {
                0
            }
        } else {
            0
        };
        describe_lookup(
            dirfd,
            path,
            result,
            flags & libc::AT_SYMLINK_NOFOLLOW != 0,
            kind,
        );
        result
    }
}

macro_rules! access_path {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: c_int) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(path, mode);
                describe_lookup(libc::AT_FDCWD, path, result, false, 0);
                result
            }
        }
    )*};
}
access_path!(access, euidaccess, eaccess);

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let Some(real) = real::faccessat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(dirfd, path, mode, flags);
        describe_lookup(
            dirfd,
            path,
            result,
            flags & libc::AT_SYMLINK_NOFOLLOW != 0,
            0,
        );
        result
    }
}
