//! `cargo xtask bench-selection`: the two per-binary stages of the
//! selection cost, timed alone on a project's instrumented build — the
//! smart checksum of every test binary (each run pays it) and the function
//! fingerprints (paid once per rebuilt binary) — computed as a run computes
//! them: through `Checksums::test_binary` and `Snapshots::of_binary` (with an
//! empty store, so nothing is cached), the binaries in parallel.

use crate::common::stats::median;
use anyhow::{Result, bail};
use ekstazi_core::digests::checksum::Checksums;
use ekstazi_core::model::dep::Sum;
use ekstazi_core::model::path::Anchors;
use ekstazi_core::storage::snapshots::Snapshots;
use ekstazi_core::storage::store::Store;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// The cargo project to measure
    #[arg(long)]
    pub project: PathBuf,
    /// Timed runs
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

pub fn bench(args: Args) -> Result<()> {
    bench_in(&std::path::absolute(args.project)?, args.runs)
}

fn bench_in(project: &Path, runs: usize) -> Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .current_dir(project)
        .no_deps()
        .exec()?;
    let root = metadata.workspace_root.into_std_path_buf();
    let target = metadata.target_directory.into_std_path_buf();
    let binaries = super::granularity::walk_executables(&target.join("ekstazi").join("build"));
    if binaries.is_empty() {
        bail!(
            "no instrumented test binaries under {}: run `cargo ekstazi test` in the project first",
            target.display()
        );
    }
    let megabytes: f64 = binaries
        .iter()
        .filter_map(|b| std::fs::metadata(b).ok())
        .map(|m| m.len() as f64 / 1e6)
        .sum();
    let (mut checksums, mut fingerprints) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let sums = Checksums::new(Anchors::new(&root, &target, None));
        let start = Instant::now();
        let ids: Vec<Sum> = binaries.par_iter().map(|b| sums.test_binary(b)).collect();
        checksums.push(start.elapsed().as_secs_f64());

        let store_dir = crate::common::files::tempfile_dir()?.join("bench-selection-store");
        std::fs::create_dir_all(&store_dir)?;
        let snapshots = Snapshots::new(Store::new(&store_dir));
        let start = Instant::now();
        let fingerprinted = binaries
            .par_iter()
            .zip(&ids)
            .filter(|(binary, id)| match id {
                Sum::Hash(id) => snapshots.of_binary(binary, id).is_ok(),
                _ => false,
            })
            .count();
        fingerprints.push(start.elapsed().as_secs_f64());
        std::fs::remove_dir_all(&store_dir)?;
        if fingerprinted != binaries.len() {
            bail!(
                "{} of {} binaries could not be fingerprinted",
                binaries.len() - fingerprinted,
                binaries.len()
            );
        }
    }
    println!(
        "{} instrumented test binaries, {megabytes:.0} MB, {runs} runs",
        binaries.len()
    );
    println!("| stage | median | min |");
    println!("|---|---:|---:|");
    for (stage, times) in [
        ("smart checksums", &mut checksums),
        ("function fingerprints", &mut fingerprints),
    ] {
        times.sort_by(f64::total_cmp);
        println!("| {stage} | {:.2}s | {:.2}s |", median(times), times[0]);
    }
    Ok(())
}
