//! Tests that run cargo themselves: an integration test that builds its
//! own binary with cargo (as `escargot` does) depends on what that cargo
//! builds from, and not on cargo's bookkeeping; trybuild's compile-fail
//! tests depend on their cases, their expected errors and the macro under
//! test.

use crate::support::{Fixture, labels};
use std::path::Path;

const GREETS: &str = "greeter::cli greets";

/// `cargo test` once, as a project does before adopting the tool, then a
/// first `cargo ekstazi test` that records every test.
fn recorded(name: &str) -> Fixture {
    recorded_in(Fixture::new(name))
}

/// [`recorded`] on a fixture given its environment already.
fn recorded_in(f: Fixture) -> Fixture {
    let plain = f.program(Path::new("cargo")).arg("test").output().unwrap();
    assert!(plain.status.success(), "{plain:?}");
    let first = f.test_ok(&[]);
    assert!(!first.ran().is_empty(), "{first:?}");
    assert_eq!(f.selected(&[]), [], "a second run has nothing to do");
    f
}

/// With `env` given, the escargot-style test is selected alone, for
/// `reason` alone, and then fails: what it now builds and runs differs.
fn selected_alone_then_fails(f: &Fixture, reason: &str, env: &[(&str, &str)]) {
    assert_eq!(
        f.selected_with(&[], env),
        [(GREETS.to_owned(), vec![reason.to_owned()])]
    );
    let run = f.run_with(&["test"], env);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert_eq!(run.failed(), labels(&[GREETS]), "{run:?}");
}

#[test]
fn a_test_that_builds_its_binary_with_cargo_reruns_when_the_binary_changes() {
    let f = recorded("cargo_runs");
    f.edit(
        "src/main.rs",
        "{GREETING}, {}{end}",
        "{GREETING} there, {}{end}",
    );
    // Selected for what changed (not for cargo's bookkeeping, which the
    // instrumented build touches after the edit).
    selected_alone_then_fails(&f, "file changed: src/main.rs", &[]);
}

#[test]
fn a_test_that_builds_its_binary_with_cargo_reruns_when_a_build_script_input_changes() {
    let f = recorded("cargo_runs");
    // Named by the build script's `rerun-if-changed`, which rustc's
    // dep-info does not list.
    f.write("greeting.txt", "goodbye\n");
    selected_alone_then_fails(&f, "file changed: greeting.txt", &[]);
}

#[test]
fn a_test_that_builds_its_binary_with_cargo_reruns_when_a_compile_time_variable_changes() {
    let f = recorded("cargo_runs");
    // `option_env!("GREETER_END")` in the binary: cargo compares it from
    // its own snapshot of the environment, which no hook sees.
    selected_alone_then_fails(
        &f,
        "environment variable set: GREETER_END",
        &[("GREETER_END", "!")],
    );
}

#[test]
fn a_program_two_tests_build_with_other_features_is_not_noise() {
    // As tealdeer's tests do: one builds the binary with its default
    // features, the other without them, to the same path. Whichever ran
    // last is what is there at the next run; what counts is what both
    // were built from.
    let f = Fixture::new("cargo_runs");
    f.edit(
        "Cargo.toml",
        "[workspace]",
        "[features]\nloud = []\n\n[workspace]",
    );
    f.edit(
        "src/main.rs",
        "    println!(\"{GREETING}, {}{end}\", greeter::addressee());",
        "    let line = format!(\"{GREETING}, {}{end}\", greeter::addressee());\n    \
         if cfg!(feature = \"loud\") {\n        println!(\"{}\", line.to_uppercase());\n    \
         } else {\n        println!(\"{line}\");\n    }",
    );
    // Each builds and runs under a lock: the tool runs the tests of two
    // binaries at once, where `cargo test` runs one binary after another.
    let locked = f.read("tests/cli.rs").replace(
        "    let output = Command::new(build_greet())",
        "    let lock = std::fs::File::open(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/Cargo.toml\")).unwrap();\n    \
         lock.lock().unwrap();\n    let output = Command::new(build_greet())",
    );
    f.write("tests/cli.rs", &locked);
    let loud = locked.replace(
        "\"--message-format=json\"]",
        "\"--message-format=json\", \"--features\", \"loud\"]",
    );
    f.write(
        "tests/loud.rs",
        &loud.replace("\"hello, world\\n\"", "\"HELLO, WORLD\\n\""),
    );
    // Both tests ran, and the second run has nothing to do.
    let f = recorded_in(f);
    const LOUD: &str = "greeter::loud greets";
    assert_eq!(f.selected(&[]), [], "a third run has nothing to do either");
    f.edit("src/lib.rs", "\"world\"", "\"there\"");
    let selected: Vec<String> = f.selected(&[]).into_iter().map(|(t, _)| t).collect();
    for test in [GREETS, LOUD] {
        assert!(selected.contains(&test.to_owned()), "{test}: {selected:?}");
    }
    let run = f.run(&["test"]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    for test in [GREETS, LOUD] {
        assert!(run.failed().contains(test), "{test}: {run:?}");
    }
}

/// Appends to every file below `dir` (recursively), and returns how many.
fn edit_all_below(dir: &Path) -> usize {
    let mut edited = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            edited += edit_all_below(&path);
        } else {
            edit_one(&path);
            edited += 1;
        }
    }
    edited
}

fn edit_one(path: &Path) {
    let mut content = std::fs::read(path).unwrap();
    content.extend_from_slice(b"\n# edited\n");
    std::fs::write(path, content).unwrap();
}

#[test]
fn cargos_bookkeeping_is_not_a_dependency() {
    // A cargo home of the test's own, whose bookkeeping it may edit.
    let home = tempfile::tempdir().unwrap();
    let f = recorded_in(
        Fixture::new("cargo_runs").with_env("CARGO_HOME", home.path().to_str().unwrap()),
    );
    let build = f.file("target/debug");
    for (what, edited) in [
        (".fingerprint", edit_all_below(&build.join(".fingerprint"))),
        ("incremental", edit_all_below(&build.join("incremental"))),
    ] {
        assert!(edited > 0, "nothing in {what}");
    }
    let mut singles = vec![
        f.file("target/.rustc_info.json"),
        build.join(".cargo-lock"),
        // The dep-info cargo writes beside the binary it uplifts.
        build.join("greeter.d"),
    ];
    for entry in std::fs::read_dir(home.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".global-cache") || name.starts_with(".package-cache") {
            singles.push(entry.path());
        }
    }
    for prefix in [".global-cache", ".package-cache"] {
        assert!(
            singles
                .iter()
                .any(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix)),
            "cargo made no {prefix}: {singles:?}"
        );
    }
    for path in &singles {
        edit_one(path);
    }
    assert_eq!(f.selected(&[]), [], "after editing {singles:?}");
}

const UI: &str = "shout::ui ui";

/// The tests `edit` selects on the recorded trybuild fixture, which is
/// then put back as it was (and selects nothing again).
fn selected_after(f: &Fixture, rel: &str, from: &str, to: &str) -> Vec<String> {
    let before = f.read(rel);
    f.edit(rel, from, to);
    let selected = f.selected(&[]).into_iter().map(|(t, _)| t).collect();
    f.write(rel, &before);
    assert_eq!(f.selected(&[]), [], "{rel} put back");
    selected
}

#[test]
fn trybuild_tests_rerun_for_their_cases_their_errors_and_the_macro() {
    let f = recorded("trybuild");
    for (rel, from, to) in [
        (
            "tests/ui/empty.rs",
            "fn main() {",
            "fn main() {\n    // edited",
        ),
        ("tests/ui/empty.stderr", "needs a word", "needs a wrd"),
        ("src/lib.rs", "needs a word", "needs one word"),
    ] {
        let selected = selected_after(&f, rel, from, to);
        assert!(selected.contains(&UI.to_owned()), "{rel}: {selected:?}");
    }
    for (rel, from, to) in [
        ("README.md", "Not", "Still not"),
        ("tests/words.txt", "ho", "hop"),
        (
            "tests/shout.rs",
            "lines().count(), 2",
            "lines().count(), 2, \"two\"",
        ),
    ] {
        let selected = selected_after(&f, rel, from, to);
        assert!(!selected.contains(&UI.to_owned()), "{rel}: {selected:?}");
    }
    // The flow through: a case whose errors no longer match fails.
    f.edit("tests/ui/empty.stderr", "needs a word", "needs a wrd");
    let run = f.run(&["test"]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert_eq!(run.failed(), labels(&[UI]), "{run:?}");
}

/// The directories trybuild generates its project in, below `dir`
/// (`<target>/tests/trybuild/shout`, one per target directory).
fn trybuild_projects(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.ends_with("tests/trybuild/shout") {
            found.push(path);
        } else {
            found.extend(trybuild_projects(&path));
        }
    }
    found
}

#[test]
fn trybuilds_lock_is_not_a_dependency() {
    let f = recorded("trybuild");
    // A lock another trybuild run left (older than the 1.5 s after which
    // trybuild takes it over): the test finds it there, takes it, and
    // removes it when done.
    let projects = trybuild_projects(&f.file("target"));
    assert!(!projects.is_empty());
    for project in &projects {
        let lock = project.join(".lock");
        std::fs::write(&lock, "").unwrap();
        let touched = f
            .program(Path::new("touch"))
            .args(["-d", "2020-01-01"])
            .arg(&lock)
            .status()
            .unwrap();
        assert!(touched.success());
    }
    let run = f.test_ok(&["--forceall"]);
    assert!(run.ran().contains(UI), "{run:?}");
    for project in &projects {
        assert!(!project.join(".lock").exists(), "trybuild removed it");
    }
    assert_eq!(f.selected(&[]), [], "the lock it found is gone");
}
