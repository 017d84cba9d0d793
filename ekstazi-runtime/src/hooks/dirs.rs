//! Listing directories: `opendir`, the `readdir` family, `closedir`,
//! `scandir`.
//!
//! A listing is recorded when a process first reads an entry of an open
//! directory stream, as the directory's path (named from the stream's
//! descriptor, so `fdopendir` streams are covered too). The dependency is the
//! sorted list of entry names and kinds, which the runner computes (see
//! `ekstazi_core::digests::checksum`), not the contents of the entries.
//! Just before that first read the shim reads the directory once itself and
//! adds a witness of what it holds (`ekstazi_core::digests::checksum::ListingWitness`,
//! with the same per-entry hashes): when the test later changes the
//! directory, the runner can still tell whether what it found then is what
//! is there now.
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

/// Records the listing of the stream's directory, once per open stream,
/// before the stream's first read.
fn listed(dir: *mut DIR) {
    if dir.is_null() || !trace::enabled() {
        return;
    }
    observe(|_| {
        if !streams::mark(dir) {
            return;
        }
        // SAFETY: `dir` is an open stream (the caller is reading from it).
        listing(unsafe { libc::dirfd(dir) });
    });
}

/// Records the listing of the directory open at `fd`, with a witness.
fn listing(fd: c_int) {
    let Some(mut buf) = EventBuf::of_fd(fd) else {
        return trace::record_lost();
    };
    match witness::of(fd) {
        Some(seen) if buf.push_bytes(&seen) => {
            trace::record(trace::LISTED, trace::FLAG_OPTION, &mut buf)
        }
        _ => trace::record(trace::LISTED, 0, &mut buf),
    }
}

/// Records the listing of the directory a raw `getdents64` read (no
/// stream to remember it by: the trace folds repeated events).
pub(super) fn record_listing(fd: c_int) {
    observe(|_| listing(fd));
}

/// What a directory holds, as `ekstazi_core::digests::checksum::ListingWitness`
/// sums it up. Written by hand: the hooks must not allocate, so no crate's
/// directory reader fits.
mod witness {
    use libc::c_int;

    /// Directories larger than this are not witnessed (the read would
    /// double the cost of listing them); their listing stays unknown when
    /// the test changes them.
    const MAX_ENTRIES: u64 = 100_000;

    /// `NUL` and the witness, ready to follow the directory's path in an
    /// event; `None` when the directory cannot be read whole or an entry's
    /// kind is not given.
    pub fn of(dirfd: c_int) -> Option<[u8; 25]> {
        // A descriptor of its own: the stream's offset must not move.
        // SAFETY: raw system calls on a descriptor this function owns.
        let fd = unsafe {
            crate::real::libc_syscall()(
                libc::SYS_openat,
                dirfd,
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        let words = read(fd as c_int);
        // SAFETY: as above.
        unsafe { crate::real::libc_syscall()(libc::SYS_close, fd) };
        let mut out = [0u8; 25];
        for (i, word) in words?.into_iter().enumerate() {
            out[1 + 8 * i..9 + 8 * i].copy_from_slice(&word.to_le_bytes());
        }
        Some(out)
    }

    fn read(fd: c_int) -> Option<[u64; 3]> {
        // 8-byte aligned, as `struct linux_dirent64` wants.
        let mut buf = [0u64; 1024];
        let (mut sum, mut mix, mut count) = (0u64, 0u64, 0u64);
        loop {
            // SAFETY: the kernel writes at most the buffer's size.
            let n = unsafe {
                crate::real::libc_syscall()(
                    libc::SYS_getdents64,
                    fd,
                    buf.as_mut_ptr(),
                    std::mem::size_of_val(&buf),
                )
            };
            if n < 0 {
                return None;
            }
            if n == 0 {
                return Some([sum, mix, count]);
            }
            // SAFETY: the first `n` bytes were written by the kernel.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            // `struct linux_dirent64`: inode (8), offset (8), record length
            // (2), type (1), then the NUL-terminated name.
            let mut at = 0;
            while at < bytes.len() {
                let reclen = bytes.get(at + 16..at + 18)?;
                let reclen = usize::from(u16::from_ne_bytes([reclen[0], reclen[1]]));
                let record = bytes.get(at..at + reclen).filter(|_| reclen > 19)?;
                let name = &record[19..];
                let name = &name[..name.iter().position(|b| *b == 0)?];
                at += reclen;
                if name == b"." || name == b".." {
                    continue;
                }
                let kind = match record[18] {
                    libc::DT_REG => b'f',
                    libc::DT_DIR => b'd',
                    libc::DT_LNK => b'l',
                    libc::DT_UNKNOWN => return None,
                    _ => b'o',
                };
                let (h1, h2) = ekstazi_wire::listing::entry_hashes(name, kind);
                sum = sum.wrapping_add(h1);
                mix = mix.wrapping_add(h2);
                count += 1;
                if count > MAX_ENTRIES {
                    return None;
                }
            }
        }
    }
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
            listed(dir);
            // SAFETY: the caller's contract is libc's.
            unsafe { real(dir) }
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
            listed(dir);
            // SAFETY: the caller's contract is libc's.
            unsafe { real(dir, entry, result) }
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
