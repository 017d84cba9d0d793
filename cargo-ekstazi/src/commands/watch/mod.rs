//! `cargo ekstazi watch`: on every save, the affected tests, verdicts first.
//!
//! A loop of cycles. Each cycle is one `cargo ekstazi test --verdict-first`
//! with the user's options ([`cycle`]): the build, the selection, the
//! verdicts, and the recording left to run in the background, which the
//! next cycle's run stops before it builds (what it had not recorded runs
//! again). What starts a cycle is a save ([`trigger`]: file events, the
//! ignore rules, a quiet period that gathers a burst into one, and a check
//! that the file's bytes did change) or a key ([`screen`]). The watcher
//! decides only *when* a cycle starts, never *what* it runs: every cycle
//! checksums what the records name, as any run does, so a file event lost
//! (an overflowed queue, a file outside the watched tree) can delay a
//! cycle but never skip a test.
//!
//! A save while a cycle runs cancels it: its process group is stopped
//! (SIGTERM, then SIGKILL), which writes no record, and the next cycle
//! starts. Quitting stops the cycle and the background recording, which
//! keeps the records of the tests it finished.

mod cycle;
mod screen;
mod trigger;

use crate::cli::{WatchArgs, parse_harness_args};
use crate::exit;
use anyhow::{Context, Result, bail};
use cycle::{Cycle, Extra, Outcome, Summary};
use screen::{Key, Screen};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;
use trigger::Trigger;

/// What the loop waits for.
pub enum Event {
    /// Files whose bytes changed (empty: the watcher lost track, and
    /// anything may have).
    Changed(Vec<PathBuf>),
    /// A key, in a terminal.
    Key(Key),
    /// SIGINT, SIGTERM or SIGHUP.
    Signal(i32),
    /// The running cycle's process ended.
    Ended(u64),
}

/// Where the workspace lives, for the watcher and the cycles.
#[derive(Clone)]
pub struct Places {
    pub root: PathBuf,
    pub target_dir: PathBuf,
    pub state_dir: PathBuf,
}

pub fn run(args: WatchArgs) -> Result<ExitCode> {
    let test = &args.test;
    if test.report_json.is_some() || test.junit.is_some() {
        bail!("`watch` writes its own report each cycle: --report-json and --junit are for `test`");
    }
    if test.audit || test.verdict_first == Some(false) {
        bail!(
            "`watch` gives each cycle's verdicts first: --audit and --verdict-first=false are for `test`"
        );
    }
    // The same errors `test` would give, once, rather than every cycle.
    parse_harness_args(test.filter.as_deref(), &test.libtest)?;
    let places = places(&args)?;
    let (events, receiver) = mpsc::channel();
    let screen = Screen::open(!args.no_clear, events.clone())?;
    catch_signals(events.clone())?;
    let trigger = Trigger::start(&places, events.clone())?;
    screen.line(&format!(
        "cargo-ekstazi: watching {} ({} directories)",
        places.root.display(),
        trigger.directories()
    ));
    let mut watch = Watch {
        places,
        forwarded: forwarded_args(std::env::args_os()),
        screen,
        events,
        trigger,
        number: 0,
        last: None,
        cancelled_by: None,
        waiting: None,
    };
    watch.run(receiver)
}

/// The workspace's root, target directory and state directory, as the
/// test command finds them.
fn places(args: &WatchArgs) -> Result<Places> {
    let ws = crate::cargo::workspace::Workspace::load(&args.test.cargo)?;
    let state_dir = match &args.test.selection.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => super::state_dir_at(&ws.root)?,
    };
    Ok(Places {
        root: ws.root,
        target_dir: ws.target_dir,
        state_dir,
    })
}

/// The command line after `watch`, less what only `watch` reads and the
/// `--verdict-first` every cycle is given: each cycle's `test` gets the
/// rest as given.
fn forwarded_args(argv: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut args = argv.skip(1).peekable();
    if args.peek().is_some_and(|arg| arg == "ekstazi") {
        args.next();
    }
    let mut forwarded = Vec::new();
    let mut harness = false;
    for arg in args.skip_while(|arg| arg != "watch").skip(1) {
        harness |= arg == "--";
        let own = ["--no-clear", "--verdict-first", "--verdict-first=true"];
        if harness || !own.iter().any(|own| arg == *own) {
            forwarded.push(arg);
        }
    }
    forwarded
}

/// SIGINT, SIGTERM and SIGHUP become events: the loop stops the cycle and
/// the recording before it ends.
fn catch_signals(events: Sender<Event>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot watch for SIGINT, SIGTERM and SIGHUP")?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if events.send(Event::Signal(signal)).is_err() {
                return;
            }
        }
    });
    Ok(())
}

struct Watch {
    places: Places,
    forwarded: Vec<OsString>,
    screen: Screen,
    events: Sender<Event>,
    trigger: Trigger,
    /// The last cycle's number.
    number: u64,
    /// What the last cycle that ended ran, and how.
    last: Option<Summary>,
    /// The files whose change cancelled the cycles before the running one,
    /// and how many cycles in a row they cancelled.
    cancelled_by: Option<(Vec<PathBuf>, usize)>,
    /// A cycle to start when the running one ends.
    waiting: Option<(String, Extra)>,
}

/// What a save does while a cycle may run.
#[derive(Debug, PartialEq, Eq)]
enum OnSave {
    /// No cycle runs: one starts.
    Start,
    /// The running cycle is cancelled, and one starts.
    Cancel,
    /// The next cycle starts when the running one ends: the files that
    /// cancelled the cycles before it, [`CANCELS_IN_A_ROW`] of them, changed
    /// again: most likely their own tests write them, and cancelling this
    /// one too would never end.
    Wait,
}

/// How many cycles in a row the same files may cancel.
const CANCELS_IN_A_ROW: usize = 2;

fn on_save(
    running: bool,
    cancelled_by: Option<&(Vec<PathBuf>, usize)>,
    paths: &[PathBuf],
) -> OnSave {
    match (running, cancelled_by) {
        (false, _) => OnSave::Start,
        (true, Some((files, times)))
            if !paths.is_empty() && files == paths && *times >= CANCELS_IN_A_ROW =>
        {
            OnSave::Wait
        }
        (true, _) => OnSave::Cancel,
    }
}

/// Why the loop ends.
enum Quit {
    Key,
    Signal(i32),
}

impl Watch {
    fn run(&mut self, receiver: Receiver<Event>) -> Result<ExitCode> {
        let mut running = Some(self.start("first run".to_owned(), Extra::None)?);
        let quit = loop {
            let event = receiver.recv().context("the watch's events stopped")?;
            match self.on(event, &mut running)? {
                Some(quit) => break quit,
                None => continue,
            }
        };
        if let Some(cycle) = running.take() {
            cycle.cancel();
        }
        if crate::run::background::cancel(&self.places.state_dir).is_some() {
            self.screen.line(
                "cargo-ekstazi: stopped the recording in the background; \
                 the tests it had not recorded run next time",
            );
        }
        self.screen.line("cargo-ekstazi: stopped watching");
        self.screen.close();
        Ok(match quit {
            Quit::Key => ExitCode::SUCCESS,
            Quit::Signal(signal) => ExitCode::from(exit::stopped_by(signal)),
        })
    }

    /// One event: a cycle to start (cancelling the running one), to end,
    /// or the loop to end.
    fn on(&mut self, event: Event, running: &mut Option<Cycle>) -> Result<Option<Quit>> {
        let (why, extra) = match event {
            Event::Signal(signal) => return Ok(Some(Quit::Signal(signal))),
            Event::Key(Key::Quit) => return Ok(Some(Quit::Key)),
            Event::Ended(number) => {
                if let Some(cycle) = running.take_if(|cycle| cycle.number == number) {
                    self.ended(cycle);
                    if let Some((why, extra)) = self.waiting.take() {
                        *running = Some(self.start(why, extra)?);
                    }
                }
                return Ok(None);
            }
            Event::Changed(paths) => {
                let why = self.changed(&paths);
                match on_save(running.is_some(), self.cancelled_by.as_ref(), &paths) {
                    OnSave::Wait => {
                        self.screen.line(&format!(
                            "cargo-ekstazi: {why} again: the next cycle starts when this one ends"
                        ));
                        self.waiting = Some((why, Extra::None));
                        return Ok(None);
                    }
                    OnSave::Cancel => {
                        let times = match &self.cancelled_by {
                            Some((files, times)) if *files == paths => times + 1,
                            _ => 1,
                        };
                        self.cancelled_by = Some((paths, times));
                    }
                    OnSave::Start => self.cancelled_by = None,
                }
                (why, Extra::None)
            }
            Event::Key(key) => match self.asked(key) {
                Some(asked) => {
                    self.cancelled_by = None;
                    asked
                }
                None => return Ok(None),
            },
        };
        self.waiting = None;
        if let Some(cycle) = running.take() {
            self.screen.line(&format!(
                "cargo-ekstazi: cycle {} cancelled: {why}",
                cycle.number
            ));
            cycle.cancel();
        }
        *running = Some(self.start(why, extra)?);
        Ok(None)
    }

    /// What a key asks for, or `None` when there is nothing to do.
    fn asked(&self, key: Key) -> Option<(String, Extra)> {
        match key {
            Key::All => Some(("key a: every test".to_owned(), Extra::All)),
            Key::Failures => {
                let failed = self.last.as_ref().map(Summary::failed).unwrap_or_default();
                if failed.is_empty() {
                    self.screen
                        .line("cargo-ekstazi: no test failed in the last cycle (f)");
                    return None;
                }
                Some((
                    "key f: the tests that failed".to_owned(),
                    Extra::Only(failed),
                ))
            }
            Key::Rerun => {
                let ran = self.last.as_ref().map(Summary::ran).unwrap_or_default();
                let extra = match ran.is_empty() {
                    true => Extra::None,
                    false => Extra::Only(ran),
                };
                Some(("key Enter: the last cycle's tests again".to_owned(), extra))
            }
            Key::Quit => None,
        }
    }

    /// The header's words for a save.
    fn changed(&self, paths: &[PathBuf]) -> String {
        let show = |path: &Path| {
            path.strip_prefix(&self.places.root)
                .unwrap_or(path)
                .display()
                .to_string()
        };
        match paths {
            [] => "files changed (the watcher lost count)".to_owned(),
            [one] => format!("{} changed", show(one)),
            [first, rest @ ..] => format!("{} and {} more changed", show(first), rest.len()),
        }
    }

    fn start(&mut self, why: String, extra: Extra) -> Result<Cycle> {
        self.number += 1;
        self.screen.clear();
        self.screen
            .line(&format!("── cycle {}: {why} ──", self.number));
        Cycle::start(self.number, &self.forwarded, extra, self.events.clone())
    }

    /// What a cycle that ended ran, or why it ran nothing. A report it
    /// left unreadable ends that cycle's summary, not the watch.
    fn ended(&mut self, cycle: Cycle) {
        let number = cycle.number;
        let spent = Instant::now() - cycle.started;
        match cycle.finish() {
            Err(e) => self
                .screen
                .line(&format!("cargo-ekstazi: cycle {number}: {e:#}")),
            Ok(Outcome::Reported(summary)) => {
                for line in summary.lines() {
                    self.screen.line(&line);
                }
                self.last = Some(summary);
            }
            Ok(Outcome::BuildFailed) => self.screen.line(&format!(
                "cargo-ekstazi: cycle {number}: the build failed; fix it and save to try again"
            )),
            Ok(Outcome::Failed(status)) => self.screen.line(&format!(
                "cargo-ekstazi: cycle {number}: the run ended ({}) before its report",
                cycle::describe(status)
            )),
        }
        self.trigger.refresh_named(&self.places);
        self.screen.idle(spent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn files_that_cancelled_two_cycles_in_a_row_wait_for_the_third() {
        let lib = vec![PathBuf::from("src/lib.rs")];
        let out = vec![PathBuf::from("out.txt")];
        assert_eq!(on_save(false, Some(&(lib.clone(), 5)), &lib), OnSave::Start);
        assert_eq!(on_save(true, None, &lib), OnSave::Cancel);
        assert_eq!(on_save(true, Some(&(lib.clone(), 1)), &lib), OnSave::Cancel);
        assert_eq!(on_save(true, Some(&(out, 2)), &lib), OnSave::Cancel);
        assert_eq!(on_save(true, Some(&(lib.clone(), 2)), &lib), OnSave::Wait);
        // Lost events say nothing of which files: they cancel.
        assert_eq!(on_save(true, Some(&(Vec::new(), 2)), &[]), OnSave::Cancel);
    }

    #[test]
    fn only_what_watch_reads_stays_behind() {
        let forwarded = forwarded_args(
            words(
                "cargo-ekstazi ekstazi watch --no-clear -p a --verdict-first parse -- --no-clear",
            )
            .into_iter(),
        );
        assert_eq!(forwarded, words("-p a parse -- --no-clear"));
        let direct = forwarded_args(words("cargo-ekstazi watch -v").into_iter());
        assert_eq!(direct, words("-v"));
        assert!(forwarded_args(words("cargo-ekstazi ekstazi watch").into_iter()).is_empty());
    }
}
