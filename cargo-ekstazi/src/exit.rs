//! Every exit status `cargo ekstazi` sets, by name, in one list (the usage
//! guide's "Exit status" says the same). Not here: 1, any other error
//! (`ExitCode::FAILURE`), and 2, a command line clap cannot parse. Where `cargo test` or a shell has
//! a status for the same thing, it is that one, so that scripts written for
//! them read ours alike.

/// A test failed, or the tests did not build (`cargo test`'s own); for
/// `merge-check`, a conflict or lost behaviour was found. Also what the
/// rustc wrapper returns for a compiler that ended without a status.
pub const TESTS_FAILED: u8 = 101;

/// `test --audit`: a test the selection would have skipped failed (a miss;
/// a failure alone is [`TESTS_FAILED`]).
pub const MISSED: u8 = 102;

/// What a test's process ends with when cargo-ekstazi, as nextest's
/// target runner, could not start it: its program or its temporary
/// directory could not be made ready (a shell's "cannot execute"). Nextest
/// reports it as that test's failure; `cargo ekstazi nextest` then returns
/// nextest's own status.
pub const CANNOT_RUN: u8 = 126;

/// A second interrupt while the first one's tests were being stopped: the
/// run ends at once, as a shell reports Ctrl-C (128 + `SIGINT`).
pub const INTERRUPTED_AGAIN: u8 = 130;

/// A run a signal stopped: 128 + the signal's number, as a shell reports.
pub fn stopped_by(signal: i32) -> u8 {
    128u8.saturating_add(u8::try_from(signal).unwrap_or(u8::MAX - 128))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_reads_as_a_shell_reports_it() {
        assert_eq!(stopped_by(2), INTERRUPTED_AGAIN);
        assert_eq!(stopped_by(15), 143);
        assert_eq!(stopped_by(1000), 255);
    }
}
