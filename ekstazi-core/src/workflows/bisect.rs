//! Finding the *latest* regression point of each bad commit in a commit
//! DAG with as few costly validity queries as possible: the Regression
//! Predecessors Algorithm (RPA) of Bendík, Beneš and Černá.
//!
//! A regression point is an edge (good parent → bad commit). For each bad
//! leaf, RPA takes the shortest path from a commit known to be good to the
//! leaf, and searches it from the leaf backwards. [`Search::Multiplying`]
//! is the paper's Algorithm 3: it asks v(l−1), v(l−3), v(l−7), … until one
//! is good, then searches the gap between that one and the last bad one the
//! same way, from the gap's bad end, until the gap is one edge. A point d
//! commits back costs from about log₂ d queries, when it lies just below
//! the bad end of the gap the first probe finds (6 for the paper's point 16
//! back on a 1 023-commit path, where halving the path costs 10), to
//! O((log d)²), the paper's bound, when it lies at the gap's good end; and
//! within a gap where good and bad alternate it still leans to the point
//! nearest the leaf, which `git bisect`, assuming the history is monotone,
//! does not. [`Search::MultiplyingThenBinary`] makes the same
//! first probe, then bisects the gap (about 2·log₂ d): fewer queries on
//! average for a monotone history, an older point more often when the gap
//! is not monotone. [`Search::Binary`] bisects the whole path (log₂ n).
//! Leaves are taken shortest path first, and a point found can be
//! propagated to every other leaf it precedes (Algorithm 2).
//!
//! Answers are not all equally dear. An [`Oracle`] says which it knows for
//! free (a record filed at that commit, in the history) and which cost a
//! build; free answers are taken first everywhere, so a query the history
//! can answer is never paid for, and where the history answers every commit
//! of a path the point found is exactly the latest one on it. A commit that
//! cannot be judged (it does not build, the test does not exist) is
//! *skipped*: the search moves to a neighbour, and a point whose gap holds
//! only skipped commits is reported with them.
//!
//! ```
//! use ekstazi_core::workflows::bisect::{Answer, Dag, Oracle, Search, regressions};
//!
//! // a linear history 0 … 12; bad from 4 to 6 and again from 10 on.
//! let dag = Dag::new((0..13).map(|i| (i.to_string(), if i == 0 { vec![] } else { vec![(i - 1).to_string()] })));
//! struct Builds(usize);
//! impl Oracle for Builds {
//!     fn known(&self, _: &str) -> Option<Answer> { None }
//!     fn query(&mut self, c: &str) -> Answer {
//!         self.0 += 1;
//!         let i: u32 = c.parse().unwrap();
//!         if (4..7).contains(&i) || i >= 10 { Answer::Bad } else { Answer::Good }
//!     }
//! }
//! let mut oracle = Builds(0);
//! let found = regressions(&dag, &["12".into()], &["0".into()], &mut oracle, Search::Multiplying, false);
//! let point = found[0].as_ref().unwrap();
//! assert_eq!((point.good.as_str(), point.bad.as_str()), ("9", "10"));
//! // 11 (bad), 9 (good), 10 (bad); git bisect from 0 finds 3 → 4.
//! assert_eq!(oracle.0, 3);
//!
//! // In 32 commits, bad at 17 to 20 and from 23 on: the probe from 31
//! // meets 30, 28, 24 (bad) and 16 (good). In the gap 16..24, Algorithm 3
//! // asks 23 (bad), 21 and 22 (good); a binary search asks 20, 18, 17 (bad).
//! let dag = Dag::new((0..32).map(|i| (i.to_string(), if i == 0 { vec![] } else { vec![(i - 1).to_string()] })));
//! struct Alternating(usize);
//! impl Oracle for Alternating {
//!     fn known(&self, _: &str) -> Option<Answer> { None }
//!     fn query(&mut self, c: &str) -> Answer {
//!         self.0 += 1;
//!         let i: u32 = c.parse().unwrap();
//!         if (17..=20).contains(&i) || i >= 23 { Answer::Bad } else { Answer::Good }
//!     }
//! }
//! for (search, latest) in [(Search::Multiplying, ("22", "23")), (Search::MultiplyingThenBinary, ("16", "17"))] {
//!     let mut oracle = Alternating(0);
//!     let found = regressions(&dag, &["31".into()], &["0".into()], &mut oracle, search, false);
//!     let point = found[0].as_ref().unwrap();
//!     assert_eq!((point.good.as_str(), point.bad.as_str()), latest);
//!     assert_eq!(oracle.0, 7);
//! }
//! ```

use crate::digests::functions::FunctionTable;
use crate::model::code_dep::CodeUnit;
use crate::model::dep::{Sum, Target, describe_change};
use crate::model::record::Record;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// What a query says of a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Every named test passes.
    Good,
    /// One fails.
    Bad,
    /// It cannot be judged: it does not build, or a test does not exist.
    Skip,
}

/// Answers validity queries.
pub trait Oracle {
    /// The answer, if it costs nothing (the history holds it).
    fn known(&self, commit: &str) -> Option<Answer>;
    /// The answer, at whatever cost (a build and a test run).
    fn query(&mut self, commit: &str) -> Answer;
}

/// How a path is searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    /// RPA's multiplying search (Algorithm 3): from the bad end, 1, 3, 7,
    /// 15, … back until one is good, then the same inside the gap found,
    /// from its bad end, until the gap is one edge.
    Multiplying,
    /// The same probe from the bad end, then a binary search of the gap
    /// it found.
    MultiplyingThenBinary,
    /// Binary search of the whole path.
    Binary,
}

/// A commit DAG: each commit's parents (edges point from parent to child).
#[derive(Debug, Default)]
pub struct Dag {
    parents: HashMap<String, Vec<String>>,
}

impl Dag {
    /// From `(commit, parents)` pairs; parents outside the pairs are
    /// commits too (with no known parents).
    pub fn new(commits: impl IntoIterator<Item = (String, Vec<String>)>) -> Dag {
        Dag {
            parents: commits.into_iter().collect(),
        }
    }

    fn parents(&self, commit: &str) -> &[String] {
        self.parents.get(commit).map_or(&[], Vec::as_slice)
    }

    fn children(&self) -> HashMap<&str, Vec<&str>> {
        let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
        for (commit, parents) in &self.parents {
            for parent in parents {
                children.entry(parent).or_default().push(commit);
            }
        }
        children
    }

    /// Every commit reachable from `from` along child edges, `from` included.
    fn descendants<'a>(&'a self, from: &'a str) -> HashSet<&'a str> {
        let children = self.children();
        let mut seen = HashSet::from([from]);
        let mut queue = VecDeque::from([from]);
        while let Some(commit) = queue.pop_front() {
            for child in children.get(commit).into_iter().flatten() {
                if seen.insert(child) {
                    queue.push_back(child);
                }
            }
        }
        seen
    }
}

/// A regression point found for a bad leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regression {
    /// The bad commit it was searched for.
    pub leaf: String,
    /// The last good commit on the path.
    pub good: String,
    /// The first bad commit after it.
    pub bad: String,
    /// Commits between the two that could not be judged: the regression is
    /// at one of them or at `bad`.
    pub skipped: Vec<String>,
    /// Found for another leaf and propagated to this one.
    pub propagated: bool,
}

/// Why a leaf has no regression point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsolved {
    /// No commit known to be good reaches it.
    NoGoodCommit(String),
    /// The leaf itself is good.
    LeafIsGood(String),
}

/// The regression point of each bad leaf (`bad`), searched above the
/// commits known to be good (`good`; more are learnt from the oracle's free
/// answers and from queries). With `propagate`, a point found for one leaf
/// is given to every other leaf it precedes (fewer queries, but a later
/// point of that leaf may be missed).
pub fn regressions(
    dag: &Dag,
    bad: &[String],
    good: &[String],
    oracle: &mut dyn Oracle,
    search: Search,
    propagate: bool,
) -> Vec<Result<Regression, Unsolved>> {
    let mut answers: HashMap<String, Answer> = HashMap::new();
    for commit in good {
        answers.insert(commit.clone(), Answer::Good);
    }
    let mut out: BTreeMap<usize, Result<Regression, Unsolved>> = BTreeMap::new();
    let mut removed: HashSet<String> = HashSet::new();
    let mut pending: Vec<usize> = (0..bad.len()).collect();
    while !pending.is_empty() {
        // The leaf whose path to a good commit is shortest goes first.
        let paths: Vec<(usize, Option<Vec<String>>)> = pending
            .iter()
            .map(|&i| (i, shortest_path(dag, &bad[i], &answers, oracle, &removed)))
            .collect();
        let (at, path) = paths
            .into_iter()
            .min_by_key(|(_, p)| p.as_ref().map_or(usize::MAX, Vec::len))
            .expect("pending is not empty");
        pending.retain(|&i| i != at);
        let leaf = &bad[at];
        let Some(path) = path else {
            out.insert(at, Err(Unsolved::NoGoodCommit(leaf.clone())));
            continue;
        };
        // The leaf is taken to be bad, as `git bisect` takes it; it is asked
        // only when the history answers for free, or when the point found
        // ends at it (a build, then, that proves the point).
        if free(leaf, &answers, &*oracle) == Some(Answer::Good) {
            out.insert(at, Err(Unsolved::LeafIsGood(leaf.clone())));
            continue;
        }
        let point = search_path(&path, &mut answers, oracle, search);
        if point.1 == *leaf && answer(leaf, &mut answers, oracle) != Answer::Bad {
            out.insert(at, Err(Unsolved::LeafIsGood(leaf.clone())));
            continue;
        }
        let regression = Regression {
            leaf: leaf.clone(),
            good: point.0,
            bad: point.1,
            skipped: point.2,
            propagated: false,
        };
        if propagate {
            let reached = dag.descendants(&regression.bad);
            for &other in &pending {
                if reached.contains(bad[other].as_str()) {
                    out.insert(
                        other,
                        Ok(Regression {
                            leaf: bad[other].clone(),
                            propagated: true,
                            ..regression.clone()
                        }),
                    );
                }
            }
            pending.retain(|i| !out.contains_key(i));
            removed.extend(reached.into_iter().map(str::to_owned));
        }
        out.insert(at, Ok(regression));
    }
    out.into_values().collect()
}

/// The answer for a commit: already known, free, or queried (and kept).
fn answer(commit: &str, answers: &mut HashMap<String, Answer>, oracle: &mut dyn Oracle) -> Answer {
    if let Some(known) = answers.get(commit) {
        return *known;
    }
    let answer = oracle.known(commit).unwrap_or_else(|| oracle.query(commit));
    answers.insert(commit.to_owned(), answer);
    answer
}

/// An answer that costs nothing, if there is one.
fn free(commit: &str, answers: &HashMap<String, Answer>, oracle: &dyn Oracle) -> Option<Answer> {
    answers
        .get(commit)
        .copied()
        .or_else(|| oracle.known(commit))
}

/// The shortest path (oldest first) from a commit known good — given,
/// answered, or good for free — to `leaf`, avoiding removed commits.
fn shortest_path(
    dag: &Dag,
    leaf: &str,
    answers: &HashMap<String, Answer>,
    oracle: &dyn Oracle,
    removed: &HashSet<String>,
) -> Option<Vec<String>> {
    let mut came_from: HashMap<&str, &str> = HashMap::new();
    let mut queue = VecDeque::from([leaf]);
    let mut seen = HashSet::from([leaf]);
    while let Some(commit) = queue.pop_front() {
        if commit != leaf && free(commit, answers, oracle) == Some(Answer::Good) {
            let mut path = vec![commit.to_owned()];
            let mut at = commit;
            while let Some(next) = came_from.get(at) {
                path.push((*next).to_owned());
                at = next;
            }
            return Some(path);
        }
        for parent in dag.parents(commit) {
            if !removed.contains(parent) && seen.insert(parent) {
                came_from.insert(parent, commit);
                queue.push_back(parent);
            }
        }
    }
    None
}

/// The regression point on `path` (good first, bad last) nearest its end,
/// as the search finds it: (good, bad, skipped commits between).
///
/// The gap `lo..hi` holds a point: `path[lo]` is good, `path[hi]` bad.
/// Multiplying search is the paper's Algorithm 3 written as a loop (its
/// recursion is a tail call): probes fall `step` = 1, 2, 4, … below the
/// last bad one, that is 1, 3, 7, … below the bad end of the current
/// gap; a good answer makes a new gap, from it to the last bad probe, and
/// a probe that would fall at or below `lo` makes the last bad probe the
/// new end; either way `step` starts again at 1.
fn search_path(
    path: &[String],
    answers: &mut HashMap<String, Answer>,
    oracle: &mut dyn Oracle,
    search: Search,
) -> (String, String, Vec<String>) {
    let (mut lo, mut hi) = (0, path.len() - 1);
    let mut step = 1;
    // Multiplying-then-binary multiplies until its first good answer.
    let mut multiplying = search == Search::MultiplyingThenBinary;
    loop {
        // Free answers first: the last good one known, then the first bad
        // one after it, narrow the gap at no cost. (Only the first time
        // round finds any: every later gap lies between these two. So the
        // multiplying search starts from the bad end of the gap they leave,
        // as Algorithm 3 would on that shorter path.)
        if let Some(g) = (lo + 1..hi)
            .rev()
            .find(|&i| free(&path[i], answers, oracle) == Some(Answer::Good))
        {
            lo = g;
            if search == Search::MultiplyingThenBinary {
                multiplying = false;
            }
        }
        if let Some(b) =
            (lo + 1..hi).find(|&i| free(&path[i], answers, oracle) == Some(Answer::Bad))
        {
            hi = b;
        }
        let open: Vec<usize> = (lo + 1..hi)
            .filter(|&i| free(&path[i], answers, oracle) != Some(Answer::Skip))
            .collect();
        if open.is_empty() {
            return (
                path[lo].clone(),
                path[hi].clone(),
                path[lo + 1..hi].to_vec(),
            );
        }
        let want = match search {
            Search::Multiplying => match hi.checked_sub(step).filter(|&i| i > lo) {
                Some(i) => i,
                None => {
                    step = 1;
                    hi - 1
                }
            },
            Search::MultiplyingThenBinary if multiplying => hi.saturating_sub(step).max(lo + 1),
            Search::MultiplyingThenBinary | Search::Binary => lo + (hi - lo) / 2,
        };
        // The open commit nearest the one wanted (a skipped one is passed).
        let probe = *open
            .iter()
            .min_by_key(|&&i| (i.abs_diff(want), std::cmp::Reverse(i)))
            .expect("open is not empty");
        match answer(&path[probe], answers, oracle) {
            Answer::Bad => {
                hi = probe;
                step *= 2;
            }
            Answer::Good => {
                lo = probe;
                step = 1;
                if search == Search::MultiplyingThenBinary {
                    multiplying = false;
                }
            }
            Answer::Skip => {}
        }
    }
}

/// What `git bisect` would do from the same ends with the same answers:
/// the point it finds (good parent → first bad commit, as it reports
/// one), and how many commits it asks about. Every one of its questions
/// is a build (it has no history), so that count is its builds.
///
/// Its algorithm (git's `bisect.c`): among the candidates — the commits
/// that are ancestors of `bad` and not of any good one — ask the one whose
/// ancestors among the candidates number closest to half; a bad answer
/// keeps its ancestors, a good one removes them; a skipped commit is
/// passed for the next best. One candidate left is the first bad commit.
pub fn git_bisect(
    dag: &Dag,
    bad: &str,
    good: &[String],
    answer: &mut dyn FnMut(&str) -> Answer,
) -> (Option<(String, String)>, usize) {
    let ancestors = |of: &str, within: &HashSet<String>| -> HashSet<String> {
        let mut seen = HashSet::from([of.to_owned()]);
        let mut queue = VecDeque::from([of.to_owned()]);
        while let Some(c) = queue.pop_front() {
            for p in dag.parents(&c) {
                if within.contains(p) && seen.insert(p.clone()) {
                    queue.push_back(p.clone());
                }
            }
        }
        seen
    };
    let all: HashSet<String> = dag.parents.keys().cloned().collect();
    let mut candidates = ancestors(bad, &all);
    for g in good {
        for a in ancestors(g, &all) {
            candidates.remove(&a);
        }
    }
    let mut bad_now = bad.to_owned();
    let mut skipped: HashSet<String> = HashSet::new();
    let mut asked = 0;
    loop {
        let n = candidates.len();
        let mut best: Option<(usize, &String)> = None;
        for c in candidates
            .iter()
            .filter(|c| **c != bad_now && !skipped.contains(*c))
        {
            let x = ancestors(c, &candidates).len();
            let score = x.min(n - x);
            if best.is_none_or(|(s, b)| score > s || (score == s && c < b)) {
                best = Some((score, c));
            }
        }
        let Some((_, probe)) = best else {
            // The first bad commit is `bad_now` (or hides among skipped ones).
            let parent = dag.parents(&bad_now).first().cloned().unwrap_or_default();
            return (Some((parent, bad_now)), asked);
        };
        let probe = probe.clone();
        asked += 1;
        match answer(&probe) {
            Answer::Bad => {
                candidates = ancestors(&probe, &candidates);
                bad_now = probe;
            }
            Answer::Good => {
                for a in ancestors(&probe, &candidates) {
                    candidates.remove(&a);
                }
            }
            Answer::Skip => {
                skipped.insert(probe);
            }
        }
    }
}

/// At most this many differences are named per kind.
const NAMED: usize = 10;

/// What differs between a test's record at the last good commit and at the
/// first bad one — the regression explained, from the two records alone:
/// the global fingerprint, every dependency both name whose checksum
/// differs, and the functions that changed, stopped or started being
/// executed (by name, through the function table).
pub fn explain(good: &Record, bad: &Record, table: &FunctionTable) -> Vec<String> {
    let mut out: Vec<String> = good
        .global
        .changes(&bad.global)
        .into_iter()
        .map(|component| format!("global: {component} changed"))
        .collect();
    let now: HashMap<&Target, &Sum> = bad.deps.iter().map(|d| (&d.target, &d.sum)).collect();
    out.extend(
        good.deps
            .iter()
            .filter_map(|dep| {
                let sum = now.get(&dep.target)?;
                (!dep.sum.matches(sum)).then(|| describe_change(&dep.target, &dep.sum, sum))
            })
            .take(NAMED),
    );
    for before in &good.code {
        let Some(after) = bad.code.iter().find(|c| c.unit == before.unit) else {
            continue;
        };
        if before.build == after.build {
            continue;
        }
        let place = match &before.unit {
            CodeUnit::TestBinary => String::new(),
            unit => format!(" (in {unit})"),
        };
        let names = |ids: &[crate::model::code_dep::FnId]| -> HashMap<String, crate::digests::fingerprint::Fp> {
            ids.iter()
                .filter_map(|id| table.get(id))
                .map(|f| (f.name.to_string(), f.fp))
                .collect()
        };
        let (was, is) = (names(&before.functions), names(&after.functions));
        let mut changed: Vec<String> = Vec::new();
        let mut stopped: Vec<String> = Vec::new();
        for (name, fp) in &was {
            match is.get(name) {
                Some(now) if now != fp => changed.push(crate::digests::fingerprint::demangle(name)),
                Some(_) => {}
                None => stopped.push(crate::digests::fingerprint::demangle(name)),
            }
        }
        let mut started: Vec<String> = is
            .keys()
            .filter(|name| !was.contains_key(*name))
            .map(|name| crate::digests::fingerprint::demangle(name))
            .collect();
        // Which functions ran differently is a symptom (a failing test
        // panics past the code a pass runs): said only when no function it
        // executed changed.
        let lists: Vec<(&str, &mut Vec<String>)> = if changed.is_empty() {
            vec![
                ("function no longer executed", &mut stopped),
                ("function now executed", &mut started),
            ]
        } else {
            vec![("function changed", &mut changed)]
        };
        for (verdict, list) in lists {
            list.sort();
            out.extend(
                list.iter()
                    .take(NAMED)
                    .map(|name| format!("{verdict}: {name}{place}")),
            );
            if list.len() > NAMED {
                out.push(format!("{} more: {verdict}{place}", list.len() - NAMED));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_records_explain_the_regression() {
        use crate::model::record::tests_support::sample;
        let dir = tempfile::tempdir().unwrap();
        let table = FunctionTable::load(dir.path());
        let id = |name: &str, fp: u8| {
            let stable = crate::digests::fingerprint::stable_hash(name);
            table.intern(name, stable, &[fp; 16]).unwrap()
        };
        let mut good = sample();
        good.code[0].functions = vec![
            id("_ZN4shop3tax17h0123456789abcdefE", 1),
            id("_ZN4shop5price17h0123456789abcdefE", 2),
        ];
        let mut bad = good.clone();
        bad.outcome = crate::model::record::Outcome::Failed;
        bad.code[0].build = [9; 32];
        bad.code[0].functions = vec![
            id("_ZN4shop3tax17h0123456789abcdefE", 7),
            id("_ZN4shop5total17h0123456789abcdefE", 3),
        ];
        bad.deps[0].sum = crate::model::dep::Sum::Hash([8; 32]);
        assert_eq!(
            explain(&good, &bad, &table),
            ["file changed: data/a.txt", "function changed: shop::tax"]
        );
        // With no function changed, which ran differently is the lead.
        bad.code[0].functions = vec![id("_ZN4shop3tax17h0123456789abcdefE", 1)];
        assert_eq!(
            explain(&good, &bad, &table),
            [
                "file changed: data/a.txt",
                "function no longer executed: shop::price"
            ]
        );
        assert!(explain(&good, &good, &table).is_empty());
    }

    fn linear(n: usize) -> Dag {
        Dag::new((0..n).map(|i| {
            let parents = if i == 0 {
                vec![]
            } else {
                vec![(i - 1).to_string()]
            };
            (i.to_string(), parents)
        }))
    }

    /// Answers from a function; `free` commits cost nothing.
    struct Fake<F: Fn(usize) -> Answer> {
        valid: F,
        free: HashSet<usize>,
        queried: Vec<usize>,
    }

    impl<F: Fn(usize) -> Answer> Oracle for Fake<F> {
        fn known(&self, c: &str) -> Option<Answer> {
            let i: usize = c.parse().ok()?;
            self.free.contains(&i).then(|| (self.valid)(i))
        }
        fn query(&mut self, c: &str) -> Answer {
            let i: usize = c.parse().unwrap();
            self.queried.push(i);
            (self.valid)(i)
        }
    }

    fn fake<F: Fn(usize) -> Answer>(valid: F) -> Fake<F> {
        Fake {
            valid,
            free: HashSet::new(),
            queried: Vec::new(),
        }
    }

    fn bad_from(k: usize) -> impl Fn(usize) -> Answer {
        move |i| if i >= k { Answer::Bad } else { Answer::Good }
    }

    /// The search over commits 0..n, n - 1 bad and 0 good, no propagation.
    fn on_linear(
        n: usize,
        oracle: &mut impl Oracle,
        search: Search,
    ) -> Vec<Result<Regression, Unsolved>> {
        regressions(
            &linear(n),
            &[(n - 1).to_string()],
            &["0".into()],
            oracle,
            search,
            false,
        )
    }

    const ALL: [Search; 3] = [
        Search::Multiplying,
        Search::MultiplyingThenBinary,
        Search::Binary,
    ];

    fn point(found: &[Result<Regression, Unsolved>]) -> (usize, usize) {
        let r = found[0].as_ref().unwrap();
        (r.good.parse().unwrap(), r.bad.parse().unwrap())
    }

    #[test]
    fn a_linear_regression_is_found_each_way() {
        for search in ALL {
            let mut oracle = fake(bad_from(5));
            let found = on_linear(12, &mut oracle, search);
            assert_eq!(point(&found), (4, 5), "{search:?}");
            assert!(
                oracle.queried.len() <= 6,
                "{search:?}: {:?}",
                oracle.queried
            );
        }
    }

    /// The search over commits 0..=1023, 1023 bad and 0 good: the paths
    /// p₁ and p₂ of the paper's section 3.2; the point and what was asked.
    fn on_the_papers_path(bad_from_k: usize, search: Search) -> ((usize, usize), Vec<usize>) {
        let mut oracle = fake(bad_from(bad_from_k));
        let found = on_linear(1024, &mut oracle, search);
        (point(&found), oracle.queried)
    }

    #[test]
    fn the_papers_p1_with_its_point_at_1007_1008_takes_6_queries() {
        let (found, asked) = on_the_papers_path(1008, Search::Multiplying);
        assert_eq!(found, (1007, 1008));
        // 1022, 1020, 1016, 1008 bad, 992 good; then in 992..1008, 1007.
        assert_eq!(asked, [1022, 1020, 1016, 1008, 992, 1007]);
        // Bisecting the gap 992..1008 instead costs 4 more than 1.
        let (found, asked) = on_the_papers_path(1008, Search::MultiplyingThenBinary);
        assert_eq!(found, (1007, 1008));
        assert_eq!(asked, [1022, 1020, 1016, 1008, 992, 1000, 1004, 1006, 1007]);
        // The paper says 9 for binary search; halving 1 023 edges takes 10.
        let (found, asked) = on_the_papers_path(1008, Search::Binary);
        assert_eq!(found, (1007, 1008));
        assert_eq!(asked.len(), 10, "{asked:?}");
    }

    #[test]
    fn the_papers_p2_with_its_point_at_512_513_takes_17_queries() {
        let (found, asked) = on_the_papers_path(513, Search::Multiplying);
        assert_eq!(found, (512, 513));
        assert_eq!(
            asked,
            [
                1022, 1020, 1016, 1008, 992, 960, 896, 768, 512, // good at 2⁹ − 1 back
                767, 765, 761, 753, 737, 705, 641, 513, // then in 512..768
            ]
        );
        let (found, asked) = on_the_papers_path(513, Search::MultiplyingThenBinary);
        assert_eq!(found, (512, 513));
        assert_eq!(asked.len(), 17, "{asked:?}");
        let (found, asked) = on_the_papers_path(513, Search::Binary);
        assert_eq!(found, (512, 513));
        assert_eq!(asked.len(), 10, "{asked:?}");
    }

    /// The commit graph of the paper's Figure 2 (section 3.4), as its text
    /// gives it: a → b → c → n → o → p, c → d → e → f → g, n → i → j → k,
    /// j → l → m. Vertex h is in the figure only; here a good leaf off d.
    fn figure_2() -> Dag {
        let edges = [
            ("a", "b"),
            ("b", "c"),
            ("c", "n"),
            ("n", "o"),
            ("o", "p"),
            ("c", "d"),
            ("d", "e"),
            ("e", "f"),
            ("f", "g"),
            ("d", "h"),
            ("n", "i"),
            ("i", "j"),
            ("j", "k"),
            ("j", "l"),
            ("l", "m"),
        ];
        let mut parents: BTreeMap<String, Vec<String>> = BTreeMap::from([("a".to_owned(), vec![])]);
        for (parent, child) in edges {
            parents
                .entry(child.to_owned())
                .or_default()
                .push(parent.to_owned());
        }
        Dag::new(parents)
    }

    #[test]
    fn the_papers_figure_2_tests_o_c_n_then_j_i_then_f() {
        // Invalid: o, p (after n); i, j, k, l, m (after n); g (after f).
        struct Figure2(Vec<String>);
        impl Oracle for Figure2 {
            // The leaves are given as invalid, as RPA's input says.
            fn known(&self, c: &str) -> Option<Answer> {
                ["g", "k", "m", "p"].contains(&c).then_some(Answer::Bad)
            }
            fn query(&mut self, c: &str) -> Answer {
                self.0.push(c.to_owned());
                if "opijklmg".contains(c) {
                    Answer::Bad
                } else {
                    Answer::Good
                }
            }
        }
        let mut oracle = Figure2(Vec::new());
        let leaves: Vec<String> = ["g", "k", "m", "p"].map(str::to_owned).into();
        let found = regressions(
            &figure_2(),
            &leaves,
            &["a".into()],
            &mut oracle,
            Search::Multiplying,
            true,
        );
        let points: Vec<(&str, &str, &str, bool)> = found
            .iter()
            .map(|r| {
                let r = r.as_ref().unwrap();
                (
                    r.leaf.as_str(),
                    r.good.as_str(),
                    r.bad.as_str(),
                    r.propagated,
                )
            })
            .collect();
        assert_eq!(
            points,
            [
                ("g", "f", "g", false),
                ("k", "n", "i", false),
                ("m", "n", "i", true),
                ("p", "n", "o", false),
            ]
        );
        // Iteration I tests o, c, n; II j, i; III f: with the root, the
        // paper's "7 out of 16 vertices".
        assert_eq!(oracle.0, ["o", "c", "n", "j", "i", "f"]);
    }

    /// Good at 16, bad 17..=20, good 21 and 22, bad from 23 on: the
    /// multiplying probe from 31 meets 30, 28, 24 bad and 16 good.
    fn alternating_in_the_gap(i: usize) -> Answer {
        if (17..=20).contains(&i) || i >= 23 {
            Answer::Bad
        } else {
            Answer::Good
        }
    }

    #[test]
    fn inside_a_gap_where_good_and_bad_alternate_the_recursion_finds_the_latest_point() {
        let search = |search| {
            let mut oracle = fake(alternating_in_the_gap);
            let found = on_linear(32, &mut oracle, search);
            (point(&found), oracle.queried)
        };
        // In 16..24 it asks 23 (bad), 21 (good), then 22 (good).
        let (found, asked) = search(Search::Multiplying);
        assert_eq!(found, (22, 23));
        assert_eq!(asked, [30, 28, 24, 16, 23, 21, 22]);
        // Bisecting it meets 20, in the older break, and stays there.
        let (found, asked) = search(Search::MultiplyingThenBinary);
        assert_eq!(found, (16, 17));
        assert_eq!(asked, [30, 28, 24, 16, 20, 18, 17]);
    }

    #[test]
    fn multiplying_then_binary_spends_fewer_where_the_point_is_deep_in_its_gap() {
        // The point 996 → 997 lies low in the gap 992..1008.
        let (found, asked) = on_the_papers_path(997, Search::Multiplying);
        assert_eq!(found, (996, 997));
        assert_eq!(asked.len(), 15, "{asked:?}");
        let (found, asked) = on_the_papers_path(997, Search::MultiplyingThenBinary);
        assert_eq!(found, (996, 997));
        assert_eq!(asked.len(), 9, "{asked:?}");
    }

    #[test]
    fn history_answers_narrow_the_gap_and_the_search_starts_again_at_its_bad_end() {
        // Free: 1000 good, 1010 bad. Then 1009 (bad), 1007 (good), 1008.
        let mut oracle = fake(bad_from(1008));
        oracle.free = HashSet::from([1000, 1010]);
        let found = on_linear(1024, &mut oracle, Search::Multiplying);
        assert_eq!(point(&found), (1007, 1008));
        assert_eq!(oracle.queried, [1009, 1007, 1008]);
    }

    /// Broken at 4, fixed at 7, broken again at 10.
    fn broken_fixed_broken(i: usize) -> Answer {
        if (4..7).contains(&i) || i >= 10 {
            Answer::Bad
        } else {
            Answer::Good
        }
    }

    #[test]
    fn multiplying_search_finds_the_latest_of_several_points() {
        let valid = broken_fixed_broken;
        let mut oracle = fake(valid);
        let found = on_linear(12, &mut oracle, Search::Multiplying);
        assert_eq!(point(&found), (9, 10));
    }

    #[test]
    fn free_answers_cost_nothing_and_give_the_latest_point() {
        let valid = broken_fixed_broken;
        let mut oracle = fake(valid);
        oracle.free = (0..12).collect();
        for search in ALL {
            let found = on_linear(12, &mut oracle, search);
            assert_eq!(point(&found), (9, 10), "{search:?}");
        }
        assert!(oracle.queried.is_empty());
    }

    #[test]
    fn a_skipped_commit_is_passed_and_reported_when_it_hides_the_point() {
        let valid = |i: usize| match i {
            5 => Answer::Skip,
            i if i >= 5 => Answer::Bad,
            _ => Answer::Good,
        };
        for search in ALL {
            let mut oracle = fake(valid);
            let found = on_linear(12, &mut oracle, search);
            let r = found[0].as_ref().unwrap();
            assert_eq!((r.good.as_str(), r.bad.as_str()), ("4", "6"), "{search:?}");
            assert_eq!(r.skipped, ["5"], "{search:?}");
        }
    }

    #[test]
    fn two_bad_branches_each_get_their_own_latest_point() {
        // 0 - 1 - 2 - 3 - 4a - 5a   (bad from 5a)
        //              \- 4b - 5b   (bad from 4b)
        let dag = Dag::new([
            ("0".to_owned(), vec![]),
            ("1".to_owned(), vec!["0".to_owned()]),
            ("2".to_owned(), vec!["1".to_owned()]),
            ("3".to_owned(), vec!["2".to_owned()]),
            ("4a".to_owned(), vec!["3".to_owned()]),
            ("5a".to_owned(), vec!["4a".to_owned()]),
            ("4b".to_owned(), vec!["3".to_owned()]),
            ("5b".to_owned(), vec!["4b".to_owned()]),
        ]);
        struct Branches;
        impl Oracle for Branches {
            fn known(&self, _: &str) -> Option<Answer> {
                None
            }
            fn query(&mut self, c: &str) -> Answer {
                if ["5a", "4b", "5b"].contains(&c) {
                    Answer::Bad
                } else {
                    Answer::Good
                }
            }
        }
        let found = regressions(
            &dag,
            &["5a".into(), "5b".into()],
            &["0".into()],
            &mut Branches,
            Search::Multiplying,
            true,
        );
        let points: Vec<(&str, &str)> = found
            .iter()
            .map(|r| {
                let r = r.as_ref().unwrap();
                (r.good.as_str(), r.bad.as_str())
            })
            .collect();
        assert_eq!(points, [("4a", "5a"), ("3", "4b")]);
    }

    #[test]
    fn git_bisect_finds_an_older_point_of_a_non_monotone_history() {
        let valid = broken_fixed_broken;
        let mut asked = Vec::new();
        let (point, count) = git_bisect(&linear(12), "11", &["0".into()], &mut |c: &str| {
            asked.push(c.to_owned());
            valid(c.parse().unwrap())
        });
        assert_eq!(point, Some(("3".into(), "4".into())), "asked {asked:?}");
        assert_eq!(count, asked.len());
        assert!(count <= 4, "about log2(11): {asked:?}");
    }

    #[test]
    fn a_good_leaf_or_no_good_commit_is_said() {
        let mut oracle = fake(|_| Answer::Good);
        let found = regressions(
            &linear(5),
            &["4".into()],
            &["0".into()],
            &mut oracle,
            Search::Binary,
            false,
        );
        assert_eq!(found, [Err(Unsolved::LeafIsGood("4".into()))]);
        let mut oracle = fake(|_| Answer::Bad);
        let found = regressions(
            &linear(5),
            &["4".into()],
            &[],
            &mut oracle,
            Search::Binary,
            false,
        );
        assert_eq!(found, [Err(Unsolved::NoGoodCommit("4".into()))]);
    }
}
