//! The recording that follows a verdict-first run, in the background.
//!
//! With `--verdict-first` the selected tests' verdicts come first, from a
//! run that traces nothing (`crate::run::verdicts`); this module then starts
//! cargo-ekstazi again, detached and at the lowest priority, with the same
//! arguments, to run and record those tests one process each, as an
//! ordinary run does. Its output goes to a log in the state directory, and
//! its process id to a file beside it.
//!
//! Any later run stops it before it builds ([`cancel`]): the build may
//! replace the binaries it runs, and a run that records needs the state
//! directory's lock. What it had not recorded yet keeps its old record, and
//! so runs again: stopping it is always safe.
//!
//! The tests that failed in the verdict run are handed to it
//! ([`failed_in_verdicts`]): their records say failed whatever the recording
//! run saw, so that a test that failed in front of the user is never
//! vouched for by a pass it had alone.

use anyhow::{Context, Result};
use ekstazi_core::files::contained::{How, StateDir};
use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the background run's environment: the file that lists the tests
/// that failed in the verdict run. Its presence is what makes a run the
/// recording of a verdict-first run.
const ENV: &str = "EKSTAZI_RECORD_AFTER_VERDICTS";

/// In the state directory: the background run's process id.
const PID_FILE: &str = "recording.pid";
/// In the state directory: its output.
pub const LOG_FILE: &str = "recording.log";
/// In the state directory: the tests that failed in the verdict run.
const FAILED_FILE: &str = "recording.failed";

/// How long a stopped recording may take to finish the tests it is
/// running and write their records before it is killed.
const GRACE: Duration = Duration::from_secs(10);

/// A test as the verdict run and the recording name it: its binary's key
/// and its name.
pub fn label(binary_key: &str, name: &str) -> String {
    format!("{binary_key}\t{name}")
}

/// In the background run: the tests that failed in the verdict run, by
/// [`label`]; `None` in any other run. Takes the variable out of this
/// process's environment, so that no test is given it.
///
/// Call it first, before any thread starts.
pub fn failed_in_verdicts() -> Result<Option<HashSet<String>>> {
    let Some(file) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    // SAFETY: called at the start of the command, before any other thread
    // exists, so nothing reads the environment while it changes.
    unsafe { std::env::remove_var(ENV) };
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "cannot read the verdict run's failures from {}",
            Path::new(&file).display()
        )
    })?;
    Ok(Some(text.lines().map(str::to_owned).collect()))
}

/// Starts the recording of a verdict-first run: this command again, with
/// the same arguments, detached from the terminal, at the lowest priority,
/// its output in [`LOG_FILE`]. Returns the log's path.
pub fn spawn(state_dir: &Path, failed: &[String]) -> Result<PathBuf> {
    // Every file through the state directory's descriptor: a link planted
    // as one of them is replaced, never written through.
    let state = StateDir::new(state_dir);
    let failed_file = state_dir.join(FAILED_FILE);
    let mut listing = failed.join("\n");
    listing.push('\n');
    state
        .write_atomic(&failed_file, listing.as_bytes())
        .with_context(|| format!("cannot write {}", failed_file.display()))?;
    let log_path = state_dir.join(LOG_FILE);
    let log = state
        .open(&log_path, REPLACE)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let me = std::env::current_exe().context("cannot find cargo-ekstazi's own executable")?;
    let mut command = Command::new(me);
    crate::secrets::hand_on(&mut command);
    command
        .args(std::env::args_os().skip(1))
        .env(ENV, &failed_file)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid and setpriority are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            // A session of its own: the terminal's Ctrl-C and hang-up are
            // the user's run's, not its; and one signal to its process
            // group stops it with its build.
            libc::setsid();
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            Ok(())
        });
    }
    let child = command
        .spawn()
        .context("cannot start the recording in the background")?;
    state
        .write_atomic(&state_dir.join(PID_FILE), child.id().to_string().as_bytes())
        .context("cannot write the background recording's process id")?;
    Ok(log_path)
}

/// Stops the recording a verdict-first run left running on this state
/// directory, if one is, and waits for it to end. Returns its process id.
pub fn cancel(state_dir: &Path) -> Option<u32> {
    let state = StateDir::new(state_dir);
    let pid_file = state_dir.join(PID_FILE);
    let pid = recording_pid(state_dir)?;
    if !is_recording_of(pid, state_dir) {
        let _ = state.remove(&pid_file);
        return None;
    }
    // Its whole process group (its cargo and rustc too); it stops its
    // tests itself, and keeps the records of those that finished.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let deadline = Instant::now() + GRACE;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if alive(pid) {
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(1);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = state.remove(&pid_file);
    Some(pid as u32)
}

/// Whether a verdict-first run's recording runs on this state directory.
pub fn runs(state_dir: &Path) -> bool {
    recording_pid(state_dir).is_some_and(|pid| is_recording_of(pid, state_dir))
}

/// The process id the state directory's [`PID_FILE`] names, unless it is
/// this process's.
fn recording_pid(state_dir: &Path) -> Option<i32> {
    let state = StateDir::new(state_dir);
    let text = state.read_bounded(&state_dir.join(PID_FILE), 32).ok()?;
    let pid: i32 = String::from_utf8(text).ok()?.trim().parse().ok()?;
    (pid > 0 && pid as u32 != std::process::id()).then_some(pid)
}

/// In the background run, at its end: its process id file goes, unless a
/// newer run's has replaced it.
pub fn finished(state_dir: &Path) {
    let state = StateDir::new(state_dir);
    let pid_file = state_dir.join(PID_FILE);
    let mine = std::process::id().to_string();
    if state
        .read_bounded(&pid_file, 32)
        .is_ok_and(|text| text.trim_ascii() == mine.as_bytes())
    {
        let _ = state.remove(&pid_file);
    }
}

/// Whether `pid` is a live cargo-ekstazi recording for this state
/// directory: a process id file can outlive its process, the id be given
/// to another, and a state directory copied from elsewhere (a restored
/// cache, another checkout) name another workspace's recording, which is
/// not ours to stop. The recording was started with [`ENV`] naming this
/// state directory's failures file; its initial environment still says so.
fn is_recording_of(pid: i32, state_dir: &Path) -> bool {
    if !alive(pid) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let program = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let named = Path::new(std::ffi::OsStr::from_bytes(program))
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("cargo-ekstazi"));
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut ours = ENV.as_bytes().to_vec();
    ours.push(b'=');
    ours.extend_from_slice(state_dir.join(FAILED_FILE).as_os_str().as_bytes());
    named && environ.split(|&b| b == 0).any(|entry| entry == ours)
}

/// Opening the log: created, or emptied if there.
const REPLACE: How = How {
    write: true,
    append: false,
    create: true,
    truncate: true,
};

fn alive(pid: i32) -> bool {
    crate::processes::alive(pid as u32)
}
