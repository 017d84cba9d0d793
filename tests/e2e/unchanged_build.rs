//! A run whose build inputs are all as the last build left them does not
//! start cargo; any change to what cargo reads (a source, a new target, a
//! variable a crate read at compile time, the stamp itself, the checkout's
//! place) starts it again, and the tests it affects are selected.

use crate::support::{Fixture, label_of};
use std::time::Duration;

/// How the run's build went, as its report says (`build`, or `build
/// (unchanged)` when cargo was not started), and what it selected.
fn build_stage(f: &Fixture, args: &[&str]) -> (String, Vec<String>) {
    let mut all = vec!["--report-json", "report.json"];
    all.extend_from_slice(args);
    let run = f.run(&[&["test"], all.as_slice()].concat());
    let report: serde_json::Value =
        serde_json::from_str(&f.read("report.json")).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert!(report["timings"]["build"].is_f64(), "{report}");
    let stage = if report["build_unchanged"] == true {
        "build (unchanged)"
    } else {
        assert!(report["build_unchanged"].is_null(), "{report}");
        "build"
    };
    let selected = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["selected"].as_bool().unwrap())
        .map(label_of)
        .collect();
    (stage.to_owned(), selected)
}

/// Edits are saved well before the next build starts: a source changed
/// within the clock's resolution of a build's start leaves that build
/// unstamped, and the next run would start cargo whatever it found.
fn settle() {
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn cargo_is_not_started_while_nothing_it_reads_changed() {
    let f = Fixture::new("basic");
    f.edit(
        "alpha/src/lib.rs",
        "#[cfg(test)]\nmod tests {",
        "pub fn flavour() -> Option<&'static str> {\n    option_env!(\"FIXTURE_FLAVOUR\")\n}\n\n\
         #[cfg(test)]\nmod tests {\n    #[test]\n    fn plain_flavour() {\n        \
         assert_eq!(super::flavour(), None);\n    }\n",
    );
    settle();
    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build");
    assert!(selected.contains(&"alpha tests::plain_flavour".to_owned()));

    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build (unchanged)");
    assert!(selected.is_empty(), "{selected:?}");

    // A source: the binary changes, and the test of the function runs.
    f.edit("alpha/src/lib.rs", "x * 3", "x + x + x");
    settle();
    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build");
    assert_eq!(selected, ["alpha tests::triples"]);
    let (stage, _) = build_stage(&f, &[]);
    assert_eq!(stage, "build (unchanged)");

    // A new target: cargo finds it, and its test is new.
    f.write(
        "beta/tests/added.rs",
        "#[test]\nfn added_test() {\n    assert_eq!(beta::quadruple(1), 4);\n}\n",
    );
    settle();
    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build");
    assert_eq!(selected, ["beta::added added_test"]);

    // A variable a crate read at compile time: the build starts, and the
    // test of what it changed runs, and fails as under `cargo test`.
    settle();
    let (stage, _) = build_stage(&f, &[]);
    assert_eq!(stage, "build (unchanged)");
    let run = f.run_with(
        &["test", "--report-json", "report.json"],
        &[("FIXTURE_FLAVOUR", "sweet")],
    );
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(
        run.failed().contains("alpha tests::plain_flavour"),
        "{run:?}"
    );
    let report: serde_json::Value = serde_json::from_str(&f.read("report.json")).unwrap();
    assert!(report["build_unchanged"].is_null(), "{report}");

    // Back as it was: rebuilt again (cargo's own output changed), and then
    // unchanged.
    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build");
    assert_eq!(selected, ["alpha tests::plain_flavour"]);
    let (stage, _) = build_stage(&f, &[]);
    assert_eq!(stage, "build (unchanged)");

    // A damaged stamp is no stamp.
    let stamp = f.file(".ekstazi/build-stamp");
    let mut bytes = std::fs::read(&stamp).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&stamp, bytes).unwrap();
    let (stage, selected) = build_stage(&f, &[]);
    assert_eq!(stage, "build");
    assert!(selected.is_empty(), "{selected:?}");

    // The checkout moved, build output and state with it: the stamp names
    // the old place, and cargo runs.
    let f = f.moved_to("elsewhere");
    let (stage, _) = build_stage(&f, &[]);
    assert_eq!(stage, "build");

    // `-v` says so; `--skipme`, which writes no state, starts cargo.
    let verbose = f.test_ok(&["-v"]);
    assert!(verbose.stderr.contains("cargo not started"), "{verbose:?}");
    let (stage, _) = build_stage(&f, &["--skipme"]);
    assert_eq!(stage, "build");
}
