//! `cargo xtask bench-granularity`: what function granularity costs, on one
//! project, from clean builds: the instrumented build against the plain
//! one, the instrumented tests' run time against the plain ones', and the
//! fingerprinting speed.

use crate::common::process::build_ekstazi;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Deserialize)]
struct Report {
    timings: BTreeMap<String, f64>,
}

/// Runs `cargo ekstazi test --forceall` from a clean build of the given
/// granularity and returns its stage timings.
fn clean_run(
    ekstazi: &Path,
    project: &Path,
    granularity: &str,
    cargo_args: &[String],
) -> Result<BTreeMap<String, f64>> {
    let state = crate::common::files::tempfile_dir()?.join(format!("state-{granularity}"));
    std::fs::create_dir_all(&state)?;
    let report = state.join("report.json");
    let status = Command::new(ekstazi)
        .args([
            "ekstazi",
            "test",
            "-q",
            "--forceall",
            // Doctests are built and run alike in both granularities.
            "--no-doc",
            "--granularity",
            granularity,
        ])
        .arg("--state-dir")
        .arg(&state)
        .arg("--report-json")
        .arg(&report)
        .args(cargo_args)
        .current_dir(project)
        .stdout(Stdio::null())
        .status()?;
    let report: Report =
        serde_json::from_slice(&std::fs::read(&report).with_context(|| {
            format!("cargo ekstazi test failed ({status}) and wrote no report")
        })?)?;
    std::fs::remove_dir_all(&state).ok();
    Ok(report.timings)
}

#[derive(clap::Args)]
pub struct Args {
    /// The cargo project to measure
    #[arg(long)]
    pub project: PathBuf,
    /// Cargo options for every command (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// Builds cargo-ekstazi from this workspace, then measures.
pub fn bench(args: Args) -> Result<()> {
    let ekstazi = build_ekstazi()?;
    bench_in(
        &ekstazi,
        &std::path::absolute(args.project)?,
        &args.cargo_args,
    )
}

fn bench_in(ekstazi: &Path, project: &Path, cargo_args: &[String]) -> Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .current_dir(project)
        .no_deps()
        .exec()?;
    let target = metadata.target_directory.into_std_path_buf();
    let instrumented = target.join("ekstazi").join("build");

    eprintln!("plain build from clean, all tests (binary granularity)");
    let status = Command::new("cargo")
        .arg("clean")
        .current_dir(project)
        .status()?;
    if !status.success() {
        bail!("cargo clean failed");
    }
    let plain = clean_run(ekstazi, project, "binary", cargo_args)?;
    // What a plain build leaves on disk: cargo's own layout, as `cargo
    // test` fills it (cargo-ekstazi's directory aside).
    let plain_bytes = disk_usage(&target, Some(&target.join("ekstazi")));
    eprintln!("instrumented build from clean, all tests (function granularity)");
    if instrumented.exists() {
        std::fs::remove_dir_all(&instrumented)?;
    }
    let function = clean_run(ekstazi, project, "function", cargo_args)?;
    let instrumented_bytes = disk_usage(&instrumented, None);

    // Fingerprinting speed, measured alone (one binary at a time, each on
    // all cores).
    let (mut megabytes, mut seconds) = (0.0, 0.0);
    for binary in walk_executables(&instrumented) {
        let Some(extents) = ekstazi_core::digests::program::extent_source(&binary) else {
            continue;
        };
        let start = std::time::Instant::now();
        if ekstazi_core::digests::fingerprint::fingerprint_file(
            &binary,
            extents,
            &Default::default(),
        )
        .is_ok()
        {
            seconds += start.elapsed().as_secs_f64();
            megabytes += std::fs::metadata(&binary)?.len() as f64 / 1e6;
        }
    }
    let get = |t: &BTreeMap<String, f64>, k: &str| t.get(k).copied().unwrap_or(0.0);
    println!("| | plain (binary granularity) | instrumented (function granularity) | ratio |");
    println!("|---|---:|---:|---:|");
    for stage in ["build", "run", "total"] {
        let (a, b) = (get(&plain, stage), get(&function, stage));
        println!("| {stage} | {a:.1}s | {b:.1}s | {:.2}× |", b / a);
    }
    println!(
        "| disk (target directory) | {:.2} GB | {:.2} GB | {:.2}× |",
        plain_bytes as f64 / 1e9,
        instrumented_bytes as f64 / 1e9,
        instrumented_bytes as f64 / plain_bytes.max(1) as f64
    );
    println!(
        "\nfingerprinting: {seconds:.2}s for {megabytes:.0} MB of instrumented executables ({:.0} MB/s); \
         in the run above, {:.2}s for the test binaries",
        megabytes / seconds,
        get(&function, "function fingerprints")
    );
    Ok(())
}

/// The bytes the files under `dir` take on disk (blocks, as `du` counts:
/// hard links once), leaving out `skip`.
fn disk_usage(dir: &Path, skip: Option<&Path>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| Some(e.path()) != skip)
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file() && seen.insert((m.dev(), m.ino())))
        .map(|m| m.blocks() * 512)
        .sum()
}

/// The test executables of an instrumented build (in `<triple>/debug/deps`).
pub(crate) fn walk_executables(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(triples) = std::fs::read_dir(dir) else {
        return found;
    };
    for triple in triples.flatten() {
        for profile in ["debug", "release"] {
            let deps = triple.path().join(profile).join("deps");
            let Ok(entries) = std::fs::read_dir(&deps) else {
                continue;
            };
            for entry in entries.flatten() {
                // An instrumented executable has its linker map beside it,
                // or the extents kept of the map.
                let path = entry.path();
                let beside = |suffix: &str| PathBuf::from(format!("{}{suffix}", path.display()));
                let kept = ekstazi_core::digests::fingerprint::kept::SUFFIX;
                if beside(".map").exists() || beside(kept).exists() {
                    found.push(path);
                }
            }
        }
    }
    found
}
