//! Whether a recorded code dependency ([`CodeDep`]) still holds against the
//! program's present build ([`holds`]), and if not, why ([`changes`]): a
//! function the test executed changed or went, or an uninstrumented
//! function of the program changed.

use crate::digests::fingerprint;
use crate::digests::program::{Build, Fate};
use crate::model::code_dep::{CodeDep, CodeUnit};
use crate::storage::snapshots::{NAMED_CHANGES, Snapshots};

/// Whether a code dependency holds against the program's present build:
/// [`changes`] would find nothing, known at the first difference.
pub fn holds(dep: &CodeDep, now: &Build, snapshots: &Snapshots) -> bool {
    if dep.uninstrumented != now.uninstrumented_id()
        && snapshots
            .uninstrumented_changes(&dep.uninstrumented, now)
            .is_none_or(|changed| !changed.is_empty())
    {
        return false;
    }
    dep.functions.iter().all(|id| now.has(id))
}

/// Why a code dependency no longer holds against the program's present
/// build; empty when every executed function is the same.
pub fn changes(dep: &CodeDep, now: &Build, snapshots: &Snapshots) -> Vec<String> {
    let place = match &dep.unit {
        CodeUnit::TestBinary => String::new(),
        unit => format!(" (in {unit})"),
    };
    let mut reasons = Vec::new();
    if dep.uninstrumented != now.uninstrumented_id() {
        match snapshots.uninstrumented_changes(&dep.uninstrumented, now) {
            Some(changed) => reasons.extend(
                changed
                    .iter()
                    .map(|name| format!("uninstrumented function changed: {name}{place}")),
            ),
            None => {
                reasons.push(format!(
                    "the function fingerprints of its last run are gone{place}"
                ));
                return reasons;
            }
        }
    }
    let mut changed = 0;
    for id in &dep.functions {
        let (verdict, name) = match now.fate(id, snapshots.table()) {
            Fate::Same => continue,
            Fate::Unknown => {
                reasons.push(format!(
                    "the function fingerprints of its last run are gone{place}"
                ));
                return reasons;
            }
            Fate::Changed(name) => ("function changed", name),
            Fate::Removed(name) => ("function removed", name),
        };
        changed += 1;
        if changed <= NAMED_CHANGES {
            reasons.push(format!(
                "{verdict}: {}{place}",
                fingerprint::demangle(&name)
            ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digests::fingerprint::Snapshot;
    use crate::digests::program::tests_support::snapshot;
    use crate::model::code_dep::FnId;
    use crate::storage::store::Store;
    use std::sync::Arc;

    /// A store whose table knows `old`'s functions, and what `dep` (the
    /// test executed `executed` of `old`) says against each later build.
    struct Case {
        _dir: tempfile::TempDir,
        snapshots: Snapshots,
        dep: CodeDep,
    }

    impl Case {
        fn new(old: &Snapshot, executed: &[&str]) -> Case {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::new(dir.path());
            let snapshots = Snapshots::new(store);
            let build = Build::new([0; 32], Arc::new(old.clone()));
            snapshots.keep_uninstrumented(&build).unwrap();
            let mut functions: Vec<FnId> = executed
                .iter()
                .map(|name| {
                    let i = old.index_of(name).unwrap();
                    let name = old.names.get(i).unwrap();
                    let stable = crate::digests::fingerprint::stable_hash(&name);
                    snapshots
                        .table()
                        .intern(&name, stable, &old.fps[i])
                        .unwrap()
                })
                .collect();
            functions.sort_unstable();
            Case {
                _dir: dir,
                dep: CodeDep {
                    unit: CodeUnit::TestBinary,
                    build: [0; 32],
                    uninstrumented: build.uninstrumented_id(),
                    functions,
                },
                snapshots,
            }
        }

        fn against(&self, new: &Snapshot, id: u8) -> Vec<String> {
            let build = Build::new([id; 32], Arc::new(new.clone()));
            let found = changes(&self.dep, &build, &self.snapshots);
            assert_eq!(
                holds(&self.dep, &build, &self.snapshots),
                found.is_empty(),
                "{found:?}"
            );
            found
        }
    }

    #[test]
    fn only_executed_functions_decide() {
        let read = "_ZN2fx4read17h0123456789abcdefE";
        let old = snapshot(
            &[
                (read, 1),
                ("_ZN2fx5write17h0123456789abcdefE", 2),
                ("_ZN2fx9uncovered17h0123456789abcdefE", 3),
            ],
            0,
        );
        let case = Case::new(&old, &[read]);
        let uncovered_edit = snapshot(
            &[
                (read, 1),
                ("_ZN2fx5write17h0123456789abcdefE", 2),
                ("_ZN2fx9uncovered17h0123456789abcdefE", 9),
            ],
            0,
        );
        assert!(case.against(&uncovered_edit, 1).is_empty());
        let read_edit = snapshot(&[(read, 7), ("_ZN2fx5write17h0123456789abcdefE", 2)], 0);
        assert_eq!(case.against(&read_edit, 2), ["function changed: fx::read"]);
        let renamed = snapshot(&[("_ZN2fx5read217h0123456789abcdefE", 1)], 0);
        assert_eq!(case.against(&renamed, 3), ["function removed: fx::read"]);
        let std_changed = snapshot(&[(read, 1)], 5);
        assert_eq!(
            case.against(&std_changed, 4),
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
        assert!(case.against(&rehashed, 5).is_empty());
        let rehashed_and_changed = snapshot(&[("_ZN2fx4read17hfedcba9876543210E", 4)], 0);
        assert_eq!(
            case.against(&rehashed_and_changed, 6),
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
        assert!(case.against(&copies, 7).is_empty());
        let changed_copies = snapshot(
            &[
                ("_ZN2fx4read17hfedcba9876543210E", 9),
                ("_ZN2fx4read17h1111111111111111E", 8),
            ],
            0,
        );
        assert_eq!(
            case.against(&changed_copies, 8),
            ["function changed: fx::read"]
        );
    }

    #[test]
    fn a_function_the_table_lost_or_a_lost_uninstrumented_table_runs_the_test() {
        let old = snapshot(&[("_ZN2fx4read17h0123456789abcdefE", 1)], 0);
        let mut case = Case::new(&old, &["_ZN2fx4read17h0123456789abcdefE"]);
        let edit = snapshot(&[("_ZN2fx4read17h0123456789abcdefE", 2)], 0);
        case.dep.functions = vec![[0xee; 8]];
        assert_eq!(
            case.against(&edit, 1),
            ["the function fingerprints of its last run are gone"]
        );
        case.dep.uninstrumented = [0xee; 32];
        assert_eq!(
            case.against(&edit, 2),
            ["the function fingerprints of its last run are gone"]
        );
    }
}
