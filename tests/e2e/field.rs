//! The setups a new user meets that the shim cannot see through a libc
//! call of the test's own, on the `field` fixture: a service on
//! loopback that the test did not start, a script's executable bit, a
//! constructor that reads a file before `main`, a walk of the whole
//! environment, a shell that reads a variable it inherited, glibc's own
//! reads of the time zone and the user database, a `linkme`-style slice
//! that gains an element, and a trace that could not be written. For each, the change that breaks the test
//! under `cargo test` selects it, and the neighbour that none of it
//! touches stays skipped. One recorded fixture serves every door: each
//! change is undone before the next.

use crate::support::Fixture;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

type Selection = Vec<(String, Vec<String>)>;

/// The tests that run every time whatever changed: left out of the door
/// checks with libtest's `--skip`, and checked on their own.
const SKIP_ALWAYS: &[&str] = &["--", "--skip", "external_", "--skip", "writes_past"];

const LOST: &str = "always runs: the shim could not write all of its trace (a full disk, a file size limit, or its descriptor taken)";

fn label(name: &str) -> String {
    if name == "lists_what_was_submitted" {
        return format!("field::registry {name}");
    }
    format!("field::field {name}")
}

fn only(name: &str, reasons: &[&str]) -> Selection {
    vec![(
        label(name),
        reasons.iter().map(|r| (*r).to_owned()).collect(),
    )]
}

/// A service on loopback, as CI starts a database: it answers every
/// connection with what `answer` holds. It lives as long as the test.
fn service(answer: Arc<Mutex<String>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let text = answer.lock().unwrap().clone();
            let _ = conn.write_all(text.as_bytes());
        }
    });
    port
}

#[track_caller]
fn door(f: &Fixture, what: &str, change: impl FnOnce(), expected: Selection, undo: impl FnOnce()) {
    change();
    assert_eq!(f.selected(SKIP_ALWAYS), expected, "{what}");
    undo();
    assert_eq!(f.selected(SKIP_ALWAYS), vec![], "{what}, undone");
}

fn chmod(f: &Fixture, rel: &str, mode: u32) {
    std::fs::set_permissions(f.file(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn each_setup_of_the_field_selects_its_test_alone() {
    let answer = Arc::new(Mutex::new("v1".to_owned()));
    let port = service(answer.clone());
    let f = Fixture::new("field")
        .with_env("FIELD_SERVICE_PORT", &port.to_string())
        .with_env("FIELD_LEVEL", "3");
    let libs = f.file("libs").display().to_string();
    // A zone file of the workspace's (UTC+1), which glibc reads itself.
    let zone = f.file("data/zone").display().to_string();
    let f = f
        .with_env("LD_LIBRARY_PATH", &libs)
        .with_env("TZ", &zone)
        .with_env("FIELD_SHELL_MODE", "on");
    // A fixture is copied file by file, and its checkout may have lost the
    // bit: the script starts runnable, as a user's repository has it.
    chmod(&f, "scripts/hi.sh", 0o755);
    let first = f.test_ok(&[]);
    assert_eq!(first.ran().len(), 15, "{first:?}");

    // The service's test and the one whose trace was lost run every time;
    // a test that talks to a server it started itself does not.
    let service_peer = format!("external: 127.0.0.1:{port}");
    assert_eq!(
        f.selected(&[]),
        vec![
            (label("external_asks_a_service"), vec![service_peer.clone()]),
            (
                label("writes_past_its_file_size_limit"),
                vec![LOST.to_owned()]
            ),
        ]
    );
    // What `cargo test` would now fail on: the service changed its answer.
    *answer.lock().unwrap() = "v2".to_owned();
    let run = f.run(&["test"]);
    assert_eq!(
        run.failed(),
        [label("external_asks_a_service")].into(),
        "{run:?}"
    );
    *answer.lock().unwrap() = "v1".to_owned();

    // Every process of the binary runs its constructors: what they read
    // is a dependency of each of its tests, and of no other binary's.
    let every_test_of_the_binary = [
        "counts_the_plugins",
        "globs_the_reports",
        "looks_for_a_plugin_library",
        "looks_up_its_user",
        "reads_what_a_constructor_loaded",
        "runs_a_script",
        "runs_a_shell_that_reads_a_variable",
        "talks_to_its_own_server",
        "tells_the_local_time",
        "walks_a_tree_with_nftw",
        "walks_the_environment",
    ]
    .iter()
    .map(|name| (label(name), vec!["file changed: data/mode.txt".to_owned()]))
    .collect();
    door(
        &f,
        "a file a constructor read before main",
        || f.write("data/mode.txt", "slow\n"),
        every_test_of_the_binary,
        || f.write("data/mode.txt", "fast\n"),
    );
    door(
        &f,
        "a script's executable bit",
        || chmod(&f, "scripts/hi.sh", 0o644),
        only(
            "runs_a_script",
            // Read by the shell that runs it, and run as a program (in the
            // order records keep dependencies: by target).
            &[
                "file changed: scripts/hi.sh",
                "program changed: scripts/hi.sh",
            ],
        ),
        || chmod(&f, "scripts/hi.sh", 0o755),
    );
    door(
        &f,
        "another umask's group bits",
        || chmod(&f, "scripts/hi.sh", 0o775),
        vec![],
        || chmod(&f, "scripts/hi.sh", 0o755),
    );
    // Every test that walks the environment sees every variable: the one
    // that calls `std::env::vars`, and the two that run a shell (which
    // copies what it inherited at start).
    let walkers = |reason: &str| -> Selection {
        [
            "runs_a_script",
            "runs_a_shell_that_reads_a_variable",
            "walks_the_environment",
        ]
        .iter()
        .map(|name| (label(name), vec![reason.to_owned()]))
        .collect()
    };
    assert_eq!(
        f.selected_with(SKIP_ALWAYS, &[("FIELD_LEVEL", "4")]),
        walkers("environment variable changed: FIELD_LEVEL"),
        "a variable the walk filters for"
    );
    assert_eq!(
        f.selected_with(SKIP_ALWAYS, &[("FIELD_OTHER", "1")]),
        walkers("environment variables added or removed (the test walks every variable)"),
        "a new variable: the walk saw every one"
    );
    assert_eq!(
        f.selected_with(SKIP_ALWAYS, &[("FIELD_SHELL_MODE", "off")]),
        walkers("environment variable changed: FIELD_SHELL_MODE"),
        "a variable only a shell reads"
    );
    let run = f.run_with(&["test"], &[("FIELD_SHELL_MODE", "off")]);
    assert_eq!(
        run.failed(),
        [label("runs_a_shell_that_reads_a_variable")].into(),
        "what `cargo test` fails on: {run:?}"
    );
    // Back as it was: the failed test and the walkers that ran with `off`
    // run again, and pass.
    f.test_ok(&[]);
    // The shell's own bookkeeping says how the tool was started (from a
    // prompt, a script, under `time`), not what the tests were given.
    assert_eq!(
        f.selected_with(
            SKIP_ALWAYS,
            &[
                ("_", "/usr/bin/time"),
                ("SHLVL", "7"),
                ("OLDPWD", "/somewhere/else")
            ]
        ),
        vec![],
        "the shell's bookkeeping"
    );
    // glibc's own reads: `TZ`, and the zone file it names.
    let mut tz = walkers("environment variable changed: TZ");
    tz.push((
        label("tells_the_local_time"),
        vec!["environment variable changed: TZ".to_owned()],
    ));
    tz.sort();
    assert_eq!(
        f.selected_with(SKIP_ALWAYS, &[("TZ", "UTC0")]),
        tz,
        "another time zone"
    );
    let utc_plus_one = std::fs::read(f.file("data/zone")).unwrap();
    door(
        &f,
        "the zone file TZ names",
        || std::fs::remove_file(f.file("data/zone")).unwrap(),
        only("tells_the_local_time", &["file deleted: data/zone"]),
        || std::fs::write(f.file("data/zone"), &utc_plus_one).unwrap(),
    );
    // The user database, read by glibc for `getpwuid` (the machine's files
    // are not the test's to change).
    let why = f.run(&["why", "--all", "looks_up_its_user"]);
    for file in ["/etc/passwd", "/etc/nsswitch.conf"] {
        assert!(why.stdout.contains(file), "{file}: {why:?}");
    }
    door(
        &f,
        "a slice that gains an element",
        || {
            f.edit(
                "src/more_plugins.rs",
                "static PLUGIN_B: &str = \"b\";",
                "static PLUGIN_B: &str = \"b\";\n\n#[used]\n#[unsafe(link_section = \"linkme_PLUGINS\")]\nstatic PLUGIN_C: &str = \"c\";",
            )
        },
        only("counts_the_plugins", &["function changed: field::plugins"]),
        || {
            f.edit(
                "src/more_plugins.rs",
                "\n\n#[used]\n#[unsafe(link_section = \"linkme_PLUGINS\")]\nstatic PLUGIN_C: &str = \"c\";",
                "",
            )
        },
    );
    door(
        &f,
        "a library where a failed dlopen looked",
        || f.write("libs/libfieldplug.so", "not yet a library"),
        only(
            "looks_for_a_plugin_library",
            &["file created: libs/libfieldplug.so"],
        ),
        || std::fs::remove_file(f.file("libs/libfieldplug.so")).unwrap(),
    );
    door(
        &f,
        "a file in the directory libc's glob matched in",
        || f.write("reports/b.txt", "b\n"),
        only("globs_the_reports", &["directory listing changed: reports"]),
        || std::fs::remove_file(f.file("reports/b.txt")).unwrap(),
    );
    door(
        &f,
        "a file in a directory nftw walked",
        || f.write("tree/sub/three.txt", "3\n"),
        only(
            "walks_a_tree_with_nftw",
            &["directory listing changed: tree/sub"],
        ),
        || std::fs::remove_file(f.file("tree/sub/three.txt")).unwrap(),
    );
    // A registration that another constructor adds, and one whose value
    // changes: what the constructors are, and what they executed, is every
    // test's of the binary (here, the registry's one test).
    door(
        &f,
        "a constructor added to a registry",
        || {
            f.edit(
                "tests/registry.rs",
                "#[test]",
                "#[used]\n#[unsafe(link_section = \".init_array\")]\nstatic SUBMIT_B: extern \"C\" fn() = submit_b;\n\nextern \"C\" fn submit_b() {\n    REGISTRY.lock().unwrap().push(\"b\");\n}\n\n#[test]",
            )
        },
        only(
            "lists_what_was_submitted",
            &["uninstrumented function changed: (the constructors in .init_array)"],
        ),
        || {
            f.edit(
                "tests/registry.rs",
                "#[used]\n#[unsafe(link_section = \".init_array\")]\nstatic SUBMIT_B: extern \"C\" fn() = submit_b;\n\nextern \"C\" fn submit_b() {\n    REGISTRY.lock().unwrap().push(\"b\");\n}\n\n",
                "",
            )
        },
    );
    door(
        &f,
        "a constructor's registration changed",
        || f.edit("tests/registry.rs", "push(\"a\")", "push(\"z\")"),
        only(
            "lists_what_was_submitted",
            &["function changed: registry::submit_a"],
        ),
        || f.edit("tests/registry.rs", "push(\"z\")", "push(\"a\")"),
    );
    // The neighbour (`field::neighbour`) stayed skipped through all of it,
    // and so did the test with a server of its own.
}

#[test]
fn a_declared_service_makes_its_inputs_dependencies() {
    let answer = Arc::new(Mutex::new("v1".to_owned()));
    let port = service(answer);
    let f = Fixture::new("field").with_env("FIELD_SERVICE_PORT", &port.to_string());
    chmod(&f, "scripts/hi.sh", 0o755);
    f.write(
        ".config/ekstazi.toml",
        &format!("[[network.service]]\nname = \"db\"\nports = [{port}]\ninputs = [\"db/\"]\n"),
    );
    let skip = &[
        "--",
        "--skip",
        "writes_past",
        "--skip",
        "walks_the",
        "--skip",
        "looks_for",
        "--skip",
        "runs_a_shell",
        "--skip",
        "tells_the",
    ];
    f.test_ok(skip);
    assert_eq!(
        f.selected(skip),
        vec![],
        "the service's inputs did not change"
    );
    f.write("db/schema.sql", "create table t (id int, name text);\n");
    assert_eq!(
        f.selected(skip),
        only("external_asks_a_service", &["file changed: db/schema.sql"])
    );
    f.write("db/seed.sql", "insert into t values (1);\n");
    let selected = f.selected(skip);
    assert_eq!(selected.len(), 1, "{selected:?}");
    assert!(
        selected[0]
            .1
            .contains(&"directory listing changed: db".to_owned()),
        "{selected:?}"
    );
}

/// A program with file capabilities starts with `AT_SECURE`, so the loader
/// ignores `LD_PRELOAD` and the shim cannot see into it, as with a
/// set-user-ID program: its test always runs.
#[test]
fn a_program_with_file_capabilities_always_runs() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        // Setting `security.capability` takes CAP_SETFCAP; CI runs as root.
        eprintln!("skipped: setting file capabilities needs root");
        return;
    }
    let f = Fixture::new("field");
    chmod(&f, "scripts/hi.sh", 0o755);
    // `cap_net_bind_service=ep`, as `setcap` writes it (revision 2).
    let mut cap = Vec::new();
    for word in [0x0200_0001u32, 1 << 10, 0, 0, 0] {
        cap.extend_from_slice(&word.to_le_bytes());
    }
    let path = std::ffi::CString::new(
        f.file("scripts/hi.sh")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    // SAFETY: C strings and a buffer of the given length.
    let set = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"security.capability".as_ptr(),
            cap.as_ptr().cast(),
            cap.len(),
            0,
        )
    };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    let skip = &["--", "runs_a_script"];
    f.test_ok(skip);
    assert_eq!(
        f.selected(skip),
        only(
            "runs_a_script",
            &[
                "always runs: it runs scripts/hi.sh, a set-user-ID program, or one with file capabilities, that the shim is not loaded into"
            ]
        )
    );
}
