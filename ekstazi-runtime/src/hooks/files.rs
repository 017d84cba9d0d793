//! Opening files: the `open` family, `creat`, stdio's `fopen` family, and
//! the temporary files of the `mkstemp` family.

use super::{event, fd_kind, is_absence, observe, parent_missing, probe_kind, unavailable};
use crate::{real, trace};
use libc::{FILE, c_char, c_int, c_uint, mode_t};

/// What a successful or failed open revealed about `path`.
///
/// `existed` is only known (probed before the call) for `O_CREAT` without
/// `O_EXCL` or `O_TRUNC`, the one case where success does not tell whether
/// the file was there before.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn describe_open(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    fd: c_int,
    err: c_int,
    existed: Option<bool>,
) {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return; // an anonymous file in a directory: nothing to depend on
    }
    let access = flags & libc::O_ACCMODE;
    let create = flags & libc::O_CREAT != 0;
    let (tag, kind) = if fd >= 0 {
        // The content now is the test's own: made exclusively, truncated, or new.
        let replaced = (create && flags & libc::O_EXCL != 0)
            || (flags & libc::O_TRUNC != 0 && access != libc::O_RDONLY)
            || (create && existed == Some(false));
        if flags & (libc::O_PATH | libc::O_DIRECTORY) != 0 {
            (trace::EXISTS, fd_kind(fd))
        } else if replaced {
            (trace::CREATED, 0)
        } else if access == libc::O_WRONLY {
            (trace::MODIFIED, fd_kind(fd))
        } else {
            (trace::READ, 0)
        }
    } else if err == libc::ENOTDIR && flags & libc::O_DIRECTORY != 0 {
        // Either a directory above is missing, or the path is not a
        // directory: the lookup tells which.
        // SAFETY: forwarded from the caller.
        return unsafe { super::existence(dirfd, path, err, flags & libc::O_NOFOLLOW != 0) };
    } else if is_absence(err) {
        if create {
            // SAFETY: forwarded from the caller.
            return unsafe { parent_missing(dirfd, path) };
        }
        (trace::MISSING, 0)
    } else if err == libc::EISDIR {
        (trace::EXISTS, trace::KIND_DIR << trace::KIND_SHIFT)
    } else if err == libc::EEXIST {
        // SAFETY: forwarded from the caller.
        (trace::EXISTS, unsafe { probe_kind(dirfd, path, false) })
    } else {
        return; // permissions and the like: the outcome does not hinge on content
    };
    // SAFETY: forwarded from the caller.
    unsafe { event(dirfd, path, tag, kind) }
}

/// Whether `path` exists, asked without disturbing `errno`, for the flags
/// that need it (see [`describe_open`]).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn probe_existence(dirfd: c_int, path: *const c_char, flags: c_int) -> Option<bool> {
    let ambiguous = flags & libc::O_CREAT != 0 && flags & (libc::O_EXCL | libc::O_TRUNC) == 0;
    if !ambiguous || path.is_null() || !trace::enabled() {
        return None;
    }
    let faccessat = real::faccessat()?;
    let saved = super::errno();
    // SAFETY: `path` is a C string.
    let exists = unsafe { faccessat(dirfd, path, libc::F_OK, 0) } == 0;
    super::set_errno(saved);
    Some(exists)
}

/// Runs an open-like call and records what it revealed.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(super) unsafe fn traced_open(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    call: impl FnOnce() -> c_int,
) -> c_int {
    // SAFETY: forwarded from the caller.
    let existed = unsafe { probe_existence(dirfd, path, flags) };
    let fd = call();
    // SAFETY: forwarded from the caller.
    observe(|err| unsafe { describe_open(dirfd, path, flags, fd, err, existed) });
    fd
}

// `open` is variadic in C; defining a variadic function is not stable Rust.
// On the System V x86-64 and AArch64 Linux ABIs an integer variadic argument
// travels in the same register as a fixed one, so taking `mode` as a third
// fixed parameter reads it when the caller passed it and harmless garbage
// otherwise (libc only looks at it with `O_CREAT` or `O_TMPFILE`).
macro_rules! open_at_cwd {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe { traced_open(libc::AT_FDCWD, path, flags, || real(path, flags, mode)) }
        }
    )*};
}
open_at_cwd!(open, open64);

macro_rules! open_at_dir {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe { traced_open(dirfd, path, flags, || real(dirfd, path, flags, mode)) }
        }
    )*};
}
open_at_dir!(openat, openat64);

// The `_FORTIFY_SOURCE` entry points C code compiled with optimisation calls.
macro_rules! fortified_open {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe { traced_open(libc::AT_FDCWD, path, flags, || real(path, flags)) }
        }
    )*};
}
fortified_open!(__open_2, __open64_2);

macro_rules! fortified_openat {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            // SAFETY: the caller's contract is libc's.
            unsafe { traced_open(dirfd, path, flags, || real(dirfd, path, flags)) }
        }
    )*};
}
fortified_openat!(__openat_2, __openat64_2);

macro_rules! creat {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let Some(real) = real::$name() else { return unavailable(-1) };
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
            // SAFETY: the caller's contract is libc's.
            unsafe { traced_open(libc::AT_FDCWD, path, flags, || real(path, mode)) }
        }
    )*};
}
creat!(creat, creat64);

/// The `open` flags equivalent to an `fopen` mode string.
///
/// # Safety
/// `mode` is null or a NUL-terminated string.
unsafe fn fopen_flags(mode: *const c_char) -> c_int {
    if mode.is_null() {
        return libc::O_RDONLY;
    }
    // SAFETY: the caller passes a C string.
    let mode = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
    let plus = mode.contains(&b'+');
    let exclusive = if mode.contains(&b'x') {
        libc::O_EXCL
    } else {
        0
    };
    match mode.first() {
        Some(b'w') => {
            (if plus { libc::O_RDWR } else { libc::O_WRONLY })
                | libc::O_CREAT
                | libc::O_TRUNC
                | exclusive
        }
        Some(b'a') => {
            (if plus { libc::O_RDWR } else { libc::O_WRONLY })
                | libc::O_CREAT
                | libc::O_APPEND
                | exclusive
        }
        _ => {
            if plus {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            }
        }
    }
}

macro_rules! fopen {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let Some(real) = real::$name() else { return unavailable(std::ptr::null_mut()) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let flags = fopen_flags(mode);
                let mut file = std::ptr::null_mut();
                traced_open(libc::AT_FDCWD, path, flags, || {
                    file = real(path, mode);
                    if file.is_null() { -1 } else { libc::fileno(file) }
                });
                file
            }
        }
    )*};
}
fopen!(fopen, fopen64);

macro_rules! freopen {
    ($($name:ident),*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE {
            let Some(real) = real::$name() else { return unavailable(std::ptr::null_mut()) };
            // SAFETY: the caller's contract is libc's.
            unsafe {
                let flags = fopen_flags(mode);
                let mut file = std::ptr::null_mut();
                traced_open(libc::AT_FDCWD, path, flags, || {
                    file = real(path, mode, stream);
                    if file.is_null() { -1 } else { libc::fileno(file) }
                });
                file
            }
        }
    )*};
}
freopen!(freopen, freopen64);

/// A file `mkstemp` and its kin made: glibc opens it inside libc, past the
/// `open` hook, and a test (or the linker rustdoc runs) that later reads,
/// writes or removes it must find it its own, not a dependency.
///
/// # Safety
/// `template` is the caller's template, filled in by a successful call.
unsafe fn made_temporary(template: *const c_char, fd: c_int) {
    if fd >= 0 {
        // SAFETY: forwarded from the caller.
        observe(|_| unsafe { event(libc::AT_FDCWD, template, trace::CREATED, 0) });
    }
}

macro_rules! mkstemp_hook {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        $(
            /// # Safety
            /// As the libc function.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(template: *mut c_char $(, $arg: $ty)*) -> c_int {
                let Some(real) = real::$name() else {
                    return unavailable(-1);
                };
                // SAFETY: the caller's contract is libc's.
                unsafe {
                    let fd = real(template $(, $arg)*);
                    made_temporary(template, fd);
                    fd
                }
            }
        )*
    };
}

mkstemp_hook! {
    mkstemp();
    mkstemp64();
    mkostemp(flags: c_int);
    mkostemp64(flags: c_int);
    mkstemps(suffix: c_int);
    mkstemps64(suffix: c_int);
    mkostemps(suffix: c_int, flags: c_int);
    mkostemps64(suffix: c_int, flags: c_int);
}
