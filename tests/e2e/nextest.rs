//! `cargo ekstazi nextest`: the selection run by cargo-nextest, recorded so
//! that `cargo ekstazi test` and `cargo ekstazi nextest` are interchangeable
//! on one state directory.

use crate::support::{BASIC_ALL, Fixture, TestRun, labels};
use std::collections::BTreeSet;
use std::process::Command;

const ALL: &[&str] = BASIC_ALL;

/// Whether cargo-nextest can run here; says loudly when it cannot. On a
/// laptop without it these tests pass without running; on CI (`CI` set,
/// and not `false` or `0`) they fail instead: there, a missing
/// cargo-nextest would hide every one of them.
fn nextest_installed() -> bool {
    let installed = Command::new("cargo")
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(
            !ci,
            "cargo-nextest is not installed, and CI is set: install it \
             (cargo install --locked cargo-nextest)"
        );
        eprintln!("======== skipping: cargo-nextest not installed ========");
    }
    installed
}

/// `(status, label)` of every test nextest reports finished, from its lines
/// `        PASS [   0.011s] ( 1/12) alpha tests::doubles` (on stderr).
pub fn nextest_finished(run: &TestRun) -> Vec<(String, String)> {
    run.stderr
        .lines()
        .filter_map(|line| {
            let (status, rest) = line.trim_start().split_once(" [")?;
            let status = status.split_whitespace().last()?;
            let (_, label) = rest.split_once("s] ")?;
            // The counter, `( 1/12) `, when there is one.
            let label = match label.strip_prefix('(') {
                Some(counted) => counted.split_once(") ")?.1,
                None => label,
            };
            let finished = matches!(status, "PASS" | "FAIL" | "FLAKY" | "TIMEOUT" | "ABORT")
                || status.starts_with("SIG")
                || status.starts_with("LEAK");
            finished.then(|| (status.to_owned(), label.trim().to_owned()))
        })
        .collect()
}

/// Labels of the tests nextest ran, whatever their outcome.
pub fn nextest_ran(run: &TestRun) -> BTreeSet<String> {
    nextest_finished(run).into_iter().map(|(_, l)| l).collect()
}

/// Labels of the tests nextest reports failed.
fn nextest_failed(run: &TestRun) -> BTreeSet<String> {
    nextest_finished(run)
        .into_iter()
        .filter(|(status, _)| status != "PASS")
        .map(|(_, l)| l)
        .collect()
}

fn nextest_ok(f: &Fixture, args: &[&str]) -> TestRun {
    let mut all = vec!["nextest"];
    all.extend_from_slice(args);
    let run = f.run(&all);
    assert_eq!(run.code(), Some(0), "{run:?}");
    run
}

fn selected_labels(f: &Fixture) -> BTreeSet<String> {
    f.selected(&[])
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

#[test]
fn nextest_runs_and_records_every_test_then_test_selects_nothing() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("basic");
    let first = nextest_ok(&f, &[]);
    assert!(
        first
            .stdout
            .contains("12 tests selected, 0 skipped as unaffected"),
        "{first:?}"
    );
    // The `harness = false` binary runs too, as one test.
    assert_eq!(nextest_ran(&first), labels(ALL), "{first:?}");
    assert!(first.stdout.contains("12 passed"), "{first:?}");
    assert_eq!(f.records().len(), ALL.len(), "one record per test");
    // Nextest ran the build the analysis saw: its cargo had nothing to compile.
    let (_, after_build) = first
        .stderr
        .split_once("no records yet")
        .expect("the note on the first run");
    assert!(!after_build.contains("Compiling"), "{first:?}");

    let test = f.test_ok(&[]);
    assert!(test.ran().is_empty(), "{test:?}");
    assert!(test.stdout.contains("12 skipped as unaffected"), "{test:?}");

    // With nothing selected, nextest is not started, and says why.
    let again = nextest_ok(&f, &[]);
    assert!(again.stdout.contains("nothing to run"), "{again:?}");
    assert!(!again.stderr.contains("Nextest run ID"), "{again:?}");
}

#[test]
fn after_an_edit_nextest_runs_exactly_the_selected_tests() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("basic");
    nextest_ok(&f, &[]);

    f.write("beta/data/a.txt", "other data\n");
    f.edit("alpha/src/lib.rs", "x * 3", "x + x + x");
    let selected = selected_labels(&f);
    assert_eq!(
        selected,
        labels(&["alpha tests::triples", "beta::files reads_data"])
    );
    let run = nextest_ok(&f, &[]);
    assert!(
        run.stdout
            .contains("2 tests selected, 10 skipped as unaffected"),
        "{run:?}"
    );
    assert_eq!(nextest_ran(&run), selected, "{run:?}");

    // Recorded: neither runner has anything left to do.
    assert!(f.selected(&[]).is_empty());
    assert!(f.test_ok(&[]).ran().is_empty());
}

#[test]
fn a_failing_test_is_not_recorded_as_passed_and_runs_again() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("basic");
    let failing = f.run_with(
        &["nextest", "--", "--no-fail-fast"],
        &[("FIXTURE_FAIL", "1")],
    );
    // Nextest's own exit status for failed tests.
    assert_eq!(failing.code(), Some(100), "{failing:?}");
    assert_eq!(
        nextest_failed(&failing),
        labels(&["beta::files fails_on_request"])
    );
    assert_eq!(nextest_ran(&failing), labels(ALL));
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

    // Every test forced, one at a time, stopping at the first failure: the
    // tests nextest never started have no result and keep their records.
    let stopped = f.run_with(
        &["nextest", "--forceall", "--", "-j", "1"],
        &[("FIXTURE_FAIL", "1")],
    );
    assert_eq!(stopped.code(), Some(100), "{stopped:?}");
    // The summary counts the selection and what nextest ran, apart.
    let ran = nextest_ran(&stopped).len();
    let passed = ran - nextest_failed(&stopped).len();
    let counts = if ran < ALL.len() {
        assert!(
            stopped.stderr.contains(&format!(
                "{} selected test(s) have no result",
                ALL.len() - ran
            )),
            "{stopped:?}"
        );
        format!("12 selected, {ran} ran: {passed} passed; 1 failed;")
    } else {
        "12 selected: 11 passed; 1 failed;".to_owned()
    };
    assert!(stopped.stdout.contains(&counts), "{counts}: {stopped:?}");
    assert_eq!(
        selected_labels(&f),
        labels(&["beta::files fails_on_request"])
    );

    let fixed = nextest_ok(&f, &[]);
    assert_eq!(
        nextest_ran(&fixed),
        labels(&["beta::files fails_on_request"])
    );
    assert!(f.selected(&[]).is_empty());
}

#[test]
fn records_from_nextest_and_from_test_select_alike() {
    if !nextest_installed() {
        return;
    }
    let by_nextest = Fixture::new("basic");
    nextest_ok(&by_nextest, &[]);
    let by_test = Fixture::new("basic");
    by_test.test_ok(&[]);
    // The same dependencies, environment variables included.
    assert!(by_nextest.selected(&[]).is_empty());
    assert!(by_test.selected(&[]).is_empty());

    for f in [&by_nextest, &by_test] {
        f.write("beta/data/a.txt", "other data\n");
        f.write("beta/somefile.txt", "now I exist");
        f.edit("alpha/src/lib.rs", "x * 2", "x + x");
        f.write("gamma/custom.cfg", "fine\n");
    }
    let selection = by_test.selected(&[]);
    assert_eq!(by_nextest.selected(&[]), selection);
    assert_eq!(
        selection
            .iter()
            .map(|(label, _)| label.as_str())
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "alpha tests::doubles",
            "beta tests::quadruples",
            "beta::files asserts_absent",
            "beta::files reads_data",
            "beta::files reads_nothing",
            "gamma::custom (whole binary)",
        ])
    );
    // And the runners agree on what each other recorded.
    std::fs::remove_file(by_nextest.file("beta/somefile.txt")).unwrap();
    std::fs::remove_file(by_test.file("beta/somefile.txt")).unwrap();
    nextest_ok(&by_test, &[]);
    by_nextest.test_ok(&[]);
    assert!(by_nextest.selected(&[]).is_empty());
    assert!(by_test.selected(&[]).is_empty());
}

#[test]
fn a_test_that_passes_only_on_a_retry_runs_again() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("nextest");
    let marker = f.file("marker.txt");
    let run = f.run_with(
        &["nextest", "--", "--retries", "1"],
        &[("NX_FLAKY_MARKER", marker.to_str().unwrap())],
    );
    // Nextest passes a flaky test; cargo-ekstazi does not record it as passed.
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("recorded as failed"), "{run:?}");
    assert!(run.stdout.contains("2 passed; 0 failed"), "{run:?}");
    let selected = f.selected(&[]);
    assert_eq!(selected.len(), 1, "{selected:?}");
    assert_eq!(selected[0].0, "nx::retry flaky");
    assert_eq!(selected[0].1[0], "failed last time", "{selected:?}");
    let again = nextest_ok(&f, &[]);
    assert_eq!(nextest_ran(&again), labels(&["nx::retry flaky"]));
    assert!(f.selected(&[]).is_empty());
}

#[test]
fn nextest_filtersets_narrow_the_selection_and_the_rest_keeps_its_records() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("basic");
    nextest_ok(&f, &[]);
    let before = f.records();
    let run = nextest_ok(&f, &["--forceall", "--", "-E", "package(alpha)"]);
    assert_eq!(
        nextest_ran(&run),
        labels(&["alpha tests::doubles", "alpha tests::triples"])
    );
    assert!(
        run.stderr.contains("10 selected test(s) have no result"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("12 selected, 2 ran: 2 passed; 0 failed;"),
        "{run:?}"
    );
    assert_eq!(f.records(), before);
    assert!(f.selected(&[]).is_empty());
}

#[test]
fn skipme_is_plain_nextest_and_records_nothing() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("nextest");
    let run = nextest_ok(&f, &["--skipme"]);
    assert_eq!(
        nextest_ran(&run),
        labels(&["nx::retry flaky", "nx::retry steady"])
    );
    assert!(f.records().is_empty(), "{:?}", f.records());
}

#[test]
fn cargo_options_after_the_separator_are_refused() {
    let f = Fixture::new("nextest");
    let run = f.run(&["nextest", "--", "-p", "nx"]);
    assert_eq!(run.code(), Some(1), "{run:?}");
    assert!(run.stderr.contains("give it before `--`"), "{run:?}");
}

#[test]
fn under_nextest_each_test_gets_its_own_temporary_directory_too() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("stability");
    let tmp_tests = ["-p", "scratch", "--test", "tmp"];
    let run = nextest_ok(&f, &[&tmp_tests[..], &["--", "-j", "4"]].concat());
    assert_eq!(nextest_ran(&run).len(), 4, "{run:?}");
    let selected = f.selected(&tmp_tests);
    assert!(selected.is_empty(), "{selected:?}");
    // The tests' directories are gone; the root stays, for the next run.
    f.assert_scratch_root_empty();
    // And `test` agrees.
    assert!(f.test_ok(&tmp_tests).ran().is_empty());
}

#[test]
fn a_users_own_runner_is_chained_behind_the_shim() {
    if !nextest_installed() {
        return;
    }
    let f = Fixture::new("nextest");
    // A runner that notes each command and runs it, as `valgrind` or
    // `qemu` wrappers do, for the host.
    let marker = f.tmp().join("runner-saw");
    let runner = f.tmp().join("my-runner");
    std::fs::write(
        &runner,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec \"$@\"\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let host = host_triple();
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    let env = [(var.as_str(), runner.to_str().unwrap())];
    let run = f.run_with(&["nextest"], &env);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert_eq!(
        nextest_ran(&run),
        labels(&["nx::retry flaky", "nx::retry steady"])
    );
    // The user's runner ran each test binary...
    let saw = std::fs::read_to_string(&marker).unwrap();
    assert!(
        saw.lines()
            .any(|l| l.contains("retry-") && l.contains("steady")),
        "{saw}"
    );
    // ...under the shim: the functions the test executed were recorded.
    // (The runner is a shell script: its shell inherits every variable, so
    // the tests also depend on all of them, and nextest gives them its own
    // per-run ones; only the function is checked here.)
    let why = f.run_with(&["why", "--all", "retry steady"], &env);
    assert!(why.stdout.contains("nx::answer"), "{why:?}");
    f.edit("src/lib.rs", "    42\n", "    6 * 7\n");
    let selected = f.selected_with(&[], &env);
    let steady = selected
        .iter()
        .find(|(label, _)| label == "nx::retry steady")
        .unwrap_or_else(|| panic!("{selected:?}"));
    assert!(
        steady
            .1
            .contains(&"function changed: nx::answer".to_owned()),
        "{selected:?}"
    );
    let flaky = selected
        .iter()
        .find(|(label, _)| label == "nx::retry flaky");
    assert!(
        flaky.is_none_or(|(_, reasons)| !reasons.iter().any(|r| r.starts_with("function"))),
        "{selected:?}"
    );
}

fn host_triple() -> String {
    let out = Command::new("rustc").arg("-vV").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap()
        .to_owned()
}
