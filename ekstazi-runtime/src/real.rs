//! The libc functions the hooks stand in front of, looked up once with
//! `dlsym(RTLD_NEXT, ..)`, and the shim's own ways to libc: `errno`, and
//! `syscall` for calls that are not the test's.

use libc::{
    DIR, FILE, c_char, c_int, c_uint, c_void, mode_t, pid_t, size_t, sockaddr, socklen_t, ssize_t,
};
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn errno() -> c_int {
    // SAFETY: the thread's errno slot always exists.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(value: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value }
}

/// libc's own `syscall()`, for the shim's own calls: they are not the
/// test's, and must not come back through the `syscall` hook.
pub fn libc_syscall() -> unsafe extern "C" fn(std::ffi::c_long, ...) -> std::ffi::c_long {
    syscall().unwrap_or(libc::syscall)
}

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
        /// Looks every function up (from the constructor).
        pub fn resolve_all() {
            $( let _ = $name(); )*
        }

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
    opendir: fn(*const c_char) -> *mut DIR;
    readdir: fn(*mut DIR) -> *mut c_void;
    readdir64: fn(*mut DIR) -> *mut c_void;
    readdir_r: fn(*mut DIR, *mut c_void, *mut *mut c_void) -> c_int;
    readdir64_r: fn(*mut DIR, *mut c_void, *mut *mut c_void) -> c_int;
    closedir: fn(*mut DIR) -> c_int;
    scandir: fn(*const c_char, *mut c_void, *mut c_void, *mut c_void) -> c_int;
    scandir64: fn(*const c_char, *mut c_void, *mut c_void, *mut c_void) -> c_int;
    scandirat: fn(c_int, *const c_char, *mut c_void, *mut c_void, *mut c_void) -> c_int;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;
    posix_spawn: fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
    system: fn(*const c_char) -> c_int;
    popen: fn(*const c_char, *const c_char) -> *mut FILE;
    posix_spawnp: fn(*mut pid_t, *const c_char, *const c_void, *const c_void, *const *mut c_char, *const *mut c_char) -> c_int;
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    bind: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: fn(c_int, *const libc::msghdr, c_int) -> ssize_t;
    getaddrinfo: fn(*const c_char, *const c_char, *const c_void, *mut c_void) -> c_int;
    gethostbyname: fn(*const c_char) -> *mut c_void;
    gethostbyname2: fn(*const c_char, c_int) -> *mut c_void;
    gethostbyname_r: fn(*const c_char, *mut c_void, *mut c_char, size_t, *mut *mut c_void, *mut c_int) -> c_int;
    gethostbyname2_r: fn(*const c_char, c_int, *mut c_void, *mut c_char, size_t, *mut *mut c_void, *mut c_int) -> c_int;
    gethostbyaddr: fn(*const c_void, socklen_t, c_int) -> *mut c_void;
    getnameinfo: fn(*const sockaddr, socklen_t, *mut c_char, socklen_t, *mut c_char, socklen_t, c_int) -> c_int;
    getservbyname: fn(*const c_char, *const c_char) -> *mut c_void;
    getservbyname_r: fn(*const c_char, *const c_char, *mut c_void, *mut c_char, size_t, *mut *mut c_void) -> c_int;
    getservbyport: fn(c_int, *const c_char) -> *mut c_void;
    tzset: fn() -> ();
    localtime: fn(*const libc::time_t) -> *mut c_void;
    localtime_r: fn(*const libc::time_t, *mut c_void) -> *mut c_void;
    mktime: fn(*mut c_void) -> libc::time_t;
    timelocal: fn(*mut c_void) -> libc::time_t;
    ctime: fn(*const libc::time_t) -> *mut c_char;
    ctime_r: fn(*const libc::time_t, *mut c_char) -> *mut c_char;
    setlocale: fn(c_int, *const c_char) -> *mut c_char;
    newlocale: fn(c_int, *const c_char, libc::locale_t) -> libc::locale_t;
    getpwnam: fn(*const c_char) -> *mut c_void;
    getpwuid: fn(libc::uid_t) -> *mut c_void;
    getpwnam_r: fn(*const c_char, *mut c_void, *mut c_char, size_t, *mut *mut c_void) -> c_int;
    getpwuid_r: fn(libc::uid_t, *mut c_void, *mut c_char, size_t, *mut *mut c_void) -> c_int;
    getpwent: fn() -> *mut c_void;
    getgrnam: fn(*const c_char) -> *mut c_void;
    getgrgid: fn(libc::gid_t) -> *mut c_void;
    getgrnam_r: fn(*const c_char, *mut c_void, *mut c_char, size_t, *mut *mut c_void) -> c_int;
    getgrgid_r: fn(libc::gid_t, *mut c_void, *mut c_char, size_t, *mut *mut c_void) -> c_int;
    getgrent: fn() -> *mut c_void;
    getgrouplist: fn(*const c_char, libc::gid_t, *mut libc::gid_t, *mut c_int) -> c_int;
    initgroups: fn(*const c_char, libc::gid_t) -> c_int;
    readlink: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t;
    realpath: fn(*const c_char, *mut c_char) -> *mut c_char;
    __realpath_chk: fn(*const c_char, *mut c_char, size_t) -> *mut c_char;
    canonicalize_file_name: fn(*const c_char) -> *mut c_char;
    dlopen: fn(*const c_char, c_int) -> *mut c_void;
    symlink: fn(*const c_char, *const c_char) -> c_int;
    symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int;
    link: fn(*const c_char, *const c_char) -> c_int;
    linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
    truncate: fn(*const c_char, libc::off_t) -> c_int;
    truncate64: fn(*const c_char, libc::off64_t) -> c_int;
    chdir: fn(*const c_char) -> c_int;
    mkstemp: fn(*mut c_char) -> c_int;
    mkstemp64: fn(*mut c_char) -> c_int;
    mkostemp: fn(*mut c_char, c_int) -> c_int;
    mkostemp64: fn(*mut c_char, c_int) -> c_int;
    mkstemps: fn(*mut c_char, c_int) -> c_int;
    mkstemps64: fn(*mut c_char, c_int) -> c_int;
    mkostemps: fn(*mut c_char, c_int, c_int) -> c_int;
    mkostemps64: fn(*mut c_char, c_int, c_int) -> c_int;
    glob: fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;
    glob64: fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;
    nftw: fn(*const c_char, unsafe extern "C" fn(*const c_char, *const c_void, c_int, *mut c_void) -> c_int, c_int, c_int) -> c_int;
    nftw64: fn(*const c_char, unsafe extern "C" fn(*const c_char, *const c_void, c_int, *mut c_void) -> c_int, c_int, c_int) -> c_int;
    ftw: fn(*const c_char, unsafe extern "C" fn(*const c_char, *const c_void, c_int) -> c_int, c_int) -> c_int;
    ftw64: fn(*const c_char, unsafe extern "C" fn(*const c_char, *const c_void, c_int) -> c_int, c_int) -> c_int;
    fts_read: fn(*mut c_void) -> *mut c_void;
    fts64_read: fn(*mut c_void) -> *mut c_void;
    __libc_start_main: fn(unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int, c_int, *mut *mut c_char, *mut c_void, *mut c_void, *mut c_void, *mut c_void) -> c_int;
    syscall: fn(libc::c_long, ...) -> libc::c_long;
    sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sigprocmask: fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    pthread_sigmask: fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
}
