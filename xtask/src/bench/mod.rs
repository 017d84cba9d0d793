//! The timing benchmarks, the `cargo xtask bench…` commands: each times
//! cargo-ekstazi, or a part of it, against what it adds to or replaces, on
//! one project, in the same session and interleaved so that machine noise
//! hits every side alike.
//!
//! - `bench`: `cargo ekstazi test` against `cargo test` and `cargo nextest
//!   run` (`end_to_end`).
//! - `bench-edit`: end to end after a one-function edit (`edit`, whose
//!   `Args` and `edit` it shares); with `--parts`, what each part of the
//!   instrumented build adds to the rebuild (`build_parts`); with
//!   `--stages`, where the time goes on each side (`edit_stages`, which
//!   `edit` uses).
//! - `bench-watch`: from a save to the last verdict with `cargo ekstazi
//!   watch` running, against bacon and `cargo test` (`watch`, which uses
//!   `edit`'s edit).
//! - `bench-shim`: the shim's cost per call and on a project's tests
//!   (`shim`).
//! - `bench-granularity`: what function granularity costs (`granularity`).
//! - `bench-selection`: the per-binary stages of the selection cost
//!   (`selection`).
//! - `bench-history`: what a history of filed records costs the analysis
//!   (`history`).
//!
//! Main types: each command's `Args`, its command-line options
//! (`edit::Args` is `bench-edit`'s, for `edit` and `build_parts` alike),
//! and the `Duration`s of the rounds, which `common::stats` turns into
//! medians.
//!
//! Invariant: benchmarks use `common` (timed runs, the one `median`) and
//! ekstazi-core, never `eval`; within, `build_parts` and `watch` use
//! `edit` and not the other way round (`edit` uses `edit_stages`) (the choice between `edit` and
//! `build_parts` is `bench_edit`'s).

pub mod build_parts;
pub mod edit;
pub mod edit_stages;
pub mod end_to_end;
pub mod granularity;
pub mod history;
pub mod selection;
pub mod shim;
pub mod watch;

use crate::common::files::{copy_tree, tempfile_dir, workspace_root};
use anyhow::Result;
use std::path::Path;

/// `cargo xtask bench-edit`: end to end after the edits (`edit`), or with
/// `--parts` the rebuild's parts (`build_parts`).
pub fn bench_edit(args: edit::Args) -> Result<()> {
    let (ekstazi, args) = args.resolve()?;
    in_project(args.point.project.as_deref(), |project| {
        if args.parts {
            build_parts::measure(&args, &ekstazi, project)
        } else {
            edit::measure(&args, &ekstazi, project)
        }
    })
}

/// Runs `measure` in the given project, or in a scratch copy of
/// examples/demo, which goes afterwards whatever happened: it holds builds.
pub fn in_project(project: Option<&Path>, measure: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let Some(project) = project else {
        let scratch = tempfile_dir()?;
        let result = copy_tree(&workspace_root().join("examples/demo"), &scratch)
            .and_then(|()| measure(&scratch));
        let _ = std::fs::remove_dir_all(&scratch);
        return result;
    };
    measure(&std::path::absolute(project)?)
}
