//! Function coverage from SanitizerCoverage (`-sanitizer-coverage-level=1
//! -sanitizer-coverage-inline-bool-flag -sanitizer-coverage-pc-table`).
//!
//! The compiler gives every instrumented function a one-byte flag, set on
//! entry, and a PC table entry (its entry address); each instrumented
//! object's constructor registers both arrays here. At exit the shim writes
//! the entry addresses (relative to the object's load address) of the
//! functions whose flag is set. The trace protocol, per process:
//!
//! - `I` `[pid u32][path]` when a process first registers coverage (and in a
//!   child after `fork`, which inherits the flags);
//! - `F` `[pid u32][path len u16][path][u32 addresses]` at exit, as many as
//!   needed;
//! - `Q` `[pid u32]` after the last `F`: the coverage of this process is
//!   complete. A process killed before it wrote `Q` lost its coverage, and
//!   the runner falls back to depending on its whole program.
//!
//! In libtest's test binary, the flags are cleared when the harness's main
//! thread starts the test's thread: what the harness ran before (its `main`,
//! building the test list) is not the test's behaviour.

use crate::path::EventBuf;
use crate::trace;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Objects with coverage in one process: the executable, and any
/// instrumented shared library.
const MAX_MODULES: usize = 16;

struct Module {
    flags: AtomicUsize,
    flags_end: AtomicUsize,
    pcs: AtomicUsize,
}

static MODULES: [Module; MAX_MODULES] = [const {
    Module {
        flags: AtomicUsize::new(0),
        flags_end: AtomicUsize::new(0),
        pcs: AtomicUsize::new(0),
    }
}; MAX_MODULES];
static REGISTERED: AtomicBool = AtomicBool::new(false);
static RESET_DONE: AtomicBool = AtomicBool::new(false);

pub const INSTRUMENTED: u8 = b'I';
pub const FUNCTIONS: u8 = b'F';
pub const COMPLETE: u8 = b'Q';

/// Called by every instrumented object's constructor with its flag array.
///
/// # Safety
/// `start..end` is the object's `__sancov_bools` section.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_bool_flag_init(start: *mut u8, end: *mut u8) {
    if start.is_null() || end <= start {
        return;
    }
    let slot = MODULES.iter().find(|m| {
        m.flags
            .compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Acquire)
            .map_or_else(|existing| existing == start as usize, |_| true)
    });
    if let Some(module) = slot {
        module.flags_end.store(end as usize, Ordering::Release);
    }
    announce();
}

/// Called by every instrumented object's constructor with its PC table:
/// `(entry address, flags)` pairs parallel to the flag array.
///
/// # Safety
/// `start..end` is the object's `__sancov_pcs` section.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_pcs_init(start: *const usize, end: *const usize) {
    if start.is_null() || end <= start {
        return;
    }
    let entries = (end as usize - start as usize) / (2 * size_of::<usize>());
    // Pair the table with the flag array of the same length that has none yet.
    let module = MODULES.iter().find(|m| {
        let flags = m.flags.load(Ordering::Acquire);
        flags != 0
            && m.flags_end.load(Ordering::Acquire) - flags == entries
            && m.pcs
                .compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Acquire)
                .map_or_else(|existing| existing == start as usize, |_| true)
    });
    if module.is_none() {
        // A table with no flags (or too many objects): coverage cannot be
        // complete; never writing `Q` says so.
        REGISTERED.store(false, Ordering::Release);
        INCOMPLETE.store(true, Ordering::Release);
    }
}

static INCOMPLETE: AtomicBool = AtomicBool::new(false);

/// Writes `I` once per process and arranges for forked children to write
/// theirs.
fn announce() {
    if REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    write_pid_event(INSTRUMENTED, true);
    static ATFORK: AtomicBool = AtomicBool::new(false);
    if !ATFORK.swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain function; it only writes an event.
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    }
}

extern "C" fn forked_child() {
    if REGISTERED.load(Ordering::Acquire) {
        write_pid_event(INSTRUMENTED, true);
    }
}

/// Clears every flag: called when libtest's main thread starts the test.
pub fn reset() {
    if RESET_DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    for module in &MODULES {
        let (start, end) = (
            module.flags.load(Ordering::Acquire),
            module.flags_end.load(Ordering::Acquire),
        );
        if start != 0 && end > start {
            // SAFETY: the range is a registered flag array, writable data.
            unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
        }
    }
}

/// Writes the covered functions and `Q`; called once, at exit (and before
/// an `exec` replaces the process image).
///
/// Every process the shim is loaded into calls it, most with nothing to
/// write: the checks come first, and the work, with its stack of a chunk of
/// addresses, is a function of its own. (Inlined, its stack probes touched
/// ~19 fresh stack pages at every exit, traced or not.)
pub fn flush() {
    if !REGISTERED.load(Ordering::Acquire)
        || INCOMPLETE.load(Ordering::Acquire)
        || !trace::enabled()
    {
        return;
    }
    flush_registered();
}

#[inline(never)]
fn flush_registered() {
    let Some(_inside) = crate::guard::enter() else {
        return;
    };
    for module in &MODULES {
        let flags = module.flags.load(Ordering::Acquire);
        let end = module.flags_end.load(Ordering::Acquire);
        let pcs = module.pcs.load(Ordering::Acquire);
        if flags == 0 || pcs == 0 {
            continue;
        }
        flush_module(flags, end, pcs);
    }
    write_pid_event(COMPLETE, false);
}

/// Addresses per `F` event (its length is a `u16`, and the path comes first).
const CHUNK: usize = 8 * 1024;

fn flush_module(flags: usize, end: usize, pcs: usize) {
    // SAFETY: `pcs` is a registered table; dladdr has no other precondition.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let first_pc = unsafe { *(pcs as *const usize) };
    if unsafe { libc::dladdr(first_pc as *const libc::c_void, &mut info) } == 0 {
        return;
    }
    let base = info.dli_fbase as usize;
    let path = module_path(&info);
    let mut addresses = [0u32; CHUNK];
    let mut n = 0;
    for i in 0..end - flags {
        // SAFETY: `i` indexes the flag array and the parallel PC table.
        let (hit, pc) = unsafe {
            (
                *((flags + i) as *const u8) != 0,
                *((pcs + 2 * i * size_of::<usize>()) as *const usize),
            )
        };
        if !hit {
            continue;
        }
        addresses[n] = pc.wrapping_sub(base) as u32;
        n += 1;
        if n == addresses.len() {
            write_functions(path.path(), &addresses[..n]);
            n = 0;
        }
    }
    if n > 0 {
        write_functions(path.path(), &addresses[..n]);
    }
}

/// The object's file: for the executable itself `/proc/self/exe` (the
/// loader knows it by the name it was run as — `deps/../rg`, say — which
/// names the same file differently from the `I` event); otherwise the name
/// the loader knows.
fn module_path(info: &libc::Dl_info) -> EventBuf {
    if info.dli_fbase == main_program_base()
        && let Some(exe) = EventBuf::read_link(c"/proc/self/exe")
    {
        return exe;
    }
    // SAFETY: dladdr filled `dli_fname` with a C string or null.
    let name =
        (!info.dli_fname.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(info.dli_fname) });
    if let Some(name) = name
        && name.to_bytes().first() == Some(&b'/')
        && let Ok(buf) = unsafe { EventBuf::resolve(libc::AT_FDCWD, name.as_ptr()) }
    {
        return buf;
    }
    EventBuf::read_link(c"/proc/self/exe").unwrap_or_else(EventBuf::empty)
}

/// Where the main program is loaded: the object holding its program headers.
fn main_program_base() -> *mut libc::c_void {
    // SAFETY: getauxval and dladdr have no preconditions.
    unsafe {
        let phdr = libc::getauxval(libc::AT_PHDR) as *const libc::c_void;
        let mut info: libc::Dl_info = std::mem::zeroed();
        if phdr.is_null() || libc::dladdr(phdr, &mut info) == 0 {
            return std::ptr::null_mut();
        }
        info.dli_fbase
    }
}

fn write_functions(path: &[u8], addresses: &[u32]) {
    let path = &path[..path.len().min(libc::PATH_MAX as usize)];
    let mut head = [0u8; 6];
    head[..4].copy_from_slice(&pid().to_le_bytes());
    head[4..].copy_from_slice(&(path.len() as u16).to_le_bytes());
    // The addresses as the format has them, little-endian, in place: the
    // shim does not allocate, not even at exit, and copies nothing big.
    #[cfg(target_endian = "little")]
    // SAFETY: a `u32` slice's memory read as its bytes.
    let addresses = unsafe {
        std::slice::from_raw_parts(addresses.as_ptr().cast::<u8>(), size_of_val(addresses))
    };
    #[cfg(not(target_endian = "little"))]
    compile_error!("the trace format's addresses are little-endian");
    trace::record_raw(FUNCTIONS, [&head, path, addresses]);
}

fn write_pid_event(tag: u8, with_exe: bool) {
    let pid = pid().to_le_bytes();
    let exe = with_exe
        .then(|| EventBuf::read_link(c"/proc/self/exe"))
        .flatten();
    let exe = exe.as_ref().map_or(&[][..], |exe| {
        let exe = exe.path();
        &exe[..exe.len().min(libc::PATH_MAX as usize)]
    });
    trace::record_raw(tag, [&pid, exe]);
}

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

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
        reset();
    }
    let Some(real) = crate::real::pthread_create() else {
        return libc::EAGAIN;
    };
    // SAFETY: the caller's contract is pthread_create's.
    unsafe { real(thread, attr, start, arg) }
}
