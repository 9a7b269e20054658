//! callsync: an incremental sync daemon that exports the call results of the Outbound Call
//! Campaign Service into a local SQLite warehouse.
//!
//! Layout (dependencies point down only):
//! - `config`: the validated, typed configuration;
//! - `api`: the service's models, timestamps, HTTP client, auth and retries;
//! - `simulator`: a faithful in-process implementation of the service (tests, demo, benches);
//!   product modules never import it.

pub mod api;
pub mod cli;
pub mod config;
pub mod simulator;
pub mod sync;
pub mod telemetry;
pub mod warehouse;
