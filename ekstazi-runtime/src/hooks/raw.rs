//! System calls made without libc's wrappers: through libc's `syscall()`
//! function, or (trapped by syscall user dispatch, `super::sud`) with a
//! `syscall` instruction of the program's own, as rustix's `linux_raw`
//! backend does.
//!
//! Both reach [`dispatch`], which sends every call the libc hooks would
//! have seen through the very hook of the libc function that makes it —
//! so that a file read by raw `openat` is recorded exactly as one read by
//! `open` — and passes every other call to libc's `syscall()` unchanged.
//! A call that reveals the file system in a way no hook describes (a file
//! opened by handle) and io_uring (whose reads and writes the kernel makes
//! on the process's behalf, with no call the shim could trap) record a `G`
//! event instead: the test always runs, with the reason.
//!
//! The hooks are libc-shaped (`-1` and `errno`), and so is [`dispatch`];
//! the SIGSYS handler turns that into the kernel's `-errno`.

use crate::{guard, real, trace};
use libc::{c_char, c_int, c_long, c_uint, c_void, mode_t, size_t};

/// The arguments of a system call, as the kernel takes them.
pub type Args = [c_long; 6];

/// The libc hook for a system call that names a path, and the call's
/// arguments converted to the hook's types.
macro_rules! hook {
    ($module:ident :: $name:ident ( $($arg:expr => $ty:ty),* )) => {
        // SAFETY: the arguments are the caller's system call's, which the
        // kernel would have read with these types; the hook has libc's
        // contract for the same call.
        (unsafe { super::$module::$name($($arg as $ty),*) }) as c_long
    };
}

/// Makes system call `nr` as libc's wrappers would, recording what it
/// reveals when it is one the hooks describe; `-1` with `errno` on failure.
///
/// # Safety
/// `nr` and `a` are a system call the caller is entitled to make: the
/// pointers among them are what the kernel would read or write.
pub unsafe fn dispatch(nr: c_long, a: Args) -> c_long {
    if !trace::enabled() || guard::inside() {
        // SAFETY: forwarded from the caller.
        return unsafe { forward(nr, a) };
    }
    let p = |i: usize| a[i] as *const c_char;
    match nr {
        libc::SYS_openat => {
            hook!(files::openat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, a[3] => c_uint))
        }
        libc::SYS_openat2 => {
            // SAFETY: forwarded from the caller.
            unsafe { openat2(a) }
        }
        libc::SYS_newfstatat => {
            hook!(stat::fstatat(a[0] => c_int, p(1) => *const c_char, a[2] => *mut c_void, a[3] => c_int))
        }
        libc::SYS_statx => {
            hook!(stat::statx(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, a[3] => c_uint, a[4] => *mut c_void))
        }
        libc::SYS_faccessat => {
            hook!(stat::faccessat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, 0 => c_int))
        }
        libc::SYS_faccessat2 => {
            hook!(stat::faccessat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, a[3] => c_int))
        }
        libc::SYS_readlinkat => {
            hook!(links::readlinkat(a[0] => c_int, p(1) => *const c_char, a[2] => *mut c_char, a[3] => size_t))
        }
        libc::SYS_mkdirat => {
            hook!(namespace::mkdirat(a[0] => c_int, p(1) => *const c_char, a[2] => mode_t))
        }
        libc::SYS_unlinkat => {
            hook!(namespace::unlinkat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int))
        }
        libc::SYS_renameat2 => {
            hook!(namespace::renameat2(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, p(3) => *const c_char, a[4] => c_uint))
        }
        libc::SYS_linkat => {
            hook!(namespace::linkat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, p(3) => *const c_char, a[4] => c_int))
        }
        libc::SYS_symlinkat => {
            hook!(namespace::symlinkat(p(0) => *const c_char, a[1] => c_int, p(2) => *const c_char))
        }
        libc::SYS_truncate => {
            hook!(namespace::truncate(p(0) => *const c_char, a[1] => libc::off_t))
        }
        libc::SYS_chdir => hook!(namespace::chdir(p(0) => *const c_char)),
        libc::SYS_execve => {
            hook!(exec::execve(p(0) => *const c_char, a[1] => *const *const c_char, a[2] => *const *const c_char))
        }
        libc::SYS_execveat => {
            hook!(exec::execveat(a[0] => c_int, p(1) => *const c_char, a[2] => *const *const c_char, a[3] => *const *const c_char, a[4] => c_int))
        }
        libc::SYS_getdents64 => {
            // SAFETY: forwarded from the caller.
            let n = unsafe { forward(nr, a) };
            if n >= 0 {
                super::dirs::record_listing(a[0] as c_int);
            }
            n
        }
        libc::SYS_io_uring_setup => {
            unseen(b"io_uring");
            // SAFETY: forwarded from the caller.
            unsafe { forward(nr, a) }
        }
        libc::SYS_name_to_handle_at | libc::SYS_open_by_handle_at => {
            unseen_call(nr);
            // SAFETY: forwarded from the caller.
            unsafe { forward(nr, a) }
        }
        // SAFETY: forwarded from the caller.
        _ => unsafe { legacy(nr, a) },
    }
}

/// The calls x86-64 keeps from before the `*at` family (and `renameat`,
/// which the libc crate names on x86-64 only).
///
/// # Safety
/// As [`dispatch`].
#[cfg(target_arch = "x86_64")]
unsafe fn legacy(nr: c_long, a: Args) -> c_long {
    let p = |i: usize| a[i] as *const c_char;
    match nr {
        libc::SYS_open => hook!(files::open(p(0) => *const c_char, a[1] => c_int, a[2] => c_uint)),
        libc::SYS_creat => hook!(files::creat(p(0) => *const c_char, a[1] => mode_t)),
        libc::SYS_stat => hook!(stat::stat(p(0) => *const c_char, a[1] => *mut c_void)),
        libc::SYS_lstat => hook!(stat::lstat(p(0) => *const c_char, a[1] => *mut c_void)),
        libc::SYS_access => hook!(stat::access(p(0) => *const c_char, a[1] => c_int)),
        libc::SYS_readlink => {
            hook!(links::readlink(p(0) => *const c_char, a[1] => *mut c_char, a[2] => size_t))
        }
        libc::SYS_mkdir => hook!(namespace::mkdir(p(0) => *const c_char, a[1] => mode_t)),
        libc::SYS_unlink => hook!(namespace::unlink(p(0) => *const c_char)),
        libc::SYS_rmdir => hook!(namespace::rmdir(p(0) => *const c_char)),
        libc::SYS_renameat => {
            hook!(namespace::renameat(a[0] => c_int, p(1) => *const c_char, a[2] => c_int, p(3) => *const c_char))
        }
        libc::SYS_rename => hook!(namespace::rename(p(0) => *const c_char, p(1) => *const c_char)),
        libc::SYS_link => hook!(namespace::link(p(0) => *const c_char, p(1) => *const c_char)),
        libc::SYS_symlink => {
            hook!(namespace::symlink(p(0) => *const c_char, p(1) => *const c_char))
        }
        libc::SYS_getdents => {
            // SAFETY: forwarded from the caller.
            let n = unsafe { forward(nr, a) };
            if n >= 0 {
                super::dirs::record_listing(a[0] as c_int);
            }
            n
        }
        libc::SYS_uselib => {
            unseen_call(nr);
            // SAFETY: forwarded from the caller.
            unsafe { forward(nr, a) }
        }
        // SAFETY: forwarded from the caller.
        _ => unsafe { forward(nr, a) },
    }
}

/// # Safety
/// As [`dispatch`].
#[cfg(not(target_arch = "x86_64"))]
unsafe fn legacy(nr: c_long, a: Args) -> c_long {
    // SAFETY: forwarded from the caller.
    unsafe { forward(nr, a) }
}

/// `openat2`, which glibc has no wrapper for: the flags are in a struct.
///
/// # Safety
/// As [`dispatch`].
unsafe fn openat2(a: Args) -> c_long {
    /// `struct open_how`'s first field; later ones (`mode`, `resolve`) do
    /// not change what the call reveals.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
    }
    let how = a[2] as *const OpenHow;
    if how.is_null() || (a[3] as usize) < std::mem::size_of::<OpenHow>() {
        // SAFETY: forwarded from the caller (the kernel refuses it).
        return unsafe { forward(libc::SYS_openat2, a) };
    }
    // SAFETY: the kernel reads at least this much from `how`.
    let flags = unsafe { (*how).flags } as c_int;
    // SAFETY: as above; the path is the call's.
    let fd = unsafe {
        super::files::traced_open(a[0] as c_int, a[1] as *const c_char, flags, || {
            forward(libc::SYS_openat2, a) as c_int
        })
    };
    c_long::from(fd)
}

/// Makes the call through libc's own `syscall()`, which lies inside
/// libc's text: syscall user dispatch lets it through.
///
/// # Safety
/// As [`dispatch`].
pub unsafe fn forward(nr: c_long, a: Args) -> c_long {
    let Some(real) = real::syscall() else {
        return super::unavailable(-1);
    };
    // SAFETY: forwarded from the caller.
    unsafe { real(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// Records a channel the shim cannot see: the test always runs.
pub fn unseen(reason: &[u8]) {
    if !trace::enabled() {
        return;
    }
    let Some(_inside) = guard::enter() else {
        return;
    };
    let saved = super::errno();
    trace::record_unseen(reason);
    super::set_errno(saved);
}

/// Records that system call `nr` was made in a way the shim cannot decode.
pub fn unseen_call(nr: c_long) {
    let mut text = [0u8; 48];
    let len = call_text(nr, &mut text);
    unseen(&text[..len]);
}

/// `system call <nr> outside libc`, written without allocating.
fn call_text(nr: c_long, text: &mut [u8; 48]) -> usize {
    let head = b"system call ";
    let tail = b" outside libc";
    text[..head.len()].copy_from_slice(head);
    let mut len = head.len();
    let mut digits = [0u8; 20];
    let mut n = nr.unsigned_abs();
    let mut count = 0;
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for d in digits[..count].iter().rev() {
        text[len] = *d;
        len += 1;
    }
    text[len..len + tail.len()].copy_from_slice(tail);
    len + tail.len()
}

/// libc's `syscall()`: a program (or a crate such as std, for futexes)
/// names the system call itself. Variadic in C; as with `open`, the six
/// arguments are taken as fixed ones, which on the x86-64 and AArch64
/// Linux ABIs are where a variadic caller put them (the sixth is read from
/// the caller's stack on x86-64, harmless when it passed fewer).
///
/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a0: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) -> c_long {
    // SAFETY: the caller's contract is libc's.
    unsafe { dispatch(nr, [a0, a1, a2, a3, a4, a5]) }
}

#[cfg(test)]
mod tests {
    use super::call_text;

    #[test]
    fn an_undecoded_call_is_named_by_its_number() {
        for (nr, text) in [
            (437, "system call 437 outside libc"),
            (0, "system call 0 outside libc"),
        ] {
            let mut buf = [0u8; 48];
            let len = call_text(nr, &mut buf);
            assert_eq!(&buf[..len], text.as_bytes());
        }
    }
}
