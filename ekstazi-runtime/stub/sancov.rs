//! SanitizerCoverage's callbacks, linked into every instrumented binary as a
//! small object (cargo-ekstazi's build script compiles this file with
//! `rustc --emit=obj`; it is no module of the shim).
//!
//! An instrumented object's constructor calls them with its coverage flags
//! and its PC table. Defined here, inside the binary, they need nothing
//! outside it: the binary has no dependency on the shim (no `DT_NEEDED`,
//! no rpath) and starts wherever a plain build starts — a masked `/proc`, a
//! chroot, a copy on a machine that has only the binary. When the shim is
//! loaded (`LD_PRELOAD`), the flags are handed to it by name
//! (`ekstazi_sancov_flags`); otherwise they are set and never read, and the
//! binary runs as a plain build. (A weak undefined symbol instead of the
//! look-up would be resolved to null at link time by some linkers in a
//! position-independent executable.)
//!
//! No allocation, no panic, nothing of `core` that is not inlined: the
//! object must link into any binary without bringing symbols of its own.

#![no_std]

use core::ffi::{c_char, c_void};

unsafe extern "C" {
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

type Register = unsafe extern "C" fn(*mut u8, *mut u8);

/// # Safety
/// Called by the instrumented object's constructor with its flag array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_bool_flag_init(start: *mut u8, end: *mut u8) {
    // `RTLD_DEFAULT`: every object loaded globally, the preloaded shim first.
    // SAFETY: a look-up by a C string's name.
    let found = unsafe { dlsym(core::ptr::null_mut(), c"ekstazi_sancov_flags".as_ptr()) };
    if !found.is_null() {
        // SAFETY: the shim defines it with this signature.
        let register = unsafe { core::mem::transmute::<*mut c_void, Register>(found) };
        // SAFETY: forwarded as the constructor passed it.
        unsafe { register(start, end) }
    }
}

/// The PC table is read from the file by cargo-ekstazi, not at run time.
///
/// # Safety
/// None: the table is not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_pcs_init(_start: *const usize, _end: *const usize) {}
