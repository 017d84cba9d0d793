//! History is a graph: records filed per commit vouch for tests after
//! branch switches, at merges and after reverts; failures never vouch; the
//! history is bounded, damage is no record, and it travels (export/import,
//! merged shards). Each test builds a real git repository.

use crate::support::{Fixture, TestRun, clone_trusting, copy_tree, keygen, labels, test_entry};
use serde_json::Value;
use std::collections::BTreeSet;

const PRICES: &str = "shop tests::prices";
const TAXES: &str = "shop tests::taxes";
const TOTALS: &str = "shop tests::totals";
const LABELS: &str = "shop tests::labels";

fn selected(f: &Fixture, args: &[&str]) -> BTreeSet<String> {
    f.selected(args)
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

/// The listing's entry for a test.
fn listed(f: &Fixture, label: &str) -> Value {
    test_entry(&f.list(&[])["tests"], label).clone()
}

/// A side of a merge: raises the price by one, and its test with it.
fn raise_price(f: &Fixture) -> String {
    f.edit("src/price.rs", "    amount\n", "    amount + 1\n");
    f.edit(
        "src/lib.rs",
        "assert_eq!(price::price(10), 10);",
        "assert_eq!(price::price(10), 11);",
    );
    f.commit("raise the price")
}

/// The other side: doubles the tax, and its test with it.
fn raise_tax(f: &Fixture) -> String {
    f.edit("src/tax.rs", "amount / 10", "amount / 5");
    f.edit(
        "src/lib.rs",
        "assert_eq!(tax::tax(10), 1);",
        "assert_eq!(tax::tax(10), 2);",
    );
    f.commit("raise the tax")
}

/// `f`'s state exported to `state.tar.zst` and imported into a copy of
/// its checkout without records: the copy's directory (kept while it is
/// used), the copy, and the import's run.
fn exported_to_another_clone(f: &Fixture) -> (tempfile::TempDir, Fixture, TestRun) {
    let archive = f.file("state.tar.zst");
    let export = f.run(&["history", "export", archive.to_str().unwrap()]);
    assert_eq!(export.code(), Some(0), "{export:?}");
    let other = tempfile::tempdir().unwrap();
    copy_tree(f.path(), other.path(), false);
    let g = Fixture::at(other.path());
    let import = g.run(&["history", "import", archive.to_str().unwrap()]);
    assert_eq!(import.code(), Some(0), "{import:?}");
    (other, g, import)
}

fn commits_filed(f: &Fixture) -> Vec<String> {
    let run = f.run(&["history", "list", "--json"]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    let listing: Value = serde_json::from_str(&run.stdout).unwrap();
    listing["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn branch_switches_merges_and_reverts_run_only_what_no_filed_record_vouches_for() {
    let f = Fixture::new("history").in_git();
    let main = f.git(&["rev-parse", "HEAD"]);
    f.test_ok(&[]);

    f.git(&["checkout", "-q", "-b", "a"]);
    let a = raise_price(&f);
    assert_eq!(f.test_ok(&[]).ran(), labels(&[PRICES, TOTALS]));

    // Back on main, main's records hold again: nothing runs.
    f.git(&["checkout", "-q", "main"]);
    assert!(selected(&f, &[]).is_empty());
    assert_eq!(
        selected(&f, &["--no-history"]),
        labels(&[PRICES, TOTALS]),
        "without the history, the records of branch a decide"
    );
    assert_eq!(listed(&f, PRICES)["vouched_by"]["commit"], main.as_str());
    assert_eq!(
        f.run(&["why", "tests::prices"])
            .stdout
            .lines()
            .next()
            .unwrap(),
        format!(
            "shop tests::prices: skipped: unaffected (as at {}): the record filed at that commit \
             holds now",
            &main[..7]
        )
    );
    assert!(f.test_ok(&[]).ran().is_empty());

    // A branch from main runs what its own change touched, nothing of a's.
    f.git(&["checkout", "-q", "-b", "b"]);
    let b = raise_tax(&f);
    let mut on_b = f.selected(&[]);
    // Reasons come in the record's order of function ids: compare as sets.
    on_b.iter_mut().for_each(|(_, reasons)| reasons.sort());
    assert_eq!(
        on_b,
        [
            (
                TAXES.to_owned(),
                vec![
                    "function changed: shop::tax::tax".to_owned(),
                    "function changed: shop::tests::taxes".to_owned()
                ]
            ),
            (
                TOTALS.to_owned(),
                vec!["function changed: shop::tax::tax".to_owned()]
            ),
        ]
    );
    assert_eq!(f.test_ok(&[]).ran(), labels(&[TAXES, TOTALS]));

    // At the auto-merge of a into b, each parent's records vouch for the
    // tests its side touched: only the test that meets both sides runs.
    f.git(&["merge", "-q", "--no-edit", "a"]);
    assert_eq!(selected(&f, &[]), labels(&[TOTALS]));
    assert_eq!(
        selected(&f, &["--no-history"]),
        labels(&[PRICES, TOTALS]),
        "the linear rule reruns a's tests"
    );
    // The history paper's Sk (Gligoric et al., CAV 2014): each parent's
    // records alone, intersected.
    let from_a = selected(&f, &["--vouch-only-from", &a]);
    let from_b = selected(&f, &["--vouch-only-from", &b[..10]]);
    assert_eq!(from_a, labels(&[TAXES, TOTALS]));
    assert_eq!(from_b, labels(&[PRICES, TOTALS]));
    assert_eq!(&from_a & &from_b, selected(&f, &[]));
    let prices = listed(&f, PRICES);
    assert_eq!(prices["vouched_by"]["commit"], a.as_str());
    assert_eq!(prices["vouched_by"]["parent"], 2);
    assert_eq!(f.test_ok(&[]).ran(), labels(&[TOTALS]));

    // Reverting a's change brings back code b's records passed on.
    f.git(&["revert", "--no-edit", &a]);
    assert!(selected(&f, &[]).is_empty(), "{:?}", f.selected(&[]));
    assert_eq!(listed(&f, TOTALS)["vouched_by"]["commit"], b.as_str());
    assert_eq!(selected(&f, &["--no-history"]), labels(&[PRICES, TOTALS]));
}

#[test]
fn a_failure_never_vouches_and_a_dirty_tree_is_not_filed() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);

    f.git(&["checkout", "-q", "-b", "broken"]);
    f.edit("src/tax.rs", "amount / 10", "amount");
    let broken = f.commit("break the tax");
    assert_eq!(f.run(&["test"]).failed(), labels(&[TAXES, TOTALS]));
    f.git(&["checkout", "-q", "main"]);
    assert_eq!(
        f.test_ok(&[]).ran(),
        labels(&[TAXES, TOTALS]),
        "failed last time"
    );

    // Back at the broken commit: its failed records have no dependencies to
    // compare, and must not vouch.
    f.git(&["checkout", "-q", "broken"]);
    assert_eq!(selected(&f, &[]), labels(&[TAXES, TOTALS]));
    assert!(commits_filed(&f).contains(&broken));

    // A run on a tree with uncommitted changes is not filed under HEAD.
    f.git(&["checkout", "-q", "main"]);
    f.edit("src/lib.rs", "{amount} coins", "{amount} gold");
    f.edit("src/lib.rs", "\"3 coins\"", "\"3 gold\"");
    let gold = f.commit("gold");
    f.edit("src/lib.rs", "{amount} gold", "{amount} gold coins");
    f.edit("src/lib.rs", "\"3 gold\"", "\"3 gold coins\"");
    assert_eq!(f.test_ok(&[]).ran(), labels(&[LABELS]));
    assert!(!commits_filed(&f).contains(&gold), "a dirty tree's run");
    f.git(&["checkout", "--", "."]);
    assert_eq!(f.test_ok(&[]).ran(), labels(&[LABELS]));
    assert!(commits_filed(&f).contains(&gold));
}

#[test]
fn the_history_is_bounded_and_damage_is_no_record() {
    let f = Fixture::new("history")
        .with_env("EKSTAZI_HISTORY_COMMITS", "2")
        .in_git();
    let base = f.git(&["rev-parse", "HEAD"]);
    f.test_ok(&[]);
    f.edit("src/lib.rs", "{amount} coins", "{amount} gold");
    f.edit("src/lib.rs", "\"3 coins\"", "\"3 gold\"");
    let gold = f.commit("gold");
    f.test_ok(&[]);
    f.edit("src/lib.rs", "{amount} gold", "{amount} silver");
    f.edit("src/lib.rs", "\"3 gold\"", "\"3 silver\"");
    let silver = f.commit("silver");
    f.test_ok(&[]);
    assert_eq!(
        commits_filed(&f),
        [silver.clone(), gold.clone()],
        "base pruned"
    );

    // Back at gold, its filed record vouches for labels.
    f.git(&["checkout", "-q", &gold]);
    assert!(selected(&f, &[]).is_empty());
    // Base's records are gone with it: labels as it was there runs.
    f.git(&["checkout", "-q", &base]);
    assert_eq!(selected(&f, &[]), labels(&[LABELS]));

    // A damaged manifest is no record: the test runs, and says why.
    f.git(&["checkout", "-q", &gold]);
    let history = f.file(&format!(
        ".ekstazi/v{}/.history",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ));
    std::fs::write(history.join("commits").join(&gold), b"not a manifest").unwrap();
    assert_eq!(selected(&f, &[]), labels(&[LABELS]));
    assert!(
        !commits_filed(&f).contains(&gold),
        "left out of the listing"
    );
    // A clean run at gold files it anew.
    assert_eq!(f.test_ok(&[]).ran(), labels(&[LABELS]));
    f.git(&["checkout", "-q", &silver]);
    assert!(f.test_ok(&[]).ran().is_empty(), "silver's records vouch");
    f.git(&["checkout", "-q", &gold]);
    assert!(selected(&f, &[]).is_empty());

    // Damaged objects vouch for nothing either.
    for entry in walkdir::WalkDir::new(history.join("packs")) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            std::fs::write(entry.path(), b"not a pack").unwrap();
        }
    }
    let after_damage = f.selected(&[]);
    assert_eq!(after_damage.len(), 1, "{after_damage:?}");
    assert_eq!(after_damage[0].0, LABELS);
    assert!(
        after_damage[0]
            .1
            .contains(&"function changed: shop::label".to_owned()),
        "{after_damage:?}"
    );
}

#[test]
fn a_signed_export_is_imported_where_its_key_is_trusted_and_nowhere_else() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    let (secret, public) = keygen(&f);
    let (other_secret, _) = keygen(&f);
    let export = |name: &str, secret: &str| {
        let archive = f.file(name);
        let run = f.run_with(
            &["history", "export", archive.to_str().unwrap()],
            &[("EKSTAZI_SIGNING_KEY", secret)],
        );
        assert_eq!(run.code(), Some(0), "{run:?}");
        archive
    };
    let archive = export("state.tar.zst", &secret);
    let untrusted = export("untrusted.tar.zst", &other_secret);
    assert!(f.file("state.tar.zst.sig").is_file());

    // A key that is not one is refused before anything is written.
    let bad = f.run_with(
        &["history", "export", "bad.tar.zst"],
        &[("EKSTAZI_SIGNING_KEY", "12")],
    );
    assert_ne!(bad.code(), Some(0), "{bad:?}");
    assert!(
        bad.stderr.contains("does not hold a signing key"),
        "{bad:?}"
    );
    assert!(!f.file("bad.tar.zst").exists());

    let (_dir, g) = clone_trusting(&f, &public, false);
    let everything = selected(&g, &[]);
    assert!(!everything.is_empty());
    let refused = |file: &std::path::Path, why: &str| {
        let run = g.run(&["history", "import", file.to_str().unwrap()]);
        assert_ne!(run.code(), Some(0), "{run:?}");
        assert!(run.stderr.contains(why), "{why:?} in {run:?}");
        assert_eq!(selected(&g, &[]), everything, "nothing of it was kept");
    };
    // Changed after signing.
    let mut bytes = std::fs::read(&archive).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(g.file("changed.tar.zst"), bytes).unwrap();
    std::fs::copy(f.file("state.tar.zst.sig"), g.file("changed.tar.zst.sig")).unwrap();
    refused(&g.file("changed.tar.zst"), "does not match");
    // Not signed.
    std::fs::copy(&archive, g.file("unsigned.tar.zst")).unwrap();
    refused(&g.file("unsigned.tar.zst"), "it is not signed");
    // Signed by a key the project does not list.
    refused(&untrusted, "not among the trusted keys");

    // Signed by the trusted key: imported, and its records hold.
    let import = g.run(&["history", "import", archive.to_str().unwrap()]);
    assert_eq!(import.code(), Some(0), "{import:?}");
    assert!(
        import.stdout.contains(&format!("is signed by {public}")),
        "{import:?}"
    );
    assert!(selected(&g, &[]).is_empty());

    // Another project (other root commits) trusting the same key refuses it.
    let (_dir, h) = clone_trusting(&f, &public, true);
    let run = h.run(&["history", "import", archive.to_str().unwrap()]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("another project"), "{run:?}");
}

#[test]
fn the_history_travels_by_export_and_import_and_shards_merge() {
    let f = Fixture::new("history").in_git();
    let base = f.git(&["rev-parse", "HEAD"]);
    f.test_ok(&[]);
    raise_price(&f);
    f.test_ok(&[]);
    // Another clone, with no records: the import makes both commits' records
    // hold there.
    let (_other, g, import) = exported_to_another_clone(&f);
    assert!(import.stdout.contains("2 commits of history"), "{import:?}");
    assert!(selected(&g, &[]).is_empty());
    g.git(&["checkout", "-q", &base]);
    assert!(selected(&g, &[]).is_empty());
    assert_eq!(
        selected(&g, &["--no-history"]),
        labels(&[PRICES, TOTALS]),
        "the current records are of the newer commit"
    );

    // A damaged archive is refused, and the state stays as it was.
    std::fs::write(g.file("bad.tar.zst"), b"not an archive").unwrap();
    let bad = g.run(&["history", "import", "bad.tar.zst"]);
    assert_ne!(bad.code(), Some(0));
    assert!(bad.stderr.contains("cannot import"), "{bad:?}");
    assert!(selected(&g, &[]).is_empty());

    // Two CI shards run their halves at one commit; merged, the commit has
    // a record of every test.
    let shard_commit = raise_tax(&f);
    for shard in ["shard-1", "shard-2"] {
        copy_tree(&f.file(".ekstazi"), &f.file(shard), true);
    }
    for m in 1..=2 {
        let partition = format!("count:{m}/2");
        let dir = format!("shard-{m}");
        f.test_ok(&["--partition", &partition, "--state-dir", &dir]);
    }
    let merge = f.run(&["merge-state", "--state-dir", "merged", "shard-1", "shard-2"]);
    assert_eq!(merge.code(), Some(0), "{merge:?}");
    let listing = f.run(&["history", "--state-dir", "merged", "list", "--json"]);
    let listing: Value = serde_json::from_str(&listing.stdout).unwrap();
    let at_commit = listing["commits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["commit"] == shard_commit.as_str())
        .unwrap()
        .clone();
    assert_eq!(at_commit["tests"], 4, "{at_commit}");
    assert_eq!(
        at_commit["ran"], 2,
        "taxes and totals ran, in one shard or the other"
    );
}

#[test]
fn at_a_merge_a_parent_without_filed_records_is_named() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    f.git(&["checkout", "-q", "-b", "side"]);
    let side = raise_tax(&f);
    f.git(&["checkout", "-q", "main"]);
    raise_price(&f);
    f.test_ok(&[]);
    f.git(&["merge", "-q", "--no-edit", "side"]);
    // The side's commit was never run: nothing is filed there.
    let list = f.run(&["list"]);
    assert_eq!(list.code(), Some(0), "{list:?}");
    let notice = format!("no records are filed at its parent 2 ({})", &side[..10]);
    assert!(list.stderr.contains(&notice), "{list:?}");
    assert_eq!(
        list.stderr
            .lines()
            .filter(|l| l.contains("HEAD is a merge"))
            .count(),
        1,
        "one line: {list:?}"
    );
    // Once it is, the notice goes.
    f.git(&["checkout", "-q", &side]);
    f.test_ok(&[]);
    f.git(&["checkout", "-q", "main"]);
    let list = f.run(&["list"]);
    assert!(!list.stderr.contains("HEAD is a merge"), "{list:?}");
}

#[test]
fn a_history_of_many_tests_keeps_what_each_commit_changed_and_still_vouches() {
    let f = Fixture::new("many").in_git();
    let first = f.git(&["rev-parse", "HEAD"]);
    assert_eq!(f.test_ok(&[]).ran().len(), 80);
    f.edit("src/tens.rs", "i / 10\n", "(i + 5) / 10\n");
    let second = f.commit("round the tens");
    let tens: BTreeSet<String> = (0..8)
        .map(|t| format!("many tests::c{:02}", t * 10))
        .collect();
    assert_eq!(f.test_ok(&[]).ran(), tens);

    // The second commit's manifest holds its 8 changes, not 80 entries of
    // 34 bytes each (2.7 KB): the rest is read from the base it names.
    let history = f.file(&format!(
        ".ekstazi/v{}/.history",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ));
    let manifest = std::fs::metadata(history.join("commits").join(&second)).unwrap();
    assert!(manifest.len() < 1_000, "{} bytes", manifest.len());
    let listing = f.run(&["history", "list", "--json"]);
    let listing: Value = serde_json::from_str(&listing.stdout).unwrap();
    let filed: Vec<(String, u64, u64)> = listing["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = |k: &str| c[k].as_u64().unwrap();
            (
                c["commit"].as_str().unwrap().to_owned(),
                n("tests"),
                n("ran"),
            )
        })
        .collect();
    assert_eq!(filed, [(second.clone(), 80, 8), (first.clone(), 80, 80)]);

    // Reverted, the first commit's records vouch again; and in another
    // clone, after an import, both commits' do.
    f.git(&["revert", "--no-edit", "HEAD"]);
    assert!(selected(&f, &[]).is_empty(), "{:?}", f.selected(&[]));
    let (_other, g, _) = exported_to_another_clone(&f);
    g.git(&["checkout", "-q", &second]);
    assert!(selected(&g, &[]).is_empty(), "{:?}", g.selected(&[]));
    g.git(&["checkout", "-q", &first]);
    assert!(selected(&g, &[]).is_empty(), "{:?}", g.selected(&[]));
}
