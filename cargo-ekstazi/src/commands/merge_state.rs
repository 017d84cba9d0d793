//! `cargo ekstazi merge-state DIR...`: the shards' state directories of a
//! partitioned run, merged into one.

use crate::cli::MergeStateArgs;
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::storage::merge_state::merge;
use ekstazi_core::storage::store::Store;
use std::process::ExitCode;

pub fn run(args: MergeStateArgs) -> Result<ExitCode> {
    let dest = match &args.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => super::workspace_state_dir(args.manifest_path.as_deref())?.1,
    };
    let store = Store::new(&dest);
    let _lock = store
        .lock(true, true)
        .with_context(|| format!("cannot lock the state directory {}", dest.display()))?;
    let mut refused = 0;
    for dir in &args.dirs {
        let dir = std::path::absolute(dir)?;
        if !dir.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        if dir == dest {
            continue;
        }
        let source = Store::new(&dir);
        if !source.has_records() {
            let others = source.other_versions();
            if others.is_empty() {
                style::warn(format!("{} holds no records", dir.display()));
            } else {
                bail!(
                    "{} holds records of format {} only; this cargo-ekstazi reads v{}",
                    dir.display(),
                    others.join(", "),
                    ekstazi_core::files::sealed::FORMAT_VERSION
                );
            }
            continue;
        }
        let merged = merge(&store, &source)
            .with_context(|| format!("cannot merge {} into {}", dir.display(), dest.display()))?;
        println!(
            "cargo-ekstazi: merged {}: {} added, {} newer, {} kept, {} functions added to the table",
            dir.display(),
            merged.added,
            merged.replaced,
            merged.kept,
            merged.functions
        );
        for why in merged.refused.lines() {
            style::warn(format!(
                "not merged: {why} (the tests concerned run next time)"
            ));
        }
        refused += merged.refused.len();
    }
    if refused > 0 {
        style::note(format!("{refused} damaged file(s) were left behind"));
    }
    Ok(ExitCode::SUCCESS)
}
