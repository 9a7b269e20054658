//! `callsync completions SHELL` and `callsync man`: generated from the clap definition
//! ([`super::args::command`]), so they name every command and option the binary has. The man
//! pages add EXIT STATUS, ENVIRONMENT and FILES (from the lists `--help` prints too) where
//! clap_mangen alone would put the help's footer under EXTRA.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::args::{ENVIRONMENT, EXIT_CODES, READS_NO_CONFIG, command};
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
            let page = render(&command, Page::Main).context("cannot render the man page")?;
            print_out(String::from_utf8_lossy(&page))?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory {}", dir.display()))?;
            write_pages(&command, Page::Main, dir)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Which page: callsync(1) itself, or a command's, which does or does not read a
/// configuration (its ENVIRONMENT and FILES say so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    Main,
    Command { reads_config: bool },
}

impl Page {
    fn reads_config(self) -> bool {
        match self {
            Page::Main => true,
            Page::Command { reads_config } => reads_config,
        }
    }

    /// The page of `sub`, a subcommand of this page's command.
    fn of(self, sub: &clap::Command) -> Page {
        let reads_config = match self {
            Page::Main => !READS_NO_CONFIG.contains(&sub.get_name()),
            Page::Command { reads_config } => reads_config,
        };
        Page::Command { reads_config }
    }
}

/// `command`'s page and those of its subcommands, each path printed once written.
fn write_pages(command: &clap::Command, page: Page, dir: &Path) -> Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub, page.of(sub), dir)?;
    }
    let path = dir.join(clap_mangen::Man::new(command.clone()).get_filename());
    let text = render(command, page).context("cannot render a man page")?;
    std::fs::write(&path, text)
        .with_context(|| format!("cannot write the man page {}", path.display()))?;
    print_out(format_args!("{}\n", path.display()))
}

/// clap_mangen's sections (its EXTRA, the help's footer, left out), then callsync's own.
fn render(command: &clap::Command, page: Page) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    append(&mut out, |w| man.render_name_section(w))?;
    append(&mut out, |w| man.render_synopsis_section(w))?;
    append(&mut out, |w| man.render_description_section(w))?;
    if command.get_arguments().any(|arg| !arg.is_hide_set()) {
        append(&mut out, |w| man.render_options_section(w))?;
    }
    if command.get_subcommands().any(|sub| !sub.is_hide_set()) {
        append(&mut out, |w| man.render_subcommands_section(w))?;
    }
    section(&mut out, "EXIT STATUS", &EXIT_CODES)?;
    let variables: Vec<(&str, &str)> = ENVIRONMENT
        .iter()
        .filter(|variable| page.reads_config() || !variable.configuration)
        .map(|variable| (variable.name, variable.meaning))
        .collect();
    section(&mut out, "ENVIRONMENT", &variables)?;
    if page.reads_config() {
        section(&mut out, "FILES", &FILES)?;
    }
    if page != Page::Main {
        section(&mut out, "SEE ALSO", &[("callsync(1)", "every command")])?;
    }
    if command.get_version().is_some() {
        append(&mut out, |w| man.render_version_section(w))?;
    }
    Ok(out)
}

/// The lines clap_mangen starts every rendering with (the apostrophe string `Aq`): once a page.
const PREAMBLE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// A section rendered by clap_mangen, after the page's first, without its preamble again.
fn append(
    out: &mut Vec<u8>,
    render: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut section = Vec::new();
    render(&mut section)?;
    let rest = section
        .strip_prefix(PREAMBLE.as_bytes())
        .unwrap_or(&section);
    out.extend_from_slice(rest);
    Ok(())
}

/// The files callsync reads and writes where README's steps install it.
const FILES: [(&str, &str); 6] = [
    (
        "./config/callsync.toml, /etc/callsync/callsync.toml",
        "the configuration, the first of them that exists, when neither --config nor \
         CALLSYNC_CONFIG names one",
    ),
    (
        "/etc/callsync/access_token",
        "the token, readable by root only; the systemd units pass it on as the credential \
         access_token (client_secret for OAuth, warehouse_password for PostgreSQL)",
    ),
    (
        "/etc/callsync/callsync.env",
        "CALLSYNC_* variables the systemd units read, one NAME=value a line",
    ),
    (
        "/var/lib/callsync/callsync.db",
        "the warehouse under the systemd units (warehouse.path), with its -wal and -shm \
         beside it; the units' StateDirectory=, the one directory they may write",
    ),
    (
        "/var/lib/callsync/backups",
        "scheduled backups ([backup] dir), where the systemd unit may write them",
    ),
    (
        "/etc/systemd/system/callsync.service, /etc/systemd/system/callsync-backfill@.service",
        "the daemon's unit, and the one-shot backfill of the schedule its instance names",
    ),
];

/// A section of `(term, meaning)` items, as man(7)'s tagged paragraphs.
fn section(out: &mut Vec<u8>, title: &str, items: &[(&str, &str)]) -> std::io::Result<()> {
    writeln!(out, ".SH \"{title}\"")?;
    for (term, meaning) in items {
        writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff(term), roff(meaning))?;
    }
    Ok(())
}

/// `text` as roff prints it: backslashes and hyphens escaped, no line read as a request.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_of(path: &[&str]) -> String {
        let mut command = command().disable_help_subcommand(true);
        command.build();
        let mut page = Page::Main;
        let mut current = command;
        for name in path {
            let sub = current.find_subcommand(name).expect("subcommand").clone();
            page = page.of(&sub);
            current = sub;
        }
        String::from_utf8(render(&current, page).expect("rendered")).expect("UTF-8")
    }

    #[test]
    fn pages_have_exit_status_environment_and_files_and_no_extra() {
        let main = page_of(&[]);
        for heading in [
            ".SH \"EXIT STATUS\"\n",
            ".SH \"ENVIRONMENT\"\n",
            ".SH \"FILES\"\n",
        ] {
            assert!(main.contains(heading), "{heading} missing:\n{main}");
        }
        assert!(!main.contains(".SH EXTRA"), "{main}");
        assert_eq!(main.matches(PREAMBLE).count(), 1, "{main}");
        assert!(main.starts_with(PREAMBLE), "{main}");
        for (code, _) in EXIT_CODES {
            assert!(main.contains(&format!(".TP\n\\fB{code}\\fR\n")), "{code}");
        }
        assert!(main.contains("\\fBCALLSYNC_CONFIG\\fR"), "{main}");
        assert!(main.contains(", /etc/callsync/callsync.toml\\fR"), "{main}");

        let status = page_of(&["status"]);
        assert!(status.contains(".SH \"EXIT STATUS\"\n"), "{status}");
        assert!(status.contains(".SH \"FILES\"\n"), "{status}");
        assert!(status.contains("callsync(1)"), "{status}");
        let show = page_of(&["checkpoint", "show"]);
        assert!(show.contains(".SH \"FILES\"\n"), "{show}");

        // A command that reads no configuration names no configuration file nor variable.
        let simulate = page_of(&["simulate"]);
        assert!(simulate.contains(".SH \"ENVIRONMENT\"\n"), "{simulate}");
        assert!(!simulate.contains(".SH \"FILES\""), "{simulate}");
        assert!(!simulate.contains("CALLSYNC_CONFIG"), "{simulate}");
        assert!(simulate.contains("RUST_LOG"), "{simulate}");
    }

    #[test]
    fn roff_text_is_escaped() {
        assert_eq!(roff("-q/-v"), "\\-q/\\-v");
        assert_eq!(roff("a\\b"), "a\\eb");
        assert_eq!(roff(".hidden"), "\\&.hidden");
        assert_eq!(roff("'quoted'"), "\\&'quoted'");
    }
}
