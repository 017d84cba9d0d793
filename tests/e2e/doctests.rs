//! Doctests run as `cargo test` runs them, one unit per library, selected
//! on what the library is compiled from.

use crate::support::{Fixture, labels};

const DOCS: &[&str] = &[
    "app::doc/app (doctests)",
    "plain::doc/plain (doctests)",
    "shapes::doc/shapes (doctests)",
];

#[test]
fn doctests_run_when_their_crate_or_a_path_dependency_changed() {
    let f = Fixture::new("doctests");
    let first = f.test_ok(&[]);
    let mut all = labels(DOCS);
    all.extend(labels(&["app::it two_squares", "shapes tests::squares"]));
    assert_eq!(first.ran(), all, "{first:?}");
    assert!(f.test_ok(&[]).ran().is_empty());

    // A module of `shapes` (not its lib.rs): its doctests run, and those of
    // `app`, which depends on it; not `plain`'s, nor the unit tests, which
    // never call the changed function.
    f.edit(
        "shapes/src/circle.rs",
        "3 * radius * radius",
        "radius * radius * 3",
    );
    let selected = f.selected(&[]);
    assert_eq!(
        selected,
        [
            (
                "app::doc/app (doctests)".to_owned(),
                vec!["file changed: shapes/src/circle.rs".to_owned()]
            ),
            (
                "shapes::doc/shapes (doctests)".to_owned(),
                vec!["file changed: shapes/src/circle.rs".to_owned()]
            ),
        ]
    );
    let run = f.test_ok(&[]);
    assert_eq!(
        run.ran(),
        labels(&["app::doc/app (doctests)", "shapes::doc/shapes (doctests)"]),
        "{run:?}"
    );
    assert!(f.test_ok(&[]).ran().is_empty());

    // A manifest is a dependency too.
    f.edit(
        "plain/Cargo.toml",
        "publish = false",
        "publish = false\ndescription = \"x\"",
    );
    assert_eq!(
        f.test_ok(&[]).ran(),
        labels(&["plain::doc/plain (doctests)"])
    );
}

#[test]
fn a_failing_doctest_fails_the_run_and_runs_again() {
    let f = Fixture::new("doctests");
    f.test_ok(&[]);
    f.edit(
        "plain/src/lib.rs",
        "assert!(plain::yes());",
        "assert!(!plain::yes());",
    );
    let failed = f.run(&["test"]);
    assert_eq!(failed.code(), Some(101), "{failed:?}");
    assert_eq!(failed.failed(), labels(&["plain::doc/plain (doctests)"]));
    assert!(
        failed
            .stdout
            .contains("---- plain::doc/plain (doctests) output ----"),
        "{failed:?}"
    );
    // Nothing changed since, but it failed: it runs again.
    let again = f.run(&["test"]);
    assert_eq!(again.failed(), labels(&["plain::doc/plain (doctests)"]));
}

#[test]
fn doc_and_no_doc_and_target_flags_choose_as_cargo_test_does() {
    let f = Fixture::new("doctests");
    let names = |args: &[&str]| -> std::collections::BTreeSet<String> {
        let list = f.list(args);
        list["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                format!(
                    "{} {}",
                    t["binary"].as_str().unwrap(),
                    t["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names(&["--doc"]), labels(DOCS));
    // Exactly the other tests: a listing with none would pass a check
    // that only no doctest is in it.
    assert_eq!(
        names(&["--no-doc"]),
        labels(&["app::it two_squares", "shapes tests::squares"])
    );
    assert_eq!(names(&["--lib"]), labels(&["shapes tests::squares"]));
    assert_eq!(
        names(&["-p", "shapes"]),
        labels(&["shapes tests::squares", "shapes::doc/shapes (doctests)"])
    );
    let run = f.test_ok(&["--doc"]);
    assert_eq!(run.ran(), labels(DOCS), "{run:?}");
}

#[test]
fn doctests_rerun_on_the_lockfile_rustdocflags_and_build_script_output() {
    let f = Fixture::new("doctests");
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());
    let each_doc = |reason: &str| -> Vec<(String, Vec<String>)> {
        DOCS.iter()
            .map(|d| ((*d).to_owned(), vec![reason.to_owned()]))
            .collect()
    };

    // RUSTDOCFLAGS: every library's doctests, and nothing else.
    assert_eq!(
        f.selected_with(&[], &[("RUSTDOCFLAGS", "--cfg e2e")]),
        each_doc("environment variable set: RUSTDOCFLAGS")
    );

    // A build script's output: plain's passes PLAIN_NOTE on to rustc.
    let noted = f.selected_with(&[], &[("PLAIN_NOTE", "changed")]);
    let output = build_output(&f, "plain");
    assert_eq!(
        noted,
        [(
            "plain::doc/plain (doctests)".to_owned(),
            vec![format!("file changed: {output}")]
        )]
    );
    assert!(f.selected(&[]).is_empty(), "the same output again");

    // Cargo.lock: shapes' new version is written into it. Plain's doctests,
    // which use nothing of shapes, rerun for the lockfile alone.
    f.edit(
        "shapes/Cargo.toml",
        "version = \"0.1.0\"",
        "version = \"0.1.1\"",
    );
    let bumped = f.selected(&[]);
    assert!(f.read("Cargo.lock").contains("0.1.1"));
    let plain = bumped
        .iter()
        .find(|(label, _)| label == "plain::doc/plain (doctests)")
        .unwrap_or_else(|| panic!("{bumped:?}"));
    assert_eq!(plain.1, ["file changed: Cargo.lock"], "{bumped:?}");
}

/// The `output` file of a package's build script, as a reason names it:
/// the instrumented build's, which the analysis reads (`cargo test --doc`
/// runs the same script, with the same environment, in the target
/// directory's own build).
fn build_output(f: &Fixture, package: &str) -> String {
    let target = f.file("target");
    let found: Vec<_> = walkdir::WalkDir::new(&target)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name() == "output"
                && e.path()
                    .parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{package}-"))
        })
        .map(|e| {
            e.path()
                .strip_prefix(&target)
                .unwrap()
                .display()
                .to_string()
        })
        .filter(|p| p.starts_with("ekstazi/"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    format!("$CARGO_TARGET_DIR/{}", found[0])
}
