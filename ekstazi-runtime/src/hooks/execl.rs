//! `execl`, `execlp` and `execle`: variadic in C, so they cannot be written
//! as Rust functions on stable. Each is a small trampoline that spills the
//! argument registers next to the arguments the caller passed on the stack —
//! which makes the argument list one array in memory — and hands it to
//! [`execl_impl`], which builds an `argv` and goes through the `execve` and
//! `execvpe` hooks like any other program run.
//!
//! x86-64 only (System V: the first six integer arguments in `rdi`, `rsi`,
//! `rdx`, `rcx`, `r8`, `r9`, the rest on the stack above the return address).
//! Elsewhere glibc's own versions run; their child is still traced when it
//! inherits the environment.

use super::exec::{execve, execvpe};
use libc::{c_char, c_int};

const EXECL: c_int = 0;
const EXECLP: c_int = 1;
const EXECLE: c_int = 2;

/// Arguments after the path that arrive in registers.
const IN_REGISTERS: usize = 5;

macro_rules! trampoline {
    ($($name:ident => $variant:expr),*) => {$(
        /// # Safety
        /// As the libc function of the same name (a NULL-terminated list).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                // On entry rsp is 8 below a 16-byte boundary; 40 bytes keep
                // the call below aligned.
                "sub rsp, 40",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                // execl_impl(path = rdi, registers, stack arguments, variant)
                "mov rsi, rsp",
                "lea rdx, [rsp + 48]",
                "mov ecx, {variant}",
                "call {imp}",
                "add rsp, 40",
                "ret",
                variant = const $variant,
                imp = sym execl_impl,
            );
        }
    )*};
}
trampoline!(execl => EXECL, execlp => EXECLP, execle => EXECLE);

/// The `index`th variadic argument (counting from the one after the path).
///
/// # Safety
/// `index` is at most one past the list's terminating NULL (for `execle`'s
/// environment).
unsafe fn argument(
    registers: *const *const c_char,
    stack: *const *const c_char,
    index: usize,
) -> *const c_char {
    // SAFETY: the caller keeps `index` within what the caller of execl passed.
    unsafe {
        if index < IN_REGISTERS {
            *registers.add(index)
        } else {
            *stack.add(index - IN_REGISTERS)
        }
    }
}

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

/// # Safety
/// Called by the trampolines only, with the caller's argument list.
unsafe extern "C" fn execl_impl(
    path: *const c_char,
    registers: *const *const c_char,
    stack: *const *const c_char,
    variant: c_int,
) -> c_int {
    // SAFETY: the argument list ends with NULL (the caller's contract), and
    // `execle` passes the environment right after it.
    unsafe {
        let mut count = 0;
        while !argument(registers, stack, count).is_null() {
            count += 1;
        }
        let envp = if variant == EXECLE {
            argument(registers, stack, count + 1).cast::<*const c_char>()
        } else {
            environ
        };
        // The argv array: in fresh pages, which is safe after `fork`.
        let len = (count + 1) * size_of::<*const c_char>();
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if map == libc::MAP_FAILED {
            super::set_errno(libc::E2BIG);
            return -1;
        }
        let argv = map.cast::<*const c_char>();
        for i in 0..count {
            *argv.add(i) = argument(registers, stack, i);
        }
        *argv.add(count) = std::ptr::null();
        let result = if variant == EXECLP {
            execvpe(path, argv, envp)
        } else {
            execve(path, argv, envp)
        };
        let saved = super::errno();
        libc::munmap(map, len);
        super::set_errno(saved);
        result
    }
}
