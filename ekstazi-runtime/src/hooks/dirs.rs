//! Listing directories: `opendir`, the `readdir` family, `closedir`,
//! `scandir`.
//!
//! A listing is recorded when a process first reads an entry of an open
//! directory stream, as the directory's path (named from the stream's
//! descriptor, so `fdopendir` streams are covered too). The dependency is the
//! sorted list of entry names and kinds, which the runner computes (see
//! `ekstazi_core::checksum::listing`), not the contents of the entries.
//! glibc's own `glob`, `nftw` and `fts` read directories through internal
//! calls the shim cannot see.

use super::{event, existence, observe, unavailable};
use crate::path::EventBuf;
use crate::{real, trace};
use libc::{DIR, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Streams whose listing this process already recorded, so that reading a
/// large directory costs one lookup per entry rather than one `readlink`.
/// Lock-free and fixed: safe in signal handlers and after `fork`. A full
/// table only means the listing is named again (and folded by the trace).
mod streams {
    use super::*;

    const SLOTS: usize = 1024;
    const PROBES: usize = 16;
    /// A closed stream's slot: skipped by lookups, reused by inserts.
    const FREED: usize = 1;
    static TABLE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

    fn start(dir: usize) -> usize {
        (dir >> 4).wrapping_mul(0x9E37_79B9) % SLOTS
    }

    /// True when `dir` was not marked yet (and now is, if there was room).
    pub fn mark(dir: *mut DIR) -> bool {
        let dir = dir as usize;
        let start = start(dir);
        for i in 0..PROBES {
            let slot = &TABLE[(start + i) % SLOTS];
            let current = slot.load(Ordering::Relaxed);
            if current == dir {
                return false;
            }
            if (current == 0 || current == FREED)
                && slot
                    .compare_exchange(current, dir, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
        }
        true
    }

    /// Forgets a stream being closed (its address may be reused).
    pub fn forget(dir: *mut DIR) {
        let dir = dir as usize;
        let start = start(dir);
        for i in 0..PROBES {
            let slot = &TABLE[(start + i) % SLOTS];
            if slot
                .compare_exchange(dir, FREED, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Records the listing of the stream's directory, once per open stream.
fn listed(dir: *mut DIR) {
    if dir.is_null() || !trace::enabled() {
        return;
    }
    observe(|_| {
        if !streams::mark(dir) {
            return;
        }
        // SAFETY: `dir` is an open stream (the caller just read from it).
        let fd = unsafe { libc::dirfd(dir) };
        match EventBuf::of_fd(fd) {
            Some(mut buf) => trace::record(trace::LISTED, 0, &mut buf),
            None => trace::record_lost(),
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let Some(real) = real::opendir() else {
        return unavailable(std::ptr::null_mut());
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let dir = real(path);
        if !dir.is_null() {
            // A stream left over from a closed one must not count as listed.
            streams::forget(dir);
        }
        observe(|err| {
            if !dir.is_null() {
                event(
                    libc::AT_FDCWD,
                    path,
                    trace::EXISTS,
                    trace::KIND_DIR << trace::KIND_SHIFT,
                );
            } else {
                existence(libc::AT_FDCWD, path, err, false);
            }
        });
        dir
    }
}

macro_rules! readdir {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dir: *mut DIR) -> *mut c_void {
            let Some(real) = real::$name() else { return unavailable(std::ptr::null_mut()) };
            // SAFETY: the caller's contract is libc's.
            let entry = unsafe { real(dir) };
            listed(dir);
            entry
        }
    )*};
}
readdir!(readdir, readdir64);

macro_rules! readdir_r {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dir: *mut DIR, entry: *mut c_void, result: *mut *mut c_void) -> c_int {
            let Some(real) = real::$name() else { return libc::ENOSYS };
            // SAFETY: the caller's contract is libc's.
            let status = unsafe { real(dir, entry, result) };
            listed(dir);
            status
        }
    )*};
}
readdir_r!(readdir_r, readdir64_r);

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dir: *mut DIR) -> c_int {
    let Some(real) = real::closedir() else {
        return unavailable(-1);
    };
    if !dir.is_null() {
        streams::forget(dir);
    }
    // SAFETY: the caller's contract is libc's.
    unsafe { real(dir) }
}

/// Records what a `scandir` revealed: the listing, or the absence.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_scan(dirfd: c_int, path: *const c_char, result: c_int) {
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe {
        if result >= 0 {
            event(dirfd, path, trace::LISTED, 0);
        } else {
            existence(dirfd, path, err, false);
        }
    });
}

macro_rules! scandir {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, list: *mut c_void, filter: *mut c_void, compare: *mut c_void) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let result = real(path, list, filter, compare);
                describe_scan(libc::AT_FDCWD, path, result);
                result
            }
        }
    )*};
}
scandir!(scandir, scandir64);

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    path: *const c_char,
    list: *mut c_void,
    filter: *mut c_void,
    compare: *mut c_void,
) -> c_int {
    let Some(real) = real::scandirat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(dirfd, path, list, filter, compare);
        describe_scan(dirfd, path, result);
        result
    }
}
