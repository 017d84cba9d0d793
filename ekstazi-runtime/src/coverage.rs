//! Function coverage from SanitizerCoverage (`-sanitizer-coverage-level=1
//! -sanitizer-coverage-inline-bool-flag -sanitizer-coverage-pc-table`).
//!
//! The compiler gives every instrumented function a one-byte flag, set on
//! entry, and a PC table entry (its entry address); each instrumented
//! object's constructor registers both arrays with the callbacks linked
//! into it (`stub/sancov.rs`), which hand the flags on to
//! [`ekstazi_sancov_flags`] here when the shim is loaded. At exit the shim writes
//! the addresses (relative to the object's load address) of the flags that
//! are set. The PC table, which says whose flag each is, is read from the
//! file by cargo-ekstazi, not here: its addresses need not even be
//! relocated at load time (`ekstazi_core::digests::coverage_table`). The trace
//! protocol, per process:
//!
//! - `I` `[pid u32][path]` when a process first registers coverage (and in a
//!   child after `fork`, which inherits the flags);
//! - `F` `[pid u32][path len u16][path][u32 flag addresses]` at exit, as
//!   many as needed;
//! - `Q` `[pid u32]` after the last `F`: the coverage of this process is
//!   complete. A process killed before it wrote `Q` lost its coverage, and
//!   the runner falls back to depending on its whole program.
//!
//! In libtest's test binary, the flags are cleared when the harness's main
//! thread starts the test's thread: what the harness ran before (its `main`,
//! building the test list) is not the test's behaviour.

use crate::path::EventBuf;
use crate::trace;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// Objects with coverage in one process: the executable, and any
/// instrumented shared library.
const MAX_MODULES: usize = 16;

struct Module {
    flags: AtomicUsize,
    flags_end: AtomicUsize,
}

static MODULES: [Module; MAX_MODULES] = [const {
    Module {
        flags: AtomicUsize::new(0),
        flags_end: AtomicUsize::new(0),
    }
}; MAX_MODULES];
static REGISTERED: AtomicBool = AtomicBool::new(false);
static RESET_DONE: AtomicBool = AtomicBool::new(false);

use ekstazi_wire::trace::{COMPLETE, FUNCTIONS, INSTRUMENTED};

/// Called with each instrumented object's flag array by the coverage
/// callbacks linked into that object (`stub/sancov.rs`, which finds this
/// function by name, if the shim is loaded at all): an instrumented binary
/// has no dependency on the shim, and without it runs as a plain build.
///
/// # Safety
/// `start..end` is the object's `__sancov_bools` section.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ekstazi_sancov_flags(start: *mut u8, end: *mut u8) {
    if start.is_null() || end <= start {
        return;
    }
    let slot = MODULES.iter().find(|m| {
        m.flags
            .compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Acquire)
            .map_or_else(|existing| existing == start as usize, |_| true)
    });
    match slot {
        Some(module) => module.flags_end.store(end as usize, Ordering::Release),
        // Too many objects: coverage cannot be complete; never writing `Q`
        // says so.
        None => INCOMPLETE.store(true, Ordering::Release),
    }
    if trace::enabled() {
        announce();
    }
}

/// Announces the coverage registered before the trace was open (an
/// instrumented shared library the loader started before the shim).
pub fn announce_registered() {
    if MODULES[0].flags.load(Ordering::Acquire) != 0 {
        announce();
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

/// Writes what ran before `main` (the program's constructors), as `main`
/// starts in a libtest binary: the harness clears every flag when it
/// starts the test's thread, and what the constructors executed runs in
/// every test's process. No `Q`: the process reports again at exit.
#[inline(never)]
pub fn report_constructors() {
    if !REGISTERED.load(Ordering::Acquire) || !trace::enabled() {
        return;
    }
    let Some(_inside) = crate::guard::enter() else {
        return;
    };
    for module in &MODULES {
        let flags = module.flags.load(Ordering::Acquire);
        let end = module.flags_end.load(Ordering::Acquire);
        if flags != 0 && end > flags {
            flush_module(flags, end);
        }
    }
}

/// Writes the covered functions and `Q`: at exit, and before an `exec`
/// replaces the process image (`hooks::exec`). A process whose `exec`
/// failed writes again at exit: its second `Q` closes nothing, and its
/// functions join the first's.
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
        if flags == 0 || end <= flags {
            continue;
        }
        flush_module(flags, end);
    }
    write_pid_event(COMPLETE, false);
}

/// Addresses per `F` event (its length is a `u16`, and the path comes first).
const CHUNK: usize = 8 * 1024;

fn flush_module(flags: usize, end: usize) {
    // SAFETY: dladdr has no precondition; `flags` is inside the object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(flags as *const libc::c_void, &mut info) } == 0 {
        return;
    }
    let base = info.dli_fbase as usize;
    let path = module_path(&info);
    let mut addresses = [0u32; CHUNK];
    let mut n = 0;
    for_each_set_flag(flags, end, |flag| {
        addresses[n] = flag.wrapping_sub(base) as u32;
        n += 1;
        if n == addresses.len() {
            write_functions(path.path(), &addresses[..n]);
            n = 0;
        }
    });
    if n > 0 {
        write_functions(path.path(), &addresses[..n]);
    }
}

/// Calls `found` with the address of every set flag in `start..end`, in
/// order. Most flags are clear: the aligned middle is read a word at a
/// time (an instrumented `just` has 38 765 flags; a test sets a few
/// thousand).
fn for_each_set_flag(start: usize, end: usize, mut found: impl FnMut(usize)) {
    let word = size_of::<u64>();
    let middle = start.next_multiple_of(word).min(end);
    let tail = middle + (end - middle) / word * word;
    // The instrumented code sets flags with plain byte stores, maybe on
    // another thread still running: read them as atomics, each byte (or
    // word) once, by one kind of access only.
    let byte = |at: usize| {
        // SAFETY: `at` is in the registered flag array, writable data that
        // lives as long as the process.
        unsafe { (*(at as *const AtomicU8)).load(Ordering::Relaxed) }
    };
    for at in start..middle {
        if byte(at) != 0 {
            found(at);
        }
    }
    for at in (middle..tail).step_by(word) {
        // SAFETY: as above, and `at` is aligned to a word.
        let value = unsafe { (*(at as *const AtomicU64)).load(Ordering::Relaxed) };
        if value == 0 {
            continue;
        }
        for (i, b) in value.to_le_bytes().into_iter().enumerate() {
            if b != 0 {
                found(at + i);
            }
        }
    }
    for at in tail..end {
        if byte(at) != 0 {
            found(at);
        }
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

#[cfg(test)]
mod tests {
    use super::for_each_set_flag;

    #[test]
    fn every_set_flag_is_found_once_in_order_at_any_alignment() {
        let mut buffer = [0u8; 80];
        let set = [0usize, 3, 7, 8, 15, 16, 17, 40, 63, 64, 70, 78, 79];
        for &i in &set {
            buffer[i] = 1;
        }
        let base = buffer.as_ptr() as usize;
        for start in 0..9 {
            for end in [start, start + 1, 33, 64, 71, 80] {
                if end < start {
                    continue;
                }
                let mut found = Vec::new();
                for_each_set_flag(base + start, base + end, |at| found.push(at - base));
                let expected: Vec<usize> = set
                    .iter()
                    .copied()
                    .filter(|i| (start..end).contains(i))
                    .collect();
                assert_eq!(found, expected, "flags {start}..{end}");
            }
        }
    }
}
