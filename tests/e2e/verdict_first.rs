//! Verdicts first: the selected tests' verdicts from a run like `cargo
//! test`'s, their recording after, in the background; a later run stops
//! that recording, and a test that failed in front of the user is never
//! recorded as a pass.

use crate::support::Fixture;
use std::time::{Duration, Instant};

/// Which of the two tests that share a process's state failed in the
/// verdicts: exactly one of them does.
fn the_one_that_failed(run: &crate::support::TestRun) -> &'static str {
    let failed: Vec<&str> = ["a_claims", "b_claims"]
        .into_iter()
        .filter(|name| run.stdout.contains(&format!("test {name} ... FAILED")))
        .collect();
    assert_eq!(failed.len(), 1, "{run:?}");
    failed[0]
}

#[test]
fn verdicts_come_first_and_the_recording_follows() {
    let f = Fixture::new("verdicts");
    let run = f.test_ok(&["--verdict-first"]);
    // libtest's own lines: the tests ran in one process per binary.
    assert!(run.stdout.contains("test adds ... ok"), "{run:?}");
    assert!(
        run.ran().is_empty(),
        "no test ran one process each: {run:?}"
    );
    assert!(
        run.stderr.contains("recording 5 test(s) in the background"),
        "{run:?}"
    );
    f.wait_for_background_recording();
    // The recording wrote every record: nothing is left to run.
    assert!(f.selected(&[]).is_empty(), "{:?}", f.selected(&[]));
    let log = f.read(".ekstazi/recording.log");
    assert!(log.contains("5 passed"), "{log}");

    f.edit("src/lib.rs", "a * b", "b * a");
    let json = f.tmp().join("run.json");
    let run = f.test_ok(&["--verdict-first", "--report-json", json.to_str().unwrap()]);
    assert!(run.stdout.contains("test multiplies ... ok"), "{run:?}");
    assert!(!run.stdout.contains("test adds ... ok"), "{run:?}");
    // The report: the selection and the verdicts, no durations.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["verdict_first"], true);
    let ran: Vec<_> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["selected"] == true)
        .map(|t| {
            (
                t["name"].as_str().unwrap(),
                t["outcome"].clone(),
                t["duration"].clone(),
            )
        })
        .collect();
    assert_eq!(
        ran,
        [(
            "multiplies",
            serde_json::json!("passed"),
            serde_json::Value::Null
        )]
    );
    f.wait_for_background_recording();
    assert!(f.selected(&[]).is_empty(), "{:?}", f.selected(&[]));
}

#[test]
fn a_test_that_failed_in_the_verdicts_is_recorded_failed() {
    // The two tests that share a process's state: one fails in the verdict
    // run, and both pass alone, as the recording runs them.
    let f = Fixture::new("verdicts").with_env("FIXTURE_INTERFERE", "1");
    let run = f.run(&["test", "--verdict-first"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    let failed = [the_one_that_failed(&run)];
    f.wait_for_background_recording();
    let log = f.read(".ekstazi/recording.log");
    assert!(log.contains("5 passed"), "alone, both passed: {log}");
    // It runs again, as failed.
    let selected = f.selected(&[]);
    assert_eq!(
        selected,
        [(
            format!("verdicts::verdicts {}", failed[0]),
            vec!["failed last time".to_owned()]
        )]
    );
}

#[test]
fn a_later_run_stops_the_recording_and_runs_what_it_had_not_recorded() {
    let f = Fixture::new("verdicts");
    let runs = f.tmp().join("runs");
    let gate = f.tmp().join("gate");
    let env = [
        ("FIXTURE_RUNS", runs.to_str().unwrap()),
        // The verdict run is the first; the recording holds on the second.
        ("FIXTURE_HOLD_ON_RUN", "2"),
        ("FIXTURE_GATE", gate.to_str().unwrap()),
    ];
    let run = f.run_with(&["test", "--verdict-first"], &env);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let since = Instant::now();
    while std::fs::read_to_string(&runs).unwrap_or_default() != "2" {
        assert!(
            since.elapsed() < Duration::from_secs(300),
            "the recording never reached the held test"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = f.read(".ekstazi/recording.pid").trim().parse().unwrap();

    let run = f.run_with(&["test"], &env);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(
        run.stderr
            .contains("stopped the last verdict-first run's recording"),
        "{run:?}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z")),
        "the recording {pid} still runs"
    );
    // The held test was never recorded: it ran now. Every other test has
    // a record (from the recording or from this run); the held test writes
    // the file it reads, so it always runs.
    assert!(
        run.ran().contains("verdicts::verdicts counts_runs"),
        "{run:?}"
    );
    let selected: Vec<String> = f
        .selected_with(&[], &env)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(selected, ["verdicts::verdicts counts_runs"]);
}

#[test]
fn a_failure_in_the_verdicts_is_recorded_before_the_recording_gets_to_it() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    // Every test passed and nothing changes: every record vouches. Run
    // them all again, verdicts first: one of the two that share a
    // process's state fails; the recording holds in both, and is stopped.
    let runs = f.tmp().join("claims");
    std::fs::create_dir(&runs).unwrap();
    let gate = f.tmp().join("gate");
    let env = [
        ("FIXTURE_INTERFERE", "1"),
        ("FIXTURE_CLAIM_RUNS", runs.to_str().unwrap()),
        ("FIXTURE_CLAIM_HOLD", "2"),
        ("FIXTURE_GATE", gate.to_str().unwrap()),
    ];
    let run = f.run_with(&["test", "--forceall", "--verdict-first"], &env);
    assert_eq!(run.code(), Some(101), "{run:?}");
    let failed = [the_one_that_failed(&run)];
    let since = Instant::now();
    let held = |name: &str| std::fs::read_to_string(runs.join(name)).unwrap_or_default() == "2";
    while !(held("a_claims") && held("b_claims")) {
        assert!(
            since.elapsed() < Duration::from_secs(300),
            "the recording never reached the two tests"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Any later run stops the recording; the failure is on record anyway.
    let selected = f.selected(&[]);
    assert_eq!(
        selected,
        [(
            format!("verdicts::verdicts {}", failed[0]),
            vec!["failed last time".to_owned()]
        )]
    );
    std::fs::write(&gate, "").unwrap();
}

/// A run whose records nobody keeps (a pull request's job) runs the
/// selected tests as `cargo test` does and ends with their verdicts.
#[test]
fn a_run_that_records_nothing_runs_as_cargo_test_does() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let before = f.record_bytes();
    f.edit("src/lib.rs", "a * b", "a + b");
    let run = f.run(&["test", "--no-record", "--junit", "junit.xml"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    // libtest's own lines, one process for the binary, no process per test.
    assert!(run.stdout.contains("test multiplies ... FAILED"), "{run:?}");
    assert!(run.ran().is_empty(), "{run:?}");
    assert!(!run.stderr.contains("in the background"), "{run:?}");
    assert_eq!(f.record_bytes(), before, "nothing recorded");
    let junit = f.read("junit.xml");
    assert!(junit.contains("<testcase name=\"multiplies\""), "{junit}");
    assert!(junit.contains("<failure"), "{junit}");
    // No recording follows: the state is as it was, so the same selection.
    assert!(
        f.selected(&[])
            .iter()
            .any(|(label, _)| label == "verdicts::verdicts multiplies")
    );

    // An option that needs a process per test keeps one, and says so.
    let run = f.run(&["test", "--no-record", "--retries", "1"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(
        run.failed().contains("verdicts::verdicts multiplies"),
        "{run:?}"
    );
    assert!(run.stderr.contains("--retries needs one"), "{run:?}");
    assert_eq!(f.record_bytes(), before);
}
