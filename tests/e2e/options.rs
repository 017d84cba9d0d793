//! Options the configuration reference (docs/reference/configuration.md)
//! documents that no other module exercises: `--no-record`, `--report-json`, `EKSTAZI_PARTITION`, the
//! recording rules `--ignore-path`, `[ignore] env`, `[ignore] absolute`
//! and `[libraries] system`, and `[build] debuginfo`.

use crate::support::{BASIC_ALL, Fixture, assert_each_selected_for};
use std::collections::BTreeSet;

const READS_DATA: &str = "beta::files reads_data";

fn label_set(selected: &[(String, Vec<String>)]) -> BTreeSet<String> {
    selected.iter().map(|(label, _)| label.clone()).collect()
}

#[test]
fn no_record_runs_and_keeps_every_record() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    f.write("beta/data/a.txt", "other data\n");
    let changed = vec![(
        READS_DATA.to_owned(),
        vec!["file changed: beta/data/a.txt".to_owned()],
    )];
    assert_eq!(f.selected(&[]), changed);
    let before = f.record_bytes();

    // --no-record (and --report-json): the test runs, as `cargo test` runs
    // it (libtest's lines, no process of its own), and no record changes.
    let run = f.test_ok(&["--no-record", "--report-json", "report.json"]);
    assert!(run.stdout.contains("test reads_data ... ok"), "{run:?}");
    assert!(run.ran().is_empty(), "{run:?}");
    assert!(run.stderr.contains("no record was written"), "{run:?}");
    assert_eq!(f.record_bytes(), before, "every record as it was");
    assert_eq!(f.selected(&[]), changed, "so it is still selected");
    // The same from the environment.
    f.test_ok_with(&[], &[("EKSTAZI_NO_RECORD", "1")]);
    assert_eq!(f.record_bytes(), before);

    // The report: every test, selected or not, why, and how it went.
    let report: serde_json::Value = serde_json::from_str(&f.read("report.json")).unwrap();
    let tests = report["tests"].as_array().unwrap();
    assert_eq!(tests.len(), BASIC_ALL.len() + 1, "and the ignored one");
    let of = |label: &str| crate::support::test_entry(&report["tests"], label);
    let ran = of(READS_DATA);
    assert_eq!(ran["selected"], true);
    assert_eq!(
        ran["reasons"],
        serde_json::json!(["file changed: beta/data/a.txt"])
    );
    assert_eq!(ran["outcome"], "passed");
    assert!(
        ran["duration"].is_null(),
        "libtest gives none per test: {ran}"
    );
    let skipped = of("alpha tests::doubles");
    assert_eq!(skipped["selected"], false);
    assert_eq!(skipped["reasons"], serde_json::json!([]));
    assert!(skipped["outcome"].is_null(), "{skipped}");
    assert_eq!(of("alpha tests::slow_and_ignored")["ignored"], true);
    for stage in ["build", "run", "total"] {
        assert!(report["timings"][stage].is_f64(), "{stage}: {report}");
    }

    // EKSTAZI_PARTITION means what --partition means: a share of the
    // selected tests, the shares disjoint and together all of them.
    let all = label_set(&f.selected(&["--forceall"]));
    assert_eq!(all.len(), BASIC_ALL.len());
    let mut union = BTreeSet::new();
    for m in 1..=2 {
        let partition = format!("count:{m}/2");
        let by_env = f.selected_with(&["--forceall"], &[("EKSTAZI_PARTITION", &partition)]);
        let by_flag = f.selected(&["--forceall", "--partition", &partition]);
        assert_eq!(by_env, by_flag, "{partition}");
        let share = label_set(&by_env);
        assert!(!share.is_empty() && share.len() < all.len(), "{share:?}");
        assert!(union.is_disjoint(&share));
        union.extend(share);
    }
    assert_eq!(union, all);
}

#[test]
fn recording_rules_apply_as_configured() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    let all_rerun = |selected: Vec<(String, Vec<String>)>| {
        assert_eq!(selected.len(), BASIC_ALL.len(), "{selected:?}");
        assert_each_selected_for(&selected, "global: config changed");
    };

    // --ignore-path: what a test reads there is no dependency.
    let ignoring = ["--ignore-path", "beta/data/"];
    all_rerun(f.selected(&ignoring));
    f.test_ok(&ignoring);
    f.write("beta/data/a.txt", "other data\n");
    assert!(f.selected(&ignoring).is_empty());
    f.write("beta/data/a.txt", "data\n");

    // [ignore] env: a variable the test reads is no dependency.
    f.write(".config/ekstazi.toml", "[ignore]\nenv = [\"FIXTURE_*\"]\n");
    all_rerun(f.selected(&[]));
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());
    assert!(
        f.selected_with(&[], &[("FIXTURE_FAIL", "1")]).is_empty(),
        "fails_on_request reads it, and is not selected"
    );
    // (Without the rule, it is.)
    f.write(".config/ekstazi.toml", "");
    f.test_ok(&[]);
    assert_eq!(
        f.selected_with(&[], &[("FIXTURE_FAIL", "1")]),
        [(
            "beta::files fails_on_request".to_owned(),
            vec!["environment variable set: FIXTURE_FAIL".to_owned()]
        )]
    );

    // [ignore] absolute: a pattern over absolute paths.
    let data = f.file("beta/data");
    f.write(
        ".config/ekstazi.toml",
        &format!("[ignore]\nabsolute = [\"{}/\"]\n", data.display()),
    );
    all_rerun(f.selected(&[]));
    f.test_ok(&[]);
    f.write("beta/data/a.txt", "other data again\n");
    assert!(f.selected(&[]).is_empty());
    let verbose = f.run(&["list", "-v"]);
    assert!(
        verbose
            .stdout
            .contains("ignored: beta/data/a.txt (ignored by .config/ekstazi.toml)"),
        "{verbose:?}"
    );

    // [libraries] system: the C library a test loads is a dependency too.
    let libc_line = |text: &str| {
        text.lines()
            .find(|l| l.contains("libc.so"))
            .map(str::to_owned)
    };
    let why = f.run(&["why", "tests::doubles", "--all"]);
    let line = libc_line(&why.stdout).unwrap_or_else(|| panic!("{why:?}"));
    assert!(
        line.contains("(system library)"),
        "not a dependency: {line}"
    );
    f.write(".config/ekstazi.toml", "[libraries]\nsystem = true\n");
    all_rerun(f.selected(&[]));
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());
    let why = f.run(&["why", "tests::doubles", "--all"]);
    let line = libc_line(&why.stdout).unwrap_or_else(|| panic!("{why:?}"));
    assert!(
        line.trim_start().starts_with("library ") && !line.contains("(system library)"),
        "a dependency: {line}"
    );
}

/// The size of the `.debug_info` and `.debug_line` sections of every test
/// executable of the instrumented build.
fn debug_sections(f: &Fixture) -> (u64, u64) {
    use object::{Object, ObjectSection};
    let mut sizes = (0, 0);
    for entry in walkdir::WalkDir::new(f.file("target/ekstazi/build")) {
        let entry = entry.unwrap();
        let path = entry.path();
        if !path.parent().is_some_and(|p| p.ends_with("deps"))
            || path.extension().is_some()
            || !entry.file_type().is_file()
        {
            continue;
        }
        let bytes = std::fs::read(path).unwrap();
        let Ok(file) = object::File::parse(&*bytes) else {
            continue;
        };
        let size = |name| file.section_by_name(name).map_or(0, |s| s.size());
        sizes.0 += size(".debug_info");
        sizes.1 += size(".debug_line");
    }
    sizes
}

#[test]
fn the_instrumented_build_keeps_line_tables_unless_the_profile_is_asked_for() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    let (cut_info, cut_lines) = debug_sections(&f);
    assert!(
        cut_lines > 0,
        "file and line stay for panics and backtraces"
    );

    // The profile's own debug information: a rebuild, and every test
    // reruns once, for a build whose binaries differ.
    f.write(".config/ekstazi.toml", "[build]\ndebuginfo = \"profile\"\n");
    let selected = f.selected(&[]);
    assert_eq!(
        label_set(&selected),
        BASIC_ALL.iter().map(|l| l.to_string()).collect()
    );
    for (label, reasons) in &selected {
        assert_eq!(reasons[0], "global: config changed", "{label}: {reasons:?}");
    }
    f.test_ok(&[]);
    let (full_info, _) = debug_sections(&f);
    // (Most of either is the standard library's, built beforehand.)
    assert!(
        full_info > cut_info,
        "the test profile's full debug information: {full_info} against {cut_info} bytes"
    );
}
