//! `callsync completions SHELL` and `callsync man`: generated from the clap definition
//! ([`super::args::command`]), so they name every command and option the binary has.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::args::command;
use super::output::print_out;

/// The completion script for `shell`, on stdout.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command(), "callsync", &mut script);
    print_out(String::from_utf8_lossy(&script))?;
    Ok(ExitCode::SUCCESS)
}

/// callsync(1) on stdout; with `out`, a page per command (callsync-sync(1), …) written there.
pub(super) fn man(out: Option<&Path>) -> Result<ExitCode> {
    let mut command = command().disable_help_subcommand(true);
    command.build();
    match out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .context("cannot render the man page")?;
            print_out(String::from_utf8_lossy(&page))?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
            write_pages(command, dir)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `command`'s page and those of its subcommands, each path printed once written.
fn write_pages(command: clap::Command, dir: &Path) -> Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let page = clap_mangen::Man::new(command);
    let path = page
        .generate_to(dir)
        .with_context(|| format!("cannot write a man page into {}", dir.display()))?;
    print_out(format_args!("{}\n", path.display()))
}
