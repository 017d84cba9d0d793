//! The filtersets (`-E`) that tell nextest exactly which tests to run.
//!
//! The selected tests of each binary are one group,
//! `binary_id(=ID) & test(/^(?:NAME|NAME|...)$/)`: each test is named by its
//! binary and its whole, escaped name, never by a pattern. A regular
//! expression, not a union of `test(=NAME)`, because nextest evaluates every
//! leaf of an expression for every test it lists: with a union, 1000
//! selected tests among 5000 cost nextest a second, 5000 of 5000 five
//! seconds; the regex crate matches an alternation of literals at once
//! (5000 of 5000: 0.1 s more than no filter).
//!
//! Limits: one regular expression names at most [`MAX_NAMES`] tests (the
//! regex crate bounds the size of a compiled expression), and one `-E`
//! argument is at most [`MAX_ARG`] bytes (Linux refuses an argument over
//! 128 KiB); more make more `-E`s, which nextest unites. The user's own
//! filtersets, which nextest would unite with ours too, are intersected with
//! each part instead, so they can only narrow the selection.

/// The longest filterset argument made (Linux's `MAX_ARG_STRLEN` is 128 KiB).
pub const MAX_ARG: usize = 96 * 1024;
/// The most test names in one regular expression.
pub const MAX_NAMES: usize = 1000;

/// `text` as the text of an equality matcher (`binary_id(=...)`): nextest's
/// escapes for the characters its parser stops at (`,`, `)`, `\`), for `/`,
/// and for control characters.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ')' => out.push_str("\\)"),
            ',' => out.push_str("\\,"),
            '/' => out.push_str("\\/"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `name` as a literal inside a nextest regex matcher (`test(/.../)`): the
/// regex crate's metacharacters escaped, as `regex::escape` does, then `/`
/// (the matcher's delimiter) as nextest spells it, `\/`.
pub fn regex_literal(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
            | '#' | '&' | '-' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '/' => out.push_str("\\/"),
            c => out.push(c),
        }
    }
    out
}

/// The `-E` arguments naming exactly `tests` (`(binary id, test name)`,
/// sorted by binary), each intersected with the union of the user's
/// filtersets, if any. Empty when `tests` is.
pub fn filtersets(tests: &[(&str, &str)], user: &[String], max_arg: usize) -> Vec<String> {
    let (prefix, suffix) = if user.is_empty() {
        (String::new(), String::new())
    } else {
        let union = user
            .iter()
            .map(|u| format!("({u})"))
            .collect::<Vec<_>>()
            .join(" | ");
        (format!("({union}) & ("), ")".to_owned())
    };
    let budget = max_arg.saturating_sub(prefix.len() + suffix.len());
    let mut groups: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tests.len() {
        let binary = tests[i].0;
        let head = format!("binary_id(={}) & test(/^(?:", escape(binary));
        let tail = ")$/)";
        let mut group = head.clone();
        let mut names = 0;
        while i < tests.len() && tests[i].0 == binary && names < MAX_NAMES {
            let name = regex_literal(tests[i].1);
            if names > 0 && group.len() + 1 + name.len() + tail.len() > budget {
                break;
            }
            if names > 0 {
                group.push('|');
            }
            group.push_str(&name);
            names += 1;
            i += 1;
        }
        group.push_str(tail);
        groups.push(group);
    }
    // Groups joined into arguments of at most `budget` bytes.
    let mut parts: Vec<String> = Vec::new();
    let mut part = String::new();
    for group in groups {
        if !part.is_empty() && part.len() + 3 + group.len() > budget {
            parts.push(std::mem::take(&mut part));
        }
        if !part.is_empty() {
            part.push_str(" | ");
        }
        part.push_str(&group);
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
        .into_iter()
        .map(|part| format!("{prefix}{part}{suffix}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_ids_are_escaped_for_the_equality_matcher() {
        assert_eq!(escape("pkg::it"), "pkg::it");
        assert_eq!(escape("pkg::bin/x"), "pkg::bin\\/x");
        assert_eq!(escape("a,b)c\\d"), "a\\,b\\)c\\\\d");
        assert_eq!(escape("tab\there\n"), "tab\\there\\n");
        assert_eq!(escape("bell\u{7}"), "bell\\u{7}");
    }

    #[test]
    fn names_are_regex_literals() {
        assert_eq!(regex_literal("tests::plain_name"), "tests::plain_name");
        assert_eq!(regex_literal("(whole binary)"), "\\(whole binary\\)");
        assert_eq!(regex_literal("a.b*c?"), "a\\.b\\*c\\?");
        assert_eq!(regex_literal("x/y\\z"), "x\\/y\\\\z");
        assert_eq!(
            regex_literal("case::[1, 2] $x-y"),
            "case::\\[1, 2\\] \\$x\\-y"
        );
        assert_eq!(regex_literal("ünïcode"), "ünïcode");
    }

    #[test]
    fn tests_are_grouped_by_binary() {
        let tests = [("a", "t1"), ("a", "t.2"), ("b::it", "x")];
        assert_eq!(
            filtersets(&tests, &[], MAX_ARG),
            ["binary_id(=a) & test(/^(?:t1|t\\.2)$/) | binary_id(=b::it) & test(/^(?:x)$/)"]
        );
        assert!(filtersets(&[], &[], MAX_ARG).is_empty());
    }

    #[test]
    fn the_user_filtersets_narrow_every_part() {
        let tests = [("a", "t1")];
        let user = ["package(a)".to_owned(), "test(/x/)".to_owned()];
        assert_eq!(
            filtersets(&tests, &user, MAX_ARG),
            ["((package(a)) | (test(/x/))) & (binary_id(=a) & test(/^(?:t1)$/))"]
        );
    }

    #[test]
    fn long_selections_are_split_below_the_limits() {
        let names: Vec<String> = (0..10000).map(|i| format!("module::test_{i:05}")).collect();
        let mut tests: Vec<(&str, &str)> = names.iter().map(|n| ("pkg::it", n.as_str())).collect();
        tests.extend(names.iter().take(10).map(|n| ("tests", n.as_str())));
        for max_arg in [MAX_ARG, 4096] {
            let parts = filtersets(&tests, &[], max_arg);
            assert!(parts.len() > 1);
            for part in &parts {
                assert!(part.len() <= max_arg, "{} bytes", part.len());
                for regex in part.split("test(/").skip(1) {
                    let alternatives = regex.split(")$/)").next().unwrap();
                    assert!(alternatives.matches('|').count() < MAX_NAMES);
                }
            }
            // Every test is named exactly once in its own binary's groups.
            let mut named: std::collections::HashMap<(&str, &str), usize> = Default::default();
            for part in &parts {
                for group in part.split(" | ") {
                    let (binary, regex) = group.split_once(") & test(/^(?:").unwrap();
                    let binary = binary.strip_prefix("binary_id(=").unwrap();
                    for name in regex.strip_suffix(")$/)").unwrap().split('|') {
                        *named.entry((binary, name)).or_default() += 1;
                    }
                }
            }
            assert_eq!(named.len(), tests.len());
            assert!(named.values().all(|&n| n == 1));
            let all = parts.join(" | ");
            assert_eq!(all.matches("binary_id(=tests)").count(), 1);
        }
    }
}
