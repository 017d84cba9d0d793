//! The command line: `cargo ekstazi <command>`.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use ekstazi_core::options::settings::{
    Doctests, External, Granularity, Layer, Partition, parse_jobs, parse_seconds,
};
use ekstazi_core::selection::filter::{Filter, RunIgnored};
use std::path::PathBuf;

/// Cargo runs `cargo-ekstazi ekstazi ...`; the first word is the subcommand's name.
#[derive(Parser, Debug)]
#[command(name = "cargo", bin_name = "cargo", styles = clap_cargo_styles())]
pub enum CargoCli {
    Ekstazi(Ekstazi),
}

/// Regression test selection for Rust: run only the tests your change can affect.
#[derive(Args, Debug)]
#[command(version = version(), about, long_about = None)]
pub struct Ekstazi {
    /// Coloring: auto, always, never [default: $CARGO_TERM_COLOR, else auto]
    #[arg(long, global = true, value_name = "WHEN", value_parser = ["auto", "always", "never"])]
    pub color: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// The command line as the program `cargo-ekstazi` on its own: what
/// completion scripts and manual pages describe. Its usage lines read
/// `cargo ekstazi …`, as users type it.
pub fn standalone_command() -> clap::Command {
    // Built afresh, not taken out of `CargoCli`'s: the subcommands there
    // already carry their `cargo ekstazi …` names, which completion
    // scripts would use as function names.
    <Ekstazi as Args>::augment_args(clap::Command::new("cargo-ekstazi"))
        .bin_name("cargo-ekstazi")
        .styles(clap_cargo_styles())
}

fn version() -> &'static str {
    concat!(
        env!("CARGO_PKG_VERSION"),
        // The history is kept in the records' format, under its version.
        " (record and history format ",
        // Kept in step with ekstazi_core::files::sealed::FORMAT_VERSION by a test.
        "12",
        ")"
    )
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build and run the tests affected by changes since they last passed
    ///
    /// Like `cargo test`, but each selected test runs in its own process
    /// under a shim that records what it depends on; a test whose
    /// dependencies did not change since it last passed is skipped.
    #[command(after_help = "\
Examples:
  cargo ekstazi test                    run what changed since the last run
  cargo ekstazi test --forceall         run every test and rewrite every record
  cargo ekstazi test -p mycrate parse   only tests of mycrate whose name contains \"parse\"
  cargo ekstazi test -- --ignored       only #[ignore]d tests
  cargo ekstazi test --junit junit.xml  also write a JUnit report (skipped tests say why)
  cargo ekstazi test --partition hash:1/2   this CI job's half of the selected tests
  cargo ekstazi test --skipme           run everything like cargo test: no selection, no records

Options also come from .config/ekstazi.toml and EKSTAZI_* variables
(the command line wins, then the file, then the environment).")]
    Test(TestArgs),
    /// Test on every save: only the tests the change affects, verdicts first
    ///
    /// Watches the workspace's files (not the target directory, `.git`, the
    /// state directory or what .gitignore leaves out, but always the files
    /// the records name) and, after each save or burst of saves, runs
    /// `cargo ekstazi test --verdict-first` with the same options: the
    /// verdicts, why each test ran, what was skipped, then the recording in
    /// the background. A save during a cycle cancels it and starts the next.
    /// Keys, in a terminal: a runs all, f reruns the failures, Enter reruns
    /// the last cycle's tests, q quits.
    #[command(after_help = "\
Examples:
  cargo ekstazi watch                   the affected tests on every save
  cargo ekstazi watch -p mycrate        only mycrate's tests
  cargo ekstazi watch --no-clear        keep each cycle's output on the screen")]
    Watch(WatchArgs),
    /// Show which tests would run and why, without running any
    ///
    /// Builds what `cargo test --no-run` would, then prints the selection.
    #[command(after_help = "\
Examples:
  cargo ekstazi list                    a table of tests, selected or not, with reasons
  cargo ekstazi list --selected         only the tests that would run
  cargo ekstazi list --json             the same as one JSON object (docs/reference/json.md)")]
    List(ListArgs),
    /// Explain one test's verdict: what changed, or why nothing did
    ///
    /// Names every dependency that decides whether the test runs: the file
    /// that changed, the path that appeared, the function whose code
    /// changed, the environment variable, a failure last time, a change to
    /// the toolchain. With `--all`, its whole dependency list with
    /// checksums, and what was not counted as a dependency.
    #[command(after_help = "\
Examples:
  cargo ekstazi why tests::parses_empty_input
  cargo ekstazi why 'mycrate::it tests::roundtrip' --all")]
    // `--all` here is the dependency list, not cargo's deprecated `--workspace`.
    #[command(mut_arg("all", |arg| arg.long("all-packages").hide(true)))]
    Why(WhyArgs),
    /// Merge the state directories of partitioned CI jobs into one
    ///
    /// Each DIR is the state directory (`.ekstazi`) one shard left behind.
    /// Every record is checked before it is copied; where several shards
    /// recorded the same test, the newest run wins.
    #[command(after_help = "\
Examples:
  cargo ekstazi merge-state shard-1/.ekstazi shard-2/.ekstazi
  cargo ekstazi merge-state --state-dir merged shard-*/.ekstazi")]
    MergeState(MergeStateArgs),
    /// The records kept per commit: list them, or carry them elsewhere
    ///
    /// A run that starts and ends on a clean work tree files, under HEAD's
    /// commit, the record that held for each test. Later runs let any of
    /// those records vouch for a test whose every dependency matches again:
    /// after switching branches, at a merge (each parent's records), after
    /// a revert.
    #[command(after_help = "\
Examples:
  cargo ekstazi history                    the commits with records, and their size on disk
  cargo ekstazi history export state.tar.zst   the records and their history, as one file
  cargo ekstazi history import state.tar.zst   add an exported file's records and history

The history keeps the newest 100 commits ([history] commits in
.config/ekstazi.toml, or EKSTAZI_HISTORY_COMMITS); --no-history turns it off
for one run, [history] enabled = false for the workspace.")]
    History(HistoryArgs),
    /// What the selection saved: runs, tests selected and skipped, time
    /// spent and saved, overall, per day and per commit
    ///
    /// From the log of the runs that recorded in this state directory
    /// (`runs.log`, the newest 1 000). Time saved is estimated: the sum,
    /// over the tests each run skipped, of the duration their records
    /// give (their last run's).
    #[command(after_help = "\
Examples:
  cargo ekstazi stats              overall, the last 7 days, the last 10 commits
  cargo ekstazi stats --summary    one line, for a CI job's summary
  cargo ekstazi stats --json       one JSON object (docs/reference/json.md)")]
    Stats(StatsArgs),
    /// Find the latest commit that broke tests, with as few builds as possible
    ///
    /// A commit is bad when one of the named tests fails there. The search
    /// (the Regression Predecessors Algorithm) walks back from each bad
    /// commit along the shortest path to a good one, and finds the
    /// regression point nearest the bad commit, where `git bisect` may
    /// return an older one that was already fixed. Each commit is judged
    /// from the records filed in the history when they say, else by
    /// building and running the tests there in a scratch worktree.
    #[command(after_help = "\
Examples:
  cargo ekstazi bisect tests::totals                   from HEAD back to the newest good commit the history knows
  cargo ekstazi bisect it::parses --good v1.2.0        from HEAD back to a known good tag
  cargo ekstazi bisect tests::a --bad main --bad dev   each bad branch gets its own regression point
  cargo ekstazi bisect tests::a --json                 one JSON object (docs/reference/json.md)")]
    Bisect(BisectArgs),
    /// Check a merge for semantic conflicts: the tests that meet both sides
    ///
    /// Knows the merge base and each parent from the records the history
    /// filed there, else builds and runs every test there (in a scratch
    /// worktree); finds the functions each side changed; and runs at the
    /// merge the tests whose records executed the changes of two or more
    /// sides, with the tests a side added or changed. A test that
    /// fails there is a semantic conflict (it passed at every parent), lost
    /// behaviour (a side added or changed it and it passed there) or
    /// already failing (it failed at a parent). Functions changed on two or
    /// more sides that no test executes are listed as untested.
    #[command(after_help = "\
Examples:
  cargo ekstazi merge-check                  the merge commit at HEAD
  cargo ekstazi merge-check 1a2b3c4          an existing merge commit
  cargo ekstazi merge-check main feature     the merge of two branches, made in a scratch worktree
  cargo ekstazi merge-check main a b --json  an octopus merge, as one JSON object (docs/reference/json.md)

Exit status: 101 on a semantic conflict or lost behaviour (or, with
--fail-on-untested, an untested interaction), 0 otherwise.")]
    MergeCheck(MergeCheckArgs),
    /// Run the affected tests through `cargo nextest run`, and record them
    ///
    /// The same build, selection and records as `cargo ekstazi test`, but
    /// the selected tests run under cargo-nextest (its output, retries,
    /// timeouts and configuration). Everything after `--` goes to
    /// `cargo nextest run` as it is; cargo's and cargo-ekstazi's options go
    /// before it. Needs cargo-nextest 0.9.116 or later.
    #[command(after_help = "\
Examples:
  cargo ekstazi nextest                       run what changed since the last run, under nextest
  cargo ekstazi nextest -p mycrate            only the tests of mycrate (cargo options before --)
  cargo ekstazi nextest -- --profile ci       a nextest profile from .config/nextest.toml
  cargo ekstazi nextest -- -j 4 --retries 2   nextest's own options after --
  cargo ekstazi nextest -- -E 'package(a)'    nextest's filtersets narrow the selection further
  cargo ekstazi nextest --forceall            run every test and rewrite every record
  cargo ekstazi nextest --skipme              plain `cargo nextest run`: no selection, no records
  cargo ekstazi nextest archive --archive-file tests.tar.zst
                                              build once, for many machines
  cargo ekstazi nextest run --archive-file tests.tar.zst --workspace-remap . --partition count:1/4
                                              on each machine: select, run this share, record

A test that passes only on a retry is recorded as failed: it runs again next
time. Doctests are not run (nextest does not run them): use `cargo ekstazi
test --doc`. The exit status is nextest's (100 when tests failed).")]
    Nextest(NextestArgs),
    /// Print a shell completion script
    ///
    /// Completes `cargo-ekstazi`, and `cargo ekstazi` where the shell's
    /// cargo completion hands third-party subcommands on (zsh) or the
    /// script hooks into it (bash, fish).
    #[command(after_help = "\
Examples:
  cargo ekstazi completions bash > ~/.local/share/bash-completion/completions/cargo-ekstazi
  cargo ekstazi completions zsh > ~/.zfunc/_cargo-ekstazi       (with fpath+=~/.zfunc)
  cargo ekstazi completions fish > ~/.config/fish/conf.d/cargo-ekstazi.fish

docs/reference/configuration.md#shell-completions-and-the-manual-page says where each shell looks.")]
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write one for every command
    #[command(after_help = "\
Examples:
  cargo ekstazi man | man -l -           read it now
  cargo ekstazi man --dir ~/.local/share/man/man1   cargo-ekstazi.1, cargo-ekstazi-test.1, ...")]
    Man(ManArgs),
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write `cargo-ekstazi.1` and a page per command into this directory
    /// instead of printing the main page
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    pub cargo: CargoOpts,
    #[command(flatten)]
    pub selection: SelectionOpts,
    /// Number of tests to run at once [default: available cores] [env: EKSTAZI_JOBS]
    #[arg(short = 'j', long, value_name = "N", value_parser = parse_jobs, help_heading = "Running")]
    pub jobs: Option<usize>,
    /// Accepted for compatibility with `cargo test`: every selected test always runs
    #[arg(long, help_heading = "Running")]
    pub no_fail_fast: bool,
    /// Run a failed test again, in a fresh process, up to N times; one that
    /// then passes is reported flaky and runs next time [env: EKSTAZI_RETRIES]
    #[arg(long, value_name = "N", help_heading = "Running")]
    pub retries: Option<usize>,
    /// Kill a test that runs longer than this many seconds (it counts as failed) [env: EKSTAZI_TIMEOUT]
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, help_heading = "Running")]
    pub timeout: Option<f64>,
    /// Report a test as slow after this many seconds [default: 60] [env: EKSTAZI_SLOW_TIMEOUT]
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, help_heading = "Running")]
    pub slow_timeout: Option<f64>,
    /// Run every test like `cargo test`: no selection, no shim, no records [env: EKSTAZI_SKIPME]
    #[arg(long, help_heading = "Selection")]
    pub skipme: bool,
    /// Run every test, as --forceall does, and report what the selection
    /// would have skipped, any of those that failed (a miss, exit status
    /// 102) and the time it would have saved
    #[arg(long, help_heading = "Selection", conflicts_with = "verdict_first")]
    pub audit: bool,
    /// Give the selected tests' verdicts first, run as `cargo test` runs
    /// them, and record them after, in the background (`=false` turns off
    /// what the configuration turns on) [env: EKSTAZI_VERDICT_FIRST]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Running"
    )]
    pub verdict_first: Option<bool>,
    #[command(flatten)]
    pub recording: RecordingOpts,
    /// Write a JUnit XML report to this file (unaffected tests appear as skipped, with the reason)
    #[arg(long, value_name = "PATH", help_heading = "Reporting")]
    pub junit: Option<PathBuf>,
    /// Write the selection, outcomes and stage timings as JSON to this file
    #[arg(long, value_name = "PATH", help_heading = "Reporting")]
    pub report_json: Option<PathBuf>,
    /// Run only tests whose name contains this
    pub filter: Option<String>,
    /// Arguments for the test harness, as with `cargo test -- ARGS`
    #[arg(last = true)]
    pub libtest: Vec<String>,
}

impl TestArgs {
    /// What the command line sets, as one source of settings.
    pub fn layer(&self) -> Layer {
        Layer {
            skipme: self.skipme.then_some(true),
            no_record: self.recording.no_record.then_some(true),
            jobs: self.jobs,
            timeout: self.timeout,
            slow_timeout: self.slow_timeout,
            verdict_first: self.verdict_first,
            retries: self.retries,
            ..self.selection.layer()
        }
    }
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Do not clear the terminal before each cycle
    #[arg(long, help_heading = "Watching")]
    pub no_clear: bool,
    #[command(flatten)]
    pub test: TestArgs,
}

#[derive(Args, Debug)]
pub struct NextestArgs {
    /// `run` (the default), or `archive`: build the instrumented tests once
    /// into a nextest archive, for `run --archive-file` on other machines
    #[arg(value_enum, value_name = "ACTION")]
    pub action: Option<NextestAction>,
    /// With `archive`, the archive to write; with `run`, the archive to run
    /// the selected tests of (a build made elsewhere, not built here)
    #[arg(long, value_name = "PATH", help_heading = "Archive")]
    pub archive_file: Option<PathBuf>,
    /// With `run --archive-file`, the workspace to select and run in, a
    /// checkout of the commit the archive was built from [default: the
    /// current directory's]
    #[arg(long, value_name = "DIR", help_heading = "Archive")]
    pub workspace_remap: Option<PathBuf>,
    #[command(flatten)]
    pub cargo: CargoOpts,
    #[command(flatten)]
    pub selection: SelectionOpts,
    /// Run every test with plain `cargo nextest run`: no selection, no shim, no records [env: EKSTAZI_SKIPME]
    #[arg(long, help_heading = "Selection")]
    pub skipme: bool,
    #[command(flatten)]
    pub recording: RecordingOpts,
    /// Arguments for `cargo nextest run`, passed on as they are
    #[arg(last = true, value_name = "NEXTEST ARGS")]
    pub nextest: Vec<String>,
}

/// What `cargo ekstazi nextest` does.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextestAction {
    /// Select, run under `cargo nextest run`, and record
    Run,
    /// Build the instrumented tests into a nextest archive
    Archive,
}

impl NextestArgs {
    /// What the command line sets, as one source of settings.
    pub fn layer(&self) -> Layer {
        Layer {
            skipme: self.skipme.then_some(true),
            no_record: self.recording.no_record.then_some(true),
            // Nextest does not run doctests; `--doc` is refused earlier.
            doctests: Some(Doctests::Exclude),
            ..self.selection.layer()
        }
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub cargo: CargoOpts,
    #[command(flatten)]
    pub selection: SelectionOpts,
    /// Print one JSON object instead of a table (schema: docs/reference/json.md)
    #[arg(long)]
    pub json: bool,
    /// Only the tests that would run
    #[arg(long, conflicts_with = "skipped")]
    pub selected: bool,
    /// Only the tests that would be skipped as unaffected
    #[arg(long)]
    pub skipped: bool,
    /// Only tests whose name contains this
    pub filter: Option<String>,
    /// Test harness arguments that filter (`--exact`, `--skip`, `--ignored`, `--include-ignored`)
    #[arg(last = true)]
    pub libtest: Vec<String>,
}

#[derive(Args, Debug)]
pub struct WhyArgs {
    #[command(flatten)]
    pub cargo: CargoOpts,
    #[command(flatten)]
    pub selection: SelectionOpts,
    /// Also list every dependency with its checksum, the functions executed,
    /// and the accesses that were not dependencies
    #[arg(long = "all")]
    pub all_deps: bool,
    /// The test: its name (`module::test`), or `<binary id> <name>` as the
    /// runner prints it, or a unique part of either
    #[arg(value_name = "TEST")]
    pub name: String,
}

#[derive(Args, Debug)]
pub struct MergeStateArgs {
    /// The state directory to merge into [default: <workspace>/.ekstazi] [env: EKSTAZI_DIR]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Path to Cargo.toml (to find the workspace's state directory)
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    /// The shards' state directories
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BisectArgs {
    /// The tests: a name (`module::test`), `<binary id> <name>`, or a unique part of either
    #[arg(id = "test_names", required = true, value_name = "TEST")]
    pub tests: Vec<String>,
    /// A commit where a named test fails (repeatable) [default: HEAD]
    #[arg(long, value_name = "REV")]
    pub bad: Vec<String>,
    /// A commit where every named test passes (repeatable) [default: the
    /// newest first-parent ancestor the history shows passing, else found
    /// by building HEAD~1, HEAD~3, HEAD~7, ...]
    #[arg(long, value_name = "REV")]
    pub good: Vec<String>,
    /// Follow only the first parent of merge commits
    #[arg(long)]
    pub first_parent: bool,
    /// How a path is searched, from the bad end back to a good commit
    #[arg(long, value_enum, default_value_t = SearchArg::Multiplying)]
    pub search: SearchArg,
    /// Give a regression point found for one bad commit to every other bad
    /// commit it precedes (fewer builds; a later point of theirs may be missed)
    #[arg(long)]
    pub propagate: bool,
    /// Also count the builds `git bisect` would spend from the same ends, on
    /// the same answers (commits the search did not judge are built for it)
    #[arg(long)]
    pub compare_git_bisect: bool,
    /// Print one JSON object (schema: docs/reference/json.md)
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub state: StateOpts,
}

#[derive(Args, Debug)]
pub struct MergeCheckArgs {
    /// A merge commit [default: HEAD], or two or more revisions to merge
    /// as a merge queue would (git's default strategy)
    #[arg(value_name = "REV")]
    pub revs: Vec<String>,
    /// Also exit with 101 when changes of several sides meet in a function
    /// no test executes (implies --build)
    #[arg(long)]
    pub fail_on_untested: bool,
    /// Build and run the tests at the base and each parent even where the
    /// history holds their records (which show only the functions some
    /// test executed: untested interactions need the builds)
    #[arg(long)]
    pub build: bool,
    /// Print one JSON object (schema: docs/reference/json.md)
    #[arg(long)]
    pub json: bool,
    /// Run a test that fails at the merge (or at a parent) again up to N
    /// times before trusting the failure; one that then passes is flaky
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub reruns: usize,
    /// Also exit with 101 when a test is flaky at the merge
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub state: StateOpts,
}

/// Where the state directory is, and how the workspace is built, for the
/// commands that build other commits of one workspace (in a scratch
/// worktree, where the cargo options are given to each `cargo ekstazi
/// test`) and file what they learn.
#[derive(Args, Debug)]
pub struct StateOpts {
    /// The state directory [default: <workspace>/.ekstazi] [env: EKSTAZI_DIR]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(flatten)]
    pub cargo: CargoOpts,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SearchArg {
    /// Ask 1, 3, 7, 15, ... commits back until one passes, then search that
    /// gap the same way from its failing end: leans most to the latest
    /// point; more builds when the point is far back
    Multiplying,
    /// The same first probe, then bisect the gap it found: fewer builds on
    /// average when the point is far back; may return an older point when
    /// the test was fixed and broken again within the gap
    #[value(name = "multiplying-binary")]
    MultiplyingThenBinary,
    /// Bisect the whole path: about log2(commits) builds, the latest point
    /// only when the history broke once
    Binary,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub action: Option<HistoryAction>,
    /// The state directory [default: <workspace>/.ekstazi] [env: EKSTAZI_DIR]
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
    /// Path to Cargo.toml (to find the workspace's state directory)
    #[arg(long, value_name = "PATH", global = true)]
    pub manifest_path: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// One JSON object instead of tables
    #[arg(long, conflicts_with = "summary")]
    pub json: bool,
    /// One line: runs, tests skipped, time saved
    #[arg(long)]
    pub summary: bool,
    /// The state directory [default: <workspace>/.ekstazi] [env: EKSTAZI_DIR]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Path to Cargo.toml (to find the workspace's state directory)
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum HistoryAction {
    /// List the commits that have records (the default)
    List {
        /// One JSON object instead of a table (schema: docs/reference/json.md)
        #[arg(long)]
        json: bool,
    },
    /// Write the records, the function table and the history to one file (a zstd-compressed tar)
    ///
    /// With EKSTAZI_SIGNING_KEY set, the file is signed: its signature is
    /// written beside it, as FILE.sig.
    Export {
        /// Where to write it
        file: PathBuf,
    },
    /// Add the records and history of an exported file to the state directory
    ///
    /// Everything in the file is checked before it is kept; where both hold
    /// a record of a test, the newer run wins, as with merge-state. When
    /// `[history] trusted-keys` lists keys, the file must be signed by one
    /// of them, for this project, or nothing of it is imported.
    Import {
        /// The exported file
        file: PathBuf,
        /// Its signature [default: FILE.sig]
        #[arg(long, value_name = "PATH")]
        signature: Option<PathBuf>,
    },
    /// Upload the state to the remote store, as recorded at HEAD
    ///
    /// Only what the store does not hold yet is uploaded (everything is
    /// named by its content); the push's manifest goes last, signed with
    /// EKSTAZI_SIGNING_KEY when it is set.
    Push {
        /// The remote store [default: `[history] remote`] [env: EKSTAZI_REMOTE]
        #[arg(long, value_name = "URI")]
        remote: Option<String>,
    },
    /// Take what the remote store holds for HEAD, or its nearest pushed ancestor
    ///
    /// Every push of that commit is checked (signed by a trusted key when
    /// `[history] trusted-keys` lists any) and merged like an imported state.
    Fetch {
        /// The remote store [default: `[history] remote`] [env: EKSTAZI_REMOTE]
        #[arg(long, value_name = "URI")]
        remote: Option<String>,
        /// Download at most this many bytes, or take nothing
        #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
        limit: u64,
    },
    /// Make a key pair to sign exported states and pushes to a remote store with
    ///
    /// Prints the secret key, for CI's secrets (EKSTAZI_SIGNING_KEY), and
    /// the public key, for `[history] trusted-keys` in .config/ekstazi.toml.
    Keygen,
}

/// How a run that records treats the state directory (`test`, `nextest`).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Selection")]
pub struct RecordingOpts {
    /// Fail at once if another run holds the state directory, instead of waiting
    #[arg(long)]
    pub no_wait: bool,
    /// Select and run, but leave every record as it is [env: EKSTAZI_NO_RECORD]
    #[arg(long)]
    pub no_record: bool,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Selection")]
pub struct SelectionOpts {
    /// Run every test, ignoring records, and rewrite every record [env: EKSTAZI_FORCEALL]
    #[arg(long)]
    pub forceall: bool,
    /// Where records are kept [default: <workspace>/.ekstazi] [env: EKSTAZI_DIR]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// What code a test depends on: `function` (the functions it executed) or
    /// `binary` (its whole test binary) [default: function] [env: EKSTAZI_GRANULARITY]
    #[arg(long, value_name = "WHAT", value_parser = parse_granularity)]
    pub granularity: Option<Granularity>,
    /// Always run the tests matching this glob (name or `<binary id> <name>`; repeatable)
    #[arg(long, value_name = "PATTERN")]
    pub always_run: Vec<String>,
    /// Run the tests matching this glob every time, and never record them (repeatable)
    #[arg(long, value_name = "PATTERN")]
    pub never_record: Vec<String>,
    /// Accesses to paths matching this gitignore-style pattern (relative to
    /// the workspace) are not dependencies (repeatable)
    #[arg(long, value_name = "PATTERN")]
    pub ignore_path: Vec<String>,
    /// Tests that reached another machine last time: `always-run`, or
    /// `select` them on their local dependencies [default: always-run] [env: EKSTAZI_EXTERNAL]
    #[arg(long, value_name = "WHAT", value_parser = parse_external)]
    pub external: Option<External>,
    /// Give tests the temporary directory of the environment, not each its
    /// own empty one [env: EKSTAZI_PRIVATE_TMPDIR=0]
    #[arg(long)]
    pub no_private_tmpdir: bool,
    /// Start every test with its own `exec`, not forked from a process that
    /// loaded its binary once [env: EKSTAZI_FORK_SERVER=0]
    #[arg(long)]
    pub no_fork_server: bool,
    /// Run only this CI job's share of the selected tests: `hash:M/N` or `count:M/N`
    #[arg(long, value_name = "PARTITION", value_parser = parse_partition)]
    pub partition: Option<Partition>,
    /// Only doctests
    #[arg(long, conflicts_with_all = [
        "no_doc", "lib", "bins", "bin", "test", "tests", "example", "examples", "bench", "benches",
        "all_targets",
    ])]
    pub doc: bool,
    /// No doctests
    #[arg(long)]
    pub no_doc: bool,
    /// Neither file records per commit nor let records of other commits
    /// vouch: only the current records decide [env: EKSTAZI_HISTORY=0]
    #[arg(long)]
    pub no_history: bool,
    /// Evaluation aid (`cargo xtask eval replay --graph`): select as if the
    /// only records were those filed under this commit
    #[arg(long, value_name = "COMMIT", hide = true)]
    pub vouch_only_from: Option<String>,
}

impl SelectionOpts {
    pub fn layer(&self) -> Layer {
        Layer {
            forceall: self.forceall.then_some(true),
            state_dir: self.state_dir.clone(),
            granularity: self.granularity,
            external: self.external,
            always_run: self.always_run.clone(),
            never_record: self.never_record.clone(),
            ignore_paths: self.ignore_path.clone(),
            private_tmpdir: self.no_private_tmpdir.then_some(false),
            fork_server: self.no_fork_server.then_some(false),
            partition: self.partition,
            doctests: match (self.doc, self.no_doc) {
                (true, _) => Some(Doctests::Only),
                (_, true) => Some(Doctests::Exclude),
                _ => None,
            },
            history: self.no_history.then_some(false),
            vouch_only_from: self.vouch_only_from.clone(),
            ..Layer::default()
        }
    }
}

fn parse_granularity(s: &str) -> Result<Granularity, ekstazi_core::options::errors::BadValue> {
    s.parse()
}

fn parse_external(s: &str) -> Result<External, ekstazi_core::options::errors::BadValue> {
    s.parse()
}

fn parse_partition(s: &str) -> Result<Partition, ekstazi_core::options::errors::BadValue> {
    s.parse()
}

/// The options `cargo test` takes that decide what is built; forwarded to cargo.
/// (Serialized into a nextest archive's manifest: the build is described by
/// them on the machine that runs it.)
#[derive(Args, Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CargoOpts {
    /// Package(s) to test
    #[arg(
        short,
        long = "package",
        value_name = "SPEC",
        help_heading = "Package Selection"
    )]
    pub package: Vec<String>,
    /// Test all packages in the workspace
    #[arg(long, help_heading = "Package Selection")]
    pub workspace: bool,
    /// Exclude packages from the test
    #[arg(long, value_name = "SPEC", help_heading = "Package Selection")]
    pub exclude: Vec<String>,
    /// Deprecated alias for --workspace
    #[arg(long, hide = true)]
    pub all: bool,

    /// Test only this package's library
    #[arg(long, help_heading = "Target Selection")]
    pub lib: bool,
    /// Test all binaries
    #[arg(long, help_heading = "Target Selection")]
    pub bins: bool,
    /// Test only the specified binary
    #[arg(long, value_name = "NAME", help_heading = "Target Selection")]
    pub bin: Vec<String>,
    /// Test only the specified test target
    #[arg(long = "test", value_name = "NAME", help_heading = "Target Selection")]
    pub test: Vec<String>,
    /// Test all targets that have `test = true` set
    #[arg(long, help_heading = "Target Selection")]
    pub tests: bool,
    /// Test only the specified example
    #[arg(long, value_name = "NAME", help_heading = "Target Selection")]
    pub example: Vec<String>,
    /// Test all examples
    #[arg(long, help_heading = "Target Selection")]
    pub examples: bool,
    /// Test only the specified bench target
    #[arg(long, value_name = "NAME", help_heading = "Target Selection")]
    pub bench: Vec<String>,
    /// Test all benches
    #[arg(long, help_heading = "Target Selection")]
    pub benches: bool,
    /// Test all targets
    #[arg(long, help_heading = "Target Selection")]
    pub all_targets: bool,

    /// Space or comma separated list of features to activate
    #[arg(
        short = 'F',
        long,
        value_name = "FEATURES",
        help_heading = "Feature Selection"
    )]
    pub features: Vec<String>,
    /// Activate all available features
    #[arg(long, help_heading = "Feature Selection")]
    pub all_features: bool,
    /// Do not activate the `default` feature
    #[arg(long, help_heading = "Feature Selection")]
    pub no_default_features: bool,

    /// Build artifacts in release mode, with optimizations
    #[arg(short = 'r', long, help_heading = "Compilation Options")]
    pub release: bool,
    /// Build artifacts with the specified profile
    #[arg(
        long,
        value_name = "PROFILE-NAME",
        help_heading = "Compilation Options"
    )]
    pub profile: Option<String>,
    /// Directory for all generated artifacts
    #[arg(long, value_name = "DIRECTORY", help_heading = "Compilation Options")]
    pub target_dir: Option<PathBuf>,

    /// Path to Cargo.toml
    #[arg(long, value_name = "PATH", help_heading = "Manifest Options")]
    pub manifest_path: Option<PathBuf>,
    /// Assert that `Cargo.lock` will remain unchanged
    #[arg(long, help_heading = "Manifest Options")]
    pub locked: bool,
    /// Run without accessing the network
    #[arg(long, help_heading = "Manifest Options")]
    pub offline: bool,
    /// Equivalent to specifying both --locked and --offline
    #[arg(long, help_heading = "Manifest Options")]
    pub frozen: bool,

    /// Do not print cargo log messages, nor a line per passing test
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Use verbose output (-vv very verbose)
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl CargoOpts {
    /// The arguments to pass on to `cargo test`.
    /// (An instrumented build chooses its own target directory.)
    pub fn to_cargo_args(&self, instrumented: bool) -> Vec<String> {
        let mut args = Vec::new();
        let mut flag = |on: bool, name: &str| {
            if on {
                args.push(name.to_owned());
            }
        };
        flag(self.workspace || self.all, "--workspace");
        flag(self.lib, "--lib");
        flag(self.bins, "--bins");
        flag(self.tests, "--tests");
        flag(self.examples, "--examples");
        flag(self.benches, "--benches");
        flag(self.all_targets, "--all-targets");
        flag(self.quiet, "--quiet");
        for _ in 0..self.verbose {
            args.push("--verbose".to_owned());
        }
        let lists: [(&str, &Vec<String>); 6] = [
            ("--package", &self.package),
            ("--exclude", &self.exclude),
            ("--bin", &self.bin),
            ("--test", &self.test),
            ("--example", &self.example),
            ("--bench", &self.bench),
        ];
        for (name, values) in lists {
            for value in values {
                args.push(name.to_owned());
                args.push(value.clone());
            }
        }
        self.push_build_args(&mut args, !instrumented);
        args
    }

    /// The arguments for `cargo test --doc -p <package>`: what decides how
    /// the library is built, not which packages or targets.
    pub fn doctest_args(&self, package: &str) -> Vec<String> {
        let mut args = ["test", "--doc", "--package", package]
            .map(String::from)
            .to_vec();
        self.push_build_args(&mut args, true);
        args
    }

    /// What decides how things are built: features, profile, manifest,
    /// lockfile and network, and (if `with_target_dir`) the target directory.
    fn push_build_args(&self, args: &mut Vec<String>, with_target_dir: bool) {
        for (on, name) in [
            (self.all_features, "--all-features"),
            (self.no_default_features, "--no-default-features"),
            (self.release, "--release"),
            (self.locked, "--locked"),
            (self.offline, "--offline"),
            (self.frozen, "--frozen"),
        ] {
            if on {
                args.push(name.to_owned());
            }
        }
        for features in &self.features {
            args.extend(["--features".to_owned(), features.clone()]);
        }
        if let Some(profile) = &self.profile {
            args.extend(["--profile".to_owned(), profile.clone()]);
        }
        if let Some(dir) = self.target_dir.as_ref().filter(|_| with_target_dir) {
            args.extend(["--target-dir".to_owned(), dir.display().to_string()]);
        }
        if let Some(path) = &self.manifest_path {
            args.extend(["--manifest-path".to_owned(), path.display().to_string()]);
        }
    }

    /// These options as a run in a scratch worktree takes them: the
    /// worktree has its own manifest and target directory, and its runs'
    /// output is not shown.
    pub fn for_worktree(&self) -> CargoOpts {
        CargoOpts {
            manifest_path: None,
            target_dir: None,
            quiet: false,
            verbose: 0,
            ..self.clone()
        }
    }

    /// Only what decides how things are built (features, profile, lockfile
    /// and network), for a run that names its own packages and targets.
    pub fn build_only(&self) -> CargoOpts {
        CargoOpts {
            all_features: self.all_features,
            no_default_features: self.no_default_features,
            features: self.features.clone(),
            release: self.release,
            profile: self.profile.clone(),
            locked: self.locked,
            offline: self.offline,
            frozen: self.frozen,
            ..CargoOpts::default()
        }
    }

    /// Whether the package named `name` is among those `-p` and
    /// `--exclude` select (every package, when neither is given). A spec's
    /// version (`name@1.0`) is not compared.
    pub fn selects_package(&self, name: &str) -> bool {
        let named = |specs: &[String]| {
            specs
                .iter()
                .any(|s| s.split_once('@').map_or(s.as_str(), |(n, _)| n) == name)
        };
        (self.package.is_empty() || named(&self.package)) && !named(&self.exclude)
    }

    /// Whether features or the profile are chosen: what a build with these
    /// options holds may differ from what a plain run recorded.
    pub fn chooses_build(&self) -> bool {
        !self.features.is_empty()
            || self.all_features
            || self.no_default_features
            || self.release
            || self.profile.is_some()
    }

    /// Whether a target selection flag is given: then `cargo test` runs no
    /// doctests (unless `--doc`).
    pub fn selects_targets(&self) -> bool {
        self.lib
            || self.bins
            || self.tests
            || self.examples
            || self.benches
            || self.all_targets
            || !self.bin.is_empty()
            || !self.test.is_empty()
            || !self.example.is_empty()
            || !self.bench.is_empty()
    }

    /// The profile name, as the global fingerprint records it.
    pub fn profile_name(&self) -> String {
        match (&self.profile, self.release) {
            (Some(profile), _) => profile.clone(),
            (None, true) => "release".to_owned(),
            (None, false) => "test".to_owned(),
        }
    }

    /// The feature request, normalised for the global fingerprint.
    pub fn feature_request(&self) -> String {
        let mut features: Vec<&str> = self
            .features
            .iter()
            .flat_map(|f| f.split([' ', ',']))
            .filter(|f| !f.is_empty())
            .collect();
        features.sort_unstable();
        features.dedup();
        let mut out = features.join(",");
        if self.all_features {
            out.push_str(" --all-features");
        }
        if self.no_default_features {
            out.push_str(" --no-default-features");
        }
        out
    }
}

/// What the arguments after `--` ask of the harness.
#[derive(Debug, Default)]
pub struct HarnessArgs {
    pub filter: Filter,
    /// `--nocapture` / `--show-output`: print the output of passing tests too.
    pub show_output: bool,
    /// `--test-threads N`: how many tests run at once.
    pub test_threads: Option<usize>,
}

/// Parses `[FILTER] -- [LIBTEST ARGS]` the way libtest reads them.
pub fn parse_harness_args(filter: Option<&str>, args: &[String]) -> Result<HarnessArgs> {
    let mut out = HarnessArgs::default();
    out.filter.patterns.extend(filter.map(str::to_owned));
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String> {
            match &inline {
                Some(value) => Ok(value.clone()),
                None => args
                    .next()
                    .cloned()
                    .with_context(|| format!("`{what}` needs a value")),
            }
        };
        match name {
            "--exact" => out.filter.exact = true,
            "--skip" => out.filter.skip.push(value("--skip")?),
            "--ignored" => out.filter.run_ignored = RunIgnored::Only,
            "--include-ignored" => out.filter.run_ignored = RunIgnored::Yes,
            "--nocapture" | "--no-capture" | "--show-output" => out.show_output = true,
            "--test-threads" => {
                let n = value("--test-threads")?;
                out.test_threads = Some(
                    n.parse()
                        .with_context(|| format!("`--test-threads {n}` is not a number"))?,
                );
            }
            "-q" | "--quiet" => {}
            "--list" => {
                bail!(
                    "`-- --list` is not supported; use `cargo ekstazi list` to see the tests and the selection"
                )
            }
            other if other.starts_with('-') => bail!(
                "the test harness option `{other}` is not supported by cargo ekstazi \
                 (supported: --exact, --skip, --ignored, --include-ignored, --nocapture, --show-output, --test-threads)"
            ),
            pattern => out.filter.patterns.push(pattern.to_owned()),
        }
    }
    Ok(out)
}

fn clap_cargo_styles() -> clap::builder::Styles {
    use clap::builder::styling::{AnsiColor, Effects};
    clap::builder::Styles::styled()
        .header(AnsiColor::Green.on_default() | Effects::BOLD)
        .usage(AnsiColor::Green.on_default() | Effects::BOLD)
        .literal(AnsiColor::Cyan.on_default() | Effects::BOLD)
        .placeholder(AnsiColor::Cyan.on_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        CargoCli::command().debug_assert();
    }

    #[test]
    fn the_version_names_the_record_format() {
        assert!(version().ends_with(&format!(
            "(record and history format {})",
            ekstazi_core::files::sealed::FORMAT_VERSION
        )));
    }

    #[test]
    fn harness_args_parse_like_libtest() {
        let args: Vec<String> = [
            "bar",
            "--exact",
            "--skip=slow",
            "--skip",
            "flaky",
            "--include-ignored",
            "--test-threads",
            "3",
        ]
        .map(String::from)
        .to_vec();
        let parsed = parse_harness_args(Some("foo"), &args).unwrap();
        assert_eq!(parsed.filter.patterns, ["foo", "bar"]);
        assert_eq!(parsed.filter.skip, ["slow", "flaky"]);
        assert!(parsed.filter.exact);
        assert_eq!(parsed.filter.run_ignored, RunIgnored::Yes);
        assert_eq!(parsed.test_threads, Some(3));
        assert!(parse_harness_args(None, &["--format=json".into()]).is_err());
        assert!(parse_harness_args(None, &["--skip".into()]).is_err());
    }

    #[test]
    fn cargo_options_are_forwarded() {
        let CargoCli::Ekstazi(cli) = CargoCli::parse_from([
            "cargo",
            "ekstazi",
            "test",
            "-p",
            "a",
            "--features",
            "x y",
            "--release",
            "--test",
            "it",
            "name",
            "--",
            "--exact",
        ]);
        let Command::Test(args) = cli.command else {
            panic!()
        };
        assert_eq!(
            args.cargo.to_cargo_args(false),
            [
                "--package",
                "a",
                "--test",
                "it",
                "--release",
                "--features",
                "x y"
            ]
        );
        assert_eq!(args.cargo.profile_name(), "release");
        assert_eq!(args.cargo.feature_request(), "x,y");
        assert_eq!(args.filter.as_deref(), Some("name"));
        assert_eq!(args.libtest, ["--exact"]);
    }

    #[test]
    fn bisect_offers_three_searches_the_papers_by_default() {
        let search = |extra: &[&str]| {
            let CargoCli::Ekstazi(cli) =
                CargoCli::parse_from(["cargo", "ekstazi", "bisect", "t"].iter().chain(extra));
            let Command::Bisect(args) = cli.command else {
                panic!()
            };
            args.search
        };
        assert_eq!(search(&[]), SearchArg::Multiplying);
        assert_eq!(
            search(&["--search", "multiplying-binary"]),
            SearchArg::MultiplyingThenBinary
        );
        assert_eq!(search(&["--search", "binary"]), SearchArg::Binary);
    }
}
