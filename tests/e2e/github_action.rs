//! The GitHub Action (`action.yml`, its logic in `action/ekstazi-ci.sh`):
//! the script runs here as the action runs it, with GitHub's environment
//! variables set, in a real git repository, with the real `cargo-ekstazi`
//! on `PATH`. The test plays the part of `actions/cache`: it restores and
//! saves the state directory under the keys the script wrote to
//! `$GITHUB_OUTPUT`, with the cache's rules (an exact key first, then
//! each prefix, newest entry first; only an entry saved from the same
//! path).

use crate::support::{Fixture, copy_tree, label_of, labels};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const PRICES: &str = "shop tests::prices";
const TAXES: &str = "shop tests::taxes";
const TOTALS: &str = "shop tests::totals";
const LABELS: &str = "shop tests::labels";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn script() -> PathBuf {
    repository().join("action/ekstazi-ci.sh")
}

/// The outputs a step wrote to `$GITHUB_OUTPUT`: `name=value` lines, and
/// `name<<DELIMITER` ... `DELIMITER` for values of several lines.
fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut outputs = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<") {
            let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
            outputs.insert(name.to_owned(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            outputs.insert(name.to_owned(), value.to_owned());
        } else {
            panic!("not an output line: {line:?} in {text}");
        }
    }
    outputs
}

/// The Actions cache of one repository: entries in the order saved.
struct Cache {
    dir: tempfile::TempDir,
    entries: RefCell<Vec<(String, String, PathBuf)>>,
}

impl Cache {
    fn new() -> Cache {
        Cache {
            dir: tempfile::tempdir().unwrap(),
            entries: RefCell::new(Vec::new()),
        }
    }

    /// `actions/cache/save`: a copy of `path` (in the checkout `f`).
    fn save(&self, f: &Fixture, path: &str, key: &str) {
        let mut entries = self.entries.borrow_mut();
        assert!(
            entries.iter().all(|(k, _, _)| k != key),
            "a cache entry is immutable, and {key} exists"
        );
        let copy = self.dir.path().join(entries.len().to_string());
        copy_tree(&f.file(path), &copy, true);
        entries.push((key.to_owned(), path.to_owned(), copy));
    }

    /// `actions/cache/restore`: the key restored, if any.
    fn restore(&self, f: &Fixture, path: &str, key: &str, restore_keys: &str) -> Option<String> {
        let entries = self.entries.borrow();
        let same_path = || entries.iter().rev().filter(|(_, p, _)| p == path);
        let found = same_path().find(|(k, _, _)| k == key).or_else(|| {
            restore_keys
                .lines()
                .find_map(|prefix| same_path().find(|(k, _, _)| k.starts_with(prefix)))
        })?;
        copy_tree(&found.2, &f.file(path), true);
        Some(found.0.clone())
    }
}

/// One job's environment: the event and the inputs.
struct Event {
    name: &'static str,
    git_ref: String,
    payload: Value,
    vars: Vec<(&'static str, String)>,
}

impl Event {
    fn push(branch: &str) -> Event {
        Event {
            name: "push",
            git_ref: format!("refs/heads/{branch}"),
            payload: json!({"repository": {"default_branch": "main"}}),
            vars: Vec::new(),
        }
    }

    fn pull_request(number: u32, head: &str, base: &str) -> Event {
        Event {
            name: "pull_request",
            git_ref: format!("refs/pull/{number}/merge"),
            payload: json!({
                "number": number,
                "pull_request": {"number": number, "head": {"ref": head}, "base": {"ref": base}},
                "repository": {"default_branch": "main"},
            }),
            vars: vec![
                ("GITHUB_HEAD_REF", head.to_owned()),
                ("GITHUB_BASE_REF", base.to_owned()),
            ],
        }
    }

    fn merge_group(base: &str, sha: &str) -> Event {
        Event {
            name: "merge_group",
            git_ref: format!("refs/heads/gh-readonly-queue/{base}/pr-7-{sha}"),
            payload: json!({
                "merge_group": {"head_sha": sha, "base_ref": format!("refs/heads/{base}")},
                "repository": {"default_branch": "main"},
            }),
            vars: Vec::new(),
        }
    }

    fn with(mut self, name: &'static str, value: &str) -> Event {
        self.vars.push((name, value.to_owned()));
        self
    }
}

/// What one job left: its outputs, its summary, and how the run ended.
struct Job {
    outputs: BTreeMap<String, String>,
    summary: String,
    status: Option<i32>,
    log: String,
    restored: Vec<String>,
    /// The `--report-json` the output `report` names (the runner's
    /// temporary directory goes with the runner).
    report: Option<Value>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?}, restored {:?}\noutputs {:#?}\nsummary:\n{}\nlog:\n{}",
            self.status, self.restored, self.outputs, self.summary, self.log
        )
    }
}

impl Job {
    fn output(&self, name: &str) -> &str {
        self.outputs
            .get(name)
            .unwrap_or_else(|| panic!("no output {name}: {self:?}"))
    }

    /// The labels of the tests the run selected, from its report.
    fn selected(&self) -> BTreeSet<String> {
        let report = self
            .report
            .as_ref()
            .unwrap_or_else(|| panic!("no report: {self:?}"));
        report["tests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["selected"] == true)
            .map(label_of)
            .collect()
    }
}

/// A runner: its temporary directory outlives the job, as the files the
/// outputs name must.
struct Runner {
    temp: tempfile::TempDir,
    /// `GITHUB_RUN_ID`: each job's own, as each saves a key of its own.
    run_id: u64,
}

impl Runner {
    fn new() -> Runner {
        static RUN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(4242);
        Runner {
            temp: tempfile::tempdir().unwrap(),
            run_id: RUN_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Runs one phase of the script; its exit status and output.
    fn phase(&self, f: &Fixture, event: &Event, phase: &str) -> (Option<i32>, String) {
        let temp = self.temp.path();
        let event_path = temp.join("event.json");
        std::fs::write(&event_path, event.payload.to_string()).unwrap();
        let mut command = f.program(Path::new("bash"));
        command.arg(script()).arg(phase);
        // The suite may run on GitHub Actions itself: only this job's
        // variables are seen.
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            if ["GITHUB_", "RUNNER_", "INPUT_", "ACTIONS_"]
                .iter()
                .any(|p| text.starts_with(p))
            {
                command.env_remove(&name);
            }
        }
        let bin = Path::new(env!("CARGO_BIN_EXE_cargo-ekstazi"))
            .parent()
            .unwrap();
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
        )
        .unwrap();
        let sha = f.git(&["rev-parse", "HEAD"]);
        command
            .env("PATH", path)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_EVENT_NAME", event.name)
            .env("GITHUB_REF", &event.git_ref)
            .env("GITHUB_SHA", sha)
            .env("GITHUB_EVENT_PATH", &event_path)
            .env("GITHUB_OUTPUT", temp.join("output"))
            .env("GITHUB_STEP_SUMMARY", temp.join("summary.md"))
            .env("GITHUB_RUN_ID", self.run_id.to_string())
            .env("GITHUB_RUN_ATTEMPT", "1")
            .env("RUNNER_OS", "Linux")
            .env("RUNNER_TEMP", temp.join("runner"))
            .envs(event.vars.iter().map(|(k, v)| (k, v)));
        std::fs::create_dir_all(temp.join("runner")).unwrap();
        let output = command.output().unwrap();
        let log = format!(
            "--- {phase} stdout\n{}\n--- {phase} stderr\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), log)
    }

    /// The outputs written so far, and the summary.
    fn results(&self) -> (BTreeMap<String, String>, String) {
        let read =
            |name: &str| std::fs::read_to_string(self.temp.path().join(name)).unwrap_or_default();
        (parse_outputs(&read("output")), read("summary.md"))
    }

    /// The `keys` phase alone, which must succeed.
    fn keys(&self, f: &Fixture, event: &Event) -> BTreeMap<String, String> {
        let (status, log) = self.phase(f, event, "keys");
        assert_eq!(status, Some(0), "{log}");
        self.results().0
    }

    /// The whole job, as `action.yml` runs it, with `cache` as the Actions cache.
    fn job(&self, f: &Fixture, cache: &Cache, event: &Event) -> Job {
        // Each job starts from a fresh checkout: no state in it. (The
        // build output stays, as a cache of it would restore it.)
        let _ = std::fs::remove_dir_all(f.file(".ekstazi"));
        let mut log = String::new();
        let mut restored = Vec::new();
        let mut step = |phase: &str| {
            let (status, text) = self.phase(f, event, phase);
            log.push_str(&text);
            status
        };
        assert_eq!(step("keys"), Some(0), "{log}");
        let outputs = self.results().0;
        let path = &outputs["state-path"];
        for slot in ["first", "second"] {
            let key = &outputs[&format!("{slot}-key")];
            if !key.is_empty() {
                let keys = &outputs[&format!("{slot}-restore-keys")];
                restored.extend(cache.restore(f, path, key, keys));
            }
            if slot == "first" {
                assert_eq!(step("stash"), Some(0), "{log}");
            }
        }
        let status = step("run");
        let (outputs, summary) = self.results();
        let save_key = &outputs["save-key"];
        if !save_key.is_empty() {
            cache.save(f, &outputs["state-path"], save_key);
        }
        let report = outputs
            .get("report")
            .map(|path| serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap());
        Job {
            report,
            outputs,
            summary,
            status,
            log,
            restored,
        }
    }
}

/// A job on a new runner, which must pass.
fn job_ok(f: &Fixture, cache: &Cache, event: &Event) -> Job {
    let job = Runner::new().job(f, cache, event);
    assert_eq!(job.status, Some(0), "{job:?}");
    job
}

#[test]
fn the_cache_keys_follow_the_event_branch_and_shard() {
    let f = Fixture::new("history").in_git();
    let sha = f.git(&["rev-parse", "HEAD"]);
    let ns = "cargo-ekstazi-Linux-all-";

    // A push to the default branch builds on its own state only.
    let runner = Runner::new();
    let keys = runner.keys(&f, &Event::push("main"));
    assert_eq!(keys["first-key"], format!("{ns}branch:main:{sha}"));
    assert_eq!(
        keys["first-restore-keys"],
        format!("{ns}branch:main:{sha}:\n{ns}branch:main:")
    );
    assert_eq!(keys["second-key"], "");
    let run = runner.run_id;
    assert_eq!(keys["save-key"], format!("{ns}branch:main:{sha}:{run}-1"));
    assert_eq!(keys["state-path"], "./.ekstazi");

    // A push elsewhere: its branch's state, then the default branch's.
    let runner = Runner::new();
    let keys = runner.keys(&f, &Event::push("feature/x,y"));
    let run = runner.run_id;
    assert_eq!(keys["first-key"], format!("{ns}branch:feature/x_y:{sha}"));
    assert_eq!(keys["second-key"], format!("{ns}branch:main:"));
    assert_eq!(keys["second-restore-keys"], format!("{ns}branch:main:"));
    assert_eq!(
        keys["save-key"],
        format!("{ns}branch:feature/x_y:{sha}:{run}-1")
    );

    // A pull request: its base branch's state; its own is recorded by
    // nobody, so nothing is saved.
    let keys = Runner::new().keys(&f, &Event::pull_request(7, "feature", "release"));
    assert_eq!(keys["first-key"], "");
    assert_eq!(keys["second-key"], format!("{ns}branch:release:"));
    assert_eq!(keys["save-key"], "");

    // Recording pull requests: its own earlier runs' state, then its base
    // branch's, and this run's saved.
    let runner = Runner::new();
    let event =
        Event::pull_request(7, "feature", "release").with("INPUT_RECORD_PULL_REQUESTS", "true");
    let keys = runner.keys(&f, &event);
    let run = runner.run_id;
    assert_eq!(keys["first-key"], format!("{ns}pr:7:{sha}"));
    assert_eq!(
        keys["first-restore-keys"],
        format!("{ns}pr:7:{sha}:\n{ns}pr:7:")
    );
    assert_eq!(keys["second-key"], format!("{ns}branch:release:"));
    assert_eq!(keys["save-key"], format!("{ns}pr:7:{sha}:{run}-1"));

    // A merge queue: the base branch's state; nothing saved.
    let keys = Runner::new().keys(&f, &Event::merge_group("release", &sha));
    assert_eq!(keys["first-key"], "");
    assert_eq!(keys["second-key"], format!("{ns}branch:release:"));
    assert_eq!(keys["save-key"], "");

    // Shards keep states of their own, and a cache key of the user's
    // keeps jobs apart.
    let event = Event::push("dev")
        .with("INPUT_SHARDS", "3")
        .with("INPUT_SHARD", "2")
        .with("INPUT_CACHE_KEY", "nightly");
    let keys = Runner::new().keys(&f, &event);
    let ns = "cargo-ekstazi-Linux-nightly-shard2of3-";
    assert_eq!(keys["first-key"], format!("{ns}branch:dev:{sha}"));
    assert_eq!(keys["second-key"], format!("{ns}branch:main:"));

    // Bad input is an error that says what is wrong.
    let event = Event::push("main")
        .with("INPUT_SHARDS", "2")
        .with("INPUT_SHARD", "3");
    let (status, log) = Runner::new().phase(&f, &event, "keys");
    assert_eq!(status, Some(2), "{log}");
    assert!(log.contains("shard 3 is not one of 1 to 2"), "{log}");
}

#[test]
fn a_push_after_a_push_skips_unchanged_tests_and_a_pull_request_builds_on_its_base() {
    let f = Fixture::new("history").in_git();
    let cache = Cache::new();

    // The first push restores nothing, runs everything and saves.
    let first = job_ok(&f, &cache, &Event::push("main"));
    assert!(first.restored.is_empty(), "{first:?}");
    assert_eq!(first.selected(), labels(&[PRICES, TAXES, TOTALS, LABELS]));
    assert!(
        first.summary.contains("| selected | 4 |")
            && first.summary.contains("| skipped as unaffected | 0 |"),
        "{first:?}"
    );
    assert!(first.summary.contains("| new | 4 |"), "{first:?}");
    assert!(first.output("junit").ends_with("/junit.xml"), "{first:?}");

    // The next push restores that state: only what the change reaches runs.
    f.edit("src/price.rs", "    amount\n", "    amount * 2 / 2\n");
    let second_sha = f.commit("price: the same, another way");
    let second = job_ok(&f, &cache, &Event::push("main"));
    assert_eq!(second.restored, [first.output("save-key")], "{second:?}");
    assert_eq!(second.selected(), labels(&[PRICES, TOTALS]));
    for row in [
        "| selected | 2 |",
        "| passed | 2 |",
        "| skipped as unaffected | 2 |",
        "| time saved (the skipped tests' last durations) | ~",
        "| function changed: shop::price::price | 2 |",
    ] {
        assert!(second.summary.contains(row), "{row}: {second:?}");
    }
    assert_eq!(second.output("selected"), "2");
    assert_eq!(second.output("skipped"), "2");

    // A pull request's run at its merge commit: nothing of its own yet,
    // main's state restored second; main's records vouch for what the
    // branch did not change.
    f.git(&["checkout", "-q", "-b", "feature", "HEAD~1"]);
    f.edit("src/tax.rs", "amount / 10", "amount / 10 + 0");
    f.commit("tax: written out");
    f.git(&["checkout", "-q", "--detach", &second_sha]);
    f.git(&["merge", "-q", "--no-ff", "-m", "Merge feature", "feature"]);
    let pr = job_ok(&f, &cache, &Event::pull_request(7, "feature", "main"));
    assert_eq!(pr.restored, [second.output("save-key")], "{pr:?}");
    assert_eq!(pr.selected(), labels(&[TAXES, TOTALS]));
    // As `cargo test` runs them, and nothing recorded or saved.
    assert!(pr.log.contains("test tests::taxes ... ok"), "{pr:?}");
    assert!(pr.log.contains("no record was written"), "{pr:?}");
    assert_eq!(pr.output("save-key"), "", "{pr:?}");

    // Its next run is the same: main's state, the same selection.
    let again = job_ok(&f, &cache, &Event::pull_request(7, "feature", "main"));
    assert_eq!(again.restored, [second.output("save-key")], "{again:?}");
    assert_eq!(again.selected(), labels(&[TAXES, TOTALS]));

    // The merge queue tests the same merge on main's state, and saves nothing.
    let queue = job_ok(&f, &cache, &Event::merge_group("main", &second_sha));
    assert_eq!(queue.restored, [second.output("save-key")], "{queue:?}");
    assert_eq!(queue.selected(), labels(&[TAXES, TOTALS]));
    assert_eq!(cache.entries.borrow().len(), 2);

    // Recording pull requests: the run records, and its next run restores
    // its own state first, and main's too.
    let record = |e: Event| e.with("INPUT_RECORD_PULL_REQUESTS", "true");
    let pr = job_ok(
        &f,
        &cache,
        &record(Event::pull_request(7, "feature", "main")),
    );
    assert_eq!(pr.selected(), labels(&[TAXES, TOTALS]));
    assert!(pr.output("save-key").contains("-all-pr:7:"), "{pr:?}");
    let again = job_ok(
        &f,
        &cache,
        &record(Event::pull_request(7, "feature", "main")),
    );
    assert_eq!(
        again.restored,
        [pr.output("save-key"), second.output("save-key")],
        "{again:?}"
    );
    assert!(again.selected().is_empty(), "{again:?}");
    assert!(
        again.summary.contains("| skipped as unaffected | 4 |"),
        "{again:?}"
    );
}

#[test]
fn shards_split_the_selection_and_together_cover_it() {
    let f = Fixture::new("basic").in_git();
    let cache = Cache::new();
    let shard = |m: &str| {
        Event::push("main")
            .with("INPUT_SHARDS", "2")
            .with("INPUT_SHARD", m)
            .with("INPUT_ARGS", "--workspace")
    };
    let everything = labels(crate::support::BASIC_ALL);

    let cover = |jobs: &[&Job]| {
        let sets: Vec<BTreeSet<String>> = jobs.iter().map(|j| j.selected()).collect();
        assert!(sets.iter().all(|s| !s.is_empty()), "{jobs:?}");
        assert!(sets[0].is_disjoint(&sets[1]), "{sets:?}");
        sets[0].union(&sets[1]).cloned().collect::<BTreeSet<_>>()
    };
    let one = job_ok(&f, &cache, &shard("1"));
    let two = job_ok(&f, &cache, &shard("2"));
    let all = cover(&[&one, &two]);
    assert_eq!(all, everything);
    assert!(one.summary.contains("(shard 1 of 2)"), "{one:?}");
    assert!(
        one.summary.contains("| affected, run by another shard | "),
        "{one:?}"
    );
    assert!(one.output("save-key").contains("-shard1of2-branch:main:"));
    assert!(two.output("save-key").contains("-shard2of2-branch:main:"));

    // After a change, each shard restores its own state: together they run
    // exactly what the change reaches.
    f.write("beta/data/a.txt", "changed\n");
    f.commit("data");
    let one = job_ok(&f, &cache, &shard("1"));
    let two = job_ok(&f, &cache, &shard("2"));
    assert_eq!(one.restored.len(), 1, "{one:?}");
    let ran: BTreeSet<String> = one.selected().union(&two.selected()).cloned().collect();
    assert_eq!(ran, labels(&["beta::files reads_data"]));
}

/// `action.yml` is read by GitHub, not here: check what it must agree on
/// with the script, on its text (no YAML parser is a dependency).
#[test]
fn the_action_declares_its_inputs_and_uses_the_keys_the_script_writes() {
    let action = std::fs::read_to_string(repository().join("action.yml")).unwrap();
    let section = |name: &str| -> BTreeSet<String> {
        let start = action.find(&format!("\n{name}:\n")).unwrap() + name.len() + 3;
        action[start..]
            .lines()
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .filter_map(|l| l.strip_prefix("  ")?.strip_suffix(':'))
            .filter(|l| !l.starts_with(' '))
            .map(str::to_owned)
            .collect()
    };
    let inputs = section("inputs");
    for input in [
        "args",
        "shards",
        "shard",
        "upload-junit",
        "command",
        "install",
        "remote",
    ] {
        assert!(
            inputs.contains(input),
            "{input} is not an input: {inputs:?}"
        );
    }
    let referenced = |prefix: &str| -> BTreeSet<String> {
        action
            .match_indices(prefix)
            .map(|(i, _)| {
                action[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect()
            })
            .collect()
    };
    let used = referenced("inputs.");
    assert!(
        used.is_subset(&inputs),
        "undeclared: {:?}",
        used.difference(&inputs)
    );

    // Every key output it uses is one the script writes (and the tool's).
    let f = Fixture::new("history").in_git();
    let mut written: BTreeSet<String> = Runner::new()
        .keys(&f, &Event::push("main"))
        .into_keys()
        .collect();
    written.insert("tool-key".to_owned());
    let used = referenced("steps.keys.outputs.");
    assert!(
        used.is_subset(&written),
        "not written: {:?}",
        used.difference(&written)
    );

    // A cache entry restores only to the path it was saved from: every
    // restore and the save use the one path.
    let state_paths: Vec<&str> = action
        .split("uses: actions/cache/")
        .skip(1)
        .map(|step| {
            let line = step
                .lines()
                .find(|l| l.trim_start().starts_with("path:"))
                .unwrap();
            line.trim()
        })
        .collect();
    assert_eq!(state_paths.len(), 3, "{state_paths:?}");
    assert!(
        state_paths
            .iter()
            .all(|p| *p == "path: ${{ steps.keys.outputs.state-path }}"),
        "{state_paths:?}"
    );
}

#[test]
fn a_failure_fails_the_job_is_summarised_and_saved_and_nextest_runs_the_selection() {
    let f = Fixture::new("history").in_git();
    let cache = Cache::new();
    let wrong = "assert_eq!(tax::tax(10), 2);";
    f.edit("src/lib.rs", "assert_eq!(tax::tax(10), 1);", wrong);
    f.commit("tax: a wrong expectation");
    let failed = Runner::new().job(&f, &cache, &Event::push("main"));
    assert_eq!(failed.status, Some(101), "{failed:?}");
    assert_eq!(failed.output("exit-code"), "101");
    for text in [
        "| failed | 1 |",
        "**Failed**",
        "- `shop tests::taxes`: failed",
    ] {
        assert!(failed.summary.contains(text), "{text}: {failed:?}");
    }
    assert_eq!(cache.entries.borrow().len(), 1, "saved after a failure too");

    // Under nextest, the summary is the selection's: the test that failed
    // and was fixed runs, nothing else.
    f.edit("src/lib.rs", wrong, "assert_eq!(tax::tax(10), 1);");
    f.commit("tax: the right expectation");
    let event = Event::push("main").with("INPUT_COMMAND", "nextest");
    let job = job_ok(&f, &cache, &event);
    assert_eq!(job.restored, [failed.output("save-key")], "{job:?}");
    assert!(job.report.is_none(), "{job:?}");
    for row in ["| selected | 1 |", "| skipped as unaffected | 3 |"] {
        assert!(job.summary.contains(row), "{row}: {job:?}");
    }
    assert!(job.log.contains("tests::taxes"), "{job:?}");

    // A pull request under nextest: the selection listed, the tests run
    // and nothing recorded (`list` takes no `--no-record`).
    let event = Event::pull_request(3, "feature", "main").with("INPUT_COMMAND", "nextest");
    let pr = job_ok(&f, &cache, &event);
    assert_eq!(pr.output("save-key"), "", "{pr:?}");
    assert!(pr.summary.contains("| selected |"), "{pr:?}");
}

#[test]
fn with_a_remote_store_the_default_branch_pushes_and_a_pull_request_without_a_cache_fetches() {
    let f = Fixture::new("history").in_git();
    let store = tempfile::tempdir().unwrap();
    let remote = format!("file://{}", store.path().display());

    // A push to another branch records, but does not share.
    f.git(&["checkout", "-q", "-b", "topic"]);
    let topic = job_ok(
        &f,
        &Cache::new(),
        &Event::push("topic").with("INPUT_REMOTE", &remote),
    );
    assert!(!topic.log.contains("pushed"), "{topic:?}");
    f.git(&["checkout", "-q", "main"]);

    // A push to main records and shares.
    let main = job_ok(
        &f,
        &Cache::new(),
        &Event::push("main").with("INPUT_REMOTE", &remote),
    );
    assert!(main.log.contains("cargo-ekstazi: pushed"), "{main:?}");

    // A pull request whose cache holds nothing (a fork's, say) fetches
    // main's records and runs nothing it did not change.
    let pr = job_ok(
        &f,
        &Cache::new(),
        &Event::pull_request(9, "topic", "main").with("INPUT_REMOTE", &remote),
    );
    assert!(pr.restored.is_empty(), "{pr:?}");
    assert!(pr.log.contains("fetched 1 push"), "{pr:?}");
    assert!(pr.selected().is_empty(), "{pr:?}");
}
