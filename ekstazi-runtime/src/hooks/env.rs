//! Reading the environment: `getenv` and `secure_getenv`.
//!
//! The lookup is [`crate::environ`]'s, over `environ`, as glibc does it.
//!
//! `std::env::vars` walks `environ` itself and cannot be seen; see
//! `ekstazi_core::capture::environment` for what is recorded instead.

use super::observe;
use crate::environ::lookup;
use crate::path::EventBuf;
use crate::trace;
use libc::c_char;

/// Records that `name` was read and what it held.
fn describe(name: &[u8], value: *const c_char) {
    observe(|_| record(name, value));
}

/// Writes the event of a read of `name` that found `value` (null: unset),
/// from inside [`observe`].
pub(super) fn record(name: &[u8], value: *const c_char) {
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
