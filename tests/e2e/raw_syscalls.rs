//! System calls made outside libc, on the `rawsys` fixture: a
//! test that reads a file through rustix's `linux_raw` backend depends on
//! it as one that reads through libc does (syscall user dispatch shows the
//! shim the call), and a test that sets io_uring up, whose file accesses
//! the shim cannot see, runs every time and says why. The `dispatch`
//! module checks, on the shim alone, the cases dispatch must survive.

use crate::support::{Fixture, labels};

const RAW_READER: &str = "rawsys::raw reads_through_raw_system_calls";
const NEIGHBOUR: &str = "rawsys::raw reads_nothing";
const IO_URING: &str = "rawsys::raw sets_up_io_uring";
const UNSEEN: &str = "always runs: it uses a channel the shim cannot see: io_uring";

#[test]
fn a_file_read_with_raw_system_calls_selects_its_reader_alone() {
    let f = Fixture::new("rawsys");
    let first = f.test_ok(&[]);
    assert_eq!(
        first.ran(),
        labels(&[RAW_READER, NEIGHBOUR, IO_URING]),
        "{first:?}"
    );
    // Nothing changed: only the test the shim cannot follow runs.
    let io_uring_only = vec![(IO_URING.to_owned(), vec![UNSEEN.to_owned()])];
    assert_eq!(f.selected(&[]), io_uring_only);
    // `why` names the channel, and the raw reader's file.
    let why = f.run(&["why", "sets_up_io_uring"]);
    assert!(
        why.stdout
            .contains("it uses a channel the shim cannot see: io_uring"),
        "{why:?}"
    );
    let why = f.run(&["why", "--all", "reads_through_raw_system_calls"]);
    assert!(why.stdout.contains("data/raw.txt"), "{why:?}");

    f.write("data/raw.txt", "other bytes\n");
    assert_eq!(
        f.selected(&[]),
        vec![
            (
                RAW_READER.to_owned(),
                vec!["file changed: data/raw.txt".to_owned()]
            ),
            (IO_URING.to_owned(), vec![UNSEEN.to_owned()]),
        ]
    );
    // The reader now fails (it asserts the old bytes): put them back, and
    // the record it had still holds.
    f.write("data/raw.txt", "raw bytes\n");
    assert_eq!(f.selected(&[]), io_uring_only);
    assert!(!f.selected(&[]).iter().any(|(label, _)| label == NEIGHBOUR));
}

/// The shim on its own (as in the `shim` module): this binary runs itself
/// again with the shim preloaded, one probe per case that syscall user
/// dispatch must survive, each making its system calls with a `syscall`
/// instruction of its own.
#[cfg(target_arch = "x86_64")]
mod dispatch {
    use crate::support::traced_child;
    use ekstazi_core::capture::trace::{Access, Event};
    use std::ffi::OsStr;
    use std::path::Path;

    const PROBE: &str = "RAW_SYSCALLS_PROBE";

    fn traced(probe: &str, dir: &Path) -> Vec<Event> {
        traced_child(
            &["--exact", "raw_syscalls::dispatch::child", "--nocapture"],
            &[(PROBE, OsStr::new(probe))],
            probe,
            dir,
        )
        .events
    }

    /// `openat(AT_FDCWD, path, O_RDONLY)` with this code's own `syscall`.
    fn raw_open(path: &std::ffi::CStr) -> i64 {
        let fd: i64;
        // SAFETY: openat reads the C string; the clobbers are the ones the
        // `syscall` instruction makes.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_openat => fd,
                in("rdi") libc::AT_FDCWD as i64,
                in("rsi") path.as_ptr(),
                in("rdx") libc::O_RDONLY as i64,
                in("r10") 0i64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        fd
    }

    /// `execve(path, argv, environ)` with this code's own `syscall`;
    /// returns only on failure.
    ///
    /// # Safety
    /// `argv` is a NULL-terminated array of C strings.
    unsafe fn raw_exec(path: &std::ffi::CStr, argv: *const *const libc::c_char) {
        unsafe extern "C" {
            static environ: *const *const libc::c_char;
        }
        // SAFETY: the caller's arguments, and the process's environment.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") libc::SYS_execve => _,
                in("rdi") path.as_ptr(),
                in("rsi") argv,
                in("rdx") environ,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
    }

    /// The child: the probe's calls, in the scratch directory.
    #[test]
    fn child() {
        let Ok(probe) = std::env::var(PROBE) else {
            return;
        };
        static CAUGHT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        extern "C" fn on_sigsys(_: libc::c_int) {
            CAUGHT.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: plain calls with valid arguments; the forked child only
        // makes a system call and exits.
        unsafe {
            match probe.as_str() {
                "main" => assert!(raw_open(c"main.txt") >= 0),
                "missing" => assert!(raw_open(c"absent.txt") < 0),
                "thread" => {
                    std::thread::spawn(|| assert!(raw_open(c"thread.txt") >= 0))
                        .join()
                        .unwrap();
                }
                "fork" => {
                    let pid = libc::fork();
                    if pid == 0 {
                        raw_open(c"forked.txt");
                        libc::_exit(0);
                    }
                    let mut status = 0;
                    libc::waitpid(pid, &mut status, 0);
                    assert_eq!(status, 0);
                }
                "all-signals-blocked" => {
                    let mut all = std::mem::zeroed();
                    libc::sigfillset(&mut all);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
                    assert!(raw_open(c"main.txt") >= 0);
                }
                "sigsys-handler" => {
                    // As LLVM's crash handlers (rustc, rustdoc) install one.
                    let before =
                        libc::signal(libc::SIGSYS, on_sigsys as *const () as libc::sighandler_t);
                    assert_eq!(before, libc::SIG_DFL, "the action it finds is the default");
                    assert!(raw_open(c"main.txt") >= 0);
                    // A SIGSYS that dispatch did not raise is the test's.
                    libc::raise(libc::SIGSYS);
                    assert!(CAUGHT.load(std::sync::atomic::Ordering::Relaxed));
                    let mine = libc::signal(libc::SIGSYS, libc::SIG_DFL);
                    assert_eq!(mine, on_sigsys as *const () as libc::sighandler_t);
                }
                "nested" => {
                    // A raw `read` that blocks inside the SIGSYS handler,
                    // and a signal to this thread whose handler traps in
                    // turn (sent until the read has returned: one that
                    // comes before the read only runs the handler).
                    extern "C" fn on_usr1(_: libc::c_int) {
                        raw_open(c"main.txt");
                    }
                    let mut action: libc::sigaction = std::mem::zeroed();
                    action.sa_sigaction = on_usr1 as *const () as usize;
                    libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut());
                    let mut fds = [0; 2];
                    assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                    let reader = libc::pthread_self() as usize;
                    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let sender = {
                        let done = done.clone();
                        std::thread::spawn(move || {
                            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                                std::thread::sleep(std::time::Duration::from_millis(20));
                                libc::pthread_kill(reader as libc::pthread_t, libc::SIGUSR1);
                            }
                        })
                    };
                    let mut byte = 0u8;
                    let n: i64;
                    std::arch::asm!(
                        "syscall",
                        inlateout("rax") libc::SYS_read => n,
                        in("rdi") i64::from(fds[0]),
                        in("rsi") &raw mut byte,
                        in("rdx") 1i64,
                        lateout("rcx") _,
                        lateout("r11") _,
                        options(nostack),
                    );
                    done.store(true, std::sync::atomic::Ordering::Relaxed);
                    sender.join().unwrap();
                    assert_eq!(n, -i64::from(libc::EINTR));
                }
                "exec" => {
                    // This binary again, running the `main` probe: the
                    // program started from the SIGSYS handler carries the
                    // shim, and SIGSYS is not left blocked in it.
                    std::env::set_var(PROBE, "main");
                    let exe = std::ffi::CString::new(
                        std::env::current_exe()
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    )
                    .unwrap();
                    let argv = [
                        exe.as_ptr(),
                        c"--exact".as_ptr(),
                        c"raw_syscalls::dispatch::child".as_ptr(),
                        c"--nocapture".as_ptr(),
                        std::ptr::null(),
                    ];
                    raw_exec(&exe, argv.as_ptr());
                    panic!("execve failed");
                }
                other => panic!("no probe {other}"),
            }
        }
    }

    #[test]
    fn raw_calls_are_seen_in_threads_children_and_with_signals_blocked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        for name in ["main.txt", "thread.txt", "forked.txt"] {
            std::fs::write(dir.join(name), "content").unwrap();
        }
        let seen = |events: &[Event], access: Access, name: &str| {
            events
                .iter()
                .any(|e| e.access == access && e.path == dir.join(name))
        };
        for (probe, access, name) in [
            ("main", Access::Read, "main.txt"),
            ("missing", Access::Missing, "absent.txt"),
            ("thread", Access::Read, "thread.txt"),
            ("fork", Access::Read, "forked.txt"),
            ("all-signals-blocked", Access::Read, "main.txt"),
            ("exec", Access::Read, "main.txt"),
            ("nested", Access::Read, "main.txt"),
            ("sigsys-handler", Access::Read, "main.txt"),
        ] {
            let events = traced(probe, &dir);
            assert!(seen(&events, access, name), "{probe}: {events:#?}");
            assert!(
                !events.iter().any(|e| e.access == Access::Unseen),
                "{probe}: {events:#?}"
            );
        }
    }
}
