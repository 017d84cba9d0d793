//! Changing the name space: creating directories, links and symbolic links,
//! removing, renaming and truncating paths, changing directory.
//!
//! A path the test created or removed belongs to the test from then on: later
//! reads of it are the test's own output, not an input. What the call revealed
//! before that (that the path existed, or that its parent was missing) still
//! is an input. A new name for existing content — a file renamed or linked,
//! a symbolic link made to a file — is the test's, but the content is not:
//! the source is recorded as read, since what the test reads back under the
//! new name is the source's content.

use super::{event, existence, is_absence, observe, parent_missing, probe_kind, unavailable};
use crate::path::{EventBuf, Unresolved};
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
            if content_moves(kind) {
                event(olddir, old, trace::READ, 0);
            }
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

/// Whether a path of this kind carries content that a new name would give
/// the test without a read of the old one (a file, or a symbolic link to
/// one). A renamed directory's files are not followed (see docs/reference/limitations.md).
fn content_moves(kind: u8) -> bool {
    let kind = kind >> trace::KIND_SHIFT;
    kind == trace::KIND_FILE || kind == trace::KIND_SYMLINK
}

/// Records a new hard link: the source's content, and the new name as the
/// test's own.
///
/// # Safety
/// Both paths are null or NUL-terminated strings.
unsafe fn describe_link(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    result: c_int,
) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result == 0 {
            event(olddir, old, trace::READ, 0);
            event(newdir, new, trace::CREATED, 0);
        } else if err == libc::EEXIST {
            existence(newdir, new, err, true);
        } else if is_absence(err) {
            if probe_kind(olddir, old, true) == 0 {
                event(olddir, old, trace::MISSING, trace::FLAG_NOFOLLOW);
            } else {
                parent_missing(newdir, new);
            }
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    let Some(real) = real::link() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(old, new);
        describe_link(libc::AT_FDCWD, old, libc::AT_FDCWD, new, result);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn linkat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    let Some(real) = real::linkat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(olddir, old, newdir, new, flags);
        describe_link(olddir, old, newdir, new, result);
        result
    }
}

/// Records a new symbolic link: the link as the test's own, and what it
/// points to as read (or missing) — reading through the link reads that.
///
/// # Safety
/// Both strings are null or NUL-terminated.
unsafe fn describe_symlink(
    target: *const c_char,
    dirfd: c_int,
    link: *const c_char,
    result: c_int,
) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result != 0 {
            if err == libc::EEXIST {
                existence(dirfd, link, err, true);
            } else if is_absence(err) {
                parent_missing(dirfd, link);
            }
            return;
        }
        event(dirfd, link, trace::CREATED, 0);
        if target.is_null() {
            return;
        }
        // A relative target is relative to the link's directory.
        let target = std::ffi::CStr::from_ptr(target).to_bytes();
        let mut pointee = if target.starts_with(b"/") {
            EventBuf::empty()
        } else {
            match EventBuf::resolve(dirfd, link) {
                Ok(mut buf) => {
                    buf.truncate_to_parent();
                    if !buf.push_bytes(b"/") {
                        return trace::record_lost();
                    }
                    buf
                }
                Err(Unresolved::NotAPath) => return,
                Err(Unresolved::Lost) => return trace::record_lost(),
            }
        };
        if !pointee.push_bytes(target) {
            return trace::record_lost();
        }
        let mut c_path = [0u8; 2 * libc::PATH_MAX as usize + 2];
        let path = pointee.path();
        if path.len() >= c_path.len() {
            return trace::record_lost();
        }
        c_path[..path.len()].copy_from_slice(path);
        let tag = if probe_kind(libc::AT_FDCWD, c_path.as_ptr().cast(), false) == 0 {
            trace::MISSING
        } else {
            trace::READ
        };
        trace::record(tag, 0, &mut pointee);
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlink(target: *const c_char, link: *const c_char) -> c_int {
    let Some(real) = real::symlink() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(target, link);
        describe_symlink(target, libc::AT_FDCWD, link, result);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    link: *const c_char,
) -> c_int {
    let Some(real) = real::symlinkat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(target, dirfd, link);
        describe_symlink(target, dirfd, link, result);
        result
    }
}

/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_truncate(path: *const c_char, length: i64, result: c_int) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result == 0 {
            // Emptied: the content is the test's own from now on. Cut to a
            // length: what remains is the old content, still an input.
            if length == 0 {
                event(libc::AT_FDCWD, path, trace::CREATED, 0);
            } else {
                event(
                    libc::AT_FDCWD,
                    path,
                    trace::MODIFIED,
                    trace::KIND_FILE << trace::KIND_SHIFT,
                );
            }
        } else {
            existence(libc::AT_FDCWD, path, err, false);
        }
    });
}

/// `truncate` and `truncate64` are one function on 64-bit Linux (`off_t` is
/// `off64_t`), which glibc exports under both names.
///
/// # Safety
/// As the libc function.
unsafe fn truncate_with(
    real: Option<unsafe extern "C" fn(*const c_char, libc::off64_t) -> c_int>,
    path: *const c_char,
    length: libc::off64_t,
) -> c_int {
    let Some(real) = real else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(path, length);
        describe_truncate(path, length, result);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate(path: *const c_char, length: libc::off_t) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { truncate_with(real::truncate(), path, length) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate64(path: *const c_char, length: libc::off64_t) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { truncate_with(real::truncate64(), path, length) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let Some(real) = real::chdir() else {
        return unavailable(-1);
    };
    if !trace::enabled() {
        // SAFETY: the caller's contract is libc's.
        return unsafe { real(path) };
    }
    // SAFETY: the caller's contract is libc's. A relative path is resolved
    // against the directory the call leaves, before it leaves it.
    unsafe {
        let saved = super::errno();
        let resolved = EventBuf::resolve(libc::AT_FDCWD, path);
        super::set_errno(saved);
        let result = real(path);
        observe(|err| match resolved {
            Ok(mut buf) if result == 0 => trace::record(
                trace::EXISTS,
                trace::KIND_DIR << trace::KIND_SHIFT,
                &mut buf,
            ),
            Ok(_) => existence(libc::AT_FDCWD, path, err, false),
            Err(Unresolved::NotAPath) => {}
            Err(Unresolved::Lost) => trace::record_lost(),
        });
        result
    }
}
