//! `cargo ekstazi completions <SHELL>`: a completion script generated from
//! the clap definitions (`clap_complete`).
//!
//! The script completes the program `cargo-ekstazi`. Users type `cargo
//! ekstazi …`, which is the `cargo` command's business, so each shell needs
//! a way in:
//! - zsh: cargo's own completion calls `_cargo-<subcommand>` when it is
//!   defined, and the generated function has that name;
//! - bash: cargo's completion knows only its built-in subcommands, so the
//!   script ends with a small hook ([`BASH_CARGO_HOOK`]) that takes over
//!   `cargo ekstazi …` and hands everything else to the completion `cargo`
//!   had;
//! - fish: completions add up, so the script also describes `cargo
//!   ekstazi` as a subcommand of `cargo` (generated from the same
//!   definitions, rooted at `cargo`).
//!
//! Elvish and PowerShell get the `cargo-ekstazi` script alone.

use crate::cli::{CargoCli, CompletionsArgs, standalone_command};
use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

/// Hand-written, as no crate provides it: bash's completion of `cargo`
/// (from rustup) has no hook for third-party subcommands. Registered for
/// `cargo`, it rewrites `cargo ekstazi ARGS` into `cargo-ekstazi ARGS` for
/// the generated `_cargo_ekstazi`, and gives any other `cargo` line to the
/// completion `cargo` had (loading it first where bash-completion loads
/// completions lazily).
const BASH_CARGO_HOOK: &str = r#"
# `cargo ekstazi …`: cargo's own completion does not complete third-party
# subcommands; complete those words as `cargo-ekstazi …`.
__cargo_ekstazi_previous=""
if ! complete -p cargo >/dev/null 2>&1 && declare -F _completion_loader >/dev/null 2>&1; then
    _completion_loader cargo >/dev/null 2>&1 || true
fi
__cargo_ekstazi_previous=$(complete -p cargo 2>/dev/null | sed -n 's/.*-F \([^ ]*\).*/\1/p')
if [ "$__cargo_ekstazi_previous" = "__cargo_ekstazi_via_cargo" ]; then
    __cargo_ekstazi_previous=""
fi
__cargo_ekstazi_via_cargo() {
    if [ "${COMP_CWORD}" -ge 2 ] && [ "${COMP_WORDS[1]}" = "ekstazi" ]; then
        local words=("cargo-ekstazi" "${COMP_WORDS[@]:2}") cword=$((COMP_CWORD - 1))
        local COMP_WORDS=("${words[@]}") COMP_CWORD=$cword
        _cargo_ekstazi cargo-ekstazi "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    elif [ -n "$__cargo_ekstazi_previous" ]; then
        "$__cargo_ekstazi_previous" "$@"
    else
        COMPREPLY=()
    fi
}
complete -o bashdefault -o default -F __cargo_ekstazi_via_cargo cargo
"#;

/// The name bash's script is generated for. clap_complete's bash script
/// completes no subcommand's options when the name has a hyphen (its case
/// labels and the state it computes are spelt differently, clap issue
/// 6421), so it is generated for this name and registered for
/// `cargo-ekstazi` ([`bash`]).
const BASH_NAME: &str = "cargo_ekstazi";

pub fn run(args: CompletionsArgs) -> Result<ExitCode> {
    let mut script = Vec::new();
    let mut command = standalone_command();
    match args.shell {
        Shell::Bash => script = bash(command).into_bytes(),
        Shell::Fish => {
            clap_complete::generate(Shell::Fish, &mut command, "cargo-ekstazi", &mut script);
            let mut cargo = CargoCli::command();
            clap_complete::generate(Shell::Fish, &mut cargo, "cargo", &mut script);
        }
        shell => clap_complete::generate(shell, &mut command, "cargo-ekstazi", &mut script),
    }
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// The bash script: clap_complete's for [`BASH_NAME`], registered for
/// `cargo-ekstazi`, then the hook for `cargo ekstazi`.
fn bash(mut command: clap::Command) -> String {
    let mut generated = Vec::new();
    clap_complete::generate(Shell::Bash, &mut command, BASH_NAME, &mut generated);
    let generated = String::from_utf8_lossy(&generated);
    let mut script = String::new();
    for line in generated.lines() {
        // Only the `complete -F _cargo_ekstazi … cargo_ekstazi` lines name
        // the program; the function keeps its name.
        match line.strip_suffix(&format!(" {BASH_NAME}")) {
            Some(start) if line.trim_start().starts_with("complete ") => {
                script.push_str(start);
                script.push_str(" cargo-ekstazi");
            }
            _ => script.push_str(line),
        }
        script.push('\n');
    }
    script.push_str(BASH_CARGO_HOOK);
    script
}
