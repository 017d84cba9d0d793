//! The coverage a test's processes reported, per program: which
//! instrumented functions each program executed ([`Coverage`], from a
//! trace's coverage events by [`coverage`]), and which programs cannot say
//! (a process ended without reporting).

use crate::capture::trace::CoverageEvent;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// What a test's processes reported about their code, per program.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Programs whose every process reported its coverage, with the
    /// addresses of the coverage flags they set: one per function executed
    /// (sorted, without repeats).
    pub complete: BTreeMap<PathBuf, Vec<u32>>,
    /// Programs with a process that ended without reporting (killed, or
    /// replaced by `exec` before it could): their code is depended on whole.
    pub incomplete: BTreeSet<PathBuf>,
}

/// Groups a trace's coverage events by program.
pub fn coverage(events: &[CoverageEvent]) -> Coverage {
    // One session per process image: a pid can run several programs in turn
    // (`exec`), and a session left open never reported.
    let mut sessions: Vec<(u32, &PathBuf, bool)> = Vec::new();
    // Vectors sorted once at the end: a test's programs report thousands
    // of functions, each process of each program its own.
    let mut functions: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    for event in events {
        match event {
            CoverageEvent::Instrumented { pid, program } => sessions.push((*pid, program, false)),
            CoverageEvent::Functions { program, flags, .. } => {
                functions.entry(program.clone()).or_default().extend(flags);
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
    let mut complete: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    for (_, program, _) in &sessions {
        if !incomplete.contains(*program) {
            // A program that ran no instrumented function still has
            // complete, empty, coverage.
            complete.entry((*program).clone()).or_default();
        }
    }
    for (program, mut flags) in functions {
        if let Some(known) = complete.get_mut(&program) {
            flags.sort_unstable();
            flags.dedup();
            *known = flags;
        }
    }
    Coverage {
        complete,
        incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn coverage_is_complete_only_when_every_process_reported() {
        let f = |pid, program: &str, flags: &[u32]| CoverageEvent::Functions {
            pid,
            program: program.into(),
            flags: flags.to_vec(),
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
        assert_eq!(c.complete.get(Path::new("/rg")), Some(&vec![5]));
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
