//! Why a walk stops: a page the service should not have sent (invariant 6 of `cursor.rs`), or
//! a tie group that would not settle or could not be proven read whole (invariants 2 and 4).

use uuid::Uuid;

use super::cover::{self, Incomplete};
use crate::service::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("page {page} after {after} has {got} rows, more than the {asked} asked for")]
    PageTooLarge {
        after: Timestamp,
        page: u32,
        got: usize,
        asked: u32,
    },
    #[error(
        "page {page} after {after} is not in updated_at order (row {uid} at {at} follows {previous})"
    )]
    OutOfOrder {
        after: Timestamp,
        page: u32,
        uid: Uuid,
        at: Timestamp,
        previous: Timestamp,
    },
    #[error(
        "page {page} after {after} holds row {uid} updated at {at}, before the requested updated_after"
    )]
    BeforeCursor {
        after: Timestamp,
        page: u32,
        uid: Uuid,
        at: Timestamp,
    },
    #[error(
        "page {page} after {after} returned the same rows as page {previous}: the service ignores `page`, so the walk makes no progress"
    )]
    PageIgnored {
        after: Timestamp,
        page: u32,
        previous: u32,
    },
    #[error(
        "a page ending at {at} left at least {promised} calls at or after {at} by the service's own count, but the answer from {at} counted {got}: a call stamped {at} was listed ahead of calls it hid (a stamp ahead of the order) — the checkpoint stays at {checkpoint}, and the next pass reads from there again"
    )]
    CountShort {
        at: Timestamp,
        promised: u64,
        got: u64,
        checkpoint: Timestamp,
    },
    #[error(
        "the {size} calls sharing updated_at {at} did not settle after {scans} scans ({pages} pages in the last); they keep changing while being read — the checkpoint stays at {at}, the next pass retries"
    )]
    TieUnsettled {
        at: Timestamp,
        size: usize,
        scans: u32,
        pages: u32,
    },
    #[error(
        "the {size} calls sharing updated_at {at} could not be proven read whole ({read} read): {why}; such a group is read until all its calls have shown while it did not change, as the service may order calls sharing an updated_at differently from one request to the next (or calls entered the group long after its instant) — the checkpoint stays at {at} and the next pass reads the group again"
    )]
    GroupIncomplete {
        at: Timestamp,
        /// The group's size as the service's pages showed it (the calls read, when no page
        /// showed its end).
        size: u32,
        /// Distinct calls read at `at` in the last window.
        read: u32,
        why: Incomplete,
    },
}

impl From<cover::Failure> for WalkError {
    fn from(f: cover::Failure) -> Self {
        WalkError::GroupIncomplete {
            at: f.at,
            size: f.size,
            read: f.read,
            why: f.why,
        }
    }
}
