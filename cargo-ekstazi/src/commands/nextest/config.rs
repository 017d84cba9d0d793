//! What nextest is configured with that cargo ekstazi must work with: a
//! target runner of the user's (chained behind ours), and where the JUnit
//! report of the profile in use goes.

use anyhow::{Result, bail};
use std::path::{Path, PathBuf};

/// `CARGO_TARGET_<TRIPLE>_RUNNER` for a target triple.
pub fn runner_var(triple: &str) -> String {
    format!(
        "CARGO_TARGET_{}_RUNNER",
        triple.to_uppercase().replace(['-', '.'], "_")
    )
}

/// The user's own target runner for `host`, as words, if one is configured:
/// by the environment variable, else by `target.<host>.runner` in cargo's
/// configuration files (from the current directory up, then cargo's home).
/// A runner configured for a `cfg(...)` expression is refused: whether it
/// applies cannot be told here.
pub fn user_runner(host: &str, cargo_home: Option<&Path>) -> Result<Option<Vec<String>>> {
    let var = runner_var(host);
    if let Some(value) = std::env::var(&var).ok().filter(|v| !v.trim().is_empty()) {
        return Ok(Some(value.split_whitespace().map(str::to_owned).collect()));
    }
    let cwd = std::env::current_dir()?;
    let mut files: Vec<PathBuf> = cwd
        .ancestors()
        .flat_map(|dir| {
            [
                dir.join(".cargo").join("config.toml"),
                dir.join(".cargo").join("config"),
            ]
        })
        .collect();
    if let Some(home) = cargo_home {
        files.push(home.join("config.toml"));
        files.push(home.join("config"));
    }
    let mut by_cfg = None;
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        // A file cargo cannot read fails the build anyway.
        let Ok(config) = text.parse::<toml::Table>() else {
            continue;
        };
        let Some(targets) = config.get("target").and_then(|t| t.as_table()) else {
            continue;
        };
        if let Some(runner) = targets.get(host).and_then(|t| t.get("runner")) {
            // Relative to the directory holding `.cargo`, as cargo reads it.
            let base = file.parent().and_then(Path::parent).unwrap_or(&cwd);
            return Ok(Some(words(runner, base)));
        }
        for (key, table) in targets {
            if key.starts_with("cfg(") && table.get("runner").is_some() && by_cfg.is_none() {
                by_cfg = Some((file.clone(), key.clone()));
            }
        }
    }
    if let Some((file, key)) = by_cfg {
        bail!(
            "{} sets a target runner for `{key}`, which cargo ekstazi nextest cannot chain \
             (it runs the tests through a runner of its own). Set the runner for the host \
             instead, in `[target.{host}]` or as {var}: it is then run behind cargo-ekstazi's",
            file.display()
        );
    }
    Ok(None)
}

/// A runner's words: a string split at whitespace, or an array; a relative
/// program path with a `/` is taken from `base`.
fn words(value: &toml::Value, base: &Path) -> Vec<String> {
    let mut words: Vec<String> = match value {
        toml::Value::String(s) => s.split_whitespace().map(str::to_owned).collect(),
        toml::Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(program) = words.first_mut()
        && program.contains('/')
        && Path::new(program.as_str()).is_relative()
    {
        *program = base.join(&*program).display().to_string();
    }
    words
}

/// The tool configuration that sends the JUnit report of `profile` to `path`.
pub fn tool_config(profile: &str, path: &Path) -> String {
    let mut junit = toml::Table::new();
    junit.insert("path".into(), path.display().to_string().into());
    junit.insert("store-success-output".into(), false.into());
    junit.insert("store-failure-output".into(), false.into());
    let mut this = toml::Table::new();
    this.insert("junit".into(), junit.into());
    let mut profiles = toml::Table::new();
    profiles.insert(profile.into(), this.into());
    let mut config = toml::Table::new();
    config.insert("profile".into(), profiles.into());
    toml::to_string(&config).expect("a table serialises")
}

/// Where nextest writes the JUnit report of `profile` when the repository's
/// own configuration (`config_file`, else `.config/nextest.toml`) sets its
/// path, which wins over a tool's: `<workspace>/<store.dir>/<profile>/<path>`.
pub fn repository_junit(root: &Path, config_file: Option<&Path>, profile: &str) -> Option<PathBuf> {
    let file = match config_file {
        Some(file) => file.to_path_buf(),
        None => root.join(".config").join("nextest.toml"),
    };
    let config: toml::Table = std::fs::read_to_string(file).ok()?.parse().ok()?;
    let path = config
        .get("profile")?
        .get(profile)?
        .get("junit")?
        .get("path")?
        .as_str()?;
    let store = config
        .get("store")
        .and_then(|s| s.get("dir"))
        .and_then(|d| d.as_str())
        .unwrap_or("target/nextest");
    Some(root.join(store).join(profile).join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_variable_follows_cargo() {
        assert_eq!(
            runner_var("x86_64-unknown-linux-gnu"),
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER"
        );
        assert_eq!(
            runner_var("thumbv7em-none-eabihf.json"),
            "CARGO_TARGET_THUMBV7EM_NONE_EABIHF_JSON_RUNNER"
        );
    }

    #[test]
    fn runner_words_resolve_relative_programs() {
        let base = Path::new("/ws");
        assert_eq!(
            words(&"valgrind --quiet".into(), base),
            ["valgrind", "--quiet"]
        );
        let array = toml::Value::Array(vec!["tools/run me".into(), "-x".into()]);
        assert_eq!(words(&array, base), ["/ws/tools/run me", "-x"]);
    }

    #[test]
    fn the_tool_configuration_names_the_profile() {
        let text = tool_config("ci.x", Path::new("/tmp/e/junit.xml"));
        let parsed: toml::Table = text.parse().unwrap();
        assert_eq!(
            parsed["profile"]["ci.x"]["junit"]["path"].as_str(),
            Some("/tmp/e/junit.xml")
        );
    }

    #[test]
    fn a_repository_junit_path_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".config")).unwrap();
        std::fs::write(
            dir.path().join(".config/nextest.toml"),
            "[profile.ci.junit]\npath = \"junit.xml\"\n",
        )
        .unwrap();
        assert_eq!(
            repository_junit(dir.path(), None, "ci"),
            Some(dir.path().join("target/nextest/ci/junit.xml"))
        );
        assert_eq!(repository_junit(dir.path(), None, "default"), None);
    }
}
