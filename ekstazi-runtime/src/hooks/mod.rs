//! The interposed libc functions, one module per family.
//!
//! Each hook calls the real function and then describes what the call
//! revealed as trace events; [`observe`] wraps that description so that it
//! runs only when tracing, never re-enters, and leaves `errno` as libc set it.

mod files;
mod namespace;
mod stat;

use crate::path::{EventBuf, Unresolved};
use crate::{guard, trace};
use libc::{c_char, c_int};

pub fn errno() -> c_int {
    // SAFETY: the thread's errno slot always exists.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value }
}

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

/// Whether a failed lookup proved that the path does not exist.
fn is_absence(err: c_int) -> bool {
    err == libc::ENOENT || err == libc::ENOTDIR
}

/// Returns `-1` with `errno` set, for a real function libc does not have.
fn unavailable<T>(failure: T) -> T {
    set_errno(libc::ENOSYS);
    failure
}
