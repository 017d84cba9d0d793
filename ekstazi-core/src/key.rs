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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_keys_follow_nextest() {
        assert_eq!(binary_key("demo", "lib", "demo"), "demo");
        assert_eq!(binary_key("demo", "test", "it"), "demo::it");
        assert_eq!(binary_key("demo", "bin", "cli"), "demo::bin/cli");
        assert_eq!(binary_key("demo", "bench", "b"), "demo::bench/b");
    }
}
