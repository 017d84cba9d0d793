//! The network: `connect`, `bind`, `sendto`, `sendmsg`, and host name
//! lookups (`getaddrinfo`, `gethostbyname`; the files they read are
//! [`super::libc_files`]'s).
//!
//! The shim only reports addresses; whether one is another machine is the
//! runner's decision (`ekstazi_core::capture::network`), so that the rule is unit-tested
//! and configurable. A relative Unix socket path is made absolute here, while
//! the working directory is the one the call used.

use super::{observe, unavailable};
use crate::path::EventBuf;
use crate::{real, trace};
use libc::{c_char, c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};

/// Records a socket address (`flags`: [`trace::FLAG_OPTION`] for a bind).
///
/// # Safety
/// `addr` is null or points to `len` readable bytes.
unsafe fn address(addr: *const sockaddr, len: socklen_t, flags: u8) {
    if addr.is_null() || (len as usize) < 2 || !trace::enabled() {
        return;
    }
    observe(|_| {
        // SAFETY: the caller passes `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len as usize) };
        let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
        let mut buf = EventBuf::empty();
        let path = &bytes[2..];
        let unix_path = family == libc::AF_UNIX as u16 && path.first().is_some_and(|b| *b != 0);
        if unix_path && path[0] != b'/' {
            // Resolve the relative path against the working directory.
            let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
            let mut name = [0u8; 110];
            let end = end.min(name.len() - 1);
            name[..end].copy_from_slice(&path[..end]);
            // SAFETY: `name` is NUL-terminated.
            match unsafe { EventBuf::resolve(libc::AT_FDCWD, name.as_ptr().cast()) } {
                Ok(resolved) => {
                    if !buf.push_bytes(&family.to_ne_bytes()) || !buf.push_bytes(resolved.path()) {
                        return trace::record_lost();
                    }
                }
                Err(_) => return trace::record_lost(),
            }
        } else if !buf.push_bytes(&bytes[..bytes.len().min(128)]) {
            return trace::record_lost();
        }
        trace::record(trace::NETWORK, flags, &mut buf);
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = real::connect() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's. Recorded whatever the outcome:
    // a test that fails to reach another machine depends on it just as much.
    unsafe {
        let result = real(fd, addr, len);
        address(addr, len, 0);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) = real::bind() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(fd, addr, len);
        if result == 0 {
            bound(fd, addr, len);
        }
        result
    }
}

/// Records what a successful `bind` bound. An IP socket is recorded as the
/// kernel answers for it: a server that asked for port 0 got a port of the
/// kernel's choosing, and only that port tells its clients' connections
/// apart from a service the test did not start.
///
/// # Safety
/// `addr` is null or points to `len` readable bytes.
unsafe fn bound(fd: c_int, addr: *const sockaddr, len: socklen_t) {
    // SAFETY: the caller passes `len` readable bytes.
    let family = if addr.is_null() || (len as usize) < 2 {
        0
    } else {
        c_int::from(unsafe { (*addr).sa_family })
    };
    if family == libc::AF_INET || family == libc::AF_INET6 {
        // SAFETY: a zeroed `sockaddr_storage` is valid, and large enough
        // for any address `getsockname` returns.
        let mut actual: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut actual_len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
        // SAFETY: the buffer and its length are ours.
        let named = unsafe { libc::getsockname(fd, (&raw mut actual).cast(), &mut actual_len) };
        if named == 0 {
            // SAFETY: the kernel wrote `actual_len` bytes of it.
            return unsafe {
                address(
                    (&raw const actual).cast(),
                    actual_len.min(std::mem::size_of::<libc::sockaddr_storage>() as socklen_t),
                    trace::FLAG_OPTION,
                )
            };
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { address(addr, len, trace::FLAG_OPTION) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    data: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    let Some(real) = real::sendto() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(fd, data, n, flags, addr, len);
        address(addr, len, 0);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    let Some(real) = real::sendmsg() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let result = real(fd, msg, flags);
        if !msg.is_null() {
            address((*msg).msg_name.cast(), (*msg).msg_namelen, 0);
        }
        result
    }
}

/// Records a host name the test looked up.
///
/// # Safety
/// `name` is null or a C string.
pub(super) unsafe fn host(name: *const c_char) {
    if name.is_null() || !trace::enabled() {
        return;
    }
    observe(|_| {
        // SAFETY: the caller passes a C string.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let mut buf = EventBuf::empty();
        if buf.push_bytes(name) {
            trace::record(trace::HOST, 0, &mut buf);
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const c_void,
    res: *mut c_void,
) -> c_int {
    let Some(real) = real::getaddrinfo() else {
        return libc::EAI_SYSTEM;
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        host(node);
        let result = real(node, service, hints, res);
        super::libc_files::name_service(node, service);
        result
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname(name: *const c_char) -> *mut c_void {
    let Some(real) = real::gethostbyname() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        host(name);
        let result = real(name);
        super::libc_files::name_service(name, std::ptr::null());
        result
    }
}
