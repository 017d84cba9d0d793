//! Reading `environ` exactly as glibc's `getenv` does, without recording:
//! for the shim's own variables, read before the trace is open, and for the
//! `getenv` hook, which records what it found.
//!
//! The lookup walks `environ` itself rather than calling the next
//! `getenv`: allocators and loggers read variables from inside `malloc` and
//! before the shim's constructor ran, where looking a symbol up (which can
//! allocate) would deadlock. Walking `environ` needs nothing.

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
