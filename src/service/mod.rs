//! What the service's interface says (the Outbound Call Campaign Service's spec): the models of
//! its JSON, its timestamps, the list filters it accepts, its page and bulk limits, and what
//! it refuses in a new call. No I/O: `api` speaks it over HTTP, `warehouse` stores it,
//! `simulator` answers with it, `config` names filters in it; all of them point down here.

pub mod filter;
mod misfit;
pub mod models;
mod new_call;
mod page;
pub mod timestamp;

pub use filter::ListFilter;
pub use models::*;
pub use new_call::{FieldProblem, PHONE_DIGITS, new_call_problems};
pub use page::BoundedPage;
pub use timestamp::{Timestamp, TimestampError};

/// The service's maximum page size.
pub const MAX_PAGE_SIZE: u32 = 100;

/// The spec's limit on entries per bulk request.
pub const MAX_BULK: usize = 1_000;
