//! The code map stays true and short: every repository path that
//! `docs/design/architecture.md` names in backticks exists, and the map has
//! at most [`MAX_LINES`] lines.
//!
//! A map that names a file that was moved or removed sends the next
//! engineer nowhere, and nothing else notices: the compiler does not read
//! docs. One that keeps growing stops being read in ten minutes; its
//! narrative belongs to the design pages beside it.
//!
//! A backticked span counts as a path when it has a `/`, no space, and ends
//! in `/` or a source or documentation file's extension ([`PATH_ENDINGS`]);
//! a span with `<`, `*` or `{` is a pattern (`tests/e2e/<module>.rs`), not a
//! path. Paths are relative to the repository root. Fenced code blocks are
//! pictures and are not read.

use std::path::{Path, PathBuf};

/// The code map, relative to the repository root.
const MAP: &str = "docs/design/architecture.md";

/// Its length at most: a bird's-eye view, the entry points and one line
/// per source file.
const MAX_LINES: usize = 400;

/// How a backticked span that names a path ends.
const PATH_ENDINGS: [&str; 6] = [".rs", ".md", ".toml", ".yml", ".sh", "/"];

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The backticked spans of `text` outside fenced blocks that look like
/// repository paths, in order.
fn named_paths(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut paths = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Between the first and second backtick, the third and fourth, …
        for span in line.split('`').skip(1).step_by(2) {
            let path_like = span.contains('/')
                && !span.contains(char::is_whitespace)
                && !span.contains(['<', '*', '{'])
                && PATH_ENDINGS.iter().any(|end| span.ends_with(end));
            if path_like {
                paths.push(span);
            }
        }
    }
    paths
}

/// The paths `text` names that do not exist under `root`.
fn missing<'a>(text: &'a str, root: &Path) -> Vec<&'a str> {
    named_paths(text)
        .into_iter()
        .filter(|path| !root.join(path).exists())
        .collect()
}

#[test]
fn every_path_the_code_map_names_exists() {
    let root = repository_root();
    let map = std::fs::read_to_string(root.join(MAP)).unwrap();
    assert!(
        named_paths(&map).len() > 100,
        "{MAP} names a path for every source file; found too few"
    );
    assert_eq!(
        missing(&map, &root),
        Vec::<&str>::new(),
        "{MAP} names paths that do not exist"
    );
}

#[test]
fn the_code_map_stays_short() {
    let map = std::fs::read_to_string(repository_root().join(MAP)).unwrap();
    let lines = map.lines().count();
    assert!(
        lines <= MAX_LINES,
        "{MAP} has {lines} lines, more than {MAX_LINES}: move narrative to a design page"
    );
}

#[test]
fn a_path_that_does_not_exist_is_reported() {
    let text = "\
- `xtask/src/main.rs`: exists.
- `xtask/src/gone.rs`: does not; `docs/no-such-folder/` neither.
- `cargo xtask layout`, `a::b`, `tests/e2e/<module>.rs`, `*.rs`: not paths.
```
`xtask/src/in_a_picture.rs`
```
";
    assert_eq!(
        named_paths(text),
        [
            "xtask/src/main.rs",
            "xtask/src/gone.rs",
            "docs/no-such-folder/"
        ]
    );
    assert_eq!(
        missing(text, &repository_root()),
        ["xtask/src/gone.rs", "docs/no-such-folder/"]
    );
}
