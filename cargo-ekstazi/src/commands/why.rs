//! `cargo ekstazi why <TEST>`: one test's verdict and the evidence for it.

use crate::cli::WhyArgs;
use crate::output::report::test_label;
use crate::pipeline;
use crate::session::options::Request;
use crate::session::{Planned, Session};
use crate::style::{BOLD, DIM, FAIL, PASS, SKIP};
use anyhow::{Result, bail};
use ekstazi_core::digests::fingerprint;
use ekstazi_core::model::code_dep::CodeUnit;
use ekstazi_core::model::dep::{FileKind, Sum, Target};
use ekstazi_core::model::record::Record;
use ekstazi_core::selection::filter::Decision;
use ekstazi_core::selection::select;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

pub fn run(args: WhyArgs) -> Result<ExitCode> {
    let request = Request {
        cargo: args.cargo.clone(),
        layer: args.selection.layer(),
        ..Request::default()
    };
    let mut session = pipeline::prepare(request)?;
    pipeline::records::note_missing_records(&session);
    let plan = session.analyse();
    let found = find(&session, &plan, &args.name)?;
    let mut out = anstream::stdout().lock();
    for (i, planned) in found.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        explain(&mut out, &session, planned, args.all_deps)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The tests `query` names: an exact label (`<binary id> <name>`), else an
/// exact name (in every binary that has it), else the one test whose label
/// contains it.
fn find<'p>(session: &Session, plan: &'p [Planned], query: &str) -> Result<Vec<&'p Planned>> {
    let labelled: Vec<(String, &Planned)> =
        plan.iter().map(|p| (test_label(session, p), p)).collect();
    let exact: Vec<&Planned> = labelled
        .iter()
        .filter(|(label, _)| label == query)
        .map(|(_, p)| *p)
        .collect();
    if !exact.is_empty() {
        return Ok(exact);
    }
    let named: Vec<&Planned> = plan.iter().filter(|p| p.case.name == query).collect();
    if !named.is_empty() {
        return Ok(named);
    }
    let partial: Vec<&(String, &Planned)> = labelled
        .iter()
        .filter(|(label, _)| label.contains(query))
        .collect();
    match partial.as_slice() {
        [] => bail!(
            "no test matches `{query}` (`cargo ekstazi list` shows every test; give its name or \
             `<binary id> <name>`)"
        ),
        [(_, only)] => Ok(vec![*only]),
        several => {
            let mut names: Vec<&str> = several.iter().map(|(l, _)| l.as_str()).take(10).collect();
            if several.len() > 10 {
                names.push("...");
            }
            bail!(
                "{} tests match `{query}`; name one:\n  {}",
                several.len(),
                names.join("\n  ")
            )
        }
    }
}

fn explain(out: &mut impl Write, session: &Session, planned: &Planned, all: bool) -> Result<()> {
    let label = test_label(session, planned);
    let verdict = if planned.decision == Decision::Ignored {
        format!(
            "{SKIP}ignored{SKIP:#} (#[ignore]: runs with `-- --ignored` or `-- --include-ignored`)"
        )
    } else if let (true, Some(vouch)) = (planned.unaffected(), &planned.vouched) {
        format!(
            "{SKIP}skipped{SKIP:#}: {}: the record filed at that commit holds now",
            crate::output::report::unaffected(Some(vouch))
        )
    } else if planned.unaffected() {
        format!("{SKIP}skipped{SKIP:#}: unaffected since it last passed")
    } else if planned.elsewhere {
        format!("{PASS}selected{PASS:#}, for another shard of this --partition")
    } else {
        format!("{PASS}selected{PASS:#}: it runs")
    };
    writeln!(out, "{BOLD}{label}{BOLD:#}: {verdict}")?;
    for reason in &planned.reasons {
        writeln!(out, "    {reason}")?;
    }
    let whole = session.whole_last(planned);
    let record = whole.as_deref();
    if planned.unaffected()
        && let Some(record) = record
    {
        writeln!(
            out,
            "    it passed in {:.3}s, and none of its dependencies changed since: {}",
            record.duration().as_secs_f64(),
            summary(record)
        )?;
    }
    if planned.decision != Decision::Ignored && record.is_none() && planned.reasons.is_empty() {
        writeln!(out, "    no record")?;
    }
    if !all {
        if record.is_some() {
            writeln!(
                out,
                "{DIM}    (--all lists every dependency with its checksum){DIM:#}"
            )?;
        }
        return Ok(());
    }
    let Some(record) = record else {
        writeln!(out, "    no intact record: nothing more is known")?;
        return Ok(());
    };
    details(out, session, planned, record)
}

/// `12 files, 2 directory listings, 35 functions, ...`.
fn summary(record: &Record) -> String {
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for dep in &record.deps {
        let (_, one, many) = kind(&dep.target);
        *counts.entry((one, many)).or_default() += 1;
    }
    let functions: usize = record.code.iter().map(|c| c.functions.len()).sum();
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|((one, many), n)| format!("{n} {}", if n == 1 { one } else { many }))
        .collect();
    if functions > 0 {
        parts.push(match functions {
            1 => "1 function executed".to_owned(),
            n => format!("{n} functions executed"),
        });
    }
    if parts.is_empty() {
        "it has none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// A target's short kind, and what one and several are counted as.
fn kind(target: &Target) -> (&'static str, &'static str, &'static str) {
    match target {
        Target::Content(_) => ("file", "file read", "files read"),
        Target::Kind { follow: true, .. } => ("exists", "path looked up", "paths looked up"),
        Target::Kind { follow: false, .. } => ("lexists", "path looked up", "paths looked up"),
        Target::TestBinary => ("binary", "whole test binary", "whole test binaries"),
        Target::Program(_) => ("program", "program run", "programs run"),
        Target::Listing(_) => ("listing", "directory listing", "directory listings"),
        Target::Env(_) => ("env", "environment variable", "environment variables"),
        Target::Link(_) => ("link", "symbolic link", "symbolic links"),
        Target::Resolved(_) => ("realpath", "resolved path", "resolved paths"),
        Target::Library(_) => ("library", "shared library", "shared libraries"),
        Target::BuildFile(_) => ("build", "build file", "build files"),
        Target::Environment => (
            "environ",
            "walk of the environment",
            "walks of the environment",
        ),
    }
}

fn show(sum: &Sum) -> String {
    match sum {
        Sum::Hash(hash) => hash[..6].iter().map(|b| format!("{b:02x}")).collect(),
        Sum::Kind(FileKind::File) => "a file".to_owned(),
        Sum::Kind(FileKind::Dir) => "a directory".to_owned(),
        Sum::Kind(FileKind::Symlink) => "a symlink".to_owned(),
        Sum::Kind(FileKind::Other) => "special file".to_owned(),
        Sum::Absent => "absent".to_owned(),
        Sum::Unknown => "unknown".to_owned(),
    }
}

fn details(
    out: &mut impl Write,
    session: &Session,
    planned: &Planned,
    record: &Record,
) -> Result<()> {
    writeln!(
        out,
        "  {BOLD}last run{BOLD:#}: {} in {:.3}s",
        record.outcome.as_str(),
        record.duration().as_secs_f64()
    )?;
    let global = &record.global;
    let changed = global.changes(&session.global);
    writeln!(out, "  {BOLD}global fingerprint{BOLD:#}:")?;
    let rustc = global.rustc.lines().next().unwrap_or_default();
    for (name, value) in [
        ("rustc", rustc),
        ("target", &global.target),
        ("profile", &global.profile),
        ("features", &global.features),
        ("RUSTFLAGS", &global.rustflags),
        ("cargo-ekstazi", &global.tool),
        ("granularity", &global.granularity),
        ("config", &global.config),
    ] {
        let mark = if changed.contains(&name) {
            format!("  {FAIL}changed{FAIL:#}")
        } else {
            String::new()
        };
        writeln!(out, "    {name:<14} {value}{mark}")?;
    }
    if !record.always.is_empty() {
        writeln!(out, "  {BOLD}always runs{BOLD:#}:")?;
        for why in &record.always {
            writeln!(out, "    {why}")?;
        }
    }
    let env = session.selection_environment_of(&planned.case);
    let present = session.present(planned.case.binary, &env);
    writeln!(
        out,
        "  {BOLD}dependencies{BOLD:#} ({}; checksum when it ran, and now if different):",
        record.deps.len()
    )?;
    let width = record
        .deps
        .iter()
        .map(|d| d.target.to_string().len())
        .max()
        .unwrap_or(0);
    for dep in &record.deps {
        let now = select::current(&dep.target, &present);
        let state = if dep.sum.matches(&now) {
            String::new()
        } else {
            format!("  {FAIL}now {}{FAIL:#}", show(&now))
        };
        writeln!(
            out,
            "    {:<8} {:<width$}  {}{state}",
            kind(&dep.target).0,
            dep.target.to_string(),
            show(&dep.sum),
        )?;
    }
    for code in &record.code {
        let unit = match &code.unit {
            CodeUnit::TestBinary => "the test binary".to_owned(),
            other => other.to_string(),
        };
        writeln!(
            out,
            "  {BOLD}functions executed{BOLD:#} in {unit} ({}, build {}):",
            code.functions.len(),
            show(&Sum::Hash(code.build))
        )?;
        let table = session.snapshots.table();
        let mut names: Vec<String> = code
            .functions
            .iter()
            .map(|id| match table.get(id) {
                Some(function) => fingerprint::demangle(&function.name),
                None => "(a function the table no longer holds)".to_owned(),
            })
            .collect();
        names.sort();
        for name in names {
            writeln!(out, "    {name}")?;
        }
    }
    if !record.network.is_empty() {
        writeln!(out, "  {BOLD}network{BOLD:#}:")?;
        for peer in &record.network {
            writeln!(out, "    {peer}")?;
        }
    }
    if !record.ignored.is_empty() {
        writeln!(
            out,
            "  {BOLD}not dependencies{BOLD:#} (accessed, but ignored):"
        )?;
        for ignored in &record.ignored {
            writeln!(out, "    {}  {DIM}({}){DIM:#}", ignored.what, ignored.why)?;
        }
    }
    Ok(())
}
