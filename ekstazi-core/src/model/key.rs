//! The stable names of test binaries.

/// The name of a test binary that survives rebuilds, as cargo-nextest
/// spells its binary ids: `pkg` for the library's unit tests, `pkg::name`
/// for an integration test, `pkg::bin/name`, `pkg::bench/name`,
/// `pkg::example/name`. `kind` is cargo's target kind (`lib`, `bin`, `test`,
/// ...; every library crate type counts as `lib`).
pub fn binary_key(package: &str, kind: &str, target: &str) -> String {
    match kind {
        "lib" => package.to_owned(),
        "test" => format!("{package}::{target}"),
        kind => format!("{package}::{kind}/{target}"),
    }
}

/// The cargo options that build only the test binary with this key (the
/// inverse of [`binary_key`]): `-p pkg --lib`, `-p pkg --test name`, ...,
/// and `-p pkg --doc` for a doctest unit.
pub fn cargo_target_args(key: &str) -> Vec<String> {
    let owned = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect();
    let Some((package, target)) = key.split_once("::") else {
        return owned(&["-p", key, "--lib"]);
    };
    match target.split_once('/') {
        Some(("doc", _)) => owned(&["-p", package, "--doc"]),
        Some((kind @ ("bin" | "bench" | "example"), name)) => {
            owned(&["-p", package, &format!("--{kind}"), name])
        }
        _ => owned(&["-p", package, "--test", target]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_keys_follow_nextest() {
        assert_eq!(binary_key("demo", "lib", "demo"), "demo");
        assert_eq!(binary_key("demo", "test", "it"), "demo::it");
        assert_eq!(binary_key("demo", "bin", "cli"), "demo::bin/cli");
        assert_eq!(binary_key("demo", "bench", "b"), "demo::bench/b");
        for (kind, target, args) in [
            ("lib", "demo", "-p demo --lib"),
            ("test", "it", "-p demo --test it"),
            ("bin", "cli", "-p demo --bin cli"),
            ("example", "ex", "-p demo --example ex"),
            ("doc", "demo", "-p demo --doc"),
        ] {
            assert_eq!(
                cargo_target_args(&binary_key("demo", kind, target)).join(" "),
                args
            );
        }
    }
}
