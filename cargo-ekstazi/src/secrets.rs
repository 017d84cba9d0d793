//! The secrets cargo-ekstazi reads from its environment:
//!
//! - `EKSTAZI_SEAL_KEY`: the secret every seal is keyed with
//!   (`ekstazi_core::files::sealed::use_key`), so that a state written by
//!   someone without it is refused and its tests run;
//! - `EKSTAZI_SIGNING_KEY`: the key CI signs what it hands over with
//!   (`history export`; `ekstazi_core::files::signed`), which readers check
//!   with its public key, no secret needed.
//!
//! Both are taken out of this process's environment at its start, so that
//! no test, build script or program this process starts can read them and
//! forge a seal or a signature. The seal key is handed on explicitly to the
//! runs cargo-ekstazi starts of itself (a verdict-first run's recording,
//! `bisect`'s and `merge-check`'s runs), which keep records; the signing
//! key to none: none of them signs.

use anyhow::{Context, Result};
use ekstazi_core::files::signed::SigningKey;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::sync::OnceLock;

pub const SEAL_KEY: &str = "EKSTAZI_SEAL_KEY";
pub const SIGNING_KEY: &str = "EKSTAZI_SIGNING_KEY";

static SEAL_SECRET: OnceLock<OsString> = OnceLock::new();
static SIGNING_SECRET: OnceLock<OsString> = OnceLock::new();

/// Takes the secrets from the environment, and keys every seal with the
/// seal key. Call it first, before any thread starts.
pub fn take() {
    for (var, kept) in [(SEAL_KEY, &SEAL_SECRET), (SIGNING_KEY, &SIGNING_SECRET)] {
        let Some(secret) = std::env::var_os(var) else {
            continue;
        };
        // SAFETY: called at the start of `main`, before any other thread
        // exists, so nothing reads the environment while it changes.
        unsafe { std::env::remove_var(var) };
        if !secret.is_empty() {
            let _ = kept.set(secret);
        }
    }
    if let Some(secret) = SEAL_SECRET.get() {
        ekstazi_core::files::sealed::use_key(secret.as_bytes());
    }
}

/// Gives `command`, a run of cargo-ekstazi itself, the seal key, if this
/// process has one.
pub fn hand_on(command: &mut Command) {
    if let Some(secret) = SEAL_SECRET.get() {
        command.env(SEAL_KEY, secret);
    }
}

/// The key to sign with, if `EKSTAZI_SIGNING_KEY` was set.
pub fn signing_key() -> Result<Option<SigningKey>> {
    SIGNING_SECRET
        .get()
        .map(|secret| {
            SigningKey::parse(&secret.to_string_lossy())
                .with_context(|| format!("{SIGNING_KEY} does not hold a signing key"))
        })
        .transpose()
}
