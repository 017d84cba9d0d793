//! Why an option or the configuration file cannot be used, as types a
//! caller can match on; each says it in the words a user reads (the same
//! words as before these types: scripts and tests match on them).

use std::fmt;

/// A value given to an option, an `EKSTAZI_*` variable or a key of
/// `.config/ekstazi.toml` that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BadValue {
    /// Not of the kind the option takes.
    #[error("`{value}` is not {expected}")]
    Not {
        /// The value as given.
        value: String,
        /// What the option takes instead.
        expected: Expected,
    },
    /// A number of seconds out of range (negative, or past any use).
    #[error("{0} is not a usable number of seconds")]
    Seconds(f64),
    /// Zero where at least one is needed.
    #[error("must be at least 1")]
    Zero,
    /// A test pattern that is not a glob.
    #[error("`{pattern}`: {why}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// Why it is not a glob, in the glob compiler's words.
        why: String,
    },
}

impl BadValue {
    pub(crate) fn not(value: impl Into<String>, expected: Expected) -> BadValue {
        BadValue::Not {
            value: value.into(),
            expected,
        }
    }
}

/// What an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expected {
    /// `function` or `binary`.
    Granularity,
    /// `always-run` or `select`, for external tests.
    External,
    /// A count of runs or a duration (`[run] full-every`).
    FullEvery,
    /// A boolean.
    Boolean,
    /// A number of seconds.
    Seconds,
    /// A number of jobs, at least 1.
    Jobs,
    /// `hash:M/N` or `count:M/N`.
    Partition,
    /// A number of reruns of a failed test.
    Reruns,
    /// A number of commits to keep, at least 1.
    Commits,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::Granularity => "a granularity (expected `function` or `binary`)",
            Expected::External => {
                "a treatment of external tests (expected `always-run` or `select`)"
            }
            Expected::FullEvery => "a count of runs or a duration such as `12h` or `7d`",
            Expected::Boolean => "a boolean (use 1 or 0)",
            Expected::Seconds => "a number of seconds",
            Expected::Jobs => "a number of jobs (at least 1)",
            Expected::Partition => "a partition (expected hash:M/N or count:M/N, 1 <= M <= N)",
            Expected::Reruns => "a number of reruns",
            Expected::Commits => "a number of commits (at least 1)",
        })
    }
}

/// What is wrong in `.config/ekstazi.toml` (its path is said by
/// [`crate::options::config::ConfigError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BadConfig {
    /// Not TOML, or not the keys and types the file takes.
    #[error("{message}{}", .line.map(|line| format!(" (line {line})")).unwrap_or_default())]
    Syntax {
        /// The TOML reader's message.
        message: String,
        /// The line, from 1, where the problem starts; `None` when the
        /// reader named no place.
        line: Option<usize>,
    },
    /// An ignore pattern that is not a pattern.
    #[error("bad pattern {pattern:?} in {within}: {why}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// The key it was given under (`ignore`, `ignore.env`).
        within: &'static str,
        /// Why it is not a pattern, in the matcher's words.
        why: String,
    },
    /// The ignore patterns, each good, could not be put together.
    #[error("{0}")]
    Patterns(String),
    /// A trusted key that is not a public key `history keygen` prints.
    #[error("[history] trusted-keys: {0}")]
    TrustedKey(#[from] crate::files::signed::KeyError),
    /// A declared service without a port.
    #[error("service {0:?} names no port")]
    ServiceWithoutPort(String),
    /// A declared service's input outside the workspace.
    #[error("service {name:?}: input {input:?} is not a path inside the workspace")]
    InputOutside {
        /// The service's name.
        name: String,
        /// The input as given.
        input: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_says_what_was_given_and_what_was_expected() {
        assert_eq!(
            BadValue::not("2x", Expected::Jobs).to_string(),
            "`2x` is not a number of jobs (at least 1)"
        );
        let syntax = |line| BadConfig::Syntax {
            message: "unknown field".into(),
            line,
        };
        assert_eq!(syntax(Some(3)).to_string(), "unknown field (line 3)");
        assert_eq!(syntax(None).to_string(), "unknown field");
    }
}
