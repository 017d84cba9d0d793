//! Running programs: the `exec` family and `posix_spawn`/`posix_spawnp`.
//!
//! Before the call, the hook records what the test runs: the program's file
//! (`X`, a content dependency: for a script that is the script, which the
//! program's own trace would not name), every `PATH` candidate that was
//! missing (`M`) for the `p` variants — creating one of them would change
//! which program runs —, and `U` when the program is one the shim cannot
//! follow into (statically linked, another ELF class or dynamic loader,
//! set-user-ID).
//!
//! The child carries the shim: when the environment passed to the call lacks
//! `LD_PRELOAD` with the shim or `EKSTAZI_TRACE_FILE` (a test that cleared or
//! replaced its child's environment), they are added to a copy of it. The
//! copy lives in pages from `mmap`, which is safe after `fork` (no
//! allocator lock), and is unmapped if the call returns. (After `vfork`, a
//! successful `exec` leaves those pages to the parent, which shares the
//! address space: a few kilobytes per such child, for C code that uses
//! `vfork` itself; glibc's `posix_spawn` does not come through here.)
//!
//! glibc's `execl`, `execlp` and `execle` are variadic; on x86-64 the
//! `execl` module interposes them and comes through here.

use super::{event, is_absence, kind_flags, unavailable};
use crate::environ::lookup;
use crate::{guard, own_vars, real, trace};
use libc::{c_char, c_int, c_void, pid_t};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A byte string written once by the constructor, read by hooks afterwards.
struct Prepared {
    bytes: UnsafeCell<[u8; 2 * libc::PATH_MAX as usize]>,
    len: AtomicUsize,
}

// SAFETY: written once, single-threaded, before any hook can read it; the
// length is published last.
unsafe impl Sync for Prepared {}

impl Prepared {
    const fn new() -> Prepared {
        Prepared {
            bytes: UnsafeCell::new([0; 2 * libc::PATH_MAX as usize]),
            len: AtomicUsize::new(0),
        }
    }

    /// Stores `prefix` + `value` + NUL, if it fits.
    ///
    /// # Safety
    /// Called from the constructor only.
    unsafe fn set(&self, prefix: &[u8], value: &[u8]) {
        // SAFETY: nothing reads before `len` is published.
        let bytes = unsafe { &mut *self.bytes.get() };
        let len = prefix.len() + value.len();
        if len + 1 > bytes.len() {
            return;
        }
        bytes[..prefix.len()].copy_from_slice(prefix);
        bytes[prefix.len()..len].copy_from_slice(value);
        bytes[len] = 0;
        self.len.store(len, Ordering::Release);
    }

    /// Without the NUL; empty if never set.
    fn get(&self) -> &[u8] {
        let len = self.len.load(Ordering::Acquire);
        // SAFETY: the first `len` bytes were written before `len` was published.
        unsafe { &(&*self.bytes.get())[..len] }
    }
}

/// `LD_PRELOAD=<the shim>`.
static PRELOAD: Prepared = Prepared::new();

const PRELOAD_NAME: &[u8] = b"LD_PRELOAD=";

/// Remembers the shim's own path (as the loader mapped it), which a child
/// needs in `LD_PRELOAD` to be traced.
///
/// # Safety
/// Called once, from the constructor.
pub unsafe fn prepare_children() {
    // SAFETY: dladdr fills `info` for an address inside the shim.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = prepare_children as *const c_void;
        if libc::dladdr(here, &mut info) != 0 && !info.dli_fname.is_null() {
            let shim = std::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
            if shim.starts_with(b"/") {
                PRELOAD.set(PRELOAD_NAME, shim);
            }
        }
    }
}

/// The shim's path, as `LD_PRELOAD` names it; empty if unknown.
pub fn shim_path() -> &'static [u8] {
    let preload = PRELOAD.get();
    preload.get(PRELOAD_NAME.len()..).unwrap_or_default()
}

/// An environment for a child: the caller's, or a copy with the shim added.
pub(super) struct ChildEnv {
    pub(super) envp: *const *const c_char,
    map: *mut c_void,
    map_len: usize,
}

impl ChildEnv {
    pub(super) fn unchanged(envp: *const *const c_char) -> ChildEnv {
        ChildEnv {
            envp,
            map: std::ptr::null_mut(),
            map_len: 0,
        }
    }
}

impl Drop for ChildEnv {
    fn drop(&mut self) {
        if !self.map.is_null() {
            let saved = super::errno();
            // SAFETY: unmapping the pages this value mapped.
            unsafe { libc::munmap(self.map, self.map_len) };
            super::set_errno(saved);
        }
    }
}

/// The value of the entry `name` (which ends with `=`) in `envp`.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn entry(envp: *const *const c_char, name: &[u8]) -> Option<&'static [u8]> {
    if envp.is_null() {
        return None;
    }
    let mut p = envp;
    // SAFETY: the caller's contract.
    unsafe {
        while !(*p).is_null() {
            let s = std::ffi::CStr::from_ptr(*p).to_bytes();
            if let Some(value) = s.strip_prefix(name) {
                return Some(value);
            }
            p = p.add(1);
        }
    }
    None
}

/// Whether `envp` has a variable called `name` (without `=`).
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
unsafe fn has_name(envp: *const *const c_char, name: &[u8]) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut p = envp;
    // SAFETY: the caller's contract.
    unsafe {
        while !(*p).is_null() {
            if own_vars::name_of(*p) == name {
                return true;
            }
            p = p.add(1);
        }
    }
    false
}

/// `envp`, or a copy in which the child will load the shim and find the
/// shim's variables this process keeps out of sight ([`own_vars`]): those
/// `envp` lacks are added, and named in [`own_vars::MARKER`], so that the
/// child's shim takes exactly them out of its program's sight again.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of C strings.
pub(super) unsafe fn child_env(envp: *const *const c_char) -> ChildEnv {
    let preload = PRELOAD.get();
    if preload.is_empty() {
        return ChildEnv::unchanged(envp);
    }
    let shim = &preload[PRELOAD_NAME.len()..];
    // SAFETY: the caller's contract.
    let old_preload = unsafe { entry(envp, PRELOAD_NAME) };
    let has_shim = old_preload.is_some_and(|value| {
        value
            .split(|b| *b == b':' || *b == b' ')
            .any(|item| item == shim)
    });
    let carried = own_vars::carried();
    let mut missing = [false; own_vars::MAX_CARRIED];
    let mut n_missing = 0;
    let mut names_len = 0;
    for (i, item) in carried.iter().enumerate() {
        // SAFETY: carried entries are C strings; `envp` is the caller's.
        let name = unsafe { own_vars::name_of(*item) };
        if !unsafe { has_name(envp, name) } {
            missing[i] = true;
            n_missing += 1;
            names_len += name.len() + 1;
        }
    }
    if has_shim && n_missing == 0 {
        return ChildEnv::unchanged(envp);
    }
    let mut count = 0;
    if !envp.is_null() {
        // SAFETY: the caller's contract.
        while unsafe { !(*envp.add(count)).is_null() } {
            count += 1;
        }
    }
    // The array (old entries, the preload, the carried ones, the marker,
    // NULL), then the new strings: the merged preload and the marker.
    let array = (count + n_missing + 3) * size_of::<*const c_char>();
    let merged_len = match old_preload {
        Some(old) if !has_shim => preload.len() + 1 + old.len() + 1,
        _ => 0,
    };
    let marker_len = own_vars::MARKER.len() + 1 + names_len + 1;
    let map_len = array + merged_len + marker_len;
    // SAFETY: an anonymous private mapping.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return ChildEnv::unchanged(envp);
    }
    let out = map.cast::<*const c_char>();
    let mut n = 0;
    // SAFETY: the mapping holds the array and the strings' bytes, counted
    // above; every piece written is within them.
    unsafe {
        let strings = map.cast::<u8>().add(array);
        let copy = |at: &mut usize, part: &[u8]| {
            std::ptr::copy_nonoverlapping(part.as_ptr(), strings.add(*at), part.len());
            *at += part.len();
        };
        let mut at = 0;
        for i in 0..count {
            let item = *envp.add(i);
            let s = std::ffi::CStr::from_ptr(item).to_bytes();
            if !has_shim && s.starts_with(PRELOAD_NAME) {
                continue;
            }
            *out.add(n) = item;
            n += 1;
        }
        if !has_shim {
            match old_preload {
                Some(old) => {
                    *out.add(n) = strings.add(at).cast();
                    for part in [preload, b":", old, b"\0"] {
                        copy(&mut at, part);
                    }
                }
                None => *out.add(n) = PRELOAD.bytes.get().cast(),
            }
            n += 1;
        }
        *out.add(n) = strings.add(at).cast();
        n += 1;
        copy(&mut at, own_vars::MARKER);
        copy(&mut at, b"=");
        let mut first = true;
        for (i, item) in carried.iter().enumerate() {
            if !missing[i] {
                continue;
            }
            *out.add(n) = *item;
            n += 1;
            if !first {
                copy(&mut at, b",");
            }
            first = false;
            copy(&mut at, own_vars::name_of(*item));
        }
        copy(&mut at, b"\0");
        *out.add(n) = std::ptr::null();
    }
    ChildEnv {
        envp: out,
        map,
        map_len,
    }
}

/// What a program file is, for the shim: `None` when the shim will load
/// into it; otherwise the flags of a `U` event.
///
/// # Safety
/// `fd` is an open descriptor.
unsafe fn untraceable(fd: c_int, depth: u32) -> Option<u8> {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: plain descriptor operations on a stack buffer.
    unsafe {
        if libc::fstat64(fd, st.as_mut_ptr()) != 0 {
            return None;
        }
        let st = st.assume_init();
        // The loader ignores LD_PRELOAD in a process that gained privileges:
        // through a set-user-ID or set-group-ID bit, or through file
        // capabilities (whether those raise this caller's privileges
        // depends on its own; any is taken to, which is only cautious).
        if (st.st_mode & libc::S_ISUID != 0 && st.st_uid != libc::getuid())
            || (st.st_mode & libc::S_ISGID != 0 && st.st_gid != libc::getgid())
            || libc::fgetxattr(fd, c"security.capability".as_ptr(), std::ptr::null_mut(), 0) > 0
        {
            return Some(trace::FLAG_OPTION);
        }
        let mut head = [0u8; 256];
        let n = libc::pread64(fd, head.as_mut_ptr().cast(), head.len(), 0);
        if n < 4 {
            return None;
        }
        let head = &head[..n as usize];
        if head.starts_with(b"#!") {
            return if depth == 0 {
                interpreter(&head[2..])
            } else {
                None
            };
        }
        if !head.starts_with(b"\x7fELF") || head.len() < 64 {
            return None; // not a format the shim can judge
        }
        // Another class (a 32-bit program) cannot load this shim.
        if head[4] != 2 {
            return Some(FOREIGN);
        }
        let e_type = u16::from_ne_bytes([head[16], head[17]]);
        let phoff = u64::from_ne_bytes(head[32..40].try_into().unwrap_or_default());
        let phentsize = usize::from(u16::from_ne_bytes([head[54], head[55]]));
        let phnum = usize::from(u16::from_ne_bytes([head[56], head[57]]));
        if !(e_type == 2 || e_type == 3) || phentsize < 4 {
            return None;
        }
        let mut table = [0u8; 64 * 56];
        let want = (phnum * phentsize).min(table.len());
        let got = libc::pread64(fd, table.as_mut_ptr().cast(), want, phoff as libc::off64_t);
        if got != want as isize {
            return None;
        }
        let Some(interp) = table[..want]
            .chunks_exact(phentsize)
            .find(|ph| u32::from_ne_bytes([ph[0], ph[1], ph[2], ph[3]]) == libc::PT_INTERP)
        else {
            return Some(0); // no loader: statically linked
        };
        if phentsize < 40 {
            return None;
        }
        // Another loader (musl's) would refuse this glibc shim.
        let offset = u64::from_ne_bytes(interp[8..16].try_into().unwrap_or_default());
        let size = u64::from_ne_bytes(interp[32..40].try_into().unwrap_or_default());
        let mut name = [0u8; 256];
        let size = (size as usize).min(name.len());
        if libc::pread64(fd, name.as_mut_ptr().cast(), size, offset as libc::off64_t)
            != size as isize
        {
            return None;
        }
        let name = &name[..size];
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        let base = &name[name.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1)..];
        (!base.starts_with(b"ld-linux")).then_some(FOREIGN)
    }
}

/// `U` flag: a program for another ELF class or another dynamic loader.
const FOREIGN: u8 = 8;

/// Judges the interpreter named on a `#!` line.
fn interpreter(line: &[u8]) -> Option<u8> {
    let line = &line[line
        .iter()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count()..];
    let len = line
        .iter()
        .position(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0))
        .unwrap_or(line.len());
    let mut path = [0u8; 256];
    if len == 0 || len >= path.len() {
        return None;
    }
    path[..len].copy_from_slice(&line[..len]);
    // SAFETY: `path` is NUL-terminated.
    unsafe {
        let fd = open_quietly(libc::AT_FDCWD, path.as_ptr().cast())?;
        let verdict = untraceable(fd, 1);
        libc::close(fd);
        verdict
    }
}

/// Opens a file for the shim's own reading, straight from the kernel (not
/// through the shim's `open`).
///
/// # Safety
/// `path` is a C string.
unsafe fn open_quietly(dirfd: c_int, path: *const c_char) -> Option<c_int> {
    // SAFETY: forwarded from the caller.
    unsafe { open_or_errno(dirfd, path) }.ok()
}

/// [`open_quietly`], with `errno` on failure.
///
/// # Safety
/// `path` is a C string.
unsafe fn open_or_errno(dirfd: c_int, path: *const c_char) -> Result<c_int, c_int> {
    // SAFETY: openat with a C string.
    let fd = unsafe {
        crate::real::libc_syscall()(
            libc::SYS_openat,
            dirfd,
            path,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(super::errno())
    } else {
        Ok(fd as c_int)
    }
}

/// Records the program at `path`: its file, and whether the shim can follow
/// into it; or its absence.
///
/// # Safety
/// `path` is null or a C string.
unsafe fn program(dirfd: c_int, path: *const c_char) {
    if path.is_null() {
        return;
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        match open_or_errno(dirfd, path) {
            Ok(fd) => {
                event(dirfd, path, trace::EXEC, 0);
                if let Some(flags) = untraceable(fd, 0) {
                    event(dirfd, path, trace::UNTRACEABLE, flags);
                }
                libc::close(fd);
            }
            Err(err) if is_absence(err) => event(dirfd, path, trace::MISSING, 0),
            // Unreadable but perhaps executable: its content cannot be
            // checksummed, which reruns the test; that is the safe side.
            Err(_) => event(dirfd, path, trace::EXEC, 0),
        }
    }
}

/// Records the program open as `fd`.
fn program_fd(fd: c_int) {
    match crate::path::EventBuf::of_fd(fd) {
        Some(mut buf) => {
            trace::record(trace::EXEC, 0, &mut buf);
            // SAFETY: `fd` is the caller's open descriptor.
            if let Some(flags) = unsafe { untraceable(fd, 0) } {
                trace::record(trace::UNTRACEABLE, flags, &mut buf);
            }
        }
        None => trace::record_lost(),
    }
}

/// Records the `PATH` search of the `p` variants for `file`, as glibc makes
/// it: every candidate that is missing, up to the first executable file.
///
/// # Safety
/// `file` is a C string.
unsafe fn search(file: *const c_char) {
    // SAFETY: the caller passes a C string.
    let name = unsafe { std::ffi::CStr::from_ptr(file) }.to_bytes();
    if name.contains(&b'/') {
        // SAFETY: as above.
        return unsafe { program(libc::AT_FDCWD, file) };
    }
    if name.is_empty() {
        return;
    }
    // The caller's PATH (glibc's rule, even when the child gets another
    // environment); read without recording it as a variable: the search
    // itself is recorded.
    // SAFETY: reading the environment.
    let path = unsafe { lookup(b"PATH") };
    let path: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: a value from `environ` is a C string.
        unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes()
    };
    let (Some(fstatat), Some(faccessat)) = (real::fstatat64(), real::faccessat()) else {
        return;
    };
    for dir in path.split(|b| *b == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let mut candidate = [0u8; libc::PATH_MAX as usize];
        let len = dir.len() + 1 + name.len();
        if len >= candidate.len() {
            continue;
        }
        candidate[..dir.len()].copy_from_slice(dir);
        candidate[dir.len()] = b'/';
        candidate[dir.len() + 1..len].copy_from_slice(name);
        let c = candidate.as_ptr().cast::<c_char>();
        let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
        // SAFETY: `c` is NUL-terminated; `st` is large enough.
        unsafe {
            if fstatat(libc::AT_FDCWD, c, st.as_mut_ptr().cast(), 0) != 0 {
                if is_absence(super::errno()) {
                    event(libc::AT_FDCWD, c, trace::MISSING, 0);
                }
                continue;
            }
            let mode = st.assume_init_ref().st_mode;
            if mode & libc::S_IFMT == libc::S_IFREG
                && faccessat(libc::AT_FDCWD, c, libc::X_OK, 0) == 0
            {
                return program(libc::AT_FDCWD, c);
            }
            event(libc::AT_FDCWD, c, trace::EXISTS, kind_flags(mode));
        }
    }
}

/// Before an `exec` replaces this process's image: its coverage is written
/// now (with `Q`), or it goes with the image. A process `fork`ed from a
/// test's own (as `Command` does with a `pre_exec` closure) ran the test
/// binary's code until here; without this, that test depended on its whole
/// binary. Outside the guard: writing the coverage enters it itself. When
/// the `exec` fails, the process goes on and reports again at exit.
fn replacing_image() {
    crate::coverage::flush();
}

/// Runs `describe` (recording what is about to run) and returns the child's
/// environment, unless this process is not traced or the shim itself is
/// calling; `errno` is left as it was.
fn before(envp: *const *const c_char, describe: impl FnOnce()) -> ChildEnv {
    let unchanged = ChildEnv::unchanged(envp);
    if !trace::enabled() {
        return unchanged;
    }
    let Some(_inside) = guard::enter() else {
        return unchanged;
    };
    let saved = super::errno();
    describe();
    // SAFETY: the caller passes the environment array the libc call takes.
    let env = unsafe { child_env(envp) };
    super::set_errno(saved);
    env
}

unsafe extern "C" {
    static mut environ: *const *const c_char;
}

fn current_environ() -> *const *const c_char {
    // SAFETY: reading the process's environment pointer.
    unsafe { environ }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::execve() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        replacing_image();
        let env = before(envp, || program(libc::AT_FDCWD, path));
        real(path, argv, env.envp)
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `execv` is `execve` with the current environment.
    unsafe { execve(path, argv, current_environ()) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::execvpe() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        replacing_image();
        let env = before(envp, || {
            if !file.is_null() {
                search(file)
            }
        });
        real(file, argv, env.envp)
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: `execvp` is `execvpe` with the current environment.
    unsafe { execvpe(file, argv, current_environ()) }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = real::fexecve() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        replacing_image();
        let env = before(envp, || program_fd(fd));
        real(fd, argv, env.envp)
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let Some(real) = real::execveat() else {
        return unavailable(-1);
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        replacing_image();
        let env = before(envp, || {
            if flags & libc::AT_EMPTY_PATH != 0 && (path.is_null() || *path == 0) {
                program_fd(dirfd);
            } else {
                program(dirfd, path);
            }
        });
        real(dirfd, path, argv, env.envp, flags)
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let Some(real) = real::posix_spawn() else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let env = before(envp.cast(), || program(libc::AT_FDCWD, path));
        real(pid, path, actions, attr, argv, env.envp.cast())
    }
}

/// # Safety
/// As the libc function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    let Some(real) = real::posix_spawnp() else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's contract is libc's.
    unsafe {
        let env = before(envp.cast(), || {
            if !file.is_null() {
                search(file)
            }
        });
        real(pid, file, actions, attr, argv, env.envp.cast())
    }
}
