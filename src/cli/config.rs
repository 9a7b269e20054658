//! `callsync config`: the effective configuration, each value with its source, secrets
//! redacted (`config::effective`).

use std::process::ExitCode;

use anyhow::Result;

use super::output::print_out;
use crate::config::{Config, Env, effective};

/// Prints the configuration `config` (loaded already: a configuration error has ended the
/// command with exit code 2 and `check`'s message) as text, or as JSON with `json`.
pub(super) fn run(config: &Config, json: bool) -> Result<ExitCode> {
    let shown = effective::effective(config, &Env::from_process()?)?;
    if json {
        let text = serde_json::to_string_pretty(&effective::to_json(&shown))?;
        print_out(format_args!("{}\n", crate::untrusted::json_safe(&text)))?;
    } else {
        // Values are JSON text already; a path may still hold a character a terminal acts on.
        print_out(crate::untrusted::json_safe(&effective::render(&shown)))?;
    }
    Ok(ExitCode::SUCCESS)
}
