//! `cargo xtask layout`: the import circles between a crate's top-level
//! modules. A crate reads one way when its top-level modules (each file
//! `x.rs` or folder `x/` directly under `src/`, the crate root aside) can be
//! put in an order where each refers only to those before it; a circle (two
//! or more modules that reach one another) is where that fails.
//!
//! A module `x` refers to `y` where any of x's files names `crate::y`,
//! alone or in a group (`use crate::{y::A, z}`), or reaches the crate root
//! with as many `super::` as it is deep and names `y` there. A `super::`
//! that stays inside `x` (from a file of the folder `x/`, or from an inline
//! `mod` of `x.rs` such as its `#[cfg(test)] mod tests`) is no arrow.
//! Comments (doc comments and their links included), strings and character
//! literals are skipped, so only code counts. What it does not see: a name
//! the crate root re-exports (`crate::Name` from `pub use y::Name`), and
//! paths a macro builds from pieces.

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// One arrow between two top-level modules, with the first reference that
/// makes it (files in path order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
}

/// Top-level modules that reach one another (a strongly connected component
/// of more than one), with every arrow between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Circle {
    /// Sorted by name.
    pub modules: Vec<String>,
    pub arrows: Vec<Reference>,
}

/// Which top-level module of a crate refers to which.
#[derive(Debug, Default)]
pub struct Graph {
    /// Sorted by name.
    pub modules: Vec<String>,
    /// One example reference per arrow, by (from, to).
    pub arrows: BTreeMap<(String, String), Reference>,
}

/// The circles between the top-level modules of the crate whose `src/`
/// directory is `src`: none for a crate that reads one way. (What a test
/// that the workspace's crates stay one way calls.)
#[cfg_attr(not(test), allow(dead_code))]
pub fn circles(src: &Path) -> Result<Vec<Circle>> {
    Ok(graph(src)?.circles())
}

/// The graph of the crate whose `src/` directory is `src`.
pub fn graph(src: &Path) -> Result<Graph> {
    let modules = top_level_modules(src)?;
    let names: BTreeSet<&str> = modules.keys().map(String::as_str).collect();
    let mut graph = Graph {
        modules: modules.keys().cloned().collect(),
        arrows: BTreeMap::new(),
    };
    for (module, files) in &modules {
        for file in files {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let depth = depth(src, file);
            for (to, line) in references(&text, depth) {
                if to == *module || !names.contains(to.as_str()) {
                    continue;
                }
                graph
                    .arrows
                    .entry((module.clone(), to.clone()))
                    .or_insert_with(|| Reference {
                        from: module.clone(),
                        to,
                        file: file.clone(),
                        line,
                    });
            }
        }
    }
    Ok(graph)
}

/// `cargo xtask layout`: each crate's top-level modules in a one-way order,
/// or its circles; an error if any crate has one.
pub fn check(crates: &[PathBuf]) -> Result<()> {
    let crates = if crates.is_empty() {
        workspace_crates()?
    } else {
        crates.to_vec()
    };
    let mut found = 0;
    for dir in &crates {
        let src = if dir.join("src").is_dir() {
            dir.join("src")
        } else {
            dir.clone()
        };
        let graph = graph(&src)?;
        let circles = graph.circles();
        let shown = shown(&src);
        if circles.is_empty() {
            println!(
                "{shown}: {} top-level modules, one way (each refers only to modules above it):",
                graph.modules.len()
            );
            for module in graph.order() {
                let to: Vec<&str> = graph
                    .arrows
                    .keys()
                    .filter(|(from, _)| *from == module)
                    .map(|(_, to)| to.as_str())
                    .collect();
                if to.is_empty() {
                    println!("  {module}");
                } else {
                    println!("  {module} -> {}", to.join(", "));
                }
            }
        } else {
            println!(
                "{shown}: {} top-level modules, {} circle{}:",
                graph.modules.len(),
                circles.len(),
                if circles.len() == 1 { "" } else { "s" }
            );
            for circle in &circles {
                print!("{circle}");
            }
        }
        println!();
        found += circles.len();
    }
    if found > 0 {
        bail!("{found} import circle(s) between top-level modules");
    }
    Ok(())
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(f, "  circle: {}", self.modules.join(", "))?;
        for arrow in &self.arrows {
            writeln!(
                f,
                "    {} -> {}  ({}:{})",
                arrow.from,
                arrow.to,
                shown(&arrow.file),
                arrow.line
            )?;
        }
        Ok(())
    }
}

impl Graph {
    fn targets(&self, module: &str) -> impl Iterator<Item = &str> {
        self.arrows
            .keys()
            .filter(move |(from, _)| from == module)
            .map(|(_, to)| to.as_str())
    }

    /// The strongly connected components of more than one module (Tarjan's
    /// algorithm), each with the arrows inside it, sorted.
    pub fn circles(&self) -> Vec<Circle> {
        struct Tarjan<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            components: Vec<Vec<&'g str>>,
        }
        impl<'g> Tarjan<'g> {
            fn visit(&mut self, v: &'g str) {
                let i = self.index.len();
                self.index.insert(v, i);
                self.low.insert(v, i);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.targets(v) {
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    self.components.push(component);
                }
            }
        }
        let mut tarjan = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            components: Vec::new(),
        };
        for module in &self.modules {
            if !tarjan.index.contains_key(module.as_str()) {
                tarjan.visit(module);
            }
        }
        let mut circles: Vec<Circle> = tarjan
            .components
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|component| {
                let inside: BTreeSet<&str> = component.iter().copied().collect();
                Circle {
                    modules: inside.iter().map(|m| (*m).to_owned()).collect(),
                    arrows: self
                        .arrows
                        .values()
                        .filter(|r| {
                            inside.contains(r.from.as_str()) && inside.contains(r.to.as_str())
                        })
                        .cloned()
                        .collect(),
                }
            })
            .collect();
        circles.sort_by(|a, b| a.modules.cmp(&b.modules));
        circles
    }

    /// The modules, each after every module it refers to (ties by name);
    /// the members of a circle, which have no such order, come last.
    pub fn order(&self) -> Vec<String> {
        let mut placed: Vec<String> = Vec::new();
        let mut left: BTreeSet<&str> = self.modules.iter().map(String::as_str).collect();
        while let Some(next) = left
            .iter()
            .copied()
            .find(|m| self.targets(m).all(|to| !left.contains(to)))
        {
            left.remove(next);
            placed.push(next.to_owned());
        }
        placed.extend(left.into_iter().map(str::to_owned));
        placed
    }
}

/// The top-level modules under `src`, each with its files, sorted: `x.rs`
/// and everything under `x/` (the crate root, `main.rs` or `lib.rs`, aside;
/// `bin/` too, whose files are the roots of other binaries).
fn top_level_modules(src: &Path) -> Result<BTreeMap<String, Vec<PathBuf>>> {
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let entries =
        std::fs::read_dir(src).with_context(|| format!("cannot read {}", src.display()))?;
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.is_dir() {
            if name == "bin" {
                continue;
            }
            let mut files = Vec::new();
            rust_files(&path, &mut files)?;
            if !files.is_empty() {
                modules.entry(name.to_owned()).or_default().extend(files);
            }
        } else if let Some(stem) = name.strip_suffix(".rs")
            && stem != "main"
            && stem != "lib"
        {
            modules
                .entry(stem.to_owned())
                .or_default()
                .push(path.clone());
        }
    }
    for files in modules.values_mut() {
        files.sort();
    }
    Ok(modules)
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// How deep the module of `file` is below the crate root: 1 for `x.rs` and
/// `x/mod.rs`, 2 for `x/a.rs` and `x/a/mod.rs`, and so on.
fn depth(src: &Path, file: &Path) -> usize {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let parts = relative.components().count();
    if relative.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// A token of Rust code, comments, strings and literals left out.
#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    Path,
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens of `text` that paths are made of, each with its line.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips to the end of a string starting at `i` (after its opening
    // quote), escapes honoured unless `raw`, `hashes` the raw string's `#`s.
    let skip_string = |mut i: usize, line: &mut usize, raw: bool, hashes: usize| -> usize {
        while i < chars.len() {
            match chars[i] {
                '\\' if !raw => {
                    if at(i + 1) == '\n' {
                        *line += 1;
                    }
                    i += 2;
                    continue;
                }
                '\n' => *line += 1,
                '"' if (1..=hashes).all(|k| at(i + k) == '#') => return i + 1 + hashes,
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut nesting = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        nesting += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        nesting -= 1;
                        i += 2;
                        if nesting == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(i + 1, &mut line, false, 0),
            '\'' => {
                if at(i + 1) == '\\' {
                    // An escaped character: to the closing quote.
                    i += 3;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if at(i + 2) == '\'' {
                    i += 3;
                } else {
                    // A lifetime or a label: its name is an identifier.
                    i += 1;
                }
            }
            ':' if at(i + 1) == ':' => {
                out.push((Token::Path, line));
                i += 2;
            }
            '{' => {
                out.push((Token::Open, line));
                i += 1;
            }
            '}' => {
                out.push((Token::Close, line));
                i += 1;
            }
            ',' => {
                out.push((Token::Comma, line));
                i += 1;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                // String and character prefixes: b"", r"", r#""#, br"", c"", b''.
                let raw = matches!(word.as_str(), "r" | "br" | "cr");
                if raw && (at(i) == '"' || at(i) == '#') {
                    let mut hashes = 0;
                    while at(i + hashes) == '#' {
                        hashes += 1;
                    }
                    if at(i + hashes) == '"' {
                        i = skip_string(i + hashes + 1, &mut line, true, hashes);
                        continue;
                    }
                    if word == "r" && hashes == 1 {
                        // A raw identifier, r#name.
                        i += 1;
                        continue;
                    }
                }
                if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                    i = skip_string(i + 1, &mut line, false, 0);
                    continue;
                }
                if word == "b" && at(i) == '\'' {
                    // b'x' or b'\n': the quote is handled as a character's.
                    continue;
                }
                out.push((Token::Ident(word), line));
            }
            c if c.is_ascii_digit() => {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                out.push((Token::Other, line));
                i += 1;
            }
        }
    }
    out
}

/// The top-level modules a file `depth` deep below the crate root names
/// (each name a module may be or not), with the line of each naming.
fn references(text: &str, depth: usize) -> Vec<(String, usize)> {
    let tokens = tokens(text);
    let ident = |i: usize| match tokens.get(i) {
        Some((Token::Ident(word), _)) => Some(word.as_str()),
        _ => None,
    };
    let is = |i: usize, token: Token| tokens.get(i).is_some_and(|(t, _)| *t == token);
    let mut found = Vec::new();
    // The brace depths at which inline `mod name {` blocks opened.
    let (mut braces, mut inline_mods) = (0usize, Vec::new());
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].0 {
            Token::Open => {
                braces += 1;
                if i >= 2 && ident(i - 2) == Some("mod") && ident(i - 1).is_some() {
                    inline_mods.push(braces);
                }
            }
            Token::Close => {
                if inline_mods.last() == Some(&braces) {
                    inline_mods.pop();
                }
                braces = braces.saturating_sub(1);
            }
            _ => {}
        }
        let after_path = i > 0 && is(i - 1, Token::Path);
        // Where a path from the crate root goes on, if one starts at `i`.
        let rest = match ident(i) {
            Some("crate") if !after_path && is(i + 1, Token::Path) => Some(i + 2),
            Some("super") if !after_path => {
                let mut j = i;
                let mut supers = 0;
                while ident(j) == Some("super") && is(j + 1, Token::Path) {
                    supers += 1;
                    j += 2;
                }
                (supers == depth + inline_mods.len()).then_some(j)
            }
            _ => None,
        };
        if let Some(j) = rest {
            if let Some(name) = ident(j) {
                found.push((name.to_owned(), tokens[j].1));
            } else if is(j, Token::Open) {
                // A group: the first name of each item at its top level.
                let mut nesting = 0;
                let mut item_start = true;
                for (token, line) in &tokens[j..] {
                    match token {
                        Token::Open => {
                            nesting += 1;
                            item_start = nesting == 1;
                            continue;
                        }
                        Token::Close => {
                            nesting -= 1;
                            if nesting == 0 {
                                break;
                            }
                        }
                        Token::Comma if nesting == 1 => {
                            item_start = true;
                            continue;
                        }
                        Token::Ident(name) if item_start && nesting == 1 && name != "self" => {
                            found.push((name.clone(), *line));
                        }
                        _ => {}
                    }
                    item_start = false;
                }
            }
        }
        i += 1;
    }
    found
}

/// The workspace's crates, from `cargo metadata`.
fn workspace_crates() -> Result<Vec<PathBuf>> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(crate::common::files::workspace_root().join("Cargo.toml"))
        .no_deps()
        .exec()?;
    Ok(metadata
        .workspace_packages()
        .into_iter()
        .filter_map(|p| p.manifest_path.parent().map(|d| d.as_std_path().to_owned()))
        .collect())
}

/// `path` relative to the current directory where it is below it.
fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's crates read one way: no circle among the top-level
    /// modules of any of them (`cargo xtask layout` prints the order).
    #[test]
    fn the_workspace_reads_one_way() {
        for krate in [
            "cargo-ekstazi",
            "ekstazi-core",
            "ekstazi-runtime",
            "ekstazi-wire",
            "xtask",
        ] {
            let src = crate::common::files::workspace_root()
                .join(krate)
                .join("src");
            assert_eq!(circles(&src).unwrap(), [], "{krate}");
        }
    }

    /// A crate's `src/` with the given files (path, text).
    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn arrows(dir: &tempfile::TempDir) -> Vec<(String, String)> {
        graph(dir.path()).unwrap().arrows.into_keys().collect()
    }

    fn arrow(from: &str, to: &str) -> (String, String) {
        (from.to_owned(), to.to_owned())
    }

    #[test]
    fn a_circle_is_found_with_an_example_per_arrow() {
        let dir = tree(&[
            ("main.rs", "mod a;\nmod b;\nmod c;\nuse crate::a::A;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b/mod.rs", "mod inner;\npub struct B;\n"),
            ("b/inner.rs", "\n\nfn f() -> crate::c::C { todo!() }\n"),
            ("c.rs", "use crate::{a::A, b};\npub struct C;\n"),
        ]);
        let circles = circles(dir.path()).unwrap();
        assert_eq!(circles.len(), 1);
        assert_eq!(circles[0].modules, ["a", "b", "c"]);
        let examples: Vec<(String, String, usize)> = circles[0]
            .arrows
            .iter()
            .map(|r| {
                let file = r.file.strip_prefix(dir.path()).unwrap();
                (
                    format!("{}->{}", r.from, r.to),
                    file.display().to_string(),
                    r.line,
                )
            })
            .collect();
        assert_eq!(
            examples,
            [
                ("a->b".to_owned(), "a.rs".to_owned(), 1),
                ("b->c".to_owned(), "b/inner.rs".to_owned(), 3),
                ("c->a".to_owned(), "c.rs".to_owned(), 1),
                ("c->b".to_owned(), "c.rs".to_owned(), 1),
            ]
        );
    }

    #[test]
    fn a_one_way_graph_passes_in_order() {
        let dir = tree(&[
            ("lib.rs", "pub mod top;\npub mod low;\npub mod mid;\n"),
            ("top.rs", "use crate::mid::M;\nuse crate::low;\n"),
            ("mid/mod.rs", "use crate::low::L;\npub struct M;\n"),
            ("low.rs", "pub struct L;\n"),
        ]);
        assert_eq!(circles(dir.path()).unwrap(), []);
        assert_eq!(graph(dir.path()).unwrap().order(), ["low", "mid", "top"]);
    }

    #[test]
    fn super_inside_a_module_is_no_arrow() {
        let dir = tree(&[
            ("main.rs", "mod x;\nmod y;\n"),
            // `super::y` from x/a.rs is x's own y; `super::super::y` is the root's.
            ("x/mod.rs", "mod a;\nmod y;\n"),
            ("x/a.rs", "use super::y::Y;\nuse super::{y, a};\n"),
            ("x/y.rs", "pub struct Y;\n"),
            (
                "y.rs",
                "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::f;\n    use super::x;\n}\n",
            ),
        ]);
        assert_eq!(arrows(&dir), []);
        let dir = tree(&[
            ("main.rs", "mod x;\nmod y;\n"),
            ("x/mod.rs", "mod a;\n"),
            ("x/a.rs", "use super::super::y::Y;\n"),
            ("y.rs", "mod inner {\n    use super::super::x;\n}\n"),
        ]);
        assert_eq!(arrows(&dir), [arrow("x", "y"), arrow("y", "x")]);
    }

    #[test]
    fn comments_and_strings_are_no_arrows() {
        let dir = tree(&[
            ("main.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                concat!(
                    "//! See [`crate::b::B`].\n",
                    "/// Like [`crate::b`].\n",
                    "// crate::b::B\n",
                    "/* crate::b /* nested */ crate::b */\n",
                    "const S: &str = \"crate::b::B\";\n",
                    "const R: &str = r#\"crate::b \"quoted\"\"#;\n",
                    "const C: char = '\"';\n",
                    "fn f<'a>(x: &'a str) -> &'a str { x } // crate::b\n",
                    "#[doc = \"crate::b\"]\n",
                    "pub struct A;\n",
                ),
            ),
            ("b.rs", "pub struct B;\n"),
        ]);
        assert_eq!(arrows(&dir), []);
        // And what follows them still counts.
        let dir = tree(&[
            ("main.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "const C: char = '\"';\nconst S: &str = \"\\\"\";\nuse crate::b;\n",
            ),
            ("b.rs", "pub struct B;\n"),
        ]);
        let graph = graph(dir.path()).unwrap();
        assert_eq!(graph.arrows[&arrow("a", "b")].line, 3);
    }

    #[test]
    fn names_that_are_no_modules_are_no_arrows() {
        let dir = tree(&[
            ("main.rs", "mod a;\nmod b;\nfn helper() {}\n"),
            (
                "a.rs",
                "use crate::helper;\nuse crate::{self, helper as h};\nuse crate::a::X;\n",
            ),
            ("b.rs", "pub struct B;\n"),
        ]);
        assert_eq!(arrows(&dir), []);
    }
}
