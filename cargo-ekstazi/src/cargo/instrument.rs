//! The instrumented build behind function granularity.
//!
//! Test binaries are built into their own target directory
//! (`<target>/ekstazi/build`), with an explicit `--target <host>` so that
//! build scripts and proc-macros — which run on the build machine — are not
//! instrumented. cargo-ekstazi is its own `RUSTC_WRAPPER` there: for every
//! crate compiled for the target it adds
//! - SanitizerCoverage at function entries, with inline flags and a PC table
//!   (stable rustc: `-C passes=sancov-module` and LLVM options);
//! - for what gets linked: `--emit-relocs` (relocations in data survive, so
//!   pointers in data can be resolved), a linker map next to the output (the
//!   exact extent of every anonymous constant), and the coverage callbacks
//!   (a small object, `ekstazi-runtime/stub/sancov.rs`, which hands the
//!   flags to the shim when it is preloaded: the binary itself does not
//!   need the shim, and runs as a plain build where it is absent); and once an
//!   executable is linked, its coverage PC table's load-time relocations
//!   taken out (`ekstazi_core::digests::coverage_table`);
//! - unless `[build] debuginfo = "profile"`, debug information cut to line
//!   tables where the profile asks for more: file and line in panics and
//!   backtraces are what a test run shows, and full debug information is
//!   most of what the compiler and linker write (and, with `--emit-relocs`,
//!   its relocations too).
//!
//! A wrapper, rather than `RUSTFLAGS`, keeps the user's own flags from
//! `.cargo/config.toml`: setting `RUSTFLAGS` would replace them.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use ekstazi_core::options::config::DebugInfo;

/// Set in the environment of the instrumented build: this process is the
/// rustc wrapper.
pub const WRAPPER_ENV: &str = "EKSTAZI_RUSTC_WRAPPER";
/// The object with the coverage callbacks, linked into every binary.
const CALLBACKS_ENV: &str = "EKSTAZI_SANCOV_CALLBACKS";
/// The user's own `RUSTC_WRAPPER` (sccache, ...), run inside ours.
const INNER_ENV: &str = "EKSTAZI_INNER_WRAPPER";
/// Set when debug information is cut to line tables.
const LINE_TABLES_ENV: &str = "EKSTAZI_LINE_TABLES_ONLY";
/// The workspace root, remapped in debug information.
const WORKSPACE_ENV: &str = "EKSTAZI_WORKSPACE_ROOT";

/// The coverage callbacks' object linked into every instrumented binary
/// (written beside the shim by `run::shim::install`). Here, not in `run`:
/// the build needs its path, and `run` is built on `cargo`.
pub static CALLBACKS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ekstazi_sancov.o"));

/// Where the coverage callbacks' object lives, beside the shim at `shim`.
pub fn callbacks_path(shim: &Path) -> PathBuf {
    let digest = &blake3::hash(CALLBACKS).to_hex()[..16];
    shim.with_file_name(format!("ekstazi-sancov-{digest}.o"))
}

/// What the instrumented build is made with.
#[derive(Clone, Copy, Debug)]
pub struct Instrumentation<'a> {
    /// The runtime shim, beside which the coverage callbacks' object lies
    /// ([`callbacks_path`]).
    pub shim: &'a Path,
    pub debuginfo: DebugInfo,
    /// The workspace root: rustc writes it into the debug information as
    /// the compilation directory, which is remapped (see [`extra_args`]).
    pub workspace: &'a Path,
}

/// Bumped when the instrumentation changes: cargo does not see a wrapper's
/// flags, so a build made with other flags must be thrown away.
const INSTRUMENTATION: &str =
    "sancov-bool-flag-pc-table v0-mangling linked-callbacks remapped-workspace 4";

/// Where the instrumented build goes, inside the user's target directory
/// (and where a nextest archive of it is unpacked).
pub fn build_dir(target_dir: &Path) -> std::io::Result<PathBuf> {
    std::path::absolute(target_dir.join("ekstazi").join("build"))
}

/// Where the instrumented build goes, inside the user's target directory;
/// emptied first if it was made with other instrumentation, another shim or
/// other debug information (cargo cannot see what the wrapper adds).
pub fn prepare_target_dir(
    target_dir: &Path,
    instrumentation: Instrumentation,
) -> anyhow::Result<PathBuf> {
    let dir = build_dir(target_dir)?;
    let marker = dir.join(".instrumentation");
    let expected = format!(
        "{INSTRUMENTATION}\n{}\n{}\ndebuginfo {}\n",
        instrumentation.shim.display(),
        callbacks_path(instrumentation.shim).display(),
        instrumentation.debuginfo.as_str()
    );
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(expected.as_str()) {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        std::fs::write(&marker, expected)?;
    }
    Ok(dir)
}

/// The environment that makes `cargo` build instrumented test binaries.
pub fn build_env(instrumentation: Instrumentation) -> Vec<(OsString, OsString)> {
    let me = std::env::current_exe().unwrap_or_else(|_| "cargo-ekstazi".into());
    let mut env = vec![
        ("RUSTC_WRAPPER".into(), me.into_os_string()),
        (WRAPPER_ENV.into(), "1".into()),
        (
            CALLBACKS_ENV.into(),
            callbacks_path(instrumentation.shim).into_os_string(),
        ),
        (
            WORKSPACE_ENV.into(),
            instrumentation.workspace.as_os_str().to_owned(),
        ),
    ];
    if instrumentation.debuginfo == DebugInfo::LineTablesOnly {
        env.push((LINE_TABLES_ENV.into(), "1".into()));
    }
    if let Some(inner) = std::env::var_os("RUSTC_WRAPPER").filter(|w| !w.is_empty()) {
        env.push((INNER_ENV.into(), inner));
    }
    env
}

/// Runs rustc (argv[1], then its arguments) with the instrumentation added
/// where it belongs, and exits with its status.
pub fn wrap_rustc() -> ! {
    let mut args = std::env::args_os().skip(1);
    let Some(rustc) = args.next() else {
        eprintln!("cargo-ekstazi: called as a rustc wrapper without a compiler");
        std::process::exit(2);
    };
    let args: Vec<OsString> = args.collect();
    let mut command = match std::env::var_os(INNER_ENV) {
        Some(inner) => {
            let mut c = Command::new(inner);
            c.arg(&rustc);
            c
        }
        None => Command::new(&rustc),
    };
    let extra = extra_args(&args);
    command.args(&args).args(&extra);
    let status = command.status().unwrap_or_else(|e| {
        eprintln!("cargo-ekstazi: cannot run {}: {e}", rustc.to_string_lossy());
        std::process::exit(2);
    });
    if status.success()
        && !extra.is_empty()
        && let Some(executable) = linked_executable(&args)
    {
        // The executable works either way; unrelocated, its every start
        // skips relocating and copying the coverage PC table.
        if let Err(e) = ekstazi_core::digests::coverage_table::unrelocate(&executable) {
            eprintln!(
                "cargo-ekstazi: warning: {}: its coverage table stays relocated at load time: {e}",
                executable.display()
            );
        }
    }
    std::process::exit(status.code().unwrap_or(crate::exit::TESTS_FAILED.into()));
}

/// The executable this rustc invocation links, if any: a test harness
/// (`--test`) or a `bin` crate.
fn linked_executable(args: &[OsString]) -> Option<PathBuf> {
    let executable = args.iter().any(|a| a == "--test")
        || args
            .windows(2)
            .any(|w| w[0] == "--crate-type" && w[1] == "bin");
    executable.then(|| output_path(args)).flatten()
}

/// What rustc writes the crate to, without an extension:
/// `<out-dir>/<crate-name><extra-filename>` (rustc refuses `--out-dir` or
/// `--crate-name` twice; of `-C` options the last given wins, as here).
fn output_path(args: &[OsString]) -> Option<PathBuf> {
    let value = |flag: &str| -> Option<&OsStr> {
        args.windows(2)
            .rev()
            .find(|w| w[0] == flag)
            .map(|w| w[1].as_os_str())
    };
    let extra_filename = args.windows(2).rev().find_map(|w| {
        let value = w[1].to_str()?;
        (w[0] == "-C")
            .then(|| value.strip_prefix("extra-filename="))
            .flatten()
    });
    let mut name = value("--crate-name")?.to_owned();
    name.push(extra_filename.unwrap_or_default());
    Some(Path::new(value("--out-dir")?).join(name))
}

/// The arguments to add to one rustc invocation.
fn extra_args(args: &[OsString]) -> Vec<OsString> {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // Only real compilations for the target (cargo also asks rustc for its
    // configuration, and compiles build scripts and proc-macros for the host,
    // without `--target`).
    if !has("--target")
        || !args
            .iter()
            .any(|a| a.to_string_lossy().starts_with("--emit"))
    {
        return Vec::new();
    }
    let mut extra: Vec<OsString> = ekstazi_core::digests::coverage_table::RUSTC_FLAGS
        .iter()
        .map(OsString::from)
        .collect();
    if std::env::var_os(LINE_TABLES_ENV).is_some() && wants_more_than_line_tables(args) {
        extra.extend(["-C".into(), "debuginfo=line-tables-only".into()]);
    }
    // The workspace root is in the debug information (the compilation
    // directory, and so the names of the strings after it in `.debug_str`
    // and every offset into them). A checkout moved to a path of another
    // length would otherwise change every byte of a binary that a test
    // reading its own executable (a backtrace) sees. Code never sees it:
    // cargo names a member's sources relative to the root, so `file!()`
    // and panic locations are relative already.
    if let Some(root) = std::env::var_os(WORKSPACE_ENV).map(PathBuf::from)
        && root.is_absolute()
        && root != Path::new("/")
    {
        let mut remap = OsString::from("--remap-path-prefix=");
        remap.push(root.as_os_str());
        remap.push("=.");
        extra.push(remap);
    }
    let Some(output) = output_path(args) else {
        return extra;
    };
    let mut map = output.clone().into_os_string();
    map.push(".map");
    let map = PathBuf::from(map);
    let mut link = |arg: String| {
        extra.push("-C".into());
        extra.push(format!("link-arg={arg}").into());
    };
    link("-Wl,--emit-relocs".to_owned());
    link(format!("-Wl,-Map={}", map.display()));
    if let Some(callbacks) = std::env::var_os(CALLBACKS_ENV) {
        // Linked as an object: always in, ahead of the libraries.
        extra.push("-C".into());
        let mut arg = OsString::from("link-arg=");
        arg.push(callbacks);
        extra.push(arg);
    }
    extra
}

/// Whether rustc is asked for more debug information than line tables (`-C
/// debuginfo=1|2|limited|full`, or `-g`, the last one given winning). Less
/// stays as asked: a profile without debug information gets none.
fn wants_more_than_line_tables(args: &[OsString]) -> bool {
    let mut level = None;
    let mut args = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = args.next() {
        if arg == "-g" {
            level = Some("2".to_owned());
        } else if arg == "-C" {
            if let Some(value) = args
                .next()
                .and_then(|v| v.strip_prefix("debuginfo=").map(str::to_owned))
            {
                level = Some(value);
            }
        } else if let Some(value) = arg.strip_prefix("-Cdebuginfo=") {
            level = Some(value.to_owned());
        }
    }
    matches!(
        level.as_deref(),
        Some("1" | "2" | "limited" | "full" | "true")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_more_than_line_tables_is_cut() {
        for more in [
            &["-C", "debuginfo=2"][..],
            &["-C", "debuginfo=full"],
            &["-C", "debuginfo=limited"],
            &["-Cdebuginfo=1"],
            &["-g"],
            &["-C", "debuginfo=0", "-C", "debuginfo=2"],
        ] {
            assert!(wants_more_than_line_tables(&args(more)), "{more:?}");
        }
        for less in [
            &[][..],
            &["-C", "debuginfo=0"],
            &["-C", "debuginfo=line-tables-only"],
            &["-C", "debuginfo=line-directives-only"],
            &["-C", "debuginfo=2", "-C", "debuginfo=none"],
            &["-C", "opt-level=2"],
        ] {
            assert!(!wants_more_than_line_tables(&args(less)), "{less:?}");
        }
    }

    #[test]
    fn the_linked_executable_is_found_for_tests_and_bins_only() {
        let with = |kind: &[&str]| {
            let mut list = vec!["--crate-name", "fx", "--edition=2021", "src/lib.rs"];
            list.extend(kind);
            list.extend(["-C", "extra-filename=-abc", "--out-dir", "/t/deps"]);
            linked_executable(&args(&list))
        };
        let expected = Some(PathBuf::from("/t/deps/fx-abc"));
        assert_eq!(with(&["--test"]), expected);
        assert_eq!(with(&["--crate-type", "bin"]), expected);
        assert_eq!(with(&["--crate-type", "lib"]), None);
        assert_eq!(with(&["--crate-type", "proc-macro"]), None);
    }

    #[test]
    fn only_target_compilations_are_instrumented() {
        let host = args(&[
            "--crate-name",
            "build_script_build",
            "--emit=dep-info,link",
            "--out-dir",
            "/o",
        ]);
        assert!(
            extra_args(&host).is_empty(),
            "build scripts run on the host"
        );
        let probe = args(&[
            "-",
            "--crate-name",
            "___",
            "--print=file-names",
            "--target",
            "x86_64-unknown-linux-gnu",
        ]);
        assert!(
            extra_args(&probe).is_empty(),
            "cargo asking rustc about the target"
        );
        let test = args(&[
            "--crate-name",
            "fx",
            "--emit=dep-info,link",
            "--test",
            "-C",
            "extra-filename=-abc",
            "--out-dir",
            "/t/deps",
            "--target",
            "x86_64-unknown-linux-gnu",
        ]);
        let extra: Vec<String> = extra_args(&test)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(extra.contains(&"passes=sancov-module".to_owned()));
        assert!(extra.contains(&"link-arg=-Wl,--emit-relocs".to_owned()));
        assert!(
            extra.contains(&"link-arg=-Wl,-Map=/t/deps/fx-abc.map".to_owned()),
            "{extra:?}"
        );
    }
}
