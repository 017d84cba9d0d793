//! Starting a thread: `pthread_create`.
//!
//! Where libtest's harness starts a test's thread is where the test
//! begins, so the coverage the harness gathered before is cleared; and
//! every new thread arms syscall user dispatch before it runs.

use crate::trace;

/// Starting the test's thread is where the test begins: clear what the
/// harness covered before.
///
/// # Safety
/// As `pthread_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> libc::c_int {
    if trace::thread_flags() & trace::FLAG_HARNESS != 0 {
        crate::coverage::reset();
    }
    let Some(real) = crate::real::pthread_create() else {
        return libc::EAGAIN;
    };
    // The new thread arms syscall user dispatch before it runs `start`.
    let (start, arg) = super::sud::follow_thread(start, arg);
    // SAFETY: the caller's contract is pthread_create's.
    let result = unsafe { real(thread, attr, start, arg) };
    if result != 0 {
        super::sud::forget_thread(arg);
    }
    result
}
