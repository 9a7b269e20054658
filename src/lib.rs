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
pub mod upload;
pub mod warehouse;
