//! What the walker reads of a page: its rows' keys and what the response says beside them.

use uuid::Uuid;

use crate::service::Timestamp;

/// The key of one listed row: all the walker needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowKey {
    pub uid: Uuid,
    pub updated_at: Timestamp,
}

/// What a response says beside its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageFacts {
    /// `pagination.total_count`: the rows at or after the request's `updated_after`.
    pub total_count: Option<u64>,
    /// The service's clock when it answered (its `Date` header: whole seconds, truncated).
    pub served_at: Option<Timestamp>,
}

pub(super) fn uids(rows: &[RowKey]) -> Vec<Uuid> {
    rows.iter().map(|r| r.uid).collect()
}

/// Rows of the page at `at` (they come first: the page is in order and starts at `at`).
pub(super) fn count_at(at: Timestamp, rows: &[RowKey]) -> usize {
    rows.iter().filter(|r| r.updated_at == at).count()
}
