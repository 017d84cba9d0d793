//! `cargo xtask bench-edit --parts`: what each part of the instrumented
//! build adds to a rebuild after a one-function edit (the goal: the
//! instrumented build at most 1.05× a plain one).
//!
//! Each round makes the edit of `bench-edit` (a new value each round), then
//! rebuilds the tests (`cargo test --no-run`) in one target directory per
//! variant, the variants in a turning order. Each variant adds one part of
//! what cargo-ekstazi's rustc wrapper adds, as `RUSTFLAGS` of a plain cargo
//! (with `--target`, so that, as in the wrapper, build scripts and
//! proc-macros get none of it):
//! - `--target` and line tables only;
//! - the coverage pass (and the runtime shim it links against);
//! - `--emit-relocs`;
//! - instead of the map, the compiler's local labels kept (`-C
//!   llvm-args=-save-temp-labels`, with the link's section merging and
//!   discarding of local symbols off): the cost of the replacement for the
//!   map tried on the `experiment/labels` branch, which is not the
//!   instrumented build (data compiled without labels has no extents
//!   without the map);
//! - the linker's map, one per executable, which takes a wrapper: this
//!   last variant is cargo-ekstazi's own rustc wrapper, the instrumented
//!   build itself (all of the above, and the coverage table unrelocated).
//!
//! `RUSTFLAGS` replaces the project's own `rustflags`, if it has any. Line
//! tables are set as the `dev` and `test` profiles' `debug`: where a
//! profile asks for no debug information at all, these variants raise it
//! to line tables, which the wrapper does not.

use super::edit::{Args, edit};
use crate::common::process::{ekstazi_command, run};
use crate::common::stats::{median, seconds};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One way to build: its name, whether it passes `--target`, its flags,
/// and its environment.
struct Variant {
    name: &'static str,
    /// Its target directory's name, under `target/ekstazi-parts`.
    dir: &'static str,
    target: bool,
    flags: Vec<String>,
    env: Vec<(&'static str, String)>,
}

pub fn measure(args: &Args, ekstazi: &Path, project: &Path) -> Result<()> {
    let file = project.join(&args.point.file);
    let original = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    eprintln!("measuring in {}", project.display());
    let result = rounds(args, ekstazi, project, &file, &original);
    // The project is the user's: it gets its file back whatever happened.
    std::fs::write(&file, &original)?;
    let (variants, times) = result?;

    let plain = &times[0];
    println!(
        "| rebuild after a one-function edit | median | against plain (median of the rounds' ratios) |"
    );
    println!("|---|---:|---:|");
    for (variant, times) in variants.iter().zip(&times) {
        let ratios: Vec<f64> = times
            .iter()
            .zip(plain)
            .map(|(t, p)| t.as_secs_f64() / p.as_secs_f64())
            .collect();
        println!(
            "| {} | {:.3}s | {:.2}× |",
            variant.name,
            median(&seconds(times)),
            median(&ratios)
        );
    }
    Ok(())
}

fn rounds(
    args: &Args,
    ekstazi: &Path,
    project: &Path,
    file: &Path,
    original: &str,
) -> Result<(Vec<Variant>, Vec<Vec<Duration>>)> {
    // cargo-ekstazi installs the shim the coverage pass links against.
    std::fs::write(file, edit(original, args.point.line, 0)?)?;
    run(
        project,
        &ekstazi_command(ekstazi, &["test", "-q"], &args.cargo_args),
    )?;
    let target_dir = project.join("target");
    let shim = newest(&target_dir.join("ekstazi"), "libekstazi_runtime-", ".so")?;
    let callbacks = newest(&target_dir.join("ekstazi"), "ekstazi-sancov-", ".o")?;
    let variants = variants(ekstazi, &shim, &callbacks);
    let host = host()?;
    let build = |variant: &Variant| -> Result<Duration> {
        let mut command = Command::new("cargo");
        command
            .args(["test", "--no-run", "-q", "--target-dir"])
            .arg(target_dir.join("ekstazi-parts").join(variant.dir))
            .args(&args.cargo_args)
            .current_dir(project)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if variant.target {
            command.args(["--target", &host]);
            // Unit separators: paths with spaces stay whole.
            command.env("CARGO_ENCODED_RUSTFLAGS", variant.flags.join("\x1f"));
            command.env_remove("RUSTFLAGS");
        }
        command.envs(variant.env.iter().map(|(k, v)| (k, v)));
        let start = Instant::now();
        let output = command.output()?;
        let elapsed = start.elapsed();
        if !output.status.success() {
            bail!(
                "{} does not build with the edit at {}:{}: {}",
                variant.name,
                args.point.file.display(),
                args.point.line,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(elapsed)
    };
    for variant in &variants {
        build(variant)?;
    }
    let mut times = vec![Vec::new(); variants.len()];
    for round in 1..=args.runs {
        eprintln!("round {round}/{}", args.runs);
        std::fs::write(file, edit(original, args.point.line, round)?)?;
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            times[i].push(build(&variants[i])?);
        }
    }
    Ok((variants, times))
}

fn variants(ekstazi: &Path, shim: &Path, callbacks: &Path) -> Vec<Variant> {
    let owned = |flags: &[&str]| flags.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let link = |arg: String| vec!["-C".to_owned(), format!("link-arg={arg}")];
    let shim_dir = shim.parent().unwrap_or(Path::new("."));
    let shim_file = shim
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();

    let mut coverage = Vec::new();
    coverage.extend(owned(&ekstazi_core::digests::coverage_table::RUSTC_FLAGS));
    coverage.extend(link(format!("-L{}", shim_dir.display())));
    coverage.extend(link(format!("-l:{shim_file}")));
    coverage.extend(link(format!("-Wl,-rpath,{}", shim_dir.display())));
    // The coverage callbacks, linked into every instrumented executable as
    // the wrapper links them.
    coverage.extend(link(callbacks.display().to_string()));
    let mut relocs = coverage.clone();
    relocs.extend(link("-Wl,--emit-relocs".to_owned()));
    let mut labels = relocs.clone();
    labels.extend(owned(&["-C", "llvm-args=-save-temp-labels"]));
    labels.extend(link("-Wl,-O0".to_owned()));
    labels.extend(link("-Wl,--discard-none".to_owned()));
    // Line tables through the profile, not `-C debuginfo`: a profile's
    // per-package settings (fd's dependencies have no debug information)
    // stay as they are, as with the wrapper, which only cuts what asks for
    // more than line tables.
    let line_tables = || {
        vec![
            ("CARGO_PROFILE_DEV_DEBUG", "line-tables-only".to_owned()),
            ("CARGO_PROFILE_TEST_DEBUG", "line-tables-only".to_owned()),
        ]
    };
    let variant = |name, dir, flags| Variant {
        name,
        dir,
        target: true,
        flags,
        env: line_tables(),
    };
    vec![
        Variant {
            name: "plain (`cargo test --no-run`)",
            dir: "plain",
            target: false,
            flags: Vec::new(),
            env: Vec::new(),
        },
        variant("`--target`, line tables only", "lines", Vec::new()),
        variant("+ the coverage pass, the shim linked", "coverage", coverage),
        variant("+ `--emit-relocs`", "relocs", relocs),
        variant(
            "+ the compiler's labels kept (tried instead of the map; not the instrumented build)",
            "labels",
            labels,
        ),
        // The map's path is per executable, which only a wrapper can give:
        // the last step is cargo-ekstazi's own wrapper, set up as
        // `cargo-ekstazi/src/instrument.rs` (`build_env`) sets it up.
        Variant {
            name: "+ the linker's map: the instrumented build (cargo-ekstazi's rustc wrapper)",
            dir: "wrapper",
            target: true,
            flags: Vec::new(),
            env: vec![
                ("RUSTC_WRAPPER", ekstazi.display().to_string()),
                ("EKSTAZI_RUSTC_WRAPPER", "1".to_owned()),
                ("EKSTAZI_SANCOV_CALLBACKS", callbacks.display().to_string()),
                ("EKSTAZI_LINE_TABLES_ONLY", "1".to_owned()),
            ],
        },
    ]
}

/// The file cargo-ekstazi installed most recently under `dir` whose name
/// has `prefix` and `suffix` (the shim, the coverage callbacks' object).
fn newest(dir: &Path, prefix: &str, suffix: &str) -> Result<PathBuf> {
    let missing = || format!("no {prefix}*{suffix} of cargo-ekstazi in {}", dir.display());
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .with_context(missing)?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found.pop().map(|(_, path)| path).with_context(missing)
}

fn host() -> Result<String> {
    let output = Command::new("rustc").arg("-vV").output()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .context("`rustc -vV` names no host")
}
