//! `cargo ekstazi man`: the manual page, generated from the clap
//! definitions (`clap_mangen`). Printed, the main page (`cargo-ekstazi(1)`,
//! which lists the commands); with `--dir`, that page and one per command
//! (`cargo-ekstazi-test(1)`, …), as cargo's own pages are split.

use crate::cli::{ManArgs, standalone_command};
use anyhow::{Context, Result};
use std::io::Write;
use std::process::ExitCode;

pub fn run(args: ManArgs) -> Result<ExitCode> {
    let command = standalone_command().bin_name("cargo ekstazi");
    match args.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command).render(&mut page)?;
            std::io::stdout().lock().write_all(&page)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, &dir)
                .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
