//! Colour, as cargo decides it: `--color`, else `CARGO_TERM_COLOR`, else
//! automatic (a terminal, and neither `NO_COLOR` nor `TERM=dumb`).
//!
//! Output goes through `anstream`, which removes the styles when colour is
//! off, so the code that prints never asks.

use anstyle::{AnsiColor, Effects, Style};
use std::io::IsTerminal;
use std::sync::OnceLock;

pub const PASS: Style = AnsiColor::Green.on_default().effects(Effects::BOLD);
pub const FAIL: Style = AnsiColor::Red.on_default().effects(Effects::BOLD);
pub const SLOW: Style = AnsiColor::Yellow.on_default().effects(Effects::BOLD);
pub const SKIP: Style = AnsiColor::Cyan.on_default();
pub const NOTE: Style = AnsiColor::Cyan.on_default().effects(Effects::BOLD);
pub const WARN: Style = AnsiColor::Yellow.on_default().effects(Effects::BOLD);
pub const BOLD: Style = Style::new().effects(Effects::BOLD);
pub const DIM: Style = Style::new().effects(Effects::DIMMED);

/// What the user asked for, kept to pass on to cargo.
static ASKED: OnceLock<Option<String>> = OnceLock::new();

/// Decides colour for the whole process, from `--color` and the environment.
pub fn init(flag: Option<&str>) {
    let asked = flag
        .map(str::to_owned)
        .or_else(|| std::env::var("CARGO_TERM_COLOR").ok())
        .filter(|v| matches!(v.as_str(), "always" | "never" | "auto"));
    let choice = match asked.as_deref() {
        Some("always") => anstream::ColorChoice::Always,
        Some("never") => anstream::ColorChoice::Never,
        _ => anstream::ColorChoice::Auto,
    };
    choice.write_global();
    let _ = ASKED.set(asked);
}

/// `--color=WHEN` for the cargo commands we run, when the user chose; cargo
/// decides for itself otherwise (it writes to the same terminal).
pub fn cargo_color_arg() -> Option<String> {
    ASKED
        .get()
        .and_then(|asked| asked.as_ref())
        .map(|when| format!("--color={when}"))
}

/// Whether this looks like a CI job (`CI` set, as every major CI service does).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Whether a live progress bar suits stderr: a terminal a person watches.
pub fn interactive() -> bool {
    std::io::stderr().is_terminal()
        && !on_ci()
        && std::env::var("TERM").map_or(true, |term| term != "dumb")
}

/// `warning: ...` on stderr, as cargo writes it.
pub fn warn(message: impl std::fmt::Display) {
    anstream::eprintln!("{WARN}warning{WARN:#}: {message}");
}

/// `note: ...` on stderr.
pub fn note(message: impl std::fmt::Display) {
    anstream::eprintln!("{NOTE}note{NOTE:#}: {message}");
}
