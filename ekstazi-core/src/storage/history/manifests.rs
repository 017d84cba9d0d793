//! A commit's manifest: which record held for each test there, and how it
//! is kept.
//!
//! A manifest lists every test once, with its record's id: 34 bytes a
//! test that do not compress, on coreutils 0.22 MB a commit for 4 900
//! tests. Most tests keep their record from one commit to the next, so a
//! manifest of many tests is kept as what differs from a *base*: every
//! entry of an earlier filing, kept once as a history object and shared by
//! the manifests filed after it until one differs from it in more than
//! half of its entries ([`DRIFT_DIVISOR`]); that one starts a new base.
//! A base is named by its digest and never changes, so filing again under
//! one commit never changes what another commit's manifest reads, and a
//! base travels with the packs (exports, pushes, merges) like any object.
//!
//! ```text
//! commits/<commit>   EKZH: the commit, when filed, every entry (few tests, or older tools)
//!                    EKZL: the commit, when filed, its base's name, the changes over it
//! packs/<digest>     EKZ7: a base: every entry, in order
//! .base              the base the last filing wrote against (a hint for this store only)
//! ```
//!
//! Invariant: nothing read is used before all of it is checked: the seal,
//! the commit it names, its base's seal and name, each entry once and in
//! order, each change once and in order, and a change that removes a test
//! removing one its base lists. Anything else is no manifest: its commit
//! holds no record, and its tests run.

use super::{History, is_commit_id};
use crate::files::sealed;
use crate::model::dep::Hash;
use crate::model::record::Outcome;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::io;
use std::iter::Peekable;

/// A manifest kept whole.
const WHOLE_MAGIC: &[u8; 4] = b"EKZH";
/// A manifest kept as its changes over a base.
const CHANGES_MAGIC: &[u8; 4] = b"EKZL";
/// A base: a history object listing entries.
const BASE_MAGIC: &[u8; 4] = b"EKZ7";

/// A manifest names every test of a workspace once, its binary, its name
/// and a 34-byte record id and outcome (ripgrep's 1 165 tests: 47 KB
/// packed); 32 MiB is a quarter of a million tests of 130 bytes each.
/// Bounded tightly because a state directory handed over as is may hold
/// any number of manifests, each read before its seal is known: at
/// 256 MiB, 16 forged ones of 8 KiB each held 4.19 GB at once. A base is
/// bounded likewise.
pub(super) const MAX_MANIFEST_BYTES: u64 = 32 << 20;

/// A manifest of fewer entries is kept whole: a base would save less than
/// the object it costs.
const MIN_ENTRIES_FOR_BASE: usize = 64;

/// A manifest is kept over the newest base while its changes over it are
/// at most its entries divided by this; past that, over a new base of its
/// own. On coreutils a commit changes ~200 of 4 900 entries, so a base
/// serves several commits; one that reruns everything starts a new base.
/// Over its 21 replayed commits, a half left the history 0.27 MB smaller
/// than a quarter, and 0.62 MB smaller than an eighth (`eval state`).
const DRIFT_DIVISOR: usize = 2;

/// Where the last filing names the base it wrote against.
pub(crate) const BASE_HINT: &str = ".base";

/// Which record held for each test at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The commit id, lowercase hex.
    pub commit: String,
    /// When the newest run at this commit filed it (ms since the epoch).
    pub filed_at_ms: u64,
    /// Sorted by (binary, test), one per test.
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// Its entries, each under its `(binary, test)`.
    pub fn by_test<C: FromIterator<((String, String), Entry)>>(self) -> C {
        self.entries
            .into_iter()
            .map(|e| ((e.binary.clone(), e.test.clone()), e))
            .collect()
    }
}

/// One test at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The test's binary key.
    pub binary: String,
    /// The test's name within its binary.
    pub test: String,
    /// The record's id in the history: its skeleton's name, the digest its
    /// seal ends with (`objects::record_id`).
    pub record: Hash,
    /// That record's outcome (for listings, without reading it).
    pub outcome: Outcome,
    /// The test ran at this commit; else a record made earlier vouched for it.
    pub ran: bool,
}

/// An [`Entry`] decoded in place.
#[derive(Deserialize)]
pub(crate) struct EntryView<'a> {
    #[serde(borrow)]
    pub(crate) binary: &'a str,
    #[serde(borrow)]
    pub(crate) test: &'a str,
    pub(crate) record: Hash,
    pub(crate) outcome: Outcome,
    pub(crate) ran: bool,
}

impl EntryView<'_> {
    pub(crate) fn to_owned(&self) -> Entry {
        Entry {
            binary: self.binary.to_owned(),
            test: self.test.to_owned(),
            record: self.record,
            outcome: self.outcome,
            ran: self.ran,
        }
    }
}

/// What a manifest kept over a base changes in it, for one test: the
/// test's entry now, or none when the test is not listed any more.
#[derive(Serialize, Deserialize)]
struct Change<'a> {
    #[serde(borrow)]
    binary: &'a str,
    #[serde(borrow)]
    test: &'a str,
    now: Option<Held>,
}

/// An entry without its test's name.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    record: Hash,
    outcome: Outcome,
    ran: bool,
}

impl Held {
    fn of(entry: &Entry) -> Held {
        Held {
            record: entry.record,
            outcome: entry.outcome,
            ran: entry.ran,
        }
    }
}

/// Items encoded one after another, as postcard writes a sequence after
/// its length.
#[derive(Clone, Copy)]
struct Encoded<'a> {
    len: usize,
    bytes: &'a [u8],
}

impl<'a> Encoded<'a> {
    const EMPTY: Encoded<'static> = Encoded { len: 0, bytes: &[] };

    /// The items, decoded in turn (they were checked when opened).
    fn items<T: Deserialize<'a>>(self) -> impl Iterator<Item = T> + use<'a, T> {
        let mut rest = self.bytes;
        (0..self.len).map_while(move |_| {
            let (item, after) = postcard::take_from_bytes(rest).ok()?;
            rest = after;
            Some(item)
        })
    }

    /// `len` items of `T` that take all of `bytes`, each after the one
    /// before by `key`: an encoding every read of it can trust.
    fn checked<T: Deserialize<'a>>(
        len: usize,
        bytes: &'a [u8],
        key: impl Fn(&T) -> (&'a str, &'a str),
    ) -> Option<Encoded<'a>> {
        let mut rest = bytes;
        let mut previous: Option<(&str, &str)> = None;
        // Each item takes bytes: a length past them fails as they end.
        for _ in 0..len {
            let (item, after): (T, _) = postcard::take_from_bytes(rest).ok()?;
            let key = key(&item);
            if previous.is_some_and(|p| p >= key) {
                return None;
            }
            previous = Some(key);
            rest = after;
        }
        rest.is_empty().then_some(Encoded { len, bytes })
    }
}

/// A manifest file's contents, its base not read yet.
struct Stored<'a> {
    commit: &'a str,
    filed_at_ms: u64,
    /// The base it is kept over, if any.
    base: Option<Hash>,
    /// Its entries ([`EntryView`]s), or with a base its [`Change`]s.
    own: Encoded<'a>,
}

impl<'a> Stored<'a> {
    /// The manifest filed under `commit`, if it is sealed, names that
    /// commit, and lists its entries or changes once each, in order.
    fn open(unpacked: &'a [u8], commit: &str) -> Option<Stored<'a>> {
        if let Ok(body) = sealed::open_raw(WHOLE_MAGIC, unpacked) {
            // As `Manifest` is serialised: its commit, its date, then its
            // entries (a length and each in turn).
            let ((named, filed_at_ms, len), bytes): ((&str, u64, usize), _) =
                postcard::take_from_bytes(body).ok()?;
            return (named == commit).then_some(Stored {
                commit: named,
                filed_at_ms,
                base: None,
                own: Encoded::checked(len, bytes, |e: &EntryView<'a>| (e.binary, e.test))?,
            });
        }
        let body = sealed::open_raw(CHANGES_MAGIC, unpacked).ok()?;
        let ((named, filed_at_ms, base, len), bytes): ((&str, u64, Hash, usize), _) =
            postcard::take_from_bytes(body).ok()?;
        (named == commit).then_some(Stored {
            commit: named,
            filed_at_ms,
            base: Some(base),
            own: Encoded::checked(len, bytes, |c: &Change<'a>| (c.binary, c.test))?,
        })
    }
}

/// A [`Manifest`] decoded in place, its strings borrowed, its entries
/// decoded as they are iterated ([`ManifestView::entries`]): a view of a
/// manifest of a million entries holds no vector of them.
pub(crate) struct ManifestView<'a> {
    pub(crate) commit: &'a str,
    pub(crate) filed_at_ms: u64,
    /// The base it is kept over, if any (what pruning keeps with it).
    pub(crate) base: Option<Hash>,
    /// Its entries, or with `changes` its base's.
    entries: Encoded<'a>,
    changes: Option<Encoded<'a>>,
}

impl<'a> ManifestView<'a> {
    /// `stored` over its base's sealed bytes (`None` for a manifest kept
    /// whole), if they are the base it names: its entries checked, and
    /// each of its changes that removes a test removing one the base lists.
    fn assemble(stored: Stored<'a>, base: Option<&'a [u8]>) -> Option<ManifestView<'a>> {
        let Some(name) = stored.base else {
            return Some(ManifestView {
                commit: stored.commit,
                filed_at_ms: stored.filed_at_ms,
                base: None,
                entries: stored.own,
                changes: None,
            });
        };
        let base = base.filter(|sealed| sealed::named(sealed, &name))?;
        let entries = base_entries(base)?;
        let view = ManifestView {
            commit: stored.commit,
            filed_at_ms: stored.filed_at_ms,
            base: Some(name),
            entries,
            changes: Some(stored.own),
        };
        // Both in order: one walk over the base finds every removal's test.
        let mut listed = entries.items::<EntryView<'_>>().peekable();
        let removes_listed = stored.own.items::<Change<'_>>().all(|change| {
            let key = (change.binary, change.test);
            change.now.is_some() || {
                while listed.next_if(|e| (e.binary, e.test) < key).is_some() {}
                listed.next_if(|e| (e.binary, e.test) == key).is_some()
            }
        });
        removes_listed.then_some(view)
    }

    /// The manifest, owned.
    pub(crate) fn to_owned(&self) -> Manifest {
        Manifest {
            commit: self.commit.to_owned(),
            filed_at_ms: self.filed_at_ms,
            entries: self.entries().map(|e| e.to_owned()).collect(),
        }
    }

    /// The entries, in order (checked by [`ManifestView::assemble`]).
    pub(crate) fn entries(&self) -> impl Iterator<Item = EntryView<'a>> + use<'a> {
        Merged {
            base: self.entries.items().peekable(),
            changes: self.changes.unwrap_or(Encoded::EMPTY).items().peekable(),
        }
    }
}

/// A base's entries, if its sealed bytes open as a base's.
fn base_entries(sealed: &[u8]) -> Option<Encoded<'_>> {
    let body = sealed::open_raw(BASE_MAGIC, sealed).ok()?;
    let (len, bytes): (usize, _) = postcard::take_from_bytes(body).ok()?;
    Encoded::checked(len, bytes, |e: &EntryView<'_>| (e.binary, e.test))
}

/// A base's entries with a manifest's changes over it, in order.
struct Merged<'a, B: Iterator<Item = EntryView<'a>>, C: Iterator<Item = Change<'a>>> {
    base: Peekable<B>,
    changes: Peekable<C>,
}

impl<'a, B, C> Iterator for Merged<'a, B, C>
where
    B: Iterator<Item = EntryView<'a>>,
    C: Iterator<Item = Change<'a>>,
{
    type Item = EntryView<'a>;

    fn next(&mut self) -> Option<EntryView<'a>> {
        loop {
            let order = match (self.base.peek(), self.changes.peek()) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(e), Some(c)) => (e.binary, e.test).cmp(&(c.binary, c.test)),
            };
            match order {
                Ordering::Less => return self.base.next(),
                Ordering::Equal => {
                    self.base.next();
                }
                Ordering::Greater => {}
            }
            let change = self.changes.next()?;
            if let Some(now) = change.now {
                return Some(EntryView {
                    binary: change.binary,
                    test: change.test,
                    record: now.record,
                    outcome: now.outcome,
                    ran: now.ran,
                });
            }
        }
    }
}

/// What turns `base` into `entries` (both in order): a change for each
/// test whose entry differs or that either lacks.
fn changes<'a>(base: &'a [Entry], entries: &'a [Entry]) -> Vec<Change<'a>> {
    let mut changes = Vec::new();
    let (mut base, mut entries) = (base.iter().peekable(), entries.iter().peekable());
    loop {
        let key = |e: &&'a Entry| (e.binary.as_str(), e.test.as_str());
        let order = match (base.peek(), entries.peek()) {
            (None, None) => return changes,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(was), Some(is)) => key(was).cmp(&key(is)),
        };
        match order {
            Ordering::Less => {
                let was = base.next().expect("peeked");
                changes.push(Change {
                    binary: &was.binary,
                    test: &was.test,
                    now: None,
                });
            }
            Ordering::Equal | Ordering::Greater => {
                let is = entries.next().expect("peeked");
                let same = order == Ordering::Equal
                    && base.next().is_some_and(|was| Held::of(was) == Held::of(is));
                if !same {
                    changes.push(Change {
                        binary: &is.binary,
                        test: &is.test,
                        now: Some(Held::of(is)),
                    });
                }
            }
        }
    }
}

impl History {
    /// Writes a manifest (filing, importing, merging): whole when it lists
    /// few tests, else as its changes over the newest base, or over a new
    /// one when it differs from that in more than half of its entries. The base is written before the manifest that names it.
    pub fn put_manifest(&self, manifest: &Manifest) -> io::Result<()> {
        let sealed = if manifest.entries.len() < MIN_ENTRIES_FOR_BASE {
            whole(manifest)?
        } else {
            self.over_a_base(manifest)?
        };
        self.state.write_atomic(
            &self.commits_dir().join(&manifest.commit),
            &sealed::pack(&sealed),
        )
    }

    /// `manifest` sealed as its changes over a base.
    fn over_a_base(&self, manifest: &Manifest) -> io::Result<Vec<u8>> {
        let newest = self.newest_base();
        let near = newest.as_ref().and_then(|(name, entries)| {
            let changes = changes(entries, &manifest.entries);
            (changes.len() <= manifest.entries.len() / DRIFT_DIVISOR).then_some((*name, changes))
        });
        let (base, changes) = match near {
            Some(near) => near,
            None => (self.put_base(&manifest.entries)?, Vec::new()),
        };
        let body = postcard::to_stdvec(&(&manifest.commit, manifest.filed_at_ms, base, changes))
            .map_err(io::Error::other)?;
        Ok(sealed::seal(CHANGES_MAGIC, &body))
    }

    /// Writes `entries` as a base (unless held already), and names it as
    /// the one the next manifest is written against.
    fn put_base(&self, entries: &[Entry]) -> io::Result<Hash> {
        let body = postcard::to_stdvec(entries).map_err(io::Error::other)?;
        let sealed = sealed::seal(BASE_MAGIC, &body);
        let name = sealed::name_of(&sealed)?;
        {
            let mut guard = self.packs.write().expect("pack index lock");
            let packs = guard.get_or_insert_with(|| self.read_packs());
            if !packs.at.contains_key(&name) {
                self.write_pack(packs, &[(name, sealed::pack(&sealed))])?;
            }
        }
        // Only a hint: lost, the next manifest starts a base of its own.
        let _ = self
            .state
            .write_atomic(&self.dir.join(BASE_HINT), hex::encode(name).as_bytes());
        Ok(name)
    }

    /// The base the last filing wrote against, and its entries, if this
    /// history holds it intact.
    fn newest_base(&self) -> Option<(Hash, Vec<Entry>)> {
        let digits = self
            .state
            .read_bounded(&self.dir.join(BASE_HINT), 64)
            .ok()?;
        let mut name: Hash = [0; 32];
        hex::decode_to_slice(&digits, &mut name).ok()?;
        let mut large = None;
        let sealed = self.base_sealed(&name, &mut large)?;
        let entries = base_entries(&sealed)?
            .items::<EntryView<'_>>()
            .map(|e| e.to_owned())
            .collect();
        Some((name, entries))
    }

    /// The sealed bytes of the base named `name`, if some pack holds them
    /// and they are no larger than a manifest may be. A large one is read
    /// holding [`sealed::one_large_at_a_time`] (taken into `large`), as a
    /// large manifest is.
    fn base_sealed(&self, name: &Hash, large: &mut Option<sealed::Large>) -> Option<Vec<u8>> {
        let packed = self.packed_entry(name, MAX_MANIFEST_BYTES)?;
        if large.is_none() && !sealed::declares_small(&packed) {
            *large = Some(sealed::one_large_at_a_time());
        }
        let unpacked = sealed::unpack_sealed(BASE_MAGIC, &packed, MAX_MANIFEST_BYTES).ok()?;
        sealed::named(&unpacked, name).then_some(unpacked)
    }

    /// The base the manifest filed under `commit` is kept over, if it is
    /// intact and kept over one.
    #[cfg(test)]
    pub(super) fn base_of(&self, commit: &str) -> Option<Hash> {
        self.with_manifest(commit, |view| view.base).flatten()
    }

    /// The manifest of a commit, if filed and intact.
    pub fn manifest(&self, commit: &str) -> Option<Manifest> {
        self.with_manifest(commit, |view| view.to_owned())
    }

    /// `use_` of the manifest filed under `commit`, if it is intact.
    ///
    /// Bounded before anything is trusted: the file, and its base, are
    /// each read up to [`MAX_MANIFEST_BYTES`], and unpacked by
    /// [`sealed::unpack_sealed`] (a small frame at once; any other checked
    /// as a stream, its window, length and seal, before it is unpacked). A
    /// large one, packed or unpacked, is read and used holding
    /// [`sealed::one_large_at_a_time`], so that the threads reading a
    /// history hold at most one between them.
    pub(crate) fn with_manifest<R>(
        &self,
        commit: &str,
        use_: impl FnOnce(ManifestView<'_>) -> R,
    ) -> Option<R> {
        let mut large = None;
        let unpacked = self.unpacked_manifest(commit, &mut large)?;
        let stored = Stored::open(&unpacked, commit)?;
        let base = match &stored.base {
            Some(name) => Some(self.base_sealed(name, &mut large)?),
            None => None,
        };
        let result = use_(ManifestView::assemble(stored, base.as_deref())?);
        drop(large);
        Some(result)
    }

    /// The unpacked bytes of the manifest file of `commit` (unchecked but
    /// bounded), taking [`sealed::one_large_at_a_time`] into `large` when
    /// it is large.
    fn unpacked_manifest(
        &self,
        commit: &str,
        large: &mut Option<sealed::Large>,
    ) -> Option<Vec<u8>> {
        if !is_commit_id(commit) {
            return None;
        }
        let path = self.commits_dir().join(commit);
        let on_disk = self.state.file_len(&path)?;
        if large.is_none() && on_disk > sealed::SMALL {
            *large = Some(sealed::one_large_at_a_time());
        }
        let packed = self.state.read_bounded(&path, MAX_MANIFEST_BYTES).ok()?;
        if large.is_none() && !sealed::declares_small(&packed) {
            *large = Some(sealed::one_large_at_a_time());
        }
        // A large frame is checked as a stream against one magic: the
        // other kind fails at its first bytes.
        sealed::unpack_sealed(WHOLE_MAGIC, &packed, MAX_MANIFEST_BYTES)
            .or_else(|_| sealed::unpack_sealed(CHANGES_MAGIC, &packed, MAX_MANIFEST_BYTES))
            .ok()
    }

    /// Writes a manifest whole, whatever it lists (as an older tool did).
    #[cfg(test)]
    pub(crate) fn put_whole_manifest(&self, manifest: &Manifest) -> io::Result<()> {
        self.state.write_atomic(
            &self.commits_dir().join(&manifest.commit),
            &sealed::pack(&whole(manifest)?),
        )
    }
}

/// `manifest` sealed whole.
fn whole(manifest: &Manifest) -> io::Result<Vec<u8>> {
    let body = postcard::to_stdvec(manifest).map_err(io::Error::other)?;
    Ok(sealed::seal(WHOLE_MAGIC, &body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    fn entry(i: u32, record: u8) -> Entry {
        Entry {
            binary: "pkg::tests".into(),
            test: format!("t{i:04}"),
            record: [record; 32],
            outcome: Outcome::Passed,
            ran: record.is_multiple_of(2),
        }
    }

    fn manifest(commit: &str, at: u64, entries: Vec<Entry>) -> Manifest {
        Manifest {
            commit: commit.into(),
            filed_at_ms: at,
            entries,
        }
    }

    fn on_disk(history: &History, commit: &str) -> u64 {
        fs::metadata(history.commits_dir().join(commit))
            .unwrap()
            .len()
    }

    /// `changes` over `base`, sealed as a manifest of `commit`, written
    /// as it is.
    fn plant(history: &History, commit: &str, base: Hash, changes: &[Change<'_>]) {
        let body = postcard::to_stdvec(&(commit, 1u64, base, changes)).unwrap();
        let sealed = sealed::seal(CHANGES_MAGIC, &body);
        fs::write(history.commits_dir().join(commit), sealed::pack(&sealed)).unwrap();
    }

    #[test]
    fn a_manifest_of_many_tests_is_kept_as_its_changes_over_a_base_shared_until_it_drifts() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let at_a: Vec<Entry> = (0..400).map(|i| entry(i, 1)).collect();
        // B: 10 reran, one test went, one came.
        let mut at_b = at_a.clone();
        for e in &mut at_b[100..110] {
            e.record = [2; 32];
        }
        at_b.remove(7);
        at_b.push(entry(999, 3));
        let (a, b) = (manifest(A, 1, at_a), manifest(B, 2, at_b));
        history.put_manifest(&a).unwrap();
        history.put_manifest(&b).unwrap();
        assert_eq!(history.manifest(A).as_ref(), Some(&a));
        assert_eq!(history.manifest(B).as_ref(), Some(&b));
        let base = history.base_of(A).expect("kept over a base");
        assert_eq!(history.base_of(B), Some(base), "one base for both");
        assert!(
            on_disk(&history, B) < 1_000,
            "12 changes, not 400 entries: {} bytes",
            on_disk(&history, B)
        );
        // C reran everything: past half, it starts a base of its own.
        let c = manifest(C, 3, (0..400).map(|i| entry(i, 4)).collect());
        history.put_manifest(&c).unwrap();
        assert_ne!(history.base_of(C), Some(base));
        assert_eq!(history.manifest(C).as_ref(), Some(&c));
        // Filing A again changes nothing B reads.
        history
            .put_manifest(&manifest(A, 5, (0..300).map(|i| entry(i, 6)).collect()))
            .unwrap();
        assert_eq!(history.manifest(B).as_ref(), Some(&b));
        let candidates = history.candidates(None, &[]);
        assert_eq!(
            candidates
                .of("pkg::tests", "t0105")
                .map(|(id, _)| id[0])
                .collect::<Vec<_>>(),
            [6, 4, 2],
            "every commit's record, newest filed first"
        );
    }

    #[test]
    fn a_manifest_of_few_tests_is_kept_whole_and_a_lost_hint_starts_a_new_base() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let few = manifest(A, 1, (0..3).map(|i| entry(i, 1)).collect());
        history.put_manifest(&few).unwrap();
        assert_eq!(history.base_of(A), None);
        assert_eq!(history.manifest(A).as_ref(), Some(&few));
        let many = manifest(B, 2, (0..100).map(|i| entry(i, 1)).collect());
        history.put_manifest(&many).unwrap();
        let base = history.base_of(B).unwrap();
        fs::write(history.dir().join(BASE_HINT), b"not a digest").unwrap();
        history
            .put_manifest(&manifest(C, 3, many.entries.clone()))
            .unwrap();
        let again = history.base_of(C).unwrap();
        assert_eq!(
            again, base,
            "the same entries: the same base, named by them"
        );
        assert_eq!(history.manifest(C).unwrap().entries, many.entries);
    }

    #[test]
    fn pruning_keeps_the_bases_of_the_kept_manifests_and_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let first: Vec<Entry> = (0..100).map(|i| entry(i, 1)).collect();
        let mut second = first.clone();
        second[0].record = [3; 32];
        history.put_manifest(&manifest(A, 1, first)).unwrap();
        history
            .put_manifest(&manifest(B, 2, second.clone()))
            .unwrap();
        history
            .put_manifest(&manifest(C, 3, (0..100).map(|i| entry(i, 5)).collect()))
            .unwrap();
        let (old, new) = (history.base_of(B).unwrap(), history.base_of(C).unwrap());
        history.prune(2).unwrap();
        assert!(history.manifest(A).is_none());
        assert_eq!(
            history.manifest(B).unwrap().entries,
            second,
            "its base kept"
        );
        history.prune(1).unwrap();
        assert!(history.manifest(C).is_some());
        assert!(
            history.packed_entry(&old, MAX_MANIFEST_BYTES).is_none(),
            "swept"
        );
        assert!(history.packed_entry(&new, MAX_MANIFEST_BYTES).is_some());
    }

    #[test]
    fn changes_that_do_not_hold_over_their_base_are_no_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path());
        let entries: Vec<Entry> = (0..100).map(|i| entry(i, 1)).collect();
        history.put_manifest(&manifest(A, 1, entries)).unwrap();
        let base = history.base_of(A).unwrap();
        let now = Some(Held::of(&entry(0, 2)));
        let change = |test: &'static str, now| Change {
            binary: "pkg::tests",
            test,
            now,
        };
        // Intact changes over the base read, as a check of the planting.
        plant(
            &history,
            B,
            base,
            &[change("t0001", None), change("t0002", now)],
        );
        assert_eq!(history.manifest(B).unwrap().entries.len(), 99);
        // A base no pack holds.
        plant(&history, B, [7; 32], &[change("t0001", now)]);
        assert!(history.manifest(B).is_none());
        // An object of the history that is not this base: a base's seal
        // under another name.
        let other = history.put_base(&[entry(5, 5)]).unwrap();
        let sealed = history.base_sealed(&other, &mut None).unwrap();
        let mut guard = history.packs.write().unwrap();
        let packs = guard.get_or_insert_with(|| history.read_packs());
        history
            .write_pack(packs, &[([9; 32], sealed::pack(&sealed))])
            .unwrap();
        drop(guard);
        plant(&history, B, [9; 32], &[change("t0001", now)]);
        assert!(history.manifest(B).is_none());
        // Removing a test the base does not list.
        plant(&history, B, base, &[change("t9999", None)]);
        assert!(history.manifest(B).is_none());
        // Changes out of order, or twice.
        plant(
            &history,
            B,
            base,
            &[change("t0002", now), change("t0001", now)],
        );
        assert!(history.manifest(B).is_none());
        plant(
            &history,
            B,
            base,
            &[change("t0002", now), change("t0002", None)],
        );
        assert!(history.manifest(B).is_none());
        // Under another commit's name.
        fs::copy(history.commits_dir().join(A), history.commits_dir().join(C)).unwrap();
        assert!(history.manifest(C).is_none());
        assert_eq!(history.manifests().len(), 1);
    }
}
