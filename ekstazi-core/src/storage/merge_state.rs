//! Merging the state directories of the shards of a partitioned CI run.
//!
//! Each shard starts from the same state, runs its share of the affected
//! tests and records them; the tests it did not run keep their records (or
//! have them re-expressed against the new build, identically in every
//! shard). So the merge takes, per test, the record of the newest run, and
//! the union of the function fingerprints. Every record is decoded and
//! checked before it is copied: a damaged one is left behind (its test runs
//! next time), never copied over a good one.
//!
//! The newest wins, so a date is a claim to check: a record or a commit's
//! manifest dated later than now (beyond [`CLOCK_SKEW_MS`]) is left behind
//! too. Taken, a forged date would win every later merge and import, and
//! push the real history out of its budget.

use crate::digests::functions::FunctionTable;
use crate::model::record::Record;
use crate::storage::history::{Entry, History, Manifest, ManifestView};
use crate::storage::store::{Loaded, Store};
use std::collections::{BTreeMap, HashSet};
use std::io;

/// How far ahead of this machine's clock another machine's may be: a
/// record or manifest dated further ahead is not taken.
pub const CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;

/// What merging one shard did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Records of tests the destination had no record of.
    pub added: usize,
    /// Records newer than the destination's.
    pub replaced: usize,
    /// Records the destination already had (or had newer).
    pub kept: usize,
    /// Functions the destination's table did not know.
    pub functions: usize,
    /// Commits whose filed records were added to the destination's history.
    pub commits: usize,
    /// Files not copied, and why: by kind.
    pub refused: Refused,
}

/// What was not taken, summarised: per kind, how many and the first of
/// them. A forged manifest of five million entries whose records are all
/// missing is one line, not five million (20 000 002 warning lines, before).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refused {
    kinds: Vec<(Refusal, usize, String)>,
}

/// The kinds of [`Refused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Two function tables give one function id two meanings.
    FunctionsDisagree,
    /// A current record that does not decode.
    Damaged,
    /// A current record dated later than this machine's clock allows.
    RecordInTheFuture,
    /// A commit's manifest that does not open (damaged, too large, sealed
    /// without the key).
    ManifestDamaged,
    /// A commit's manifest dated later than the clock allows.
    ManifestInTheFuture,
    /// A filed record the manifest names that is missing or damaged.
    FiledMissing,
    /// A filed record dated later than the clock allows.
    FiledInTheFuture,
    /// A filed record that is another test's.
    FiledOfAnother,
    /// An uninstrumented table named and missing or damaged.
    TableMissing,
}

impl Refused {
    /// Counts one refusal of `kind`, `why` kept if it is the first.
    pub fn push(&mut self, kind: Refusal, why: impl FnOnce() -> String) {
        match self.kinds.iter_mut().find(|(k, ..)| *k == kind) {
            Some((_, count, _)) => *count += 1,
            None => self.kinds.push((kind, 1, why())),
        }
    }

    /// How many were refused, of every kind.
    pub fn len(&self) -> usize {
        self.kinds.iter().map(|(_, count, _)| count).sum()
    }

    /// Whether nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// How many of `kind`.
    pub fn count(&self, kind: Refusal) -> usize {
        self.kinds
            .iter()
            .find(|(k, ..)| *k == kind)
            .map_or(0, |(_, count, _)| *count)
    }

    /// One line per kind: the first refused, and how many more like it.
    pub fn lines(&self) -> Vec<String> {
        self.kinds
            .iter()
            .map(|(_, count, first)| match count {
                1 => first.clone(),
                n => format!("{first}; and {} more like it", n - 1),
            })
            .collect()
    }
}

/// Merges the records and function tables of `source` into `dest`.
pub fn merge(dest: &Store, source: &Store) -> io::Result<Merged> {
    merge_parts(dest, source, true)
}

/// Merges only what `source` filed per commit (its history, and the
/// functions and tables those records name) into `dest`, leaving `dest`'s
/// current records as they are: a run at another commit (`bisect`'s) must
/// not become the current state.
pub fn merge_filed(dest: &Store, source: &Store) -> io::Result<Merged> {
    merge_parts(dest, source, false)
}

fn merge_parts(dest: &Store, source: &Store, current: bool) -> io::Result<Merged> {
    merge_parts_at(dest, source, current, crate::model::record::now_ms())
}

/// Why a date is not taken, if it is later than `now_ms` allows.
fn in_the_future(at_ms: u64, now_ms: u64) -> Option<String> {
    (at_ms > now_ms.saturating_add(CLOCK_SKEW_MS)).then(|| {
        format!(
            "dated {} s after this machine's clock",
            (at_ms - now_ms) / 1000
        )
    })
}

fn merge_parts_at(dest: &Store, source: &Store, current: bool, now_ms: u64) -> io::Result<Merged> {
    let mut merged = Merged::default();
    // The table first: a record is never written before the functions it names.
    let ours = FunctionTable::load(&dest.functions_dir());
    let theirs = FunctionTable::load(&source.functions_dir());
    let before = ours.len().0;
    for id in ours.absorb(&theirs) {
        merged.refused.push(Refusal::FunctionsDisagree, || {
            format!(
                "the function tables disagree on {}: the tests that executed it run",
                id.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        });
    }
    merged.functions = ours.len().0 - before;
    ours.flush()?;
    let mut tables = HashSet::new();
    let records = if current {
        source.records()?
    } else {
        Vec::new()
    };
    for (path, record) in records {
        let record = match record {
            Ok(record) => match in_the_future(record.recorded_at_ms, now_ms) {
                Some(why) => {
                    merged.refused.push(Refusal::RecordInTheFuture, || {
                        format!(
                            "the record of {} {} is {why}: not taken, the test runs",
                            record.binary, record.test
                        )
                    });
                    continue;
                }
                None => {
                    tables.extend(record.code.iter().map(|c| c.uninstrumented));
                    record
                }
            },
            Err(e) => {
                merged
                    .refused
                    .push(Refusal::Damaged, || format!("{}: {e}", path.display()));
                continue;
            }
        };
        match dest.load(&record.binary, &record.test) {
            Loaded::Found(ours)
                if *ours == record || ours.recorded_at_ms >= record.recorded_at_ms =>
            {
                merged.kept += 1;
            }
            Loaded::Found(_) => {
                dest.save(&record)?;
                merged.replaced += 1;
            }
            // A damaged record in the destination is no better than none.
            Loaded::Missing | Loaded::Invalid(_) => {
                dest.save(&record)?;
                merged.added += 1;
            }
        }
    }
    merge_history(dest, source, now_ms, &mut merged, &mut tables)?;
    for id in tables {
        if dest.load_uninstrumented(&id).is_some() {
            continue;
        }
        match source.load_uninstrumented(&id) {
            Some(table) => dest.save_uninstrumented(&id, &table)?,
            None => merged.refused.push(Refusal::TableMissing, || {
                format!(
                    "uninstrumented functions {} are missing or damaged: the tests that name them run",
                    blake3::Hash::from_bytes(id).to_hex()
                )
            }),
        }
    }
    Ok(merged)
}

/// Adds the source's filed records to the destination's history: per
/// commit, the union of the tests filed (where both filed a test, a record
/// of a run at that commit wins over one that vouched, else the
/// destination's stays). Every object is checked before it is copied; an
/// entry whose object is missing or damaged is left behind.
///
/// One commit at a time, its manifest read in place (never every
/// manifest at once, nor a manifest's entries as owned strings), and its
/// records written a [`BATCH`] at a time: what a merge holds is bounded by
/// one manifest, whatever the source holds.
fn merge_history(
    dest: &Store,
    source: &Store,
    now_ms: u64,
    merged: &mut Merged,
    tables: &mut HashSet<crate::model::dep::Hash>,
) -> io::Result<()> {
    let (ours, theirs) = (dest.history(), source.history());
    for commit in theirs.commit_ids() {
        let done = theirs.with_manifest(&commit, |manifest| {
            let filed_before = ours.manifest(&commit);
            merge_commit(
                &ours,
                &theirs,
                manifest,
                filed_before,
                now_ms,
                merged,
                tables,
            )
        });
        match done {
            Some(done) => done?,
            None => merged.refused.push(Refusal::ManifestDamaged, || {
                format!("the records filed at {commit} are damaged or larger than any: not taken")
            }),
        }
    }
    Ok(())
}

/// How many records a merge cuts and writes at once (a pack each).
const BATCH: usize = 1024;

/// [`merge_history`] of one commit, given what the destination filed
/// under it.
fn merge_commit(
    ours: &History,
    theirs: &History,
    manifest: ManifestView<'_>,
    filed_before: Option<Manifest>,
    now_ms: u64,
    merged: &mut Merged,
    tables: &mut HashSet<crate::model::dep::Hash>,
) -> io::Result<()> {
    let commit = manifest.commit;
    if let Some(why) = in_the_future(manifest.filed_at_ms, now_ms) {
        merged.refused.push(Refusal::ManifestInTheFuture, || {
            format!("the records filed at {commit} are {why}: not taken")
        });
        return Ok(());
    }
    let ours_filed_at = filed_before.as_ref().map(|m| m.filed_at_ms);
    let mut entries: BTreeMap<(String, String), Entry> =
        filed_before.map(Manifest::by_test).unwrap_or_default();
    let mut batch: Vec<(Entry, Record)> = Vec::new();
    let mut taken = false;
    for entry in manifest.entries() {
        let key = (entry.binary.to_owned(), entry.test.to_owned());
        if entries.get(&key).is_some_and(|e| e.ran || !entry.ran) {
            continue;
        }
        let Some(record) = theirs.object(&entry.record) else {
            merged.refused.push(Refusal::FiledMissing, || {
                format!(
                    "the record of {} {} filed at {commit} is missing or damaged",
                    entry.binary, entry.test
                )
            });
            continue;
        };
        if let Some(why) = in_the_future(record.recorded_at_ms, now_ms) {
            merged.refused.push(Refusal::FiledInTheFuture, || {
                format!(
                    "the record of {} {} filed at {commit} is {why}: not taken",
                    entry.binary, entry.test
                )
            });
            continue;
        }
        if record.binary != entry.binary || record.test != entry.test {
            merged.refused.push(Refusal::FiledOfAnother, || {
                format!(
                    "the record of {} {} filed at {commit} is not that test's",
                    entry.binary, entry.test
                )
            });
            continue;
        }
        tables.extend(record.code.iter().map(|c| c.uninstrumented));
        batch.push((entry.to_owned(), record));
        if batch.len() == BATCH {
            put_batch(ours, &mut batch, &mut entries)?;
            taken = true;
        }
    }
    if !batch.is_empty() {
        put_batch(ours, &mut batch, &mut entries)?;
        taken = true;
    }
    if taken {
        let filed_at_ms =
            ours_filed_at.map_or(manifest.filed_at_ms, |at| at.max(manifest.filed_at_ms));
        // A map by (binary, test): in the order a manifest lists them.
        ours.put_manifest(&Manifest {
            commit: commit.to_owned(),
            filed_at_ms,
            entries: entries.into_values().collect(),
        })?;
        merged.commits += 1;
    }
    Ok(())
}

/// Writes a batch of records (their objects, before the manifest that
/// names them), each entry then naming its record as cut here, should
/// the source have cut it otherwise.
fn put_batch(
    ours: &History,
    batch: &mut Vec<(Entry, Record)>,
    entries: &mut BTreeMap<(String, String), Entry>,
) -> io::Result<()> {
    let records: Vec<&Record> = batch.iter().map(|(_, record)| record).collect();
    let ids = ours.put_records(&records)?;
    for ((mut entry, _), id) in batch.drain(..).zip(ids) {
        entry.record = id;
        entries.insert((entry.binary.clone(), entry.test.clone()), entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::tests_support::sample;

    #[test]
    fn a_record_dated_in_the_future_is_not_taken() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (dest, source) = (Store::new(dirs[0].path()), Store::new(dirs[1].path()));
        let now = 1_800_000_000_000;
        // No code: the tables the sample names are not what is tested.
        let mut ours = sample();
        ours.code.clear();
        ours.recorded_at_ms = now - 1000;
        let mut forged = ours.clone();
        forged.recorded_at_ms = u64::MAX;
        forged.deps.clear();
        let mut skewed = ours.clone();
        skewed.test = "skewed".into();
        // Within the skew allowed: taken.
        skewed.recorded_at_ms = now + CLOCK_SKEW_MS;
        dest.save(&ours).unwrap();
        source.save(&forged).unwrap();
        source.save(&skewed).unwrap();

        let merged = merge_parts_at(&dest, &source, true, now).unwrap();
        assert_eq!((merged.added, merged.replaced, merged.kept), (1, 0, 0));
        assert_eq!(merged.refused.len(), 1, "{:?}", merged.refused);
        assert!(merged.refused.lines()[0].contains("after this machine's clock"));
        match dest.load(&ours.binary, &ours.test) {
            Loaded::Found(r) => assert_eq!(*r, ours),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_newest_record_of_each_test_wins_and_damage_is_left_behind() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (dest, source) = (Store::new(dirs[0].path()), Store::new(dirs[1].path()));
        // What the records name: a function and an uninstrumented table,
        // which only the source has.
        let table = crate::digests::program::Uninstrumented {
            names: vec!["memcpy".into()],
            fps: vec![[1; 16]],
        };
        source.save_uninstrumented(&table.digest(), &table).unwrap();
        let function = FunctionTable::load(&source.functions_dir());
        let id = function.intern("f", 2, &[2; 16]).unwrap();
        function.flush().unwrap();
        let mut base = sample();
        base.code[0].uninstrumented = table.digest();
        base.code[0].functions = vec![id];
        let sample = || base.clone();
        let mut old = sample();
        old.recorded_at_ms = 10;
        let mut new = old.clone();
        new.recorded_at_ms = 20;
        new.duration_us += 1;
        let mut other = sample();
        other.test = "other".into();
        let mut stale = other.clone();
        stale.recorded_at_ms = 5;
        other.recorded_at_ms = 30;

        dest.save(&old).unwrap();
        dest.save(&other).unwrap();
        source.save(&new).unwrap();
        source.save(&stale).unwrap();
        let mut third = sample();
        third.test = "third".into();
        source.save(&third).unwrap();
        let damaged = source.record_path(&third.binary, "damaged");
        std::fs::write(&damaged, b"EKZR garbage").unwrap();

        let merged = merge(&dest, &source).unwrap();
        assert_eq!((merged.added, merged.replaced, merged.kept), (1, 1, 1));
        assert_eq!(merged.refused.len(), 1, "{:?}", merged.refused);
        let load = |test: &str| match dest.load(&old.binary, test) {
            Loaded::Found(r) => *r,
            other => panic!("{other:?}"),
        };
        assert_eq!(load(&old.test), new);
        assert_eq!(load("other"), other);
        assert_eq!(load("third"), third);
        assert!(matches!(dest.load(&old.binary, "damaged"), Loaded::Missing));
        assert_eq!(merged.functions, 1);
        assert_eq!(
            &*FunctionTable::load(&dest.functions_dir())
                .get(&id)
                .unwrap()
                .name,
            "f"
        );
        assert_eq!(dest.load_uninstrumented(&table.digest()), Some(table));
        // Merging again changes nothing.
        let again = merge(&dest, &source).unwrap();
        assert_eq!((again.added, again.replaced), (0, 0));
    }

    #[test]
    fn refusals_are_summarised_one_line_per_kind() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (dest, source) = (Store::new(dirs[0].path()), Store::new(dirs[1].path()));
        let mut record = sample();
        record.code.clear();
        // Two commits naming 3 000 records the source does not hold, and
        // one the source does: it alone is taken.
        let [id] = source.history().put_records(&[&record]).unwrap()[..] else {
            unreachable!()
        };
        let missing = |commit: &str, n: u32| Manifest {
            commit: commit.into(),
            filed_at_ms: 1,
            entries: (0..n)
                .map(|i| Entry {
                    binary: "b".into(),
                    test: format!("t{i:05}"),
                    record: [7; 32],
                    outcome: crate::model::record::Outcome::Passed,
                    ran: true,
                })
                .collect(),
        };
        let a = "a".repeat(40);
        let mut with_one = missing(&a, 2000);
        with_one.entries.insert(
            0,
            Entry {
                binary: record.binary.clone(),
                test: record.test.clone(),
                record: id,
                outcome: record.outcome,
                ran: true,
            },
        );
        with_one
            .entries
            .sort_by(|x, y| (&x.binary, &x.test).cmp(&(&y.binary, &y.test)));
        source.history().put_manifest(&with_one).unwrap();
        source
            .history()
            .put_manifest(&missing(&"b".repeat(40), 1000))
            .unwrap();
        // And two manifests that do not open.
        let history_dir = source.history().dir().join("commits");
        std::fs::write(history_dir.join("c".repeat(40)), b"garbage").unwrap();
        std::fs::write(history_dir.join("d".repeat(40)), b"more garbage").unwrap();
        let merged = merge_parts_at(&dest, &source, false, 1_800_000_000_000).unwrap();
        assert_eq!(merged.commits, 1);
        assert_eq!(merged.refused.count(Refusal::FiledMissing), 3000);
        assert_eq!(merged.refused.count(Refusal::ManifestDamaged), 2);
        let lines = merged.refused.lines();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines.iter().any(|l| l.ends_with("and 2999 more like it")),
            "{lines:#?}"
        );
        assert!(
            lines.iter().any(|l| l.ends_with("and 1 more like it")),
            "{lines:#?}"
        );
        let filed = dest.history().manifest(&a).unwrap();
        assert_eq!(filed.entries.len(), 1);
        assert_eq!(
            dest.history().object(&filed.entries[0].record),
            Some(record)
        );
    }

    #[test]
    fn large_manifests_on_both_sides_merge() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (dest, source) = (Store::new(dirs[0].path()), Store::new(dirs[1].path()));
        // 40 000 entries: over a MiB on each side, each read holding the
        // one large manifest at a time, the destination's inside the
        // source's.
        let large = |test: &str| Manifest {
            commit: "a".repeat(40),
            filed_at_ms: 1,
            entries: (0..40_000u32)
                .map(|i| Entry {
                    binary: "b".into(),
                    test: format!("{test}{i:05}"),
                    record: *blake3::hash(&i.to_le_bytes()).as_bytes(),
                    outcome: crate::model::record::Outcome::Passed,
                    ran: true,
                })
                .collect(),
        };
        dest.history().put_manifest(&large("ours")).unwrap();
        source.history().put_manifest(&large("theirs")).unwrap();
        let merged = merge_parts_at(&dest, &source, false, 1_800_000_000_000).unwrap();
        assert_eq!(merged.refused.count(Refusal::FiledMissing), 40_000);
        assert_eq!(
            dest.history().manifest(&"a".repeat(40)),
            Some(large("ours"))
        );
    }
}
