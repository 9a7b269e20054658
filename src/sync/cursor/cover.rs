//! Covering a tie group whose order the service does not keep: its pages read again, with
//! other page sizes, until every call of the group has been seen in one quiet window.
//!
//! The spec orders `updated_after` lists by `updated_at` and says nothing of the order among
//! calls sharing one. A service sorting on that key alone (`ORDER BY updated_at LIMIT …
//! OFFSET …`) may order a tie differently on every request, or by the `LIMIT` of each (a
//! top-N sort), so the pages of a group need not partition it. What stays true whatever
//! the tie order: the *instants* at each position of one query's list. So, within a window
//! in which nothing changes:
//! - the group's size is exact: a page that shows the group ending (its rows at `T`, then
//!   later ones, or none) at page `p` of size `s` after `m` rows of the group gives
//!   `(p − 1)·s + m`, every position before it being at `T` (the list starts at `T`);
//! - every uid read at `T` is in the group (nothing left it).
//!
//! So once the distinct uids read at `T` number the group's size, the walk holds every call
//! of the group. The window is proven quiet as a quiet run is (see `run.rs`): the same
//! `total_count` on every page, then one request for anything stamped since the window's
//! first `Date` minus the late-commit window, answering nothing. A window that is not quiet
//! is dropped and the group read again in a new one; a group that cannot be covered within
//! the page budget, or in `WalkLimits::max_cover_windows` windows, or that cannot be
//! proven at all (no `Date` or `total_count`, or younger than the late-commit window) ends
//! the walk with `WalkError::GroupIncomplete`, the checkpoint held at `T`.
//!
//! Each sweep reads the group's pages with another page size: a service whose tie order
//! depends on `LIMIT` shows other calls for every other size, and one that orders anew on
//! every request shows other calls anyway. With `n` calls in pages of 100, a request order
//! drawn anew misses a given call on each of the `n / 100` pages with probability
//! `1 − 100/n`, so the `WalkLimits::cover_sweeps` sweeps leave a call unread with
//! probability `(1 − 100/n)^(sweeps·n/100) ≈ e^(−sweeps)`: for 16 sweeps, about 1 in 9
//! million per call.

use std::collections::HashSet;

use uuid::Uuid;

use super::page::{Exit, PageFacts, RowKey, count_at, exit_through, len_u32};
use super::run::Quiet;
use crate::service::{MAX_PAGE_SIZE, Timestamp};

/// How far a cover may go (from the walk's limits).
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Windows opened before giving up on a group that changes under each.
    pub(super) windows: u32,
    /// Sweeps per window.
    pub(super) sweeps: u32,
}

/// A group that could not be proven read whole.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) at: Timestamp,
    pub(super) size: u32,
    pub(super) read: u32,
    pub(super) why: Incomplete,
}

/// Page sizes of successive sweeps: primes below the service's maximum, so that no two
/// sweeps ask for the same `LIMIT` at the same page (a top-N sort answers a repeated
/// `LIMIT` alike).
const SWEEP_SIZES: [u32; 16] = [
    MAX_PAGE_SIZE,
    97,
    89,
    83,
    79,
    73,
    71,
    67,
    61,
    59,
    53,
    47,
    43,
    41,
    37,
    31,
];

/// The group at `at` being covered.
#[derive(Debug)]
pub(super) struct Cover {
    pub(super) at: Timestamp,
    /// What the window's first page said: its `total_count` every page must repeat, and the
    /// instant from which the closing check asks.
    quiet: Option<Quiet>,
    /// Distinct uids read at `at` in this window.
    read: HashSet<Uuid>,
    /// The group's size, once a page of this window showed where it ends.
    size: Option<u32>,
    /// The most calls the walk had seen in the group before covering it: its size for an
    /// error raised before a page showed where it ends.
    known: u32,
    /// How to leave the group, from the page that showed its end.
    exit: Option<Exit>,
    /// Sweeps started, in all windows (they index [`SWEEP_SIZES`]).
    sweeps: u32,
    pub(super) page: u32,
    /// Windows opened so far.
    windows: u32,
    /// Whether the next request is the window's closing check.
    pub(super) checking: bool,
}

/// Where a cover's page leads.
pub(super) enum CoverStep {
    Next(Cover),
    /// The group is read whole: leave it.
    Done(Exit),
    Failed(Failure),
}

impl Cover {
    /// A cover of the group at `at`, of which the walk had seen `known` calls.
    pub(super) fn new(at: Timestamp, known: u32) -> Cover {
        Cover {
            at,
            quiet: None,
            read: HashSet::new(),
            size: None,
            known,
            exit: None,
            sweeps: 1,
            page: 1,
            windows: 1,
            checking: false,
        }
    }

    /// The page size of the current sweep.
    pub(super) fn page_size(&self) -> u32 {
        SWEEP_SIZES[(self.sweeps as usize - 1) % SWEEP_SIZES.len()]
    }

    /// Takes the answer to [`Cover::page`] (or to the closing check).
    pub(super) fn step(
        mut self,
        rows: &[RowKey],
        facts: PageFacts,
        late_commits: std::time::Duration,
        limits: Limits,
    ) -> CoverStep {
        if self.checking {
            return self.after_check(rows, facts, limits);
        }
        let opening = self.quiet.is_none();
        if opening {
            self.quiet = Quiet::of(facts, late_commits);
        } else if self.quiet.map(|q| q.total_count) != facts.total_count {
            // Calls entered the group or were created: positions moved under the window.
            return self.new_window(limits);
        }
        let size = self.page_size();
        let tie_rows = count_at(self.at, rows);
        self.read.extend(
            rows.iter()
                .filter(|r| r.updated_at == self.at)
                .map(|r| r.uid),
        );
        if opening {
            match self.quiet {
                None => return CoverStep::Failed(self.incomplete(Incomplete::NoFacts)),
                Some(q) if q.since <= self.at => {
                    return CoverStep::Failed(self.incomplete(Incomplete::Young));
                }
                Some(_) => {}
            }
        }
        let full_of_group = rows.len() == size as usize && tie_rows == rows.len();
        if full_of_group {
            self.page += 1;
            return self.within_budget(limits);
        }
        // This page shows where the group ends: every position before it is at `at`.
        let before = (self.page - 1).saturating_mul(size);
        self.size = Some(before.saturating_add(len_u32(tie_rows)));
        self.exit = Some(if rows.is_empty() {
            Exit::End(self.at)
        } else {
            exit_through(self.at, rows, rows.len() == size as usize)
        });
        if self.size.is_some_and(|n| len_u32(self.read.len()) >= n) {
            self.checking = true;
            return CoverStep::Next(self);
        }
        // Another sweep, with another page size, over the pages the group fills.
        self.sweeps += 1;
        self.page = 1;
        self.within_budget(limits)
    }

    /// The request that closes the window: anything stamped since it opened.
    pub(super) fn check_since(&self) -> Timestamp {
        self.quiet.map_or(self.at, |q| q.since)
    }

    fn after_check(mut self, rows: &[RowKey], facts: PageFacts, limits: Limits) -> CoverStep {
        self.checking = false;
        let read = len_u32(self.read.len());
        match (super::run::is_quiet(rows, facts), self.exit, self.size) {
            // Nothing moved in the window: what it read at `at` is in the group, and there
            // are as many as the group holds.
            (true, Some(exit), Some(size)) if read == size => CoverStep::Done(exit),
            _ => self.new_window(limits),
        }
    }

    /// Something moved under the window: read the group again in a new one.
    fn new_window(mut self, limits: Limits) -> CoverStep {
        if self.windows >= limits.windows {
            let windows = self.windows;
            return CoverStep::Failed(self.incomplete(Incomplete::KeptChanging { windows }));
        }
        self.windows += 1;
        self.sweeps += 1;
        self.quiet = None;
        self.read.clear();
        self.size = None;
        self.exit = None;
        self.page = 1;
        self.checking = false;
        CoverStep::Next(self)
    }

    fn within_budget(self, limits: Limits) -> CoverStep {
        if self.sweeps > limits.sweeps * self.windows {
            let sweeps = self.sweeps;
            return CoverStep::Failed(self.incomplete(Incomplete::NotShown { sweeps }));
        }
        // A sweep asking past every row the service counts is being answered with full
        // pages it does not have: a service ignoring `page`.
        let counted = self.quiet.map_or(0, |q| q.total_count);
        if u64::from(self.page - 1) * u64::from(self.page_size()) > counted {
            let sweeps = self.sweeps;
            return CoverStep::Failed(self.incomplete(Incomplete::NotShown { sweeps }));
        }
        CoverStep::Next(self)
    }

    fn incomplete(&self, why: Incomplete) -> Failure {
        let read = len_u32(self.read.len());
        Failure {
            at: self.at,
            size: self.size.unwrap_or(read.max(self.known)),
            read,
            why,
        }
    }
}

/// Why a group read under an unstable tie order could not be proven whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incomplete {
    /// The sweeps ran out before every call had shown.
    NotShown { sweeps: u32 },
    /// The schedule changed under every window.
    KeptChanging { windows: u32 },
    /// The group is younger than the late-commit window by the service's clock.
    Young,
    /// No `Date` header or no `total_count` to prove a window quiet by.
    NoFacts,
}

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Incomplete::NotShown { sweeps } => write!(
                f,
                "{sweeps} reads of its pages with other page sizes did not show them all"
            ),
            Incomplete::KeptChanging { windows } => write!(
                f,
                "the schedule changed during each of {windows} reads of the group, so none proves it whole (it settles once the schedule is quiet for a moment)"
            ),
            Incomplete::Young => f.write_str(
                "the group is younger than sync.lookback by the service's clock, so no read of it can be proven quiet yet (a pass a few seconds later can)",
            ),
            Incomplete::NoFacts => f.write_str(
                "the service's answers carry no Date header or no pagination.total_count to prove a read of it whole",
            ),
        }
    }
}
