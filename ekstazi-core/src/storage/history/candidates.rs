//! Which filed records may vouch for a test now ([`Candidates`]): those of
//! `HEAD`, then of its parents, then the newest others, never a failure;
//! and what a vouching record says about where it was filed ([`Vouch`]).

use super::ManifestView;
use crate::model::dep::Hash;
use crate::model::record::Outcome;
use serde::Serialize;
use std::collections::HashMap;

/// Which commit a vouching record was filed under, seen from `HEAD`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Vouch {
    /// The commit id it was filed under.
    pub commit: String,
    /// 1-based: the first parent of `HEAD` is 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
}

impl std::fmt::Display for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = &self.commit[..self.commit.len().min(7)];
        match self.parent {
            Some(n) => write!(f, "as at {short}, parent {n}"),
            None => write!(f, "as at {short}"),
        }
    }
}

/// Per test, the filed records that may vouch for it, in the order they
/// are tried: those filed under `HEAD`, under each parent of `HEAD` in
/// order (so a merge is at least as selective as selecting against each
/// parent and intersecting), then under the other commits, newest first.
/// Only passing records; each object once.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Per test, by [`test_key`]: two tests whose keys collide share a
    /// list, which costs time and never a wrong skip (a filed record
    /// vouches only for the test it is a record of), and no string is
    /// allocated per entry or per lookup.
    by_test: HashMap<u64, Vec<(Hash, usize)>, crate::digests::prehashed::PrehashedState>,
    /// Per manifest position, who filed it.
    vouches: Vec<Vouch>,
}

/// A test's key in [`Candidates`].
pub(super) fn test_key(binary: &str, test: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    binary.hash(&mut hasher);
    test.hash(&mut hasher);
    hasher.finish()
}

/// What one manifest offers: its passing records, by [`test_key`].
pub(super) struct Filed {
    commit: String,
    filed_at_ms: u64,
    passed: Vec<(u64, Hash)>,
}

impl Filed {
    pub(super) fn of(manifest: &ManifestView<'_>) -> Filed {
        Filed {
            commit: manifest.commit.to_owned(),
            filed_at_ms: manifest.filed_at_ms,
            passed: manifest
                .entries()
                .filter(|entry| entry.outcome == Outcome::Passed)
                .map(|entry| (test_key(entry.binary, entry.test), entry.record))
                .collect(),
        }
    }
}

impl Candidates {
    /// From the manifests (any order), `HEAD`'s id and its parents' ids.
    pub(super) fn new(
        mut ordered: Vec<Filed>,
        head: Option<&str>,
        parents: &[String],
    ) -> Candidates {
        let rank = |m: &Filed| {
            if Some(m.commit.as_str()) == head {
                (0, 0)
            } else if let Some(i) = parents.iter().position(|p| *p == m.commit) {
                (1, i)
            } else {
                (2, 0)
            }
        };
        ordered.sort_by_key(|m| std::cmp::Reverse(m.filed_at_ms));
        // Stable: the others keep their newest-first order.
        ordered.sort_by_key(|m| rank(m));
        let mut candidates = Candidates::default();
        for manifest in ordered {
            let parent = parents
                .iter()
                .position(|p| *p == manifest.commit)
                .filter(|_| Some(manifest.commit.as_str()) != head)
                .map(|i| i + 1);
            let position = candidates.vouches.len();
            for (key, record) in manifest.passed {
                let list = candidates.by_test.entry(key).or_default();
                if !list.iter().any(|(id, _)| *id == record) {
                    list.push((record, position));
                }
            }
            candidates.vouches.push(Vouch {
                commit: manifest.commit,
                parent,
            });
        }
        candidates
    }

    /// The records that may vouch for a test, in order, with who filed
    /// them (and, should two tests' keys collide, the other's too).
    pub fn of(&self, binary: &str, test: &str) -> impl Iterator<Item = (&Hash, &Vouch)> {
        self.by_test
            .get(&test_key(binary, test))
            .into_iter()
            .flatten()
            .map(|(id, position)| (id, &self.vouches[*position]))
    }

    /// Whether no test has a record that may vouch.
    pub fn is_empty(&self) -> bool {
        self.by_test.is_empty()
    }
}
