//! The service's API over HTTP: the client with auth, rate limiting and retries.
//!
//! Only this module talks to the service (the daemon's metrics server and the simulator serve
//! HTTP of their own); the service's nouns (models, timestamps, filters, limits)
//! are in `service`, shared with the simulator so the two sides cannot drift apart. It knows
//! nothing of SQLite or of how pages are walked.

mod auth;
mod body;
mod client;
mod error;
mod exchange;
#[cfg(test)]
pub(crate) mod fake;
mod http_date;
mod invalid_utf8;
mod limiter;
mod observe;
mod redact;
mod retry;
#[cfg(test)]
mod tests;
mod write;

pub use client::{ApiClient, ListQuery, Listed};
pub use error::ApiError;
pub use limiter::PassSlot;
pub use observe::RequestObserver;
pub use retry::Counters;
