//! A quiet run: pages of one query (`updated_after = after`) read by page number while
//! nothing moves under them, proven by counts of the calls stamped since an instant `Q`
//! (see the walker's module doc). The pages of a run are known before any of them answers,
//! so they may be asked for at once (`PageWalker::requests_ahead`).

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;

use super::page::{PageFacts, RowKey, uids};
use crate::service::Timestamp;

/// The longest run: pages read (and written) before the checkpoint may move. A crash
/// replays at most this many pages, and a run's pages are asked for at once, so it is
/// also how many of one walk's requests may be in flight together.
pub(super) const MAX_RUN_PAGES: u32 = 64;

/// The shortest run after the first (which ends at its first group boundary, so that a
/// service that changes under it costs one group read again, as with the two scans).
pub(super) const MIN_RUN_PAGES: u32 = 4;

/// What a run's first page says, for the quiet check that ends it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quiet {
    /// The service's clock at the page, minus the late-commit window: any change made
    /// visible since is stamped at or after it.
    pub(super) since: Timestamp,
    /// `total_count` of the page; every page of one query repeats it unless rows entered it
    /// (or calls before it changed).
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

/// How many calls the service stamped at or after `since`, as a response it gave before
/// the run's first page was asked for counted them (`assumed`: none, taken for granted,
/// which only a later count of none confirms).
///
/// Nothing lowers that count while `since` is at or before the service's clock less the
/// late-commit window: calls are not deleted, and a call that changes is stamped at or
/// after `since` again. So two equal counts prove that no call stamped before `since`
/// changed between them and none entered before it — the positions of every call before
/// `since` in any list query stayed where they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opener {
    pub(super) since: Timestamp,
    pub(super) calls: u64,
    pub(super) assumed: bool,
}

impl Opener {
    /// No call stamped since `since` at the run's first page: what a run started from a
    /// page's own clock assumes (its check must then find none).
    pub(super) fn assumed(since: Timestamp) -> Opener {
        Opener {
            since,
            calls: 0,
            assumed: true,
        }
    }

    /// A count of the calls since `since` that a response gave.
    pub(super) fn counted(since: Timestamp, rows: &[RowKey], facts: PageFacts) -> Option<Opener> {
        let calls = facts.total_count.or(rows.is_empty().then_some(0))?;
        Some(Opener {
            since,
            calls,
            assumed: false,
        })
    }

    /// Whether a count taken after every page of a run shows nothing moved since this one.
    pub(super) fn holds(&self, rows: &[RowKey], facts: PageFacts) -> bool {
        Opener::counted(self.since, rows, facts).is_some_and(|now| now.calls == self.calls)
    }
}

#[derive(Debug)]
pub(super) struct Run {
    /// The query's `updated_after`: the instant the run started from, the checkpoint.
    pub(super) after: Timestamp,
    /// The count every page of the run was asked for after (or assumed).
    pub(super) opener: Opener,
    /// `total_count` of the run's first page: every page repeats it unless rows entered.
    total_count: Option<u64>,
    /// The page to ask for next.
    pub(super) page: u32,
    /// The last instant read (the previous page's last row).
    newest: Timestamp,
    /// The previous page's uids: a service ignoring `page` repeats them.
    previous: Vec<Uuid>,
    /// Pages after which the run ends at its next group boundary.
    pages: u32,
    /// Rows the run is expected to find, for asking its pages ahead (`None`: unknown).
    expected: Option<u64>,
    /// Every (uid, instant) the run has read. The run reads each position of one query's
    /// list once; a call read twice at one instant ends the run ([`RunEnd::Repeated`]),
    /// and the closing count tells whether that shows an unstable order. (A call read
    /// again at a later instant changed meanwhile: the quiet check finds that.)
    read: HashSet<(Uuid, Timestamp)>,
}

/// Where a run's page leads.
pub(super) enum RunStep {
    Next(Run),
    /// Count the calls since the opener's instant: the run from `after` is over, and what
    /// that count proves depends on how it ended (`end`).
    Check {
        after: Timestamp,
        opener: Opener,
        end: RunEnd,
    },
    /// The run cannot be proven quiet: read again from this instant (where it began).
    FallBack(Timestamp),
}

/// How a run ended, for the count that closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunEnd {
    /// Every call before `last` was read, if the count holds: `last` is its last page's
    /// last row, or the opener's instant once a page reached it; `full` whether data may
    /// follow; `left` the rows the next run may expect from `last` on.
    Read {
        last: Timestamp,
        full: bool,
        left: Option<u64>,
    },
    /// A call was read twice at one instant. If the count holds, nothing before the
    /// opener's instant moved while the run's pages were answered, in whatever order they
    /// were: each position held one call throughout, so the service ordered a tie
    /// differently from one request to the next. If it moved, calls leaving between two
    /// answers taken out of page order explain the repeat (a call answered on page `k + 1`
    /// first shifts onto page `k` answered later): no verdict, the run is read again.
    Repeated,
}

impl Run {
    /// A run from `after` whose pages are still to be read.
    pub(super) fn new(after: Timestamp, opener: Opener, pages: u32, expected: Option<u64>) -> Run {
        Run {
            after,
            opener,
            total_count: None,
            page: 1,
            newest: after,
            previous: Vec::new(),
            pages,
            expected,
            read: HashSet::new(),
        }
    }

    /// The last page the run plans to read (it reads on, a page at a time, until a group
    /// boundary): its pages up to there may be asked for at once.
    pub(super) fn planned_last_page(&self, page_size: u32) -> u32 {
        let rows = self.total_count.or(self.expected);
        let by_rows = rows.map_or(u32::MAX, |n| {
            u32::try_from(n.div_ceil(u64::from(page_size.max(1)))).unwrap_or(u32::MAX)
        });
        self.pages.min(by_rows).max(self.page)
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
        let total_count = *self
            .total_count
            .get_or_insert(facts.total_count.unwrap_or(0));
        // Rows entered (or calls before the run's instant changed), more rows than the
        // service counts, or the previous page again (a service ignoring `page`): offsets
        // cannot be trusted, and the two scans (with their own checks) take over.
        if facts.total_count != Some(total_count)
            || listed > total_count
            || (full && self.page > 1 && current == self.previous)
        {
            return RunStep::FallBack(self.after);
        }
        if !rows.iter().all(|r| self.read.insert((r.uid, r.updated_at))) {
            return self.check(RunEnd::Repeated);
        }
        let since = self.opener.since;
        let last = rows.last().map_or(self.newest, |r| r.updated_at);
        if last >= since {
            // Calls stamped since the opener's instant may move without the count showing
            // it: the run proves only that every call before that instant was read (they
            // all come before this page's last row), and keyset paging reads on from it. A
            // run that assumed none there is not quiet.
            if self.opener.assumed {
                return RunStep::FallBack(self.after);
            }
            return self.check(RunEnd::Read {
                last: since,
                full: true,
                left: None,
            });
        }
        let boundary = last > self.newest;
        if full && !(boundary && self.page >= self.pages) {
            self.page += 1;
            self.newest = last;
            self.previous = current;
            return RunStep::Next(self);
        }
        // Rows the next run may find from `last` on: the count less those before `last`.
        let at_last = rows.iter().filter(|r| r.updated_at == last).count() as u64;
        let left = total_count.checked_sub(listed.saturating_sub(at_last));
        self.check(RunEnd::Read { last, full, left })
    }

    fn check(self, end: RunEnd) -> RunStep {
        RunStep::Check {
            after: self.after,
            opener: self.opener,
            end,
        }
    }
}

/// The next run's length after one that proved quiet.
pub(super) fn next_run_pages(pages: u32) -> u32 {
    pages.saturating_mul(2).clamp(MIN_RUN_PAGES, MAX_RUN_PAGES)
}
