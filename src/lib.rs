//! callsync: an incremental sync daemon that exports the call results of the Outbound Call
//! Campaign Service into a local SQLite warehouse.
//!
//! Layout (dependencies point down only):
//! - `config`: the validated, typed configuration;
//! - `api`: the service's models, timestamps, HTTP client, auth and retries;
//! - `warehouse`: the SQLite file — schema, page upserts, checkpoints, runs, status;
//! - `sync`: the engine — page walker, pass loop, single writer, per-schedule lock;
//! - `upload`: a contact list (CSV) to calls, checked first, resumable without duplicates;
//! - `daemon`: `callsync run` — cron ticks, no overlapping passes, backoff, shutdown, systemd;
//! - `cli` and `telemetry`: the command line and logging set-up;
//! - `untrusted`: text from the service or a file, made safe to show (control characters
//!   escaped, length capped);
//! - `simulator`: a faithful in-process implementation of the service (tests, demo, benches);
//!   product modules never import it.

pub mod api;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod simulator;
pub mod sync;
pub mod telemetry;
pub mod untrusted;
pub mod upload;
pub mod warehouse;

/// An error and its causes on one line, `a: b: c`, each cause once: for logs, `sync_runs.error`
/// and the CLI's error line. Lives at the root because every layer uses it.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
