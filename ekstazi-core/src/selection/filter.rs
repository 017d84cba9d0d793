//! Which listed tests a run is about, with libtest's own rules, so that
//! `cargo ekstazi test foo -- --skip bar --exact` means what it means to
//! `cargo test`.

/// What to do with `#[ignore]`d tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunIgnored {
    /// Report them ignored (libtest's default).
    #[default]
    No,
    /// Run them with the others (`--include-ignored`).
    Yes,
    /// Run only them (`--ignored`).
    Only,
}

/// libtest's name filter.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Positional filters: a test matches if it matches any (all tests when empty).
    pub patterns: Vec<String>,
    /// `--skip`: a test matching any is left out.
    pub skip: Vec<String>,
    /// `--exact`: patterns and skips compare whole names instead of substrings.
    pub exact: bool,
    /// What to do with `#[ignore]`d tests (`--ignored`,
    /// `--include-ignored`).
    pub run_ignored: RunIgnored,
}

/// What the filter makes of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// In the run.
    Run,
    /// In the run's scope but `#[ignore]`d: reported, not run.
    Ignored,
    /// Outside the run: not reported, its record untouched.
    Out,
}

impl Filter {
    fn hits(&self, name: &str, pattern: &str) -> bool {
        if self.exact {
            name == pattern
        } else {
            name.contains(pattern)
        }
    }

    /// Whether the name filters (positional and `--skip`) keep a test.
    pub fn keeps(&self, name: &str) -> bool {
        (self.patterns.is_empty() || self.patterns.iter().any(|p| self.hits(name, p)))
            && !self.skip.iter().any(|s| self.hits(name, s))
    }

    /// The fate of a test with this name and ignore attribute.
    pub fn decide(&self, name: &str, ignored: bool) -> Decision {
        if !self.keeps(name) {
            return Decision::Out;
        }
        match (self.run_ignored, ignored) {
            (RunIgnored::Only, false) => Decision::Out,
            (RunIgnored::No, true) => Decision::Ignored,
            _ => Decision::Run,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_exact_and_skip_follow_libtest() {
        let f = Filter {
            patterns: vec!["foo".into(), "bar".into()],
            skip: vec!["slow".into()],
            ..Filter::default()
        };
        assert!(f.keeps("a::foo_works"));
        assert!(f.keeps("bar"));
        assert!(!f.keeps("baz"));
        assert!(!f.keeps("foo_slow"));
        let exact = Filter {
            patterns: vec!["foo".into()],
            exact: true,
            ..Filter::default()
        };
        assert!(exact.keeps("foo"));
        assert!(!exact.keeps("a::foo"));
        assert!(Filter::default().keeps("anything"));
    }

    #[test]
    fn ignored_tests_follow_the_run_ignored_mode() {
        let mut f = Filter::default();
        assert_eq!(f.decide("t", true), Decision::Ignored);
        assert_eq!(f.decide("t", false), Decision::Run);
        f.run_ignored = RunIgnored::Only;
        assert_eq!(f.decide("t", true), Decision::Run);
        assert_eq!(f.decide("t", false), Decision::Out);
        f.run_ignored = RunIgnored::Yes;
        assert_eq!(f.decide("t", true), Decision::Run);
    }
}
