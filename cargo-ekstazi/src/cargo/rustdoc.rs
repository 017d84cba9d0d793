//! The rustdoc wrapper that puts a library's doctests under the shim.
//!
//! A doctest unit is `cargo test --doc -p <pkg>`. Tracing that whole
//! command would make cargo's own bookkeeping (its fingerprints, locks,
//! the registry cache it touches every run) the unit's dependencies. What
//! the unit's outcome turns on is what rustdoc reads while it collects and
//! compiles the doctests (the `cfg(doctest)` code and what it
//! `include_str!`s, which the library's dep-info never names), and what
//! the doctests read when they run. So cargo is given this binary as
//! `RUSTDOC`: it preloads the shim, points it at the unit's trace file and
//! execs the real rustdoc, whose children (rustc, the linker, the doctest
//! executables) inherit both. What cargo itself decides on stays covered
//! by the unit's build files (dep-info, manifests, lockfile).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// The real rustdoc; its presence makes this process the wrapper.
pub const WRAPPER_ENV: &str = "EKSTAZI_RUSTDOC";
/// The `LD_PRELOAD` value rustdoc is given.
const PRELOAD_ENV: &str = "EKSTAZI_RUSTDOC_PRELOAD";
/// The unit's trace file.
const TRACE_ENV: &str = "EKSTAZI_RUSTDOC_TRACE";
/// Set when the user's environment had `RUSTDOC` (the real rustdoc then):
/// rustdoc's children see it as they would under plain cargo, and without
/// it when it was not set.
const USER_ENV: &str = "EKSTAZI_RUSTDOC_USER";

/// Makes `command` (a `cargo test --doc`) run rustdoc through this wrapper,
/// under the shim given by `preload`, tracing into `trace`. The rustdoc run
/// is the user's `RUSTDOC` if set, else the toolchain's own (the one cargo
/// runs for this workspace's toolchain).
pub fn wrap_doctests(
    command: &mut Command,
    sysroot: &Path,
    preload: OsString,
    trace: &Path,
) -> std::io::Result<()> {
    let user = std::env::var_os("RUSTDOC").filter(|v| !v.is_empty());
    if user.is_some() {
        command.env(USER_ENV, "1");
    }
    let real = user.unwrap_or_else(|| {
        let own = sysroot.join("bin").join("rustdoc");
        if own.is_file() {
            own.into_os_string()
        } else {
            "rustdoc".into()
        }
    });
    command
        .env("RUSTDOC", std::env::current_exe()?)
        .env(WRAPPER_ENV, real)
        .env(PRELOAD_ENV, preload)
        .env(TRACE_ENV, trace);
    Ok(())
}

/// Runs as the wrapper: execs the real rustdoc with this process's
/// arguments, under the shim, without the wrapper's own variables (the
/// doctests see the environment cargo gave rustdoc, and `LD_PRELOAD`).
pub fn exec() -> ! {
    let real = std::env::var_os(WRAPPER_ENV).unwrap_or_default();
    let mut command = Command::new(&real);
    command
        .args(std::env::args_os().skip(1))
        .env_remove(WRAPPER_ENV)
        .env_remove(PRELOAD_ENV)
        .env_remove(TRACE_ENV)
        .env_remove(USER_ENV);
    if std::env::var_os(USER_ENV).is_some() {
        command.env("RUSTDOC", &real);
    } else {
        command.env_remove("RUSTDOC");
    }
    if let (Some(preload), Some(trace)) =
        (std::env::var_os(PRELOAD_ENV), std::env::var_os(TRACE_ENV))
    {
        command
            .env("LD_PRELOAD", preload)
            .env("EKSTAZI_TRACE_FILE", trace);
    }
    let e = command.exec();
    eprintln!("cargo-ekstazi: cannot run {}: {e}", real.to_string_lossy());
    std::process::exit(2);
}
