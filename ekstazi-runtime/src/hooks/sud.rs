//! System calls made outside libc, made visible with syscall user dispatch
//! (`PR_SET_SYSCALL_USER_DISPATCH`, Linux 5.11).
//!
//! The hooks see what a process asks libc for. rustix's `linux_raw`
//! backend, and any code with a `syscall` instruction of its own, asks the
//! kernel directly: a test that reads a file that way would depend on it
//! unseen. So every traced thread asks the kernel to deliver SIGSYS for
//! each system call made from outside libc's text; the handler decodes the
//! call from the saved registers, makes it through libc's `syscall()`
//! (inside libc's text, so let through) via `hooks::raw::dispatch` — which
//! records it as the libc hook would — and puts the result where the
//! `syscall` instruction would have left it. Code inside libc, which is
//! nearly every system call a Rust or C program makes, pays nothing but
//! the kernel's slower entry path for a thread with dispatch on.
//!
//! Facts this relies on, checked on Linux 6.18 (not documented promises):
//! the setting is per thread and is *not* inherited — a thread made by
//! `pthread_create` and a child made by `fork` (libc's, or a raw one) both
//! start with dispatch off — and `execve` clears it. Hence every thread
//! arms itself as it starts (`pthread_create` starts it through
//! [`follow_thread`]'s trampoline), a forked child re-arms its one thread
//! (an at-fork handler, or the handler itself for a raw `fork`), and a
//! program the test runs arms itself in its own constructor.
//!
//! What the handler cannot make on the caller's behalf — a raw `clone` that
//! shares memory or gives the child a stack of its own (a thread or `vfork`
//! made without libc), `clone3`, and `rt_sigreturn` from a restorer outside
//! libc, all of which depend on the stack they were made on — it lets
//! through instead: dispatch goes off for that thread, the instruction runs
//! again, and a `G` event says the test always runs. A program that
//! installs a SIGSYS handler of its own through `sigaction` or `signal`
//! (LLVM's crash handlers do, so rustc and rustdoc do) keeps the shim's:
//! its action is kept aside and given every SIGSYS that dispatch did not
//! raise (a seccomp filter's trap, a `kill`), as it would be without the
//! shim; with none, such a SIGSYS gets the default action. One installed
//! by a raw `rt_sigaction` turns dispatch off for all threads (one shared
//! selector byte) and records `G`. SIGSYS blocked when a call
//! traps would be the process's death: the shim keeps it out of every
//! signal mask while dispatch is on, and its handler does not defer it.
//! Where the kernel refuses dispatch, the process records `G`: its raw
//! calls are unseen. The loader's (`ld.so`) own calls — opening the
//! libraries `dlopen` loads, which the `libs` hook records — are made
//! unrecorded.
//!
//! `EKSTAZI_NO_SUD=1` leaves dispatch off (and records `G`), to measure
//! what it costs.
//!
//! x86-64 only: elsewhere raw system calls stay unseen (a known limit).

#[cfg(target_arch = "x86_64")]
pub use imp::*;

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    /// Nothing to arm on this architecture.
    ///
    /// # Safety
    /// Called once, from the shim's constructor.
    pub unsafe fn init() {}

    /// Threads start as asked.
    pub fn follow_thread(
        start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
        arg: *mut libc::c_void,
    ) -> (
        extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
        *mut libc::c_void,
    ) {
        (start, arg)
    }

    /// Nothing to take back.
    pub fn forget_thread(_arg: *mut libc::c_void) {}
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use crate::hooks::raw;
    use crate::{real, trace};
    use libc::{c_int, c_long, c_ulong, c_void};
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

    const PR_SET_SYSCALL_USER_DISPATCH: c_int = 59;
    const PR_SYS_DISPATCH_OFF: c_ulong = 0;
    const PR_SYS_DISPATCH_ON: c_ulong = 1;
    /// The selector's values: let every call through, or trap those made
    /// outside the allowed region.
    const FILTER_ALLOW: u8 = 0;
    const FILTER_BLOCK: u8 = 1;
    /// `si_code` of a SIGSYS that dispatch raised.
    const SYS_USER_DISPATCH: c_int = 2;
    /// The length of the `syscall` instruction, to run it again.
    const SYSCALL_LEN: i64 = 2;

    /// Read by the kernel at every system call of every armed thread: one
    /// byte for the whole process, so that giving SIGSYS up reaches every
    /// thread at once.
    static SELECTOR: AtomicU8 = AtomicU8::new(FILTER_BLOCK);
    /// libc's executable segment: calls from there are let through.
    static LIBC_START: AtomicUsize = AtomicUsize::new(0);
    static LIBC_LEN: AtomicUsize = AtomicUsize::new(0);
    /// The loader's executable segment: its calls are made unrecorded.
    static LOADER_START: AtomicUsize = AtomicUsize::new(0);
    static LOADER_END: AtomicUsize = AtomicUsize::new(0);
    /// Whether threads arm themselves.
    static ACTIVE: AtomicBool = AtomicBool::new(false);

    /// Arms dispatch for the process's (only) thread, if it is traced.
    ///
    /// # Safety
    /// Called once, from the shim's constructor, after the trace was opened.
    pub unsafe fn init() {
        // Looked up now in every process, traced or not: libc's
        // `syscall()` is interposed, and std makes its futex calls through
        // it; a lookup on first use would take the loader's lock then.
        let _ = real::syscall();
        if !trace::enabled() {
            return;
        }
        // SAFETY: reading the environment, single-threaded.
        let off = unsafe { crate::environ::lookup(b"EKSTAZI_NO_SUD") };
        // SAFETY: a value from `environ` is a C string.
        if !off.is_null() && unsafe { std::ffi::CStr::from_ptr(off) }.to_bytes() == b"1" {
            return raw::unseen(b"system calls outside libc (EKSTAZI_NO_SUD=1)");
        }
        let Some(libc_at) = real::syscall().map(|f| f as usize) else {
            return raw::unseen(b"system calls outside libc (libc not found)");
        };
        let Some((start, end)) = text_of(|_, start, end| (start..end).contains(&libc_at)) else {
            return raw::unseen(b"system calls outside libc (libc not found)");
        };
        LIBC_START.store(start, Ordering::Relaxed);
        LIBC_LEN.store(end - start, Ordering::Relaxed);
        // SAFETY: getauxval has no preconditions.
        let loader = unsafe { libc::getauxval(libc::AT_BASE) } as usize;
        // 0 when the loader was run as a program (`ld.so ./test`): then
        // it is not told apart, and its rare calls are recorded.
        let found = (loader != 0).then(|| text_of(|base, _, _| base == loader));
        if let Some((start, end)) = found.flatten() {
            LOADER_START.store(start, Ordering::Relaxed);
            LOADER_END.store(end, Ordering::Relaxed);
        }
        if !install_handler() || !arm() {
            return raw::unseen(b"system calls outside libc (no syscall user dispatch)");
        }
        ACTIVE.store(true, Ordering::Relaxed);
        // SAFETY: registering a fork handler from the constructor.
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    }

    /// The first executable segment that `pick` chooses, by its object's
    /// load address and its own bounds.
    fn text_of<F: Fn(usize, usize, usize) -> bool>(pick: F) -> Option<(usize, usize)> {
        struct Search<F> {
            pick: F,
            found: Option<(usize, usize)>,
        }
        unsafe extern "C" fn each<F: Fn(usize, usize, usize) -> bool>(
            info: *mut libc::dl_phdr_info,
            _size: libc::size_t,
            data: *mut c_void,
        ) -> c_int {
            // SAFETY: `data` is the `Search` passed below; `info` is the
            // loader's description of one object, valid during the call.
            unsafe {
                let search = &mut *data.cast::<Search<F>>();
                let info = &*info;
                let base = info.dlpi_addr as usize;
                for i in 0..usize::from(info.dlpi_phnum) {
                    let ph = &*info.dlpi_phdr.add(i);
                    if ph.p_type != libc::PT_LOAD || ph.p_flags & libc::PF_X == 0 {
                        continue;
                    }
                    let start = base + ph.p_vaddr as usize;
                    let end = start + ph.p_memsz as usize;
                    if (search.pick)(base, start, end) {
                        search.found = Some((start, end));
                        return 1;
                    }
                }
            }
            0
        }
        let mut search = Search { pick, found: None };
        // SAFETY: the callback matches and `search` outlives the walk.
        unsafe { libc::dl_iterate_phdr(Some(each::<F>), (&raw mut search).cast::<c_void>()) };
        search.found
    }

    fn install_handler() -> bool {
        let Some(sigaction) = real::sigaction() else {
            return false;
        };
        // SAFETY: a zeroed `sigaction` is valid; the handler has the
        // `SA_SIGINFO` signature.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigsys as *const () as usize;
            // Not deferred: a call the handler makes for the caller can
            // block (a raw `read` of a pipe), and a signal handler that runs
            // meanwhile and traps in turn would find SIGSYS blocked, which
            // the kernel answers by killing the process.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) == 0
        }
    }

    /// Turns dispatch on for the calling thread. A thread that blocks
    /// SIGSYS (inherited from its creator or its parent) would die at its
    /// first trapped call: SIGSYS is unblocked first.
    fn arm() -> bool {
        // SAFETY: plain signal-set operations on our own set; the region
        // and the selector stay valid for the process's life (libc is
        // never unloaded; the selector is a static).
        unsafe {
            let mut sys: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut sys);
            libc::sigaddset(&mut sys, libc::SIGSYS);
            if let Some(mask) = real::pthread_sigmask() {
                mask(libc::SIG_UNBLOCK, &sys, std::ptr::null_mut());
            }
            libc::prctl(
                PR_SET_SYSCALL_USER_DISPATCH,
                PR_SYS_DISPATCH_ON,
                LIBC_START.load(Ordering::Relaxed) as c_ulong,
                LIBC_LEN.load(Ordering::Relaxed) as c_ulong,
                SELECTOR.as_ptr(),
            ) == 0
        }
    }

    /// Turns dispatch off for the calling thread.
    fn disarm() {
        // SAFETY: turning dispatch off takes no pointers.
        unsafe { libc::prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0) };
    }

    extern "C" fn forked_child() {
        if ACTIVE.load(Ordering::Relaxed) {
            arm();
        }
    }

    /// Whether installing `handler` for SIGSYS takes it from the shim. The
    /// default action is what the shim's handler gives every SIGSYS that
    /// is not its own (programs reset every signal to it for hygiene), and
    /// the shim's own handler is what a program restores when it puts back
    /// the action it found: neither takes anything.
    fn takes_sigsys(handler: usize) -> bool {
        handler != libc::SIG_DFL && handler != on_sigsys as *const () as usize
    }

    /// The program's own SIGSYS action, kept aside while the shim's handler
    /// stays installed: `PROGRAM_SET` says whether there is one (else the
    /// default action). Written by `sigaction`/`signal` (rare, and racing
    /// only with a SIGSYS that dispatch did not raise), read by the handler.
    struct ProgramAction(std::cell::UnsafeCell<std::mem::MaybeUninit<libc::sigaction>>);
    // SAFETY: see the comment above; a torn read could only mix two of the
    // program's own actions.
    unsafe impl Sync for ProgramAction {}
    static PROGRAM_ACTION: ProgramAction =
        ProgramAction(std::cell::UnsafeCell::new(std::mem::MaybeUninit::zeroed()));
    static PROGRAM_SET: AtomicBool = AtomicBool::new(false);

    /// The program's SIGSYS action as it would read it back: its own, or
    /// the default.
    fn program_action() -> libc::sigaction {
        if PROGRAM_SET.load(Ordering::Acquire) {
            // SAFETY: written whole before `PROGRAM_SET` was set.
            unsafe { (*PROGRAM_ACTION.0.get()).assume_init() }
        } else {
            // SAFETY: a zeroed `sigaction` is `SIG_DFL` with no flags.
            unsafe { std::mem::zeroed() }
        }
    }

    fn set_program_action(action: &libc::sigaction) {
        // SAFETY: see `ProgramAction`.
        unsafe { (*PROGRAM_ACTION.0.get()).write(*action) };
        PROGRAM_SET.store(true, Ordering::Release);
    }

    /// The process takes SIGSYS for itself behind the shim's back (a raw
    /// `rt_sigaction`): dispatch would deliver our traps to its handler,
    /// so it goes off everywhere, and what follows is unseen.
    fn give_up() {
        if ACTIVE.swap(false, Ordering::Relaxed) {
            SELECTOR.store(FILTER_ALLOW, Ordering::Relaxed);
            raw::unseen(b"a SIGSYS handler of its own");
        }
    }

    /// # Safety
    /// As the libc function.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn sigaction(
        sig: c_int,
        act: *const libc::sigaction,
        old: *mut libc::sigaction,
    ) -> c_int {
        let Some(real) = real::sigaction() else {
            return -1;
        };
        if sig == libc::SIGSYS && ACTIVE.load(Ordering::Relaxed) {
            // The shim's handler stays; the program's action is kept aside
            // for the SIGSYS dispatch does not raise, and read back as the
            // program set it.
            let before = program_action();
            if !act.is_null() {
                // SAFETY: `act` points to a `sigaction` (the caller's contract).
                let action = unsafe { *act };
                if action.sa_sigaction != on_sigsys as *const () as usize {
                    set_program_action(&action);
                }
            }
            if !old.is_null() {
                // SAFETY: `old` points to a `sigaction` (the caller's contract).
                unsafe { *old = before };
            }
            return 0;
        }
        if act.is_null() || !ACTIVE.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract is libc's.
            return unsafe { real(sig, act, old) };
        }
        // A handler that blocks every signal while it runs (a full
        // `sa_mask` is common) must still let a trapped call through.
        // SAFETY: `act` points to a `sigaction` (the caller's contract).
        let mut copy = unsafe { *act };
        // SAFETY: a valid signal set and signal number.
        unsafe { libc::sigdelset(&mut copy.sa_mask, libc::SIGSYS) };
        // SAFETY: the caller's contract is libc's, with our copy.
        unsafe { real(sig, &copy, old) }
    }

    macro_rules! mask_hook {
        ($($name:ident),*) => {$(
            /// # Safety
            /// As the libc function of the same name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(
                how: c_int,
                set: *const libc::sigset_t,
                old: *mut libc::sigset_t,
            ) -> c_int {
                let Some(real) = real::$name() else {
                    return libc::ENOSYS;
                };
                if set.is_null() || how == libc::SIG_UNBLOCK || !ACTIVE.load(Ordering::Relaxed) {
                    // SAFETY: the caller's contract is libc's.
                    return unsafe { real(how, set, old) };
                }
                // A blocked SIGSYS would turn the next trapped call into
                // the process's death: SIGSYS stays unblocked.
                // SAFETY: `set` points to a signal set (the caller's
                // contract); the copy is ours.
                unsafe {
                    let mut copy = *set;
                    libc::sigdelset(&mut copy, libc::SIGSYS);
                    real(how, &copy, old)
                }
            }
        )*};
    }
    mask_hook!(sigprocmask, pthread_sigmask);

    /// # Safety
    /// As the libc function.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
        if sig == libc::SIGSYS && ACTIVE.load(Ordering::Relaxed) {
            // Kept aside, as in `sigaction` (glibc's `signal` restarts
            // interrupted calls).
            let before = program_action().sa_sigaction;
            if handler != on_sigsys as *const () as usize {
                // SAFETY: a zeroed `sigaction` is valid; filled below.
                let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
                action.sa_sigaction = handler;
                action.sa_flags = libc::SA_RESTART;
                set_program_action(&action);
            }
            return before;
        }
        let Some(real) = real::signal() else {
            return libc::SIG_ERR;
        };
        // SAFETY: the caller's contract is libc's.
        unsafe { real(sig, handler) }
    }

    /// Threads waiting to start: what `pthread_create` was asked to run.
    /// Fixed and lock-free, like every table of the shim; a slot is free
    /// again as soon as its thread starts.
    const THREAD_SLOTS: usize = 1024;
    struct Slot {
        start: AtomicUsize,
        arg: AtomicUsize,
    }
    static THREADS: [Slot; THREAD_SLOTS] = [const {
        Slot {
            start: AtomicUsize::new(0),
            arg: AtomicUsize::new(0),
        }
    }; THREAD_SLOTS];

    type Start = extern "C" fn(*mut c_void) -> *mut c_void;

    /// What `pthread_create` should start instead, so that the new thread
    /// arms itself first. Past [`THREAD_SLOTS`] threads not yet started,
    /// a thread starts unarmed and the test always runs.
    pub fn follow_thread(start: Start, arg: *mut c_void) -> (Start, *mut c_void) {
        if !ACTIVE.load(Ordering::Relaxed) {
            return (start, arg);
        }
        for slot in &THREADS {
            if slot
                .start
                .compare_exchange(0, start as usize, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                slot.arg.store(arg as usize, Ordering::Relaxed);
                return (trampoline, std::ptr::from_ref(slot).cast_mut().cast());
            }
        }
        raw::unseen(b"a thread started unfollowed (too many at once)");
        (start, arg)
    }

    /// Frees the slot of a thread `pthread_create` did not start.
    pub fn forget_thread(arg: *mut c_void) {
        if let Some(slot) = THREADS
            .iter()
            .find(|slot| std::ptr::from_ref(*slot).cast::<c_void>() == arg.cast_const())
        {
            slot.start.store(0, Ordering::Release);
        }
    }

    extern "C" fn trampoline(slot: *mut c_void) -> *mut c_void {
        // SAFETY: `slot` is the one `follow_thread` filled for this thread;
        // `pthread_create` orders its stores before the thread starts.
        let slot = unsafe { &*slot.cast::<Slot>() };
        let start = slot.start.load(Ordering::Relaxed);
        let arg = slot.arg.load(Ordering::Relaxed) as *mut c_void;
        slot.start.store(0, Ordering::Release);
        if ACTIVE.load(Ordering::Relaxed) {
            arm();
        }
        // SAFETY: `start` is the routine the caller gave `pthread_create`.
        let start = unsafe { std::mem::transmute::<usize, Start>(start) };
        start(arg)
    }

    /// The SIGSYS handler: makes the trapped call, as the hooks would.
    extern "C" fn on_sigsys(_sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
        let saved = crate::real::errno();
        // SAFETY: the kernel passes a valid siginfo and ucontext to a
        // `SA_SIGINFO` handler; the registers are the trapped call's.
        unsafe {
            if (*info).si_code != SYS_USER_DISPATCH {
                return program_sigsys(info, context);
            }
            let uc = &mut *context.cast::<libc::ucontext_t>();
            let result = make(uc);
            if let Some(result) = result {
                uc.uc_mcontext.gregs[libc::REG_RAX as usize] = result;
            }
        }
        crate::real::set_errno(saved);
    }

    /// A SIGSYS that dispatch did not raise (a seccomp filter's trap, a
    /// `kill`): the program's own action, as without the shim.
    ///
    /// # Safety
    /// From the SIGSYS handler, with what the kernel passed it.
    unsafe fn program_sigsys(info: *mut libc::siginfo_t, context: *mut c_void) {
        let action = program_action();
        match action.sa_sigaction {
            libc::SIG_DFL => default_action(),
            libc::SIG_IGN => {}
            handler if action.sa_flags & libc::SA_SIGINFO != 0 => {
                // SAFETY: the program installed it as an `SA_SIGINFO` handler.
                let handler = unsafe {
                    std::mem::transmute::<
                        usize,
                        extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void),
                    >(handler)
                };
                handler(libc::SIGSYS, info, context);
            }
            handler => {
                // SAFETY: the program installed it as a plain handler.
                let handler =
                    unsafe { std::mem::transmute::<usize, extern "C" fn(c_int)>(handler) };
                handler(libc::SIGSYS);
            }
        }
    }

    /// What would have happened to a SIGSYS without any handler.
    fn default_action() {
        // SAFETY: resetting SIGSYS and raising it; delivered at once, with
        // the default action (this handler does not defer SIGSYS).
        unsafe {
            if let Some(signal) = real::signal() {
                signal(libc::SIGSYS, libc::SIG_DFL);
            }
            libc::raise(libc::SIGSYS);
        }
    }

    /// Makes the trapped call and returns what `rax` should hold, or
    /// `None` when the instruction is to run again (with dispatch off).
    ///
    /// # Safety
    /// `uc` is the context of a call trapped by dispatch.
    unsafe fn make(uc: &mut libc::ucontext_t) -> Option<c_long> {
        let g = &uc.uc_mcontext.gregs;
        let nr = g[libc::REG_RAX as usize];
        let a = [
            g[libc::REG_RDI as usize],
            g[libc::REG_RSI as usize],
            g[libc::REG_RDX as usize],
            g[libc::REG_R10 as usize],
            g[libc::REG_R8 as usize],
            g[libc::REG_R9 as usize],
        ];
        let at = g[libc::REG_RIP as usize] as usize;
        if (LOADER_START.load(Ordering::Relaxed)..LOADER_END.load(Ordering::Relaxed)).contains(&at)
        {
            // SAFETY: the loader's own call, made for it.
            return Some(kernel_result(unsafe { raw::forward(nr, a) }));
        }
        let on_callers_stack = match nr {
            libc::SYS_rt_sigreturn | libc::SYS_clone3 | libc::SYS_vfork => true,
            // A child on a stack of its own would return from libc's
            // `syscall()` on that stack, not to the caller's code.
            libc::SYS_clone => a[0] as c_int & libc::CLONE_VM != 0 || a[1] != 0,
            _ => false,
        };
        if on_callers_stack {
            raw::unseen_call(nr);
            disarm();
            let g = &mut uc.uc_mcontext.gregs;
            g[libc::REG_RIP as usize] -= SYSCALL_LEN;
            return None; // `rax` still holds the call's number
        }
        let result = match nr {
            libc::SYS_rt_sigaction if a[0] as c_int == libc::SIGSYS && a[1] != 0 => {
                // SAFETY: the kernel's `struct sigaction` starts with the
                // handler; the caller passed one there.
                if takes_sigsys(unsafe { *(a[1] as *const usize) }) {
                    give_up();
                } else {
                    // Kept, as in `sigaction`: only the old action is read.
                    let mut a = a;
                    a[1] = 0;
                    // SAFETY: the caller's call without the new action.
                    return Some(kernel_result(unsafe { raw::forward(nr, a) }));
                }
                // SAFETY: the caller's call, made for it.
                unsafe { raw::forward(nr, a) }
            }
            // SAFETY: the context is the trapped one.
            libc::SYS_rt_sigprocmask => unsafe { emulate_sigprocmask(uc, a) },
            libc::SYS_sigaltstack => {
                // SAFETY: the caller's call, made for it.
                let result = unsafe { raw::forward(nr, a) };
                if result == 0 && a[0] != 0 {
                    // Returning from this handler restores the alternate
                    // stack from the context: make it the new one.
                    // SAFETY: the kernel just read a `stack_t` there.
                    uc.uc_stack = unsafe { *(a[0] as *const libc::stack_t) };
                }
                result
            }
            libc::SYS_fork | libc::SYS_clone => {
                // SAFETY: the caller's call, made for it; without shared
                // memory the child returns through this handler on its
                // own copy of the stack.
                let result = unsafe { raw::forward(nr, a) };
                if result == 0 && ACTIVE.load(Ordering::Relaxed) {
                    arm();
                }
                result
            }
            libc::SYS_execve | libc::SYS_execveat => {
                // The program starts with the mask the caller had, not with
                // whatever this handler runs with.
                if let Some(mask) = real::pthread_sigmask() {
                    // SAFETY: the context's mask is a valid signal set.
                    unsafe { mask(libc::SIG_SETMASK, &uc.uc_sigmask, std::ptr::null_mut()) };
                }
                // SAFETY: the caller's call, recorded and made for it.
                unsafe { raw::dispatch(nr, a) }
            }
            libc::SYS_rt_sigaction if a[1] != 0 && ACTIVE.load(Ordering::Relaxed) => {
                // As `sigaction`: the handler's mask leaves SIGSYS out. The
                // kernel's `struct sigaction`: handler, flags, restorer, mask.
                // SAFETY: the caller passed one there.
                let mut copy = unsafe { *(a[1] as *const [u64; 4]) };
                copy[3] &= !sigsys_bit();
                let mut a = a;
                a[1] = (&raw const copy) as c_long;
                // SAFETY: the caller's call, made for it with our copy.
                unsafe { raw::forward(nr, a) }
            }
            // SAFETY: the caller's call, recorded and made for it.
            _ => unsafe { raw::dispatch(nr, a) },
        };
        Some(kernel_result(result))
    }

    /// The kernel's convention from libc's: `-errno` for `-1`.
    fn kernel_result(result: c_long) -> c_long {
        if result == -1 {
            -c_long::from(crate::real::errno())
        } else {
            result
        }
    }

    /// SIGSYS in the kernel's signal mask: never blocked while dispatch
    /// is on (see `arm`).
    fn sigsys_bit() -> u64 {
        if ACTIVE.load(Ordering::Relaxed) {
            1 << (libc::SIGSYS - 1)
        } else {
            0
        }
    }

    /// `rt_sigprocmask` on the mask the trapped code will return to (the
    /// mask the handler runs with is dropped when it returns).
    ///
    /// # Safety
    /// `a` are the call's arguments, its pointers the caller's.
    unsafe fn emulate_sigprocmask(uc: &mut libc::ucontext_t, a: raw::Args) -> c_long {
        if a[3] as usize != std::mem::size_of::<u64>() {
            crate::real::set_errno(libc::EINVAL);
            return -1;
        }
        let mask = (&raw mut uc.uc_sigmask).cast::<u64>();
        // SAFETY: the kernel's mask is the first word of the context's.
        let old = unsafe { *mask };
        let set = a[1] as *const u64;
        let new = if set.is_null() {
            old
        } else {
            // SAFETY: the caller passed a mask there.
            let set = unsafe { *set };
            match a[0] as c_int {
                libc::SIG_BLOCK => old | set,
                libc::SIG_UNBLOCK => old & !set,
                libc::SIG_SETMASK => set,
                _ => {
                    crate::real::set_errno(libc::EINVAL);
                    return -1;
                }
            }
        };
        let unblockable =
            (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1)) | sigsys_bit();
        let oldset = a[2] as *mut u64;
        // SAFETY: the caller's buffer for the old mask, and the context's.
        unsafe {
            if !oldset.is_null() {
                *oldset = old;
            }
            *mask = new & !unblockable;
        }
        0
    }
}
