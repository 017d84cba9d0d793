//! The shim that cargo-ekstazi loads into every test process (`LD_PRELOAD`).
//!
//! It interposes the libc functions through which a process observes the file
//! system, and appends one event per distinct observation to the trace file
//! named by `EKSTAZI_TRACE_FILE`. cargo-ekstazi turns the trace into the
//! test's dependencies (`ekstazi_core::trace` parses it; the format is
//! described there and in [`trace`]).
//!
//! Rules every hook follows, because it runs inside someone else's process:
//! - it calls the real function first (or right after a side-effect-free
//!   probe) and returns exactly its result, with `errno` preserved;
//! - it never allocates, never takes a lock, and never panics: a hook can run
//!   in a signal handler, in a child after `fork`, or while `malloc` holds its
//!   own lock;
//! - it guards against re-entry, so libc calls made by the shim itself are not
//!   traced.
//!
//! Without `EKSTAZI_TRACE_FILE` the shim is inert: every hook forwards to libc.

mod coverage;
mod fork_server;
mod guard;
mod hooks;
// Shared with ekstazi-core, so that the shim's listing witnesses and the
// runner's cannot disagree (the shim depends on nothing but libc).
#[path = "../../ekstazi-core/src/listing_hash.rs"]
mod listing_hash;
mod path;
mod real;
mod sud;
mod trace;

/// Runs before `main` of every process the shim is loaded into; glibc
/// passes shared objects' constructors `main`'s arguments.
extern "C" fn init(argc: libc::c_int, argv: *mut *mut libc::c_char, _envp: *mut libc::c_void) {
    // SAFETY: constructors run single-threaded, before any hook can fire on
    // another thread. A fork server returns here only in a test's child;
    // `trace::init` only reads the environment and opens the trace file.
    unsafe {
        fork_server::serve_if_asked(argc, argv);
        trace::init();
        sud::init()
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn(libc::c_int, *mut *mut libc::c_char, *mut libc::c_void) = init;

/// Runs at exit of every process the shim is loaded into.
extern "C" fn fini() {
    coverage::flush();
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;
