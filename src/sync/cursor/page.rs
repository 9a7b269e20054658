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

/// Where the walk goes once a tie group has settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    /// Nothing after the group: the walk is over, the cursor is this instant.
    End(Timestamp),
    /// Keyset paging resumes from this instant (the last row of the page that ended the group).
    Continue(Timestamp),
}

/// Leaving the group from a page that shows its end next to what follows: keyset paging
/// resumes from the page's last row, or the walk ends there when the page is the last.
pub(super) fn exit_through(at: Timestamp, rows: &[RowKey], full: bool) -> Exit {
    let last = rows.last().map_or(at, |r| r.updated_at);
    if full {
        Exit::Continue(last)
    } else {
        Exit::End(last)
    }
}

/// An exit learnt some requests ago, taken now: the walk reads on from it rather than end
/// there, since calls that changed meanwhile are stamped after it.
pub(super) fn resumed(exit: Exit) -> Exit {
    match exit {
        Exit::End(at) | Exit::Continue(at) => Exit::Continue(at),
    }
}

/// A count of rows as a list position (saturating, which no real group reaches).
pub(super) fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
