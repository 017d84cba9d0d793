//! rustc's dep-info files (`deps/<crate>-<hash>.d`): the source files a
//! crate was compiled from, and the environment variables it read at
//! compile time. A crate's doctests depend on exactly these (with its
//! dependencies' and the lockfile), so they decide when doctests run.
//!
//! The format is a Makefile fragment:
//!
//! ```text
//! /abs/target/debug/deps/libfoo-1234.rlib: src/lib.rs src/a\ b.rs
//!
//! src/lib.rs:
//! src/a\ b.rs:
//!
//! # env-dep:FOO=bar
//! # env-dep:UNSET
//! ```
//!
//! Relative paths are relative to the directory rustc ran in (the workspace
//! root, for cargo).

use std::path::{Path, PathBuf};

/// What a dep-info file says a crate was compiled from.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DepInfo {
    /// Source files, in order, without duplicates, made absolute.
    pub sources: Vec<PathBuf>,
    /// `(name, value)` of every environment variable read at compile time
    /// (`None`: read and unset).
    pub env: Vec<(String, Option<String>)>,
}

/// Parses a dep-info file's text; relative paths are joined to `base`.
pub fn parse(text: &str, base: &Path) -> DepInfo {
    let mut info = DepInfo::default();
    for line in text.lines() {
        if let Some(dep) = line.strip_prefix("# env-dep:") {
            let (name, value) = match dep.split_once('=') {
                Some((name, value)) => (name, Some(unescape_env(value))),
                None => (dep, None),
            };
            info.env.push((name.to_owned(), value));
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let words = split_words(line);
        // `targets: prerequisites`: the sources are the prerequisites (a
        // source's own empty rule, `src/lib.rs:`, adds none).
        let Some(colon) = words.iter().position(|w| w.ends_with(':')) else {
            continue;
        };
        for word in &words[colon + 1..] {
            let path = base.join(word);
            if !info.sources.contains(&path) {
                info.sources.push(path);
            }
        }
    }
    info
}

/// Splits a Makefile line into words: `\ ` is a space within a word, `\\`
/// a backslash, `$$` a dollar.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some(' ') | Some('\\') | Some('#')) => {
                word.push(chars.next().expect("peeked"));
            }
            '$' if chars.peek() == Some(&'$') => {
                chars.next();
                word.push('$');
            }
            ' ' | '\t' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// rustc escapes `\n` and `\r` in env-dep values, and `\\`.
fn unescape_env(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Where rustc wrote the dep-info of an artifact cargo reported: next to it
/// in `deps/`, named by the crate and its hash (`libfoo-1a2b.rlib` and
/// `foo-1a2b` both have `foo-1a2b.d`).
pub fn path_of_artifact(artifact: &Path) -> Option<PathBuf> {
    let dir = artifact.parent()?;
    let name = artifact.file_name()?.to_str()?;
    let stem = match name.rsplit_once('.') {
        Some((stem, "rlib" | "rmeta" | "so" | "dylib" | "a" | "dll")) => {
            stem.strip_prefix("lib").unwrap_or(stem)
        }
        _ => name,
    };
    Some(dir.join(format!("{stem}.d")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_env_are_read() {
        let text = "/t/deps/libfoo-12.rlib /t/deps/libfoo-12.rmeta: src/lib.rs src/a\\ b.rs /abs/gen.rs Cargo.toml\n\
                    \n\
                    /t/deps/foo-12.d: src/lib.rs src/a\\ b.rs /abs/gen.rs Cargo.toml\n\
                    \n\
                    src/lib.rs:\n\
                    src/a\\ b.rs:\n\
                    /abs/gen.rs:\n\
                    Cargo.toml:\n\
                    \n\
                    # env-dep:FOO=a\\nb\n\
                    # env-dep:UNSET\n";
        let info = parse(text, Path::new("/ws"));
        assert_eq!(
            info.sources,
            [
                PathBuf::from("/ws/src/lib.rs"),
                PathBuf::from("/ws/src/a b.rs"),
                PathBuf::from("/abs/gen.rs"),
                PathBuf::from("/ws/Cargo.toml"),
            ]
        );
        assert_eq!(
            info.env,
            [
                ("FOO".to_owned(), Some("a\nb".to_owned())),
                ("UNSET".to_owned(), None)
            ]
        );
    }

    #[test]
    fn an_empty_or_foreign_file_has_no_sources() {
        assert_eq!(parse("", Path::new("/")), DepInfo::default());
        assert!(parse("just words\n", Path::new("/")).sources.is_empty());
    }

    #[test]
    fn dep_info_sits_next_to_its_artifact() {
        assert_eq!(
            path_of_artifact(Path::new("/t/deps/libfoo-12.rlib")),
            Some(PathBuf::from("/t/deps/foo-12.d"))
        );
        assert_eq!(
            path_of_artifact(Path::new("/t/deps/foo-12")),
            Some(PathBuf::from("/t/deps/foo-12.d"))
        );
        assert_eq!(
            path_of_artifact(Path::new("/t/deps/libm_derive-3.so")),
            Some(PathBuf::from("/t/deps/m_derive-3.d"))
        );
    }
}
