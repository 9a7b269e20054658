//! The service's API: models, timestamps, filters, and (later) the HTTP client.
//!
//! Only this module knows the service's JSON and HTTP. The simulator reuses the models so the
//! two sides cannot drift apart.

pub mod filter;
pub mod models;
pub mod timestamp;

pub use filter::ListFilter;
pub use models::*;
pub use timestamp::{Timestamp, TimestampError};
