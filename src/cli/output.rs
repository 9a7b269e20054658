//! Writing to stdout: the one writer that survives a reader that has gone.

use std::io::Write as _;

use anyhow::{Context, Result};

/// Writes `text` to stdout. A reader that has gone (`| head -1`, `| true`) is no error: what
/// it did not read is dropped and the command ends with its own outcome (`println!` would
/// panic). Any other failure to write (a full disk under `> file`) is an error.
pub(crate) fn print_out(text: impl std::fmt::Display) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match write!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}
