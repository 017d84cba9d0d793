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
    assert!(
        names(&["--no-doc"])
            .iter()
            .all(|t| !t.contains("(doctests)"))
    );
    assert!(names(&["--lib"]).iter().all(|t| !t.contains("(doctests)")));
    assert_eq!(
        names(&["-p", "shapes"]),
        labels(&["shapes tests::squares", "shapes::doc/shapes (doctests)"])
    );
    let run = f.test_ok(&["--doc"]);
    assert_eq!(run.ran(), labels(DOCS), "{run:?}");
}
