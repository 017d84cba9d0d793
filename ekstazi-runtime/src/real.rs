//! The libc functions the hooks stand in front of, looked up once with
//! `dlsym(RTLD_NEXT, ..)`.

use libc::{FILE, c_char, c_int, c_uint, c_void, mode_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Looks a symbol up in the objects after the shim, falling back to a
/// versioned lookup for symbols glibc keeps only as compatibility versions
/// (`__xstat` and friends), which plain `dlsym` does not return.
unsafe fn lookup(name: &'static [u8], version: Option<&'static [u8]>) -> usize {
    // SAFETY: `name` and `version` are NUL-terminated literals.
    unsafe {
        let mut sym = libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast());
        if sym.is_null()
            && let Some(version) = version
        {
            sym = libc::dlvsym(
                libc::RTLD_NEXT,
                name.as_ptr().cast(),
                version.as_ptr().cast(),
            );
        }
        sym as usize
    }
}

macro_rules! real {
    ($( $name:ident $(@ $version:literal)? : fn($($sig:tt)*) -> $ret:ty; )*) => {
        $(
            /// The next definition of this function, or `None` if libc has none.
            #[allow(non_snake_case)]
            pub fn $name() -> Option<unsafe extern "C" fn($($sig)*) -> $ret> {
                static CACHE: AtomicUsize = AtomicUsize::new(0);
                let mut addr = CACHE.load(Ordering::Relaxed);
                if addr == 0 {
                    let version: Option<&'static [u8]> = None $(.or(Some(concat!($version, "\0").as_bytes())))?;
                    // SAFETY: looking up a symbol has no preconditions.
                    addr = unsafe { lookup(concat!(stringify!($name), "\0").as_bytes(), version) };
                    if addr == 0 {
                        return None;
                    }
                    CACHE.store(addr, Ordering::Relaxed);
                }
                // SAFETY: the symbol has this C signature in every libc we load into.
                Some(unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($sig)*) -> $ret>(addr) })
            }
        )*
    };
}

real! {
    open: fn(*const c_char, c_int, ...) -> c_int;
    open64: fn(*const c_char, c_int, ...) -> c_int;
    openat: fn(c_int, *const c_char, c_int, ...) -> c_int;
    openat64: fn(c_int, *const c_char, c_int, ...) -> c_int;
    __open_2: fn(*const c_char, c_int) -> c_int;
    __open64_2: fn(*const c_char, c_int) -> c_int;
    __openat_2: fn(c_int, *const c_char, c_int) -> c_int;
    __openat64_2: fn(c_int, *const c_char, c_int) -> c_int;
    creat: fn(*const c_char, mode_t) -> c_int;
    creat64: fn(*const c_char, mode_t) -> c_int;
    fopen: fn(*const c_char, *const c_char) -> *mut FILE;
    fopen64: fn(*const c_char, *const c_char) -> *mut FILE;
    freopen: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    freopen64: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    stat: fn(*const c_char, *mut c_void) -> c_int;
    stat64: fn(*const c_char, *mut c_void) -> c_int;
    lstat: fn(*const c_char, *mut c_void) -> c_int;
    lstat64: fn(*const c_char, *mut c_void) -> c_int;
    fstatat: fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
    fstatat64: fn(c_int, *const c_char, *mut c_void, c_int) -> c_int;
    __xstat @ "GLIBC_2.2.5": fn(c_int, *const c_char, *mut c_void) -> c_int;
    __xstat64 @ "GLIBC_2.2.5": fn(c_int, *const c_char, *mut c_void) -> c_int;
    __lxstat @ "GLIBC_2.2.5": fn(c_int, *const c_char, *mut c_void) -> c_int;
    __lxstat64 @ "GLIBC_2.2.5": fn(c_int, *const c_char, *mut c_void) -> c_int;
    __fxstatat @ "GLIBC_2.4": fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
    __fxstatat64 @ "GLIBC_2.4": fn(c_int, c_int, *const c_char, *mut c_void, c_int) -> c_int;
    statx: fn(c_int, *const c_char, c_int, c_uint, *mut c_void) -> c_int;
    access: fn(*const c_char, c_int) -> c_int;
    faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int;
    euidaccess: fn(*const c_char, c_int) -> c_int;
    eaccess: fn(*const c_char, c_int) -> c_int;
    mkdir: fn(*const c_char, mode_t) -> c_int;
    mkdirat: fn(c_int, *const c_char, mode_t) -> c_int;
    unlink: fn(*const c_char) -> c_int;
    unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
    rmdir: fn(*const c_char) -> c_int;
    remove: fn(*const c_char) -> c_int;
    rename: fn(*const c_char, *const c_char) -> c_int;
    renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
    renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
    pthread_create: fn(*mut libc::pthread_t, *const libc::pthread_attr_t, extern "C" fn(*mut c_void) -> *mut c_void, *mut c_void) -> c_int;
}
