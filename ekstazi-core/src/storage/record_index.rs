//! The index of a binary's records: per test, what deciding that its
//! record still holds needs, without the executed functions and the
//! ignored accesses that make most of a record's bytes. On a workspace of
//! five thousand tests, reading every record to find that nothing changed
//! read 178 MB; the index of the same records is a few megabytes, and the
//! dependencies the tests share are kept once.
//!
//! An entry stands for the record file it was made from, named by that
//! file's identity ([`Identity`]: device, inode, size, times) and the
//! digest it is sealed with. Invariants:
//! - an entry is used only while the record file has the identity the
//!   entry names; any write of the record (by a run, `merge-state`, an
//!   import) changes it, and the record is then read whole, as before;
//! - an entry is made only from a record read whole, between two looks at
//!   its file that found the same identity, and is kept only when that
//!   identity was settled before the index is written (a record rewritten
//!   within the clock's resolution could otherwise keep the identity an
//!   entry names);
//! - an entry only ever proves that a record holds when all its code is
//!   the very build the test ran ([`Summary::code`]): anything else (a
//!   rebuilt program, a dependency changed) needs the record itself, for
//!   its executed functions or its reasons.

use crate::files::identity::{Identity, settled_before};
use crate::files::sealed::{open, seal};
use crate::model::code_dep::CodeUnit;
use crate::model::dep::{Dep, Hash};
use crate::model::peer::Peer;
use crate::model::record::{Global, Outcome, Record};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 4] = b"EKZX";

/// An index names a binary's tests and the files they read once each: a
/// larger file is not one of ours, and is refused before it is read.
pub const MAX_INDEX_BYTES: u64 = 256 << 20;

/// What a record says that deciding whether it holds needs, when its code
/// is the build the test ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// How the test's run ended.
    pub outcome: Outcome,
    /// The test's wall-clock time, in microseconds.
    pub duration_us: u64,
    /// What every test of the run depended on.
    pub global: Global,
    /// Why the test must run whatever else holds; empty for a fully traced
    /// test.
    pub always: Vec<String>,
    /// What the test reached over sockets that may be another machine.
    pub network: Vec<Peer>,
    /// The record's dependencies, as positions in the index's table.
    deps: Vec<u32>,
    /// Per program whose functions the test executed, the build it ran.
    pub code: Vec<(CodeUnit, Hash)>,
}

impl Summary {
    /// The test's wall-clock time.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration_us)
    }
}

/// One test's entry: its summary, and the record file it stands for.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    test: String,
    file: Identity,
    sealed: Hash,
    summary: Arc<Summary>,
}

/// The index of one binary's records.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Index {
    binary: String,
    /// Every dependency any entry names, once.
    deps: Vec<Dep>,
    entries: Vec<Entry>,
}

/// A test's summary, as an index holds it for its current record file.
#[derive(Clone, Debug)]
pub struct Summarised {
    /// What the record says, as far as deciding needs.
    pub summary: Arc<Summary>,
    /// The digest the record's file is sealed with.
    pub sealed: Hash,
    /// The index's table of dependencies, which the summary names.
    table: Arc<[Dep]>,
}

impl Summarised {
    /// The record's dependencies.
    pub fn deps(&self) -> impl Iterator<Item = &Dep> {
        self.summary.deps.iter().map(|&i| &self.table[i as usize])
    }
}

/// An index read back, by test.
pub struct Loaded {
    table: Arc<[Dep]>,
    entries: HashMap<String, (Identity, Hash, Arc<Summary>)>,
}

impl Loaded {
    /// The summary of `test`'s record, if the index has one for the file
    /// as it is now (`file`: its identity now).
    pub fn fresh(&self, test: &str, file: Option<Identity>) -> Option<Summarised> {
        let (identity, sealed, summary) = self.entries.get(test)?;
        (Some(*identity) == file).then(|| Summarised {
            summary: summary.clone(),
            sealed: *sealed,
            table: self.table.clone(),
        })
    }

    /// The dependencies the index names, once each.
    pub fn table(&self) -> &[Dep] {
        &self.table
    }

    /// How many tests the index has an entry for.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry: its test, its summary, and the identity of the record
    /// file it stands for (to carry it into the next index).
    pub fn into_entries(self) -> impl Iterator<Item = (String, Summarised, Identity)> {
        let table = self.table;
        self.entries
            .into_iter()
            .map(move |(test, (file, sealed, summary))| {
                let summarised = Summarised {
                    summary,
                    sealed,
                    table: table.clone(),
                };
                (test, summarised, file)
            })
    }
}

impl Index {
    /// The binary key whose records this indexes.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// An index of `binary`'s records, kept from `kept` (the entries still
    /// fresh, with their table) and made from `read` (records read whole
    /// with their file's identity and seal). An entry whose file changed
    /// too near `now` is left out, and its record read whole next time.
    pub fn build<'r>(
        binary: &str,
        kept: impl IntoIterator<Item = (String, Summarised, Identity)>,
        read: impl IntoIterator<Item = (Identity, Hash, &'r Record)>,
        now: SystemTime,
    ) -> Index {
        let mut index = Index {
            binary: binary.to_owned(),
            ..Index::default()
        };
        let mut positions: HashMap<Dep, u32> = HashMap::new();
        let mut position = |dep: &Dep, table: &mut Vec<Dep>| -> u32 {
            *positions.entry(dep.clone()).or_insert_with(|| {
                table.push(dep.clone());
                u32::try_from(table.len() - 1).expect("fewer than 4 billion dependencies")
            })
        };
        let settled = |file: &Identity| settled_before(file.changed(), now);
        let mut tests: HashMap<String, Entry> = HashMap::new();
        for (test, summarised, file) in kept {
            if !settled(&file) {
                continue;
            }
            let deps = summarised
                .deps()
                .map(|dep| position(dep, &mut index.deps))
                .collect();
            let summary = Summary {
                deps,
                ..(*summarised.summary).clone()
            };
            tests.insert(
                test.clone(),
                Entry {
                    test,
                    file,
                    sealed: summarised.sealed,
                    summary: Arc::new(summary),
                },
            );
        }
        for (file, sealed, record) in read {
            if record.binary != binary || !settled(&file) {
                continue;
            }
            let summary = Summary {
                outcome: record.outcome,
                duration_us: record.duration_us,
                deps: record
                    .deps
                    .iter()
                    .map(|dep| position(dep, &mut index.deps))
                    .collect(),
                code: record
                    .code
                    .iter()
                    .map(|code| (code.unit.clone(), code.build))
                    .collect(),
                global: record.global.clone(),
                always: record.always.clone(),
                network: record.network.clone(),
            };
            tests.insert(
                record.test.clone(),
                Entry {
                    test: record.test.clone(),
                    file,
                    sealed,
                    summary: Arc::new(summary),
                },
            );
        }
        index.entries = tests.into_values().collect();
        index.entries.sort_by(|a, b| a.test.cmp(&b.test));
        index
    }

    /// Whether the index has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index, sealed, as it is written to its file.
    pub fn encode(&self) -> Vec<u8> {
        seal(
            MAGIC,
            &postcard::to_stdvec(self).expect("an index always serialises"),
        )
    }

    /// An index read back whole and consistent (every position in the
    /// table), for `binary`; `None` otherwise, and every record is read.
    pub fn decode(bytes: &[u8], binary: &str) -> Option<Loaded> {
        let index: Index = open(MAGIC, bytes).ok()?;
        let n = index.deps.len();
        let consistent = index.binary == binary
            && index
                .entries
                .iter()
                .all(|e| e.summary.deps.iter().all(|&i| (i as usize) < n));
        consistent.then(|| Loaded {
            table: index.deps.into(),
            entries: index
                .entries
                .into_iter()
                .map(|e| (e.test, (e.file, e.sealed, e.summary)))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dep::{Sum, Target};
    use crate::model::record::tests_support::sample;

    fn identity_of(dir: &std::path::Path, name: &str, content: &str) -> Identity {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        Identity::of(&path, false).unwrap()
    }

    fn later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(3)
    }

    #[test]
    fn an_entry_serves_only_the_file_it_was_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let file = identity_of(dir.path(), "a", "one");
        let record = sample();
        let index = Index::build(&record.binary, [], [(file, [7; 32], &record)], later());
        let loaded = Index::decode(&index.encode(), &record.binary).unwrap();
        let fresh = loaded.fresh(&record.test, Some(file)).unwrap();
        assert_eq!(fresh.sealed, [7; 32]);
        assert_eq!(fresh.deps().cloned().collect::<Vec<_>>(), record.deps);
        assert_eq!(fresh.summary.outcome, record.outcome);

        let rewritten = identity_of(dir.path(), "a", "two, longer");
        assert!(loaded.fresh(&record.test, Some(rewritten)).is_none());
        assert!(loaded.fresh(&record.test, None).is_none());
        assert!(loaded.fresh("another test", Some(file)).is_none());
        assert!(
            Index::decode(&index.encode(), "another binary").is_none(),
            "bound to its binary"
        );
    }

    #[test]
    fn shared_dependencies_are_kept_once_and_entries_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        let a = identity_of(dir.path(), "a", "a");
        let b = identity_of(dir.path(), "b", "b");
        let first = sample();
        let mut second = sample();
        second.test = "other".into();
        second.deps.push(Dep {
            target: Target::Environment,
            sum: Sum::Absent,
        });
        let index = Index::build(
            &first.binary,
            [],
            [(a, [1; 32], &first), (b, [2; 32], &second)],
            later(),
        );
        assert_eq!(index.deps.len(), second.deps.len());
        let loaded = Index::decode(&index.encode(), &first.binary).unwrap();
        // The next index keeps the first entry as it was, and reads the second anew.
        let kept = loaded.fresh(&first.test, Some(a)).unwrap();
        let again = Index::build(
            &first.binary,
            [(first.test.clone(), kept, a)],
            [(b, [3; 32], &second)],
            later(),
        );
        let loaded = Index::decode(&again.encode(), &first.binary).unwrap();
        assert_eq!(
            loaded
                .fresh(&first.test, Some(a))
                .unwrap()
                .deps()
                .cloned()
                .collect::<Vec<_>>(),
            first.deps
        );
        assert_eq!(loaded.fresh("other", Some(b)).unwrap().sealed, [3; 32]);
    }

    #[test]
    fn a_record_changed_near_the_writing_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let file = identity_of(dir.path(), "a", "one");
        let record = sample();
        let index = Index::build(
            &record.binary,
            [],
            [(file, [7; 32], &record)],
            SystemTime::now(),
        );
        assert!(index.is_empty());
    }

    #[test]
    fn a_damaged_or_inconsistent_index_is_no_index() {
        let dir = tempfile::tempdir().unwrap();
        let file = identity_of(dir.path(), "a", "one");
        let record = sample();
        let mut index = Index::build(&record.binary, [], [(file, [7; 32], &record)], later());
        let mut bytes = index.encode();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        assert!(Index::decode(&bytes, &record.binary).is_none());
        index.deps.clear();
        assert!(
            Index::decode(&index.encode(), &record.binary).is_none(),
            "a position past the table"
        );
    }
}
