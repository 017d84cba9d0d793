//! Nothing changed, nothing runs: the causes of reruns found on real
//! projects on the run after a full one, each with the case that made it.

use crate::support::{Fixture, labels};

#[test]
fn a_directory_run_as_a_program_is_a_dependency_that_holds() {
    let f = Fixture::new("stability");
    f.test_ok(&["-p", "scratch", "--test", "programs"]);
    let selected = f.selected(&["-p", "scratch", "--test", "programs"]);
    assert!(selected.is_empty(), "{selected:?}");

    // Where a directory was, a program now.
    std::fs::remove_dir_all(f.file("scratch/editor")).unwrap();
    f.write("scratch/editor", "#!/bin/sh\nexit 0\n");
    let selected = f.selected(&["-p", "scratch", "--test", "programs"]);
    assert_eq!(
        selected,
        [(
            "scratch::programs runs_a_directory_as_a_program".to_owned(),
            vec!["program changed: scratch/editor".to_owned()]
        )]
    );
}

/// `cargo ekstazi list` as a terminal shows it: cargo's messages (on
/// stderr) and the table (on stdout) in one stream.
#[test]
fn list_shows_cargo_once_and_ends_its_last_line() {
    let f = Fixture::new("stability");
    f.edit(
        "nodocs/src/lib.rs",
        "#[cfg(test)]",
        "fn never_called() {}\n\n#[cfg(test)]",
    );
    let (reader, writer) = std::io::pipe().unwrap();
    let mut command = f.command(&["list"]);
    command
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .stdin(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    drop(command);
    let mut output = String::new();
    std::io::Read::read_to_string(&mut { reader }, &mut output).unwrap();
    assert!(child.wait().unwrap().success(), "{output}");
    assert_eq!(output.matches("    Finished ").count(), 1, "{output}");
    assert_eq!(
        output
            .matches("function `never_called` is never used")
            .count(),
        1,
        "{output}"
    );
    let (before, table) = output.split_once("RUN ").expect("the table");
    assert!(before.contains("Finished"), "{output}");
    assert!(!table.contains("Finished"), "{output}");
    assert!(table.ends_with(" tests selected\n"), "{output:?}");
}

#[test]
fn a_moved_workspace_selects_nothing_doctests_included() {
    let f = Fixture::new("doctests");
    let first = f.test_ok(&[]);
    assert!(
        first.ran().iter().any(|t| t.ends_with("(doctests)")),
        "{first:?}"
    );
    // rustc's dep-info files name the sources by absolute paths.
    let moved = f.moved_to("a-much-longer-directory-name");
    let selected = moved.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");
    assert!(moved.test_ok(&[]).ran().is_empty());
}

#[test]
fn a_library_without_doctests_runs_none_until_it_has_one() {
    let f = Fixture::new("stability");
    let nodocs = &["-p", "nodocs"];
    let first = f.test_ok(nodocs);
    assert_eq!(
        first.ran(),
        labels(&["nodocs tests::three", "nodocs tests::two"]),
        "no doctest run: {first:?}"
    );

    f.edit("nodocs/src/lib.rs", "    3\n", "    two() + 1\n");
    let selected: Vec<String> = f.selected(nodocs).into_iter().map(|(t, _)| t).collect();
    assert_eq!(selected, ["nodocs tests::three"]);
    assert_eq!(f.test_ok(nodocs).ran(), labels(&["nodocs tests::three"]));

    // Its first example: now it has doctests, and they run.
    f.edit(
        "nodocs/src/lib.rs",
        "/// Two, as in `1 + 1`.",
        "/// Two.\n///\n/// ```\n/// assert_eq!(nodocs::two(), 2);\n/// ```",
    );
    assert_eq!(
        f.selected(nodocs),
        [(
            "nodocs::doc/nodocs (doctests)".to_owned(),
            vec!["new".to_owned()]
        )]
    );
    assert_eq!(
        f.test_ok(nodocs).ran(),
        labels(&["nodocs::doc/nodocs (doctests)"])
    );
    assert!(f.selected(nodocs).is_empty());
}

/// Tests that list the temporary directory while the others make and
/// remove theirs there: each has its own, so none depends on the others.
#[test]
fn tests_that_meet_in_the_temporary_directory_each_get_their_own() {
    let f = Fixture::new("stability");
    let tmp_tests = &["-p", "scratch", "--test", "tmp"];
    let all = labels(&[
        "scratch::tmp finds_no_configuration_above",
        "scratch::tmp scratch_a",
        "scratch::tmp scratch_b",
        "scratch::tmp scratch_c",
    ]);
    let first = f.test_ok(&[tmp_tests, &["-j", "4"][..]].concat());
    assert_eq!(first.ran(), all, "{first:?}");
    let selected = f.selected(tmp_tests);
    assert!(selected.is_empty(), "{selected:?}");
    // Nothing of theirs is left in the tool's root.
    f.assert_scratch_root_empty();

    // Sharing the environment's temporary directory: a different TMPDIR
    // for every test, and then they meet.
    let shared = &[tmp_tests, &["--no-private-tmpdir"][..]].concat();
    let selected = f.selected(shared);
    assert_eq!(
        selected
            .iter()
            .map(|(t, _)| t.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        all
    );
    assert!(
        selected
            .iter()
            .all(|(_, why)| why.contains(&"environment variable changed: TMPDIR".to_owned())),
        "{selected:?}"
    );
    f.test_ok(&[shared.as_slice(), &["-j", "4"][..]].concat());
    let selected = f.selected(shared);
    assert!(
        selected.iter().any(|(t, _)| t == "scratch::tmp scratch_a"),
        "made an entry, then listed the directory: {selected:?}"
    );
}
