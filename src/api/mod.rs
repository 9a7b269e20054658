//! The service's API: models, timestamps, filters, and the HTTP client with auth and retries.
//!
//! Only this module knows the service's JSON and HTTP; it knows nothing of SQLite or of how
//! pages are walked. The simulator reuses the models so the two sides cannot drift apart.

mod auth;
mod client;
mod error;
pub mod filter;
mod limiter;
pub mod models;
mod observe;
mod retry;
pub mod timestamp;
mod write;

pub use client::{ApiClient, ListQuery, Listed, MAX_PAGE_SIZE};
pub use error::ApiError;
pub use filter::ListFilter;
pub use models::*;
pub use observe::RequestObserver;
pub use retry::Counters;
pub use timestamp::{Timestamp, TimestampError};
pub use write::{FieldProblem, MAX_BULK, PHONE_DIGITS, new_call_problems};
