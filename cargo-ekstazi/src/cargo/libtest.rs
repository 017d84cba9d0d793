//! Listing the tests of each binary, the way libtest reports them.

use crate::cargo::test_build::TestBinary;
use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::process::Command;

/// The name under which a `harness = false` binary is one test.
pub const WHOLE_BINARY: &str = "(whole binary)";

/// The name under which a library's doctests are one test.
pub const DOCTESTS: &str = "(doctests)";

/// One test of one binary.
#[derive(Debug, Clone)]
pub struct TestCase {
    /// Index into the run's binaries.
    pub binary: usize,
    pub name: String,
    /// `#[ignore]`d.
    pub ignored: bool,
}

/// Lists the tests of `binary` with `--list --format terse`, once for all
/// tests and once with `--ignored` to learn which are ignored.
pub fn list(
    index: usize,
    binary: &TestBinary,
    env: &[(OsString, OsString)],
) -> Result<Vec<TestCase>> {
    if binary.doctests.is_some() {
        return Ok(vec![TestCase {
            binary: index,
            name: DOCTESTS.to_owned(),
            ignored: false,
        }]);
    }
    if binary.custom_harness {
        return Ok(vec![TestCase {
            binary: index,
            name: WHOLE_BINARY.to_owned(),
            ignored: false,
        }]);
    }
    let all = run_list(binary, env, false)?;
    let ignored = run_list(binary, env, true)?;
    Ok(all
        .into_iter()
        .map(|name| TestCase {
            binary: index,
            ignored: ignored.contains(&name),
            name,
        })
        .collect())
}

fn run_list(
    binary: &TestBinary,
    env: &[(OsString, OsString)],
    ignored: bool,
) -> Result<Vec<String>> {
    let mut command = Command::new(&binary.path);
    command
        .args(["--list", "--format", "terse"])
        .current_dir(binary.manifest_dir())
        .envs(env.iter().map(|(k, v)| (k, v)));
    if ignored {
        command.arg("--ignored");
    }
    let output = command
        .output()
        .with_context(|| format!("cannot run {} to list its tests", binary.path.display()))?;
    if !output.status.success() {
        bail!(
            "listing the tests of {} failed ({}):\n{}",
            binary.key,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(parse_terse(&String::from_utf8_lossy(&output.stdout)))
}

/// Parses libtest's `name: test` lines (benchmarks run once as tests too).
fn parse_terse(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|line| {
            line.strip_suffix(": test")
                .or_else(|| line.strip_suffix(": bench"))
                .map(str::to_owned)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terse_listing_is_parsed() {
        let out = "tests::a: test\ntests::b: bench\n\nnoise\nweird: name: test\n";
        assert_eq!(parse_terse(out), ["tests::a", "tests::b", "weird: name"]);
    }
}
