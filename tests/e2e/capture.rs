//! What the shim sees: each door a test observes the world
//! through — directory listings, environment variables, helper programs,
//! existence checks, its own output, the network, C's stdio — on the
//! `capture` fixture.

use crate::support::{Fixture, assert_each_selected_for, labels};

const ENV: &[(&str, &str)] = &[("MODE", "fast"), ("UNRELATED", "1"), ("TERM", "xterm")];

fn only(label: &str, reason: &str) -> Vec<(String, Vec<String>)> {
    vec![(format!("probe::doors {label}"), vec![reason.to_owned()])]
}

/// The fixture after a first run that recorded every test.
fn recorded() -> Fixture {
    let f = Fixture::new("capture");
    let first = f.test_ok_with(&[], ENV);
    assert_eq!(first.ran().len(), 14, "{first:?}");
    assert!(
        f.selected_with(&[], ENV).is_empty(),
        "a second run has nothing to do"
    );
    f
}

#[test]
fn a_listing_selects_on_entries_not_contents() {
    let f = recorded();
    f.write("probe/data/b.json", "{}");
    assert_eq!(
        f.selected_with(&[], ENV),
        only("counts_json_files", "directory listing changed: probe/data")
    );
    assert_eq!(
        f.test_ok_with(&[], ENV).ran(),
        labels(&["probe::doors counts_json_files"])
    );
    // A file in the directory that the test never opened.
    f.write("probe/data/notes.txt", "other notes");
    f.write("probe/data/a.json", "{\"a\": 2}");
    assert!(f.selected_with(&[], ENV).is_empty());
}

#[test]
fn a_directory_the_test_lists_then_remakes_is_recorded_as_it_found_it() {
    // On `recorded`'s first run `recreates_its_scratch_dir` listed the
    // scratch directory the fixture ships (to remove it) and made it again:
    // it changed while the test ran, and nothing had checksummed it before.
    // The shim saw what the test found there, the same as it left, so the
    // second run had nothing to do; what it found is still what counts.
    let f = recorded();
    f.write("probe/scratch/extra.txt", "");
    assert_eq!(
        f.selected_with(&[], ENV),
        only(
            "recreates_its_scratch_dir",
            "directory listing changed: probe/scratch"
        )
    );
}

#[test]
fn an_environment_variable_selects_its_reader_only() {
    let f = recorded();
    let changed = [("MODE", "slow"), ("UNRELATED", "1"), ("TERM", "xterm")];
    assert_eq!(
        f.selected_with(&[], &changed),
        only("reads_mode", "environment variable changed: MODE")
    );
    let unrelated = [("MODE", "fast"), ("UNRELATED", "2"), ("TERM", "xterm")];
    assert!(f.selected_with(&[], &unrelated).is_empty());
    let unset = [("UNRELATED", "1"), ("TERM", "xterm")];
    assert_eq!(
        f.selected_with(&[], &unset),
        only("reads_mode", "environment variable unset: MODE")
    );
}

#[test]
fn what_the_harness_reads_at_start_up_is_not_recorded() {
    // Recorded from a terminal, selected from CI: libtest's main thread
    // reads TERM and terminfo, the test does not — also in the copy of the
    // test binary that `reruns_its_own_binary` runs.
    let f = recorded();
    let ci = [
        ("MODE", "fast"),
        ("UNRELATED", "1"),
        ("TERM", "dumb"),
        ("RUST_TEST_THREADS", "1"),
    ];
    assert!(f.selected_with(&[], &ci).is_empty());
}

#[test]
fn a_helper_programs_input_selects_the_test() {
    // The helper runs with a cleared environment: the shim goes with it.
    let f = recorded();
    f.write("probe/cfg.toml", "level = 2\n");
    assert_eq!(
        f.selected_with(&[], ENV),
        only(
            "runs_helper_in_a_cleared_environment",
            "file changed: probe/cfg.toml"
        )
    );
    f.test_ok_with(&[], ENV);
    f.edit(
        "probe/src/bin/helper.rs",
        "expect(\"cfg.toml\")",
        "expect(\"cannot read cfg.toml\")",
    );
    let selected = f.selected_with(&[], ENV);
    assert_eq!(
        selected,
        only(
            "runs_helper_in_a_cleared_environment",
            // Its coverage reaches the runner through the cleared
            // environment too: the function that changed is named.
            "function changed: helper::main (in $CARGO_TARGET_DIR/ekstazi/build/x86_64-unknown-linux-gnu/debug/helper)"
        ),
    );
}

#[test]
fn creating_then_deleting_a_flag_selects_each_time() {
    let f = recorded();
    f.write("probe/flag", "");
    assert_eq!(
        f.selected_with(&[], ENV),
        only("checks_flag", "file created: probe/flag")
    );
    assert_eq!(
        f.test_ok_with(&[], ENV).ran(),
        labels(&["probe::doors checks_flag"])
    );
    std::fs::remove_file(f.file("probe/flag")).unwrap();
    assert_eq!(
        f.selected_with(&[], ENV),
        only("checks_flag", "file deleted: probe/flag")
    );
    assert_eq!(
        f.test_ok_with(&[], ENV).ran(),
        labels(&["probe::doors checks_flag"])
    );
    assert!(f.selected_with(&[], ENV).is_empty());
}

#[test]
fn a_file_the_test_writes_before_reading_is_not_an_input() {
    let f = recorded();
    f.write("probe/out.txt", "changed between runs");
    assert!(f.selected_with(&[], ENV).is_empty());
    std::fs::remove_file(f.file("probe/out.txt")).unwrap();
    assert!(f.selected_with(&[], ENV).is_empty());
}

#[test]
fn a_file_the_test_empties_by_path_is_not_an_input() {
    let f = recorded();
    f.write("probe/log.txt", "edited between runs\n");
    assert!(f.selected_with(&[], ENV).is_empty());
}

#[test]
fn loopback_is_local_unless_the_configuration_says_otherwise() {
    let f = recorded();
    let listed = f.list_with(&[], ENV);
    let test = |list: &serde_json::Value| {
        list["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "talks_to_loopback")
            .unwrap()
            .clone()
    };
    assert_eq!(test(&listed)["external"], false);

    f.write(
        ".config/ekstazi.toml",
        "[network]\nloopback-is-external = true\n",
    );
    let listed = f.list_with(&[], ENV);
    let loopback = test(&listed);
    assert_eq!(loopback["external"], true, "{loopback}");
    assert_eq!(listed["selected"], 1, "{listed}");
    // The file is silent on running external tests: the command line and
    // then the environment decide.
    let selecting = f.list_with(&["--external", "select"], ENV);
    assert_eq!(selecting["selected"], 0, "{selecting}");
    let env_select = [ENV, &[("EKSTAZI_EXTERNAL", "select")]].concat();
    assert_eq!(f.list_with(&[], &env_select)["selected"], 0);
    let reasons = loopback["reasons"].as_array().unwrap();
    assert!(
        reasons[0]
            .as_str()
            .unwrap()
            .starts_with("external: 127.0.0.1:"),
        "{loopback}"
    );
    for _ in 0..2 {
        assert_eq!(
            f.test_ok_with(&[], ENV).ran(),
            labels(&["probe::doors talks_to_loopback"]),
            "an external test always runs"
        );
    }

    f.write(
        ".config/ekstazi.toml",
        "[network]\nloopback-is-external = true\nalways-run-external = false\n",
    );
    let listed = f.list_with(&[], ENV);
    assert_eq!(listed["selected"], 0, "{listed}");
    assert_eq!(test(&listed)["external"], true, "still listed as external");
    // Now the file says: the environment does not override it, the command line does.
    let env_always = [ENV, &[("EKSTAZI_EXTERNAL", "always-run")]].concat();
    assert_eq!(f.list_with(&[], &env_always)["selected"], 0);
    assert_eq!(
        f.list_with(&["--external", "always-run"], ENV)["selected"],
        1
    );
    let table = f.run_with(&["list"], ENV);
    let line = table
        .stdout
        .lines()
        .find(|l| l.contains("talks_to_loopback"))
        .unwrap();
    assert!(line.contains("(external: 127.0.0.1:"), "{line}");
}

#[test]
fn a_c_library_read_is_seen_like_file_open() {
    let f = recorded();
    f.write("probe/text/c.txt", "other text");
    assert_eq!(
        f.selected_with(&[], ENV),
        only("reads_with_fopen", "file changed: probe/text/c.txt")
    );
}

#[test]
fn a_program_run_through_variadic_execlp_is_followed() {
    let f = recorded();
    f.write("probe/text/l.txt", "other text");
    assert_eq!(
        f.selected_with(&[], ENV),
        only("runs_cat_with_execlp", "file changed: probe/text/l.txt")
    );
}

#[test]
fn reading_through_a_link_in_its_own_directory_is_still_reading_the_target() {
    let f = recorded();
    f.write("probe/text/s.txt", "other text");
    assert_eq!(
        f.selected_with(&[], ENV),
        only(
            "reads_through_a_link_it_made",
            "file changed: probe/text/s.txt"
        )
    );
}

#[test]
fn configured_ignore_patterns_apply_and_verbose_lists_show_them() {
    let f = recorded();
    f.write(".config/ekstazi.toml", "[ignore]\npaths = [\"text/\"]\n");
    let selected = f.selected_with(&[], ENV);
    assert_eq!(selected.len(), 14, "new recording rules rerun everything");
    assert_each_selected_for(&selected, "global: config changed");
    f.test_ok_with(&[], ENV);
    f.write("probe/text/c.txt", "other text");
    assert!(f.selected_with(&[], ENV).is_empty());

    let verbose = f.run_with(&["list", "-v"], ENV);
    assert_eq!(verbose.code(), Some(0), "{verbose:?}");
    for expected in [
        "ignored: probe/text/c.txt (ignored by .config/ekstazi.toml)",
        "ignored: probe/out.txt (created by the test)",
        "ignored: $TERM (test harness)",
    ] {
        assert!(verbose.stdout.contains(expected), "{expected}: {verbose:?}");
    }

    f.write(".config/ekstazi.toml", "[ignore]\npahts = [\"text/\"]\n");
    let bad = f.run_with(&["list"], ENV);
    assert_ne!(bad.code(), Some(0));
    assert!(bad.stderr.contains("pahts"), "{bad:?}");
}

#[test]
fn a_statically_linked_program_makes_its_test_always_run() {
    let f = recorded();
    f.write("probe/static.c", "int main(void) { return 0; }\n");
    let built = std::process::Command::new("cc")
        .arg("-static")
        .arg("-o")
        .arg(f.file("probe/static-prog"))
        .arg(f.file("probe/static.c"))
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipped: no C compiler that links statically (cc -static)");
        return;
    }
    let test = "runs_a_static_program_when_there_is_one";
    assert_eq!(
        f.selected_with(&[], ENV),
        only(test, "file created: probe/static-prog")
    );
    f.test_ok_with(&[], ENV);
    let always = "always runs: it runs probe/static-prog, \
                  a statically linked program the shim cannot see into";
    for _ in 0..2 {
        assert_eq!(f.selected_with(&[], ENV), only(test, always));
        assert_eq!(
            f.test_ok_with(&[], ENV).ran(),
            labels(&[&format!("probe::doors {test}")])
        );
    }
}

#[test]
fn records_hold_in_another_checkout() {
    // Environment values that name the workspace (CARGO_MANIFEST_DIR,
    // CARGO_BIN_EXE_*, LD_LIBRARY_PATH, ...) are stored relative to it.
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    let elsewhere = f.checkout_elsewhere();
    let selected = elsewhere.selected(&[]);
    assert!(selected.is_empty(), "{selected:?}");
}
