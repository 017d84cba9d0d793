//! The subcommands, one module (or folder) each. `test`, `list` and
//! `nextest` go the run path of [`crate::pipeline`]; `why` prepares and
//! analyses as they do; `history`, `merge-state`, `bisect` and
//! `merge-check` need no build of the user's checkout, and find the state
//! directory here ([`locked_state`], [`workspace_state_dir`]; with the
//! repository, [`locked_repo`]);
//! `completions` and `man` describe the command line itself.
//!
//! Invariant: commands import every other module; nothing imports them.

pub mod bisect;
pub mod completions;
pub mod history;
pub mod list;
pub mod man;
pub mod merge_check;
pub mod merge_state;
pub mod nextest;
pub mod stats;
pub mod test;
pub mod watch;
pub mod why;

use anyhow::{Context, Result};

/// The workspace's root and its state directory (`--state-dir` if given),
/// locked exclusively, waiting for a run that holds it: for the commands
/// that build other commits and file what they learn.
pub fn locked_state(
    opts: &crate::cli::StateOpts,
) -> Result<(
    std::path::PathBuf,
    ekstazi_core::storage::store::Store,
    ekstazi_core::storage::store::StoreLock,
)> {
    let (root, state) = workspace_state_dir(opts.cargo.manifest_path.as_deref())?;
    let state = match &opts.state_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => state,
    };
    let store = ekstazi_core::storage::store::Store::new(&state);
    let lock = store
        .lock(true, true)
        .with_context(|| format!("cannot lock the state directory {}", state.display()))?;
    Ok((root, store, lock))
}

/// Where `bisect` and `merge-check` begin: the workspace's root, its state
/// directory locked ([`locked_state`]), and the git repository it is in.
pub struct LockedRepo {
    pub root: std::path::PathBuf,
    pub store: ekstazi_core::storage::store::Store,
    pub repo: crate::git::repo::Repo,
    /// Held to the command's end.
    _lock: ekstazi_core::storage::store::StoreLock,
}

/// The workspace's [`LockedRepo`], for `command`, which needs the
/// repository.
pub fn locked_repo(opts: &crate::cli::StateOpts, command: &str) -> Result<LockedRepo> {
    let (root, store, lock) = locked_state(opts)?;
    let repo = crate::git::repo::Repo::at(&root)
        .with_context(|| format!("{command} needs the workspace to be in a git repository"))?;
    Ok(LockedRepo {
        root,
        store,
        repo,
        _lock: lock,
    })
}

/// The workspace root, and the state directory `cargo ekstazi test` would
/// use there (for the commands that need no build).
pub fn workspace_state_dir(
    manifest_path: Option<&std::path::Path>,
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = cargo_metadata::MetadataCommand::new();
    command.cargo_path(&cargo).no_deps();
    if let Some(path) = manifest_path {
        command.manifest_path(path);
    }
    let metadata = command
        .exec()
        .context("cannot find the workspace (give --state-dir to work outside one)")?;
    let root = metadata.workspace_root.into_std_path_buf();
    let state = state_dir_at(&root)?;
    Ok((root, state))
}

/// The state directory `cargo ekstazi test` would use in the workspace at
/// `root` when the command line names none: the configuration file's, the
/// environment's, or `.ekstazi`.
pub fn state_dir_at(root: &std::path::Path) -> Result<std::path::PathBuf> {
    let config = ekstazi_core::options::config::Config::load(root)?;
    let file = ekstazi_core::options::settings::Layer::from_config(&config, root)?;
    let env = ekstazi_core::options::settings::Layer::from_env(|name| std::env::var(name).ok())?;
    Ok(file
        .state_dir
        .or(env.state_dir)
        .map_or_else(|| Ok(root.join(".ekstazi")), std::path::absolute)?)
}
