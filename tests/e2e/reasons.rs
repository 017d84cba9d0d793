//! Every reason the usage guide lists is produced by some end-to-end test and
//! asserted verbatim. The doors' reasons are in `doors`,
//! `capture`, `selection` and `functions`; here are the rest: each
//! component of the global fingerprint, `new` and `forced`, and the few
//! reasons no record this version writes can hold (shown on a record
//! rewritten as an older or foreign one would be). The last test keeps the
//! guide's list (`docs/guide/usage.md`) and `docs/design/proof.md`'s table
//! of tests from drifting apart.

use crate::support::{Fixture, assert_each_selected_for};
use ekstazi_core::model::dep::{Dep, Sum, Target};
use ekstazi_core::model::path::{Anchor, StoredPath};
use ekstazi_core::model::record::Record;
use ekstazi_core::storage::store::Store;
use std::collections::BTreeMap;
use std::path::Path;

const ALL: [&str; 2] = ["nx::retry flaky", "nx::retry steady"];

/// Asserts that every test of the fixture, and only they, are selected,
/// each for exactly `reasons`.
#[track_caller]
fn all_for(selected: Vec<(String, Vec<String>)>, reasons: &[&str]) {
    let expected: Vec<(String, Vec<String>)> = ALL
        .iter()
        .map(|label| {
            (
                (*label).to_owned(),
                reasons.iter().map(|r| (*r).to_owned()).collect(),
            )
        })
        .collect();
    assert_eq!(selected, expected);
}

/// Asserts that every test of the fixture, and only they, are selected,
/// each for `reason` first: a build with another profile (or flags, or
/// compiler) has other code, and the functions that differ follow.
#[track_caller]
fn all_first(selected: Vec<(String, Vec<String>)>, reason: &str) {
    let labels: Vec<&str> = selected.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ALL, "{selected:?}");
    for (_, reasons) in &selected {
        assert_eq!(reasons[0], reason, "{selected:?}");
    }
}

/// Rewrites every record of the fixture, sealed as this version seals them.
fn rewrite(f: &Fixture, change: impl Fn(&mut Record)) {
    let store = Store::new(&f.file(".ekstazi"));
    let records = store.records().unwrap();
    assert_eq!(records.len(), ALL.len(), "{records:?}");
    for (_, record) in records {
        let mut record = record.unwrap();
        change(&mut record);
        store.save(&record).unwrap();
    }
}

#[test]
fn each_global_component_is_named_and_reruns_every_test() {
    let f = Fixture::new("nextest");
    all_for(f.selected(&[]), &["new"]);
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());
    all_for(f.selected(&["--forceall"]), &["forced"]);

    // Each component as a user changes it; none of these listings writes
    // a record, so each is compared with the first run's.
    all_for(f.selected(&["-F", "extra"]), &["global: features changed"]);
    all_first(f.selected(&["--release"]), "global: profile changed");
    all_for(
        f.selected_with(&[], &[("RUSTFLAGS", "--cfg e2e_rustflags")]),
        &["global: RUSTFLAGS changed"],
    );
    // (The functions recorded cannot be found in a binary built without
    // coverage, and it says so after.)
    all_first(
        f.selected_with(&[], &[("EKSTAZI_GRANULARITY", "binary")]),
        "global: granularity changed",
    );
    f.write(".config/ekstazi.toml", "[ignore]\nenv = [\"E2E_*\"]\n");
    all_for(f.selected(&[]), &["global: config changed"]);
    std::fs::remove_file(f.file(".config/ekstazi.toml")).unwrap();
    // Another compiler: the same rustc behind a wrapper that says more
    // about itself (`rustc -vV` is the component), as a toolchain update
    // would.
    let wrapper = f.tmp().join("rustc-wrapper");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\nif [ \"$1\" = -vV ]; then rustc -vV; echo 'e2e: another build'; \
         else exec rustc \"$@\"; fi\n",
    )
    .unwrap();
    set_executable(&wrapper);
    all_for(
        f.selected_with(&[], &[("RUSTC", wrapper.to_str().unwrap())]),
        &["global: rustc changed"],
    );
    assert!(f.selected(&[]).is_empty(), "no listing wrote a record");

    // The target is the host `rustc -vV` names, and the tool is this very
    // binary: neither can change under a test without the other
    // components, so records are rewritten as another host's, or another
    // cargo-ekstazi's, would be.
    rewrite(&f, |r| {
        r.global.target = "aarch64-unknown-linux-gnu".into();
        r.global.tool = "cargo-ekstazi 0.0.1 format 8 shim 0".into();
    });
    all_for(
        f.selected(&[]),
        &["global: target changed", "global: cargo-ekstazi changed"],
    );
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty(), "rewritten by the run");
}

#[test]
fn reasons_no_record_of_this_version_holds_are_still_named() {
    let f = Fixture::new("nextest");
    f.test_ok(&[]);
    // A listing is recorded only of a directory the test found, and one
    // that is gone when the checksum is taken is `Unknown`: "directory
    // created" needs a record that says the directory was absent.
    let src = StoredPath::new(Anchor::Workspace, "src").unwrap();
    rewrite(&f, |r| {
        if r.test == "flaky" {
            r.deps.push(Dep {
                target: Target::Listing(src.clone()),
                sum: Sum::Absent,
            });
        }
    });
    assert_eq!(
        f.selected(&[]),
        [(
            "nx::retry flaky".to_owned(),
            vec!["directory created: src".to_owned()]
        )]
    );
    // And a test a previous version decided must always run.
    rewrite(&f, |r| {
        r.always = vec!["its trace is incomplete".into()];
    });
    let selected = f.selected(&[]);
    assert_eq!(selected.len(), 2, "{selected:?}");
    assert_eq!(
        selected[1],
        (
            "nx::retry steady".to_owned(),
            vec!["always runs: its trace is incomplete".to_owned()]
        )
    );
    assert_each_selected_for(&selected[1..], "always runs: its trace is incomplete");
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The reasons of the usage guide's "Why did a test run?", each as the stem a
/// test asserts (`file changed: …` → `file changed: `).
fn guide_reasons() -> Vec<String> {
    let guide = std::fs::read_to_string(repo().join("docs/guide/usage.md")).unwrap();
    let list = guide
        .split_once("## Why did a test run?")
        .expect("the usage guide's section")
        .1
        .split_once("Every selected test carries its reasons")
        .expect("the paragraph that lists them")
        .1
        .split_once("JSON:")
        .expect("the list, after `JSON:`")
        .1
        .split("\n\n")
        .next()
        .unwrap();
    let mut reasons: Vec<String> = Vec::new();
    // The last reason given whole: a bare word after it (`target`, `set`)
    // or a `deleted: …` names a variant of it.
    let mut whole = String::new();
    for quoted in code_spans(list) {
        let word = !quoted.contains([' ', ':']);
        let reason = if word && whole.starts_with("global: ") {
            format!("global: {quoted} changed")
        } else if word && whole.starts_with("environment variable ") {
            format!("environment variable {quoted}: ")
        } else if whole == "failed last time" && quoted.ends_with(" last time") {
            // `failed last time` (also `crashed last time`, ...)
            quoted.clone()
        } else if quoted.starts_with("deleted: ") && whole == "directory created: " {
            "directory deleted: ".to_owned()
        } else {
            whole = stem(&quoted);
            whole.clone()
        };
        reasons.push(reason);
    }
    reasons
}

/// The contents of the Markdown code spans of `text`; a backslash keeps a
/// backtick inside one (`` `always-run pattern \`…\`` ``).
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (&mut current, c) {
            (Some(span), '\\') if chars.peek() == Some(&'`') => span.push(chars.next().unwrap()),
            (Some(_), '`') => spans.push(current.take().unwrap()),
            (Some(span), '\n') => span.push(' '),
            (Some(span), c) => span.push(c),
            (None, '`') => current = Some(String::new()),
            (None, _) => {}
        }
    }
    spans
}

/// What a reason starts with whatever it names: up to and including `: `,
/// or up to its placeholder `…`.
fn stem(reason: &str) -> String {
    if reason.starts_with("global: ") {
        reason.to_owned()
    } else if let Some((head, _)) = reason.split_once(": ") {
        format!("{head}: ")
    } else if let Some((head, _)) = reason.split_once('…') {
        head.to_owned()
    } else {
        reason.to_owned()
    }
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `docs/design/proof.md`'s reasons table: each reason's stem, and the tests
/// (`module::function`) that assert it.
fn proof_table() -> BTreeMap<String, Vec<String>> {
    let proof = std::fs::read_to_string(repo().join("docs/design/proof.md")).unwrap();
    let section = proof
        .split_once("## Reasons")
        .expect("docs/design/proof.md has a Reasons section")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let mut table = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let reason = cells[1].trim_matches('`').trim();
        // The tests are the code spans that name one; the rest is a note.
        let tests = code_spans(cells[2])
            .into_iter()
            .filter(|t| t.contains("::"))
            .collect();
        table.insert(stem(reason), tests);
    }
    table
}

#[test]
fn every_reason_the_readme_lists_has_a_test_that_asserts_it() {
    let reasons = guide_reasons();
    assert!(reasons.len() >= 30, "{reasons:?}");
    let table = proof_table();
    let mut missing = Vec::new();
    for reason in &reasons {
        match table.get(reason) {
            None => missing.push(format!("{reason:?}: no row in docs/design/proof.md")),
            Some(tests) if tests.is_empty() => missing.push(format!("{reason:?}: no test")),
            Some(tests) => {
                for test in tests {
                    // `module::function` (e2e) or `crate/path.rs::function`.
                    let (file, function) = test.rsplit_once("::").unwrap();
                    let path = if file.ends_with(".rs") {
                        repo().join(file)
                    } else {
                        repo().join(format!("tests/e2e/{file}.rs"))
                    };
                    let source = std::fs::read_to_string(&path)
                        .unwrap_or_else(|e| panic!("{test}: {}: {e}", path.display()));
                    if !source.contains(&format!("fn {function}(")) {
                        missing.push(format!("{reason:?}: {test} does not exist"));
                    } else if !source.contains(reason.trim_end()) {
                        missing.push(format!("{reason:?}: {test}'s file never asserts it"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn every_test_docs_proof_names_exists() {
    let proof = std::fs::read_to_string(repo().join("docs/design/proof.md")).unwrap();
    let mut named = 0;
    let mut missing = Vec::new();
    for span in code_spans(&proof) {
        let Some((module, function)) = span.split_once("::") else {
            continue;
        };
        let is_name = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let file = repo().join(format!("tests/e2e/{module}.rs"));
        if !is_name(module) || !is_name(function) || !file.exists() {
            continue;
        }
        named += 1;
        let source = std::fs::read_to_string(&file).unwrap();
        if !source.contains(&format!("fn {function}(")) {
            missing.push(span);
        }
    }
    assert!(named >= 40, "{named} tests named");
    assert!(missing.is_empty(), "{missing:#?}");
}
