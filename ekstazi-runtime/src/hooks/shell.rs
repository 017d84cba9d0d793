//! Commands run through the shell: `system` and `popen`.
//!
//! glibc starts their shell with its internal `posix_spawn`, which no hook
//! sees, and with `environ` as it is: since the shim keeps its own
//! variables out of `environ` (`own_vars`), the shell would start without
//! the shim, untraced. So while the real function starts the shell,
//! `environ` is a copy with the shim's variables put back (as the exec
//! hooks build one); then it is restored. Threads that call either at the
//! same time share the one copy; another thread reading the environment
//! in that window sees the shim's variables too.

use super::exec::{ChildEnv, child_env};
use crate::{guard, real, trace};
use libc::{FILE, c_char, c_int};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// Held for the few instructions that swap `environ` in or out.
static LOCK: AtomicBool = AtomicBool::new(false);
/// How many calls are inside the real function with the copy in place.
static USERS: AtomicUsize = AtomicUsize::new(0);
/// `environ` as it was before the copy went in.
static SAVED: AtomicPtr<*const c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The copy, while in place (unmapped by the last user).
struct InPlace(std::cell::UnsafeCell<Option<ChildEnv>>);

// SAFETY: touched only under `LOCK`.
unsafe impl Sync for InPlace {}

static COPY: InPlace = InPlace(std::cell::UnsafeCell::new(None));

fn lock() {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

/// Runs `call` with the shim's variables in `environ`.
fn with_shim_environ<R>(call: impl FnOnce() -> R) -> R {
    if !trace::enabled() || guard::inside() {
        return call();
    }
    lock();
    if USERS.load(Ordering::Relaxed) == 0 {
        // SAFETY: under the lock, the only writer of `environ` among the
        // shim's hooks; the copy lives until the last user is out.
        unsafe {
            let current = environ;
            let copy = child_env(current);
            SAVED.store(current.cast_mut(), Ordering::Relaxed);
            environ = copy.envp;
            *COPY.0.get() = Some(copy);
        }
    }
    USERS.fetch_add(1, Ordering::Relaxed);
    unlock();
    let result = call();
    let saved = crate::real::errno();
    lock();
    if USERS.fetch_sub(1, Ordering::Relaxed) == 1 {
        // SAFETY: under the lock; `environ` goes back only if the program
        // did not replace it meanwhile (`setenv` from another thread).
        unsafe {
            let copy = (*COPY.0.get()).take();
            if let Some(copy) = &copy
                && environ == copy.envp
            {
                environ = SAVED.load(Ordering::Relaxed);
            }
            drop(copy);
        }
    }
    unlock();
    crate::real::set_errno(saved);
    result
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let Some(real) = real::system() else {
        return -1;
    };
    // SAFETY: the caller's contract is libc's.
    with_shim_environ(|| unsafe { real(command) })
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    let Some(real) = real::popen() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's contract is libc's.
    with_shim_environ(|| unsafe { real(command, mode) })
}
