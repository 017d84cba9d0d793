//! What lets a team trust the selection: `--audit` (every test runs, and
//! the run says what the selection would have skipped and which of those
//! failed), the `Ekstazi: all` escape hatch, and flaky tests under
//! `--retries`.

use crate::support::Fixture;

const LIMIT_TEST: &str = "verdicts::audit reads_the_limit";

/// The fixture with a test that reads `data/limit.txt`, told to ignore it.
fn fixture() -> Fixture {
    let f = Fixture::new("verdicts");
    f.write("data/limit.txt", "5\n");
    f.write(
        "tests/audit.rs",
        "#[test]\nfn reads_the_limit() {\n    let limit: u32 = std::fs::read_to_string(\"data/limit.txt\").unwrap().trim().parse().unwrap();\n    assert!(limit < 10, \"the limit is {limit}\");\n}\n",
    );
    f
}

#[test]
fn a_test_skipped_on_an_ignored_file_that_now_fails_is_a_miss() {
    let f = fixture();
    let ignore = ["--ignore-path", "data/limit.txt"];
    f.test_ok(&ignore);
    // The file the user told it to ignore changes, and the test now fails:
    // the selection skips it.
    f.write("data/limit.txt", "50\n");
    assert!(f.selected(&ignore).is_empty());

    let json = f.tmp().join("audit.json");
    let mut args = vec!["test", "--audit", "--report-json", json.to_str().unwrap()];
    args.extend(ignore);
    let run = f.run(&args);
    assert_eq!(run.code(), Some(102), "a miss: {run:?}");
    assert_eq!(run.ran().len(), 6, "every test ran: {run:?}");
    assert!(
        run.stdout.contains(&format!(
            "MISS {LIMIT_TEST}: skipped on the word of its current record"
        )),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("would have skipped 6 of 6 tests"),
        "{run:?}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["audit"]["missed"], serde_json::json!([LIMIT_TEST]));
    assert_eq!(report["audit"]["would_skip"].as_array().unwrap().len(), 6);
    assert!(report["audit"]["seconds_saved"].as_f64().unwrap() > 0.0);
    // Records were rewritten, as by --forceall: the failure is on record.
    let selected: Vec<String> = f.selected(&ignore).into_iter().map(|(l, _)| l).collect();
    assert_eq!(selected, [LIMIT_TEST]);
}

#[test]
fn an_audit_without_a_miss_exits_as_cargo_test_does() {
    let f = fixture();
    f.test_ok(&[]);
    f.edit("src/lib.rs", "a * b", "b * a");
    let run = f.run(&["test", "--audit"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert_eq!(run.ran().len(), 6, "{run:?}");
    // All but the test of the edited function would have been skipped.
    assert!(
        run.stdout.contains("would have skipped 5 of 6 tests"),
        "{run:?}"
    );
    assert!(run.stdout.contains("no miss"), "{run:?}");
    assert!(f.selected(&[]).is_empty());
}

#[test]
fn with_nothing_changed_every_passing_test_would_be_skipped_and_the_saving_is_their_time() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let json = f.tmp().join("audit.json");
    let run = f.run(&["test", "--audit", "--report-json", json.to_str().unwrap()]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let audit = &report["audit"];
    assert_eq!(audit["would_skip"].as_array().unwrap().len(), 5, "{audit}");
    assert_eq!(audit["missed"], serde_json::json!([]));
    // The time saved is what those tests took, as their records now say.
    let recorded: f64 = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["duration"].as_f64().unwrap())
        .sum();
    let saved = audit["seconds_saved"].as_f64().unwrap();
    assert!(
        (saved - recorded).abs() < 1e-3,
        "{saved} against {recorded}"
    );
}

#[test]
fn a_commit_whose_message_says_ekstazi_all_runs_every_test_and_says_why() {
    let f = Fixture::new("verdicts").in_git();
    f.test_ok(&[]);
    f.edit("src/lib.rs", "a * b", "b * a");
    f.git(&[
        "commit",
        "-q",
        "-a",
        "-m",
        "swap the factors\n\nEkstazi: all",
    ]);
    let run = f.test_ok(&[]);
    assert_eq!(run.ran().len(), 5, "{run:?}");
    assert!(
        run.stderr
            .contains("running every test: HEAD's message has the trailer `Ekstazi: all`"),
        "{run:?}"
    );
    // A later commit without it selects again.
    f.edit("src/lib.rs", "b * a", "a.wrapping_mul(b)");
    f.commit("multiply without overflow checks");
    assert_eq!(f.test_ok(&[]).ran().len(), 1);
}

#[test]
fn a_test_that_passes_on_its_second_attempt_is_flaky_and_runs_next_time() {
    let f = Fixture::new("verdicts");
    f.write(
        "tests/flaky.rs",
        "#[test]\nfn passes_on_its_second_attempt() {\n    let Some(file) = std::env::var_os(\"FIXTURE_ATTEMPTS\") else { return };\n    let n = std::fs::read_to_string(&file).map(|t| t.trim().parse::<u32>().unwrap()).unwrap_or(0) + 1;\n    std::fs::write(&file, n.to_string()).unwrap();\n    assert!(n >= 2, \"attempt {n}\");\n}\n",
    );
    let attempts = f.tmp().join("attempts");
    let f = f.with_env("FIXTURE_ATTEMPTS", attempts.to_str().unwrap());
    let (json, junit) = (f.tmp().join("run.json"), f.tmp().join("junit.xml"));
    let run = f.test_ok(&[
        "--retries",
        "1",
        "--report-json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    const FLAKY: &str = "verdicts::flaky passes_on_its_second_attempt";
    assert!(
        run.stdout
            .contains(&format!("{FLAKY} (passed on attempt 2)")),
        "{run:?}"
    );
    assert!(run.stdout.contains("1 flaky test"), "{run:?}");
    assert_eq!(std::fs::read_to_string(&attempts).unwrap(), "2");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let flaky: Vec<&str> = report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["flaky"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(flaky, ["passes_on_its_second_attempt"]);
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("flakyFailure")
    );
    // A flaky pass is no witness: it runs next time, as failed.
    let selected = f.selected(&[]);
    let reasons = &selected
        .iter()
        .find(|(label, _)| label == FLAKY)
        .unwrap_or_else(|| panic!("not selected: {selected:?}"))
        .1;
    assert!(
        reasons.contains(&"failed last time".to_owned()),
        "{reasons:?}"
    );
}

#[test]
fn stats_count_the_runs_and_the_time_their_skipped_tests_took() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    f.test_ok(&[]);
    // What each test's record says it took, as the third run finds them.
    let listed = f.list(&[]);
    let duration = |name: &str| {
        listed["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["last_duration"]
            .as_f64()
            .unwrap()
    };
    let names = ["a_claims", "adds", "b_claims", "counts_runs", "multiplies"];
    let all: f64 = names.iter().map(|n| duration(n)).sum();
    f.edit("src/lib.rs", "a * b", "b * a");
    assert_eq!(f.test_ok(&[]).ran().len(), 1);

    let run = f.run(&["stats", "--json"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let stats: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let overall = &stats["overall"];
    assert_eq!(overall["runs"], 3, "{stats}");
    // Selected 5, 0, 1; skipped 0, 5, 4.
    assert_eq!(overall["selected"], 6, "{stats}");
    assert_eq!(overall["skipped"], 9, "{stats}");
    // The second run skipped all five, the third all but `multiplies`.
    let expected = all + (all - duration("multiplies"));
    let saved = overall["seconds_saved"].as_f64().unwrap();
    assert!(
        (saved - expected).abs() < 0.01,
        "{saved} against {expected}"
    );
    let summary = f.run(&["stats", "--summary"]);
    assert!(
        summary
            .stdout
            .starts_with("cargo-ekstazi: 3 runs: 6 tests selected, 9 skipped"),
        "{summary:?}"
    );
}

#[test]
fn full_every_two_runs_makes_every_second_run_a_full_one() {
    let f = Fixture::new("verdicts");
    f.write(".config/ekstazi.toml", "[run]\nfull-every = 2\n");
    let first = f.test_ok(&[]);
    assert!(
        first.stderr.contains("running every test as an audit"),
        "{first:?}"
    );
    let second = f.test_ok(&[]);
    assert_eq!(second.ran().len(), 0, "{second:?}");
    let third = f.test_ok(&[]);
    assert_eq!(third.ran().len(), 5, "{third:?}");
    assert!(
        third.stderr.contains(
            "running every test as an audit: 1 run since the last full one ([run] full-every)"
        ),
        "{third:?}"
    );
    assert!(
        third.stdout.contains("would have skipped 5 of 5 tests"),
        "{third:?}"
    );
    assert_eq!(f.test_ok(&[]).ran().len(), 0);
}
