//! `cargo ekstazi watch` in a pseudo-terminal (and once with its output
//! piped): a save starts a cycle that runs the tests it affects and says
//! why; a save during a cycle cancels it; the keys ask for every test, the
//! failed ones, or quit; a build error is shown and the next save recovers;
//! Ctrl-C leaves no process, no half-written record and the lock free.
//!
//! Every wait is for text the command prints (or a file a held test
//! writes), never for time; the one exception is the check that a write
//! leaving a file's bytes as they were starts no cycle.

use crate::support::{BASIC_ALL, Fixture, labels};
use ekstazi_core::storage::store::{Loaded, Store};
use rexpect::process::WaitStatus;
use rexpect::reader::Options;
use rexpect::session::{PtySession, spawn_with_options};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A watch keeps cargo, rustc and the tests busy: two never share the
/// machine's cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long any awaited text may take (a cold build of a fixture included).
const WAIT: Duration = Duration::from_secs(120);
/// The idle line's start: a cycle is over.
const IDLE: &str = "cargo-ekstazi: watching for changes";
/// A cycle's header starts so.
const HEADER: &str = "── cycle ";

/// The `basic` fixture's tests that call `alpha::double`.
const DOUBLE_CALLERS: &[&str] = &[
    "alpha tests::doubles",
    "beta tests::quadruples",
    "beta::files reads_nothing",
];

/// The `verdicts` fixture's test binary, as labels name it.
const VERDICTS: &str = "verdicts::verdicts";
const VERDICTS_ALL: &[&str] = &[
    "verdicts::verdicts a_claims",
    "verdicts::verdicts adds",
    "verdicts::verdicts b_claims",
    "verdicts::verdicts counts_runs",
    "verdicts::verdicts multiplies",
];

fn verdicts(name: &str) -> String {
    format!("{VERDICTS} {name}")
}

/// `cargo ekstazi watch <args>` in a pseudo-terminal, its output read as
/// it comes (escape codes left out).
struct Watch {
    session: PtySession,
    /// Everything it printed so far.
    seen: Vec<u8>,
    /// How much of `seen` the expectations have consumed.
    cursor: usize,
    /// How it ended, once it has.
    ended: Option<WaitStatus>,
}

impl Watch {
    fn start(f: &Fixture, args: &[&str]) -> Watch {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        let mut command = f.command(&all);
        command
            .env("CARGO_TERM_COLOR", "never")
            .env("CARGO_TERM_PROGRESS_WHEN", "never");
        let options = Options::new()
            .timeout_ms(Some(WAIT.as_millis() as u64))
            .strip_ansi_escape_codes(true);
        let session = spawn_with_options(command, options).expect("cannot start the watch");
        Watch {
            session,
            seen: Vec::new(),
            cursor: 0,
            ended: None,
        }
    }

    /// Reads what is ready.
    fn pump(&mut self) {
        // rexpect hands out bytes one `char` each (`byte as char`).
        while let Some(c) = self.session.try_read() {
            self.seen.push(c as u32 as u8);
        }
    }

    /// Whether it still runs (its status kept once it ended).
    fn alive(&mut self) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match self.session.process().status() {
            Some(WaitStatus::StillAlive) => true,
            Some(status) => {
                self.ended = Some(status);
                false
            }
            None => false,
        }
    }

    /// The whole output, for failure messages.
    fn transcript(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Waits for `needle`; the output before it (since the last
    /// expectation). It is consumed with the needle.
    #[track_caller]
    fn expect(&mut self, needle: &str) -> String {
        let since = Instant::now();
        let mut ended_at = None;
        loop {
            self.pump();
            if let Some(at) = find(&self.seen[self.cursor..], needle.as_bytes()) {
                let before =
                    String::from_utf8_lossy(&self.seen[self.cursor..self.cursor + at]).into_owned();
                self.cursor += at + needle.len();
                return before;
            }
            if !self.alive() {
                // What it printed last may still be on its way.
                let at = *ended_at.get_or_insert_with(Instant::now);
                if at.elapsed() > Duration::from_secs(2) {
                    panic!(
                        "the watch ended ({:?}) without printing {needle:?}:\n{}",
                        self.ended,
                        self.transcript()
                    );
                }
            }
            if since.elapsed() > WAIT {
                panic!(
                    "no {needle:?} after {WAIT:?}; the watch printed:\n{}",
                    self.transcript()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for `needle`, consuming nothing.
    #[track_caller]
    fn wait_for(&mut self, needle: &str) {
        let cursor = self.cursor;
        self.expect(needle);
        self.cursor = cursor;
    }

    /// Asserts that nothing it prints for `quiet` contains `needle` (not
    /// consumed). The one wait for time: that something does not happen.
    #[track_caller]
    fn assert_quiet(&mut self, needle: &str, quiet: Duration) {
        let since = Instant::now();
        while since.elapsed() < quiet {
            self.pump();
            assert!(
                find(&self.seen[self.cursor..], needle.as_bytes()).is_none(),
                "{needle:?} printed:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the end of a cycle (the idle line); the cycle.
    #[track_caller]
    fn cycle(&mut self) -> Cycle {
        let text = self.expect(IDLE);
        let cycle = Cycle::parse(&text);
        assert!(
            cycle.number > 0,
            "a cycle's output without its header:\n{}",
            self.transcript()
        );
        cycle
    }

    /// Sends a key, as typed.
    fn key(&mut self, key: &str) {
        self.session.send(key).unwrap();
        self.session.flush().unwrap();
    }

    /// Quits with `q`, which says so and ends it with status 0.
    #[track_caller]
    fn quit(&mut self) {
        self.key("q");
        self.expect("cargo-ekstazi: stopped watching");
        assert_eq!(self.exit_code(WAIT), 0);
    }

    /// Waits up to `limit` for it to end; how it ended.
    #[track_caller]
    fn ended_within(&mut self, limit: Duration) -> WaitStatus {
        let since = Instant::now();
        while self.alive() {
            assert!(
                since.elapsed() < limit,
                "the watch still runs after {limit:?}:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.ended.unwrap_or_else(|| panic!("its status was lost"))
    }

    /// Its exit code, once it ended (not by a signal).
    #[track_caller]
    fn exit_code(&mut self, limit: Duration) -> i32 {
        match self.ended_within(limit) {
            WaitStatus::Exited(_, code) => code,
            other => panic!("it ended by {other:?}:\n{}", self.transcript()),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What one cycle printed, from its header to the idle line.
struct Cycle {
    number: u32,
    /// The header's reason: `first run`, `<path> changed`, `key a: every test`...
    why: String,
    /// Each test that ran, by label: whether it passed, and its reason.
    ran: BTreeMap<String, (bool, String)>,
    /// The summary's `skipped as unaffected: M (labels[, and K more])`.
    skipped: Option<Skipped>,
    /// The cycle's last verdict line (`test result: ... selected: ...`).
    verdict: Option<String>,
    /// The selection line's `M skipped as unaffected`.
    unaffected: Option<usize>,
    /// Its whole text.
    text: String,
}

#[derive(Debug, PartialEq)]
struct Skipped {
    count: usize,
    named: Vec<String>,
    more: usize,
}

impl Cycle {
    fn parse(text: &str) -> Cycle {
        // The line as a terminal shows it: what follows its last carriage return.
        let lines: Vec<&str> = text
            .split('\n')
            .map(|line| {
                line.trim_end_matches('\r')
                    .rsplit('\r')
                    .next()
                    .unwrap_or_default()
            })
            .collect();
        // The last header starts the cycle (a terminal's screen is cleared
        // before it).
        let start = lines
            .iter()
            .rposition(|line| line.trim().starts_with(HEADER))
            .unwrap_or(lines.len());
        let mut cycle = Cycle {
            number: 0,
            why: String::new(),
            ran: BTreeMap::new(),
            skipped: None,
            verdict: None,
            unaffected: None,
            text: lines[start.min(lines.len())..].join("\n"),
        };
        let Some(header) = lines.get(start) else {
            return cycle;
        };
        let header = header.trim();
        let inner = header
            .strip_prefix(HEADER)
            .and_then(|h| h.strip_suffix(" ──"))
            .unwrap_or_else(|| panic!("a header not as the contract says: {header:?}"));
        let (number, why) = inner
            .split_once(": ")
            .unwrap_or_else(|| panic!("a header without its reason: {header:?}"));
        cycle.number = number
            .parse()
            .unwrap_or_else(|_| panic!("a header without its number: {header:?}"));
        cycle.why = why.to_owned();
        for line in &lines[start + 1..] {
            let verdict = [("  PASS  ", true), ("  FAIL  ", false)]
                .into_iter()
                .find_map(|(prefix, passed)| Some((line.strip_prefix(prefix)?, passed)));
            if let Some((rest, passed)) = verdict {
                let (label, why) = rest
                    .rsplit_once("  (")
                    .unwrap_or_else(|| panic!("a verdict line without its reason: {line:?}"));
                let why = why.strip_suffix(')').unwrap_or(why);
                cycle
                    .ran
                    .insert(label.trim().to_owned(), (passed, why.to_owned()));
            } else if let Some(rest) = line.strip_prefix("  skipped as unaffected: ") {
                cycle.skipped = Some(Skipped::parse(rest));
            } else if line.starts_with("test result: ") && line.contains(" selected: ") {
                cycle.verdict = Some((*line).to_owned());
            } else if let Some(rest) = line.strip_prefix("cargo-ekstazi: ")
                && let Some((_, rest)) = rest.split_once(" selected, ")
                && let Some((count, _)) = rest.split_once(" skipped as unaffected")
            {
                cycle.unaffected = count.parse().ok();
            }
        }
        cycle
    }

    fn ran(&self) -> BTreeSet<String> {
        self.ran.keys().cloned().collect()
    }

    fn failed(&self) -> BTreeSet<String> {
        self.ran
            .iter()
            .filter(|(_, (passed, _))| !passed)
            .map(|(label, _)| label.clone())
            .collect()
    }

    /// The reason a test that ran was given.
    #[track_caller]
    fn why(&self, label: &str) -> &str {
        &self
            .ran
            .get(label)
            .unwrap_or_else(|| panic!("{label} did not run: {self:?}"))
            .1
    }

    /// Asserts the cycle's number and the reason its header gives.
    #[track_caller]
    fn assert_header(&self, number: u32, why: &str) {
        assert_eq!((self.number, self.why.as_str()), (number, why), "{self:?}");
    }

    /// Asserts that `label` ran, and why, in words starting with `prefix`.
    #[track_caller]
    fn assert_why_starts(&self, label: &str, prefix: &str) {
        assert!(self.why(label).starts_with(prefix), "{self:?}");
    }

    #[track_caller]
    fn verdict(&self) -> &str {
        self.verdict
            .as_deref()
            .unwrap_or_else(|| panic!("no verdict line: {self:?}"))
    }

    #[track_caller]
    fn skipped(&self) -> &Skipped {
        self.skipped
            .as_ref()
            .unwrap_or_else(|| panic!("no `skipped as unaffected` line: {self:?}"))
    }

    /// Asserts that exactly `tests` ran, and each passed or failed as said.
    #[track_caller]
    fn assert_ran(&self, passed: &[&str], failed: &[&str]) {
        let mut all = labels(passed);
        all.extend(labels(failed));
        assert_eq!(self.ran(), all, "{self:?}");
        assert_eq!(self.failed(), labels(failed), "{self:?}");
    }

    /// Asserts the `skipped as unaffected` line: `count` tests, up to five
    /// named, each of them one of `among`.
    #[track_caller]
    fn assert_skipped(&self, count: usize, among: &BTreeSet<String>) {
        let skipped = self.skipped();
        assert_eq!(
            Some(skipped.count),
            self.unaffected,
            "the summary's skipped are not the selection's: {self:?}"
        );
        assert_eq!(skipped.count, count, "{self:?}");
        assert_eq!(skipped.named.len(), count.min(5), "{self:?}");
        assert_eq!(skipped.more, count.saturating_sub(5), "{self:?}");
        for label in &skipped.named {
            assert!(
                among.contains(label),
                "{label} was not to be skipped: {self:?}"
            );
        }
    }
}

impl Skipped {
    /// `M` or `M (a, b, c[, and K more])`.
    fn parse(rest: &str) -> Skipped {
        let (count, names) = rest.split_once(' ').unwrap_or((rest, ""));
        let count = count
            .parse()
            .unwrap_or_else(|_| panic!("a skipped count that is not one: {rest:?}"));
        let mut skipped = Skipped {
            count,
            named: Vec::new(),
            more: 0,
        };
        let Some(names) = names.strip_prefix('(').and_then(|n| n.strip_suffix(')')) else {
            assert!(
                names.is_empty(),
                "skipped tests not as the contract says: {rest:?}"
            );
            return skipped;
        };
        for name in names.split(", ") {
            match name
                .strip_prefix("and ")
                .and_then(|n| n.strip_suffix(" more"))
            {
                Some(more) => skipped.more = more.parse().unwrap(),
                None => skipped.named.push(name.to_owned()),
            }
        }
        skipped
    }
}

impl std::fmt::Debug for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cycle {} ({}): ran {:?}, skipped {:?}\n--- its output\n{}",
            self.number, self.why, self.ran, self.skipped, self.text
        )
    }
}

/// Creates the gate when dropped: a held test never outlives the test
/// that held it, whatever happened.
struct Gate(PathBuf);

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// The `verdicts` fixture, its `counts_runs` counting its runs in the
/// file returned and holding on run `hold` until the gate opens.
fn held_verdicts(hold: u32) -> (Fixture, PathBuf, Gate) {
    let f = Fixture::new("verdicts");
    let runs = f.tmp().join("runs");
    let gate = f.tmp().join("gate");
    let f = f
        .with_env("FIXTURE_RUNS", &runs.display().to_string())
        .with_env("FIXTURE_HOLD_ON_RUN", &hold.to_string())
        .with_env("FIXTURE_GATE", &gate.display().to_string());
    (f, runs, Gate(gate))
}

/// Waits until the held test has counted `runs` runs.
#[track_caller]
fn wait_for_runs(runs: &Path, count: u32) {
    let since = Instant::now();
    while std::fs::read_to_string(runs).unwrap_or_default() != count.to_string() {
        assert!(
            since.elapsed() < WAIT,
            "the test never reached run {count}: {:?}",
            std::fs::read_to_string(runs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the process has ended (a zombie has).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| stat.contains(") Z "))
}

/// The processes that name the fixture on their command line or run in
/// it, but this one.
fn left_in(f: &Fixture) -> Vec<(u32, String)> {
    let dir = std::fs::canonicalize(f.path()).unwrap();
    let me = std::process::id();
    let mut left: BTreeSet<u32> = f.processes_in().into_iter().collect();
    for pid in std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
    {
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)) {
            left.insert(pid);
        }
    }
    left.into_iter()
        .filter(|&pid| !gone(pid))
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

/// Asserts that the state directory is whole: every record file loads, no
/// temporary or spare file is left, and its lock is free.
#[track_caller]
fn assert_state_whole(f: &Fixture) {
    let store = Store::new(&f.file(".ekstazi"));
    for (path, record) in store.records().unwrap() {
        if let Err(e) = record {
            panic!("{} does not load: {e}", path.display());
        }
    }
    let temporary: Vec<PathBuf> = walkdir::WalkDir::new(f.file(".ekstazi"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .map(|e| e.into_path())
        .collect();
    assert!(temporary.is_empty(), "left in the state: {temporary:?}");
    assert!(
        store.lock(true, false).is_ok(),
        "the state directory's lock is still held"
    );
}

#[test]
fn an_edit_runs_the_tests_it_affects_and_says_why() {
    let _serial = serial();
    let f = Fixture::new("basic");
    let mut watch = Watch::start(&f, &[]);
    let start = watch.expect(" directories)");
    assert!(start.contains("cargo-ekstazi: watching "), "{start}");

    // The first cycle runs (and records) every test.
    let first = watch.cycle();
    first.assert_header(1, "first run");
    first.assert_ran(BASIC_ALL, &[]);
    for label in BASIC_ALL {
        assert_eq!(first.why(label), "new", "{first:?}");
    }
    assert!(
        first
            .verdict()
            .starts_with("test result: ok. 12 selected: "),
        "{first:?}"
    );
    f.wait_for_background_recording();

    // One function changes: only the tests that call it run (`beta`'s
    // `quadruple` does, twice); `triple`'s test among the skipped.
    f.edit("alpha/src/lib.rs", "x * 2", "x + x");
    let second = watch.cycle();
    second.assert_header(2, "alpha/src/lib.rs changed");
    let callers = DOUBLE_CALLERS;
    second.assert_ran(callers, &[]);
    for label in callers {
        second.assert_why_starts(label, "function changed: alpha::double");
    }
    assert!(
        second
            .verdict()
            .starts_with("test result: ok. 3 selected: 3 passed; 0 failed"),
        "{second:?}"
    );
    watch.quit();

    // The summary's skipped tests are the selection's: an ignored test
    // (`alpha tests::slow_and_ignored`) was not skipped as unaffected.
    first.assert_skipped(0, &BTreeSet::new());
    let mut others = labels(BASIC_ALL);
    for label in callers {
        others.remove(*label);
    }
    second.assert_skipped(9, &others);
}

#[test]
fn a_data_file_runs_the_test_that_reads_it_and_a_touch_runs_nothing() {
    let _serial = serial();
    let f = Fixture::new("basic");
    let mut watch = Watch::start(&f, &[]);
    watch.cycle().assert_ran(BASIC_ALL, &[]);
    f.wait_for_background_recording();

    let reads = "beta::files reads_data";
    f.write("beta/data/a.txt", "other data\n");
    let second = watch.cycle();
    second.assert_header(2, "beta/data/a.txt changed");
    second.assert_ran(&[reads], &[]);
    assert_eq!(
        second.why(reads),
        "file changed: beta/data/a.txt",
        "{second:?}"
    );
    assert!(
        !second.skipped().named.contains(&reads.to_owned()),
        "{second:?}"
    );
    f.wait_for_background_recording();

    // Its bytes as they were: a touch, and a write of the same bytes.
    let path = f.file("beta/data/a.txt");
    std::fs::File::options()
        .append(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
    std::fs::write(&path, "other data\n").unwrap();
    watch.assert_quiet(HEADER, Duration::from_secs(3));

    // An editor's save: the new text to a temporary file, renamed over it.
    let temporary = f.file("beta/data/a.txt~");
    std::fs::write(&temporary, "third data\n").unwrap();
    std::fs::rename(&temporary, &path).unwrap();
    let third = watch.cycle();
    assert_eq!(third.number, 3, "the touch started no cycle: {third:?}");
    // The editor's scratch file (`~`) does not count.
    assert_eq!(third.why, "beta/data/a.txt changed", "{third:?}");
    third.assert_ran(&[reads], &[]);
    assert_eq!(
        third.why(reads),
        "file changed: beta/data/a.txt",
        "{third:?}"
    );
    watch.quit();
}

#[test]
fn a_file_the_records_name_counts_though_gitignore_leaves_it_out() {
    let _serial = serial();
    let f = Fixture::new("basic");
    f.write(".gitignore", "/target\nbeta/data/\n");
    // Recorded first: the watch reads, as it starts, what the records name.
    f.test_ok(&[]);
    let mut watch = Watch::start(&f, &[]);
    let first = watch.cycle();
    assert_eq!(first.ran(), BTreeSet::new(), "{first:?}");

    // Out of the tree .gitignore keeps: no cycle.
    f.write("beta/data/unread.txt", "nobody reads this\n");
    watch.assert_quiet(HEADER, Duration::from_secs(3));
    // Named by `reads_data`'s record: a cycle, and that test.
    f.write("beta/data/a.txt", "other data\n");
    let second = watch.cycle();
    assert_eq!(second.why, "beta/data/a.txt changed", "{second:?}");
    second.assert_ran(&["beta::files reads_data"], &[]);
    watch.quit();
}

#[test]
fn a_save_during_a_cycle_cancels_it() {
    let _serial = serial();
    // Run 1 records every test; `counts_runs` (it writes the file it
    // reads) runs again in the watch's first cycle, and holds there.
    let (f, runs, _gate) = held_verdicts(2);
    f.test_ok(&[]);
    let mut watch = Watch::start(&f, &[]);
    wait_for_runs(&runs, 2);
    // The cycle's processes (not the watch itself).
    let held: Vec<(u32, String)> = left_in(&f)
        .into_iter()
        .filter(|(_, cmd)| !cmd.contains(" ekstazi watch"))
        .collect();
    assert!(
        held.iter().any(|(_, cmd)| cmd.contains("/deps/verdicts-")),
        "the held test does not run: {held:?}"
    );
    let records = f.record_bytes();
    assert_eq!(records.len(), VERDICTS_ALL.len());

    f.edit("src/lib.rs", "a * b", "b * a");
    watch.expect("cargo-ekstazi: cycle 1 cancelled: src/lib.rs changed");
    watch.wait_for("── cycle 2: src/lib.rs changed ──");
    for (pid, cmd) in &held {
        assert!(gone(*pid), "{pid} ({cmd}) still runs after the cancel");
    }
    assert_eq!(
        f.record_bytes(),
        records,
        "the cancelled cycle wrote a record"
    );
    let store = Store::new(&f.file(".ekstazi"));
    assert!(matches!(
        store.load(VERDICTS, "counts_runs"),
        Loaded::Found(_)
    ));

    let second = watch.cycle();
    assert_eq!(second.number, 2, "{second:?}");
    second.assert_ran(&[&verdicts("counts_runs"), &verdicts("multiplies")], &[]);
    second.assert_why_starts(&verdicts("multiplies"), "function changed: verdicts::mul");
    watch.quit();
}

#[test]
fn keys_run_every_test_the_failed_ones_the_last_ones_again_or_quit() {
    let _serial = serial();
    // `counts_runs` runs in every cycle, never held: what the selection
    // would be beside the failed test.
    let (f, _runs, _gate) = held_verdicts(1_000_000);
    let mut watch = Watch::start(&f, &[]);
    watch.cycle().assert_ran(VERDICTS_ALL, &[]);
    f.wait_for_background_recording();

    watch.key("a");
    let every = watch.cycle();
    every.assert_header(2, "key a: every test");
    every.assert_ran(VERDICTS_ALL, &[]);
    for label in VERDICTS_ALL {
        assert!(every.why(label).starts_with("forced"), "{every:?}");
    }
    f.wait_for_background_recording();

    f.edit("src/lib.rs", "a * b", "a + b");
    let broke = watch.cycle();
    assert_eq!(broke.why, "src/lib.rs changed", "{broke:?}");
    broke.assert_ran(&[&verdicts("counts_runs")], &[&verdicts("multiplies")]);
    assert!(
        broke.verdict().starts_with("test result: FAILED. "),
        "{broke:?}"
    );
    f.wait_for_background_recording();

    watch.key("f");
    let failures = watch.cycle();
    failures.assert_header(4, "key f: the tests that failed");
    failures.assert_ran(&[], &[&verdicts("multiplies")]);
    f.wait_for_background_recording();

    watch.key("\r");
    let again = watch.cycle();
    again.assert_header(5, "key Enter: the last cycle's tests again");
    again.assert_ran(&[], &[&verdicts("multiplies")]);

    watch.quit();
    assert_eq!(left_in(&f), []);
}

#[test]
fn a_build_error_is_shown_and_the_next_save_recovers() {
    let _serial = serial();
    let f = Fixture::new("basic");
    let mut watch = Watch::start(&f, &[]);
    watch.cycle().assert_ran(BASIC_ALL, &[]);
    f.wait_for_background_recording();

    f.edit("alpha/src/lib.rs", "x * 2", "x * 2 +");
    let failed =
        watch.expect("cargo-ekstazi: cycle 2: the build failed; fix it and save to try again");
    let header = failed
        .find("── cycle 2: alpha/src/lib.rs changed ──")
        .unwrap_or_else(|| panic!("no header for the cycle:\n{}", watch.transcript()));
    let cargo = &failed[header..];
    assert!(
        cargo.contains("error") && cargo.contains("alpha"),
        "cargo's message is not shown:\n{}",
        watch.transcript()
    );
    assert!(!cargo.contains("  PASS  "), "{cargo}");
    watch.expect(IDLE);

    f.edit("alpha/src/lib.rs", "x * 2 +", "x + x");
    let fixed = watch.cycle();
    fixed.assert_header(3, "alpha/src/lib.rs changed");
    fixed.assert_ran(DOUBLE_CALLERS, &[]);
    fixed.assert_why_starts("alpha tests::doubles", "function changed: alpha::double");
    assert!(
        fixed.verdict().starts_with("test result: ok. "),
        "{fixed:?}"
    );
    watch.quit();
}

/// Ctrl-C while a test holds the cycle's verdicts: the watch ends, its
/// test with it, and the records are as they were.
#[test]
fn ctrl_c_during_a_cycle_leaves_nothing_behind() {
    let _serial = serial();
    let (f, runs, _gate) = held_verdicts(2);
    f.test_ok(&[]);
    let records = f.record_bytes();
    let mut watch = Watch::start(&f, &[]);
    wait_for_runs(&runs, 2);
    assert!(
        left_in(&f)
            .iter()
            .any(|(_, cmd)| cmd.contains("/deps/verdicts-")),
        "the held test does not run"
    );

    watch.session.send_control('c').unwrap();
    assert_eq!(watch.exit_code(Duration::from_secs(30)), 130);
    watch.expect("cargo-ekstazi: stopped watching");
    assert_eq!(left_in(&f), []);
    assert!(f.scratch_worktrees("bisect").is_empty());
    assert!(f.scratch_worktrees("merge-check").is_empty());
    assert_eq!(f.record_bytes(), records, "a record changed");
    assert_state_whole(&f);
}

/// Ctrl-C while the cycle's recording holds in a test: the recording is
/// stopped, the held test unrecorded, every record written whole.
#[test]
fn ctrl_c_during_the_recording_stops_it() {
    let _serial = serial();
    // Run 1 is the verdicts', run 2 the recording's.
    let (f, runs, _gate) = held_verdicts(2);
    let mut watch = Watch::start(&f, &[]);
    watch.cycle().assert_ran(VERDICTS_ALL, &[]);
    wait_for_runs(&runs, 2);

    watch.session.send_control('c').unwrap();
    assert_eq!(watch.exit_code(Duration::from_secs(30)), 130);
    watch.expect("cargo-ekstazi: stopped watching");
    assert_eq!(left_in(&f), []);
    assert_state_whole(&f);
    let store = Store::new(&f.file(".ekstazi"));
    assert!(
        matches!(store.load(VERDICTS, "counts_runs"), Loaded::Missing),
        "the held test was recorded"
    );
}

/// Its output piped: no escape codes, no keys; SIGINT ends it.
#[test]
fn piped_it_prints_plain_lines_and_sigint_ends_it() {
    let _serial = serial();
    let f = Fixture::new("basic");
    let mut command = f.command(&["watch"]);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut plain = Plain::new(&mut child);
    let start = plain.line(|l| l.starts_with("cargo-ekstazi: watching "));
    assert!(start.ends_with(" directories)"), "{start}");
    let first = plain.cycle();
    first.assert_header(1, "first run");
    first.assert_ran(BASIC_ALL, &[]);
    f.wait_for_background_recording();

    f.edit("alpha/src/lib.rs", "x * 2", "x + x");
    let second = plain.cycle();
    assert_eq!(second.why, "alpha/src/lib.rs changed", "{second:?}");
    second.assert_ran(DOUBLE_CALLERS, &[]);

    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let since = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "SIGINT did not end it:\n{}",
            plain.lines.join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    plain.line(|l| l == "cargo-ekstazi: stopped watching");
    assert_eq!(status.code(), Some(130), "{}", plain.lines.join("\n"));
    let (stdout, stderr) = plain.finish();
    assert!(!stdout.contains("\x1b["), "escape codes in:\n{stdout}");
    assert!(!stderr.contains("\x1b["), "escape codes in:\n{stderr}");
    assert_eq!(left_in(&f), []);
}

#[test]
fn options_a_cycle_cannot_keep_are_refused_before_any_cycle() {
    let f = Fixture::new("basic");
    for (args, named) in [
        (&["watch", "--audit"][..], "--audit"),
        (&["watch", "--verdict-first=false"], "--verdict-first=false"),
        (&["watch", "--junit", "j.xml"], "--junit"),
        (&["watch", "--report-json", "r.json"], "--report-json"),
        (&["watch", "--", "--list"], "--list"),
    ] {
        let run = f.run(args);
        assert_eq!(run.code(), Some(1), "{args:?}: {run:?}");
        assert!(!run.stdout.contains(HEADER), "{args:?}: {run:?}");
        assert!(run.stderr.contains(named), "{args:?}: {run:?}");
    }
}

#[test]
fn in_a_members_directory_each_cycle_tests_that_member_as_cargo_does() {
    let _serial = serial();
    let f = Fixture::new("basic");
    // `--verdict-first` is what every cycle is given already: not repeated.
    let mut command = f.command(&["watch", "--verdict-first"]);
    let mut child = command
        .current_dir(f.path().join("alpha"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut plain = Plain::new(&mut child);
    let first = plain.cycle();
    first.assert_ran(&["alpha tests::doubles", "alpha tests::triples"], &[]);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    plain.line(|l| l == "cargo-ekstazi: stopped watching");
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(left_in(&f), []);
}

/// A watch's piped output, line by line.
struct Plain {
    lines_in: Receiver<String>,
    /// Every line read so far.
    lines: Vec<String>,
    /// Up to here, consumed.
    cursor: usize,
    stderr: std::thread::JoinHandle<String>,
}

impl Plain {
    fn new(child: &mut Child) -> Plain {
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (send, lines_in) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = stderr.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        });
        Plain {
            lines_in,
            lines: Vec::new(),
            cursor: 0,
            stderr,
        }
    }

    /// Waits for a line that `wanted`; consumes up to it.
    #[track_caller]
    fn line(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        let since = Instant::now();
        loop {
            if let Some(at) = self.lines[self.cursor..].iter().position(|l| wanted(l)) {
                self.cursor += at + 1;
                return self.lines[self.cursor - 1].clone();
            }
            let left = WAIT.saturating_sub(since.elapsed());
            match self.lines_in.recv_timeout(left) {
                Ok(line) => self.lines.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no such line after {WAIT:?}:\n{}", self.lines.join("\n"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "its output ended before such a line:\n{}",
                        self.lines.join("\n")
                    )
                }
            }
        }
    }

    /// Waits for a cycle's end; the cycle. Piped, the idle line has no keys.
    #[track_caller]
    fn cycle(&mut self) -> Cycle {
        let from = self.cursor;
        let idle = self.line(|l| l.starts_with(IDLE));
        assert_eq!(idle, "cargo-ekstazi: watching for changes…");
        let cycle = Cycle::parse(&self.lines[from..self.cursor - 1].join("\n"));
        assert!(cycle.number > 0, "no header: {cycle:?}");
        cycle
    }

    /// Everything it wrote on its standard output and its standard error,
    /// once it ended.
    fn finish(mut self) -> (String, String) {
        while let Ok(line) = self.lines_in.recv_timeout(WAIT) {
            self.lines.push(line);
        }
        (self.lines.join("\n"), self.stderr.join().unwrap())
    }
}
