//! What users see and set: `why`, `list` filters, JUnit, partitions and
//! their merge, options from three sources, `--skipme`, plain messages when
//! nothing runs, slow tests, colour, help.

use crate::support::{Fixture, copy_tree, labels};
use ekstazi_core::storage::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[test]
fn why_names_what_decided_each_verdict() {
    let f = Fixture::new("basic");
    let new = f.run(&["why", "tests::doubles"]);
    assert!(
        new.stdout.contains("alpha tests::doubles: selected"),
        "{new:?}"
    );
    assert!(new.stdout.contains("    new"), "{new:?}");
    f.test_ok(&[]);

    let skipped = f.run(&["why", "tests::doubles"]);
    assert_eq!(skipped.code(), Some(0), "{skipped:?}");
    assert!(
        skipped
            .stdout
            .contains("alpha tests::doubles: skipped: unaffected since it last passed"),
        "{skipped:?}"
    );
    assert!(
        skipped
            .stdout
            .contains("none of its dependencies changed since"),
        "{skipped:?}"
    );

    f.write("beta/data/a.txt", "changed\n");
    let changed = f.run(&["why", "reads_data"]);
    assert!(
        changed.stdout.contains(
            "beta::files reads_data: selected: it runs\n    file changed: beta/data/a.txt"
        ),
        "{changed:?}"
    );

    f.write("beta/somefile.txt", "now here\n");
    let created = f.run(&["why", "beta::files asserts_absent"]);
    assert!(
        created.stdout.contains("file created: beta/somefile.txt"),
        "{created:?}"
    );

    let all = f.run(&["why", "reads_data", "--all"]);
    for part in [
        "global fingerprint:",
        "granularity    function",
        "dependencies (",
        "beta/data/a.txt",
        "  now ",
        "functions executed in the test binary",
        "files::reads_data",
    ] {
        assert!(all.stdout.contains(part), "{part:?} in {all:?}");
    }

    let ignored = f.run(&["why", "slow_and_ignored"]);
    assert!(ignored.stdout.contains("ignored (#[ignore]"), "{ignored:?}");

    let ambiguous = f.run(&["why", "tests::"]);
    assert_ne!(ambiguous.code(), Some(0));
    assert!(
        ambiguous
            .stderr
            .contains("tests match `tests::`; name one:")
            && ambiguous.stderr.contains("alpha tests::triples"),
        "{ambiguous:?}"
    );
    let none = f.run(&["why", "no_such_test"]);
    assert_ne!(none.code(), Some(0));
    assert!(none.stderr.contains("no test matches"), "{none:?}");
    assert!(!none.stderr.contains("panicked"), "{none:?}");
}

#[test]
fn the_junit_report_shows_runs_failures_and_skips_with_reasons() {
    let f = Fixture::new("basic");
    f.test_ok(&["--junit", "out/junit.xml"]);
    let report = read_junit(&f.file("out/junit.xml"));
    assert_eq!(report.tests, 13, "12 tests and an ignored one");
    assert_eq!((report.failures, report.errors), (0, 0));
    let ignored = case(&report, "alpha", "tests::slow_and_ignored");
    assert!(matches!(
        ignored.status,
        quick_junit::TestCaseStatus::Skipped { .. }
    ));

    let run = f.run_with(&["test", "--junit", "junit.xml"], &[("FIXTURE_FAIL", "1")]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    let report = read_junit(&f.file("junit.xml"));
    assert_eq!(report.tests, 13);
    assert_eq!(report.failures, 1);
    let failed = case(&report, "beta::files", "fails_on_request");
    match &failed.status {
        quick_junit::TestCaseStatus::NonSuccess {
            kind, description, ..
        } => {
            assert_eq!(*kind, quick_junit::NonSuccessKind::Failure);
            let output = description.as_ref().unwrap().as_str();
            assert!(output.contains("asked to fail"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    let skipped = case(&report, "alpha", "tests::doubles");
    match &skipped.status {
        quick_junit::TestCaseStatus::Skipped { message, .. } => assert_eq!(
            message.as_ref().unwrap().as_str(),
            "unaffected: no dependency changed since it last passed"
        ),
        other => panic!("{other:?}"),
    }
}

fn read_junit(path: &Path) -> quick_junit::Report {
    let xml = std::fs::read_to_string(path).unwrap();
    quick_junit::Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("{e}: {xml}"))
}

fn case<'r>(report: &'r quick_junit::Report, suite: &str, name: &str) -> &'r quick_junit::TestCase {
    report
        .test_suites
        .iter()
        .filter(|s| s.name.as_str() == suite)
        .flat_map(|s| &s.test_cases)
        .find(|c| c.name.as_str() == name)
        .unwrap_or_else(|| panic!("no {suite} {name} in the report"))
}

/// Every record of a state directory, without what differs between two
/// runs of the same test (when it ran, and for how long).
fn comparable_state(
    dir: &Path,
) -> (
    BTreeMap<String, ekstazi_core::model::record::Record>,
    Vec<ekstazi_core::model::code_dep::FnId>,
) {
    let store = Store::new(dir);
    let records = store
        .records()
        .unwrap()
        .into_iter()
        .map(|(path, record)| {
            let mut record = record.unwrap();
            record.duration_us = 0;
            record.recorded_at_ms = 0;
            (
                path.strip_prefix(dir).unwrap().display().to_string(),
                record,
            )
        })
        .collect();
    let table = ekstazi_core::digests::functions::FunctionTable::load(&store.functions_dir());
    (records, table.ids())
}

#[test]
fn two_shards_merged_hold_the_state_of_one_unpartitioned_run() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    // Touches several tests: the ones that call `double`, and a data file.
    f.edit("alpha/src/lib.rs", "x * 2", "x + x");
    f.write("beta/data/a.txt", "changed\n");
    for dir in ["shard-1", "shard-2", "whole"] {
        copy_tree(&f.file(".ekstazi"), &f.file(dir), true);
    }

    let hash: Vec<BTreeSet<String>> = (1..=2)
        .map(|m| {
            let partition = format!("hash:{m}/2");
            f.selected(&["--partition", &partition])
                .into_iter()
                .map(|(label, _)| label)
                .collect()
        })
        .collect();
    assert!(hash[0].is_disjoint(&hash[1]));

    let shards: Vec<BTreeSet<String>> = (1..=2)
        .map(|m| {
            let partition = format!("count:{m}/2");
            let dir = format!("shard-{m}");
            let run = f.test_ok(&["--partition", &partition, "--state-dir", &dir]);
            assert!(run.stdout.contains("for other shards"), "{run:?}");
            run.ran()
        })
        .collect();
    let whole = f.test_ok(&["--state-dir", "whole"]).ran();
    assert!(!shards[0].is_empty() && !shards[1].is_empty(), "{shards:?}");
    assert!(shards[0].is_disjoint(&shards[1]));
    assert_eq!(&shards[0] | &shards[1], whole);
    assert_eq!(&hash[0] | &hash[1], whole);

    let merge = f.run(&["merge-state", "--state-dir", "merged", "shard-1", "shard-2"]);
    assert_eq!(merge.code(), Some(0), "{merge:?}");
    assert!(merge.stdout.contains("merged"), "{merge:?}");
    let merged = comparable_state(&f.file("merged"));
    let expected = comparable_state(&f.file("whole"));
    assert_eq!(merged.0.len(), 12, "a record per test");
    assert_eq!(
        merged.0.keys().collect::<Vec<_>>(),
        expected.0.keys().collect::<Vec<_>>()
    );
    assert!(merged.0 == expected.0, "the merged records equal one run's");
    assert_eq!(merged.1, expected.1, "the same function table");

    // The merged state selects nothing, as the whole run's does.
    let after = f.test_ok(&["--state-dir", "merged"]);
    assert!(after.ran().is_empty(), "{after:?}");

    let missing = f.run(&["merge-state", "--state-dir", "merged", "no-such-dir"]);
    assert_ne!(missing.code(), Some(0));
    assert!(missing.stderr.contains("is not a directory"), "{missing:?}");
    std::fs::create_dir_all(f.file("old/v1")).unwrap();
    let old = f.run(&["merge-state", "--state-dir", "merged", "old"]);
    assert_ne!(old.code(), Some(0));
    assert!(old.stderr.contains("records of format v1 only"), "{old:?}");
}

#[test]
fn options_come_from_the_command_line_then_the_file_then_the_environment() {
    let f = Fixture::new("basic");
    let env = [("EKSTAZI_DIR", "from-env")];
    let records_in = |dir: &str| {
        f.file(&format!(
            "{dir}/v{}",
            ekstazi_core::files::sealed::FORMAT_VERSION
        ))
        .is_dir()
    };
    f.test_ok_with(&["-p", "alpha"], &env);
    assert!(records_in("from-env"));

    f.write(".config/ekstazi.toml", "[run]\nstate-dir = \"from-file\"\n");
    f.test_ok_with(&["-p", "alpha"], &env);
    assert!(records_in("from-file"));

    f.test_ok_with(&["-p", "alpha", "--state-dir", "from-cli"], &env);
    assert!(records_in("from-cli"));

    // Patterns add up across the three.
    f.write(
        ".config/ekstazi.toml",
        "[run]\nstate-dir = \"from-file\"\n[select]\nalways-run = [\"*doubles\"]\n",
    );
    let selected = f.selected_with(
        &["-p", "alpha", "--always-run", "alpha tests::trip*"],
        &[("EKSTAZI_ALWAYS_RUN", "*triples")],
    );
    assert_eq!(
        selected,
        [
            (
                "alpha tests::doubles".to_owned(),
                vec!["always-run pattern `*doubles`".to_owned()]
            ),
            (
                "alpha tests::triples".to_owned(),
                vec!["always-run pattern `alpha tests::trip*`".to_owned()]
            ),
        ]
    );

    // Bad values are clear errors, never panics.
    f.write(".config/ekstazi.toml", "[run]\njobs = 0\n");
    let bad = f.run(&["test"]);
    assert_ne!(bad.code(), Some(0));
    assert!(bad.stderr.contains("run.jobs"), "{bad:?}");
    f.write(".config/ekstazi.toml", "");
    let bad = f.run_with(&["test"], &[("EKSTAZI_TIMEOUT", "soon")]);
    assert_ne!(bad.code(), Some(0));
    assert!(bad.stderr.contains("EKSTAZI_TIMEOUT"), "{bad:?}");
    assert!(!bad.stderr.contains("panicked"), "{bad:?}");
}

#[test]
fn never_recorded_tests_always_run_and_skipme_touches_nothing() {
    let f = Fixture::new("basic");
    let skipme = f.test_ok(&["--skipme", "-p", "alpha"]);
    assert_eq!(
        skipme.ran(),
        labels(&["alpha tests::doubles", "alpha tests::triples"])
    );
    assert!(!f.file(".ekstazi").exists(), "--skipme writes no state");

    f.test_ok_with(&["-p", "alpha"], &[("EKSTAZI_NEVER_RECORD", "*triples")]);
    assert!(
        f.records()
            .iter()
            .all(|r| !r.display().to_string().contains("triples"))
    );
    let again = f.test_ok(&["-p", "alpha", "--never-record", "*triples"]);
    assert_eq!(again.ran(), labels(&["alpha tests::triples"]));
    let why = f.run(&["why", "tests::triples", "--never-record", "*triples"]);
    assert!(
        why.stdout.contains("never recorded (pattern `*triples`)"),
        "{why:?}"
    );

    // With records, --skipme runs everything and leaves them as they were.
    let before = f.records();
    let stamp = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let times: Vec<_> = before
        .iter()
        .map(|r| stamp(&f.file(&r.display().to_string())))
        .collect();
    let all = f.test_ok(&["--skipme", "-p", "alpha"]);
    assert_eq!(all.ran().len(), 2);
    assert_eq!(f.records(), before);
    let after: Vec<_> = before
        .iter()
        .map(|r| stamp(&f.file(&r.display().to_string())))
        .collect();
    assert_eq!(times, after);
}

#[test]
fn lists_filter_and_nothing_is_run_silently() {
    let f = Fixture::new("basic");
    let ci = f.run_with(&["test", "-p", "alpha"], &[("CI", "true")]);
    assert!(
        ci.stderr.contains("warning: no records in") && ci.stderr.contains("on this CI machine"),
        "{ci:?}"
    );
    f.test_ok(&[]);
    let nothing = f.test_ok(&[]);
    assert!(
        nothing
            .stdout
            .contains("nothing to run: no test's dependencies changed"),
        "{nothing:?}"
    );

    f.write("beta/data/a.txt", "changed\n");
    let selected = f.list(&["--selected"]);
    assert_eq!(selected["version"], 1);
    assert_eq!(selected["selected"], 1);
    assert_eq!(selected["tests"].as_array().unwrap().len(), 1);
    let skipped = f.list(&["--skipped"]);
    assert_eq!(skipped["tests"].as_array().unwrap().len(), 11);
    assert!(
        skipped["tests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| !t["selected"].as_bool().unwrap() && t["last_duration"].is_f64())
    );
    let table = f.run(&["list", "--selected"]);
    assert!(table.stdout.starts_with("RUN "), "{table:?}");
    assert!(
        table.stdout.contains("run      beta::files reads_data"),
        "{table:?}"
    );
    assert!(table.stdout.contains("1 of 12 tests selected"), "{table:?}");
}

#[test]
fn slow_tests_are_flagged_and_colour_follows_cargo() {
    let f = Fixture::new("faults");
    let slow = f.run_with(
        &["test", "--slow-timeout", "0.3", "b_slow"],
        &[("FIXTURE_SLOW_MS", "1500")],
    );
    assert_eq!(slow.code(), Some(0), "{slow:?}");
    assert!(
        slow.stdout.contains("SLOW [>") && slow.stdout.contains("faults::faults b_slow"),
        "{slow:?}"
    );
    assert!(
        slow.stdout
            .contains("1 slow test (over 0.3s): faults::faults b_slow"),
        "{slow:?}"
    );

    let plain = f.run(&["list"]);
    assert!(!plain.stdout.contains('\x1b'), "{plain:?}");
    let coloured = f.run(&["list", "--color", "always"]);
    assert!(coloured.stdout.contains("\x1b["), "{coloured:?}");
    let env = f.run_with(&["list"], &[("CARGO_TERM_COLOR", "always")]);
    assert!(env.stdout.contains("\x1b["), "{env:?}");
    let flag_wins = f.run_with(
        &["list", "--color", "never"],
        &[("CARGO_TERM_COLOR", "always")],
    );
    assert!(!flag_wins.stdout.contains('\x1b'), "{flag_wins:?}");
}

#[test]
fn every_command_has_help_with_examples_and_the_version_names_the_format() {
    let f = Fixture::new("basic");
    let version = f.run(&["--version"]);
    assert!(
        version.stdout.contains(&format!(
            "(record and history format {})",
            ekstazi_core::files::sealed::FORMAT_VERSION
        )),
        "{version:?}"
    );
    for command in ["test", "list", "why", "merge-state"] {
        let help = f.run(&[command, "--help"]);
        assert_eq!(help.code(), Some(0), "{help:?}");
        assert!(help.stdout.contains("Examples:"), "{command}: {help:?}");
    }
}
