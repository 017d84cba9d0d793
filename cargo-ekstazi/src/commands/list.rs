//! `cargo ekstazi list`: the selection, without running anything.

use crate::cli::{ListArgs, parse_harness_args};
use crate::output::report::{self, Show};
use crate::session::Session;
use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

pub fn run(args: ListArgs) -> Result<ExitCode> {
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    let mut session = Session::prepare(&args.cargo, args.selection.layer())?;
    super::note_missing_records(&session);
    super::note_other_versions(&session);
    super::note_fallbacks(&session);
    let plan = session.analyse(&harness.filter);
    if args.cargo.verbose > 0 {
        super::print_timings(&session);
    }
    let show = match (args.selected, args.skipped) {
        (true, _) => Show::Selected,
        (_, true) => Show::Skipped,
        _ => Show::All,
    };
    let listing = report::list_json(&session, &plan, args.cargo.verbose > 0, show);
    let mut stdout = anstream::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut stdout, &listing)?;
        writeln!(stdout)?;
    } else {
        report::print_list_table(&mut stdout, &listing)?;
    }
    Ok(ExitCode::SUCCESS)
}
