//! The analysis: for every test the filter keeps, whether it runs and why,
//! from its current record or, failing that, a record filed under another
//! commit; with `--partition`, which shard runs it.

use super::Session;
use crate::cargo::libtest::{self, TestCase};
use ekstazi_core::capture::environment::Environment;
use ekstazi_core::files::identity::Identity;
use ekstazi_core::model::code_dep::CodeUnit;
use ekstazi_core::model::dep::{Hash, Sum, Target};
use ekstazi_core::model::peer::Peer;
use ekstazi_core::model::record::{Outcome, Record};
use ekstazi_core::options::settings::External;
use ekstazi_core::selection::filter::{Decision, Filter};
use ekstazi_core::selection::select::{Present, Reason};
use ekstazi_core::selection::verdict::{self, InPart, Judgement};
use ekstazi_core::selection::vouch::filed_vouches;
use ekstazi_core::storage::history::Known;
use ekstazi_core::storage::history::candidates::Vouch;
use ekstazi_core::storage::record_index::{Index, Summarised};
use ekstazi_core::storage::store::Loaded;
use ekstazi_core::storage::store::Store;
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A test and what the analysis decided about it.
pub struct Planned {
    pub case: TestCase,
    pub decision: Decision,
    /// Empty: skipped as unaffected.
    pub reasons: Vec<Reason>,
    /// The previous record, if intact (for its duration); for a test a
    /// filed record vouched for, that record.
    pub last: Option<Last>,
    /// The identity of the current record's file `last` was read or
    /// summarised from, for the index of the records.
    last_file: Option<Identity>,
    /// What names `last` in the history already, for filing it again.
    pub last_known: Known,
    /// A record filed under a commit (not the current one) vouched for it.
    pub vouched: Option<Vouch>,
    /// Affected, but another shard of a `--partition`ed run runs it.
    pub elsewhere: bool,
}

impl Planned {
    /// It runs in this run.
    pub fn selected(&self) -> bool {
        self.affected() && !self.elsewhere
    }

    /// Something it depends on changed (or nothing is known): it runs in
    /// this run, or in another shard's.
    pub fn affected(&self) -> bool {
        self.decision == Decision::Run && !self.reasons.is_empty()
    }

    /// Its record holds: skipped as unaffected.
    pub fn unaffected(&self) -> bool {
        self.decision == Decision::Run && self.reasons.is_empty()
    }

    /// Its record is not to be written (a never-record pattern).
    pub fn never_recorded(&self) -> bool {
        self.reasons
            .iter()
            .any(|r| matches!(r, Reason::NeverRecorded(_) | Reason::Skipme))
    }
}

/// A test's previous record, as the analysis holds it.
pub enum Last {
    /// Read whole.
    Record(Box<Record>),
    /// Its entry in the index of the records proved that it holds; the
    /// record itself is read only where it is shown or filed.
    Summary(Summarised),
}

impl Last {
    pub fn duration(&self) -> Duration {
        match self {
            Last::Record(record) => record.duration(),
            Last::Summary(summarised) => summarised.summary.duration(),
        }
    }

    pub fn outcome(&self) -> Outcome {
        match self {
            Last::Record(record) => record.outcome,
            Last::Summary(summarised) => summarised.summary.outcome,
        }
    }

    pub fn network(&self) -> &[Peer] {
        match self {
            Last::Record(record) => &record.network,
            Last::Summary(summarised) => &summarised.summary.network,
        }
    }

    /// The record, when it was read whole.
    pub fn record(&self) -> Option<&Record> {
        match self {
            Last::Record(record) => Some(record),
            Last::Summary(_) => None,
        }
    }

    /// The record whole: held, or read now for a summary, and then only
    /// if its file is still sealed with the digest the summary names (a
    /// record rewritten since is another one).
    pub fn whole(&self, store: &Store, binary: &str, test: &str) -> Option<Cow<'_, Record>> {
        match self {
            Last::Record(record) => Some(Cow::Borrowed(record)),
            Last::Summary(summarised) => match store.load_sealed(binary, test) {
                (Loaded::Found(record), Some(sealed)) if sealed == summarised.sealed => {
                    Some(Cow::Owned(*record))
                }
                _ => None,
            },
        }
    }
}

impl Session {
    /// A planned test's previous record whole (read now if the analysis
    /// held its index entry only).
    pub fn whole_last<'a>(&self, planned: &'a Planned) -> Option<Cow<'a, Record>> {
        let key = &self.built.binaries[planned.case.binary].key;
        planned
            .last
            .as_ref()?
            .whole(&self.store, key, &planned.case.name)
    }

    /// Decides, for every test the filter keeps, whether it runs and why;
    /// with `--partition`, which of the affected tests this shard runs.
    /// The filter is the options' (libtest's, or nextest's `--ignored`).
    pub fn analyse(&mut self) -> Vec<Planned> {
        let clock = Instant::now();
        let (mut plan, indexes) = self.plan(&self.options.harness.filter);
        self.partition(&mut plan);
        // `--skipme` writes no state.
        if !self.options.settings.skipme {
            self.index_records(&plan, indexes);
            if let Some(bytes) = self.checksums.kept_to_save() {
                // Not fatal: the next run checksums them again.
                let _ = self.store.save_kept_sums(&bytes);
            }
        }
        self.timings.push(("analysis", clock.elapsed()));
        plan
    }

    /// The analysis's stages: the tests the filter keeps, their current
    /// records (or those filed under `--vouch-only-from`), what those
    /// records name checksummed ahead, each record judged, and then each
    /// test decided.
    fn plan(&self, filter: &Filter) -> (Vec<Planned>, Indexes) {
        let scoped = self.scope(filter);
        let only_filed = self.only_filed();
        // The index of the current records, unless the current records do
        // not count (`--vouch-only-from`).
        let indexes = if only_filed.is_none() {
            self.read_indexes(&scoped)
        } else {
            Indexes::new()
        };
        let loaded = self.load_records(&scoped, only_filed.as_ref(), &indexes);
        self.prefetch(&loaded, &indexes);
        // Judged in parallel, in two passes: the current records first, then
        // the tests they do not vouch for, which try the records filed in
        // the history in turn.
        let judged = self.judge_current(scoped, loaded, only_filed.is_some());
        if judged
            .iter()
            .flat_map(|(.., j)| j)
            .any(|j| j.judgement.may_vouch)
        {
            self.read_history();
        }
        let plan = judged
            .into_par_iter()
            .map(|(case, decision, judged)| self.decide(case, decision, judged))
            .collect();
        (plan, indexes)
    }

    /// The index of each binary in scope, where one is kept.
    fn read_indexes(&self, scoped: &[(TestCase, Decision)]) -> Indexes {
        let binaries: HashSet<usize> = scoped.iter().map(|(case, _)| case.binary).collect();
        binaries
            .into_par_iter()
            .filter_map(|binary| {
                let key = &self.built.binaries[binary].key;
                Some((binary, self.store.record_index(key)?))
            })
            .collect()
    }

    /// Writes the index of each binary whose records this analysis read
    /// whole, so that the next one need not (not fatal to miss: the
    /// records are then read whole again). An entry the index had that no
    /// longer stands for its test's record file goes.
    fn index_records(&self, plan: &[Planned], mut indexes: Indexes) {
        let mut by_binary: HashMap<usize, Vec<&Planned>> = HashMap::new();
        for planned in plan {
            by_binary
                .entry(planned.case.binary)
                .or_default()
                .push(planned);
        }
        let by_binary: Vec<_> = by_binary
            .into_iter()
            .map(|(binary, planned)| (binary, planned, indexes.remove(&binary)))
            .collect();
        let now = std::time::SystemTime::now();
        by_binary
            .into_par_iter()
            .for_each(|(binary, planned, old)| {
                let (read, read_tests): (Vec<(Identity, Hash, &Record)>, Vec<&String>) = planned
                    .iter()
                    .filter_map(|p| match (&p.last, p.last_file, p.last_known) {
                        (Some(Last::Record(record)), Some(file), Known::Current(sealed)) => {
                            Some(((file, sealed, &**record), &p.case.name))
                        }
                        _ => None,
                    })
                    .unzip();
                let in_scope: HashSet<&str> =
                    planned.iter().map(|p| p.case.name.as_str()).collect();
                let (old_in_scope, out_of_scope): (Vec<_>, Vec<_>) = old
                    .into_iter()
                    .flat_map(|old| old.into_entries())
                    .partition(|(test, ..)| in_scope.contains(test.as_str()));
                let used: Vec<_> = planned
                    .iter()
                    .filter_map(|p| match (&p.last, p.last_file) {
                        (Some(Last::Summary(summarised)), Some(file)) => {
                            Some((p.case.name.clone(), summarised.clone(), file))
                        }
                        _ => None,
                    })
                    .collect();
                // Unchanged: every record read whole has its entry already
                // (one that could not prove it holds: a failure, a rebuilt
                // program), and no entry went stale.
                let indexed: HashMap<&str, (Identity, Hash)> = old_in_scope
                    .iter()
                    .map(|(test, summarised, file)| (test.as_str(), (*file, summarised.sealed)))
                    .collect();
                let new = read
                    .iter()
                    .zip(&read_tests)
                    .any(|((file, sealed, _), test)| {
                        indexed.get(test.as_str()) != Some(&(*file, *sealed))
                    });
                if !new && old_in_scope.len() == used.len() + read.len() {
                    return;
                }
                let kept = out_of_scope.into_iter().chain(used);
                let key = &self.built.binaries[binary].key;
                let index = Index::build(key, kept, read, now);
                let _ = self.store.save_record_index(&index);
            });
    }

    /// With `--partition`, marks the affected tests another shard runs.
    fn partition(&self, plan: &mut [Planned]) {
        if let Some(partition) = &self.options.settings.partition {
            let affected = plan.iter_mut().filter(|p| p.affected());
            for (position, planned) in affected.enumerate() {
                let key = &self.built.binaries[planned.case.binary].key;
                planned.elsewhere = !partition.contains(position, key, &planned.case.name);
            }
        }
    }

    /// The tests the filter keeps, with what it decided for each.
    fn scope(&self, filter: &Filter) -> Vec<(TestCase, Decision)> {
        self.tests
            .iter()
            .filter_map(|case| {
                // A `harness = false` binary, and doctests, receive the
                // filter themselves.
                let decision =
                    if case.name == libtest::WHOLE_BINARY || case.name == libtest::DOCTESTS {
                        Decision::Run
                    } else {
                        filter.decide(&case.name, case.ignored)
                    };
                (decision != Decision::Out).then(|| (case.clone(), decision))
            })
            .collect()
    }

    /// The record of each test that is to run, with the digest its file is
    /// sealed with: the current one, or with `--vouch-only-from`, the one
    /// filed under that commit.
    fn load_records(
        &self,
        scoped: &[(TestCase, Decision)],
        only_filed: Option<&Filed>,
        indexes: &Indexes,
    ) -> Vec<Option<Current>> {
        let files = self.record_files(scoped, indexes);
        scoped
            .par_iter()
            .zip(files)
            .map(|((case, decision), file)| {
                (*decision == Decision::Run).then(|| {
                    let key = &self.built.binaries[case.binary].key;
                    if let Some(filed) = only_filed {
                        return Current::Read(filed.load(key, &case.name), None, None);
                    }
                    if let Some(index) = indexes.get(&case.binary)
                        && let Some(summarised) = index.fresh(&case.name, file)
                    {
                        return Current::Indexed(summarised, file);
                    }
                    let (loaded, sealed, file) = self.read_record(case);
                    Current::Read(loaded, sealed, file)
                })
            })
            .collect()
    }

    /// The identity of each scoped test's record file now, where its
    /// binary has an index to look it up in (each binary's directory
    /// reached once).
    fn record_files(
        &self,
        scoped: &[(TestCase, Decision)],
        indexes: &Indexes,
    ) -> Vec<Option<Identity>> {
        let mut by_binary: HashMap<usize, Vec<usize>> = HashMap::new();
        for (at, (case, _)) in scoped.iter().enumerate() {
            if indexes.contains_key(&case.binary) {
                by_binary.entry(case.binary).or_default().push(at);
            }
        }
        let found: Vec<(usize, Option<Identity>)> = by_binary
            .into_par_iter()
            .flat_map_iter(|(binary, at)| {
                let tests: Vec<&str> = at.iter().map(|&i| scoped[i].0.name.as_str()).collect();
                let key = &self.built.binaries[binary].key;
                at.into_iter()
                    .zip(self.store.record_identities(key, &tests))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut files = vec![None; scoped.len()];
        for (at, file) in found {
            files[at] = file;
        }
        files
    }

    /// A test's current record, read whole, with the seal and the
    /// identity of its file.
    fn read_record(&self, case: &TestCase) -> (Loaded, Option<Hash>, Option<Identity>) {
        let key = &self.built.binaries[case.binary].key;
        self.store.load_identified(key, &case.name)
    }

    /// Checksums, ahead and in parallel, what the records name: their
    /// dependencies, and the programs they ran.
    fn prefetch(&self, loaded: &[Option<Current>], indexes: &Indexes) {
        let records: Vec<&Record> = loaded
            .iter()
            .flatten()
            .filter_map(|current| match current {
                Current::Read(Loaded::Found(record), ..) => Some(&**record),
                _ => None,
            })
            .collect();
        let indexed = loaded.iter().flatten().filter_map(|current| match current {
            Current::Indexed(summarised, _) => Some(summarised),
            _ => None,
        });
        let indexed_programs: Vec<Target> = indexed
            .flat_map(|s| &s.summary.code)
            .filter_map(|(unit, _)| match unit {
                CodeUnit::Program(path) => Some(Target::Program(path.clone())),
                CodeUnit::TestBinary => None,
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let programs: Vec<Target> = records
            .iter()
            .flat_map(|r| &r.code)
            .filter_map(|c| match &c.unit {
                CodeUnit::Program(path) => Some(Target::Program(path.clone())),
                CodeUnit::TestBinary => None,
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let targets = records
            .iter()
            .flat_map(|r| r.deps.iter().map(|d| &d.target))
            .chain(
                indexes
                    .values()
                    .flat_map(|index| index.table().iter().map(|d| &d.target)),
            );
        self.checksums.prefetch(
            targets
                .chain(&programs)
                .chain(&indexed_programs)
                .filter(|t| {
                    !matches!(t, Target::TestBinary | Target::Env(_) | Target::Environment)
                }),
        );
        // Programs the records ran that were rebuilt since: fingerprint each
        // once, in parallel, before the tests that ran them are compared.
        programs.par_iter().for_each(|target| {
            if let (Sum::Hash(id), Target::Program(path)) = (self.checksums.get(target), target)
                && records
                    .iter()
                    .flat_map(|r| &r.code)
                    .any(|c| c.unit == CodeUnit::Program(path.clone()) && c.build != id)
                && let Some(path) = self.checksums.anchors().resolve(path)
            {
                let _ = self.snapshots.of_binary(&path, &id);
            }
        });
    }

    /// The first pass: each test's current record judged, where the
    /// history may be tried, and whether a filed record may vouch instead.
    fn judge_current(
        &self,
        scoped: Vec<(TestCase, Decision)>,
        loaded: Vec<Option<Current>>,
        only_filed: bool,
    ) -> Vec<(TestCase, Decision, Option<Judged<'_>>)> {
        scoped
            .into_par_iter()
            .zip(loaded)
            .map(|((case, decision), current)| {
                let Some(current) = current else {
                    return (case, decision, None);
                };
                let rules = self.rules(&case);
                // An index entry decides only that a record holds; for
                // anything else the record is read whole. An entry that
                // names no variable is judged in the binary's environment
                // as it is (a test's own `TMPDIR` is one more variable).
                let (loaded, sealed, file, env) = match current {
                    Current::Indexed(summarised, file) => {
                        let own_env = summarised
                            .deps()
                            .any(|dep| matches!(dep.target, Target::Env(_) | Target::Environment));
                        let env = if own_env {
                            self.selection_environment_of(&case)
                        } else {
                            Cow::Borrowed(&self.environments[case.binary])
                        };
                        let present = self.present(case.binary, &env);
                        if verdict::summary_decides(&summarised, &present, &rules) {
                            // Decided: the test's own environment (a copy of
                            // its binary's, thousands at once) is not kept.
                            let judged = Judged {
                                loaded: Held::Indexed(summarised),
                                sealed: None,
                                file,
                                env: Cow::Borrowed(&self.environments[case.binary]),
                                rules,
                                judgement: Judgement {
                                    holds: true,
                                    may_vouch: false,
                                },
                            };
                            return (case, decision, Some(judged));
                        }
                        let (loaded, sealed, file) = self.read_record(&case);
                        // The test's own environment, when it was made.
                        (loaded, sealed, file, own_env.then_some(env))
                    }
                    Current::Read(loaded, sealed, file) => (loaded, sealed, file, None),
                };
                let env = env.unwrap_or_else(|| self.selection_environment_of(&case));
                let present = self.present(case.binary, &env);
                let history = self.repo.is_some() && !only_filed;
                let judgement = verdict::judge(&loaded, &present, &rules, history);
                let judged = Judged {
                    loaded: Held::Read(loaded),
                    sealed,
                    file,
                    env,
                    rules,
                    judgement,
                };
                (case, decision, Some(judged))
            })
            .collect()
    }

    /// The second pass: a test decided, from a filed record that vouches
    /// for it, or else from its current record's reasons.
    fn decide(&self, case: TestCase, decision: Decision, judged: Option<Judged<'_>>) -> Planned {
        let Some(Judged {
            loaded,
            sealed,
            file,
            env,
            rules,
            judgement,
        }) = judged
        else {
            return Planned {
                case,
                decision,
                reasons: Vec::new(),
                last: None,
                last_file: None,
                last_known: Known::Nothing,
                vouched: None,
                elsewhere: false,
            };
        };
        let loaded = match loaded {
            Held::Indexed(summarised) => {
                // It holds (judged with the present already).
                return Planned {
                    case,
                    decision,
                    reasons: rules,
                    last_known: Known::Current(summarised.sealed),
                    last: Some(Last::Summary(summarised)),
                    last_file: file,
                    vouched: None,
                    elsewhere: false,
                };
            }
            Held::Read(loaded) => loaded,
        };
        let present = self.present(case.binary, &env);
        // The reasons are worked out only for a test that runs: at a
        // branch switch, most tests whose current record fails have
        // a filed one that vouches, and naming every changed
        // function of the current record cost them more than the
        // history's own reading (ripgrep, `perf`).
        let filed = if judgement.may_vouch {
            self.vouching(&case, &present)
        } else {
            None
        };
        let vouched = filed.is_some();
        let in_part = self.in_part(&case);
        let reasons = verdict::reasons(&loaded, &present, judgement, vouched, in_part, rules);
        let (last, last_known, vouched) = match filed {
            Some((record, id, vouch)) => {
                (Some(Last::Record(record)), Known::Filed(id), Some(vouch))
            }
            None => {
                let last = match loaded {
                    Loaded::Found(record) => Some(Last::Record(record)),
                    _ => None,
                };
                // The store gives a digest with a found record only.
                let last_known = sealed.map_or(Known::Nothing, Known::Current);
                (last, last_known, None)
            }
        };
        Planned {
            case,
            decision,
            reasons,
            last_file: file.filter(|_| vouched.is_none()),
            last,
            last_known,
            vouched,
            elsewhere: false,
        }
    }

    /// Reads what trying the history needs, the manifests and the packs'
    /// indexes, with every core at it. Read lazily by the first test to
    /// need them, they kept one core busy while the other judging thread
    /// waited for them: at a branch switch on ripgrep's 100 commits, a
    /// fifth of the history's cost.
    fn read_history(&self) {
        let Some(repo) = &self.repo else {
            return;
        };
        let history = self.history();
        rayon::join(
            || {
                self.candidates
                    .get_or_init(|| history.candidates(Some(&repo.head), &repo.parents));
            },
            || history.read_index(),
        );
    }

    /// With `--vouch-only-from`, the records filed under that commit, which
    /// then stand for the current records.
    fn only_filed(&self) -> Option<Filed> {
        let commit = self.options.settings.vouch_only_from.as_deref()?;
        let history = self.store.history();
        let entries = history
            .manifest(commit)
            .map(|m| {
                m.entries
                    .into_iter()
                    .map(|e| ((e.binary, e.test), e.record))
                    .collect()
            })
            .unwrap_or_default();
        Some(Filed { history, entries })
    }

    /// A record filed under a commit that vouches for the test now, if any
    /// (see `ekstazi_core::storage::history::candidates::Candidates` for the order they are
    /// tried in).
    fn vouching(
        &self,
        case: &TestCase,
        present: &Present<'_>,
    ) -> Option<(Box<Record>, Hash, Vouch)> {
        let repo = self.repo.as_ref()?;
        let (history, verdicts) = self.filed();
        let candidates = self
            .candidates
            .get_or_init(|| history.candidates(Some(&repo.head), &repo.parents));
        let key = &self.built.binaries[case.binary].key;
        // The current record's own filed copy is tried too, rather than
        // cutting the current record to find its id (which cost more than
        // a candidate): it fails where the current record failed, and the
        // chunk verdicts it leaves serve the candidates after it.
        candidates.of(key, &case.name).find_map(|(id, vouch)| {
            let record = filed_vouches(history, id, key, &case.name, present, verdicts)?;
            Some((Box::new(record), *id, vouch.clone()))
        })
    }

    /// What the selection compares a record of a test of `binary`, given
    /// `env`, with.
    pub fn present<'a>(&'a self, binary: usize, env: &'a Environment) -> Present<'a> {
        Present {
            global: &self.global,
            binary: &self.binary_sums[binary],
            binary_path: &self.built.binaries[binary].path,
            checksums: &self.checksums,
            snapshots: &self.snapshots,
            env,
            network: &self.network_policy,
            always_run_external: self.options.settings.external == External::AlwaysRun,
            forced: self.options.settings.forceall,
        }
    }

    /// A unit that is one verdict (a library's doctests, a `harness =
    /// false` binary), given the filter or the words after `--`, runs in
    /// part (see `crate::run::scheduler`).
    fn in_part(&self, case: &TestCase) -> Option<InPart<'_>> {
        let binary = &self.built.binaries[case.binary];
        (binary.doctests.is_some() || binary.custom_harness).then(|| InPart {
            words: &self.options.harness_words,
            doctests: binary.doctests.is_some(),
        })
    }

    fn rules(&self, case: &TestCase) -> Vec<Reason> {
        let key = &self.built.binaries[case.binary].key;
        verdict::rules(&self.options.settings, key, &case.name)
    }
}

/// The index of the records of each binary that has one, by binary.
type Indexes = HashMap<usize, ekstazi_core::storage::record_index::Loaded>;

/// A test's current record, before it is judged: its index entry, for the
/// file as it is, or the record read whole (with the seal and the identity
/// of its file).
enum Current {
    Indexed(Summarised, Option<Identity>),
    Read(Loaded, Option<Hash>, Option<Identity>),
}

/// What the judging held of a test's current record.
enum Held {
    /// An index entry, which proved that the record holds.
    Indexed(Summarised),
    Read(Loaded),
}

/// A test's current record, judged, between the two passes of the plan.
struct Judged<'a> {
    loaded: Held,
    /// The digest the current record's file is sealed with, when found.
    sealed: Option<Hash>,
    /// The identity of the current record's file.
    file: Option<Identity>,
    env: Cow<'a, Environment>,
    rules: Vec<Reason>,
    judgement: Judgement,
}

/// The records filed under one commit, by test.
struct Filed {
    history: ekstazi_core::storage::history::History,
    entries: std::collections::HashMap<(String, String), ekstazi_core::model::dep::Hash>,
}

impl Filed {
    fn load(&self, binary: &str, test: &str) -> Loaded {
        let Some(id) = self.entries.get(&(binary.to_owned(), test.to_owned())) else {
            return Loaded::Missing;
        };
        match self.history.object(id) {
            Some(record) if record.binary == binary && record.test == test => {
                Loaded::Found(Box::new(record))
            }
            _ => Loaded::Invalid(ekstazi_core::storage::store::Invalid::Decode(
                ekstazi_core::files::sealed::DecodeError::BadDigest,
            )),
        }
    }
}
