//! `cargo ekstazi list`: the selection, without running anything.
//!
//! The run path of [`crate::pipeline`] up to the analysis: prepare → open
//! the records → analyse → report the listing.

use crate::cli::{ListArgs, parse_harness_args};
use crate::output::report::{self, Show};
use crate::pipeline;
use crate::session::Planned;
use crate::session::Session;
use crate::session::options::{Request, harness_words};
use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

pub fn run(args: ListArgs) -> Result<ExitCode> {
    let show = match (args.selected, args.skipped) {
        (true, _) => Show::Selected,
        (_, true) => Show::Skipped,
        _ => Show::All,
    };
    let (json, request) = (args.json, request(args)?);
    let mut session = pipeline::prepare(request)?;
    pipeline::open_records(&mut session, false)?;
    let plan = pipeline::analyse(&mut session);
    print_listing(&session, &plan, show, json)?;
    Ok(ExitCode::SUCCESS)
}

/// What the command line asks: libtest's arguments parsed first.
fn request(args: ListArgs) -> Result<Request> {
    let harness = parse_harness_args(args.filter.as_deref(), &args.libtest)?;
    Ok(Request {
        layer: args.selection.layer(),
        harness_words: harness_words(args.filter.as_deref(), &args.libtest),
        cargo: args.cargo,
        harness,
        ..Request::default()
    })
}

/// The report stage: the listing, as a table or as JSON.
fn print_listing(session: &Session, plan: &[Planned], show: Show, json: bool) -> Result<()> {
    let listing = report::list_json(session, plan, session.options.verbose(), show);
    // Buffered: a listing of thousands of tests is otherwise a write per
    // line.
    let mut stdout = std::io::BufWriter::new(anstream::stdout().lock());
    if json {
        serde_json::to_writer(&mut stdout, &listing)?;
        writeln!(stdout)?;
    } else {
        report::print_list_table(&mut stdout, &listing)?;
    }
    stdout.flush()?;
    Ok(())
}
