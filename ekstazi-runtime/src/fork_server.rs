//! The fork server: a test binary's start-up paid once, not once per test.
//!
//! Starting a test process costs `exec`, mapping and relocating a large
//! debug binary, and the shim's own start (looking up every real libc
//! function). With `EKSTAZI_SERVE_FD` set, the shim's constructor does not
//! return in the process the runner started: that process becomes a server,
//! which has run nothing of the test binary — not one of its constructors,
//! not `main` — only the loader, the libraries' constructors and this one.
//! For each request it forks a child, and the child alone returns from the
//! constructor, with its own test's name in `argv` and its own variables in
//! the environment, and goes on exactly as a freshly started process would:
//! the binary's constructors, the standard library's start, libtest's
//! `main`, and the shim's tracing (`start_tracing`) with the child's trace
//! file. Every test is still a new process that has run nothing but its own
//! test.
//!
//! The child's arguments and environment are edited where the kernel put
//! them, on the initial stack: glibc reads `argc` there in `_start`, and
//! finds the environment after `argv`. So the server is started with the
//! very arguments a test gets (`--exact <placeholder> --nocapture
//! --include-ignored`) and a placeholder for every per-test variable; the
//! child only points `argv[2]` and those entries at its own strings, and
//! drops `EKSTAZI_SERVE_FD`. (`/proc/self/cmdline` and `/proc/self/environ`,
//! which the kernel keeps, still show the placeholders.)
//!
//! The server serves one test at a time (the runner keeps one server per
//! worker and binary): it waits for the child and reports its wait status.
//! Anything unexpected — other arguments, another thread already running,
//! a malformed request — and it refuses or exits; the runner then starts
//! tests the ordinary way.

use ekstazi_wire::fork::{
    self, ENDED, MAX_REQUEST, REFUSED, REPLY_LEN, Request, SERVE_FD_VAR, STARTED,
};
use libc::{c_char, c_int};
use std::cell::UnsafeCell;

/// The arguments the server must have been started with; `argv[2]` is the
/// test's name in each child.
const ARGS: [&[u8]; 3] = [b"--exact", b"--nocapture", b"--include-ignored"];

/// The bytes of the request being served. In a child they are its own copy
/// (the server overwrites its copy with the next request only after this
/// child's `fork`), and the child's arguments and variables point into them
/// for the rest of its life.
struct Buffer(UnsafeCell<[u8; MAX_REQUEST + 1]>);

// SAFETY: used only by the server's single thread, before `main`.
unsafe impl Sync for Buffer {}

static REQUEST: Buffer = Buffer(UnsafeCell::new([0; MAX_REQUEST + 1]));
/// The same pieces as C strings, each NUL-terminated, for the child.
static STRINGS: Buffer = Buffer(UnsafeCell::new([0; MAX_REQUEST + 1]));

/// Serves when asked to (`EKSTAZI_SERVE_FD`), returning only in a child that
/// is to run a test, or in a process that is not to serve at all.
///
/// # Safety
/// Called once, from the shim's constructor, with what glibc passes to it.
pub unsafe fn serve_if_asked(argc: c_int, argv: *mut *mut c_char) {
    // SAFETY: reading the environment before main, single-threaded.
    let fd = unsafe { crate::environ::lookup(SERVE_FD_VAR) };
    if fd.is_null() {
        return;
    }
    // SAFETY: a value in `environ` is a C string.
    let fd = parse_fd(unsafe { std::ffi::CStr::from_ptr(fd) }.to_bytes());
    // SAFETY: as above; the variable is removed at once, so that nothing
    // this process runs (or a child of a refusing server) serves too.
    unsafe { remove_var(SERVE_FD_VAR) };
    // SAFETY: `argv` is what the loader passed: `argc` C strings and NULL.
    let fd = fd.filter(|_| unsafe { started_as_server(argc, argv) } && single_threaded());
    let Some(fd) = fd else {
        // Not what the runner starts: running on would run no test, so
        // exit; the socket closing tells the runner the server refused.
        // SAFETY: ending this process before it ran anything.
        unsafe { libc::_exit(SERVER_REFUSED) }
    };
    // Looked up once here, every child finds the real functions resolved:
    // the shim's own start is paid once too.
    crate::real::resolve_all();
    // SAFETY: the loop below runs on this thread alone.
    unsafe { serve(fd, argv) }
}

/// The exit status of a server that would not serve.
const SERVER_REFUSED: c_int = 121;

fn parse_fd(text: &[u8]) -> Option<c_int> {
    if text.is_empty() || text.len() > 9 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = text
        .iter()
        .fold(0, |n: c_int, d| n * 10 + c_int::from(d - b'0'));
    (value > 2).then_some(value)
}

/// # Safety
/// `argv` holds `argc` C strings.
unsafe fn started_as_server(argc: c_int, argv: *mut *mut c_char) -> bool {
    if argc != 5 || argv.is_null() {
        return false;
    }
    let arg = |i: usize| {
        // SAFETY: `i < argc`.
        unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) }.to_bytes()
    };
    arg(1) == ARGS[0] && arg(3) == ARGS[1] && arg(4) == ARGS[2]
}

/// Whether this process has one thread: a constructor that ran before
/// this one may have started another, which a fork would leave behind
/// holding whatever it held.
fn single_threaded() -> bool {
    let Some(open) = crate::real::open64() else {
        return false;
    };
    let mut buf = [0u8; 1024];
    // SAFETY: plain descriptor operations on a stack buffer.
    let n = unsafe {
        let fd = open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    let stat = &buf[..n];
    // Field 20, `num_threads`; the second field (the name, in parentheses)
    // may hold spaces, so count from the last `)`.
    let Some(end) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    stat[end + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(17)
        == Some(b"1")
}

/// The server's loop: a request in, a child forked, its end reported.
/// Returns in the child only.
///
/// # Safety
/// Single-threaded, before `main`; `argv` as in [`serve_if_asked`].
unsafe fn serve(sock: c_int, argv: *mut *mut c_char) {
    loop {
        // SAFETY: the buffer is ours alone (single thread); the previous
        // request's child has its own copy.
        let buf = unsafe { &mut *REQUEST.0.get() };
        let (len, out) = match receive(sock, buf) {
            Received::Request(len, out) => (len, out),
            Received::Malformed => {
                reply(sock, REFUSED, libc::EINVAL);
                continue;
            }
            // SAFETY: the runner hung up: nothing is left to serve.
            Received::Closed => unsafe { libc::_exit(0) },
        };
        let Some(request) = Request::decode(&buf[..len]) else {
            close(out);
            reply(sock, REFUSED, libc::EINVAL);
            continue;
        };
        // SAFETY: reading `environ`, single-threaded.
        if !request.vars().all(|var| unsafe { slot_of(var) }.is_some()) {
            // A variable the server has no placeholder for cannot be set
            // without moving the environment.
            close(out);
            reply(sock, REFUSED, libc::ENOENT);
            continue;
        }
        // SAFETY: forking a single-threaded process.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the child, single-threaded, before `main`.
            unsafe { become_test(sock, out, argv, &request) };
            return;
        }
        close(out);
        if pid < 0 {
            reply(sock, REFUSED, crate::real::errno());
            continue;
        }
        // Its own process group before the runner hears of it, so that the
        // runner's kill of the group can never miss (the child sets it too).
        // SAFETY: plain system calls.
        unsafe { libc::setpgid(pid, pid) };
        reply(sock, STARTED, pid);
        let mut status = 0;
        // SAFETY: waiting for our own child.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            if crate::real::errno() != libc::EINTR {
                status = -1;
                break;
            }
        }
        reply(sock, ENDED, status);
    }
}

enum Received {
    /// The request's length and the output descriptor that came with it.
    Request(usize, c_int),
    Malformed,
    Closed,
}

/// Reads one request and the one descriptor that comes with it.
fn receive(sock: c_int, buf: &mut [u8]) -> Received {
    // Room for one descriptor's control message, aligned as `cmsghdr`.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 || crate::real::errno() != libc::EINTR {
            break n;
        }
    };
    if n <= 0 {
        return Received::Closed;
    }
    let mut out = -1;
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
            let count =
                ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<c_int>();
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                for i in 0..count {
                    let fd = data.add(i).read_unaligned();
                    if out < 0 {
                        out = fd;
                    } else {
                        close(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    if out < 0 || truncated {
        close(out);
        return Received::Malformed;
    }
    Received::Request(n as usize, out)
}

fn reply(sock: c_int, tag: u8, value: c_int) {
    let bytes = fork::encode_reply(tag, value);
    loop {
        // SAFETY: sending a stack buffer.
        let n = unsafe { libc::send(sock, bytes.as_ptr().cast(), REPLY_LEN, libc::MSG_NOSIGNAL) };
        if n >= 0 || crate::real::errno() != libc::EINTR {
            return;
        }
    }
}

fn close(fd: c_int) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this code owns.
        unsafe { libc::close(fd) };
    }
}

/// Turns the forked child into the test's process: its own process group,
/// its output, its name in `argv`, its variables.
///
/// # Safety
/// In the child, single-threaded, before `main`.
unsafe fn become_test(sock: c_int, out: c_int, argv: *mut *mut c_char, request: &Request<'_>) {
    // SAFETY: plain system calls on our descriptors.
    unsafe {
        libc::setpgid(0, 0);
        libc::close(sock);
        libc::dup2(out, 1);
        libc::dup2(out, 2);
        if out > 2 {
            libc::close(out);
        }
    }
    // SAFETY: the strings buffer is this process's own; pointers into it
    // stay valid for the process's life (nothing else writes it).
    let strings = unsafe { &mut *STRINGS.0.get() };
    let mut at = 0;
    let mut c_string = |bytes: &[u8]| -> *mut c_char {
        let start = at;
        strings[start..start + bytes.len()].copy_from_slice(bytes);
        strings[start + bytes.len()] = 0;
        at += bytes.len() + 1;
        strings[start..].as_mut_ptr().cast()
    };
    // The request fits `MAX_REQUEST` with a length prefix per piece, so the
    // pieces with a NUL each fit too.
    let name = c_string(request.name);
    // SAFETY: `argv` has five entries (checked when the server started).
    unsafe { *argv.add(2) = name };
    for var in request.vars() {
        let value = c_string(var);
        // SAFETY: every variable's slot was found before the fork.
        if let Some(slot) = unsafe { slot_of(var) } {
            unsafe { *slot = value };
        }
    }
}

/// The `environ` entry with the same name as `var` (`NAME=VALUE`).
///
/// # Safety
/// Single-threaded; `environ` is a NULL-terminated array of C strings.
unsafe fn slot_of(var: &[u8]) -> Option<*mut *const c_char> {
    let name = &var[..var.iter().position(|&b| b == b'=')?];
    // SAFETY: as the caller promises.
    unsafe { crate::environ::entry(name) }
}

/// Removes `name` from `environ` in place: the entries after it move up,
/// and the array keeps its place (glibc finds it after `argv`).
///
/// # Safety
/// Single-threaded; `environ` is a NULL-terminated array of C strings.
unsafe fn remove_var(name: &[u8]) {
    // SAFETY: as the caller promises; the moves stay inside the array.
    unsafe {
        let Some(mut entry) = crate::environ::entry(name) else {
            return;
        };
        loop {
            *entry = *entry.add(1);
            if (*entry).is_null() {
                break;
            }
            entry = entry.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_descriptor_number_above_stderr_is_served() {
        assert_eq!(parse_fd(b"7"), Some(7));
        assert_eq!(parse_fd(b"900"), Some(900));
        for bad in [&b""[..], b"2", b"-3", b"3x", b"99999999999", b" 4"] {
            assert_eq!(parse_fd(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
