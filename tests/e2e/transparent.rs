//! A program under the shim cannot tell, on the `transparent` fixture:
//! `env -i … env` shows only what the test set (and its program is still
//! traced), the user's own `LD_PRELOAD` is seen as it was given, an
//! instrumented program starts where the shim cannot be found (and is then
//! depended on whole), and a link to the private temporary directory is as
//! short as under `cargo test`. The fixture's tests assert what they see;
//! each passes under `cargo test`.

use crate::support::Fixture;

fn label(name: &str) -> String {
    format!("transparent::seen {name}")
}

/// The fixture, with `name` (the only test run) recorded as passing.
fn recorded(name: &str, env: &[(&str, &str)]) -> Fixture {
    let f = Fixture::new("transparent");
    let run = f.test_ok_with(&["--", "--exact", name], env);
    assert!(run.ran().contains(&label(name)), "{run:?}");
    f
}

#[test]
fn a_cleared_environment_shows_nothing_of_the_tool_and_its_program_is_traced() {
    let name = "a_cleared_environment_holds_only_what_the_test_set";
    let f = recorded(name, &[]);
    // `show`, run with a cleared environment, read the file: it was
    // traced, and the file is the test's dependency.
    f.write("data/input.txt", "two\n");
    assert_eq!(
        f.selected(&["--", "--exact", name]),
        vec![(label(name), vec!["file changed: data/input.txt".to_owned()])]
    );
}

#[test]
fn the_users_own_preload_is_seen_as_given() {
    let name = "the_tests_own_preload_is_seen_unchanged";
    recorded(name, &[]);
    // The user's own preload, kept for the test and its programs: they
    // see it, and nothing of the shim's.
    recorded(
        name,
        &[("LD_PRELOAD", "libc.so.6"), ("EXPECT_PRELOAD", "libc.so.6")],
    );
}

#[test]
fn an_instrumented_program_starts_without_the_shim_and_is_then_depended_on_whole() {
    let f = Fixture::new("transparent");
    f.test_ok(&[]);
    // A function no traced run of `show` executed: only the test whose
    // run of it went untraced (no shim: what it executed is unknown)
    // depends on it.
    f.edit("src/bin/show.rs", "\"show 1\"", "\"show 2\"");
    let selected = f.selected(&[]);
    let name = "the_program_starts_where_the_shim_cannot_be_found";
    assert_eq!(
        selected.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>(),
        vec![label(name)],
        "{selected:?}"
    );
    assert!(
        selected[0].1[0].starts_with("program changed: ") && selected[0].1[0].ends_with("/show"),
        "{selected:?}"
    );
}

#[test]
fn a_link_into_the_private_temporary_directory_stays_in_its_inode() {
    recorded("a_link_to_the_temporary_directory_fits_in_its_inode", &[]);
}
