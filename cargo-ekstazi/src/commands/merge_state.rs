//! `cargo ekstazi merge-state DIR...`: the shards' state directories of a
//! partitioned run, merged into one.

use crate::cli::MergeStateArgs;
use crate::style;
use anyhow::{Context, Result, bail};
use ekstazi_core::config::Config;
use ekstazi_core::merge::merge;
use ekstazi_core::settings::Layer;
use ekstazi_core::store::Store;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(args: MergeStateArgs) -> Result<ExitCode> {
    let dest = match &args.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => workspace_state_dir(&args)?,
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
                    ekstazi_core::record::FORMAT_VERSION
                );
            }
            continue;
        }
        let merged = merge(&store, &source)
            .with_context(|| format!("cannot merge {} into {}", dir.display(), dest.display()))?;
        println!(
            "cargo-ekstazi: merged {}: {} added, {} newer, {} kept, {} function snapshots copied",
            dir.display(),
            merged.added,
            merged.replaced,
            merged.kept,
            merged.snapshots
        );
        for why in &merged.refused {
            style::warn(format!("not merged: {why} (its test runs next time)"));
        }
        refused += merged.refused.len();
    }
    // Snapshots that no merged record names any more.
    if let Ok(referenced) = store.referenced_snapshots() {
        let _ = store.retain_snapshots(&referenced);
    }
    if refused > 0 {
        style::note(format!("{refused} damaged file(s) were left behind"));
    }
    Ok(ExitCode::SUCCESS)
}

/// The state directory `cargo ekstazi test` would use in this workspace.
fn workspace_state_dir(args: &MergeStateArgs) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = cargo_metadata::MetadataCommand::new();
    command.cargo_path(&cargo).no_deps();
    if let Some(path) = &args.manifest_path {
        command.manifest_path(path);
    }
    let metadata = command
        .exec()
        .context("cannot find the workspace (give --state-dir to merge outside one)")?;
    let root = metadata.workspace_root.into_std_path_buf();
    let config = Config::load(&root)?;
    let file = Layer::from_config(&config, &root)?;
    let env = Layer::from_env(|name| std::env::var(name).ok())?;
    Ok(file
        .state_dir
        .or(env.state_dir)
        .map_or_else(|| Ok(root.join(".ekstazi")), std::path::absolute)?)
}
