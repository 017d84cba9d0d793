//! The target runner nextest runs each test binary through:
//! `cargo-ekstazi ekstazi __nextest-runner <binary> <args>...` (hidden).
//!
//! nextest runs every test as `<runner> <binary> --exact <name> --nocapture`
//! and lists tests as `<runner> <binary> --list ...`. For a test, this puts
//! the shim in front of `LD_PRELOAD`, names the test's own trace file
//! (`<traces>/<binary id>/<test>`, from nextest's `NEXTEST_BINARY_ID` and
//! `NEXTEST_TEST_NAME`), notes when it started and what environment it got,
//! and `exec`s the binary: the test keeps the process nextest started, so
//! nextest's timeouts and process-group kills reach it as before. Listings
//! run without the shim. Before the `exec`, the environment is put back as
//! the user had it (our runner variable, the instrumented build's wrapper
//! variables), so a test that runs cargo itself is not affected.
//!
//! A `harness = false` binary is one test for cargo-ekstazi, `(whole
//! binary)`: its listing is answered here without running it (nextest
//! cannot list a binary that is not a libtest-style harness), and the test
//! runs it without arguments, as `cargo ekstazi test` does.

use crate::cargo::libtest::WHOLE_BINARY;
use ekstazi_core::storage::store::escape;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__nextest-runner";
/// The directory the traces go to; unset: no trace (`--no-record`).
pub const TRACE_DIR_ENV: &str = "EKSTAZI_NEXTEST_TRACES";
/// The shim to preload.
pub const SHIM_ENV: &str = "EKSTAZI_NEXTEST_SHIM";
/// Canonical paths of the `harness = false` binaries, one a line.
pub const WHOLE_ENV: &str = "EKSTAZI_NEXTEST_WHOLE";
/// The user's own target runner, chained: its words separated by `\x1f`.
pub const INNER_ENV: &str = "EKSTAZI_NEXTEST_INNER";
/// The variables to put back before the test runs: `NAME=VALUE` (it had that
/// value) or `NAME` (it was unset), separated by `\x1f`.
pub const RESTORE_ENV: &str = "EKSTAZI_NEXTEST_RESTORE";
/// Where each test's own `TMPDIR` is made; unset: tests keep the
/// environment's.
pub const TMP_ENV: &str = "EKSTAZI_NEXTEST_TMP";
/// Separates list entries in the variables above.
pub const SEPARATOR: char = '\x1f';

/// Where the trace of one attempt of one test goes. Later attempts of a
/// retried test get their own file (the shim appends).
pub fn trace_path(dir: &Path, binary_id: &str, test: &str, attempt: u32) -> PathBuf {
    let mut name = escape(test);
    if attempt > 1 {
        // `@` is always escaped by `escape`: no test's name ends like this.
        name.push_str(&format!("@{attempt}"));
    }
    dir.join(escape(binary_id)).join(name)
}

/// The file next to a trace that says when the test started and what
/// environment it was given.
pub fn stamp_path(trace: &Path) -> PathBuf {
    let mut name = trace.as_os_str().to_owned();
    name.push(".start");
    PathBuf::from(name)
}

/// What a stamp says.
pub struct Stamp {
    pub started: SystemTime,
    pub env: Vec<(OsString, OsString)>,
}

/// Reads a stamp written by [`exec`]: the start time in nanoseconds since
/// the epoch on the first line, then `NAME=VALUE` entries each ended by NUL.
pub fn read_stamp(path: &Path) -> Option<Stamp> {
    let bytes = std::fs::read(path).ok()?;
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let nanos: u64 = std::str::from_utf8(&bytes[..newline]).ok()?.parse().ok()?;
    let started = SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos);
    let env = bytes[newline + 1..]
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let eq = entry.iter().position(|&b| b == b'=')?;
            Some((
                OsString::from_vec(entry[..eq].to_vec()),
                OsString::from_vec(entry[eq + 1..].to_vec()),
            ))
        })
        .collect();
    Some(Stamp { started, env })
}

/// Runs as nextest's target runner; `args` are `<binary> <args>...`.
/// Never returns: it becomes the test (or exits with an error).
pub fn exec(args: Vec<OsString>) -> ! {
    let Some((binary, rest)) = args.split_first() else {
        eprintln!("cargo-ekstazi: {SUBCOMMAND} needs a program to run");
        std::process::exit(2);
    };
    let get = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let trace_dir = get(TRACE_DIR_ENV).map(PathBuf::from);
    let tmp = get(TMP_ENV).map(PathBuf::from);
    let shim = get(SHIM_ENV).map(PathBuf::from);
    let inner: Vec<OsString> = get(INNER_ENV)
        .map(|v| split(&v).map(OsStr::to_owned).collect())
        .unwrap_or_default();
    let canonical = std::fs::canonicalize(binary).unwrap_or_else(|_| PathBuf::from(binary));
    let whole = get(WHOLE_ENV).is_some_and(|list| {
        list.as_bytes()
            .split(|&b| b == b'\n')
            .any(|line| line == canonical.as_os_str().as_bytes())
    });
    let listing = rest.iter().any(|a| a == "--list");
    if whole && listing {
        // One test, never ignored.
        if !rest.iter().any(|a| a == "--ignored") {
            println!("{WHOLE_BINARY}: test");
        }
        std::process::exit(0);
    }

    // The environment the test gets: ours undone, then the shim's.
    let mut env = restored_env(get(RESTORE_ENV).unwrap_or_default());
    let identity = (!listing).then(|| test_identity(rest, whole)).flatten();
    if let (Some(parent), Some((id, test, _))) = (&tmp, &identity) {
        match crate::run::scratch::prepare_test_dir(parent, id, test) {
            Ok(dir) => set(&mut env, "TMPDIR", dir.into_os_string()),
            Err(e) => {
                eprintln!(
                    "cargo-ekstazi: cannot make a temporary directory in {}: {e}",
                    parent.display()
                );
                std::process::exit(crate::exit::CANNOT_RUN.into());
            }
        }
    }
    let traced = match (&trace_dir, &shim, identity) {
        (Some(dir), Some(shim), Some((id, test, attempt))) => {
            let trace = trace_path(dir, &id, &test, attempt);
            let preload = preload(shim, &env);
            set(&mut env, "LD_PRELOAD", preload);
            set(&mut env, "EKSTAZI_TRACE_FILE", trace.clone().into());
            if !whole {
                // The harness's main thread is told apart by running this
                // binary (the shim compares with `/proc/self/exe`).
                set(&mut env, "EKSTAZI_LIBTEST", canonical.clone().into());
            }
            Some(trace)
        }
        _ => None,
    };

    let (program, mut command) = test_command(&inner, binary, rest, whole);
    command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(trace) = &traced
        && let Err(e) = write_stamp(trace, &env)
    {
        // Without its stamp the test is still recorded, with the start of
        // the whole run: an older start time is only more cautious.
        eprintln!(
            "cargo-ekstazi: cannot write {}: {e}",
            stamp_path(trace).display()
        );
    }
    let error = command.exec();
    eprintln!(
        "cargo-ekstazi: cannot run {}: {error}",
        Path::new(program).display()
    );
    std::process::exit(crate::exit::CANNOT_RUN.into());
}

/// The environment nextest gave the runner, with what cargo-ekstazi set
/// for nextest undone (`restore`: each variable as the user had it) and
/// the runner's own variables removed.
fn restored_env(restore: OsString) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for entry in split(&restore) {
        let bytes = entry.as_bytes();
        let (name, value) = match bytes.iter().position(|&b| b == b'=') {
            Some(eq) => (&bytes[..eq], Some(&bytes[eq + 1..])),
            None => (bytes, None),
        };
        env.retain(|(k, _)| k.as_bytes() != name);
        if let Some(value) = value {
            env.push((
                OsStr::from_bytes(name).into(),
                OsStr::from_bytes(value).into(),
            ));
        }
    }
    for own in [
        TRACE_DIR_ENV,
        SHIM_ENV,
        WHOLE_ENV,
        INNER_ENV,
        RESTORE_ENV,
        TMP_ENV,
    ] {
        env.retain(|(k, _)| k != own);
    }
    env
}

/// The command that runs the test: the binary, behind the user's own
/// runner if there is one; a `harness = false` binary without nextest's
/// arguments.
fn test_command<'a>(
    inner: &'a [OsString],
    binary: &'a OsString,
    rest: &[OsString],
    whole: bool,
) -> (&'a OsStr, Command) {
    let (program, program_args): (&OsStr, Vec<&OsStr>) = match inner.split_first() {
        Some((runner, runner_args)) => {
            let mut all: Vec<&OsStr> = runner_args.iter().map(OsString::as_os_str).collect();
            all.push(binary);
            (runner.as_os_str(), all)
        }
        None => (binary.as_os_str(), Vec::new()),
    };
    let mut command = Command::new(program);
    command.args(program_args);
    // A `harness = false` binary runs as `cargo ekstazi test` runs it: alone.
    if !whole {
        command.args(rest);
    }
    (program, command)
}

/// `(binary id, test name, attempt)` of the test this process is to run.
fn test_identity(args: &[OsString], whole: bool) -> Option<(String, String, u32)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let binary_id = var("NEXTEST_BINARY_ID")?;
    let test = if whole {
        WHOLE_BINARY.to_owned()
    } else {
        var("NEXTEST_TEST_NAME").or_else(|| {
            let exact = args.iter().position(|a| a == "--exact")?;
            args.get(exact + 1)?.to_str().map(str::to_owned)
        })?
    };
    let attempt = var("NEXTEST_ATTEMPT")
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    Some((binary_id, test, attempt))
}

fn write_stamp(trace: &Path, env: &[(OsString, OsString)]) -> std::io::Result<()> {
    if let Some(dir) = trace.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut out = format!("{nanos}\n").into_bytes();
    for (name, value) in env {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    std::fs::File::create(stamp_path(trace))?.write_all(&out)
}

fn set(env: &mut Vec<(OsString, OsString)>, name: &str, value: OsString) {
    env.retain(|(k, _)| k != name);
    env.push((name.into(), value));
}

/// `LD_PRELOAD` with the shim first and the user's own preloads kept.
fn preload(shim: &Path, env: &[(OsString, OsString)]) -> OsString {
    let mut value = shim.as_os_str().to_owned();
    if let Some((_, existing)) = env.iter().find(|(k, v)| k == "LD_PRELOAD" && !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

fn split(list: &OsStr) -> impl Iterator<Item = &OsStr> {
    list.as_bytes()
        .split(|&b| b == SEPARATOR as u8)
        .filter(|entry| !entry.is_empty())
        .map(OsStr::from_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_named_by_binary_test_and_attempt() {
        let dir = Path::new("/t");
        assert_eq!(
            trace_path(dir, "beta::files", "tests::a", 1),
            Path::new("/t/beta%3A%3Afiles/tests%3A%3Aa")
        );
        assert_eq!(
            trace_path(dir, "gamma::custom", WHOLE_BINARY, 2),
            Path::new("/t/gamma%3A%3Acustom/%28whole%20binary%29@2")
        );
        assert_eq!(stamp_path(Path::new("/t/a/b")), Path::new("/t/a/b.start"));
    }

    #[test]
    fn stamps_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("bin").join("test");
        let env = vec![
            (OsString::from("A"), OsString::from("1=2")),
            (OsString::from("EMPTY"), OsString::new()),
        ];
        let before = SystemTime::now();
        write_stamp(&trace, &env).unwrap();
        let stamp = read_stamp(&stamp_path(&trace)).unwrap();
        assert_eq!(stamp.env, env);
        assert!(stamp.started >= before - std::time::Duration::from_millis(1));
        assert!(read_stamp(&dir.path().join("missing")).is_none());
    }
}
