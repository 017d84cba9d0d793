//! The progress bar of a run, on a terminal only: its length is the
//! expected time of the selected tests (their recorded durations), so that
//! its ETA weighs a slow test as much as it takes.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: Option<ProgressBar>,
    tests: usize,
    done: usize,
}

impl Progress {
    /// A bar for tests expected to take `expected` in all, or none when
    /// stderr is not a terminal (or in CI): plain lines then.
    pub fn new(expected: Duration, tests: usize, jobs: usize) -> Progress {
        let bar = (crate::style::interactive() && tests > 0).then(|| {
            // Tests run `jobs` at a time: the bar measures elapsed wall time.
            let length = expected.as_millis() as u64 / jobs.max(1) as u64;
            let bar =
                ProgressBar::with_draw_target(Some(length.max(1)), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>12.green.bold} [{elapsed_precise}] [{bar:30}] {msg} (ETA {eta})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix("Running");
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        let progress = Progress {
            bar,
            tests,
            done: 0,
        };
        progress.show_count();
        progress
    }

    /// Runs `print` with the bar out of the way.
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// One more test finished, expected to take `expected` (per job).
    pub fn advance(&mut self, expected: Duration, jobs: usize) {
        self.done += 1;
        if let Some(bar) = &self.bar {
            bar.inc(expected.as_millis() as u64 / jobs.max(1) as u64);
        }
        self.show_count();
    }

    fn show_count(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}/{} tests", self.done, self.tests));
        }
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
