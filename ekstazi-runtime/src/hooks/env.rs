//! Reading the environment: `getenv` and `secure_getenv`.
//!
//! The lookup is done here, over `environ`, exactly as glibc does it, rather
//! than by calling the next `getenv`: allocators and loggers read variables
//! from inside `malloc` and before the shim's constructor ran, where looking
//! a symbol up (which can allocate) would deadlock. Walking `environ`
//! needs nothing.
//!
//! `std::env::vars` walks `environ` itself and cannot be seen; see
//! `ekstazi_core::env` for what is recorded instead.

use super::observe;
use crate::path::EventBuf;
use crate::trace;
use libc::c_char;

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// The value of `name` in `environ`, as glibc's `getenv` finds it.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `environ` is not being
/// replaced concurrently (the caller's contract with libc).
pub unsafe fn lookup(name: &[u8]) -> *mut c_char {
    // SAFETY: forwarded; an entry found is `NAME=VALUE`, a C string.
    match unsafe { entry(name) } {
        Some(slot) => unsafe { (*slot).add(name.len() + 1).cast_mut() },
        None => std::ptr::null_mut(),
    }
}

/// The slot of `environ` that holds `name=...`, as glibc's `getenv`
/// finds it (the fork server writes its children's variables there).
///
/// # Safety
/// As [`lookup`].
pub unsafe fn entry(name: &[u8]) -> Option<*mut *const c_char> {
    // SAFETY: reading the process's environment pointer.
    let mut entry = unsafe { environ }.cast_mut();
    if name.is_empty() || entry.is_null() {
        return None;
    }
    // SAFETY: `environ` is a NULL-terminated array of C strings.
    unsafe {
        while !(*entry).is_null() {
            let s = *entry;
            let mut i = 0;
            while i < name.len() && *s.add(i) as u8 == name[i] {
                i += 1;
            }
            if i == name.len() && *s.add(i) as u8 == b'=' {
                return Some(entry);
            }
            entry = entry.add(1);
        }
    }
    None
}

/// Records that `name` was read and what it held.
fn describe(name: &[u8], value: *const c_char) {
    observe(|_| {
        let mut buf = EventBuf::empty();
        if !buf.push_bytes(name) {
            return trace::record_lost();
        }
        if value.is_null() {
            return trace::record(trace::ENV, 0, &mut buf);
        }
        // SAFETY: a value found in `environ` is a C string.
        let value = unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes();
        if buf.room() > value.len() && buf.push_bytes(b"=") && buf.push_bytes(value) {
            trace::record(trace::ENV, 0, &mut buf);
        } else {
            let mut name_only = EventBuf::empty();
            name_only.push_bytes(name);
            trace::record(trace::ENV, trace::FLAG_OPTION, &mut name_only);
        }
    });
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getenv(name: *const c_char) -> *mut c_char {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller passes a C string.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    // SAFETY: the caller's contract is libc's.
    let value = unsafe { lookup(name) };
    if trace::enabled() {
        describe(name, value);
    }
    value
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn secure_getenv(name: *const c_char) -> *mut c_char {
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { getenv(name) }
}
