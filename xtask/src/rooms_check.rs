//! Every decision stays in ekstazi-core: cargo-ekstazi makes no record, no
//! dependency and no verdict itself.
//!
//! The binary gathers the evidence and prints; a record is made by
//! `ekstazi_core::recording`, and a test's reasons to run by
//! `ekstazi_core::selection::verdict`. A rule the binary applies on its own
//! is one the core's tests never see, and one the next command forgets.
//! This check reads cargo-ekstazi's code (line comments left out) for what
//! building them looks like: a struct literal of [`BUILT_IN_THE_CORE`], a
//! change to a record's dependencies or outcome, or a reason named outside
//! a `matches!` (a test of one is no verdict).

use std::path::{Path, PathBuf};

/// The types only the core makes.
const BUILT_IN_THE_CORE: [&str; 4] = ["Record", "Dep", "CodeDep", "Planned"];

/// What changing a record's dependencies, outcome or reasons looks like.
const CHANGES: [&str; 8] = [
    ".deps.push(",
    ".deps.retain(",
    ".deps.extend(",
    ".code.push(",
    ".code.retain(",
    ".always.push(",
    ".outcome = ",
    "reasons.push(",
];

/// What may precede `Type {` without it being a struct literal: a return
/// type, an implementation, a definition.
const NOT_A_LITERAL: [&str; 4] = ["->", "impl", "for", "struct"];

/// Where `Planned`s are made: the analysis is the core's verdicts put in
/// the binary's terms (a test case, the record as read).
const PLANNED_AT: &str = "session/analysis.rs";

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `line` without its `//` comment (a `//` inside a string cuts it short,
/// which only hides code from the check: none of its patterns has one).
fn code_of(line: &str) -> &str {
    line.split_once("//").map_or(line, |(code, _)| code)
}

/// What in `text` (a file at `rel`) builds what only the core builds, as
/// `line: what`.
fn violations(rel: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let code = code_of(line);
        let mut say = |what: String| found.push(format!("{rel}:{}: {what}", at + 1));
        for ty in BUILT_IN_THE_CORE {
            if ty == "Planned" && rel.ends_with(PLANNED_AT) {
                continue;
            }
            let literal = format!("{ty} {{");
            for (i, _) in code.match_indices(&literal) {
                let word_start = i == 0 || !code.as_bytes()[i - 1].is_ascii_alphanumeric();
                let before = code[..i].trim_end();
                if word_start && !NOT_A_LITERAL.iter().any(|w| before.ends_with(w)) {
                    say(format!("a `{ty}` built here"));
                }
            }
        }
        for change in CHANGES {
            if code.contains(change) {
                say(format!("`{}` changed here", change.trim()));
            }
        }
        if code.contains("Reason::") && !code.contains("matches!") {
            say("a reason named here".to_owned());
        }
    }
    found
}

#[test]
fn cargo_ekstazi_builds_no_record_dependency_or_verdict() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cargo-ekstazi/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 20, "cargo-ekstazi's sources: {files:?}");
    let found: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let rel = file.strip_prefix(&src).unwrap().display().to_string();
            violations(&rel, &std::fs::read_to_string(file).unwrap())
        })
        .collect();
    assert!(
        found.is_empty(),
        "decisions the core makes, made in cargo-ekstazi (see ekstazi_core::recording and ekstazi_core::selection::verdict):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_looks_for() {
    let text = "\
fn f() -> Record {
    let r = Record { binary };
    let d = vec![Dep { target, sum }];
    record.deps.push(dep); // and
    record.outcome = Outcome::Failed;
    reasons.push(Reason::Skipme);
    let skip = matches!(r, Reason::Skipme);
    // Record { in a comment }
    impl Default for Dep {
}";
    let found = violations("commands/x.rs", text);
    assert_eq!(
        found,
        [
            "commands/x.rs:2: a `Record` built here",
            "commands/x.rs:3: a `Dep` built here",
            "commands/x.rs:4: `.deps.push(` changed here",
            "commands/x.rs:5: `.outcome =` changed here",
            "commands/x.rs:6: `reasons.push(` changed here",
            "commands/x.rs:6: a reason named here",
        ]
    );
}
