//! What the walker reads of a page: its rows' keys and what the response says beside them.

use uuid::Uuid;

use crate::service::Timestamp;

/// The key of one listed row: all the walker needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowKey {
    pub uid: Uuid,
    pub updated_at: Timestamp,
}

impl RowKey {
    fn min_by_stamp(self, other: RowKey) -> RowKey {
        if other.updated_at < self.updated_at {
            other
        } else {
            self
        }
    }
}

/// What a response says beside its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageFacts {
    /// `pagination.total_count`: the rows at or after the request's `updated_after`.
    pub total_count: Option<u64>,
    /// The service's clock when it answered (its `Date` header: whole seconds, truncated).
    pub served_at: Option<Timestamp>,
    /// From this instant on, a row's stamp is later than the service's clock when it
    /// answered: such a row is stored, but is no position (invariant 7).
    pub future: Option<Timestamp>,
}

/// Of the calls the answer lists twice, the earliest first listing.
pub(super) fn listed_twice(rows: &[RowKey]) -> Option<RowKey> {
    let mut seen = std::collections::HashMap::with_capacity(rows.len());
    let mut earliest: Option<RowKey> = None;
    for row in rows {
        if let Some(first) = seen.insert(row.uid, *row) {
            earliest = Some(earliest.map_or(first, |e| e.min_by_stamp(first)));
        }
    }
    earliest
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
    /// Keyset paging resumes from `at` (the last row of the page that ended the group); the
    /// checkpoint follows once an answer from `at` counts at least `promised` calls
    /// (invariant 7), at once when the answer that showed the exit had no count.
    Continue {
        at: Timestamp,
        promised: Option<u64>,
    },
}

/// Where an answer's rows stand in their query: the position of its first row, and the
/// query's `total_count` as the answer gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) first: u32,
    pub(super) total_count: Option<u64>,
}

impl Place {
    pub(super) fn of(page: u32, page_size: u32, facts: PageFacts) -> Place {
        Place {
            first: page.saturating_sub(1).saturating_mul(page_size),
            total_count: facts.total_count,
        }
    }
}

/// Leaving the group from a page that shows its end next to what follows: keyset paging
/// resumes from the page's last row, or the walk ends there when the page is the last.
pub(super) fn exit_through(at: Timestamp, rows: &[RowKey], full: bool, place: Place) -> Exit {
    let last = rows.last().map_or(at, |r| r.updated_at);
    if full {
        let before = u64::from(place.first) + before_last(rows) as u64;
        Exit::Continue {
            at: last,
            promised: place.total_count.map(|n| n.saturating_sub(before)),
        }
    } else {
        Exit::End(last)
    }
}

/// Rows of an ordered page stamped before its last row's instant.
pub(super) fn before_last(rows: &[RowKey]) -> usize {
    let last = rows.last().map(|r| r.updated_at);
    rows.iter().filter(|r| Some(r.updated_at) < last).count()
}

/// An exit learnt some requests ago, taken now: the walk reads on from it rather than end
/// there, since calls that changed meanwhile are stamped after it. What the earlier answer
/// promised still holds: a count from an instant only grows.
pub(super) fn resumed(exit: Exit) -> Exit {
    match exit {
        // The end of the data: nothing listed after `at`, so nothing promised.
        Exit::End(at) => Exit::Continue { at, promised: None },
        continued @ Exit::Continue { .. } => continued,
    }
}

/// A count of rows as a list position (saturating, which no real group reaches).
pub(super) fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
