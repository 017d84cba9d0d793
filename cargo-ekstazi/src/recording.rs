//! Turning a finished test's trace into its record.

use crate::list::TestCase;
use crate::run::Finished;
use crate::session::Session;
use ekstazi_core::collect::{Context, collect};
use ekstazi_core::dep::{Dep, Target};
use ekstazi_core::record::{Outcome, Record};
use ekstazi_core::trace;

/// The record of a finished test. Only a pass carries dependencies: any
/// other outcome runs again next time whatever changed.
pub fn record_of(session: &Session, case: &TestCase, finished: &Finished) -> Record {
    let binary = &session.built.binaries[case.binary];
    let mut record = Record {
        binary: binary.key.clone(),
        test: case.name.clone(),
        global: session.global.clone(),
        outcome: finished.outcome,
        duration_us: u64::try_from(finished.duration.as_micros()).unwrap_or(u64::MAX),
        always: Vec::new(),
        deps: Vec::new(),
        network: Vec::new(),
        ignored: Vec::new(),
    };
    if finished.outcome != Outcome::Passed {
        return record;
    }
    let bytes = match std::fs::read(&finished.trace) {
        Ok(bytes) => bytes,
        // No file: the shim never started, which `collect` reports.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            record
                .always
                .push(format!("its trace could not be read: {e}"));
            return record;
        }
    };
    let collected = collect(
        &trace::parse(&bytes),
        &Context {
            anchors: session.checksums.anchors(),
            ignore: &session.ignore,
            env: &session.environments[case.binary],
        },
    );
    record.always = collected.always;
    record.network = collected.network;
    record.ignored = collected.ignored;
    record.deps = collected
        .observed
        .into_iter()
        .map(|observed| {
            let sum = observed.known.unwrap_or_else(|| {
                session
                    .checksums
                    .as_seen_since(&observed.target, finished.started)
            });
            Dep {
                target: observed.target,
                sum,
            }
        })
        .collect();
    record.deps.push(Dep {
        target: Target::TestBinary,
        sum: session.binary_sums[case.binary].clone(),
    });
    record
}
