//! A test's verdict: whether it runs, and every reason why.
//!
//! The runner reads the records; this module decides, in the order the
//! analysis works:
//!
//! 1. [`rules`]: what the settings say whatever the record says
//!    (`--skipme`, the always-run and never-record patterns);
//! 2. [`summary_decides`]: an index entry that proves the current record
//!    holds decides alone, without the record read whole;
//! 3. [`judge`]: whether the current record holds, and whether a record
//!    filed under another commit may vouch instead;
//! 4. [`reasons`]: the reasons the test runs, none when a record vouches.
//!
//! Invariant: a test with no reason is skipped, so every path that cannot
//! prove a record holds ends with a reason ([`select::reasons`] names at
//! least one for a record that does not vouch).

use crate::model::record::Outcome;
use crate::options::settings::Settings;
use crate::selection::select::{self, Present, Reason};
use crate::storage::record_index::Summarised;
use crate::storage::store::Loaded;

/// The reasons the settings give to run a test whatever its record says.
pub fn rules(settings: &Settings, binary: &str, test: &str) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if settings.skipme {
        reasons.push(Reason::Skipme);
    }
    if let Some(pattern) = settings.always_run.matching(binary, test) {
        reasons.push(Reason::AlwaysRunPattern(pattern.to_owned()));
    }
    if let Some(pattern) = settings.never_record.matching(binary, test) {
        reasons.push(Reason::NeverRecorded(pattern.to_owned()));
    }
    reasons
}

/// Whether a current record's index entry decides alone: it proves the
/// record holds, and nothing else asks the test to run.
pub fn summary_decides(summarised: &Summarised, present: &Present<'_>, rules: &[Reason]) -> bool {
    !present.forced && rules.is_empty() && select::summary_vouches(summarised, present)
}

/// A current record judged in the first pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Judgement {
    /// It vouches for the test (judged only where the history may be
    /// tried; elsewhere its reasons are worked out in [`reasons`]).
    pub holds: bool,
    /// It does not vouch for the test, and a record filed under another
    /// commit may.
    pub may_vouch: bool,
}

/// Judges a test's current record against the present. `history`: the
/// history may be tried (the workspace is in a repository, and the
/// current records count). A failure last time runs again, whatever
/// passed elsewhere: a failed run's dependencies are what it read before
/// it failed, not what its failure came from, so they do not say that it
/// failed in another world than this one.
pub fn judge(loaded: &Loaded, present: &Present<'_>, rules: &[Reason], history: bool) -> Judgement {
    let history = history && !present.forced && rules.is_empty();
    let holds =
        history && matches!(loaded, Loaded::Found(record) if select::vouches(record, present));
    let may_vouch = history
        && !holds
        && match loaded {
            Loaded::Found(record) => record.outcome == Outcome::Passed,
            Loaded::Missing | Loaded::Invalid(_) => true,
        };
    Judgement { holds, may_vouch }
}

/// A unit that is one verdict (a library's doctests, a binary without
/// libtest) given the test arguments: it runs in part.
pub struct InPart<'a> {
    /// The words after `--`.
    pub words: &'a [String],
    /// It is a library's doctests (else a binary without libtest).
    pub doctests: bool,
}

/// The reasons a test runs: none when a filed record vouched for it;
/// else its current record's, then the settings' `rules`. A unit run
/// `in_part` is never recorded, so it is new at every such run, which
/// its reason says rather than `new`.
pub fn reasons(
    loaded: &Loaded,
    present: &Present<'_>,
    judgement: Judgement,
    vouched: bool,
    in_part: Option<InPart<'_>>,
    rules: Vec<Reason>,
) -> Vec<Reason> {
    // Judged already: `select::reasons` finds none exactly when
    // `select::vouches` holds (not forced).
    let mut reasons = if vouched || judgement.holds {
        Vec::new()
    } else {
        select::reasons(loaded, present)
    };
    if let Some(in_part) = in_part.filter(|p| !p.words.is_empty()) {
        name_in_part(&in_part, &mut reasons);
    }
    reasons.extend(rules);
    reasons
}

/// Names, in place of `new`, why a unit run in part has no record.
fn name_in_part(in_part: &InPart<'_>, reasons: &mut [Reason]) {
    let unit = if in_part.doctests {
        "a library's doctests run"
    } else {
        "a binary without libtest runs"
    };
    for reason in reasons.iter_mut().filter(|r| **r == Reason::New) {
        *reason = Reason::Always(format!(
            "with the test arguments `{}`, {unit} in part, and a partial run is never recorded",
            in_part.words.join(" ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::settings::Layer;

    #[test]
    fn the_settings_name_their_reasons_in_order() {
        let cli = Layer {
            skipme: Some(true),
            always_run: vec!["*smoke*".into()],
            never_record: vec!["it::*".into()],
            ..Layer::default()
        };
        let settings = Settings::resolve(cli, Layer::default(), Layer::default()).unwrap();
        assert_eq!(
            rules(&settings, "pkg", "it::smoke"),
            [
                Reason::Skipme,
                Reason::AlwaysRunPattern("*smoke*".into()),
                Reason::NeverRecorded("it::*".into()),
            ]
        );
        let plain = Settings::resolve(Layer::default(), Layer::default(), Layer::default());
        assert!(rules(&plain.unwrap(), "pkg", "it::smoke").is_empty());
    }

    #[test]
    fn a_unit_run_in_part_says_why_it_has_no_record() {
        let words = ["--exact".to_owned()];
        let mut reasons = vec![Reason::New, Reason::Skipme];
        let in_part = InPart {
            words: &words,
            doctests: true,
        };
        name_in_part(&in_part, &mut reasons);
        assert_eq!(
            reasons,
            [
                Reason::Always(
                    "with the test arguments `--exact`, a library's doctests run in part, and a partial run is never recorded"
                        .into()
                ),
                Reason::Skipme,
            ]
        );
    }
}
