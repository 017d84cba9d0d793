//! The log of the runs a state has seen: one line per run that recorded,
//! for `cargo ekstazi stats` (what the selection saved) and `[run]
//! full-every` (when the last full run was).
//!
//! A text file in the state directory (`runs.log`), a tab-separated line
//! per run, appended. It decides nothing about a test: a line that does not
//! parse is skipped, and the file is cut to its newest [`KEPT`] lines when
//! it grows past twice that.
//!
//! It decides when every test runs, though, and it is not sealed, so its
//! dates are claims: a line dated later than this machine's clock allows
//! ([`CLOCK_SKEW_MS`]) is left out ([`Log::in_the_future`]). Taken, one
//! forged line dated `u64::MAX` was the last full run for ever after, and
//! `[run] full-every` never ran every test again, keyed state or not.

use crate::files::contained::{How, StateDir};
use crate::storage::merge_state::CLOCK_SKEW_MS;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The log's file name in the state directory.
pub const FILE: &str = "runs.log";

/// How many runs the log keeps.
pub const KEPT: usize = 1000;

/// One run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunEntry {
    /// When it ended, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `HEAD`, when in a repository (else empty).
    pub commit: String,
    /// How many tests were selected to run in this run (not those of other
    /// shards).
    pub selected: usize,
    /// How many tests were skipped, a record vouching for them.
    pub skipped: usize,
    /// How many tests passed.
    pub passed: usize,
    /// How many tests failed.
    pub failed: usize,
    /// How many tests passed only after failing (`--retries`).
    pub flaky: usize,
    /// The whole run.
    pub spent: Duration,
    /// The skipped tests' last recorded durations.
    pub saved: Duration,
    /// Every test ran (`--forceall`, `--audit`).
    pub full: bool,
}

impl RunEntry {
    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.at_ms,
            if self.commit.is_empty() {
                "-"
            } else {
                &self.commit
            },
            self.selected,
            self.skipped,
            self.passed,
            self.failed,
            self.flaky,
            self.spent.as_millis(),
            self.saved.as_millis(),
            u8::from(self.full)
        )
    }

    fn parse(line: &str) -> Option<RunEntry> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 10 {
            return None;
        }
        let n = |i: usize| f[i].parse::<usize>().ok();
        let ms = |i: usize| f[i].parse::<u64>().ok().map(Duration::from_millis);
        Some(RunEntry {
            at_ms: f[0].parse().ok()?,
            commit: match f[1] {
                "-" => String::new(),
                c if crate::storage::history::is_commit_id(c) => c.to_owned(),
                _ => return None,
            },
            selected: n(2)?,
            skipped: n(3)?,
            passed: n(4)?,
            failed: n(5)?,
            flaky: n(6)?,
            spent: ms(7)?,
            saved: ms(8)?,
            full: match f[9] {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    }
}

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Appends a run; cuts the log to its newest [`KEPT`] lines when it has
/// grown past twice that.
pub fn append(state_dir: &Path, entry: &RunEntry) -> std::io::Result<()> {
    // Never through a link planted as the log (it would append anywhere).
    let state = StateDir::new(state_dir);
    let how = How {
        append: true,
        create: true,
        ..How::default()
    };
    let mut file = state.open(&path(state_dir), how)?;
    file.write_all(entry.line().as_bytes())?;
    drop(file);
    let entries = read(state_dir).entries;
    if entries.len() > 2 * KEPT {
        let kept: String = entries[entries.len() - KEPT..]
            .iter()
            .map(RunEntry::line)
            .collect();
        state.write_atomic(&path(state_dir), kept.as_bytes())?;
    }
    Ok(())
}

/// What the log holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Log {
    /// The runs, oldest first.
    pub entries: Vec<RunEntry>,
    /// Lines left out for their date, later than this machine's clock
    /// allows: for the caller to say, once.
    pub in_the_future: usize,
}

/// The runs the log holds, oldest first; unreadable lines, and lines dated
/// later than now allows, are skipped.
pub fn read(state_dir: &Path) -> Log {
    read_at(state_dir, crate::model::record::now_ms())
}

fn read_at(state_dir: &Path, now_ms: u64) -> Log {
    let Ok(bytes) = StateDir::new(state_dir).read_bounded(&path(state_dir), 64 << 20) else {
        return Log::default();
    };
    let mut log = Log::default();
    for entry in String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(RunEntry::parse)
    {
        if entry.at_ms > now_ms.saturating_add(CLOCK_SKEW_MS) {
            log.in_the_future += 1;
        } else {
            log.entries.push(entry);
        }
    }
    log
}

/// What a set of runs added up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// How many runs.
    pub runs: usize,
    /// Tests selected, over every run.
    pub selected: usize,
    /// Tests skipped, over every run.
    pub skipped: usize,
    /// Tests that failed, over every run.
    pub failed: usize,
    /// Tests that passed only after failing, over every run.
    pub flaky: usize,
    /// The runs' time together.
    pub spent: Duration,
    /// The skipped tests' last recorded durations together: the time the
    /// selection saved.
    pub saved: Duration,
}

impl Totals {
    /// What `entries` add up to.
    pub fn of<'a>(entries: impl IntoIterator<Item = &'a RunEntry>) -> Totals {
        let mut t = Totals::default();
        for e in entries {
            t.runs += 1;
            t.selected += e.selected;
            t.skipped += e.skipped;
            t.failed += e.failed;
            t.flaky += e.flaky;
            t.spent += e.spent;
            t.saved += e.saved;
        }
        t
    }
}

/// The newest full run's end, if the log has one.
pub fn last_full(entries: &[RunEntry]) -> Option<&RunEntry> {
    entries.iter().rev().find(|e| e.full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_appended_read_back_and_damage_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |at_ms, full| RunEntry {
            at_ms,
            commit: "a".repeat(40),
            selected: 2,
            skipped: 3,
            passed: 2,
            failed: 0,
            flaky: 0,
            spent: Duration::from_millis(1500),
            saved: Duration::from_millis(250),
            full,
        };
        append(dir.path(), &entry(1, true)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(FILE))
            .unwrap()
            .write_all(b"garbage\n1\tHEAD\t1\t1\t1\t1\t1\t1\t1\t1\n")
            .unwrap();
        append(dir.path(), &entry(2, false)).unwrap();
        let read = read(dir.path()).entries;
        assert_eq!(read, [entry(1, true), entry(2, false)]);
        let totals = Totals::of(&read);
        assert_eq!((totals.runs, totals.skipped), (2, 6));
        assert_eq!(totals.saved, Duration::from_millis(500));
        assert_eq!(last_full(&read).map(|e| e.at_ms), Some(1));
    }

    #[test]
    fn the_log_is_cut_to_its_newest_runs() {
        let dir = tempfile::tempdir().unwrap();
        for at_ms in 0..(2 * KEPT as u64 + 1) {
            append(
                dir.path(),
                &RunEntry {
                    at_ms,
                    ..RunEntry::default()
                },
            )
            .unwrap();
        }
        let read = read(dir.path()).entries;
        assert_eq!(read.len(), KEPT);
        assert_eq!(read.last().unwrap().at_ms, 2 * KEPT as u64);
    }

    #[test]
    fn a_line_dated_in_the_future_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_800_000_000_000;
        let entry = |at_ms, full| RunEntry {
            at_ms,
            full,
            ..RunEntry::default()
        };
        append(dir.path(), &entry(now - 1000, true)).unwrap();
        // Within the skew allowed: kept.
        append(dir.path(), &entry(now + CLOCK_SKEW_MS, false)).unwrap();
        // A forged full run at the end of time, and one just past the skew.
        append(dir.path(), &entry(u64::MAX, true)).unwrap();
        append(dir.path(), &entry(now + CLOCK_SKEW_MS + 1, true)).unwrap();
        let log = read_at(dir.path(), now);
        assert_eq!(log.in_the_future, 2);
        assert_eq!(
            log.entries,
            [entry(now - 1000, true), entry(now + CLOCK_SKEW_MS, false)]
        );
        assert_eq!(last_full(&log.entries).map(|e| e.at_ms), Some(now - 1000));
    }
}
