//! The start of `main`: `__libc_start_main`, which `_start` calls.
//!
//! What a test binary does on its main thread before `main` — the
//! constructors of `.init_array` (`#[ctor]`, `inventory`'s registrations,
//! a C library's initialiser) — runs in every test process, so what it
//! reads is a dependency of every test of the binary. What the main thread
//! does from `main` on is libtest's harness (arguments, terminal settings,
//! `RUST_TEST_THREADS`), not the test. glibc runs the program's
//! constructors inside `__libc_start_main`, right before it calls `main`:
//! the shim hands it a `main` of its own that marks the moment and calls
//! the program's.

use crate::{coverage, real, trace};
use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type Main = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

/// The program's own `main`.
static MAIN: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn main_started(
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> c_int {
    if trace::in_test_binary() {
        coverage::report_constructors();
    }
    trace::mark_main_started();
    // SAFETY: set from the program's `main` before glibc could call this.
    let main = unsafe { std::mem::transmute::<usize, Main>(MAIN.load(Ordering::Relaxed)) };
    // SAFETY: glibc's call, passed on as it came.
    unsafe { main(argc, argv, envp) }
}

/// # Safety
/// As glibc's: called once, by `_start`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_start_main(
    main: Main,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    let Some(real) = real::__libc_start_main() else {
        // No glibc start to hand over to: nothing can start the program.
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() }
    };
    MAIN.store(main as usize, Ordering::Relaxed);
    // SAFETY: glibc's call, with the shim's `main` in front of the program's.
    unsafe { real(main_started, argc, argv, init, fini, rtld_fini, stack_end) }
}
