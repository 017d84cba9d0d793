//! The core promise: from the second run on, only affected tests run, and
//! every selection names its reason.

use crate::support::{BASIC_ALL, Fixture, assert_each_selected_for, labels};

const ALL: &[&str] = BASIC_ALL;

#[test]
fn first_run_runs_everything_and_second_run_nothing() {
    let f = Fixture::new("basic");
    let first = f.test_ok(&[]);
    assert_eq!(first.ran(), labels(ALL), "{first:?}");
    assert_eq!(f.records().len(), ALL.len(), "one record per test");

    let second = f.test_ok(&[]);
    assert!(second.ran().is_empty(), "{second:?}");
    assert!(
        second.stdout.contains("12 skipped as unaffected"),
        "{second:?}"
    );

    let list = f.list(&[]);
    assert_eq!(list["total"], 12);
    assert_eq!(list["selected"], 0);
    for test in list["tests"].as_array().unwrap() {
        assert_eq!(test["reasons"].as_array().unwrap().len(), 0, "{test}");
    }
}

#[test]
fn a_changed_data_file_selects_only_its_reader() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);

    f.write("beta/data/a.txt", "other data\n");
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files reads_data".to_owned(),
            vec!["file changed: beta/data/a.txt".to_owned()]
        )]
    );
    assert_eq!(f.test_ok(&[]).ran(), labels(&["beta::files reads_data"]));

    // Same bytes, new modification time: nothing to do.
    std::thread::sleep(std::time::Duration::from_millis(20));
    f.write("beta/data/a.txt", "other data\n");
    assert!(f.selected(&[]).is_empty());
    assert!(f.test_ok(&[]).ran().is_empty());
}

#[test]
fn creating_a_path_a_test_found_absent_selects_it() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);

    f.write("beta/somefile.txt", "now I exist");
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files asserts_absent".to_owned(),
            vec!["file created: beta/somefile.txt".to_owned()]
        )]
    );
    let run = f.run(&["test"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert_eq!(run.failed(), labels(&["beta::files asserts_absent"]));
    assert!(
        run.stdout.contains("somefile.txt must not exist"),
        "the failure's output is shown: {run:?}"
    );

    std::fs::remove_file(f.file("beta/somefile.txt")).unwrap();
    assert_eq!(
        f.test_ok(&[]).ran(),
        labels(&["beta::files asserts_absent"])
    );
    assert!(f.test_ok(&[]).ran().is_empty());
}

#[test]
fn a_test_that_failed_runs_until_it_passes() {
    let f = Fixture::new("basic");
    let failing = f.run_with(&["test"], &[("FIXTURE_FAIL", "1")]);
    assert_eq!(failing.code(), Some(101), "{failing:?}");
    assert_eq!(failing.failed(), labels(&["beta::files fails_on_request"]));

    // The failed run's record keeps what it observed: the variable that
    // made it fail is gone now, and says so.
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files fails_on_request".to_owned(),
            vec![
                "failed last time".to_owned(),
                "environment variable unset: FIXTURE_FAIL".to_owned()
            ]
        )]
    );
    assert_eq!(
        f.test_ok(&[]).ran(),
        labels(&["beta::files fails_on_request"])
    );
    assert!(f.test_ok(&[]).ran().is_empty());
}

#[test]
fn a_library_change_selects_the_binaries_that_link_it() {
    let f = Fixture::new("basic").with_env("EKSTAZI_GRANULARITY", "binary");
    f.test_ok(&[]);

    f.edit("alpha/src/lib.rs", "x * 2", "x + x");
    let selected = f.selected(&[]);
    let names: Vec<&str> = selected.iter().map(|(label, _)| label.as_str()).collect();
    // Every test but gamma's two, the last of the list.
    assert_eq!(
        names,
        ALL[..ALL.len() - 2],
        "gamma links nothing of alpha and stays skipped"
    );
    assert_each_selected_for(&selected, "binary changed");
    assert_eq!(f.test_ok(&[]).ran().len(), 10);
    assert!(f.test_ok(&[]).ran().is_empty());
}

#[test]
fn forceall_reruns_everything_and_a_damaged_record_reruns_its_test() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    let before: Vec<Vec<u8>> = f
        .records()
        .iter()
        .map(|r| std::fs::read(f.file(r.to_str().unwrap())).unwrap())
        .collect();

    let forced = f.test_ok(&["--forceall"]);
    assert_eq!(forced.ran(), labels(ALL));
    let after: Vec<Vec<u8>> = f
        .records()
        .iter()
        .map(|r| std::fs::read(f.file(r.to_str().unwrap())).unwrap())
        .collect();
    assert_eq!(before.len(), after.len());
    assert!(
        before.iter().zip(&after).all(|(a, b)| a != b),
        "every record is rewritten (durations differ)"
    );

    let record = f
        .records()
        .into_iter()
        .find(|r| r.to_string_lossy().ends_with("reads_nothing"))
        .unwrap();
    let path = f.file(record.to_str().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files reads_nothing".to_owned(),
            vec!["record unreadable: record is truncated".to_owned()]
        )]
    );
    assert_eq!(f.test_ok(&[]).ran(), labels(&["beta::files reads_nothing"]));
    assert!(f.selected(&[]).is_empty(), "the record was rewritten whole");
}

#[test]
fn a_filter_runs_only_matching_tests_and_keeps_the_other_records() {
    let f = Fixture::new("basic").with_env("EKSTAZI_GRANULARITY", "binary");
    f.test_ok(&[]);
    f.edit("alpha/src/lib.rs", "x * 2", "x + x");

    let filtered = f.test_ok(&["doubles"]);
    assert_eq!(filtered.ran(), labels(&["alpha tests::doubles"]));
    let still = f.selected(&[]);
    assert!(
        still
            .iter()
            .all(|(label, _)| label != "alpha tests::doubles")
    );
    assert!(
        still
            .iter()
            .any(|(label, _)| label == "alpha tests::triples"),
        "outside the filter, still to run: {still:?}"
    );

    let exact = f.test_ok(&["--", "--exact", "tests::triples", "--skip", "nothing"]);
    assert_eq!(exact.ran(), labels(&["alpha tests::triples"]));
    let skipped = f.test_ok(&["--", "--skip", "reads"]);
    assert!(!skipped.ran().is_empty(), "{skipped:?}");
    assert!(
        skipped.ran().iter().all(|l| !l.contains("reads")),
        "{skipped:?}"
    );
}

#[test]
fn ignored_tests_run_only_when_asked() {
    let f = Fixture::new("basic");
    let run = f.test_ok(&[]);
    assert!(run.stdout.contains("1 ignored"), "{run:?}");
    let ignored = f.test_ok(&["--", "--ignored"]);
    assert_eq!(ignored.ran(), labels(&["alpha tests::slow_and_ignored"]));
    assert!(f.test_ok(&["--", "--ignored"]).ran().is_empty());
}

#[test]
fn records_of_removed_tests_are_deleted() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    assert!(
        f.records()
            .iter()
            .any(|r| r.to_string_lossy().ends_with("says_hello"))
    );
    f.edit(
        "gamma/src/lib.rs",
        "#[test]\n    fn says_hello",
        "#[allow(dead_code)]\n    fn says_hello",
    );
    f.test_ok(&[]);
    assert!(
        !f.records()
            .iter()
            .any(|r| r.to_string_lossy().ends_with("says_hello"))
    );
}

#[test]
fn cargo_options_and_the_state_directory_are_honoured() {
    let f = Fixture::new("basic");
    let elsewhere = tempfile::tempdir().unwrap();
    let manifest = f.file("Cargo.toml");
    let target = elsewhere.path().join("tgt");
    let state = elsewhere.path().join("state");
    let mut command = f.command(&[
        "test",
        "--manifest-path",
        manifest.to_str().unwrap(),
        "--target-dir",
        target.to_str().unwrap(),
        "-p",
        "alpha",
    ]);
    command
        .current_dir(elsewhere.path())
        .env("EKSTAZI_DIR", &state);
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("PASS") && stdout.contains("alpha tests::doubles"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("beta"),
        "only the requested package: {stdout}"
    );
    assert!(
        target.join("ekstazi/build").exists(),
        "built in the requested target directory"
    );
    assert!(
        state
            .join(format!(
                "v{}/alpha",
                ekstazi_core::files::sealed::FORMAT_VERSION
            ))
            .is_dir(),
        "records in the requested state directory"
    );
    assert!(!f.file(".ekstazi").exists());
}

#[test]
fn list_prints_a_readable_table() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    f.write("beta/data/a.txt", "changed");
    let run = f.run(&["list"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("reads_data"))
        .unwrap();
    assert!(line.starts_with("run "), "{line}");
    assert!(line.ends_with("file changed: beta/data/a.txt"), "{line}");
    let other = run
        .stdout
        .lines()
        .find(|l| l.contains("reads_nothing"))
        .unwrap();
    assert!(
        other.starts_with("skip ") && other.ends_with("unaffected"),
        "{other}"
    );
    assert!(run.stdout.contains("1 of 12 tests selected"), "{run:?}");
    assert!(f.selected(&[]).len() == 1, "list wrote no record");
}

#[test]
fn a_build_failure_is_reported_with_cargos_status() {
    let f = Fixture::new("basic");
    f.edit("alpha/src/lib.rs", "x * 2", "x * ");
    let run = f.run(&["test"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(run.stderr.contains("could not compile"), "{run:?}");
}

#[test]
fn a_changed_program_selects_the_tests_that_ran_it() {
    let f = Fixture::new("basic").with_env("EKSTAZI_GRANULARITY", "binary");
    f.test_ok(&[]);
    f.edit(
        "beta/src/bin/helper.rs",
        "println!(\"helper\");",
        "println!(\"{}\", \"helper\");",
    );
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files runs_helper".to_owned(),
            vec!["program changed: $CARGO_TARGET_DIR/debug/helper".to_owned()]
        )]
    );
    assert_eq!(f.test_ok(&[]).ran(), labels(&["beta::files runs_helper"]));
}
