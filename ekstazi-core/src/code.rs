//! Code dependencies at function granularity: which functions of which
//! program a test executed, and whether any of them changed.
//!
//! A record keeps, per program, the id of the [`Snapshot`] of that program
//! when the test ran (its smart checksum) and the indices of the executed
//! functions in it. Selection compares the old snapshot's fingerprints of
//! those functions with the present ones, by name. Snapshots live in the
//! store, shared by every record that refers to them.

use crate::dep::Hash;
use crate::fingerprint::{self, FingerprintError, Snapshot};
use crate::path::StoredPath;
use crate::trace::CoverageEvent;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Whose code.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CodeUnit {
    /// The test binary itself.
    TestBinary,
    /// A program the test ran.
    Program(StoredPath),
}

impl fmt::Display for CodeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeUnit::TestBinary => f.write_str("test binary"),
            CodeUnit::Program(path) => path.fmt(f),
        }
    }
}

/// The functions a test executed in one program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeDep {
    pub unit: CodeUnit,
    /// The snapshot of the program when the test ran (its smart checksum).
    pub snapshot: Hash,
    /// Indices into that snapshot's functions, ascending.
    pub functions: Vec<u32>,
}

/// What a test's processes reported about their code, per program.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Programs whose every process reported its coverage, with the entry
    /// addresses of the functions executed.
    pub complete: BTreeMap<PathBuf, BTreeSet<u32>>,
    /// Programs with a process that ended without reporting (killed, or
    /// replaced by `exec` before it could): their code is depended on whole.
    pub incomplete: BTreeSet<PathBuf>,
}

/// Groups a trace's coverage events by program.
pub fn coverage(events: &[CoverageEvent]) -> Coverage {
    // One session per process image: a pid can run several programs in turn
    // (`exec`), and a session left open never reported.
    let mut sessions: Vec<(u32, &PathBuf, bool)> = Vec::new();
    let mut functions: BTreeMap<PathBuf, BTreeSet<u32>> = BTreeMap::new();
    for event in events {
        match event {
            CoverageEvent::Instrumented { pid, program } => sessions.push((*pid, program, false)),
            CoverageEvent::Functions {
                program, entries, ..
            } => {
                functions
                    .entry(program.clone())
                    .or_default()
                    .extend(entries);
            }
            CoverageEvent::Complete { pid } => {
                if let Some(session) = sessions
                    .iter_mut()
                    .rev()
                    .find(|(p, _, done)| p == pid && !done)
                {
                    session.2 = true;
                }
            }
        }
    }
    let incomplete: BTreeSet<PathBuf> = sessions
        .iter()
        .filter(|(_, _, done)| !done)
        .map(|(_, program, _)| (*program).clone())
        .collect();
    let mut complete: BTreeMap<PathBuf, BTreeSet<u32>> = BTreeMap::new();
    for (_, program, _) in &sessions {
        if !incomplete.contains(*program) {
            // A program that ran no instrumented function still has
            // complete, empty, coverage.
            complete.entry((*program).clone()).or_default();
        }
    }
    for (program, entries) in functions {
        if let Some(known) = complete.get_mut(&program) {
            known.extend(entries);
        }
    }
    Coverage {
        complete,
        incomplete,
    }
}

/// How the functions of one snapshot of a program correspond to another's.
/// Every test of a binary compares the same two builds, so each function's
/// counterpart (a name lookup, and after a version bump a demangling) and
/// the uninstrumented changes are worked out once per pair, not per test.
pub struct Correspondence {
    old: Arc<Snapshot>,
    new: Arc<Snapshot>,
    counterparts: Vec<OnceLock<Option<u32>>>,
    uninstrumented: OnceLock<Vec<String>>,
}

/// What became of a function of the old snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Same(u32),
    Changed,
    Removed,
}

impl Correspondence {
    pub fn new(old: Arc<Snapshot>, new: Arc<Snapshot>) -> Correspondence {
        Correspondence {
            counterparts: (0..old.names.len()).map(|_| OnceLock::new()).collect(),
            uninstrumented: OnceLock::new(),
            old,
            new,
        }
    }

    /// `None` when `index` is not a function of the old snapshot.
    fn fate(&self, index: u32) -> Option<Fate> {
        let i = index as usize;
        let fp = self.old.fps.get(i)?;
        let counterpart = *self.counterparts.get(i)?.get_or_init(|| {
            self.new
                .counterpart(&self.old.names[i], fp)
                .map(|j| j as u32)
        });
        Some(match counterpart {
            None => Fate::Removed,
            Some(j) if self.new.fps[j as usize] != *fp => Fate::Changed,
            Some(j) => Fate::Same(j),
        })
    }

    /// The uninstrumented functions whose fingerprints differ, demangled
    /// (at most [`NAMED_CHANGES`] of them).
    fn uninstrumented_changes(&self) -> &[String] {
        self.uninstrumented.get_or_init(|| {
            self.old
                .uninstrumented_changes(&self.new)
                .into_iter()
                .take(NAMED_CHANGES)
                .map(fingerprint::demangle)
                .collect()
        })
    }
}

/// At most this many changed functions are named per program.
const NAMED_CHANGES: usize = 10;

/// Why a code dependency no longer holds, given how the snapshot it was
/// recorded against corresponds to the present one; empty when every
/// executed function is the same.
pub fn changes(dep: &CodeDep, between: &Correspondence) -> Vec<String> {
    let place = match &dep.unit {
        CodeUnit::TestBinary => String::new(),
        unit => format!(" (in {unit})"),
    };
    let mut reasons: Vec<String> = between
        .uninstrumented_changes()
        .iter()
        .map(|name| format!("uninstrumented function changed: {name}{place}"))
        .collect();
    let mut changed = 0;
    for &index in &dep.functions {
        let verdict = match between.fate(index) {
            None => {
                reasons.push(format!("code record does not match its snapshot{place}"));
                return reasons;
            }
            Some(Fate::Same(_)) => continue,
            Some(Fate::Changed) => "function changed",
            Some(Fate::Removed) => "function removed",
        };
        changed += 1;
        if changed <= NAMED_CHANGES {
            let name = &between.old.names[index as usize];
            reasons.push(format!("{verdict}: {}{place}", fingerprint::demangle(name)));
        }
    }
    if changed > NAMED_CHANGES {
        reasons.push(format!(
            "{} more functions changed{place}",
            changed - NAMED_CHANGES
        ));
    }
    reasons
}

/// The same dependency expressed against the other snapshot of the program
/// (for a test that stayed unaffected by a rebuild), or `None` if one of its
/// functions is gone or changed.
pub fn translate(dep: &CodeDep, between: &Correspondence, new_id: Hash) -> Option<CodeDep> {
    let mut functions = dep
        .functions
        .iter()
        .map(|&i| match between.fate(i)? {
            Fate::Same(j) => Some(j),
            Fate::Changed | Fate::Removed => None,
        })
        .collect::<Option<Vec<u32>>>()?;
    functions.sort_unstable();
    Some(CodeDep {
        unit: dep.unit.clone(),
        snapshot: new_id,
        functions,
    })
}

/// Where the linker map of an instrumented executable is: next to it, or,
/// for an executable cargo copied out of `deps/` (a `[[bin]]`), next to the
/// original, found by being the same file.
pub fn map_path(binary: &Path) -> Option<PathBuf> {
    let beside = append(binary, ".map");
    if beside.exists() {
        return Some(beside);
    }
    let name = binary.file_name()?.to_str()?;
    let deps = binary.parent()?.join("deps");
    let target = std::fs::metadata(binary).ok()?;
    for entry in std::fs::read_dir(&deps).ok()?.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let candidate = file
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|hash| !hash.contains('.'));
        if candidate && same_file(&entry.path(), binary, &target) {
            let map = append(&entry.path(), ".map");
            if map.exists() {
                return Some(map);
            }
        }
    }
    None
}

/// Whether `candidate` is `binary`: the same file (a hard link), or, where
/// cargo had to copy, the same bytes.
fn same_file(candidate: &Path, binary: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(candidate).is_ok_and(|m| {
        (m.dev(), m.ino()) == (meta.dev(), meta.ino())
            || (m.len() == meta.len()
                && std::fs::read(candidate).ok() == std::fs::read(binary).ok())
    })
}

fn append(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Snapshots by id: loaded from the store or computed from a binary, once
/// per run.
pub struct Snapshots {
    store: crate::store::Store,
    known: Mutex<HashMap<Hash, Arc<Snapshot>>>,
    pairs: Mutex<HashMap<(Hash, Hash), Arc<Correspondence>>>,
}

impl Snapshots {
    pub fn new(store: crate::store::Store) -> Snapshots {
        Snapshots {
            store,
            known: Mutex::new(HashMap::new()),
            pairs: Mutex::new(HashMap::new()),
        }
    }

    /// How snapshot `old_id` corresponds to `new_id`, shared by every test
    /// that compares those two.
    pub fn correspondence(
        &self,
        (old_id, old): (&Hash, &Arc<Snapshot>),
        (new_id, new): (&Hash, &Arc<Snapshot>),
    ) -> Arc<Correspondence> {
        self.pairs
            .lock()
            .expect("snapshot pair cache lock")
            .entry((*old_id, *new_id))
            .or_insert_with(|| Arc::new(Correspondence::new(old.clone(), new.clone())))
            .clone()
    }

    /// A snapshot recorded earlier, if the store still has it.
    pub fn stored(&self, id: &Hash) -> Option<Arc<Snapshot>> {
        if let Some(snapshot) = self.known.lock().expect("snapshot cache lock").get(id) {
            return Some(snapshot.clone());
        }
        let snapshot = Arc::new(self.store.load_snapshot(id)?);
        self.known
            .lock()
            .expect("snapshot cache lock")
            .insert(*id, snapshot.clone());
        Some(snapshot)
    }

    /// The snapshot of the executable at `binary`, whose smart checksum is
    /// `id`: from the store, or fingerprinted now (and stored).
    pub fn of_binary(&self, binary: &Path, id: &Hash) -> Result<Arc<Snapshot>, FingerprintError> {
        if let Some(snapshot) = self.stored(id) {
            return Ok(snapshot);
        }
        let map = map_path(binary).ok_or(FingerprintError::NoMap)?;
        let snapshot = Arc::new(fingerprint::fingerprint_file(binary, &map)?);
        // Not being able to keep it costs only time: the next run computes it again.
        let _ = self.store.save_snapshot(id, &snapshot);
        self.known
            .lock()
            .expect("snapshot cache lock")
            .insert(*id, snapshot.clone());
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(functions: &[(&str, u8)], uninstrumented: u8) -> Snapshot {
        let mut functions = functions.to_vec();
        functions.sort();
        let mut stable: Vec<(u64, u32)> = functions
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (crate::fingerprint::stable_hash(n), i as u32))
            .collect();
        stable.sort_unstable();
        Snapshot {
            names: functions.iter().map(|(n, _)| (*n).to_owned()).collect(),
            fps: functions.iter().map(|(_, f)| [*f; 16]).collect(),
            entries: vec![],
            stable,
            other_names: vec!["memcpy".into(), format!("only_in_{uninstrumented}")],
            other_fps: vec![[uninstrumented; 16], [0; 16]],
            stats: Default::default(),
        }
    }

    fn between(old: &Snapshot, new: &Snapshot) -> Correspondence {
        Correspondence::new(Arc::new(old.clone()), Arc::new(new.clone()))
    }

    #[test]
    fn only_executed_functions_decide() {
        let old = snapshot(
            &[
                ("_ZN2fx4read17h0123456789abcdefE", 1),
                ("_ZN2fx5write17h0123456789abcdefE", 2),
                ("_ZN2fx9uncovered17h0123456789abcdefE", 3),
            ],
            0,
        );
        let dep = CodeDep {
            unit: CodeUnit::TestBinary,
            snapshot: [0; 32],
            functions: vec![old.index_of("_ZN2fx4read17h0123456789abcdefE").unwrap() as u32],
        };
        let uncovered_edit = snapshot(
            &[
                ("_ZN2fx4read17h0123456789abcdefE", 1),
                ("_ZN2fx5write17h0123456789abcdefE", 2),
                ("_ZN2fx9uncovered17h0123456789abcdefE", 9),
            ],
            0,
        );
        assert!(changes(&dep, &between(&old, &uncovered_edit)).is_empty());
        let read_edit = snapshot(
            &[
                ("_ZN2fx4read17h0123456789abcdefE", 7),
                ("_ZN2fx5write17h0123456789abcdefE", 2),
            ],
            0,
        );
        assert_eq!(
            changes(&dep, &between(&old, &read_edit)),
            ["function changed: fx::read"]
        );
        let renamed = snapshot(&[("_ZN2fx5read217h0123456789abcdefE", 1)], 0);
        assert_eq!(
            changes(&dep, &between(&old, &renamed)),
            ["function removed: fx::read"]
        );
        let std_changed = snapshot(&[("_ZN2fx4read17h0123456789abcdefE", 1)], 5);
        assert_eq!(
            changes(&dep, &between(&old, &std_changed)),
            ["uninstrumented function changed: memcpy"],
            "a changed function counts; one only linked now, or no more, does not"
        );

        // A dependency bumped to a new version: every hash changes, no code.
        let rehashed = snapshot(
            &[
                ("_ZN2fx4read17hfedcba9876543210E", 1),
                ("_ZN2fx5write17hfedcba9876543210E", 2),
            ],
            0,
        );
        assert!(changes(&dep, &between(&old, &rehashed)).is_empty());
        let rehashed_and_changed = snapshot(&[("_ZN2fx4read17hfedcba9876543210E", 4)], 0);
        assert_eq!(
            changes(&dep, &between(&old, &rehashed_and_changed)),
            ["function changed: fx::read"]
        );
        // Two functions sharing the stable name (copies of a generic
        // instance): the one with the same code stands for it.
        let copies = snapshot(
            &[
                ("_ZN2fx4read17hfedcba9876543210E", 9),
                ("_ZN2fx4read17h1111111111111111E", 1),
            ],
            0,
        );
        assert!(changes(&dep, &between(&old, &copies)).is_empty());
        let changed_copies = snapshot(
            &[
                ("_ZN2fx4read17hfedcba9876543210E", 9),
                ("_ZN2fx4read17h1111111111111111E", 8),
            ],
            0,
        );
        assert_eq!(
            changes(&dep, &between(&old, &changed_copies)),
            ["function changed: fx::read"]
        );

        let moved = translate(&dep, &between(&old, &uncovered_edit), [1; 32]).unwrap();
        assert_eq!(moved.snapshot, [1; 32]);
        assert_eq!(
            uncovered_edit.names[moved.functions[0] as usize],
            "_ZN2fx4read17h0123456789abcdefE"
        );
        assert!(translate(&dep, &between(&old, &renamed), [1; 32]).is_none());
    }

    #[test]
    fn coverage_is_complete_only_when_every_process_reported() {
        let f = |pid, program: &str, entries: &[u32]| CoverageEvent::Functions {
            pid,
            program: program.into(),
            entries: entries.to_vec(),
        };
        let i = |pid, program: &str| CoverageEvent::Instrumented {
            pid,
            program: program.into(),
        };
        let q = |pid| CoverageEvent::Complete { pid };
        let events = [
            i(1, "/t"),
            i(2, "/rg"),
            f(2, "/rg", &[5]),
            q(2),
            i(3, "/rg"),
            i(4, "/t"),
            f(1, "/t", &[1, 2]),
            q(1),
            i(5, "/srv"),
        ];
        let c = coverage(&events[..4]);
        assert_eq!(c.complete.get(Path::new("/rg")), Some(&BTreeSet::from([5])));
        assert!(
            c.incomplete.contains(Path::new("/t")),
            "pid 1 has not reported yet"
        );
        let c = coverage(&events);
        assert_eq!(
            c.incomplete,
            BTreeSet::from(["/rg".into(), "/t".into(), "/srv".into()]),
            "pid 3 (rg), 4 (a fork of the test) and 5 never reported"
        );
        assert!(c.complete.is_empty());
    }
}
