//! `EKSTAZI_SEAL_KEY`: the secret every seal is keyed with
//! (`ekstazi_core::files::sealed::use_key`), so that a state written by
//! someone without it is refused and its tests run.
//!
//! Taken out of this process's environment at its start, so that no test,
//! build script or program this process starts can read it and forge a
//! seal; handed on explicitly to the runs cargo-ekstazi starts of itself
//! (a verdict-first run's recording, `bisect`'s and `merge-check`'s runs).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::sync::OnceLock;

pub const VAR: &str = "EKSTAZI_SEAL_KEY";

static SECRET: OnceLock<OsString> = OnceLock::new();

/// Takes the secret from the environment and keys every seal with it.
/// Call it first, before any thread starts.
pub fn take() {
    let Some(secret) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: called at the start of `main`, before any other thread
    // exists, so nothing reads the environment while it changes.
    unsafe { std::env::remove_var(VAR) };
    if !secret.is_empty() {
        ekstazi_core::files::sealed::use_key(secret.as_bytes());
        let _ = SECRET.set(secret);
    }
}

/// Gives `command`, a run of cargo-ekstazi itself, the secret, if this
/// process has one.
pub fn hand_on(command: &mut Command) {
    if let Some(secret) = SECRET.get() {
        command.env(VAR, secret);
    }
}
