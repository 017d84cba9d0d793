//! Faults, interrupts, concurrency and hostile state: a test is skipped only
//! on the evidence of an intact record whose every dependency still matches.

use crate::support::{Fixture, labels};
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

    let env = [
        ("FIXTURE_ABORT", "1"),
        ("FIXTURE_SEGV", "1"),
        ("FIXTURE_HANG", "1"),
        ("FIXTURE_EXIT", "1"),
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

#[test]
fn an_interrupt_keeps_finished_records_and_reruns_the_rest() {
    let f = Fixture::new("faults");
    let mut child = f
        .command(&["test", "-j", "1"])
        .env("FIXTURE_SLOW_MS", "5000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // Tests run one at a time, in name order: interrupt while `b_slow` sleeps.
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("PASS") && line.ends_with("a_quick") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    seen.extend(lines.map(Result::unwrap));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("INTERRUPTED") && l.ends_with("b_slow")),
        "{seen:#?}"
    );

    // What finished keeps its record; what did not, or never started, runs.
    let selected: Vec<String> = f
        .selected_with(&[], &[("FIXTURE_SLOW_MS", "5000")])
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(
        selected.iter().collect::<std::collections::BTreeSet<_>>(),
        ALL[1..]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .iter()
            .collect(),
        "every test but a_quick"
    );
}

#[test]
fn a_second_run_waits_for_the_first_or_fails_fast() {
    let f = Fixture::new("faults");
    f.test_ok(&[]);
    let mut first = f
        .command(&["test", "--forceall", "-j", "1"])
        .env("FIXTURE_SLOW_MS", "2500")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first run holds the lock once it has printed its selection.
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("selected") {
            break;
        }
    }
    let fast = f.run_with(&["test", "--no-wait"], &[("FIXTURE_SLOW_MS", "2500")]);
    assert_ne!(fast.code(), Some(0), "{fast:?}");
    assert!(
        fast.stderr.contains("another cargo-ekstazi run holds"),
        "{fast:?}"
    );

    let patient = f.run_with(&["test"], &[("FIXTURE_SLOW_MS", "2500")]);
    assert_eq!(patient.code(), Some(0), "{patient:?}");
    assert!(
        patient
            .stderr
            .contains("waiting for another cargo-ekstazi run"),
        "{patient:?}"
    );
    for _ in lines {}
    assert!(first.wait().unwrap().success());
    // Both wrote whole records: nothing is left to run.
    assert!(
        f.selected_with(&[], &[("FIXTURE_SLOW_MS", "2500")])
            .is_empty()
    );
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
        ekstazi_core::record::FORMAT_VERSION
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
        ]
    );
    let run = f.test_ok(&[]);
    assert_eq!(
        run.ran(),
        labels(&["faults::faults a_quick", "faults::faults b_slow"])
    );
    assert!(f.selected(&[]).is_empty(), "both rewritten whole");
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
fn records_of_another_format_are_ignored_with_a_message_and_kept() {
    let f = Fixture::new("faults");
    let old = f.file(".ekstazi/v1/faults%3A%3Afaults/a_quick");
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::write(&old, b"an old record").unwrap();
    let run = f.run(&["test"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("records of format v1"), "{run:?}");
    assert!(run.stderr.contains("are ignored"), "{run:?}");
    assert_eq!(run.ran(), labels(ALL), "nothing is taken from them");
    assert!(old.exists(), "not deleted behind the user's back");
}
