//! `cargo ekstazi bisect`: the latest regression point in real git
//! histories built in the test, with the change that caused it named, the
//! history's answers taken before any build, and nothing left behind when
//! interrupted.

use crate::support::Fixture;
use serde_json::Value;

const TAX_OK: &str = "pub fn tax(amount: u32) -> u32 {\n    amount / 10\n}\n";
/// `totals` fails: the total of 10 is 20.
const TAX_BROKEN: &str = "pub fn tax(amount: u32) -> u32 {\n    amount\n}\n";

/// The fixture in git, then commits 1..=n where the tax is broken at the
/// commits `broken` says; the ids, base first.
fn history(n: usize, broken: impl Fn(usize) -> bool) -> (Fixture, Vec<String>) {
    let f = Fixture::new("history").in_git();
    let mut ids = vec![f.git(&["rev-parse", "HEAD"])];
    for i in 1..=n {
        commit(&f, i, broken(i));
        ids.push(f.git(&["rev-parse", "HEAD"]));
    }
    (f, ids)
}

fn commit(f: &Fixture, i: usize, broken: bool) {
    f.write("src/tax.rs", if broken { TAX_BROKEN } else { TAX_OK });
    f.write("notes.txt", &format!("commit {i}\n"));
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", &format!("c{i}")]);
}

fn bisect(f: &Fixture, args: &[&str]) -> Value {
    let mut all = vec!["bisect", "--json"];
    all.extend_from_slice(args);
    let run = f.run(&all);
    assert_eq!(run.code(), Some(0), "{run:?}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

/// What the search judged `commit` (`good`, `bad`, `skip`), if it asked.
fn answer_at(report: &Value, commit: &str) -> Option<Value> {
    report["queries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["commit"] == commit)
        .map(|q| q["answer"].clone())
}

/// The (good, bad) commits of each regression found.
fn points(report: &Value) -> Vec<(String, String)> {
    report["regressions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["good"].as_str().unwrap().to_owned(),
                r["bad"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_regression_in_a_linear_history_is_found_and_explained() {
    let (f, c) = history(12, |i| i >= 5);
    // Records at the base only: every other answer is a build.
    f.git(&["checkout", "-q", &c[0]]);
    f.test_ok(&[]);
    f.git(&["checkout", "-q", "main"]);
    let report = bisect(&f, &["tests::totals"]);
    assert_eq!(points(&report), [(c[4].clone(), c[5].clone())]);
    let changed = &report["regressions"][0]["changed"];
    assert!(
        changed
            .as_array()
            .unwrap()
            .contains(&Value::from("function changed: shop::tax::tax")),
        "{report}"
    );
    assert_eq!(report["regressions"][0]["subject"], "c5");
    let builds = report["builds"].as_u64().unwrap();
    assert!((1..=8).contains(&builds), "{report}");
    assert_eq!(
        report["queries"][0]["how"], "history",
        "the good commit came from the history: {report}"
    );
    // No worktree is left behind.
    assert!(f.scratch_worktrees("bisect").is_empty());
    assert_eq!(f.git(&["worktree", "list"]).lines().count(), 1);
}

#[test]
fn the_users_ekstazi_variables_do_not_change_what_bisect_finds() {
    // A shell set to run one CI shard's tests, verdicts first: bisect's own
    // runs take neither. One of the two shards leaves the test out.
    for shard in ["hash:1/2", "hash:2/2"] {
        let (f, c) = history(4, |i| i >= 3);
        // The failure seen at HEAD, as a user sees it before bisecting.
        assert_eq!(f.run(&["test"]).code(), Some(101));
        let f = f
            .with_env("EKSTAZI_PARTITION", shard)
            .with_env("EKSTAZI_VERDICT_FIRST", "1");
        let report = bisect(&f, &["tests::totals", "--good", &c[0]]);
        assert_eq!(points(&report), [(c[2].clone(), c[3].clone())], "{shard}");
    }
}

#[test]
fn two_bisects_at_once_each_find_the_regression() {
    let (f, c) = history(6, |i| i >= 4);
    assert_eq!(f.run(&["test"]).code(), Some(101));
    let children: Vec<_> = (0..2)
        .map(|_| {
            f.command(&["bisect", "--json", "tests::totals", "--good", &c[0]])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(points(&report), [(c[3].clone(), c[4].clone())], "{stderr}");
    }
    assert!(f.scratch_worktrees("bisect").is_empty());
    assert_eq!(f.git(&["worktree", "list"]).lines().count(), 1);
}

#[test]
fn from_a_cold_start_the_bad_end_is_built_to_find_the_test() {
    // A fresh clone: no state at all. Broken at 4, fixed at 7, broken again
    // at 10.
    let (f, c) = history(12, |i| (4..7).contains(&i) || i >= 10);
    assert!(!f.file(".ekstazi").exists());
    let run = f.run(&["bisect", "--json", "tests::totals", "--good", &c[0]]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(
        run.stderr
            .contains("no record names tests::totals: building the bad end"),
        "{run:?}"
    );
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(points(&report), [(c[9].clone(), c[10].clone())], "{report}");
    // The bad end's build is one of them, and its run answered for it.
    let builds = report["builds"].as_u64().unwrap();
    assert!(builds >= 2, "{report}");
    assert!(f.scratch_worktrees("bisect").is_empty());
}

#[test]
fn the_latest_of_several_regressions_is_found() {
    // Broken at 4, fixed at 7, broken again at 10: git bisect from the base
    // would find 3 -> 4, already fixed.
    let (f, c) = history(12, |i| (4..7).contains(&i) || i >= 10);
    // The failure seen at HEAD, as a user sees it before bisecting.
    assert_eq!(f.run(&["test"]).code(), Some(101));
    let report = bisect(
        &f,
        &["tests::totals", "--good", &c[0], "--compare-git-bisect"],
    );
    assert_eq!(points(&report), [(c[9].clone(), c[10].clone())]);
    let git_bisect = report["git_bisect_builds"].as_u64().unwrap();
    assert!((3..=5).contains(&git_bisect), "{report}");
}

#[test]
fn each_bad_branch_gets_its_own_latest_point_and_a_broken_build_is_skipped() {
    // base - c1 - c2 - x1 - x2(broken)
    //              \- y1(broken) - y2(broken, and does not compile) - y3(broken)
    let (f, c) = history(2, |_| false);
    f.git(&["checkout", "-q", "-b", "x"]);
    commit(&f, 3, false);
    commit(&f, 4, true);
    let x2 = f.git(&["rev-parse", "HEAD"]);
    let x1 = f.git(&["rev-parse", "HEAD~1"]);
    f.git(&["checkout", "-q", "-b", "y", &c[2]]);
    commit(&f, 5, true);
    let y1 = f.git(&["rev-parse", "HEAD"]);
    f.write(
        "src/lib.rs",
        &(f.read("src/lib.rs") + "\nfn does_not_compile( {}\n"),
    );
    commit(&f, 6, true);
    let y2 = f.git(&["rev-parse", "HEAD"]);
    f.write(
        "src/lib.rs",
        &f.read("src/lib.rs")
            .replace("\nfn does_not_compile( {}\n", ""),
    );
    commit(&f, 7, true);
    assert_eq!(f.run(&["test"]).code(), Some(101));
    let report = bisect(
        &f,
        &["tests::totals", "--bad", "x", "--bad", "y", "--good", &c[0]],
    );
    assert_eq!(
        points(&report),
        [(x1, x2.clone()), (c[2].clone(), y1)],
        "{report}"
    );
    let y2_answer = answer_at(&report, &y2);
    assert!(
        y2_answer.is_none() || y2_answer == Some(Value::from("skip")),
        "a commit that does not compile is skipped: {report}"
    );
}

#[test]
fn a_commit_without_the_workspace_is_skipped_not_judged_by_the_checkout_around_it() {
    // base - c1 - c2 (no Cargo.toml: the project moved out, as a "prepare
    // for merge" commit leaves it) - c3 (broken). The scratch worktree is
    // inside the user's target directory, inside the checkout: cargo,
    // finding no manifest in it, would climb to the user's own (at c3,
    // broken) and call c2 bad.
    let (f, c) = history(1, |_| false);
    f.git(&["rm", "-q", "Cargo.toml"]);
    f.git(&["commit", "-q", "-m", "c2: no manifest"]);
    let c2 = f.git(&["rev-parse", "HEAD"]);
    f.git(&["checkout", "-q", &c[1], "--", "Cargo.toml"]);
    commit(&f, 3, true);
    let c3 = f.git(&["rev-parse", "HEAD"]);
    let report = bisect(&f, &["tests::totals", "--good", &c[0]]);
    assert_eq!(points(&report), [(c[1].clone(), c3)], "{report}");
    let c2_answer = answer_at(&report, &c2);
    assert_eq!(c2_answer, Some(Value::from("skip")), "{report}");
}

#[test]
fn with_records_at_every_commit_no_build_is_spent_and_wrong_ends_are_refused() {
    let (f, c) = history(8, |i| i >= 5);
    // A CI that ran at every commit (the broken ones fail).
    for commit in &c {
        f.git(&["checkout", "-q", commit]);
        let _ = f.run(&["test"]);
    }
    f.git(&["checkout", "-q", "main"]);
    let report = bisect(&f, &["tests::totals"]);
    assert_eq!(points(&report), [(c[4].clone(), c[5].clone())]);
    assert_eq!(report["builds"], 0, "{report}");
    assert!(
        report["queries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["how"] == "history" || q["how"] == "inherited"),
        "{report}"
    );
    // A good commit the history knows is bad is refused, and says why.
    let wrong = f.run(&["bisect", "tests::totals", "--good", &c[5]]);
    assert_ne!(wrong.code(), Some(0));
    assert!(
        wrong.stderr.contains("fails at the good commit"),
        "{wrong:?}"
    );
    // So is a bad commit where the tests pass.
    let passing = f.run(&["bisect", "tests::totals", "--bad", &c[3], "--good", &c[0]]);
    assert_ne!(passing.code(), Some(0));
    assert!(
        passing.stderr.contains("the tests pass at the bad commit"),
        "{passing:?}"
    );
}

#[test]
fn ctrl_c_or_a_hang_up_leaves_no_worktree_no_inner_run_and_the_state_intact() {
    for signal in [libc::SIGINT, libc::SIGHUP] {
        interrupted_by(signal);
    }
}

fn interrupted_by(signal: libc::c_int) {
    let (f, c) = history(6, |i| i >= 3);
    f.git(&["checkout", "-q", &c[0]]);
    f.test_ok(&[]);
    f.git(&["checkout", "-q", "main"]);
    let records = f.records();
    let mut child = f.command(&["bisect", "tests::totals"]).spawn().unwrap();
    let worktree = f.file(&format!("target/ekstazi/bisect/worktree-{}", child.id()));
    let started = std::time::Instant::now();
    while !worktree.join("Cargo.toml").exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the bisect never built"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(!worktree.exists(), "the worktree is removed");
    assert!(f.scratch_worktrees("bisect").is_empty());
    assert_eq!(f.git(&["worktree", "list"]).lines().count(), 1);
    assert_eq!(f.processes_in(), Vec::<u32>::new(), "an inner run is left");
    // The state holds the same records, and they still load.
    assert_eq!(f.records(), records);
    assert_eq!(f.list(&[])["total"], 4);
    let listing = f.run(&["history", "list", "--json"]);
    assert_eq!(listing.code(), Some(0), "{listing:?}");
    assert!(listing.stdout.contains(&c[0]), "{listing:?}");
}
