//! Whether a library can have doctests at all, found cheaply from the
//! sources its dep-info names, without rustdoc.
//!
//! A doctest is a code block in a doc comment: a fenced block (```` ``` ````
//! or `~~~`) or an indented one. A library none of whose doc comments holds
//! one has no doctests, and running `cargo test --doc` for it only costs a
//! build. Anything this reading cannot rule out counts as a possible
//! doctest:
//! - `doc = ...` attributes (`#[doc = include_str!(..)]`, `cfg_attr(.., doc
//!   = ..)`, a macro's `#[doc = $text]`), whose text is not in view;
//! - `cfg(doc)`, `cfg(doctest)`: code that only rustdoc compiles, whose
//!   files the build's dep-info does not name;
//! - block doc comments (`/** */`, `/*! */`), whose lines this does not read;
//! - a doc line holding a fence, or indented by four spaces or a tab (an
//!   indented code block, or a list's continuation: both count), except
//!   inside a fenced block that rustdoc does not test: one opened on a
//!   `///` or `//!` line by a fence whose every info-string word names
//!   another language (```` ```text ````, ```` ```console ````; rustdoc
//!   tests a block unless a word it does not know marks it as another
//!   language) and closed within the same run of such lines;
//! - any other file the library is compiled from (`include_str!`'d text may
//!   be its documentation, written by a macro this cannot see) holding a
//!   fence or an indented line;
//! - in a path dependency, a file that defines a macro (`macro_rules!`, a
//!   procedural macro) and has any of the above: the macro may write such
//!   a doc comment into the library;
//! - a file that cannot be read, or is too large to read here.
//!
//! Not seen: a macro of a registry or git dependency that writes a doc
//! comment with a code block into the library (its source is not among
//! the library's). docs/reference/limitations.md names this
//! blind spot.

use std::path::Path;

/// Larger files are not read: they count as holding a doctest.
const MAX_FILE: u64 = 64 << 20;

/// Whether a library compiled from `own` (its sources, as its dep-info names
/// them), with the path dependencies compiled from `deps`, may have
/// doctests.
pub fn may_have_doctests<'a>(
    own: impl IntoIterator<Item = &'a Path>,
    deps: impl IntoIterator<Item = &'a Path>,
) -> bool {
    let read = |path: &Path| -> Option<Vec<u8>> {
        let meta = std::fs::metadata(path).ok()?;
        (meta.is_file() && meta.len() <= MAX_FILE)
            .then(|| std::fs::read(path).ok())
            .flatten()
    };
    let is_rust = |path: &Path| path.extension().is_some_and(|e| e == "rs");
    own.into_iter().any(|path| match read(path) {
        None => true,
        Some(text) if is_rust(path) => rust_may_hold_doctests(&text),
        Some(text) => text_may_hold_code_blocks(&text),
    }) || deps
        .into_iter()
        .filter(|path| is_rust(path))
        .any(|path| match read(path) {
            None => true,
            Some(text) => defines_macros(&text) && rust_may_hold_doctests(&text),
        })
}

/// Whether Rust source may document something with a code block.
pub fn rust_may_hold_doctests(text: &[u8]) -> bool {
    has_doc_attribute_or_cfg(text) || has_block_doc_comment(text) || has_code_in_doc_lines(text)
}

/// Whether text, read as Markdown, may hold a code block.
pub fn text_may_hold_code_blocks(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .any(|line| has_fence(line) || is_indented(line))
}

/// `doc` as a word followed by `=` (an attribute with text), or by `)` or
/// `,` (a `cfg(doc)` or `cfg_attr(doc, ..)`: code only rustdoc compiles,
/// which the build's dep-info does not name), or the word `doctest`
/// (`cfg(doctest)`). A comparison `doc == x`, or the words in a comment,
/// count too: a false alarm costs a doctest run, a miss would skip a
/// doctest.
fn has_doc_attribute_or_cfg(text: &[u8]) -> bool {
    let word_at = |at: usize, len: usize| {
        let before = at.checked_sub(1).map(|i| text[i]);
        !before.is_some_and(is_ident_byte)
            && !text.get(at + len).copied().is_some_and(is_ident_byte)
    };
    memchr::memmem::find_iter(text, b"doc").any(|at| {
        if word_at(at, 7) && text[at..].starts_with(b"doctest") {
            return true;
        }
        word_at(at, 3)
            && text[at + 3..]
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_some_and(|&b| matches!(b, b'=' | b')' | b','))
    })
}

/// `/**` (not `/***` nor `/**/`) or `/*!`.
fn has_block_doc_comment(text: &[u8]) -> bool {
    memchr::memmem::find_iter(text, b"/*").any(|at| match text.get(at + 2) {
        Some(b'!') => true,
        Some(b'*') => !matches!(text.get(at + 3), Some(b'*') | Some(b'/')),
        _ => false,
    })
}

/// A line doc comment (`///` but not `////`, or `//!`), anywhere on a line,
/// whose text holds a fence or is indented, outside a block of another
/// language (see the module's overview).
fn has_code_in_doc_lines(text: &[u8]) -> bool {
    // The fence (its byte and length) of an open block of another
    // language, and the kind of doc comment (`///`, `//!`) it is in.
    let mut other_language: Option<(u8, usize, bool)> = None;
    for line in text.split(|&b| b == b'\n') {
        let doc = leading_doc_text(line);
        match (other_language, doc) {
            (Some((byte, len, inner)), Some((doc, same))) if same == inner => {
                if closes_fence(doc, byte, len) {
                    other_language = None;
                }
                continue;
            }
            // The doc comment ended (or went on after an attribute or a
            // blank line, or as the other kind) inside the block: not
            // worth working out.
            (Some(_), _) => return true,
            (None, Some((doc, inner))) => {
                if let Some((byte, len)) = opens_other_language(doc) {
                    other_language = Some((byte, len, inner));
                    continue;
                }
            }
            (None, None) => {}
        }
        if any_doc_comment_has_code(line) {
            return true;
        }
    }
    other_language.is_some()
}

/// The text of a line that is nothing but a line doc comment (after
/// indentation), after its `///` or `//!`, and whether it is `//!`.
fn leading_doc_text(line: &[u8]) -> Option<(&[u8], bool)> {
    let start = line.iter().position(|b| !b.is_ascii_whitespace())?;
    if !line[start..].starts_with(b"//") {
        return None;
    }
    doc_comment_at(line, start).0
}

/// For the `//` at `start`: the text of the doc comment it begins (`///`
/// but not `////`, or `//!`) and whether it is `//!`, if it is one; and
/// where its slashes end.
fn doc_comment_at(line: &[u8], start: usize) -> (Option<(&[u8], bool)>, usize) {
    let slashes = line[start..].iter().take_while(|&&b| b == b'/').count();
    let after = start + slashes;
    let doc = match (slashes, line.get(after)) {
        (3, _) => Some((&line[after..], false)),
        (2, Some(b'!')) => Some((&line[after + 1..], true)),
        _ => None,
    };
    (doc, after)
}

/// Languages whose fenced blocks rustdoc does not test: a word it does not
/// know marks a block as another language (and these are not words it
/// knows).
const OTHER_LANGUAGES: &[&[u8]] = &[
    b"text",
    b"txt",
    b"plain",
    b"plaintext",
    b"console",
    b"sh",
    b"bash",
    b"shell",
    b"zsh",
    b"fish",
    b"powershell",
    b"toml",
    b"json",
    b"yaml",
    b"yml",
    b"ini",
    b"diff",
    b"html",
    b"xml",
    b"css",
    b"javascript",
    b"js",
    b"python",
    b"c",
    b"cpp",
    b"sql",
    b"markdown",
    b"md",
    b"dot",
    b"csv",
    b"ebnf",
    b"log",
    b"output",
];

/// A fence (at most three spaces in, after the comment's own space) whose
/// info string is one or more words of [`OTHER_LANGUAGES`]: its byte and
/// length.
fn opens_other_language(doc: &[u8]) -> Option<(u8, usize)> {
    let doc = doc.strip_suffix(b"\r").unwrap_or(doc);
    let indent = doc.iter().take_while(|&&b| b == b' ').count();
    if indent > 4 {
        return None;
    }
    let rest = &doc[indent..];
    let byte = *rest.first().filter(|&&b| b == b'`' || b == b'~')?;
    let len = rest.iter().take_while(|&&b| b == byte).count();
    if len < 3 {
        return None;
    }
    let info = &rest[len..];
    let mut words = info
        .split(|&b| b == b',' || b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .peekable();
    words.peek()?;
    words
        .all(|word| OTHER_LANGUAGES.contains(&word))
        .then_some((byte, len))
}

/// A closing fence for a block opened with `len` of `byte`: at least as
/// many, and nothing else on the line.
fn closes_fence(doc: &[u8], byte: u8, len: usize) -> bool {
    let doc = doc.strip_suffix(b"\r").unwrap_or(doc);
    let indent = doc.iter().take_while(|&&b| b == b' ').count();
    let rest = &doc[indent..];
    let run = rest.iter().take_while(|&&b| b == byte).count();
    indent <= 4 && run >= len && rest[run..].iter().all(u8::is_ascii_whitespace)
}

/// Whether any doc comment on the line holds a fence or is indented.
fn any_doc_comment_has_code(line: &[u8]) -> bool {
    let mut i = 0;
    while let Some(at) = memchr::memmem::find(&line[i..], b"//") {
        let (doc, after) = doc_comment_at(line, i + at);
        if doc.is_some_and(|(doc, _)| has_fence(doc) || is_indented(doc)) {
            return true;
        }
        i = after;
    }
    false
}

fn has_fence(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"```").is_some() || memchr::memmem::find(line, b"~~~").is_some()
}

/// Four spaces or a tab before any text (the doc comment's own single space
/// included: rustdoc removes the indentation its lines share, which this
/// does not work out).
fn is_indented(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let lead = line.iter().take_while(|&&b| b == b' ').count();
    let rest = &line[lead..];
    !rest.is_empty() && (lead >= 4 || rest[0] == b'\t')
}

/// Whether Rust source defines a macro (by example, or procedural).
fn defines_macros(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"macro_rules!").is_some()
        || memchr::memmem::find(text, b"proc_macro").is_some()
        || memchr::memmem::find(text, b"macro ").is_some()
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_comments_without_code_blocks_hold_no_doctests() {
        let text = b"//! A crate.\n\
                     \n\
                     /// Adds one: `x + 1`.\n\
                     ///\n\
                     /// - a list\n\
                     ///   continued\n\
                     #[doc(hidden)]\n\
                     #[doc(alias = \"plus\")]\n\
                     pub fn add(x: u32) -> u32 { x + 1 } // a comment: ```\n\
                     //// four slashes are a comment: ```\n\
                     ///// and five: ```\n\
                     /* a comment */ /***/ /**/\n\
                     let document = 1; let doc_x = 2;\n\
                     let s = \"    indented, but not a doc comment\";\n";
        assert!(!rust_may_hold_doctests(text));
    }

    #[test]
    fn blocks_of_other_languages_hold_no_doctests() {
        for text in [
            &b"/// Bits:\n///\n/// ```text\n/// 0 3 => 0 1\n///     indented\n/// ```\nfn f() {}\n"
                [..],
            b"    //! ~~~~console\r\n    //! $ run ```\n    //! ~~~~~\n",
            b"/// ```sh, bash\n/// ```rust\n/// ```\n/// after\n",
        ] {
            assert!(
                !rust_may_hold_doctests(text),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn anything_that_may_be_a_code_block_counts() {
        for text in [
            &b"/// ```\n/// assert!(true);\n/// ```\nfn f() {}\n"[..],
            b"/// ~~~\n",
            b"//! ```rust\n",
            b"struct A; /// ```\n",
            b"///\n///     indented();\n",
            b"///\tindented();\n",
            b"#![doc = include_str!(\"../README.md\")]\n",
            b"#[cfg_attr(docsrs, doc = \"x\")]\n",
            b"#[doc\n  = \"x\"]\n",
            b"#[cfg(doctest)]\nmod readme;\n",
            b"#[cfg(any(doc, test))]\nmod extra;\n",
            b"#[cfg_attr(doc, path = \"docs.rs\")]\n",
            b"#[cfg(doc)]\nmod guide;\n",
            b"/** block */\n",
            b"/*! inner block */\n",
            // Blocks rustdoc tests, or that this does not follow.
            b"/// ```text,ignore\n/// x\n/// ```\n",
            b"/// ```ignore text\n/// x\n/// ```\n",
            b"/// ```{.text}\n/// x\n/// ```\n",
            b"/// ```rust\n",
            b"/// ```text\n/// never closed\nfn f() {}\n",
            b"/// ```text\n\n/// ```\n",
            b"/// ```text\n#[inline]\n/// ```\n",
            b"/// ```text\n/// x\n/// ```\n/// ```\n/// y();\n/// ```\n",
            b"/// ````text\n/// ```\n/// inside();\n",
            b"/// ```text\n/// x\n/// ```\n///     indented();\n",
            b"/// ~~~text\n/// x\n/// ```\n",
            b"//! ```text\n/// ```\n/// y();\n",
        ] {
            assert!(
                rust_may_hold_doctests(text),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn other_files_count_when_they_may_hold_a_code_block() {
        assert!(!text_may_hold_code_blocks(
            b"# Title\n\nSome text.\n  - two spaces\n"
        ));
        assert!(text_may_hold_code_blocks(b"# Title\n\n```\nx\n```\n"));
        assert!(text_may_hold_code_blocks(b"text\n\n    code\n"));
        assert!(!text_may_hold_code_blocks(b"    \n"), "blank");
    }

    #[test]
    fn dependencies_count_through_their_macros() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let own = write("lib.rs", "/// Two.\npub fn two() -> u32 { 2 }\n");
        let notes = write("notes.md", "Plain text.\n");
        let plain_dep = write("dep.rs", "/// ```\n/// dep::f();\n/// ```\npub fn f() {}\n");
        let macro_dep = write(
            "mac.rs",
            "macro_rules! m { ($t:expr) => { #[doc = $t] pub fn g() {} } }\n",
        );
        let owns = |paths: &[&Path], deps: &[&Path]| {
            may_have_doctests(paths.iter().copied(), deps.iter().copied())
        };
        assert!(!owns(&[&own, &notes], &[&plain_dep]));
        assert!(owns(&[&own], &[&macro_dep]), "a macro that writes docs");
        assert!(owns(&[&plain_dep], &[]));
        assert!(
            owns(&[&own, &dir.path().join("gone.rs")], &[]),
            "unreadable"
        );
        let readme = write("README.md", "Example:\n\n```\nx();\n```\n");
        assert!(owns(&[&own, &readme], &[]), "text a macro may include");
    }
}
