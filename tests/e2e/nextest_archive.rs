//! Build once, run on many machines: `cargo ekstazi nextest archive` in one
//! checkout, `cargo ekstazi nextest run --archive-file` in others (other
//! paths, as on other machines), each with its own state, merged after.

use crate::nextest::nextest_ran;
use crate::support::{Fixture, TestRun, labels};
use std::collections::BTreeSet;
use std::path::Path;

/// The tests of `basic` that `-p alpha -p gamma` builds (the ignored one
/// left out): three binaries, one of them `harness = false`.
const BUILT: &[&str] = &[
    "alpha tests::doubles",
    "alpha tests::triples",
    "gamma tests::says_hello",
    "gamma::custom (whole binary)",
];
const PACKAGES: &[&str] = &["-p", "alpha", "-p", "gamma"];

fn ok(f: &Fixture, args: &[&str]) -> TestRun {
    let run = f.run(args);
    assert_eq!(run.code(), Some(0), "{args:?}: {run:?}");
    run
}

fn archive(f: &Fixture, file: &Path) -> TestRun {
    let mut args = vec![
        "nextest",
        "archive",
        "--archive-file",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(PACKAGES);
    ok(f, &args)
}

/// `nextest run --archive-file` in `f`, run from another directory (`/`):
/// the workspace is named by `--workspace-remap` alone.
fn run_archive(f: &Fixture, file: &Path, extra: &[&str]) -> TestRun {
    let mut command = f.command(&["nextest", "run", "--archive-file"]);
    command
        .arg(file)
        .arg("--workspace-remap")
        .arg(f.path())
        .args(extra)
        .current_dir("/");
    let output = command.output().unwrap();
    let run = TestRun {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        output,
    };
    assert_eq!(run.code(), Some(0), "{run:?}");
    run
}

fn selected(f: &Fixture) -> BTreeSet<String> {
    f.selected(PACKAGES).into_iter().map(|(l, _)| l).collect()
}

#[test]
fn an_archive_runs_in_partitions_elsewhere_and_the_merged_state_selects_as_one_run_would() {
    let build = Fixture::new("basic");
    let (one, two, control) = (
        Fixture::new("basic"),
        Fixture::new("basic"),
        Fixture::new("basic"),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tests.tar.zst");
    let made = archive(&build, &file);
    assert!(made.stdout.contains("archived 3 test binaries"), "{made:?}");

    // Each machine selects everything (no records), and runs its share.
    let first = run_archive(&one, &file, &["--partition", "count:1/2"]);
    let second = run_archive(&two, &file, &["--partition", "count:2/2"]);
    let (ran_one, ran_two) = (nextest_ran(&first), nextest_ran(&second));
    assert!(
        !ran_one.is_empty() && !ran_two.is_empty(),
        "{first:?}\n{second:?}"
    );
    assert!(ran_one.is_disjoint(&ran_two), "{ran_one:?} {ran_two:?}");
    let both: BTreeSet<String> = ran_one.union(&ran_two).cloned().collect();
    assert_eq!(both, labels(BUILT));
    // Nothing was built on the machines that ran the tests.
    assert!(!first.stderr.contains("Compiling"), "{first:?}");

    let state_two = two.path().join(".ekstazi");
    ok(&one, &["merge-state", state_two.to_str().unwrap()]);
    ok(&control, &{
        let mut args = vec!["nextest"];
        args.extend_from_slice(PACKAGES);
        args
    });

    // Nothing changed: the merged state selects nothing, from the archive
    // or from a build of this checkout.
    let again = run_archive(&one, &file, &[]);
    assert!(again.stdout.contains("nothing to run"), "{again:?}");
    assert!(nextest_ran(&again).is_empty(), "{again:?}");
    assert_eq!(selected(&one), BTreeSet::new());

    // One change, in every checkout: the merged state selects what the
    // state of one unpartitioned run selects.
    for f in [&build, &one, &control] {
        f.edit("alpha/src/lib.rs", "x * 3", "x + x + x");
    }
    let expected = labels(&["alpha tests::triples"]);
    assert_eq!(selected(&control), expected);
    assert_eq!(selected(&one), expected);
    let changed = dir.path().join("changed.tar.zst");
    archive(&build, &changed);
    let after = run_archive(&one, &changed, &[]);
    assert_eq!(nextest_ran(&after), expected, "{after:?}");
    // And it was recorded: nothing is left to run.
    let last = run_archive(&one, &changed, &[]);
    assert!(last.stdout.contains("nothing to run"), "{last:?}");
}

#[test]
fn a_missing_damaged_or_foreign_archive_is_refused_and_runs_nothing() {
    let f = Fixture::new("basic");
    let dir = tempfile::tempdir().unwrap();
    let run = |file: &Path| {
        let mut command = f.command(&["nextest", "run", "--archive-file"]);
        command.arg(file).arg("--workspace-remap").arg(f.path());
        command.output().unwrap()
    };

    let missing = run(&dir.path().join("none.tar.zst"));
    assert_ne!(missing.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no archive at"),
        "{missing:?}"
    );

    let damaged = dir.path().join("damaged.tar.zst");
    std::fs::write(&damaged, b"not an archive at all").unwrap();
    let out = run(&damaged);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a nextest archive"), "{stderr}");

    // A plain nextest archive has no manifest of the build.
    let foreign = dir.path().join("plain.tar.zst");
    let status = std::process::Command::new("cargo")
        .args(["nextest", "archive", "-p", "alpha", "--archive-file"])
        .arg(&foreign)
        .current_dir(f.path())
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .unwrap();
    assert!(status.success());
    let out = run(&foreign);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not an archive made by `cargo ekstazi nextest archive`"),
        "{stderr}"
    );
    // Nothing ran, and nothing was recorded.
    assert!(!stderr.contains("Nextest run ID"), "{stderr}");
    assert!(f.records().is_empty());
}
