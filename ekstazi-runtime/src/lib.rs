//! The shim that cargo-ekstazi loads into every test process (`LD_PRELOAD`).
//!
//! It interposes the libc functions through which a process observes the file
//! system, and appends one event per distinct observation to the trace file
//! named by `EKSTAZI_TRACE_FILE`. cargo-ekstazi turns the trace into the
//! test's dependencies (`ekstazi_core` parses it; the format is
//! `ekstazi_wire::trace`'s).
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
//!
//! The modules, from the bottom up (each imports only those before it):
//! `guard`, `real` and `environ` (libc reached without the shim),
//! `own_vars` (the shim's variables, out of the program's sight), `path`,
//! `trace` (the writer of `ekstazi_wire::trace`'s events), `coverage`
//! (SanitizerCoverage's callbacks), `hooks` (the interposed functions, with
//! `sud` for system calls made outside libc), and `fork_server`.

#![warn(missing_docs)]

mod coverage;
mod environ;
mod fork_server;
mod guard;
mod hooks;
mod own_vars;
mod path;
mod real;
mod trace;

/// Runs before `main` of every process the shim is loaded into; glibc
/// passes shared objects' constructors `main`'s arguments.
extern "C" fn init(argc: libc::c_int, argv: *mut *mut libc::c_char, _envp: *mut libc::c_void) {
    // SAFETY: constructors run single-threaded, before any hook can fire on
    // another thread. A fork server returns here only in a test's child;
    // `start_tracing` only reads the environment and opens the trace file.
    unsafe {
        fork_server::serve_if_asked(argc, argv);
        start_tracing();
        hooks::sud::init();
        // Last: the variables above are read before they go out of sight.
        if trace::enabled() {
            own_vars::hide(hooks::shim_path());
        }
    }
}

/// Opens the trace and starts recording, in an order that matters: every
/// real function is looked up first, single-threaded (`dlsym` takes the
/// loader's lock and may allocate, which must not happen in a child forked
/// while another thread held either); the hooks learn what to pass on to
/// the programs a test runs before any can run one.
///
/// # Safety
/// Called once, from the constructor, single-threaded.
unsafe fn start_tracing() {
    // SAFETY: forwarded.
    let Some(opened) = (unsafe { trace::open() }) else {
        return;
    };
    real::resolve_all();
    // SAFETY: from the constructor.
    unsafe { hooks::prepare_children() };
    // SAFETY: forwarded.
    unsafe { trace::begin(opened) };
    coverage::announce_registered();
    hooks::record_libraries();
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
