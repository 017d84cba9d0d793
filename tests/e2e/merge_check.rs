//! `cargo ekstazi merge-check`: merges built in real git repositories,
//! where each side passes its own tests and the merge breaks one neither
//! side touched (a semantic conflict), loses a side's new behaviour, merges
//! cleanly, or leaves a function both sides changed untested, or two
//! sides' changes that one caller reaches but no test runs together; and a
//! prospective merge checked without touching the user's checkout.

use crate::support::Fixture;
use serde_json::Value;

const TOTALS: &str = "shop tests::totals";
const PRICES: &str = "shop tests::prices";
const TAXES: &str = "shop tests::taxes";
const LABELS: &str = "shop tests::labels";

fn merge_check(f: &Fixture, args: &[&str], code: i32) -> Value {
    let mut all = vec!["merge-check", "--json"];
    all.extend_from_slice(args);
    let run = f.run(&all);
    assert_eq!(run.code(), Some(code), "{run:?}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Branches `a` and `b` from main, each made by its closure, then `b`
/// merged into `a` with git's default strategy; `HEAD` is the merge.
fn merged(f: &Fixture, a: impl Fn(&Fixture), b: impl Fn(&Fixture)) {
    f.git(&["checkout", "-q", "-b", "a", "main"]);
    a(f);
    f.git(&["checkout", "-q", "-b", "b", "main"]);
    b(f);
    f.git(&["checkout", "-q", "a"]);
    f.git(&["merge", "-q", "--no-edit", "b"]);
}

/// A raises the price (15 for 10), and its own test with it.
fn raise_price(f: &Fixture) {
    f.edit("src/price.rs", "    amount\n", "    amount + 5\n");
    f.edit(
        "src/lib.rs",
        "assert_eq!(price::price(10), 10);",
        "assert_eq!(price::price(10), 15);",
    );
    f.commit("raise the price");
}

/// B raises the tax (5 for 10), and its own test with it.
fn raise_tax(f: &Fixture) {
    f.edit("src/tax.rs", "amount / 10", "amount / 2");
    f.edit(
        "src/lib.rs",
        "assert_eq!(tax::tax(10), 1);",
        "assert_eq!(tax::tax(10), 5);",
    );
    f.commit("raise the tax");
}

#[test]
fn a_test_neither_side_touched_fails_at_the_merge_a_semantic_conflict() {
    let f = Fixture::new("history").in_git();
    // Each side alone: total(10) is 16, then 15, below 20; together 20.
    merged(&f, raise_price, raise_tax);
    let report = merge_check(&f, &[], 101);
    assert_eq!(strings(&report["both_sides"]), [TOTALS], "{report}");
    let ran = strings(&report["ran_at_merge"]);
    for test in [TOTALS, PRICES, TAXES] {
        assert!(ran.contains(&test.to_owned()), "{test}: {report}");
    }
    assert!(!ran.contains(&LABELS.to_owned()), "{report}");
    let conflicts = report["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{report}");
    assert_eq!(conflicts[0]["test"], TOTALS);
    assert_eq!(conflicts[0]["kind"], "semantic conflict");
    let changes = strings(&conflicts[0]["changes"]);
    assert!(
        changes.contains(&"parent 1: function changed: shop::price::price".to_owned())
            && changes.contains(&"parent 2: function changed: shop::tax::tax".to_owned()),
        "both sides' changes are named: {changes:?}"
    );
    // The user's checkout is as it was, and no worktree is left behind.
    assert_eq!(
        f.git(&["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    assert!(f.scratch_worktrees("merge-check").is_empty());
}

/// How the base and each parent were known.
fn surveyed(report: &Value) -> Vec<&str> {
    report["surveyed"]
        .as_array()
        .unwrap_or_else(|| panic!("no surveys: {report}"))
        .iter()
        .map(|s| s["how"].as_str().unwrap())
        .collect()
}

#[test]
fn records_filed_at_the_base_and_parents_spare_their_builds() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    merged(
        &f,
        |f| {
            raise_price(f);
            f.test_ok(&[]);
        },
        |f| {
            raise_tax(f);
            f.test_ok(&[]);
        },
    );
    let report = merge_check(&f, &[], 101);
    assert_eq!(surveyed(&report), ["history"; 3], "{report}");
    assert_eq!(strings(&report["both_sides"]), [TOTALS], "{report}");
    assert_eq!(
        report["conflicts"][0]["kind"], "semantic conflict",
        "{report}"
    );
    // --build builds them anyway.
    let built = merge_check(&f, &["--build"], 101);
    assert_eq!(built["surveyed"][0]["how"], "built", "{built}");
    // `cargo ekstazi test` at the merge labels the failure too.
    let run = f.run(&["test", "--junit", "junit.xml"]);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(
        run.stdout
            .contains("tests::totals (merge conflict: it passed at every parent)"),
        "{run:?}"
    );
    assert!(
        !run.stdout.contains("tests::prices (merge conflict"),
        "{run:?}"
    );
    let junit = std::fs::read_to_string(f.file("junit.xml")).unwrap();
    assert!(junit.contains("type=\"merge conflict\""), "{junit}");
}

#[test]
fn records_missing_at_one_parent_mean_all_are_built_alike() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    merged(
        &f,
        |f| {
            raise_price(f);
            f.test_ok(&[]);
        },
        raise_tax,
    );
    let report = merge_check(&f, &[], 101);
    assert_eq!(surveyed(&report), ["built"; 3], "{report}");
    // Alike, so a side's changes are only what it changed.
    assert_eq!(strings(&report["both_sides"]), [TOTALS], "{report}");
}

#[test]
fn a_sides_new_test_failing_at_the_merge_is_lost_behaviour() {
    let f = Fixture::new("history").in_git();
    merged(
        &f,
        |f| {
            f.write(
                "tests/tax.rs",
                "#[test]\nfn tax_of_a_hundred() {\n    assert_eq!(shop::tax::tax(100), 10);\n}\n",
            );
            f.git(&["add", "-A"]);
            f.commit("a test of the tax");
        },
        raise_tax,
    );
    let report = merge_check(&f, &[], 101);
    let conflicts = report["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{report}");
    assert_eq!(conflicts[0]["test"], "shop::tax tax_of_a_hundred");
    assert_eq!(conflicts[0]["kind"], "lost behaviour");
}

#[test]
fn a_clean_merge_reports_nothing_and_runs_only_the_sides_own_tests() {
    let f = Fixture::new("history").in_git();
    merged(&f, raise_price, |f| {
        f.edit("src/lib.rs", "{amount} coins", "{amount} gold coins");
        f.edit("src/lib.rs", "\"3 coins\"", "\"3 gold coins\"");
        f.commit("gold");
    });
    let report = merge_check(&f, &[], 0);
    assert_eq!(
        strings(&report["both_sides"]),
        Vec::<String>::new(),
        "{report}"
    );
    assert_eq!(
        strings(&report["ran_at_merge"]),
        [LABELS, PRICES],
        "{report}"
    );
    assert_eq!(report["conflicts"], Value::Array(vec![]));
    assert_eq!(report["untested"], Value::Array(vec![]));
    // A commit that is not a merge is refused, saying what to do.
    let run = f.run(&["merge-check", "main"]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("is not a merge commit"), "{run:?}");
}

#[test]
fn a_function_both_sides_changed_that_no_test_executes_is_untested() {
    let f = Fixture::new("history").in_git();
    // Built into the tests (a total above 1 000 is discounted), run by none.
    f.write(
        "src/discount.rs",
        "pub fn discount(amount: u32) -> u32 {\n    let off = 0;\n    // far enough apart\n    // for git to merge\n    amount - off\n}\n",
    );
    f.edit(
        "src/lib.rs",
        "pub mod tax;\n",
        "pub mod tax;\npub mod discount;\n",
    );
    f.edit(
        "src/lib.rs",
        "    ledger::audit(price::price(amount)) + tax::tax(amount)\n",
        "    let total = ledger::audit(price::price(amount)) + tax::tax(amount);\n    \
         if total > 1000 { discount::discount(total) } else { total }\n",
    );
    f.git(&["add", "-A"]);
    f.commit("a discount");
    merged(
        &f,
        |f| {
            f.edit("src/discount.rs", "let off = 0;", "let off = 1;");
            f.commit("one off");
        },
        |f| {
            f.edit(
                "src/discount.rs",
                "amount - off",
                "amount.saturating_sub(off)",
            );
            f.commit("never below zero");
        },
    );
    let report = merge_check(&f, &[], 0);
    let untested = report["untested"].as_array().unwrap();
    assert_eq!(untested.len(), 1, "{report}");
    assert_eq!(untested[0]["function"], "shop::discount::discount");
    assert_eq!(untested[0]["sides"], serde_json::json!([0, 1]));
    // For CI, an option makes it fail.
    merge_check(&f, &["--fail-on-untested"], 101);
}

#[test]
fn two_sides_changes_that_one_caller_reaches_but_no_test_runs_together_are_untested() {
    let f = Fixture::new("history").in_git();
    // `extra` calls one or the other; each test runs one of them.
    f.write(
        "src/shipping.rs",
        "pub fn shipping(amount: u32) -> u32 {\n    amount / 5\n}\n",
    );
    f.write(
        "src/wrapping.rs",
        "pub fn wrapping(amount: u32) -> u32 {\n    amount / amount * 2\n}\n",
    );
    f.edit(
        "src/lib.rs",
        "pub mod tax;\n",
        "pub mod tax;\npub mod shipping;\npub mod wrapping;\n\n\
         pub fn extra(amount: u32, gift: bool) -> u32 {\n    \
         if gift { wrapping::wrapping(amount) } else { shipping::shipping(amount) }\n}\n",
    );
    f.edit(
        "src/lib.rs",
        "    #[test]\n    fn labels() {",
        "    #[test]\n    fn shipped() {\n        assert_eq!(extra(10, false), 2);\n    }\n\n    \
         #[test]\n    fn gift_wrapped() {\n        assert_eq!(extra(10, true), 2);\n    }\n\n    \
         #[test]\n    fn labels() {",
    );
    f.git(&["add", "-A"]);
    f.commit("extras");
    // Each side rewrites one of them, keeping what it returns; and one of
    // `price` and `tax`, which `total` calls and `tests::totals` runs
    // together: no pair of theirs is untested.
    merged(
        &f,
        |f| {
            f.edit("src/shipping.rs", "amount / 5", "amount * 2 / 10");
            f.edit(
                "src/price.rs",
                "    amount\n",
                "    amount + amount - amount\n",
            );
            f.commit("shipping by tenths, a price computed");
        },
        |f| {
            f.edit(
                "src/wrapping.rs",
                "amount / amount * 2",
                "amount - amount + 2",
            );
            f.edit("src/tax.rs", "amount / 10", "amount * 10 / 100");
            f.commit("wrapping without a division, a tax by hundredths");
        },
    );
    let report = merge_check(&f, &[], 0);
    assert_eq!(report["conflicts"], Value::Array(vec![]), "{report}");
    assert_eq!(strings(&report["both_sides"]), [TOTALS], "{report}");
    assert_eq!(
        report["untested"],
        serde_json::json!([{
            "function": "shop::shipping::shipping",
            "sides": [0, 1],
            "with": "shop::wrapping::wrapping",
            "caller": "shop::extra",
        }]),
        "{report}"
    );
    // Read by a person (the records filed by now would not show the
    // functions no test executes: `--build` builds again).
    let run = f.run(&["merge-check", "--build"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(
        run.stdout.contains(
            "shop::shipping::shipping and shop::wrapping::wrapping (parents 1, 2), \
             both called by shop::extra"
        ),
        "{run:?}"
    );
}

#[test]
fn a_prospective_merge_is_checked_without_touching_the_checkout() {
    let f = Fixture::new("history").in_git();
    f.git(&["checkout", "-q", "-b", "a", "main"]);
    raise_price(&f);
    f.git(&["checkout", "-q", "-b", "b", "main"]);
    raise_tax(&f);
    f.git(&["checkout", "-q", "main"]);
    let refs = f.git(&["show-ref"]);
    let report = merge_check(&f, &["a", "b"], 101);
    assert_eq!(report["prospective"], true);
    assert_eq!(
        report["conflicts"][0]["kind"], "semantic conflict",
        "{report}"
    );
    assert_eq!(f.git(&["show-ref"]), refs, "no branch moved");
    assert_eq!(f.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
    // The merge it made is no branch's: nothing is filed under it, while
    // the parents' builds are.
    let merge = report["merge"].as_str().unwrap();
    let history = f.run(&["history", "list", "--json"]);
    assert_eq!(history.code(), Some(0), "{history:?}");
    assert!(!history.stdout.contains(merge), "{history:?}");
    let parent = report["parents"][0].as_str().unwrap();
    assert!(history.stdout.contains(parent), "{history:?}");
    assert_eq!(
        f.git(&["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
    // A textual conflict is refused with a clear message.
    f.git(&["checkout", "-q", "-b", "c", "main"]);
    f.edit("src/price.rs", "    amount\n", "    amount * 2\n");
    f.commit("double the price");
    f.git(&["checkout", "-q", "main"]);
    let run = f.run(&["merge-check", "a", "c"]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("do not merge cleanly"), "{run:?}");
    assert!(f.scratch_worktrees("merge-check").is_empty());
}

/// The cargo options are the user's `cargo ekstazi test`'s: with `-p`,
/// only that package's tests are surveyed and run, whether the history or
/// the builds know them.
#[test]
fn the_package_selection_reaches_the_surveys_and_every_build() {
    let f = Fixture::new("basic").in_git();
    f.git(&["checkout", "-q", "-b", "a", "main"]);
    f.edit("alpha/src/lib.rs", "x * 2", "x << 1");
    f.commit("double by shifting");
    f.git(&["checkout", "-q", "-b", "b", "main"]);
    f.edit(
        "beta/src/lib.rs",
        "alpha::double(alpha::double(x))",
        "alpha::double(x) * 2",
    );
    f.commit("quadruple with one call");
    f.git(&["checkout", "-q", "main"]);

    // beta's tests run the changes of both sides.
    let everything = merge_check(&f, &["a", "b"], 0);
    assert_eq!(
        strings(&everything["both_sides"]),
        ["beta tests::quadruples", "beta::files reads_nothing"],
        "{everything}"
    );
    for (args, how) in [
        (&["-p", "alpha"][..], "history"),
        (&["-p", "alpha", "--build"], "built"),
    ] {
        let alpha = merge_check(&f, &[args, &["a", "b"]].concat(), 0);
        assert_eq!(surveyed(&alpha), [how; 3], "{alpha}");
        assert_eq!(
            strings(&alpha["both_sides"]),
            Vec::<String>::new(),
            "{alpha}"
        );
        assert_eq!(
            strings(&alpha["ran_at_merge"]),
            Vec::<String>::new(),
            "{alpha}"
        );
    }
}

/// A library's doctests are one unit that cargo builds with `--doc` alone:
/// run at the merge with a unit test, they are asked for by package.
#[test]
fn doctests_and_unit_tests_run_together_at_the_merge() {
    let f = Fixture::new("doctests").in_git();
    f.git(&["checkout", "-q", "-b", "a", "main"]);
    f.edit(
        "shapes/src/lib.rs",
        "    side * side\n",
        "    side.pow(2)\n",
    );
    f.edit(
        "shapes/src/lib.rs",
        "assert_eq!(super::square(2), 4);",
        "assert_eq!(super::square(3), 9);",
    );
    f.commit("square by pow, tested at 3");
    f.git(&["checkout", "-q", "-b", "b", "main"]);
    f.edit(
        "shapes/src/circle.rs",
        "3 * radius * radius",
        "radius * radius * 3",
    );
    f.commit("circle's factors reordered");
    f.git(&["checkout", "-q", "main"]);

    let report = merge_check(&f, &["a", "b"], 0);
    let ran = strings(&report["ran_at_merge"]);
    for test in ["shapes::doc/shapes (doctests)", "shapes tests::squares"] {
        assert!(ran.contains(&test.to_owned()), "{test}: {report}");
    }
    assert_eq!(report["conflicts"], serde_json::json!([]), "{report}");
}

#[test]
fn a_side_that_adds_a_file_to_a_listed_directory_meets_the_test_that_lists_it() {
    let f = Fixture::new("history").in_git();
    // A test that lists a directory and allows it two entries.
    f.write("data/base.txt", "base\n");
    f.write(
        "tests/listing.rs",
        "#[test]\nfn at_most_two_entries() {\n    let n = std::fs::read_dir(\"data\").unwrap().count();\n    assert!(n <= 2, \"{n} entries\");\n}\n",
    );
    f.git(&["add", "-A"]);
    f.commit("a listing test");
    // Each side adds one file there: two entries each, three at the merge.
    let add = |name: &'static str| {
        move |f: &Fixture| {
            f.write(&format!("data/{name}"), "x\n");
            f.git(&["add", "-A"]);
            f.commit(name);
        }
    };
    merged(&f, add("a.txt"), add("b.txt"));
    let report = merge_check(&f, &[], 101);
    const LISTING: &str = "shop::listing at_most_two_entries";
    assert_eq!(strings(&report["both_sides"]), [LISTING], "{report}");
    let conflicts = report["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{report}");
    assert_eq!(conflicts[0]["test"], LISTING);
    assert_eq!(conflicts[0]["kind"], "semantic conflict");
    let changes = strings(&conflicts[0]["changes"]);
    assert!(
        changes.contains(&"parent 1: directory listing changed: data".to_owned())
            && changes.contains(&"parent 2: directory listing changed: data".to_owned()),
        "{changes:?}"
    );
}

#[test]
fn a_test_that_fails_once_at_the_merge_is_flaky_not_a_conflict() {
    let f = Fixture::new("history").in_git();
    // A test that meets both sides, and fails on its first run at the merge
    // only (a marker file remembers that run).
    f.write(
        "tests/flaky_merge.rs",
        "#[test]\nfn fails_once_at_the_merge() {\n    let merged = shop::price::price(10) != 10 && shop::tax::tax(10) != 1;\n    let marker = std::path::PathBuf::from(std::env::var_os(\"FIXTURE_MARKER\").unwrap());\n    if merged && !marker.exists() {\n        std::fs::write(&marker, \"\").unwrap();\n        panic!(\"the first run at the merge fails\");\n    }\n}\n",
    );
    f.git(&["add", "-A"]);
    f.commit("a test that fails once at the merge");
    let marker = f.tmp().join("marker");
    let f = f.with_env("FIXTURE_MARKER", marker.to_str().unwrap());
    // Small raises: the total stays below 20 at the merge.
    merged(
        &f,
        |f| {
            f.edit("src/price.rs", "    amount\n", "    amount + 1\n");
            f.edit(
                "src/lib.rs",
                "assert_eq!(price::price(10), 10);",
                "assert_eq!(price::price(10), 11);",
            );
            f.commit("raise the price a little");
        },
        |f| {
            f.edit("src/tax.rs", "amount / 10", "amount / 5");
            f.edit(
                "src/lib.rs",
                "assert_eq!(tax::tax(10), 1);",
                "assert_eq!(tax::tax(10), 2);",
            );
            f.commit("raise the tax a little");
        },
    );
    let report = merge_check(&f, &[], 0);
    assert!(marker.exists(), "the merge ran it: {report}");
    let conflicts = report["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{report}");
    assert_eq!(
        conflicts[0]["test"],
        "shop::flaky_merge fails_once_at_the_merge"
    );
    assert_eq!(conflicts[0]["kind"], "flaky at the merge", "{report}");
}
