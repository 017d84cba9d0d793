//! Doctests run as `cargo test` runs them, one unit per library, selected
//! on what the library is compiled from, what rustdoc read to collect them
//! (a README a `cfg(doctest)` item includes) and what they read when they
//! ran (a data file, a variable): rustdoc and the doctests run under the
//! shim.

use crate::support::{Fixture, label_of, labels};

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
            .map(label_of)
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

/// The doctests of `doctest_inputs`'s `readme`: its README's code block
/// (included by a `cfg(doctest)` item only), one that reads
/// `data/value.txt` and one that reads `$DOCTEST_MODE`.
const README: &str = "readme::doc/readme (doctests)";
const NEIGHBOURS: &[&str] = &[
    "neighbour tests::two",
    "neighbour::doc/neighbour (doctests)",
];

fn only_readme(reason: &str) -> Vec<(String, Vec<String>)> {
    vec![(README.to_owned(), vec![reason.to_owned()])]
}

#[test]
fn a_readme_included_for_doctests_and_what_doctests_read_select_them() {
    let f = Fixture::new("doctest_inputs");
    let first = f.test_ok(&[]);
    let mut all = labels(NEIGHBOURS);
    all.insert(README.to_owned());
    assert_eq!(first.ran(), all, "{first:?}");
    let selected = f.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");

    // The README's code block, which no dep-info names: the doctest now
    // fails, and only it runs.
    f.edit("readme/README.md", "answer(), 42", "answer(), 43");
    assert_eq!(
        f.selected(&[]),
        only_readme("file changed: readme/README.md")
    );
    let failed = f.run(&["test"]);
    assert_eq!(failed.code(), Some(101), "{failed:?}");
    assert_eq!(failed.failed(), labels(&[README]), "{failed:?}");
    f.edit("readme/README.md", "answer(), 43", "answer(), 42");
    assert_eq!(f.test_ok(&[]).ran(), labels(&[README]));

    // The data file a doctest reads when it runs.
    f.write("readme/data/value.txt", "8\n");
    assert_eq!(
        f.selected(&[]),
        only_readme("file changed: readme/data/value.txt")
    );
    let failed = f.run(&["test"]);
    assert_eq!(failed.failed(), labels(&[README]), "{failed:?}");
    f.write("readme/data/value.txt", "7\n");
    assert_eq!(f.test_ok(&[]).ran(), labels(&[README]));

    // The variable a doctest reads when it runs.
    let strict = [("DOCTEST_MODE", "strict")];
    assert_eq!(
        f.selected_with(&[], &strict),
        only_readme("environment variable set: DOCTEST_MODE")
    );
    let failed = f.run_with(&["test"], &strict);
    assert_eq!(failed.failed(), labels(&[README]), "{failed:?}");

    // Back as it was: it runs once more (it failed last), then nothing
    // does, the neighbours never having run since the first.
    assert_eq!(f.test_ok(&[]).ran(), labels(&[README]));
    let again = f.test_ok(&[]);
    assert!(again.ran().is_empty(), "{again:?}");
    let selected = f.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");
}

#[test]
fn traced_doctests_select_nothing_in_another_or_a_moved_checkout() {
    let f = Fixture::new("doctest_inputs");
    f.test_ok(&[]);
    // Without build output: `cargo test --doc` builds the library afresh.
    let elsewhere = f.checkout_elsewhere();
    let selected = elsewhere.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");
    let moved = f.moved_to("a-much-longer-directory-name");
    let selected = moved.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");
    let run = moved.test_ok(&[]);
    assert!(run.ran().is_empty(), "{run:?}");
}

/// Without a private `TMPDIR` the linker rustdoc runs makes its temporary
/// files with `mkstemp` in the shared one: they are the unit's own, and a
/// rerun with nothing changed selects nothing.
#[test]
fn without_a_private_tmpdir_doctests_rerun_only_for_a_change() {
    let f = Fixture::new("doctest_inputs");
    let shared = &["--no-private-tmpdir"];
    f.test_ok(shared);
    let selected = f.selected(shared);
    assert!(selected.is_empty(), "{selected:?}");
}

#[test]
fn the_users_rustdoc_is_run_and_is_a_dependency() {
    let f = Fixture::new("doctest_inputs");
    f.test_ok(&[]);
    // A rustdoc of the user's that leaves a line for each run.
    f.write(
        "tools/rustdoc.sh",
        "#!/bin/sh\necho ran >> \"$(dirname \"$0\")/ran\"\nexec rustdoc \"$@\"\n",
    );
    let script = f.file("tools/rustdoc.sh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.display().to_string();
    let env = [("RUSTDOC", script.as_str())];
    let docs = ["neighbour::doc/neighbour (doctests)", README];
    assert_eq!(
        f.selected_with(&[], &env),
        docs.map(|d| (
            d.to_owned(),
            vec!["environment variable set: RUSTDOC".to_owned()]
        ))
    );
    let run = f.test_ok_with(&[], &env);
    assert_eq!(run.ran(), labels(&docs), "{run:?}");
    assert_eq!(f.read("tools/ran"), "ran\nran\n");
    let selected = f.selected_with(&[], &env);
    assert!(selected.is_empty(), "{selected:?}");
}

#[test]
fn doctests_given_test_arguments_say_why_they_run_again() {
    let f = Fixture::new("doctests");
    // `--skip` reaches rustdoc too: the doctests run in part, which is no
    // evidence for the whole unit, so nothing of them is recorded.
    let args = ["--", "--skip", "squares"];
    let first = f.test_ok(&args);
    assert_eq!(first.ran(), labels(DOCS), "{first:?}");
    let why = "always runs: with the test arguments `--skip squares`, a library's doctests run \
               in part, and a partial run is never recorded";
    let expected: Vec<(String, Vec<String>)> = DOCS
        .iter()
        .map(|doc| ((*doc).to_owned(), vec![why.to_owned()]))
        .collect();
    assert_eq!(f.selected(&args), expected);
    // A whole run records them, and they vouch for a partial one.
    f.test_ok(&[]);
    assert_eq!(f.selected(&args), []);
}
