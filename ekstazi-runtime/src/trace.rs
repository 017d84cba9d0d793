//! The per-process trace writer.
//!
//! The format is `ekstazi_wire::trace`'s (parsed by `ekstazi_core`). An
//! event is written once per process: a lock-free table of event hashes
//! folds duplicates, which keeps the trace small for tests that poll a file.

use crate::path::EventBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

pub use ekstazi_wire::trace::*;

/// The trace file, or -1 when this process is not traced.
static FD: AtomicI32 = AtomicI32::new(-1);
/// The pid of the test binary's process when this is it: its main thread is
/// the harness.
static HARNESS_PID: AtomicI32 = AtomicI32::new(0);

/// Whether the program's `main` has started: before it, the main thread
/// runs the program's constructors, which every test process runs.
static IN_MAIN: AtomicBool = AtomicBool::new(false);

/// Whether this process is the libtest binary the runner started (or a
/// copy of it), whose main thread is the harness.
pub fn in_test_binary() -> bool {
    HARNESS_PID.load(Ordering::Relaxed) != 0
}

/// Called as the program's `main` starts (see `hooks::start`).
pub fn mark_main_started() {
    IN_MAIN.store(true, Ordering::Relaxed);
}

/// Moved out of the way of the descriptors a program expects to manage.
const HIGH_FD: libc::c_int = 900;

/// The trace file's path, kept from the constructor on: a process that
/// closed the trace's descriptor (code that closes every descriptor before
/// an `exec`) gets it opened again, and one that cannot write names the
/// loss beside the trace ([`LOST_SUFFIX`]).
struct TracePath {
    bytes: std::cell::UnsafeCell<[u8; TRACE_PATH_MAX]>,
    len: std::sync::atomic::AtomicUsize,
}

// SAFETY: written once, in the constructor, before `FD` is published (and
// so before any event is written); read only after that.
unsafe impl Sync for TracePath {}

const TRACE_PATH_MAX: usize = 4096;

static TRACE_PATH: TracePath = TracePath {
    bytes: std::cell::UnsafeCell::new([0; TRACE_PATH_MAX]),
    len: std::sync::atomic::AtomicUsize::new(0),
};

impl TracePath {
    /// # Safety
    /// Called once, single-threaded, before any event is written.
    unsafe fn set(&self, path: &[u8]) {
        if path.len() + LOST_SUFFIX.len() < TRACE_PATH_MAX {
            // SAFETY: no reader yet (see the `Sync` impl).
            unsafe { (&mut *self.bytes.get())[..path.len()].copy_from_slice(path) };
            self.len.store(path.len(), Ordering::Release);
        }
    }

    /// The path followed by `suffix` and a NUL, in `buf`; `None` when no
    /// path was kept.
    fn with_suffix<'b>(
        &self,
        suffix: &[u8],
        buf: &'b mut [u8; TRACE_PATH_MAX],
    ) -> Option<&'b [u8]> {
        let len = self.len.load(Ordering::Acquire);
        if len == 0 {
            return None;
        }
        // SAFETY: written before `len` was published, never again.
        let path = unsafe { &(&*self.bytes.get())[..len] };
        buf[..len].copy_from_slice(path);
        buf[len..len + suffix.len()].copy_from_slice(suffix);
        buf[len + suffix.len()] = 0;
        Some(&buf[..=len + suffix.len()])
    }
}

/// Our descriptor `fd` moved to [`HIGH_FD`] or above (where it stays if it
/// cannot be moved).
fn moved_high(fd: libc::c_int) -> libc::c_int {
    // SAFETY: plain descriptor operations on our own descriptor.
    unsafe {
        let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD);
        if high >= 0 {
            libc::close(fd);
            high
        } else {
            fd
        }
    }
}

/// Opens the trace again after its descriptor was found closed, at the
/// same high number; -1 if it cannot be.
fn reopen(old: libc::c_int) -> libc::c_int {
    let mut buf = [0u8; TRACE_PATH_MAX];
    let Some(path) = TRACE_PATH.with_suffix(b"", &mut buf) else {
        return -1;
    };
    let Some(open) = crate::real::open64() else {
        return -1;
    };
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { open(path.as_ptr().cast(), flags) };
    if fd < 0 {
        return -1;
    }
    let fd = moved_high(fd);
    match FD.compare_exchange(old, fd, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fd,
        // Another thread opened it again first: use theirs.
        Err(theirs) => {
            // SAFETY: closing the descriptor this call opened.
            unsafe { libc::close(fd) };
            theirs
        }
    }
}

/// Says, beside the trace, that an event of this process could not be
/// written: the runner then does not trust the trace. An empty file is
/// made, which needs no room for data (a full disk, a file size limit).
fn mark_lost() {
    let mut buf = [0u8; TRACE_PATH_MAX];
    let Some(path) = TRACE_PATH.with_suffix(LOST_SUFFIX, &mut buf) else {
        return;
    };
    let Some(open) = crate::real::open64() else {
        return;
    };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { open(path.as_ptr().cast(), flags, 0o600 as libc::c_uint) };
    if fd >= 0 {
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
    }
}

/// Writes one whole event with `write_once` (given the descriptor),
/// opening the trace again once if its descriptor was closed; anything
/// short of the whole event is a loss, said beside the trace.
fn write_event(len: usize, mut write_once: impl FnMut(libc::c_int) -> isize) {
    let mut fd = FD.load(Ordering::Relaxed);
    let mut reopened = false;
    loop {
        let n = write_once(fd);
        if n >= 0 && n as usize == len {
            return;
        }
        let err = crate::real::errno();
        if n < 0 && err == libc::EINTR {
            continue;
        }
        if n < 0 && err == libc::EBADF && !reopened {
            reopened = true;
            fd = reopen(fd);
            if fd >= 0 {
                continue;
            }
        }
        return mark_lost();
    }
}

/// The trace file, opened but not yet written to.
pub struct Opened {
    fd: libc::c_int,
}

/// Opens the trace file named in the environment; `None` when this process
/// is not to be traced. Nothing is recorded until [`begin`].
///
/// # Safety
/// Called once, from the shim's constructor.
pub unsafe fn open() -> Option<Opened> {
    // SAFETY: reading the environment before main, while single-threaded
    // (and without recording: these variables are the shim's own).
    let path = unsafe { crate::environ::lookup(b"EKSTAZI_TRACE_FILE") };
    if path.is_null() {
        return None;
    }
    let open = crate::real::open64()?;
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC;
    // SAFETY: `path` is a C string from the environment.
    let fd = unsafe { open(path, flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return None;
    }
    // SAFETY: from the constructor, before any event; `path` is a C string.
    unsafe { TRACE_PATH.set(std::ffi::CStr::from_ptr(path).to_bytes()) };
    Some(Opened { fd: moved_high(fd) })
}

/// Starts tracing this process into `opened`: says whether it is the test
/// binary, and records its start and the program it runs.
///
/// # Safety
/// Called once, from the shim's constructor, single-threaded.
pub unsafe fn begin(opened: Opened) {
    FD.store(opened.fd, Ordering::Relaxed);

    // A libtest test binary — the one the runner started, or a copy of it
    // that a test runs — runs each test on a thread of its own: its main
    // thread is the harness, not the test. The runner names the binary in
    // `EKSTAZI_LIBTEST` (canonical, as `/proc/self/exe` reads).
    let exe = EventBuf::read_link(c"/proc/self/exe");
    // SAFETY: reading the environment, single-threaded.
    let libtest = unsafe { crate::environ::lookup(b"EKSTAZI_LIBTEST") };
    let is_test_binary = !libtest.is_null()
        && exe.as_ref().is_some_and(|exe| {
            // SAFETY: a value from `environ` is a C string.
            exe.path() == unsafe { std::ffi::CStr::from_ptr(libtest) }.to_bytes()
        });
    if is_test_binary {
        // SAFETY: getpid has no preconditions; registering a fork handler
        // from the constructor, single-threaded.
        unsafe {
            HARNESS_PID.store(libc::getpid(), Ordering::Relaxed);
            libc::pthread_atfork(None, None, Some(forked_child));
        }
    }
    record(START, 0, &mut EventBuf::empty());
    // The test binary's own checksum is the runner's; every other program a
    // test runs is a dependency.
    if !is_test_binary {
        match exe {
            Some(mut exe) => record(EXEC, 0, &mut exe),
            None => record_lost(),
        }
    }
}

/// Whether this process is traced at all.
pub fn enabled() -> bool {
    FD.load(Ordering::Relaxed) >= 0
}

thread_local! {
    // The calling thread's id, 0 until asked: `gettid` is a system call, and
    // the test binary asks on every event. `const` and without destructor,
    // so reading it never allocates.
    static TID: std::cell::Cell<libc::pid_t> = const { std::cell::Cell::new(0) };
}

/// A forked child is never the harness (its thread ids differ from the
/// parent's, but the cached one of the forking thread would not).
extern "C" fn forked_child() {
    HARNESS_PID.store(0, Ordering::Relaxed);
}

/// Flags every event of the calling thread carries: the harness flag on
/// the test binary's main thread once `main` has started (before it, the
/// constructors ran, in every test's process alike).
pub fn thread_flags() -> u8 {
    let harness = HARNESS_PID.load(Ordering::Relaxed);
    if harness == 0 || !IN_MAIN.load(Ordering::Relaxed) {
        return 0;
    }
    let tid = TID
        .try_with(|tid| {
            if tid.get() == 0 {
                // SAFETY: gettid has no preconditions.
                tid.set(unsafe { libc::gettid() });
            }
            tid.get()
        })
        // SAFETY: as above (a thread being torn down asks the kernel).
        .unwrap_or_else(|_| unsafe { libc::gettid() });
    if tid == harness { FLAG_HARNESS } else { 0 }
}

/// Appends one event, unless this process already wrote the same one.
pub fn record(tag: u8, flags: u8, buf: &mut EventBuf) {
    record_as(tag, flags | thread_flags(), buf);
}

/// [`record`] with exactly these flags, for events that belong to the
/// process rather than to the thread that noticed them (the libraries the
/// loader mapped before `main`).
pub fn record_as(tag: u8, flags: u8, buf: &mut EventBuf) {
    let fd = FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    if !seen::insert(seen::hash(tag, flags, buf.path())) {
        return;
    }
    let event = buf.event(tag, flags);
    // One `write`: with `O_APPEND` the event lands whole, or (a full disk)
    // not whole, which is a loss like any failed write.
    write_event(event.len(), |fd| {
        // SAFETY: writing an initialised buffer to our descriptor.
        unsafe { libc::write(fd, event.as_ptr().cast(), event.len()) }
    });
}

/// Appends an event whose payload is `parts` one after another, without
/// folding duplicates (coverage events are written once per process
/// anyway). The parts go out as they are, in one `writev`: no copy, so the
/// caller needs no buffer the size of the event on its stack.
pub fn record_raw<const N: usize>(tag: u8, parts: [&[u8]; N]) {
    // The iovec array is on the stack, one slot per part and the header;
    // more parts than it holds would be a caller's mistake, refused when
    // compiling rather than by dropping an event.
    const MAX_PARTS: usize = 4;
    const { assert!(N <= MAX_PARTS) };
    let fd = FD.load(Ordering::Relaxed);
    let len: usize = parts.iter().map(|part| part.len()).sum();
    if fd < 0 || len > usize::from(u16::MAX) {
        return;
    }
    let len = (len as u16).to_le_bytes();
    let header = [tag, thread_flags(), len[0], len[1]];
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 1 + MAX_PARTS];
    for (slot, part) in iov
        .iter_mut()
        .zip(std::iter::once(&header[..]).chain(parts))
    {
        *slot = libc::iovec {
            iov_base: part.as_ptr() as *mut libc::c_void,
            iov_len: part.len(),
        };
    }
    // One `writev`: with `O_APPEND` the event lands whole (short writes to
    // regular files do not happen short of a full disk, which loses the
    // trace's tail: a loss, said beside the trace).
    write_event(4 + usize::from(u16::from_le_bytes(len)), |fd| {
        // SAFETY: every buffer is initialised and outlives the call.
        unsafe { libc::writev(fd, iov.as_ptr(), 1 + N as libc::c_int) }
    });
}

/// Records that an access happened whose path could not be named.
pub fn record_lost() {
    record(LOST, 0, &mut EventBuf::empty());
}

/// Records a channel the shim cannot see, with the reason.
pub fn record_unseen(reason: &[u8]) {
    let mut buf = EventBuf::empty();
    // Reasons are short literals: they always fit.
    let _ = buf.push_bytes(reason);
    record(UNSEEN, 0, &mut buf);
}

mod seen {
    //! A fixed, lock-free open-addressing set of 64-bit event hashes. Safe to
    //! use from signal handlers and after `fork` (the child gets a copy; the
    //! parent already wrote those events to the shared trace).

    use super::*;

    // Two tables of zero pages, touched only as events arrive. A hash
    // probes the small one first, and the large one only when its
    // neighbourhood in the small one is full. Most processes write a few
    // dozen distinct events: spread over the large table alone, nearly
    // every one of them was a page fault of its own (a fresh zero page);
    // the small one's 16 pages take a typical process's events, and the
    // large one keeps the room to fold a busy process's first ~200 000.
    //
    // Slots are never cleared, so a full neighbourhood stays full: a hash
    // that went to the large table is looked for there again, and one the
    // small table holds is found there before the large one is asked.
    const SMALL_SLOTS: usize = 1 << 13;
    const LARGE_SLOTS: usize = 1 << 18;
    const PROBES: usize = 32;
    static SMALL: [AtomicU64; SMALL_SLOTS] = [const { AtomicU64::new(0) }; SMALL_SLOTS];
    static LARGE: [AtomicU64; LARGE_SLOTS] = [const { AtomicU64::new(0) }; LARGE_SLOTS];

    pub fn hash(tag: u8, flags: u8, path: &[u8]) -> u64 {
        // FNV-1a: tiny, allocation-free, and good enough to spread paths;
        // a collision merely drops a duplicate-looking event of 2^-64 odds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [tag, flags].iter().chain(path) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h | 1
    }

    /// True when `h` was not in the set (and now is). A full neighbourhood
    /// in both tables answers true: a duplicate event is harmless, a
    /// dropped one is not.
    pub fn insert(h: u64) -> bool {
        match insert_into(&SMALL, h) {
            Some(new) => new,
            // The large table is indexed by other bits of the hash than the
            // small one, so that hashes crowded together in the one spread
            // out in the other.
            None => insert_into(&LARGE, h.rotate_right(32)).unwrap_or(true),
        }
    }

    /// `Some(true)` when `h` was not in `table` and now is, `Some(false)`
    /// when it was, `None` when its neighbourhood is full.
    fn insert_into(table: &[AtomicU64], h: u64) -> Option<bool> {
        let start = h as usize % table.len();
        for i in 0..PROBES {
            let slot = &table[(start + i) % table.len()];
            match slot.compare_exchange(0, h, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(true),
                Err(existing) if existing == h => return Some(false),
                Err(_) => {}
            }
        }
        None
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn an_event_is_new_once_however_full_the_small_table_is() {
            // More distinct hashes than the small table has slots, so that
            // many neighbourhoods fill and later hashes go to the large one;
            // every hash is new the first time and old the second, in
            // either table.
            let hashes: Vec<u64> = (0..3 * SMALL_SLOTS as u64)
                .map(|i| hash(crate::trace::READ, 0, &i.to_le_bytes()))
                .collect();
            assert!(hashes.iter().all(|h| insert(*h)));
            assert!(hashes.iter().all(|h| !insert(*h)));
            let in_large = LARGE
                .iter()
                .filter(|s| s.load(Ordering::Relaxed) != 0)
                .count();
            assert!(
                in_large > 0,
                "the small table took everything: the test proves nothing"
            );
        }
    }
}
