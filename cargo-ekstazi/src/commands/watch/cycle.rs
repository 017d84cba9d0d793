//! One cycle of `watch`: `cargo ekstazi test --verdict-first` with the
//! user's options, in a process group of its own, and what its report says
//! afterwards.
//!
//! A process, not a call: a cycle is then cancelled as a whole (cargo,
//! rustc and the tests with it) by one signal to its group, and a cycle
//! cut short leaves exactly what an interrupted `test` leaves: the old
//! records. Its output goes straight to the terminal, so cargo's errors
//! and libtest's verdicts read as they do under `cargo test`.

use super::Event;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a cancelled cycle may take to stop before it is killed: cargo
/// and the tests need no more (a recording, which does, runs apart).
const GRACE: Duration = Duration::from_secs(2);

/// Labels of skipped tests the summary names before it counts the rest.
const SKIPPED_SHOWN: usize = 5;

/// What a cycle adds to the user's options.
pub enum Extra {
    None,
    /// `--forceall`: key `a`.
    All,
    /// These tests, by name, run whatever changed: keys `f` and Enter.
    Only(Vec<String>),
}

pub struct Cycle {
    pub number: u64,
    pub started: Instant,
    child: Arc<Mutex<Child>>,
    report: tempfile::TempPath,
}

/// How a cycle ended.
pub enum Outcome {
    Reported(Summary),
    /// `cargo test`'s status for a failed build, and no report.
    BuildFailed,
    /// Any other end with no report.
    Failed(ExitStatus),
}

impl Cycle {
    /// Starts the cycle's run; [`Event::Ended`] says when it ends.
    pub fn start(
        number: u64,
        forwarded: &[OsString],
        extra: Extra,
        events: Sender<Event>,
    ) -> Result<Cycle> {
        let report = tempfile::Builder::new()
            .prefix("ekstazi-watch-")
            .suffix(".json")
            .tempfile()
            .context("cannot make the cycle's report file")?
            .into_temp_path();
        let me = std::env::current_exe().context("cannot find cargo-ekstazi's own executable")?;
        let mut command = Command::new(me);
        // In the watch's own directory: in a member's, `cargo test` tests
        // that member alone.
        command
            .args(["ekstazi", "test", "--verdict-first"])
            .arg("--report-json")
            .arg(&report)
            .args(arguments(forwarded, &extra))
            .stdin(Stdio::null())
            // One signal stops it with its cargo and its tests; the
            // terminal's Ctrl-C is the watch's alone.
            .process_group(0);
        let child = command
            .spawn()
            .context("cannot start the cycle's test run")?;
        let child = Arc::new(Mutex::new(child));
        let waited = Arc::clone(&child);
        std::thread::spawn(move || {
            wait_for(&waited);
            let _ = events.send(Event::Ended(number));
        });
        Ok(Cycle {
            number,
            started: Instant::now(),
            child,
            report,
        })
    }

    /// Stops the cycle's process group and waits for it: SIGTERM, then
    /// SIGKILL after [`GRACE`]. No record is written by a run stopped so.
    pub fn cancel(self) {
        let mut child = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        let group = child.id() as i32;
        if matches!(child.try_wait(), Ok(None)) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-group, libc::SIGTERM) };
            let deadline = Instant::now() + GRACE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // The group's other processes too, whether its leader stopped or not.
        // SAFETY: as above.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = child.wait();
    }

    /// After [`Event::Ended`]: what the run reported.
    pub fn finish(self) -> Result<Outcome> {
        let status = {
            let mut child = self.child.lock().unwrap_or_else(PoisonError::into_inner);
            child
                .wait()
                .context("cannot wait for the cycle's test run")?
        };
        let text = std::fs::read(&self.report).unwrap_or_default();
        if text.is_empty() {
            return Ok(match status.code() {
                Some(code) if code == i32::from(crate::exit::TESTS_FAILED) => Outcome::BuildFailed,
                _ => Outcome::Failed(status),
            });
        }
        let report: Report =
            serde_json::from_slice(&text).context("cannot read the cycle's report")?;
        Ok(Outcome::Reported(Summary {
            tests: report.tests,
        }))
    }
}

/// Polls rather than blocks, so that [`Cycle::cancel`] can take the lock.
fn wait_for(child: &Mutex<Child>) {
    loop {
        match child.lock().map(|mut child| child.try_wait()) {
            Ok(Ok(None)) => {}
            _ => return,
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The test command's options for this cycle: the user's, and what a key
/// added. Names given by a key run whatever changed (`--forceall`, which
/// rewrites their records), each matched exactly. The user's harness
/// arguments stay as given (an option's value with it): their name
/// filters, exact now too, and a test of the same name in another binary
/// may add tests, which is never less than asked.
fn arguments(forwarded: &[OsString], extra: &Extra) -> Vec<OsString> {
    let split = forwarded
        .iter()
        .position(|arg| arg == "--")
        .unwrap_or(forwarded.len());
    let (options, harness) = forwarded.split_at(split);
    let mut args = options.to_vec();
    let names = match extra {
        Extra::None => return forwarded.to_vec(),
        Extra::All => {
            args.push("--forceall".into());
            return args.into_iter().chain(harness.iter().cloned()).collect();
        }
        Extra::Only(names) => names,
    };
    args.push("--forceall".into());
    args.push("--".into());
    args.extend(harness.iter().skip(1).cloned());
    args.push("--exact".into());
    args.extend(names.iter().map(OsString::from));
    args
}

/// The part of `--report-json` the summary reads (docs/reference/json.md).
#[derive(Deserialize)]
struct Report {
    tests: Vec<Test>,
}

#[derive(Deserialize)]
pub struct Test {
    binary: String,
    name: String,
    /// `#[ignore]`d: neither run nor skipped as unaffected.
    #[serde(default)]
    ignored: bool,
    selected: bool,
    reasons: Vec<String>,
    outcome: Option<String>,
}

impl Test {
    fn label(&self) -> String {
        format!("{} {}", self.binary, self.name)
    }

    fn failed(&self) -> bool {
        self.outcome
            .as_deref()
            .is_some_and(|outcome| outcome != "passed")
    }
}

/// What one cycle ran and skipped, from its report.
pub struct Summary {
    tests: Vec<Test>,
}

impl Summary {
    /// The names of the tests that failed.
    pub fn failed(&self) -> Vec<String> {
        names(self.tests.iter().filter(|test| test.failed()))
    }

    /// The names of the tests that ran.
    pub fn ran(&self) -> Vec<String> {
        names(self.tests.iter().filter(|test| test.outcome.is_some()))
    }

    /// One line per test that ran, with why, then what was skipped.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .tests
            .iter()
            .filter(|test| test.outcome.is_some())
            .map(|test| {
                let verdict = if test.failed() { "FAIL" } else { "PASS" };
                format!("  {verdict}  {}  ({})", test.label(), why(&test.reasons))
            })
            .collect();
        let skipped: Vec<String> = self
            .tests
            .iter()
            .filter(|test| !test.selected && !test.ignored)
            .map(Test::label)
            .collect();
        lines.push(skipped_line(&skipped));
        lines
    }
}

fn names<'a>(tests: impl Iterator<Item = &'a Test>) -> Vec<String> {
    let mut names: Vec<String> = tests.map(|test| test.name.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// A test's first reason, and how many more it has.
fn why(reasons: &[String]) -> String {
    match reasons {
        [] => "selected".to_owned(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (+{} more)", rest.len()),
    }
}

fn skipped_line(skipped: &[String]) -> String {
    let mut line = format!("  skipped as unaffected: {}", skipped.len());
    if !skipped.is_empty() {
        let shown = skipped[..skipped.len().min(SKIPPED_SHOWN)].join(", ");
        line.push_str(&format!(" ({shown}"));
        if skipped.len() > SKIPPED_SHOWN {
            line.push_str(&format!(", and {} more", skipped.len() - SKIPPED_SHOWN));
        }
        line.push(')');
    }
    line
}

/// For [`Outcome::Failed`]'s message.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(line: &str) -> Vec<OsString> {
        line.split(' ')
            .filter(|word| !word.is_empty())
            .map(OsString::from)
            .collect()
    }

    fn ended_with(status: &str, report: &[u8]) -> Result<Outcome> {
        let child = Command::new("sh").args(["-c", status]).spawn().unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), report).unwrap();
        let cycle = Cycle {
            number: 1,
            started: Instant::now(),
            child: Arc::new(Mutex::new(child)),
            report: file.into_temp_path(),
        };
        cycle.finish()
    }

    #[test]
    fn a_cycle_without_its_report_or_with_a_bad_one_says_which() {
        assert!(matches!(
            ended_with("exit 101", b""),
            Ok(Outcome::BuildFailed)
        ));
        assert!(matches!(ended_with("exit 1", b""), Ok(Outcome::Failed(_))));
        let bad = ended_with("exit 0", b"{\"tests\": 7}");
        let message = format!("{:#}", bad.err().expect("a bad report is an error"));
        assert!(
            message.contains("cannot read the cycle's report"),
            "{message}"
        );
        let good = ended_with("exit 0", br#"{"tests": []}"#);
        assert!(matches!(good, Ok(Outcome::Reported(_))));
    }

    #[test]
    fn keys_add_to_the_users_options() {
        let user = os("-p a parse -- --nocapture b --skip slow --test-threads 2");
        assert_eq!(arguments(&user, &Extra::None), user);
        assert_eq!(
            arguments(&user, &Extra::All),
            os("-p a parse --forceall -- --nocapture b --skip slow --test-threads 2")
        );
        // An option's value stays with it: `--skip` does not take `--exact`.
        let only = arguments(&user, &Extra::Only(vec!["t::x".into(), "y".into()]));
        assert_eq!(
            only,
            os(
                "-p a parse --forceall -- --nocapture b --skip slow --test-threads 2 --exact t::x y"
            )
        );
        let words: Vec<String> = only[5..]
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let harness = crate::cli::parse_harness_args(None, &words).unwrap();
        assert_eq!(harness.filter.skip, ["slow"]);
        assert!(harness.filter.exact);
        assert_eq!(
            arguments(&os(""), &Extra::Only(vec!["y".into()])),
            os("--forceall -- --exact y")
        );
    }

    fn test(name: &str, selected: bool, outcome: Option<&str>, reasons: &[&str]) -> Test {
        Test {
            binary: "shapes".into(),
            name: name.into(),
            ignored: false,
            selected,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            outcome: outcome.map(str::to_owned),
        }
    }

    #[test]
    fn the_summary_says_why_each_test_ran_and_what_was_skipped() {
        let summary = Summary {
            tests: vec![
                test("a", true, Some("passed"), &["function changed: s::a"]),
                test("b", true, Some("failed"), &["new", "failed last time"]),
                test("c", false, None, &[]),
                Test {
                    ignored: true,
                    ..test("d", false, None, &[])
                },
            ],
        };
        assert_eq!(
            summary.lines(),
            [
                "  PASS  shapes a  (function changed: s::a)",
                "  FAIL  shapes b  (new (+1 more))",
                "  skipped as unaffected: 1 (shapes c)",
            ]
        );
        assert_eq!(summary.failed(), ["b"]);
        assert_eq!(summary.ran(), ["a", "b"]);
        let many: Vec<String> = (0..7).map(|i| format!("t{i}")).collect();
        assert_eq!(
            skipped_line(&many),
            "  skipped as unaffected: 7 (t0, t1, t2, t3, t4, and 2 more)"
        );
        assert_eq!(skipped_line(&[]), "  skipped as unaffected: 0");
    }
}
