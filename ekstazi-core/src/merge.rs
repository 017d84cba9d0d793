//! Merging the state directories of the shards of a partitioned CI run.
//!
//! Each shard starts from the same state, runs its share of the affected
//! tests and records them; the tests it did not run keep their records (or
//! have them re-expressed against the new build, identically in every
//! shard). So the merge takes, per test, the record of the newest run, and
//! the union of the function fingerprints. Every record is decoded and
//! checked before it is copied: a damaged one is left behind (its test runs
//! next time), never copied over a good one.

use crate::store::{Loaded, Store};
use std::io;

/// What merging one shard did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Records of tests the destination had no record of.
    pub added: usize,
    /// Records newer than the destination's.
    pub replaced: usize,
    /// Records the destination already had (or had newer).
    pub kept: usize,
    /// Function fingerprint snapshots copied.
    pub snapshots: usize,
    /// Files not copied, and why.
    pub refused: Vec<String>,
}

/// Merges the records and snapshots of `source` into `dest`.
pub fn merge(dest: &Store, source: &Store) -> io::Result<Merged> {
    let mut merged = Merged::default();
    for (path, record) in source.records()? {
        let record = match record {
            Ok(record) => record,
            Err(e) => {
                merged.refused.push(format!("{}: {e}", path.display()));
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
    let present: std::collections::HashSet<_> = dest.snapshot_ids()?.into_iter().collect();
    for id in source.snapshot_ids()? {
        if present.contains(&id) {
            continue;
        }
        match source.load_snapshot(&id) {
            Some(snapshot) => {
                dest.save_snapshot(&id, &snapshot)?;
                merged.snapshots += 1;
            }
            None => merged.refused.push(format!(
                "function fingerprints {} are damaged",
                blake3::Hash::from_bytes(id).to_hex()
            )),
        }
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests_support::sample;

    #[test]
    fn the_newest_record_of_each_test_wins_and_damage_is_left_behind() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let (dest, source) = (Store::new(dirs[0].path()), Store::new(dirs[1].path()));
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
        // Merging again changes nothing.
        let again = merge(&dest, &source).unwrap();
        assert_eq!((again.added, again.replaced), (0, 0));
    }
}
