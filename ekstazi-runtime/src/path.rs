//! Turning the path a process passed to libc into an absolute one, in a
//! fixed buffer on the stack (hooks must not allocate).

use libc::{c_char, c_int};
use std::mem::MaybeUninit;

/// Room for a header, a directory of up to `PATH_MAX` and a relative path of
/// up to `PATH_MAX`: the longest absolute name a single call can produce.
const CAPACITY: usize = HEADER + 2 * libc::PATH_MAX as usize + 2;

/// Bytes reserved in front of the path for the trace event header, so that an
/// event is written with a single `write` (atomic with `O_APPEND`).
pub const HEADER: usize = 4;

/// An absolute path (not normalised: `..` and `.` are left to the reader of
/// the trace) preceded by room for the event header.
pub struct EventBuf {
    buf: [MaybeUninit<u8>; CAPACITY],
    len: usize,
}

/// Why a path could not be resolved.
pub enum Unresolved {
    /// Null or empty: the call was about a file descriptor, not a path.
    NotAPath,
    /// The directory it is relative to could not be named, or the result
    /// would not fit: the access happened but cannot be attributed.
    Lost,
}

impl EventBuf {
    /// Resolves `path` relative to `dirfd` (or the working directory for
    /// `AT_FDCWD`), as the kernel would at the time of the call.
    ///
    /// # Safety
    /// `path` is null or a NUL-terminated string.
    pub unsafe fn resolve(dirfd: c_int, path: *const c_char) -> Result<EventBuf, Unresolved> {
        if path.is_null() {
            return Err(Unresolved::NotAPath);
        }
        // SAFETY: the caller passes a C string.
        let path = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
        if path.is_empty() {
            return Err(Unresolved::NotAPath);
        }
        let mut out = EventBuf::empty();
        if path[0] != b'/' {
            let written = if dirfd == libc::AT_FDCWD {
                out.write_cwd()
            } else {
                out.write_fd_path(dirfd)
            };
            if !written {
                return Err(Unresolved::Lost);
            }
            if out.path() != b"/" && !out.push(b"/") {
                return Err(Unresolved::Lost);
            }
        }
        if !out.push(path) {
            return Err(Unresolved::Lost);
        }
        Ok(out)
    }

    /// An event without a path.
    pub fn empty() -> EventBuf {
        EventBuf {
            buf: [MaybeUninit::uninit(); CAPACITY],
            len: HEADER,
        }
    }

    /// The target of a symbolic link (such as `/proc/self/exe`).
    pub fn read_link(link: &std::ffi::CStr) -> Option<EventBuf> {
        let mut out = EventBuf::empty();
        // SAFETY: `link` is a C string.
        unsafe { out.push_link(link.as_ptr()) }.then_some(out)
    }

    /// The path of an open descriptor (a directory being listed, a program
    /// run by descriptor).
    pub fn of_fd(fd: c_int) -> Option<EventBuf> {
        let mut out = EventBuf::empty();
        out.write_fd_path(fd).then_some(out)
    }

    /// Appends the target of the symbolic link `link` names. The shim's own
    /// lookups go to the kernel directly, not through its `readlink` hook.
    ///
    /// # Safety
    /// `link` is a NUL-terminated string.
    unsafe fn push_link(&mut self, link: *const c_char) -> bool {
        let spare = self.spare();
        // SAFETY: readlinkat writes at most `spare.len()` bytes.
        let n = unsafe {
            crate::real::libc_syscall()(
                libc::SYS_readlinkat,
                libc::AT_FDCWD,
                link,
                spare.as_mut_ptr(),
                spare.len(),
            )
        };
        if n <= 0 || n as usize >= spare.len() {
            return false;
        }
        self.len += n as usize;
        true
    }

    /// Appends raw bytes; false (and nothing appended) if they do not fit.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> bool {
        self.push(bytes)
    }

    /// How many more bytes fit.
    pub fn room(&self) -> usize {
        CAPACITY - self.len
    }

    fn spare(&mut self) -> &mut [MaybeUninit<u8>] {
        &mut self.buf[self.len..]
    }

    fn push(&mut self, bytes: &[u8]) -> bool {
        let spare = self.spare();
        if bytes.len() > spare.len() {
            return false;
        }
        for (slot, byte) in spare.iter_mut().zip(bytes) {
            slot.write(*byte);
        }
        self.len += bytes.len();
        true
    }

    fn write_cwd(&mut self) -> bool {
        let spare = self.spare();
        // SAFETY: getcwd writes at most `spare.len()` bytes, NUL included.
        let ok = unsafe { libc::getcwd(spare.as_mut_ptr().cast(), spare.len()) };
        if ok.is_null() {
            return false;
        }
        // SAFETY: getcwd succeeded, so the buffer holds a NUL-terminated string.
        let n = unsafe { libc::strlen(spare.as_ptr().cast()) };
        self.len += n;
        true
    }

    fn write_fd_path(&mut self, dirfd: c_int) -> bool {
        if dirfd < 0 {
            return false;
        }
        // "/proc/self/fd/" + decimal fd + NUL, formatted without allocating.
        let mut link = [0u8; 32];
        let prefix = b"/proc/self/fd/";
        link[..prefix.len()].copy_from_slice(prefix);
        let mut digits = [0u8; 12];
        let mut n = dirfd as u32;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let tail = &digits[i..];
        link[prefix.len()..prefix.len() + tail.len()].copy_from_slice(tail);
        // SAFETY: `link` is NUL-terminated (zero-filled).
        unsafe { self.push_link(link.as_ptr().cast()) }
    }

    /// The absolute path.
    pub fn path(&self) -> &[u8] {
        // SAFETY: bytes HEADER..len were written.
        unsafe {
            std::slice::from_raw_parts(self.buf.as_ptr().add(HEADER).cast(), self.len - HEADER)
        }
    }

    /// The path's parent directory, for failures that reveal a missing parent.
    pub fn truncate_to_parent(&mut self) {
        let path = self.path();
        let trimmed = path.len() - path.iter().rev().take_while(|b| **b == b'/').count();
        let cut = path[..trimmed]
            .iter()
            .rposition(|b| *b == b'/')
            .unwrap_or(0);
        self.len = HEADER + cut.max(1);
    }

    /// Fills in the header and returns header and path as one event.
    pub fn event(&mut self, tag: u8, flags: u8) -> &[u8] {
        let len = (self.len - HEADER) as u16;
        let header = [tag, flags, len.to_le_bytes()[0], len.to_le_bytes()[1]];
        for (slot, byte) in self.buf.iter_mut().zip(header) {
            slot.write(byte);
        }
        // SAFETY: bytes 0..len are initialised now.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.len) }
    }
}
