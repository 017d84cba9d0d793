//! From a test's trace to its dependency targets.
//!
//! Events are taken in the order the test made them. A path the test created
//! or removed belongs to the test from then on, and so does everything below
//! a directory it created: reading back its own output is not an input. What
//! was observed before that still is (the path existed; its parent was
//! missing). Events of the harness's main thread and ignored trees are left
//! out, and said so.

use crate::dep::{FileKind, Sum, Target};
use crate::ignore::Ignore;
use crate::path::{Anchors, normalize};
use crate::trace::{Access, Trace};
use std::collections::HashSet;
use std::path::PathBuf;

/// A target and, when the trace itself tells, its checksum (a lookup that
/// found nothing is `Absent` then and there, whatever the path holds later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub target: Target,
    pub known: Option<Sum>,
}

/// What a trace amounts to.
#[derive(Debug, Default)]
pub struct Collected {
    /// In first-seen order, without repeats.
    pub observed: Vec<Observed>,
    /// Accesses that are not dependencies, with the reason.
    pub ignored: Vec<(PathBuf, String)>,
    /// Reasons the test cannot be trusted to be skipped later.
    pub always: Vec<String>,
}

/// Turns a trace into dependency targets.
pub fn collect(trace: &Trace, anchors: &Anchors, ignore: &Ignore) -> Collected {
    let mut out = Collected::default();
    if !trace.complete {
        out.always.push("its trace is incomplete".to_owned());
    }
    let mut owned: HashSet<PathBuf> = HashSet::new();
    let mut seen: HashSet<(Target, Option<Sum>)> = HashSet::new();
    let mut ignored_seen: HashSet<PathBuf> = HashSet::new();
    if !trace.events.iter().any(|e| e.access == Access::Start) {
        out.always.push("the shim did not trace it".to_owned());
    }
    for event in &trace.events {
        if event.access == Access::Start {
            continue;
        }
        if event.access == Access::Lost {
            let why = "it touched a path the shim could not name".to_owned();
            if !out.always.contains(&why) {
                out.always.push(why);
            }
            continue;
        }
        let path = normalize(&event.path);
        let why_ignored = if event.by_harness() {
            Some("test harness".to_owned())
        } else if let Some(why) = ignore.check(&path) {
            Some(why.to_owned())
        } else if path.ancestors().any(|p| owned.contains(p)) {
            Some("created by the test".to_owned())
        } else {
            None
        };
        if let Some(why) = why_ignored {
            if ignored_seen.insert(path.clone()) {
                out.ignored.push((path, why));
            }
            continue;
        }
        let stored = anchors.store(&path);
        let (target, known) = match event.access {
            Access::Created | Access::Deleted => {
                owned.insert(path);
                continue;
            }
            Access::Read => (Target::Content(stored), None),
            Access::Exec => (Target::Program(stored), None),
            Access::Missing => (
                Target::Kind {
                    path: stored,
                    follow: !event.nofollow(),
                },
                Some(Sum::Absent),
            ),
            Access::Exists | Access::Modified => (
                Target::Kind {
                    path: stored,
                    follow: !event.nofollow(),
                },
                event.kind().map(Sum::Kind),
            ),
            Access::Lost | Access::Start => unreachable!("handled above"),
        };
        if seen.insert((target.clone(), known.clone())) {
            out.observed.push(Observed { target, known });
        }
    }
    drop_implied_kinds(&mut out.observed);
    out
}

/// A file's content checksum already says that it exists and is a regular
/// file, so a plain existence lookup of the same path adds nothing.
fn drop_implied_kinds(observed: &mut Vec<Observed>) {
    let read: HashSet<_> = observed
        .iter()
        .filter_map(|o| match &o.target {
            Target::Content(path) => Some(path.clone()),
            _ => None,
        })
        .collect();
    observed.retain(|o| match (&o.target, &o.known) {
        (Target::Kind { path, follow: true }, None | Some(Sum::Kind(FileKind::File))) => {
            !read.contains(path)
        }
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, FLAG_HARNESS};
    use std::path::Path;

    fn trace(events: &[(Access, u8, &str)]) -> Trace {
        Trace {
            events: [(Access::Start, FLAG_HARNESS, "")]
                .iter()
                .chain(events)
                .map(|(access, flags, path)| Event {
                    access: *access,
                    flags: *flags,
                    path: PathBuf::from(path),
                })
                .collect(),
            coverage: vec![],
            complete: true,
        }
    }

    fn run(events: &[(Access, u8, &str)]) -> Collected {
        let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
        collect(&trace(events), &anchors, &Ignore::defaults())
    }

    fn names(c: &Collected) -> Vec<String> {
        c.observed
            .iter()
            .map(|o| {
                let kind = match (&o.target, &o.known) {
                    (Target::Content(_), _) => "read",
                    (_, Some(Sum::Absent)) => "absent",
                    _ => "exists",
                };
                format!("{kind} {}", o.target)
            })
            .collect()
    }

    #[test]
    fn reads_lookups_and_absences_become_targets() {
        let c = run(&[
            (Access::Read, 0, "/ws/data/a.txt"),
            (Access::Missing, 0, "/ws/./somefile.txt"),
            (Access::Exists, 0, "/ws/data"),
            (Access::Exists, 0, "/ws/data/a.txt"),
            (Access::Read, 0, "/ws/data/a.txt"),
        ]);
        assert_eq!(
            names(&c),
            ["read data/a.txt", "absent somefile.txt", "exists data"]
        );
        assert!(c.always.is_empty());
    }

    #[test]
    fn the_tests_own_files_are_not_inputs() {
        let c = run(&[
            (Access::Missing, 0, "/ws/out.txt"),
            (Access::Created, 0, "/ws/out.txt"),
            (Access::Read, 0, "/ws/out.txt"),
            (Access::Created, 0, "/tmp/.tmpX"),
            (Access::Read, 0, "/tmp/.tmpX/inner/f"),
            (Access::Read, 0, "/ws/pre.txt"),
            (Access::Exists, 2, "/ws/pre.txt"),
            (Access::Deleted, 0, "/ws/pre.txt"),
            (Access::Read, 0, "/ws/pre.txt"),
        ]);
        assert_eq!(
            names(&c),
            ["absent out.txt", "read pre.txt", "exists pre.txt"]
        );
        assert_eq!(c.ignored.len(), 3);
    }

    #[test]
    fn harness_and_kernel_accesses_are_ignored_and_reported() {
        let c = run(&[
            (Access::Read, FLAG_HARNESS, "/lib/terminfo/x/xterm"),
            (Access::Read, 0, "/proc/self/cgroup"),
        ]);
        assert!(c.observed.is_empty());
        assert_eq!(c.ignored[0].1, "test harness");
        assert_eq!(c.ignored[1].1, "kernel interface");
    }

    #[test]
    fn untraceable_tests_are_flagged() {
        let mut t = trace(&[(Access::Lost, 0, "")]);
        let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
        assert_eq!(collect(&t, &anchors, &Ignore::defaults()).always.len(), 1);
        t.complete = false;
        assert_eq!(collect(&t, &anchors, &Ignore::defaults()).always.len(), 2);
    }

    #[test]
    fn a_trace_without_the_shim_is_untrusted() {
        let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
        let empty = Trace {
            complete: true,
            ..Trace::default()
        };
        assert_eq!(
            collect(&empty, &anchors, &Ignore::defaults()).always,
            ["the shim did not trace it"]
        );
    }
}
