//! A quiet run: tie groups paged by page number in one query while nothing moves, proven
//! by one small request at its end (see the walker's module doc).

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;

use super::page::{PageFacts, RowKey, count_at, uids};
use crate::service::Timestamp;

/// The longest run: pages read (and written) before the checkpoint may move. A crash
/// replays at most this many pages, and the service pages up to this far past the run's
/// instant; each run past the first re-reads one page (its start), so longer runs re-read
/// less.
const MAX_RUN_PAGES: u32 = 32;

/// The shortest run after the first (which ends at its first group boundary, so that a
/// service that changes under it costs one group read again, as with the two scans).
const MIN_RUN_PAGES: u32 = 4;

/// A run may end where at most this share of a page (1/10) shares its last instant: where
/// the ties stop, going back to keyset paging re-reads that few rows.
const CHEAP_ANCHOR_SHARE: usize = 10;

/// What a run's first page says, for the quiet check that ends it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quiet {
    /// The service's clock at the run's first page, minus the late-commit window: any
    /// change made visible since is stamped at or after it.
    pub(super) since: Timestamp,
    /// `total_count` of the run's first page; every page of the run repeats it unless rows
    /// entered it (or calls before it changed).
    pub(super) total_count: u64,
}

impl Quiet {
    /// `None` without a `Date` or a `total_count`: nothing to prove quiet by.
    pub(super) fn of(facts: PageFacts, late_commits: Duration) -> Option<Quiet> {
        let served_at = facts.served_at?;
        Some(Quiet {
            since: served_at.saturating_sub(late_commits),
            total_count: facts.total_count?,
        })
    }
}

#[derive(Debug)]
pub(super) struct Run {
    /// The query's `updated_after`: the instant the run started from, the checkpoint.
    pub(super) after: Timestamp,
    quiet: Quiet,
    /// The page to ask for next.
    pub(super) page: u32,
    /// The last instant read (the previous page's last row).
    newest: Timestamp,
    /// The previous page's uids: a service ignoring `page` repeats them.
    previous: Vec<Uuid>,
    /// Pages after which the run ends at its next group boundary.
    pages: u32,
    /// Every (uid, instant) the run has read. The run reads each position of one query's
    /// list once; with the count unchanged, a call read twice at one instant means the
    /// service ordered a tie differently from one page to the next, so another call of it
    /// was on no page. (A call read again at a later instant changed meanwhile: the quiet
    /// check finds that.)
    read: HashSet<(Uuid, Timestamp)>,
}

/// Where a run's page leads.
pub(super) enum RunStep {
    Next(Run),
    /// Ask whether anything was stamped since `since`: the run from `after` is over, `last`
    /// is the instant its last page ended at, `full` whether data may follow.
    Check {
        after: Timestamp,
        since: Timestamp,
        last: Timestamp,
        full: bool,
    },
    /// The run cannot be proven quiet: read again from this instant (where it began).
    FallBack(Timestamp),
    /// A call read twice with nothing else moving: the service's order within a tie is not
    /// stable, so the run's pages did not partition its groups. Read again from this instant
    /// (where it began), covering each group (`cover.rs`).
    Unstable(Timestamp),
}

impl Run {
    /// A run from `after`, whose page 1 (`first`, full and all at `after`) was just read.
    pub(super) fn start(after: Timestamp, first: &[RowKey], quiet: Quiet, pages: u32) -> Run {
        Run {
            after,
            quiet,
            page: 2,
            newest: after,
            previous: uids(first),
            pages,
            read: first.iter().map(|r| (r.uid, r.updated_at)).collect(),
        }
    }

    /// Takes page `self.page` of the run.
    pub(super) fn step(
        mut self,
        rows: &[RowKey],
        full: bool,
        facts: PageFacts,
        page_size: u32,
    ) -> RunStep {
        let listed = u64::from(self.page - 1) * u64::from(page_size) + rows.len() as u64;
        let current = uids(rows);
        // Rows entered (or calls before the run's instant changed), more rows than the
        // service counts, or the previous page again (a service ignoring `page`): offsets
        // cannot be trusted, and the two scans (with their own checks) take over.
        if facts.total_count != Some(self.quiet.total_count)
            || listed > self.quiet.total_count
            || (full && current == self.previous)
        {
            return RunStep::FallBack(self.after);
        }
        if !rows.iter().all(|r| self.read.insert((r.uid, r.updated_at))) {
            return RunStep::Unstable(self.after);
        }
        let last = rows.last().map_or(self.newest, |r| r.updated_at);
        let boundary = last > self.newest;
        let ends_here =
            !full || (boundary && (self.page >= self.pages || cheap_anchor(rows, last, page_size)));
        if !ends_here {
            self.page += 1;
            self.newest = last;
            self.previous = current;
            return RunStep::Next(self);
        }
        // The check asks for anything stamped since `since`: rows read at or after it
        // would answer it themselves.
        if self.quiet.since <= last {
            return RunStep::FallBack(self.after);
        }
        RunStep::Check {
            after: self.after,
            since: self.quiet.since,
            last,
            full,
        }
    }
}

/// Whether the rows at `last` start on this page and are few: keyset paging from `last`
/// reads them again, and little else.
fn cheap_anchor(rows: &[RowKey], last: Timestamp, page_size: u32) -> bool {
    let started_here = rows.first().is_some_and(|r| r.updated_at < last);
    started_here && count_at(last, rows) * CHEAP_ANCHOR_SHARE <= page_size as usize
}

/// Whether a quiet check's answer shows nothing stamped since the run began.
pub(super) fn is_quiet(rows: &[RowKey], facts: PageFacts) -> bool {
    rows.is_empty() && facts.total_count.is_none_or(|n| n == 0)
}

/// The next run's length after one that proved quiet.
pub(super) fn next_run_pages(pages: u32) -> u32 {
    pages.saturating_mul(2).clamp(MIN_RUN_PAGES, MAX_RUN_PAGES)
}
