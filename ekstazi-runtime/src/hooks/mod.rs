//! The interposed libc functions, one module per family.
//!
//! Each hook calls the real function and then describes what the call
//! revealed as trace events; [`observe`] wraps that description so that it
//! runs only when tracing, never re-enters, and leaves `errno` as libc set it.
//! `sud` traps the system calls made outside libc and sends each through
//! `raw`, which records it as the libc function's hook would.
//!
//! Invariant: the hooks sit above the trace, the coverage and the real
//! functions; nothing below them imports `hooks`.

mod dirs;
mod env;
mod exec;
#[cfg(target_arch = "x86_64")]
mod execl;
mod files;
mod libc_files;
mod libs;
mod links;
mod namespace;
mod net;
pub mod raw;
mod shell;
mod start;
mod stat;
pub mod sud;
mod threads;
mod walks;

pub use exec::{prepare_children, shim_path};
pub use libs::record_libraries;

use crate::path::{EventBuf, Unresolved};
use crate::{guard, trace};
use libc::{c_char, c_int};

use crate::real::{errno, set_errno};

/// Runs `describe` with the call's outcome, if this process is traced and the
/// thread is not already inside the shim. `errno` is restored afterwards.
fn observe(describe: impl FnOnce(c_int)) {
    if !trace::enabled() {
        return;
    }
    let Some(_inside) = guard::enter() else {
        return;
    };
    let saved = errno();
    describe(saved);
    set_errno(saved);
}

/// Records one event about `path`, resolved against `dirfd`.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn event(dirfd: c_int, path: *const c_char, tag: u8, flags: u8) {
    // SAFETY: forwarded from the caller.
    match unsafe { EventBuf::resolve(dirfd, path) } {
        Ok(mut buf) => trace::record(tag, flags, &mut buf),
        Err(Unresolved::NotAPath) => {}
        Err(Unresolved::Lost) => trace::record_lost(),
    }
}

/// Records that creating `path` failed because a directory above it is
/// missing: creating that directory later would change the outcome.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn parent_missing(dirfd: c_int, path: *const c_char) {
    // SAFETY: forwarded from the caller.
    match unsafe { EventBuf::resolve(dirfd, path) } {
        Ok(mut buf) => {
            buf.truncate_to_parent();
            trace::record(trace::MISSING, 0, &mut buf);
        }
        Err(Unresolved::NotAPath) => {}
        Err(Unresolved::Lost) => trace::record_lost(),
    }
}

/// The trace's kind bits for a `st_mode`.
fn kind_flags(mode: libc::mode_t) -> u8 {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFREG => trace::KIND_FILE,
        libc::S_IFDIR => trace::KIND_DIR,
        libc::S_IFLNK => trace::KIND_SYMLINK,
        _ => trace::KIND_OTHER,
    };
    kind << trace::KIND_SHIFT
}

/// The kind bits of `path` now, looked up without disturbing anything
/// (0, "unknown", when it cannot be looked up).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn probe_kind(dirfd: c_int, path: *const c_char, nofollow: bool) -> u8 {
    let Some(fstatat) = crate::real::fstatat64() else {
        return 0;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    // SAFETY: `st` is large enough for the kernel's answer; `path` is a C string.
    if unsafe { fstatat(dirfd, path, st.as_mut_ptr().cast(), flags) } != 0 {
        return 0;
    }
    // SAFETY: fstatat succeeded, so `st` is initialised.
    kind_flags(unsafe { st.assume_init_ref() }.st_mode)
}

/// The kind bits of an open descriptor.
fn fd_kind(fd: c_int) -> u8 {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: as above, for a descriptor.
    if unsafe { libc::fstat64(fd, st.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: fstat64 succeeded.
    kind_flags(unsafe { st.assume_init_ref() }.st_mode)
}

/// Records what a failed lookup of `path` with `err` revealed: `ENOENT`, its
/// absence; `ENOTDIR`, the absence of a path below a file, or that the path
/// itself is not a directory (then, what it is); `EEXIST` (passed by callers
/// that know the path exists), what it is.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn existence(dirfd: c_int, path: *const c_char, err: c_int, nofollow: bool) {
    let nofollow_flag = if nofollow { trace::FLAG_NOFOLLOW } else { 0 };
    // SAFETY: forwarded from the caller.
    unsafe {
        match err {
            libc::ENOENT => event(dirfd, path, trace::MISSING, nofollow_flag),
            libc::ENOTDIR | libc::EEXIST => match probe_kind(dirfd, path, nofollow) {
                0 if err == libc::ENOTDIR => event(dirfd, path, trace::MISSING, nofollow_flag),
                0 => {}
                kind => event(dirfd, path, trace::EXISTS, nofollow_flag | kind),
            },
            _ => {}
        }
    }
}

/// Whether a failed lookup proved that the path does not exist.
fn is_absence(err: c_int) -> bool {
    err == libc::ENOENT || err == libc::ENOTDIR
}

/// Returns `-1` with `errno` set, for a real function libc does not have.
fn unavailable<T>(failure: T) -> T {
    set_errno(libc::ENOSYS);
    failure
}
