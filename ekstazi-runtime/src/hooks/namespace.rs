//! Changing the name space: creating directories, removing and renaming paths.
//!
//! A path the test created or removed belongs to the test from then on: later
//! reads of it are the test's own output, not an input. What the call revealed
//! before that (that the path existed, or that its parent was missing) still
//! is an input.

use super::{event, is_absence, observe, parent_missing, probe_kind, unavailable};
use crate::{real, trace};
use libc::{c_char, c_int, c_uint, mode_t};

/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_mkdir(dirfd: c_int, path: *const c_char, result: c_int) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result == 0 {
            event(dirfd, path, trace::CREATED, 0);
        } else if err == libc::EEXIST {
            event(dirfd, path, trace::EXISTS, probe_kind(dirfd, path, false));
        } else if is_absence(err) {
            parent_missing(dirfd, path);
        }
    });
}

/// What a path about to be removed or renamed away is: its existence is
/// what the test observed, and afterwards it cannot be looked up. Only
/// probed when tracing.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn kind_before(dirfd: c_int, path: *const c_char) -> u8 {
    if !trace::enabled() {
        return 0;
    }
    let _inside = crate::guard::enter();
    let saved = super::errno();
    // SAFETY: forwarded from the caller.
    let kind = unsafe { probe_kind(dirfd, path, true) };
    super::set_errno(saved);
    kind
}

/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_remove(dirfd: c_int, path: *const c_char, result: c_int, kind: u8) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result == 0 {
            event(dirfd, path, trace::EXISTS, trace::FLAG_NOFOLLOW | kind);
            event(dirfd, path, trace::DELETED, 0);
        } else if is_absence(err) {
            event(dirfd, path, trace::MISSING, 0);
        }
    });
}

/// # Safety
/// Both paths are null or NUL-terminated strings.
unsafe fn describe_rename(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    result: c_int,
    kind: u8,
) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result == 0 {
            event(olddir, old, trace::EXISTS, trace::FLAG_NOFOLLOW | kind);
            event(olddir, old, trace::DELETED, 0);
            event(newdir, new, trace::CREATED, 0);
        } else if is_absence(err) {
            event(olddir, old, trace::MISSING, 0);
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    let Some(real) = real::mkdir() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(path, mode);
        describe_mkdir(libc::AT_FDCWD, path, result);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    let Some(real) = real::mkdirat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(dirfd, path, mode);
        describe_mkdir(dirfd, path, result);
        result
    }
}

macro_rules! remove_path {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let kind = kind_before(libc::AT_FDCWD, path);
                let result = real(path);
                describe_remove(libc::AT_FDCWD, path, result, kind);
                result
            }
        }
    )*};
}
remove_path!(unlink, remove);

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    let Some(real) = real::rmdir() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(path);
        describe_remove(
            libc::AT_FDCWD,
            path,
            result,
            trace::KIND_DIR << trace::KIND_SHIFT,
        );
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let Some(real) = real::unlinkat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let kind = if flags & libc::AT_REMOVEDIR != 0 {
            trace::KIND_DIR << trace::KIND_SHIFT
        } else {
            kind_before(dirfd, path)
        };
        let result = real(dirfd, path, flags);
        describe_remove(dirfd, path, result, kind);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    let Some(real) = real::rename() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let kind = kind_before(libc::AT_FDCWD, old);
        let result = real(old, new);
        describe_rename(libc::AT_FDCWD, old, libc::AT_FDCWD, new, result, kind);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> c_int {
    let Some(real) = real::renameat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let kind = kind_before(olddir, old);
        let result = real(olddir, old, newdir, new);
        describe_rename(olddir, old, newdir, new, result, kind);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    let Some(real) = real::renameat2() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let kind = kind_before(olddir, old);
        let result = real(olddir, old, newdir, new, flags);
        describe_rename(olddir, old, newdir, new, result, kind);
        result
    }
}
