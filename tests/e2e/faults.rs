//! Faults, interrupts, concurrency and hostile state: a test is skipped only
//! on the evidence of an intact record whose every dependency still matches.

use crate::support::{Fixture, labels, with_peak_rss};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

const ALL: &[&str] = &[
    "faults::faults a_quick",
    "faults::faults b_slow",
    "faults::faults c_slow",
    "faults::faults d_aborts",
    "faults::faults e_segfaults",
    "faults::faults f_hangs",
    "faults::faults g_exits_without_a_verdict",
];

fn label(name: &str) -> String {
    format!("faults::faults {name}")
}

#[test]
fn crashes_hangs_and_early_exits_are_not_passes() {
    let f = Fixture::new("faults");
    assert_eq!(f.test_ok(&[]).ran(), labels(ALL));

    let pid_file = f.tmp().join("child.pid");
    let env = [
        ("FIXTURE_ABORT", "1"),
        ("FIXTURE_SEGV", "1"),
        ("FIXTURE_HANG", "1"),
        ("FIXTURE_EXIT", "1"),
        ("FIXTURE_CHILD_PID", pid_file.to_str().unwrap()),
    ];
    let started = Instant::now();
    let run = f.run_with(&["test", "--timeout", "3"], &env);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the hung test was killed"
    );
    assert_eq!(
        run.failed(),
        labels(&[
            "faults::faults d_aborts",
            "faults::faults e_segfaults",
            "faults::faults f_hangs",
            "faults::faults g_exits_without_a_verdict",
        ])
    );
    assert!(
        run.stdout.contains("TIMEOUT") && run.stdout.contains("killed after 3s"),
        "{run:?}"
    );
    assert!(run.stdout.contains("CRASH"), "{run:?}");
    // The hung test's child went with it (its whole process group).
    let child: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    assert!(gone(child), "the hung test's child {child} still runs");

    // Nothing changed since: they all run again, each for what happened.
    let selected = f.selected_with(&[], &env);
    let reasons = |name: &str| {
        selected
            .iter()
            .find(|(l, _)| *l == label(name))
            .unwrap_or_else(|| panic!("{name} not selected: {selected:?}"))
            .1
            .clone()
    };
    assert_eq!(reasons("d_aborts"), ["crashed last time"]);
    assert_eq!(reasons("e_segfaults"), ["crashed last time"]);
    assert_eq!(reasons("f_hangs"), ["timed out last time"]);
    assert_eq!(reasons("g_exits_without_a_verdict"), ["crashed last time"]);
    assert_eq!(selected.len(), 4, "{selected:?}");
    // Once they pass, they are skipped.
    assert_eq!(f.test_ok(&[]).ran().len(), 4);
    assert!(f.selected(&[]).is_empty());
}

/// Where the fixture's slow tests say they started, and the gate they
/// wait for: the tests below wait on these events, not on time.
struct Events {
    dir: tempfile::TempDir,
    started: String,
    gate: String,
}

impl Events {
    fn new() -> Events {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("started")).unwrap();
        Events {
            started: dir.path().join("started").display().to_string(),
            gate: dir.path().join("gate").display().to_string(),
            dir,
        }
    }

    /// The environment that makes `b_slow` and `c_slow` report and wait.
    fn env(&self) -> [(&str, &str); 2] {
        [
            ("FIXTURE_STARTED", self.started.as_str()),
            ("FIXTURE_GATE", self.gate.as_str()),
        ]
    }

    /// Waits until the test `name` has started (it then waits at the gate).
    fn wait_started(&self, name: &str) {
        let path = self.dir.path().join("started").join(name);
        let since = Instant::now();
        while !path.exists() {
            assert!(
                since.elapsed() < Duration::from_secs(300),
                "{name} never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::remove_file(path).unwrap();
    }

    fn open_gate(&self) {
        std::fs::write(&self.gate, "").unwrap();
    }

    fn close_gate(&self) {
        std::fs::remove_file(&self.gate).unwrap();
    }
}

/// A run in the background, its standard output read as it comes.
struct Background {
    child: std::process::Child,
    stdout: std::thread::JoinHandle<String>,
}

impl Background {
    fn start(f: &Fixture, args: &[&str], events: &Events) -> Background {
        let mut child = f
            .command(args)
            .envs(events.env())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut out, &mut text).unwrap();
            text
        });
        Background { child, stdout }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// The exit code (`None`: killed by a signal) and the output.
    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        (status.code(), self.stdout.join().unwrap())
    }
}

fn selected_labels(f: &Fixture, events: &Events) -> std::collections::BTreeSet<String> {
    f.selected_with(&[], &events.env())
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

/// Whether a process has ended (it may linger as a zombie until whoever
/// inherited it reaps it).
fn gone(pid: i32) -> bool {
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(30) {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // `pid (comm) S ...`: the state follows the last `)`.
            Ok(stat)
                if stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    false
}

#[test]
fn an_interrupt_keeps_finished_records_and_reruns_the_rest() {
    let f = Fixture::new("faults");
    let events = Events::new();
    // Tests run one at a time, in name order: interrupt while `b_slow`
    // waits at its gate, which never opens.
    let run = Background::start(&f, &["test", "-j", "1"], &events);
    events.wait_started("b_slow");
    run.signal(libc::SIGINT);
    let (code, seen) = run.finish();
    assert_eq!(code, Some(130), "{seen}");
    assert!(
        seen.lines()
            .any(|l| l.contains("PASS") && l.ends_with("a_quick")),
        "{seen}"
    );
    assert!(
        seen.lines()
            .any(|l| l.contains("INTERRUPTED") && l.ends_with("b_slow")),
        "{seen}"
    );

    // What finished keeps its record; what did not, or never started, runs.
    assert_eq!(
        selected_labels(&f, &events),
        labels(&ALL[1..]),
        "every test but a_quick"
    );
}

#[test]
fn sigterm_and_sighup_stop_the_run_and_a_second_signal_exits_at_once() {
    let f = Fixture::new("faults");
    let events = Events::new();
    // As a cancelled CI job: 128 + the signal, the test that was running
    // interrupted, the finished one recorded.
    for (signal, code) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129)] {
        let run = Background::start(&f, &["test", "-j", "1"], &events);
        events.wait_started("b_slow");
        run.signal(signal);
        let (status, seen) = run.finish();
        assert_eq!(status, Some(code), "signal {signal}: {seen}");
        assert!(
            seen.lines()
                .any(|l| l.contains("INTERRUPTED") && l.ends_with("b_slow")),
            "{seen}"
        );
        assert_eq!(selected_labels(&f, &events), labels(&ALL[1..]));
    }
    // A second signal, while the first is handled, ends the run at once:
    // 130, whichever the signals (two different ones are never merged into
    // one, and the lower number is delivered first if both are pending).
    let run = Background::start(&f, &["test", "-j", "1"], &events);
    events.wait_started("b_slow");
    run.signal(libc::SIGTERM);
    run.signal(libc::SIGHUP);
    let (status, seen) = run.finish();
    assert_eq!(status, Some(130), "{seen}");
    // Nothing was recorded of the killed run.
    assert_eq!(selected_labels(&f, &events), labels(&ALL[1..]));
}

#[test]
fn a_second_run_waits_for_the_first_or_fails_fast() {
    let f = Fixture::new("faults");
    let events = Events::new();
    let env = events.env();
    events.open_gate();
    f.test_ok_with(&[], &env);
    events.wait_started("b_slow");
    events.wait_started("c_slow");
    events.close_gate();
    // The first run holds the lock while `b_slow` waits at its gate.
    let first = Background::start(&f, &["test", "--forceall", "-j", "1"], &events);
    events.wait_started("b_slow");
    let fast = f.run_with(&["test", "--no-wait"], &env);
    assert_ne!(fast.code(), Some(0), "{fast:?}");
    assert!(
        fast.stderr.contains("another cargo-ekstazi run holds"),
        "{fast:?}"
    );

    // The patient run says it waits; then the gate opens.
    let mut patient = f
        .command(&["test"])
        .envs(events.env())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    let mut lines = BufReader::new(patient.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        said.push(line.clone());
        if line.contains("waiting for another cargo-ekstazi run") {
            break;
        }
    }
    assert!(
        said.iter()
            .any(|l| l.contains("waiting for another cargo-ekstazi run")),
        "{said:#?}"
    );
    events.open_gate();
    said.extend(lines.map(Result::unwrap));
    assert!(patient.wait().unwrap().success(), "{said:#?}");
    let (code, seen) = first.finish();
    assert_eq!(code, Some(0), "{seen}");
    // Both wrote whole records: nothing is left to run.
    assert!(selected_labels(&f, &events).is_empty());
}

#[test]
fn a_state_directory_that_cannot_be_written_still_runs_the_tests() {
    let f = Fixture::new("faults");
    f.test_ok(&[]);
    // Root ignores permission bits: then use a place no one may create in.
    let is_root = unsafe { libc::geteuid() } == 0;
    let state = if is_root {
        std::path::PathBuf::from("/sys/ekstazi-e2e-state")
    } else {
        let state = f.file(".ekstazi");
        set_writable(&state, false);
        state
    };
    f.edit(
        "tests/faults.rs",
        "fn a_quick() {}",
        "fn a_quick() {\n    let _ = 1;\n}",
    );
    let run = f.run_with(&["test", "--state-dir", state.to_str().unwrap()], &[]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("cannot be written"), "{run:?}");
    assert!(run.stderr.contains("no record was written"), "{run:?}");
    if is_root {
        assert_eq!(
            run.ran(),
            labels(ALL),
            "no record could be read: everything runs"
        );
    } else {
        set_writable(&state, true);
        assert_eq!(run.ran(), labels(&["faults::faults a_quick"]));
        assert_eq!(f.selected(&[]).len(), 1, "the record was left as it was");
    }
}

fn set_writable(dir: &std::path::Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.unwrap();
        let mode = if entry.file_type().is_dir() {
            0o555
        } else {
            0o444
        } | if writable { 0o200 } else { 0 };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn hostile_records_are_refused_and_nothing_escapes_the_state_directory() {
    let f = Fixture::new("faults");
    f.test_ok(&[]);
    let dir = f.file(&format!(
        ".ekstazi/v{}/faults%3A%3Afaults",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ));
    // A record of a_quick that claims a 4 GiB body.
    let record = dir.join("a_quick");
    let mut bytes = std::fs::read(&record).unwrap();
    bytes[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&record, &bytes).unwrap();
    // A file whose name tries to climb out, and one that is not ours.
    std::fs::write(dir.join("..%2F..%2F..%2Fescaped"), b"EKZR").unwrap();
    std::fs::remove_file(dir.join("b_slow")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("b_slow")).unwrap();
    // A record file of 64 MiB and a byte: refused by its size, unread
    // (sparse: it costs no disk).
    std::fs::File::options()
        .write(true)
        .open(dir.join("c_slow"))
        .unwrap()
        .set_len(ekstazi_core::model::record::MAX_RECORD_BYTES + 1)
        .unwrap();

    assert_eq!(
        f.selected(&[]),
        [
            (
                label("a_quick"),
                vec!["record unreadable: record is truncated".to_owned()]
            ),
            (
                label("b_slow"),
                vec!["record unreadable: record is not a regular file".to_owned()]
            ),
            (
                label("c_slow"),
                vec!["record unreadable: record file is larger than any record".to_owned()]
            ),
        ]
    );
    let run = f.test_ok(&[]);
    assert_eq!(
        run.ran(),
        labels(&[
            "faults::faults a_quick",
            "faults::faults b_slow",
            "faults::faults c_slow"
        ])
    );
    assert!(f.selected(&[]).is_empty(), "all rewritten whole");
    assert!(
        !dir.join("..%2F..%2F..%2Fescaped").exists(),
        "a file that is no test's record is removed"
    );
    assert!(!f.path().parent().unwrap().join("escaped").exists());
    assert!(
        std::fs::symlink_metadata(dir.join("b_slow"))
            .unwrap()
            .is_file()
    );
}

#[test]
fn a_checkout_moved_elsewhere_keeps_its_records() {
    let f = Fixture::new("faults");
    f.test_ok(&[]);
    // Another directory, of another length: nothing in a record or a
    // fingerprint depends on where the checkout is.
    let moved = f.moved_to("a-much-longer-directory-name");
    assert!(moved.selected(&[]).is_empty(), "{:?}", moved.selected(&[]));
    assert!(moved.test_ok(&[]).ran().is_empty());
}

#[test]
fn a_workspace_moved_elsewhere_selects_nothing_though_its_tests_embed_its_paths() {
    // `beta::files` compiles `env!("CARGO_BIN_EXE_helper")` into two tests
    // and runs the helper: a string constant naming the target directory,
    // and its length, both of which move with the checkout.
    let f = Fixture::new("basic");
    // And a test that reads its own executable, as a backtrace does: the
    // binary's layout must not depend on where the checkout is.
    f.write(
        "beta/tests/own_executable.rs",
        "#[test]\nfn reads_it() {\n    let exe = std::env::current_exe().unwrap();\n    assert!(std::fs::read(exe).unwrap().len() > 1000);\n}\n",
    );
    let first = f.test_ok(&[]).ran();
    assert!(first.contains("beta::files runs_helper"), "{first:?}");
    assert!(first.contains("beta::own_executable reads_it"), "{first:?}");
    let name = format!(
        "{}-moved-elsewhere",
        f.path().file_name().unwrap().to_string_lossy()
    );
    let moved = f.moved_to(&name);
    assert!(moved.selected(&[]).is_empty(), "{:?}", moved.selected(&[]));
    assert!(moved.test_ok(&[]).ran().is_empty());

    // Blind to where the checkout is, not to what the path says inside it:
    // another file in the same directory is another constant.
    moved.edit(
        "beta/tests/files.rs",
        "assert!(Path::new(env!(\"CARGO_BIN_EXE_helper\")).exists());",
        "assert!(Path::new(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/Cargo.toml\")).exists());",
    );
    let selected: Vec<String> = moved.selected(&[]).into_iter().map(|(t, _)| t).collect();
    assert_eq!(selected, ["beta::files has_cargo_env"]);
}

/// What a new version of the tool that bumps the record format finds: the
/// state an older one left, under its own format's directory.
#[test]
fn a_format_bump_runs_every_test_once_says_why_and_keeps_the_old_records() {
    let f = Fixture::new("faults");
    assert_eq!(f.test_ok(&[]).ran(), labels(ALL));
    let ours = ekstazi_core::files::sealed::FORMAT_VERSION;
    let older = format!("v{}", ours - 1);
    std::fs::rename(
        f.file(&format!(".ekstazi/v{ours}")),
        f.file(&format!(".ekstazi/{older}")),
    )
    .unwrap();

    let run = f.run(&["test"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "are of format {older} and this cargo-ekstazi reads format v{ours}"
        )),
        "{run:?}"
    );
    assert!(
        run.stderr
            .contains("every test runs once, and is recorded again"),
        "{run:?}"
    );
    assert!(
        !run.stderr.contains("no records yet"),
        "one note says it: {run:?}"
    );
    assert_eq!(run.ran(), labels(ALL), "nothing is taken from them");
    assert!(
        f.file(&format!(".ekstazi/{older}")).is_dir(),
        "not deleted behind the user's back"
    );

    // Once recorded again, the old records are only mentioned.
    let again = f.test_ok(&[]);
    assert!(again.ran().is_empty(), "{again:?}");
    assert!(
        again
            .stderr
            .contains(&format!("records of format {older} in")),
        "{again:?}"
    );
    assert!(again.stderr.contains("are ignored"), "{again:?}");
}

#[test]
fn a_damaged_shim_of_the_right_length_is_replaced() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let shims: Vec<_> = std::fs::read_dir(f.path().join("target/ekstazi"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libekstazi_runtime-"))
        })
        .collect();
    let [shim] = &shims[..] else {
        panic!("one shim expected: {shims:?}")
    };
    let good = std::fs::read(shim).unwrap();
    // Zeroed in place: the same name and length, not an ELF file.
    std::fs::write(shim, vec![0u8; good.len()]).unwrap();
    let run = f.test_ok(&["--forceall"]);
    assert_eq!(run.ran().len(), 5, "{run:?}");
    assert!(
        std::fs::read(shim).unwrap() == good,
        "the shim was not rewritten"
    );
}

#[test]
fn a_forged_record_dated_in_the_future_is_neither_imported_nor_merged() {
    use ekstazi_core::model::record::Outcome;
    use ekstazi_core::storage::store::{Loaded, Store};
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    // A shard's state with the test's record forged: passed, no
    // dependencies, dated as late as can be.
    let forged = tempfile::tempdir().unwrap();
    let ours = Store::new(&f.path().join(".ekstazi"));
    let Loaded::Found(mut record) = ours.load("verdicts::verdicts", "multiplies") else {
        panic!("no record of multiplies")
    };
    record.deps.clear();
    record.code.clear();
    record.outcome = Outcome::Passed;
    record.recorded_at_ms = u64::MAX;
    Store::new(forged.path()).save(&record).unwrap();

    // As an archive, imported, then as a shard's state, merged.
    let archive = f.tmp().join("forged.tar.zst");
    let export = f.run(&[
        "history",
        "export",
        archive.to_str().unwrap(),
        "--state-dir",
        forged.path().to_str().unwrap(),
    ]);
    assert_eq!(export.code(), Some(0), "{export:?}");
    let import = f.run(&["history", "import", archive.to_str().unwrap()]);
    assert_eq!(import.code(), Some(0), "{import:?}");
    assert!(
        import.stderr.contains("after this machine's clock"),
        "{import:?}"
    );
    let run = f.run(&["merge-state", forged.path().to_str().unwrap()]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("after this machine's clock"), "{run:?}");
    // The test's own record still decides: a change it executes runs it.
    f.edit("src/lib.rs", "a * b", "b * a");
    let selected: Vec<String> = f.selected(&[]).into_iter().map(|(l, _)| l).collect();
    assert_eq!(selected, ["verdicts::verdicts multiplies"]);
}

/// Writes a zstd-compressed tar of `entries`: each a header of the given
/// type, path and claimed size, followed by that many zeros of data.
fn hostile_archive(path: &std::path::Path, entries: &[(u8, String, u64, u64)]) {
    use std::io::{Read, Write};
    let file = std::fs::File::create(path).unwrap();
    let mut out = zstd::Encoder::new(file, 1).unwrap();
    for (kind, name, claimed, zeros) in entries {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(format!("{claimed:011o}\0").as_bytes());
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = *kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.write_all(&h).unwrap();
        std::io::copy(&mut std::io::repeat(0).take(*zeros), &mut out).unwrap();
    }
    out.finish().unwrap();
}

#[test]
fn hostile_archives_are_refused_in_bounded_memory_and_leave_nothing_behind() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let records = f.records();
    let state = f.path().join(".ekstazi");
    // What a killed import left: the next import removes it.
    std::fs::create_dir_all(state.join(".importKILLED")).unwrap();
    std::fs::write(state.join(".importKILLED/junk"), "x").unwrap();
    let gib = 1u64 << 30;
    let store_path = format!(
        "v{}/verdicts%3A%3Averdicts/forged",
        ekstazi_core::files::sealed::FORMAT_VERSION
    );
    let cases = [
        // A PAX header claiming a gigabyte, and the gigabyte there.
        (
            "pax",
            vec![(b'x', "PaxHeader".to_owned(), gib, gib)],
            "extended header",
        ),
        // A GNU long name claiming a gigabyte, and the gigabyte there.
        (
            "long-name",
            vec![(b'L', "././@LongLink".to_owned(), gib, gib)],
            "extended header",
        ),
        // Half a gigabyte of zeros in an entry left out, then a file whose
        // size passes the limit on what an import reads.
        (
            "bomb",
            vec![
                (b'0', "junk".to_owned(), gib / 2, gib / 2),
                (b'0', store_path.clone(), gib, 0),
            ],
            "more than any state",
        ),
    ];
    for (name, entries, expected) in cases {
        let archive = f.tmp().join(format!("{name}.tar.zst"));
        hostile_archive(&archive, &entries);
        let (run, peak_kib) = with_peak_rss(
            f.command(&["history", "import", archive.to_str().unwrap()]),
            f.tmp(),
        );
        let (code, stderr) = (run.code(), &run.stderr);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(peak_kib < 128 * 1024, "{name}: a peak of {peak_kib} KiB");
        assert_eq!(f.records(), records, "{name}");
        let scratch: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".import"))
            .collect();
        assert!(scratch.is_empty(), "{name}: {scratch:?}");
    }
}

#[test]
fn with_a_seal_key_a_state_sealed_without_it_is_refused_and_everything_runs() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let keyed = [("EKSTAZI_SEAL_KEY", "the CI's secret")];
    // Sealed without the key: not trusted; every test runs, and says why.
    let selected = f.selected_with(&[], &keyed);
    assert_eq!(selected.len(), 5, "{selected:?}");
    assert!(
        selected
            .iter()
            .all(|(_, reasons)| reasons.iter().any(|r| r.contains("sealed without the key"))),
        "{selected:?}"
    );
    let run = f.run_with(&["test"], &keyed);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert_eq!(run.ran().len(), 5, "{run:?}");
    // The key on both sides: selection as without one.
    assert!(f.selected_with(&[], &keyed).is_empty());
    f.edit("src/lib.rs", "a * b", "b * a");
    let selected: Vec<String> = f
        .selected_with(&[], &keyed)
        .into_iter()
        .map(|(label, _)| label)
        .collect();
    assert_eq!(selected, ["verdicts::verdicts multiplies"]);
    // Another key, or none, trusts none of it.
    let other = [("EKSTAZI_SEAL_KEY", "a guess")];
    assert_eq!(f.selected_with(&[], &other).len(), 5);
    assert_eq!(f.selected(&[]).len(), 5);
}
