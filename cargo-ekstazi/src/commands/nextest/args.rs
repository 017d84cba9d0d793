//! The arguments of the `cargo nextest run` we start: the user's (after
//! `--`), checked and with their filtersets taken out, and cargo's options
//! in nextest's spelling.

use crate::cli::CargoOpts;
use anyhow::{Result, bail};
use ekstazi_core::selection::filter::RunIgnored;
use std::path::PathBuf;

/// What the user's nextest arguments say that matters here.
#[derive(Debug, Default, PartialEq)]
pub struct UserArgs {
    /// Passed on to nextest as they are (without the filtersets).
    pub rest: Vec<String>,
    /// `-E`: intersected with the selection (see [`super::filterset`]).
    pub filtersets: Vec<String>,
    /// `-P/--profile`: where the JUnit report is configured.
    pub profile: Option<String>,
    /// `--config-file`: the repository's nextest configuration.
    pub config_file: Option<PathBuf>,
    /// `--run-ignored`, `-- --ignored`, `-- --include-ignored`.
    pub run_ignored: RunIgnored,
    /// `-j/--test-threads` given.
    pub jobs: bool,
}

/// Options that change what is built: the selection must analyse the same
/// build nextest runs, so these go before `--`, to cargo-ekstazi.
pub const BUILD_OPTIONS: &[&str] = &[
    "-p",
    "--package",
    "--workspace",
    "--all",
    "--exclude",
    "--lib",
    "--bin",
    "--bins",
    "--example",
    "--examples",
    "--test",
    "--tests",
    "--bench",
    "--benches",
    "--all-targets",
    "-F",
    "--features",
    "--all-features",
    "--no-default-features",
    "-r",
    "--release",
    "--cargo-profile",
    "--target-dir",
    "--manifest-path",
];

/// Options nextest takes with a value (of those looked at here): their
/// value may be attached (`-Ex`, `--filterset=x`) or the next argument.
const WITH_VALUE: &[&str] = &[
    "-E",
    "--filterset",
    "--filter-expr",
    "-P",
    "--profile",
    "--config-file",
    "--run-ignored",
    "-j",
    "--test-threads",
    "--jobs",
];

pub fn parse(args: &[String]) -> Result<UserArgs> {
    let mut out = UserArgs::default();
    let mut args = args.iter();
    // After a second `--`: the emulated libtest arguments.
    let mut emulated = false;
    while let Some(arg) = args.next() {
        if emulated {
            match arg.as_str() {
                "--ignored" => out.run_ignored = RunIgnored::Only,
                "--include-ignored" => out.run_ignored = RunIgnored::Yes,
                _ => {}
            }
            out.rest.push(arg.clone());
            continue;
        }
        if arg == "--" {
            emulated = true;
            out.rest.push(arg.clone());
            continue;
        }
        let (name, inline) = split_option(arg);
        refuse(name)?;
        if !WITH_VALUE.contains(&name) {
            out.rest.push(arg.clone());
            continue;
        }
        let value = match inline {
            Some(value) => value.to_owned(),
            None => match args.next() {
                Some(value) => value.clone(),
                None => bail!("`{name}` needs a value"),
            },
        };
        match name {
            "-E" | "--filterset" | "--filter-expr" => {
                out.filtersets.push(value);
                continue;
            }
            "-P" | "--profile" => out.profile = Some(value.clone()),
            "--config-file" => out.config_file = Some(PathBuf::from(&value)),
            "--run-ignored" => {
                out.run_ignored = match value.as_str() {
                    "default" => RunIgnored::No,
                    "only" | "ignored-only" => RunIgnored::Only,
                    "all" => RunIgnored::Yes,
                    other => bail!("`--run-ignored {other}`: expected default, only or all"),
                }
            }
            _ => out.jobs = true,
        }
        out.rest.push(name.to_owned());
        out.rest.push(value);
    }
    Ok(out)
}

/// Fails, saying why, for an option cargo ekstazi nextest cannot pass on:
/// one that changes what is built, or a kind of run it does not support.
fn refuse(name: &str) -> Result<()> {
    if BUILD_OPTIONS.contains(&name) {
        let hint = if name == "--cargo-profile" {
            "--profile"
        } else {
            name
        };
        bail!(
            "`{name}` changes what is built: give it before `--`, to cargo ekstazi \
             (`cargo ekstazi nextest {hint} ... -- ...`), so that the selection looks at the \
             build nextest runs"
        );
    }
    match name {
        "--target" | "--config" | "-Z" => bail!(
            "`{name}` is not supported by cargo ekstazi nextest: tests are built for the host, \
             with cargo's own configuration"
        ),
        "--no-run" => {
            bail!("`--no-run`: use `cargo ekstazi list` to build and see the selection")
        }
        "--archive-file"
        | "--archive-format"
        | "--extract-to"
        | "--extract-overwrite"
        | "--persist-extract-tempdir"
        | "--cargo-metadata"
        | "--binaries-metadata"
        | "--workspace-remap"
        | "--target-dir-remap"
        | "--build-dir-remap" => bail!(
            "`{name}` after `--`: to reuse a build, make it with `cargo ekstazi nextest archive \
             --archive-file F`, then give `--archive-file F` and `--workspace-remap DIR` before \
             `--` (`cargo ekstazi nextest run --archive-file F ...`)"
        ),
        "--partition" => bail!(
            "`--partition` splits the selected tests: give it before `--`, to cargo ekstazi \
             (`cargo ekstazi nextest --partition count:1/2`), so that every shard splits the \
             same selection and records its share"
        ),
        "--stress-count" | "--stress-duration" => {
            bail!("stress runs (`{name}`) are not supported: use plain `cargo nextest run`")
        }
        "-R" | "--rerun" => bail!(
            "`{name}` reruns a recorded nextest run; cargo ekstazi already runs again every \
             test that did not pass"
        ),
        _ => {}
    }
    Ok(())
}

/// `(name, attached value)` of an option: `--name=value`, `-Xvalue`.
pub fn split_option(arg: &str) -> (&str, Option<&str>) {
    if let Some(long) = arg.strip_prefix("--") {
        return match long.split_once('=') {
            Some((name, value)) => (&arg[..name.len() + 2], Some(value)),
            None => (arg, None),
        };
    }
    let is_short = arg.len() > 2 && arg.starts_with('-') && arg.is_char_boundary(2);
    if is_short && matches!(&arg[..2], "-E" | "-P" | "-j" | "-p" | "-F" | "-R" | "-Z") {
        return (&arg[..2], Some(&arg[2..]));
    }
    (arg, None)
}

/// Cargo's options as `cargo nextest run` spells them: `--cargo-quiet`,
/// `--cargo-verbose` and `--cargo-profile` (nextest's own `-v` and
/// `--profile` mean other things).
pub fn cargo_args(opts: &CargoOpts, instrumented: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = opts.to_cargo_args(instrumented).into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quiet" => out.push("--cargo-quiet".to_owned()),
            "--verbose" => out.push("--cargo-verbose".to_owned()),
            "--profile" => out.push("--cargo-profile".to_owned()),
            "--package" | "--exclude" | "--bin" | "--test" | "--example" | "--bench"
            | "--features" | "--target-dir" | "--manifest-path" => {
                out.push(arg);
                out.extend(args.next());
            }
            _ => out.push(arg),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn filtersets_are_taken_out_and_the_rest_kept() {
        let parsed = parse(&strings(&[
            "-E",
            "package(a)",
            "--filterset=test(b)",
            "-Ekind(lib)",
            "--profile",
            "ci",
            "-j4",
            "--retries",
            "2",
            "name",
            "--",
            "--include-ignored",
        ]))
        .unwrap();
        assert_eq!(parsed.filtersets, ["package(a)", "test(b)", "kind(lib)"]);
        assert_eq!(parsed.profile.as_deref(), Some("ci"));
        assert!(parsed.jobs);
        assert_eq!(parsed.run_ignored, RunIgnored::Yes);
        assert_eq!(
            parsed.rest,
            [
                "--profile",
                "ci",
                "-j",
                "4",
                "--retries",
                "2",
                "name",
                "--",
                "--include-ignored"
            ]
        );
        let only = parse(&strings(&["--run-ignored=only"])).unwrap();
        assert_eq!(only.run_ignored, RunIgnored::Only);
        assert_eq!(only.rest, ["--run-ignored", "only"]);
    }

    #[test]
    fn build_options_after_the_separator_are_refused() {
        for refused in [
            &["-p", "x"][..],
            &["-pfoo"],
            &["--features=x"],
            &["--release"],
            &["--cargo-profile", "x"],
            &["--target", "x"],
            &["--no-run"],
            &["--archive-file", "a.tar.zst"],
            &["--stress-count", "3"],
            &["--partition", "count:1/2"],
            &["--partition=hash:1/2"],
        ] {
            assert!(parse(&strings(refused)).is_err(), "{refused:?}");
        }
        assert!(parse(&strings(&["-E"])).is_err(), "a missing value");
        // After the emulated-libtest separator, names are test filters.
        assert!(parse(&strings(&["--", "--release"])).is_ok());
    }

    #[test]
    fn cargo_options_are_spelled_for_nextest() {
        let opts = CargoOpts {
            package: vec!["--quiet".to_owned()],
            profile: Some("bench".to_owned()),
            quiet: true,
            verbose: 1,
            release: true,
            ..CargoOpts::default()
        };
        assert_eq!(
            cargo_args(&opts, true),
            [
                "--cargo-quiet",
                "--cargo-verbose",
                "--package",
                "--quiet",
                "--release",
                "--cargo-profile",
                "bench"
            ]
        );
    }
}
