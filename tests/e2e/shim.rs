//! `ekstazi-runtime`'s own test: the shim on its own, without cargo-ekstazi.
//! This test binary runs itself again with the shim preloaded (the one
//! cargo-ekstazi's build script built and embeds), one probe per door, and
//! reads the trace the shim wrote with `ekstazi_core::capture::trace`, the reader
//! cargo-ekstazi uses. Each door's hook must name what its call observed.
//! The `doors` module shows the same doors through selection. (It lives
//! here because cargo builds no `cdylib` for a package's own integration
//! tests.)

use crate::support::{built_shim, traced_child};
use ekstazi_core::capture::trace::{Access, Event};
use std::ffi::OsStr;
use std::os::raw::{c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// Set in the child: the probe to run, and its directory.
const PROBE: &str = "RUNTIME_HOOKS_PROBE";
const DIR: &str = "RUNTIME_HOOKS_DIR";

/// Runs `probe` in a child of this binary with the shim preloaded; the
/// events of its trace.
fn traced(probe: &str, dir: &Path) -> Vec<Event> {
    let trace = traced_child(
        &[
            "--exact",
            "shim::child",
            "--nocapture",
            "--test-threads",
            "1",
        ],
        &[
            (PROBE, OsStr::new(probe)),
            (DIR, dir.as_os_str()),
            // Never read by name: only the `environ` probe walks past it.
            ("RUNTIME_HOOKS_WALKED", OsStr::new("1")),
        ],
        probe,
        dir,
    );
    assert!(
        trace.events.iter().any(|e| e.access == Access::Start),
        "{probe}: the shim did not start"
    );
    trace.events
}

/// The events of `access` whose path (before any NUL) is `path`.
fn about<'e>(events: &'e [Event], access: Access, path: &Path) -> Vec<&'e Event> {
    events
        .iter()
        .filter(|e| e.access == access && e.path_and_answer().0 == path)
        .collect()
}

fn answer(event: &Event) -> &[u8] {
    event.path_and_answer().1.unwrap_or_default()
}

/// The child: one libc call (or a few) per probe, in `$RUNTIME_HOOKS_DIR`.
#[test]
fn child() {
    let Ok(probe) = std::env::var(PROBE) else {
        return;
    };
    unsafe extern "C" {
        fn canonicalize_file_name(path: *const c_char) -> *mut c_char;
        fn gethostbyname(name: *const c_char) -> *mut libc::c_void;
        fn scandir(
            dir: *const c_char,
            list: *mut *mut *mut libc::dirent,
            filter: *const libc::c_void,
            compare: *const libc::c_void,
        ) -> c_int;
    }
    // SAFETY: C strings and buffers of the sizes given; what libc returns
    // is freed or left to the process's end.
    unsafe {
        match probe.as_str() {
            "read" => drop(std::fs::read("file.txt").unwrap()),
            "missing" => assert!(!Path::new("absent.txt").exists()),
            "stat" => assert!(Path::new("file.txt").exists()),
            "list" => assert_eq!(std::fs::read_dir("dir").unwrap().count(), 1),
            "scandir" => {
                let mut list = std::ptr::null_mut();
                assert!(
                    scandir(
                        c"dir".as_ptr(),
                        &mut list,
                        std::ptr::null(),
                        std::ptr::null()
                    ) > 0
                );
            }
            "getenv" => drop(std::env::var_os("RUNTIME_HOOKS_VAR")),
            "readlink" => drop(std::fs::read_link("link").unwrap()),
            "readlinkat" => {
                let mut buf = [0u8; 64];
                let n = libc::readlinkat(
                    libc::AT_FDCWD,
                    c"link".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    64,
                );
                assert!(n > 0);
            }
            "realpath" => drop(std::fs::canonicalize("link").unwrap()),
            "canonicalize_file_name" => {
                assert!(!canonicalize_file_name(c"link".as_ptr()).is_null());
            }
            "rename" => {
                std::fs::rename("file.txt", "moved.txt").unwrap();
                std::fs::rename("moved.txt", "file.txt").unwrap();
            }
            "link" => {
                assert_eq!(libc::link(c"file.txt".as_ptr(), c"linked.txt".as_ptr()), 0);
                std::fs::remove_file("linked.txt").unwrap();
            }
            "symlink" => {
                std::os::unix::fs::symlink("file.txt", "new-link").unwrap();
                std::fs::remove_file("new-link").unwrap();
            }
            "chdir" => std::env::set_current_dir("dir").unwrap(),
            "exec" => {
                let status = Command::new("true").status().unwrap();
                assert!(status.success());
            }
            "dlopen" => {
                let dir = std::env::var(DIR).unwrap();
                let lib = std::ffi::CString::new(format!("{dir}/libplug.so")).unwrap();
                assert!(!libc::dlopen(lib.as_ptr(), libc::RTLD_NOW).is_null());
            }
            "getaddrinfo" => {
                let mut hints: libc::addrinfo = std::mem::zeroed();
                hints.ai_flags = libc::AI_NUMERICHOST;
                let mut res = std::ptr::null_mut();
                let _ = libc::getaddrinfo(
                    c"hooks.invalid".as_ptr(),
                    std::ptr::null(),
                    &hints,
                    &mut res,
                );
            }
            "gethostbyname" => drop(gethostbyname(c"192.0.2.8".as_ptr())),
            "sendto" => {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let _ = socket.send_to(b"x", "192.0.2.9:9");
            }
            "connect" => {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let _ = socket.connect("192.0.2.11:9");
            }
            "glibc-reads" => {
                unsafe extern "C" {
                    fn getservbyname(
                        name: *const c_char,
                        proto: *const c_char,
                    ) -> *mut libc::c_void;
                }
                libc::setenv(c"TZ".as_ptr(), c"/etc/localtime".as_ptr(), 1);
                let mut tm: libc::tm = std::mem::zeroed();
                libc::localtime_r(&0, &mut tm);
                libc::setlocale(libc::LC_ALL, c"".as_ptr());
                libc::getpwuid(libc::getuid());
                libc::getgrgid(libc::getgid());
                getservbyname(c"http".as_ptr(), c"tcp".as_ptr());
            }
            // The documented blind spots (docs/reference/limitations.md), each as
            // it is written there.
            "raw-syscall" => {
                let fd = libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    c"file.txt".as_ptr(),
                    libc::O_RDONLY,
                );
                assert!(fd >= 0);
            }
            "environ" => assert!(std::env::vars_os().count() > 0),
            "failed-dlopen" => {
                assert!(
                    libc::dlopen(c"libekstazi-no-such-library.so".as_ptr(), libc::RTLD_NOW)
                        .is_null()
                );
            }
            "fts" => {
                unsafe extern "C" {
                    fn fts_open(
                        paths: *const *const libc::c_char,
                        options: libc::c_int,
                        compare: *const libc::c_void,
                    ) -> *mut libc::c_void;
                    fn fts_read(fts: *mut libc::c_void) -> *mut libc::c_void;
                    fn fts_close(fts: *mut libc::c_void) -> libc::c_int;
                }
                let paths = [c"dir".as_ptr(), std::ptr::null()];
                // FTS_PHYSICAL: the walk does not follow links.
                let fts = fts_open(paths.as_ptr(), 0x10, std::ptr::null());
                assert!(!fts.is_null());
                while !fts_read(fts).is_null() {}
                fts_close(fts);
            }
            "ftw" => {
                extern "C" fn each(
                    _: *const libc::c_char,
                    _: *const libc::c_void,
                    _: libc::c_int,
                ) -> libc::c_int {
                    0
                }
                unsafe extern "C" {
                    fn ftw(
                        dir: *const libc::c_char,
                        each: extern "C" fn(
                            *const libc::c_char,
                            *const libc::c_void,
                            libc::c_int,
                        ) -> libc::c_int,
                        fds: libc::c_int,
                    ) -> libc::c_int;
                }
                assert_eq!(ftw(c"dir".as_ptr(), each, 4), 0);
            }
            "mkstemp" => {
                let mut template = *b"made-XXXXXX\0";
                let fd = libc::mkstemp(template.as_mut_ptr().cast());
                assert!(fd >= 0);
                libc::close(fd);
            }
            "glob" => {
                let mut found: libc::glob_t = std::mem::zeroed();
                assert_eq!(libc::glob(c"dir/*".as_ptr(), 0, None, &mut found), 0);
                libc::globfree(&mut found);
            }
            other => panic!("no probe {other}"),
        }
    }
}

/// A directory with `file.txt`, `dir/entry`, and `link` → `file.txt`.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file.txt"), "content").unwrap();
    std::fs::create_dir(dir.path().join("dir")).unwrap();
    std::fs::write(dir.path().join("dir/entry"), "").unwrap();
    std::os::unix::fs::symlink("file.txt", dir.path().join("link")).unwrap();
    dir
}

#[test]
fn each_door_names_what_its_call_observed() {
    let tmp = scratch();
    // The shim resolves paths against the working directory as the kernel
    // does: through the temporary directory's real name.
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let at = |name: &str| dir.join(name);
    let has = |probe: &str, access: Access, path: &Path| {
        let events = traced(probe, &dir);
        let found = about(&events, access, path);
        assert!(
            !found.is_empty(),
            "{probe}: no {access:?} of {}: {events:#?}",
            path.display()
        );
        events
    };

    has("read", Access::Read, &at("file.txt"));
    has("missing", Access::Missing, &at("absent.txt"));
    has("stat", Access::Exists, &at("file.txt"));
    has("list", Access::List, &at("dir"));
    has("scandir", Access::List, &at("dir"));
    let events = has("readlink", Access::Link, &at("link"));
    assert_eq!(
        answer(about(&events, Access::Link, &at("link"))[0]),
        b"file.txt"
    );
    has("readlinkat", Access::Link, &at("link"));
    for probe in ["realpath", "canonicalize_file_name"] {
        let events = has(probe, Access::Resolve, &at("link"));
        let resolved = answer(about(&events, Access::Resolve, &at("link"))[0]);
        assert_eq!(
            Path::new(OsStr::from_bytes(resolved)),
            at("file.txt"),
            "{probe}"
        );
    }
    // A new name for existing content: the source is read, the new name
    // is the test's own.
    let events = has("rename", Access::Read, &at("file.txt"));
    assert!(!about(&events, Access::Created, &at("moved.txt")).is_empty());
    let events = has("link", Access::Read, &at("file.txt"));
    assert!(!about(&events, Access::Created, &at("linked.txt")).is_empty());
    let events = has("symlink", Access::Read, &at("file.txt"));
    assert!(!about(&events, Access::Created, &at("new-link")).is_empty());
    let events = has("chdir", Access::Exists, &at("dir"));
    let kind = about(&events, Access::Exists, &at("dir"))[0].kind();
    assert_eq!(kind, Some(ekstazi_core::model::dep::FileKind::Dir));

    // A program run: the child's own trace names it.
    let events = traced("exec", &dir);
    assert!(
        events
            .iter()
            .any(|e| e.access == Access::Exec && e.path.file_name().is_some_and(|n| n == "true")),
        "{events:#?}"
    );

    // The environment: the value seen, or the absence.
    let events = traced("getenv", &dir);
    assert!(
        events
            .iter()
            .any(|e| e.access == Access::Env && e.payload() == b"RUNTIME_HOOKS_VAR"),
        "{events:#?}"
    );

    // The network: host names as given, socket addresses as bytes.
    for (probe, host) in [
        ("getaddrinfo", "hooks.invalid"),
        ("gethostbyname", "192.0.2.8"),
    ] {
        let events = traced(probe, &dir);
        assert!(
            events
                .iter()
                .any(|e| e.access == Access::HostLookup && e.payload() == host.as_bytes()),
            "{probe}: {events:#?}"
        );
    }
    for (probe, port, addr) in [
        ("sendto", 9u16, [192, 0, 2, 9]),
        ("connect", 9, [192, 0, 2, 11]),
    ] {
        let events = traced(probe, &dir);
        let mut sockaddr = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        sockaddr.extend_from_slice(&port.to_be_bytes());
        sockaddr.extend_from_slice(&addr);
        assert!(
            events.iter().any(|e| e.access == Access::Network
                && !e.option()
                && e.payload().starts_with(&sockaddr)),
            "{probe}: {events:#?}"
        );
    }
}

#[test]
fn a_library_opened_with_dlopen_is_named() {
    let tmp = scratch();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(dir.join("plug.c"), "int plug(void) { return 1; }\n").unwrap();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libplug.so"))
        .arg(dir.join("plug.c"))
        .status();
    assert!(
        built.is_ok_and(|s| s.success()),
        "cc builds a shared library"
    );
    let events = traced("dlopen", &dir);
    assert!(
        !about(&events, Access::Library, &dir.join("libplug.so")).is_empty(),
        "{events:#?}"
    );
}

#[test]
fn without_a_trace_file_the_shim_writes_nothing() {
    let tmp = scratch();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "shim::child", "--nocapture"])
        .env("LD_PRELOAD", built_shim())
        .env(PROBE, "rename")
        .env(DIR, &dir)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["dir", "file.txt", "link"],
        "and the calls still work"
    );
}

/// The blind spots of docs/reference/limitations.md, as written: if one of
/// these starts being recorded, this test fails and the docs must say so.
#[test]
fn the_blind_spots_are_as_the_readme_says() {
    let tmp = scratch();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    // No longer a blind spot: a system call made through libc's
    // `syscall()` is seen as the wrapper's would be.
    let events = traced("raw-syscall", &dir);
    assert!(
        !about(&events, Access::Read, &dir.join("file.txt")).is_empty(),
        "{events:#?}"
    );
    // "Walking the whole environment ... is not seen."
    let events = traced("environ", &dir);
    assert!(
        !events
            .iter()
            .any(|e| e.access == Access::Env && e.payload().starts_with(b"RUNTIME_HOOKS_WALKED")),
        "{events:#?}"
    );
}

/// Once blind spots, now seen: the files glibc reads for itself, recorded
/// through the functions that read them (its own opens and `getenv`s go
/// through its internal functions, which no hook stands in front of).
#[test]
fn the_files_glibc_reads_itself_are_recorded() {
    let tmp = scratch();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let events = traced("glibc-reads", &dir);
    for file in [
        "/etc/localtime",
        "/usr/lib/locale/locale-archive",
        "/etc/nsswitch.conf",
        "/etc/passwd",
        "/etc/group",
        "/etc/services",
    ] {
        // Read where it exists, absent where not (a machine with no
        // locale archive): either way a dependency.
        let access = if Path::new(file).exists() {
            Access::Read
        } else {
            Access::Missing
        };
        assert!(
            !about(&events, access, Path::new(file)).is_empty(),
            "{file}: {events:#?}"
        );
    }
    for name in [&b"TZ=/etc/localtime"[..], b"LC_ALL", b"LANG"] {
        assert!(
            events
                .iter()
                .any(|e| e.access == Access::Env && e.payload().starts_with(name)),
            "{}: {events:#?}",
            String::from_utf8_lossy(name)
        );
    }
}

/// Once blind spots, now seen: the places a failed `dlopen` searched, the
/// directories C's `glob`, `fts` and `ftw` listed, and the file `mkstemp`
/// made (the test's own, not a file it read).
#[test]
fn a_failed_dlopen_cs_walkers_and_mkstemp_are_recorded() {
    let tmp = scratch();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let events = traced("failed-dlopen", &dir);
    assert!(
        events.iter().any(|e| e.access == Access::Missing
            && e.path
                .to_string_lossy()
                .contains("libekstazi-no-such-library")),
        "{events:#?}"
    );
    let events = traced("glob", &dir);
    assert!(
        !about(&events, Access::List, &dir.join("dir")).is_empty(),
        "{events:#?}"
    );
    for walker in ["fts", "ftw"] {
        let events = traced(walker, &dir);
        assert!(
            !about(&events, Access::List, &dir.join("dir")).is_empty(),
            "{walker}: {events:#?}"
        );
    }
    let events = traced("mkstemp", &dir);
    assert!(
        events.iter().any(|e| e.access == Access::Created
            && e.path.starts_with(&dir)
            && e.path.to_string_lossy().contains("made-")),
        "{events:#?}"
    );
}
