//! `cargo xtask bench-shim`: the shim's own cost per call: a program opens
//! and stats 100 000 distinct files, then the same files again, with and
//! without the shim preloaded. With `--project`, also the shim's cost on a
//! real project's tests: every test in its own process (as cargo-ekstazi
//! runs them), with and without the shim, nothing else different, and with
//! the shim but `EKSTAZI_NO_SUD=1` (what syscall user dispatch costs); with
//! `--instrumented` as well, the same tests from cargo-ekstazi's
//! instrumented build, untraced (the runtime they link loaded, inert: what
//! the instrumentation alone costs) and under the shim (each started by
//! `exec`, where
//! cargo-ekstazi's fork server starts a test binary once per worker: for
//! the test binaries' own start-up an upper bound).

use crate::common::files::{tempfile_dir, workspace_root};
use crate::common::process::build_ekstazi;
use crate::common::stats::median;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Distinct files to open and stat
    #[arg(long, default_value_t = 100_000)]
    pub files: usize,
    /// Timed runs of each variant
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Also run every test of this cargo project, one process each,
    /// with and without the shim
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Tests run at once for --project
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// With --project, also run the tests of cargo-ekstazi's
    /// instrumented build, under the shim: everything a test process
    /// pays under cargo-ekstazi, against the plain run
    #[arg(long, requires = "project")]
    pub instrumented: bool,
    /// Cargo options for building the project's tests (e.g. --workspace)
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// `cargo xtask bench-shim`: the cost per call, then, given a project, on
/// its tests.
pub fn bench(args: &Args) -> Result<()> {
    let shim = build_shim()?;
    bench_shim(&shim, args.files, args.runs)?;
    let ekstazi = if args.instrumented {
        Some(build_ekstazi()?)
    } else {
        None
    };
    match &args.project {
        Some(project) => bench_shim_project(
            &shim,
            ekstazi.as_deref(),
            project,
            args.runs,
            args.jobs,
            &args.cargo_args,
        ),
        None => Ok(()),
    }
}

fn build_shim() -> Result<PathBuf> {
    let root = workspace_root();
    // Built as cargo-ekstazi's build script builds the shim it embeds.
    let target = root.join("target/bench-shim");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "-p", "ekstazi-runtime"])
        .arg("--config")
        .arg(root.join("ekstazi-runtime/shim-profile.toml"))
        .arg("--target-dir")
        .arg(&target)
        .current_dir(&root)
        .status()?;
    if !status.success() {
        bail!("building ekstazi-runtime failed");
    }
    Ok(target.join("release/libekstazi_runtime.so"))
}

fn bench_shim(shim: &Path, files: usize, runs: usize) -> Result<()> {
    let scratch = tempfile_dir()?;
    let dir = scratch.join("files");
    std::fs::create_dir_all(&dir)?;
    eprintln!("creating {files} files in {}", dir.display());
    for i in 0..files {
        std::fs::write(dir.join(format!("f{i}")), b"x")?;
    }
    let worker = std::env::current_exe()?;
    let trace = scratch.join("trace");
    // Each variant: (first pass, repeat pass, listing) in nanoseconds per file.
    let mut plain: Vec<[f64; 3]> = Vec::new();
    let mut shimmed: Vec<[f64; 3]> = Vec::new();
    for round in 0..runs {
        eprintln!("round {}/{runs}", round + 1);
        // Which goes first alternates: a run leaves work behind for the
        // next (the files it made are still being written back and
        // removed), and a fixed order would put all of it on one side.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_shim in order {
            let mut command = Command::new(&worker);
            command
                .args(["shim-worker", "--files", &files.to_string(), "--dir"])
                .arg(&dir)
                .env_remove("LD_PRELOAD")
                .env_remove("EKSTAZI_TRACE_FILE");
            if with_shim {
                let _ = std::fs::remove_file(&trace);
                command
                    .env("LD_PRELOAD", shim)
                    .env("EKSTAZI_TRACE_FILE", &trace);
            }
            let output = command.output()?;
            if !output.status.success() {
                bail!(
                    "the worker failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let text = String::from_utf8_lossy(&output.stdout);
            let numbers: Vec<f64> = text
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            let Ok(passes) = <[f64; 3]>::try_from(numbers) else {
                bail!("unexpected worker output: {text}");
            };
            if with_shim {
                shimmed.push(passes);
            } else {
                plain.push(passes);
            }
        }
    }
    let trace_size = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&scratch);
    let med = |v: &[[f64; 3]], pass: usize| median(&v.iter().map(|p| p[pass]).collect::<Vec<_>>());
    println!(
        "{files} files: open + fstat + close and stat each, then the directory listed whole {LISTINGS} times; median of {runs} runs (ns per file):"
    );
    println!();
    println!("| pass | without shim | with shim | added |");
    println!("|---|---:|---:|---:|");
    for (pass, name) in [
        "first (every event new)",
        "repeat (events folded)",
        "listing (each stream witnessed)",
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (med(&plain, pass), med(&shimmed, pass));
        println!(
            "| {name} | {a:.0} | {b:.0} | {:+.0} ns ({:+.0}%) |",
            b - a,
            (b / a - 1.0) * 100.0
        );
    }
    println!();
    println!("trace of the last run: {trace_size} bytes");
    Ok(())
}

/// One test of a project: its binary, its name, its package directory.
#[derive(Clone)]
struct ProjectTest {
    binary: PathBuf,
    name: String,
    dir: PathBuf,
}

/// Every test of the project's test binaries (as `cargo test --no-run`
/// builds them), each run in its own process like cargo-ekstazi does, all
/// of them with the shim and all without (and, given cargo-ekstazi as
/// `instrumented`, from its instrumented build with the shim), in
/// interleaved rounds.
fn bench_shim_project(
    shim: &Path,
    instrumented: Option<&Path>,
    project: &Path,
    runs: usize,
    jobs: usize,
    cargo_args: &[String],
) -> Result<()> {
    let project = std::path::absolute(project)?;
    let output = Command::new("cargo")
        .args(["test", "--no-run", "--message-format=json"])
        .args(cargo_args)
        .current_dir(&project)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        bail!("building the project's tests failed");
    }
    let mut tests = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test =
            message["reason"] == "compiler-artifact" && message["profile"]["test"] == true;
        let (Some(binary), Some(manifest)) = (
            message["executable"].as_str(),
            message["manifest_path"].as_str(),
        ) else {
            continue;
        };
        if !is_test {
            continue;
        }
        let dir = Path::new(manifest)
            .parent()
            .unwrap_or(&project)
            .to_path_buf();
        for name in list_tests(Path::new(binary), &dir)? {
            tests.push(ProjectTest {
                binary: std::fs::canonicalize(binary)?,
                name,
                dir: dir.clone(),
            });
        }
    }
    eprintln!("{} tests in {}", tests.len(), project.display());

    // The sides compared: the first is the plain run every ratio is taken
    // against.
    let mut sides = vec![
        Side {
            name: "without shim",
            tests: tests.clone(),
            shim: None,
            no_sud: false,
        },
        Side {
            name: "with shim",
            tests: tests.clone(),
            shim: Some(shim.to_path_buf()),
            no_sud: false,
        },
        Side {
            name: "with shim, EKSTAZI_NO_SUD=1",
            tests: tests.clone(),
            shim: Some(shim.to_path_buf()),
            no_sud: true,
        },
    ];
    if let Some(ekstazi) = instrumented {
        let (twins, runtime) = instrumented_twins(ekstazi, &project, cargo_args, &tests)?;
        // The instrumented executables link the runtime cargo-ekstazi
        // installed; preloading another copy would load it twice. Both
        // shimmed sides preload that one.
        sides[1].shim = Some(runtime.clone());
        sides[2].shim = Some(runtime.clone());
        // The instrumentation alone: the same executables, the runtime they
        // link loaded but told to trace nothing (no trace file), so that
        // what the coverage flags and the larger executables cost is told
        // apart from what tracing costs.
        sides.push(Side {
            name: "instrumented, not traced",
            tests: twins.clone(),
            shim: None,
            no_sud: false,
        });
        sides.push(Side {
            name: "instrumented, with shim",
            tests: twins,
            shim: Some(runtime),
            no_sud: false,
        });
    }
    let traces = tempfile_dir()?.join("traces");
    std::fs::create_dir_all(&traces)?;
    // Wall time, and the CPU time of the test processes (user + system),
    // which the load of a shared machine disturbs much less; per side, one
    // entry per round.
    let mut measured: Vec<Vec<(Duration, Duration)>> = vec![Vec::new(); sides.len()];
    for round in 0..runs {
        eprintln!("round {}/{runs}", round + 1);
        // Which goes first turns by round: a run leaves work behind for the
        // next (the files ripgrep's tests write are still being written
        // back), and a fixed order put all of it on the same side.
        let mut order: Vec<usize> = (0..sides.len()).collect();
        order.rotate_left(round % sides.len());
        for i in order {
            let side = &sides[i];
            let cpu_before = children_cpu()?;
            let took = run_each(
                &side.tests,
                jobs,
                side.shim.as_deref().map(|shim| (shim, traces.as_path())),
                side.no_sud,
            )?;
            let cpu = children_cpu()? - cpu_before;
            eprintln!(
                "  {}: {:.3}s wall, {:.3}s cpu",
                side.name,
                took.as_secs_f64(),
                cpu.as_secs_f64()
            );
            measured[i].push((took, cpu));
        }
    }
    let _ = std::fs::remove_dir_all(traces.parent().unwrap_or(&traces));
    println!();
    println!(
        "{} tests of {}, one process each, {jobs} at a time, median of {runs} runs:",
        tests.len(),
        project.display()
    );
    println!();
    println!("| all tests | wall time | added | CPU time of the test processes | added |");
    println!("|---|---:|---:|---:|---:|");
    let wall = |m: &[(Duration, Duration)]| {
        median(&m.iter().map(|p| p.0.as_secs_f64()).collect::<Vec<_>>())
    };
    let cpu = |m: &[(Duration, Duration)]| {
        median(&m.iter().map(|p| p.1.as_secs_f64()).collect::<Vec<_>>())
    };
    let (plain_wall, plain_cpu) = (wall(&measured[0]), cpu(&measured[0]));
    let percent = |r: f64| (r - 1.0) * 100.0;
    for (side, m) in sides.iter().zip(&measured) {
        let (w, c) = (wall(m), cpu(m));
        println!(
            "| {} | {:.3}s | {:+.1}% | {:.3}s | {:+.1}% |",
            side.name,
            w,
            percent(w / plain_wall),
            c,
            percent(c / plain_cpu),
        );
    }
    // The runs of one round ran back to back, so their ratio is the one
    // the machine's drift between rounds disturbs least.
    println!();
    for (side, m) in sides.iter().zip(&measured).skip(1) {
        let mut ratios: Vec<f64> = measured[0]
            .iter()
            .zip(m)
            .map(|(a, b)| b.0.as_secs_f64() / a.0.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        if let (Some(first), Some(last)) = (ratios.first(), ratios.last()) {
            println!(
                "{}: wall time added, round by round: median {:+.1}% (from {:+.1}% to {:+.1}%)",
                side.name,
                percent(median(&ratios)),
                percent(*first),
                percent(*last),
            );
        }
    }
    Ok(())
}

/// One way of running every test.
struct Side {
    name: &'static str,
    tests: Vec<ProjectTest>,
    shim: Option<PathBuf>,
    no_sud: bool,
}

/// The same tests in the executables of cargo-ekstazi's instrumented build
/// (which `cargo ekstazi list` makes), and the runtime they link. An
/// executable's twin has its name (without cargo's hash) and lists the
/// same tests; the newest such one is taken.
fn instrumented_twins(
    ekstazi: &Path,
    project: &Path,
    cargo_args: &[String],
    tests: &[ProjectTest],
) -> Result<(Vec<ProjectTest>, PathBuf)> {
    let status = Command::new(ekstazi)
        .args(["ekstazi", "list", "-q"])
        .args(cargo_args)
        .current_dir(project)
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("cargo ekstazi list (the instrumented build) failed");
    }
    let target = cargo_metadata::MetadataCommand::new()
        .current_dir(project)
        .no_deps()
        .exec()?
        .target_directory
        .into_std_path_buf()
        .join("ekstazi");
    let newest = |mut paths: Vec<PathBuf>| {
        paths.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        paths.reverse();
        paths
    };
    let runtime = newest(
        std::fs::read_dir(&target)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libekstazi_runtime-") && n.ends_with(".so"))
            })
            .collect(),
    )
    .into_iter()
    .next()
    .context("no runtime in the instrumented build's directory")?;
    let executables = newest(super::granularity::walk_executables(&target.join("build")));
    let stem = |p: &Path| {
        let name = p.file_name()?.to_str()?;
        Some(
            name.rsplit_once('-')
                .map_or(name, |(stem, _)| stem)
                .to_owned(),
        )
    };
    let mut twins: Vec<ProjectTest> = Vec::with_capacity(tests.len());
    let mut twin_of: std::collections::HashMap<PathBuf, PathBuf> = Default::default();
    for test in tests {
        if !twin_of.contains_key(&test.binary) {
            // The binary's tests as listed above, in their order.
            let names: Vec<&str> = tests
                .iter()
                .filter(|t| t.binary == test.binary)
                .map(|t| t.name.as_str())
                .collect();
            let twin = executables
                .iter()
                .filter(|e| stem(e) == stem(&test.binary))
                .find(|e| list_tests(e, &test.dir).is_ok_and(|n| n == names))
                .with_context(|| format!("no instrumented twin of {}", test.binary.display()))?;
            twin_of.insert(test.binary.clone(), twin.clone());
        }
        twins.push(ProjectTest {
            binary: twin_of[&test.binary].clone(),
            name: test.name.clone(),
            dir: test.dir.clone(),
        });
    }
    Ok((twins, runtime))
}

/// The tests a libtest binary lists, run in `dir`.
fn list_tests(binary: &Path, dir: &Path) -> Result<Vec<String>> {
    let out = Command::new(binary)
        .args(["--list", "--format", "terse"])
        .current_dir(dir)
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// User + system time of this process's waited-for children so far
/// (`cutime` and `cstime` in `/proc/self/stat`, in clock ticks of 10 ms).
fn children_cpu() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); cutime and cstime are fields 16 and 17.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .context("short /proc/self/stat")?
            .parse::<u64>()
            .context("bad /proc/self/stat")
    };
    Ok(Duration::from_millis((ticks(16)? + ticks(17)?) * 10))
}

/// Runs every test in its own process, `jobs` at a time; with the shim, each
/// test writes its own trace file.
fn run_each(
    tests: &[ProjectTest],
    jobs: usize,
    shim: Option<(&Path, &Path)>,
    no_sud: bool,
) -> Result<Duration> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(test) = tests.get(i) else {
                            return Ok(());
                        };
                        let mut command = Command::new(&test.binary);
                        command
                            .args(["--exact", &test.name, "--nocapture"])
                            .current_dir(&test.dir)
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .env_remove("LD_PRELOAD")
                            .env_remove("EKSTAZI_NO_SUD");
                        if no_sud {
                            command.env("EKSTAZI_NO_SUD", "1");
                        }
                        if let Some((shim, traces)) = shim {
                            command
                                .env("LD_PRELOAD", shim)
                                .env("EKSTAZI_TRACE_FILE", traces.join(format!("{i}.trace")))
                                .env("EKSTAZI_LIBTEST", &test.binary);
                        }
                        command.status()?;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("a benchmark worker panicked")?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(start.elapsed())
}

/// How many times the worker lists its directory.
const LISTINGS: usize = 20;

/// Opens (and reads the metadata of) then stats every file, twice, then
/// lists the directory [`LISTINGS`] times; prints the nanoseconds per file
/// of each of the three passes.
pub fn shim_worker(dir: &Path, files: usize) -> Result<()> {
    let paths: Vec<PathBuf> = (0..files).map(|i| dir.join(format!("f{i}"))).collect();
    let mut passes = Vec::new();
    for _ in 0..2 {
        let start = Instant::now();
        for path in &paths {
            let file = std::fs::File::open(path)?;
            std::hint::black_box(file.metadata()?);
            drop(file);
            std::hint::black_box(std::fs::metadata(path)?);
        }
        passes.push(start.elapsed().as_nanos() as f64 / files as f64);
    }
    // Each stream is witnessed: the shim reads the directory once more.
    let start = Instant::now();
    for _ in 0..LISTINGS {
        std::hint::black_box(std::fs::read_dir(dir)?.count());
    }
    passes.push(start.elapsed().as_nanos() as f64 / (files * LISTINGS) as f64);
    println!("{} {} {}", passes[0], passes[1], passes[2]);
    Ok(())
}
