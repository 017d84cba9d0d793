//! Driving the real `cargo-ekstazi` binary on a copy of a fixture project.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fixture project copied into a temporary directory.
pub struct Fixture {
    /// Removed when the fixture is dropped.
    _root: tempfile::TempDir,
    /// The checkout, inside `_root`.
    dir: PathBuf,
    /// The temporary directory of every command run in it (cargo-ekstazi
    /// keeps its own root there): removed with the fixture, and apart from
    /// the other fixtures' and the machine's.
    tmp: tempfile::TempDir,
    /// Set for every command run in it.
    env: Vec<(String, String)>,
}

/// What one `cargo ekstazi test` did.
pub struct TestRun {
    pub output: Output,
    pub stdout: String,
    pub stderr: String,
}

impl TestRun {
    /// `(status, label)` of every test that ran, from the runner's
    /// `  STATUS [  0.003s] binary test` lines.
    fn finished(&self) -> impl Iterator<Item = (&str, String)> {
        self.stdout.lines().filter_map(|line| {
            let (status, rest) = line.trim_start().split_once(" [")?;
            let (_, label) = rest.split_once("s] ")?;
            ["PASS", "FAIL", "CRASH", "TIMEOUT", "INTERRUPTED"]
                .contains(&status)
                .then(|| (status, label.to_owned()))
        })
    }

    /// Labels (`binary test`) of the tests that ran, whatever their outcome.
    pub fn ran(&self) -> BTreeSet<String> {
        self.finished().map(|(_, label)| label).collect()
    }

    /// Labels of the tests that ran and did not pass.
    pub fn failed(&self) -> BTreeSet<String> {
        self.finished()
            .filter(|(status, _)| *status != "PASS")
            .map(|(_, label)| label)
            .collect()
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
}

impl std::fmt::Debug for TestRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {} (disk free where fixtures build: {})\n--- stdout\n{}\n--- stderr\n{}",
            self.output.status,
            free_disk(),
            self.stdout,
            self.stderr
        )
    }
}

/// Free space in the directory fixtures are copied to and built in, for
/// failure messages: a fixture's build that ran out of disk fails far from
/// the cause, and a truncated log may not reach cargo's own message.
fn free_disk() -> String {
    let Ok(dir) =
        std::ffi::CString::new(std::env::temp_dir().into_os_string().into_encoded_bytes())
    else {
        return "unknown".to_owned();
    };
    // SAFETY: `statvfs` only writes the plain struct it is given.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(dir.as_ptr(), &mut stat) } != 0 {
        return "unknown".to_owned();
    }
    format!(
        "{:.1} GB",
        stat.f_bavail as f64 * stat.f_frsize as f64 / 1e9
    )
}

impl Fixture {
    pub fn new(name: &str) -> Fixture {
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        let dir = tempfile::Builder::new()
            .prefix("ekstazi-e2e")
            .tempdir()
            .unwrap();
        copy_tree(&source, dir.path(), false);
        Fixture {
            dir: dir.path().to_path_buf(),
            _root: dir,
            tmp: new_tmp(),
            env: Vec::new(),
        }
    }

    /// A fixture in a directory the caller owns (and removes).
    pub fn at(dir: &Path) -> Fixture {
        Fixture {
            dir: dir.to_path_buf(),
            _root: tempfile::tempdir().unwrap(),
            tmp: new_tmp(),
            env: Vec::new(),
        }
    }

    /// Sets an environment variable for every command run in the fixture.
    pub fn with_env(mut self, key: &str, value: &str) -> Fixture {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A copy of this checkout, records included, in another directory (as
    /// a CI cache restores them), without build output. The directory's
    /// name has the same length: the smart checksum of a binary erases the
    /// checkout's path, but a path of another length still changes the
    /// sizes of the sections that embed it.
    pub fn checkout_elsewhere(&self) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("ekstazi-e2e")
            .tempdir()
            .unwrap();
        copy_tree(self.path(), dir.path(), true);
        Fixture {
            dir: dir.path().to_path_buf(),
            _root: dir,
            tmp: new_tmp(),
            env: self.env.clone(),
        }
    }

    /// This checkout, records and build output included, moved to another
    /// directory named `name` (the old one is gone).
    pub fn moved_to(self, name: &str) -> Fixture {
        let root = tempfile::Builder::new()
            .prefix("ekstazi-e2e")
            .tempdir()
            .unwrap();
        let dir = root.path().join(name);
        std::fs::rename(&self.dir, &dir).unwrap();
        Fixture {
            _root: root,
            dir,
            tmp: self.tmp,
            env: self.env,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.as_path()
    }

    /// The `TMPDIR` of the commands run in it.
    /// cargo-ekstazi's temporary root is the only thing in the fixture's
    /// `TMPDIR`, and holds nothing of the tests that ran.
    pub fn assert_scratch_root_empty(&self) {
        let roots: Vec<_> = std::fs::read_dir(self.tmp())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(roots.len(), 1, "{roots:?}");
        assert_eq!(std::fs::read_dir(&roots[0]).unwrap().count(), 0);
    }

    pub fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    pub fn file(&self, rel: &str) -> PathBuf {
        self.dir.as_path().join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let path = self.file(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.file(rel)).unwrap()
    }

    /// Replaces one snippet in a source file, which must contain it.
    pub fn edit(&self, rel: &str, from: &str, to: &str) {
        let text = self.read(rel);
        assert!(text.contains(from), "{rel} does not contain {from:?}");
        self.write(rel, &text.replacen(from, to, 1));
    }

    /// `git <args>` in the fixture, which must succeed; its standard output.
    /// Identity and dates come from the test, not from the machine.
    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(args)
            .current_dir(self.dir.as_path())
            .env("GIT_AUTHOR_NAME", "e2e")
            .env("GIT_AUTHOR_EMAIL", "e2e@example.com")
            .env("GIT_COMMITTER_NAME", "e2e")
            .env("GIT_COMMITTER_EMAIL", "e2e@example.com")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The fixture as the first commit of a new repository on `main`.
    pub fn in_git(self) -> Fixture {
        self.git(&["init", "-q", "-b", "main"]);
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", "base"]);
        self
    }

    /// A commit that changes nothing; its id.
    pub fn commit_empty(&self, message: &str) -> String {
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Commits every change to tracked files; the new commit's id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["commit", "-q", "-a", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// `cargo ekstazi <args>` in the fixture, with the fixture's own target directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = self.program(Path::new(env!("CARGO_BIN_EXE_cargo-ekstazi")));
        command.arg("ekstazi").args(args);
        command
    }

    /// Another program run in the fixture, in the environment `command`
    /// gives `cargo ekstazi`.
    pub fn program(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.current_dir(self.dir.as_path());
        // The suite may itself run on CI or under a user's settings: a
        // test that wants CI's behaviour (louder notes), colour, or an
        // option from the environment sets it itself.
        for name in [
            "CARGO_TARGET_DIR",
            "RUST_TEST_THREADS",
            "CI",
            "CARGO_TERM_COLOR",
        ] {
            command.env_remove(name);
        }
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if name_text.starts_with("EKSTAZI_")
                || name_text.starts_with("NEXTEST_")
                || name_text == "NO_COLOR"
            {
                command.env_remove(&name);
            }
        }
        command.env("TMPDIR", self.tmp.path());
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    pub fn run(&self, args: &[&str]) -> TestRun {
        self.run_with(args, &[])
    }

    pub fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> TestRun {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        let output = command.output().unwrap();
        TestRun {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            output,
        }
    }

    /// `cargo ekstazi test <args>`, which must succeed.
    pub fn test_ok(&self, args: &[&str]) -> TestRun {
        let mut all = vec!["test"];
        all.extend_from_slice(args);
        let run = self.run(&all);
        assert_eq!(run.code(), Some(0), "{run:?}");
        run
    }

    /// `cargo ekstazi list --json <args>`.
    pub fn list(&self, args: &[&str]) -> Value {
        self.list_with(args, &[])
    }

    /// `cargo ekstazi list --json <args>` with extra environment variables.
    pub fn list_with(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        let mut all = vec!["list", "--json"];
        all.extend_from_slice(args);
        let run = self.run_with(&all, env);
        assert_eq!(run.code(), Some(0), "{run:?}");
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
    }

    /// `cargo ekstazi test <args>` with extra environment variables, which must succeed.
    pub fn test_ok_with(&self, args: &[&str], env: &[(&str, &str)]) -> TestRun {
        let mut all = vec!["test"];
        all.extend_from_slice(args);
        let run = self.run_with(&all, env);
        assert_eq!(run.code(), Some(0), "{run:?}");
        run
    }

    /// The selected tests of a listing, each with its reasons.
    pub fn selected(&self, args: &[&str]) -> Vec<(String, Vec<String>)> {
        self.selected_with(args, &[])
    }

    /// [`Fixture::selected`] with extra environment variables.
    pub fn selected_with(&self, args: &[&str], env: &[(&str, &str)]) -> Vec<(String, Vec<String>)> {
        let list = self.list_with(args, env);
        list["tests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["selected"].as_bool().unwrap())
            .map(|t| {
                let label = label_of(t);
                let reasons = t["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap().to_owned())
                    .collect();
                (label, reasons)
            })
            .collect()
    }

    /// The scratch worktrees `bisect` or `merge-check` (`purpose`) left
    /// under the target directory.
    pub fn scratch_worktrees(&self, purpose: &str) -> Vec<PathBuf> {
        let dir = self.dir.join("target/ekstazi").join(purpose);
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("worktree"))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The processes whose command line names a path in this fixture.
    pub fn processes_in(&self) -> Vec<u32> {
        let needle = self.dir.to_string_lossy().into_owned();
        let me = std::process::id();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
            })
            .collect()
    }

    /// Waits until no verdict-first recording runs in the background on
    /// this fixture's state directory: its process id file is gone, or
    /// names a process that has ended.
    pub fn wait_for_background_recording(&self) {
        let pid_file = self.dir.join(".ekstazi/recording.pid");
        let running = || {
            std::fs::read_to_string(&pid_file).is_ok_and(|pid| {
                std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                    .is_ok_and(|stat| !stat.contains(") Z "))
            })
        };
        let since = std::time::Instant::now();
        while running() {
            assert!(
                since.elapsed() < std::time::Duration::from_secs(300),
                "the background recording never ended: {}",
                std::fs::read_to_string(self.dir.join(".ekstazi/recording.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The bytes of every record file ([`Fixture::records`]), in order: to
    /// tell that a run left them as they were.
    pub fn record_bytes(&self) -> Vec<Vec<u8>> {
        self.records()
            .iter()
            .map(|r| std::fs::read(self.file(r.to_str().unwrap())).unwrap())
            .collect()
    }

    /// Every record file in the state directory (not the function
    /// fingerprints they share).
    pub fn records(&self) -> BTreeSet<PathBuf> {
        walkdir::WalkDir::new(self.file(".ekstazi"))
            .into_iter()
            // The store's own directories (fingerprints, the function
            // table, history) start with a dot; no binary key does.
            .filter_entry(|e| e.depth() < 2 || !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(Result::ok)
            // Records are in the format's directory (`v12/<binary>/<test>`);
            // the files beside it (the lock, the log of runs, a recording's
            // process id) are the tool's own.
            .filter(|e| e.file_type().is_file() && e.depth() >= 2)
            .map(|e| e.path().strip_prefix(self.path()).unwrap().to_path_buf())
            .collect()
    }
}

fn new_tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ekstazi-tmp")
        .tempdir()
        .unwrap()
}

/// Copies a fixture, leaving out build output and (unless asked) state.
pub fn copy_tree(from: &Path, to: &Path, with_state: bool) {
    for entry in walkdir::WalkDir::new(from).into_iter().filter_entry(|e| {
        let name = e.file_name();
        name != "target" && (with_state || name != ".ekstazi")
    }) {
        let entry = entry.unwrap();
        let dest = to.join(entry.path().strip_prefix(from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// Every test of the `basic` fixture, as `<binary id> <name>`.
pub const BASIC_ALL: &[&str] = &[
    "alpha tests::doubles",
    "alpha tests::triples",
    "beta tests::quadruples",
    "beta::files asserts_absent",
    "beta::files fails_on_request",
    "beta::files has_cargo_env",
    "beta::files reads_data",
    "beta::files reads_nothing",
    "beta::files runs_helper",
    "beta::files writes_then_reads_its_own_file",
    "gamma tests::says_hello",
    "gamma::custom (whole binary)",
];

/// A set of test labels, for comparisons.
pub fn labels(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Asserts that every selected test was selected for `reason` alone.
#[track_caller]
pub fn assert_each_selected_for(selected: &[(String, Vec<String>)], reason: &str) {
    assert!(
        selected.iter().all(|(_, reasons)| reasons == &[reason]),
        "{selected:?}"
    );
}

/// A test's label (`<binary id> <name>`), from its entry in a JSON listing
/// or report.
pub fn label_of(test: &serde_json::Value) -> String {
    format!(
        "{} {}",
        test["binary"].as_str().unwrap(),
        test["name"].as_str().unwrap()
    )
}

/// The entry of a test, by its label (`<binary id> <name>`), in a JSON
/// listing's or report's `tests` array.
pub fn test_entry<'a>(tests: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    tests
        .as_array()
        .unwrap()
        .iter()
        .find(|t| label_of(t) == label)
        .unwrap_or_else(|| panic!("{label} is not in {tests}"))
}

/// The shim cargo-ekstazi's build script built.
pub fn built_shim() -> PathBuf {
    let shim = PathBuf::from(concat!(env!("OUT_DIR"), "/libekstazi_runtime.so"));
    assert!(shim.exists(), "{} not built", shim.display());
    shim
}

/// Runs this test binary again (`args`: which test, how) with the shim
/// preloaded and `envs` set, in `dir`; the whole trace it left. `probe`
/// names the run when it fails.
pub fn traced_child(
    args: &[&str],
    envs: &[(&str, &std::ffi::OsStr)],
    probe: &str,
    dir: &Path,
) -> ekstazi_core::capture::trace::Trace {
    let trace = dir.join("trace");
    let _ = std::fs::remove_file(&trace);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .env("LD_PRELOAD", built_shim())
        .env("EKSTAZI_TRACE_FILE", &trace)
        .envs(envs.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{probe}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = ekstazi_core::capture::trace::parse(&std::fs::read(&trace).unwrap());
    assert!(trace.complete, "{probe}: an incomplete trace");
    trace
}

/// Runs `command` to its end: what it printed (kept in files in
/// `scratch`), how it ended, and its own peak resident size in KiB (from
/// `wait4`, not the test's others').
// The child is waited for with `wait4`, for its resource usage.
#[allow(clippy::zombie_processes)]
pub fn with_peak_rss(mut command: Command, scratch: &Path) -> (TestRun, i64) {
    use std::os::unix::process::ExitStatusExt;
    let (out, err) = (scratch.join("stdout"), scratch.join("stderr"));
    let child = command
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for the child this function started.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    let read = |path: &Path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let run = TestRun {
        output: std::process::Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: Vec::new(),
            stderr: Vec::new(),
        },
        stdout: read(&out),
        stderr: read(&err),
    };
    (run, usage.ru_maxrss)
}

/// `history keygen`: a new key pair, as (secret, public key).
pub fn keygen(f: &Fixture) -> (String, String) {
    let made = f.run(&["history", "keygen"]);
    assert_eq!(made.code(), Some(0), "{made:?}");
    let line = |prefix: &str| {
        made.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {made:?}"))
            .to_owned()
    };
    let public = line("trusted-keys = [\"");
    (
        line("EKSTAZI_SIGNING_KEY="),
        public.trim_end_matches("\"]").to_owned(),
    )
}

/// A clone of `f` with no state, trusting `public`; a new repository
/// (another project) when `new_project`.
pub fn clone_trusting(
    f: &Fixture,
    public: &str,
    new_project: bool,
) -> (tempfile::TempDir, Fixture) {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(f.path(), dir.path(), false);
    let mut g = Fixture::at(dir.path());
    if new_project {
        std::fs::remove_dir_all(g.file(".git")).unwrap();
        g = g.in_git();
    }
    g.write(
        ".config/ekstazi.toml",
        &format!("[history]\ntrusted-keys = [\"{public}\"]\n"),
    );
    (dir, g)
}
