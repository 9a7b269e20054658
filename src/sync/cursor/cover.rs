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
//! of the group. The window is proven quiet *for the group*, so that the rest of a live
//! schedule may change meanwhile:
//! - nothing entered it: every page of the window repeats the group's `total_count`;
//! - nothing left it: the *departure count* — `total_count` of one request from
//!   `T + 1 s` — is the same when the window closes as when it opened. A call leaving the
//!   group is stamped at or after the service's clock less the late-commit window, which
//!   must be past `T + 1 s` (else the group is too young: `Incomplete::Young`), so it
//!   raises the count; and nothing lowers it, as no call is stamped back before that
//!   instant. (A whole second, so that a service keeping fewer digits still parses the
//!   instant as after `T`; calls between `T` and it are not the group's.)
//!
//! A window that is not quiet is dropped and the group read again in a new one (the count
//! that closed one opens the next; a window a page's count spoiled reads its sweep to the
//! end, for what the sweep shows of the order, then asks for a new count, as a call created
//! meanwhile raised the departure count too); a group that cannot be covered within the
//! page budget, or in `WalkLimits::max_cover_windows` windows, or that cannot be proven at
//! all (no `Date` or `total_count`, or younger than the late-commit window) ends the walk
//! with `WalkError::GroupIncomplete`, the checkpoint held at `T`.
//!
//! Within one sweep, a stable order never shows a call twice: nothing enters the group
//! (the count), so calls only leave, which moves the calls after them to positions already
//! read. A sweep that does shows the order unstable. A cover that only confirms what two
//! scans read ([`Cover::confirming`]) uses this: sweeps without a repeat stand for the
//! stable order the scans assumed, when the group changes under every window.
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

/// How far after a group's instant its departure count starts: a whole second, which a
/// service writing its timestamps to any precision parses as later than the group.
const COUNTED_FROM: std::time::Duration = std::time::Duration::from_secs(1);

/// Sweeps without a call read twice after which a group that changed under every window
/// is taken to be in a stable order (see [`Cover::confirming`]).
const STABLE_SWEEPS: u32 = 2;

/// The instant from which the departures of the group at `at` are counted: a call leaving
/// it is counted when it is stamped at or after this, which a window's `since` at or after
/// it ensures.
pub(super) fn counted_from(at: Timestamp) -> Timestamp {
    at.saturating_add(COUNTED_FROM)
}

/// Whether the group at `at` is too young to be covered by the service's clock in `quiet`: a
/// call leaving it could be stamped before its departure count's instant.
pub(super) fn too_young(at: Timestamp, quiet: Quiet) -> bool {
    quiet.since < counted_from(at)
}

/// The group at `at` being covered.
#[derive(Debug)]
pub(super) struct Cover {
    pub(super) at: Timestamp,
    /// What the window's first page said: its `total_count` every page must repeat.
    quiet: Option<Quiet>,
    /// A page of the window did not repeat its `total_count`: the window ends with its
    /// sweep, proving nothing.
    spoiled: bool,
    /// The departure count (`total_count` after `at + COUNTED_FROM`) when the window
    /// opened: the same count when it closes shows no call left the group meanwhile.
    departures: Option<u64>,
    /// Distinct uids read at `at` in this window.
    read: HashSet<Uuid>,
    /// Uids read at `at` in the current sweep: one read twice shows an unstable order.
    sweep_read: HashSet<Uuid>,
    /// The group's size, once a page of this window showed where it ends.
    size: Option<u32>,
    /// The most calls the walk had seen in the group before covering it: its size for an
    /// error raised before a page showed where it ends.
    known: u32,
    /// How to leave the group, from the page that showed its end.
    exit: Option<Exit>,
    /// Sweeps started, in all windows (they index [`SWEEP_SIZES`]).
    sweeps: u32,
    /// Sweeps finished without a call read twice.
    clean_sweeps: u32,
    /// Whether a sweep read a call twice: the order is unstable.
    pub(super) shown_unstable: bool,
    /// The exit two scans found, for a group covered only to confirm them (see
    /// [`Cover::confirming`]).
    scanned: Option<Exit>,
    pub(super) page: u32,
    /// Windows opened so far.
    windows: u32,
    /// Whether the next request asks for the departure count instead of a page.
    pub(super) counting: bool,
}

/// Where a cover's page leads.
pub(super) enum CoverStep {
    Next(Cover),
    /// The group is read whole (or, confirming scans, shown in a stable order): leave it;
    /// `unstable` when a sweep showed the order unstable.
    Done {
        exit: Exit,
        unstable: bool,
    },
    Failed(Failure),
}

impl Cover {
    /// A cover of the group at `at`, of which the walk had seen `known` calls.
    pub(super) fn new(at: Timestamp, known: u32) -> Cover {
        Cover {
            at,
            quiet: None,
            spoiled: false,
            departures: None,
            read: HashSet::new(),
            sweep_read: HashSet::new(),
            size: None,
            known,
            exit: None,
            sweeps: 1,
            clean_sweeps: 0,
            shown_unstable: false,
            scanned: None,
            page: 1,
            windows: 1,
            counting: true,
        }
    }

    /// A cover that confirms what two scans read of a group that changed under them, in an
    /// order nothing has shown unstable. The scans read every call of a group in a stable
    /// order; in an unstable one, calls leaving the group can hide a call they missed. So
    /// the group is covered; if it changes under every window, sweeps that never read a
    /// call twice (impossible for a call in an unstable order over two pages or more, see
    /// the module doc) stand for the order, and the walk leaves from the scans' exit.
    pub(super) fn confirming(at: Timestamp, known: u32, scanned: Exit) -> Cover {
        Cover {
            scanned: Some(scanned),
            ..Cover::new(at, known)
        }
    }

    /// The page size of the current sweep.
    pub(super) fn page_size(&self) -> u32 {
        SWEEP_SIZES[(self.sweeps as usize - 1) % SWEEP_SIZES.len()]
    }

    /// The instant the departure count is asked from.
    pub(super) fn counted_from(&self) -> Timestamp {
        counted_from(self.at)
    }

    /// Takes the answer to [`Cover::page`] (or to the departure count).
    pub(super) fn step(
        mut self,
        rows: &[RowKey],
        facts: PageFacts,
        late_commits: std::time::Duration,
        limits: Limits,
    ) -> CoverStep {
        if self.counting {
            return self.after_count(facts, limits);
        }
        let opening = self.quiet.is_none();
        if opening {
            self.quiet = Quiet::of(facts, late_commits);
        } else if !self.spoiled && self.quiet.map(|q| q.total_count) != facts.total_count {
            // Calls entered the group or were created: the window proves nothing. Its sweep
            // is read to the end all the same, for what a sweep shows of the order: a call
            // created after the group moves none of its positions (see `Cover::confirming`).
            // A call created since the departure count was taken raised that count too, so
            // the next window opens with a count of its own, not the one that opened this.
            self.spoiled = true;
            self.departures = None;
        }
        let size = self.page_size();
        let tie_rows = count_at(self.at, rows);
        self.record(rows);
        if opening {
            match self.quiet {
                None => return CoverStep::Failed(self.incomplete(Incomplete::NoFacts)),
                // A call leaving the group must be stamped at or after the departure count's
                // instant, and none may be stamped back into the group.
                Some(q) if too_young(self.at, q) => {
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
        self.end_sweep();
        if self.spoiled {
            return self.new_window(limits);
        }
        if self.size.is_some_and(|n| len_u32(self.read.len()) >= n) {
            self.counting = true;
            return CoverStep::Next(self);
        }
        // Another sweep, with another page size, over the pages the group fills.
        self.sweeps += 1;
        self.page = 1;
        self.within_budget(limits)
    }

    /// Notes the page's calls at `at`. Within one sweep of a group nothing enters (every
    /// page repeats its count) and nothing can be stamped back into, calls only leave,
    /// which moves the calls after them to positions already read: in a stable order no
    /// call is read twice in one sweep.
    fn record(&mut self, rows: &[RowKey]) {
        for row in rows.iter().filter(|r| r.updated_at == self.at) {
            self.read.insert(row.uid);
            self.shown_unstable |= !self.sweep_read.insert(row.uid);
        }
    }

    fn end_sweep(&mut self) {
        if !self.shown_unstable && self.sweep_read.len() > self.page_size() as usize {
            self.clean_sweeps += 1;
        }
        self.sweep_read.clear();
    }

    /// The departure count: it opens the first window, and closes each (opening the next).
    fn after_count(mut self, facts: PageFacts, limits: Limits) -> CoverStep {
        self.counting = false;
        let Some(count) = facts.total_count else {
            return CoverStep::Failed(self.incomplete(Incomplete::NoFacts));
        };
        let opened = self.departures.replace(count);
        if opened.is_none() {
            return CoverStep::Next(self);
        }
        let read = len_u32(self.read.len());
        match (opened == Some(count), self.exit, self.size) {
            // No call left the group in the window and none entered it (every page repeated
            // its count): what it read at `at` is in the group, and there are as many as
            // the group holds.
            (true, Some(exit), Some(size)) if read == size => CoverStep::Done {
                exit,
                unstable: self.shown_unstable,
            },
            _ => self.new_window(limits),
        }
    }

    /// Something moved under the window: read the group again in a new one, opened by the
    /// departure count that closed the last, or by a new count when a page dropped it.
    fn new_window(mut self, limits: Limits) -> CoverStep {
        if let Some(scanned) = self.scanned
            && !self.shown_unstable
            && self.clean_sweeps >= STABLE_SWEEPS
        {
            return CoverStep::Done {
                exit: scanned,
                unstable: false,
            };
        }
        if self.windows >= limits.windows {
            let windows = self.windows;
            return CoverStep::Failed(self.incomplete(Incomplete::KeptChanging { windows }));
        }
        self.windows += 1;
        self.sweeps += 1;
        self.quiet = None;
        self.spoiled = false;
        self.read.clear();
        self.sweep_read.clear();
        self.size = None;
        self.exit = None;
        self.page = 1;
        self.counting = self.departures.is_none();
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
