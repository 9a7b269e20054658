//! Covering a tie group whose order the service does not keep: its pages read again, with
//! other page sizes, until every call of the group has shown while the group held still.
//!
//! **Invariant** (4 of `cursor.rs`): two measurements of one size `N` of a group older than the
//! late-commit window, at moments `m₁ < m₂`, show it the same set throughout `[m₁, m₂]` (it
//! only shrinks), so the distinct calls read at `T` by answers taken in between, in any order,
//! are its calls; `N` of them prove it read whole. A window's pages are asked after its
//! opening measurement was accepted and before its closing one; each must repeat the window's
//! `total_count`. A group that fits one page of the largest size is proven by that one answer.
//! A group no window proves ends the cover with `Failure`, and the walker *holds* it
//! (`PageWalker::held_groups`). Within one sweep a stable order never shows a call twice: a
//! sweep that does shows the order unstable. The argument, with what a measurement is and
//! how likely a call stays unread: `docs/how-it-stays-correct.md`, "Covering a group".

use std::collections::HashSet;

use uuid::Uuid;

use super::page::{Exit, PageFacts, Place, RowKey, count_at, exit_through, len_u32};
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
    /// How to leave the group, from the latest answer that measured it: the walk may read
    /// on from there, its checkpoint held at `at`.
    pub(super) exit: Option<Exit>,
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

/// Sweeps without a call read twice after which a group that changed under every window
/// is taken to be in a stable order (see [`Cover::confirming`]).
const STABLE_SWEEPS: u32 = 2;

/// Whether no call can enter the group at `at` any more, by the clock of an answer taken
/// at `served_at`: a change made visible is stamped at or after that clock less the
/// late-commit window.
pub(super) fn closed(
    at: Timestamp,
    served_at: Timestamp,
    late_commits: std::time::Duration,
) -> bool {
    served_at.saturating_sub(late_commits) > at
}

/// The group at `at` being covered.
#[derive(Debug)]
pub(super) struct Cover {
    pub(super) at: Timestamp,
    /// The group's size at the window's opening measurement; `None` until one.
    size: Option<u32>,
    /// Distinct uids read at `at` since the window's opening measurement (its own included).
    read: HashSet<Uuid>,
    /// Uids read at `at` in the current sweep: one read twice shows an unstable order.
    sweep_read: HashSet<Uuid>,
    /// The most calls the walk had seen in the group before covering it: where the opening
    /// measurement looks first, and its size for an error raised before any measurement.
    known: u32,
    /// How to leave the group, from the latest measurement.
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
    /// The page to ask for next (of the measurement, or of the sweep).
    page: u32,
    /// Windows opened so far.
    windows: u32,
    /// Whether the next request measures the group (pages of the largest size, looking for
    /// its end) to open a window, rather than reading a sweep's page.
    measuring: bool,
    /// Pages asked so far, for the budget.
    pages: u32,
    /// The page size of the measurement (the largest, or one that does not divide a page
    /// edge the group seemed to end on).
    measure_size: u32,
    /// What the measurement's pages have shown so far.
    search: Search,
    /// `total_count` of the answer that opened the window: every page of the window repeats
    /// it unless a call entered the group or was created (nothing lowers it).
    total_count: Option<u64>,
    /// A page of the window did not repeat it: the window ends with its sweep, proving
    /// nothing.
    spoiled: bool,
}

/// A search for the page where the group ends, in pages of the largest size: doubling from
/// where it starts until a page past the group, then halving between the two.
#[derive(Debug, Clone, Copy, Default)]
struct Search {
    /// The furthest page seen full of the group (0: none).
    full: u32,
    /// The nearest page seen past the group's end.
    past: Option<u32>,
}

enum Next {
    Page(u32),
    /// The group ends at this position, on the edge between two pages.
    Edge(u32),
}

impl Search {
    fn next(&mut self, page: u32) -> Next {
        if self.past.is_some_and(|past| past <= self.full) {
            // A page past the group before one full of it: the group grew (it cannot), or the
            // service answers pages it does not have; start the halving again above.
            self.past = None;
        }
        match self.past {
            None => Next::Page(page.saturating_mul(2).max(self.full + 1)),
            Some(past) if past == self.full + 1 => Next::Edge(self.full * MAX_PAGE_SIZE),
            Some(past) => Next::Page(self.full + (past - self.full) / 2),
        }
    }
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
            size: None,
            read: HashSet::new(),
            sweep_read: HashSet::new(),
            known,
            exit: None,
            sweeps: 0,
            clean_sweeps: 0,
            shown_unstable: false,
            scanned: None,
            page: known.saturating_sub(1) / MAX_PAGE_SIZE + 1,
            windows: 1,
            measuring: true,
            pages: 0,
            measure_size: MAX_PAGE_SIZE,
            search: Search::default(),
            total_count: None,
            spoiled: false,
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

    /// The next request's page and page size.
    pub(super) fn request(&self) -> (u32, u32) {
        let size = if self.measuring {
            self.measure_size
        } else {
            self.page_size()
        };
        (self.page, size)
    }

    /// The page size of the current sweep.
    fn page_size(&self) -> u32 {
        SWEEP_SIZES[(self.sweeps.max(1) as usize - 1) % SWEEP_SIZES.len()]
    }

    /// Takes the answer to [`Cover::request`].
    pub(super) fn step(
        mut self,
        rows: &[RowKey],
        facts: PageFacts,
        late_commits: std::time::Duration,
        limits: Limits,
    ) -> CoverStep {
        self.pages += 1;
        let (page, size) = self.request();
        let seen = Seen::of(self.at, rows, Place::of(page, size, facts), size);
        if let Some(exit) = seen.exit {
            self.exit = Some(exit);
        }
        let Some(date) = facts.served_at else {
            return CoverStep::Failed(self.incomplete(Incomplete::NoFacts));
        };
        // A call may still enter the group: no window can be proven. The walk holds the group
        // and reads on, once an answer showed where it ends (found as a window's opening
        // measurement is).
        let young = !closed(self.at, date, late_commits);
        if young {
            if self.exit.is_some() && !(page == 1 && seen.exact.is_some()) {
                self.size = seen.exact.or(self.size);
                return CoverStep::Failed(self.incomplete(Incomplete::Young));
            }
            self.measuring = true;
        }
        if self.measuring {
            return self.after_measuring(rows, seen, (facts, young), limits);
        }
        self.record(rows);
        let Some(n) = self.size else {
            return self.after_measuring(rows, seen, (facts, young), limits);
        };
        // A call entered the group (a commit later than the late-commit window) or was
        // created: the window proves nothing, though its sweep is read to its end.
        self.spoiled |= facts.total_count != self.total_count;
        if let Some(exact) = seen.exact.filter(|_| page == 1) {
            // The whole group, next to what follows, in one answer.
            self.end_sweep();
            return self.done_with(exact);
        }
        if seen.at_most < n || (self.spoiled && !seen.full_of_group) {
            // Calls left the group under the window (or entered it): it proves nothing.
            self.end_sweep();
            return self.window_broken(rows, seen, facts, limits);
        }
        // Still `n` calls at this answer's moment (never more: none enters), so the same
        // `n` throughout the window: every call read since it opened is one of them.
        if !self.spoiled && seen.at_least >= n && len_u32(self.read.len()) >= n {
            self.end_sweep();
            return self.done_with(n);
        }
        if seen.full_of_group {
            self.page += 1;
            return self.within_budget(limits);
        }
        self.end_sweep();
        self.next_sweep(limits)
    }

    /// Leaves the group, read whole at a moment it held `n` calls.
    fn done_with(&self, n: u32) -> CoverStep {
        tracing::debug!(at = %self.at, calls = n, windows = self.windows, "a tie group under an unstable order read whole");
        // A measurement always showed the group's end before; were it not so, ending the
        // walk at the group keeps the checkpoint there (reading on from `at` would meet the
        // group again).
        self.done(self.exit.unwrap_or(Exit::End(self.at)))
    }

    /// An answer of the measurement that opens a window: the group ends on it, or after it
    /// (look on), or before it (look back; at a page edge, with another page size).
    /// `young`: this answer's clock shows the group younger than the late-commit window.
    fn after_measuring(
        mut self,
        rows: &[RowKey],
        seen: Seen,
        (facts, young): (PageFacts, bool),
        limits: Limits,
    ) -> CoverStep {
        let (page, size) = self.request();
        if let Some(exact) = seen.exact {
            if page == 1 {
                // The whole group, next to what follows, in one answer.
                return self.done_with(exact);
            }
            if young {
                self.size = Some(exact);
                return CoverStep::Failed(self.incomplete(Incomplete::Young));
            }
            self.size = Some(exact);
            self.total_count = facts.total_count;
            self.spoiled = false;
            self.measuring = false;
            self.read.clear();
            self.sweep_read.clear();
            self.record(rows);
            self.sweep_read.clear();
            return self.next_sweep(limits);
        }
        if size != MAX_PAGE_SIZE {
            // A probe at a page edge that found the group shrunk since: search again.
            self.measure_size = MAX_PAGE_SIZE;
            self.search = Search::default();
            self.page = 1;
            return self.within_budget(limits);
        }
        if seen.full_of_group {
            self.search.full = self.search.full.max(page);
        } else {
            self.search.past = Some(self.search.past.map_or(page, |p| p.min(page)));
        }
        match self.search.next(page) {
            Next::Page(next) => self.page = next,
            Next::Edge(edge) => {
                // The group ends on a page edge (or calls left between two answers): one page
                // of another size holds positions `edge - 1` and `edge`.
                let probe = (1..MAX_PAGE_SIZE)
                    .rev()
                    .find(|m| !edge.is_multiple_of(*m))
                    .unwrap_or(MAX_PAGE_SIZE);
                self.measure_size = probe;
                self.page = edge.saturating_sub(1) / probe + 1;
                self.search = Search::default();
            }
        }
        self.within_budget(limits)
    }

    fn done(&self, exit: Exit) -> CoverStep {
        CoverStep::Done {
            exit,
            unstable: self.shown_unstable,
        }
    }

    /// Notes the page's calls at `at` (see the module doc: a call read twice in one sweep
    /// shows the order unstable).
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

    fn next_sweep(mut self, limits: Limits) -> CoverStep {
        self.sweeps += 1;
        self.page = 1;
        self.within_budget(limits)
    }

    /// Calls left the group under the window: an answer that measured it exactly opens the
    /// next window (its own rows at `at` read), else a new measurement does.
    fn window_broken(
        mut self,
        rows: &[RowKey],
        seen: Seen,
        facts: PageFacts,
        limits: Limits,
    ) -> CoverStep {
        if let Some(scanned) = self.scanned
            && !self.shown_unstable
            && self.clean_sweeps >= STABLE_SWEEPS
        {
            return CoverStep::Done {
                exit: scanned,
                unstable: false,
            };
        }
        if let Some(exact) = seen.exact {
            self.size = Some(exact);
        }
        if self.windows >= limits.windows {
            let windows = self.windows;
            return CoverStep::Failed(self.incomplete(Incomplete::KeptChanging { windows }));
        }
        self.windows += 1;
        self.read.clear();
        self.spoiled = false;
        self.total_count = facts.total_count;
        match seen.exact {
            Some(_) => {
                for row in rows.iter().filter(|r| r.updated_at == self.at) {
                    self.read.insert(row.uid);
                }
                self.next_sweep(limits)
            }
            None => {
                self.measuring = true;
                self.measure_size = MAX_PAGE_SIZE;
                self.search = Search::default();
                self.page = seen.at_most.saturating_sub(1) / MAX_PAGE_SIZE + 1;
                self.within_budget(limits)
            }
        }
    }

    fn within_budget(self, limits: Limits) -> CoverStep {
        if self.sweeps > limits.sweeps * self.windows {
            let sweeps = self.sweeps;
            return CoverStep::Failed(self.incomplete(Incomplete::NotShown { sweeps }));
        }
        // Pages beyond what the sweeps can need: a service answering full pages it does not
        // have (ignoring `page`), or a group that keeps growing.
        let largest = self
            .size
            .unwrap_or(0)
            .max(self.known)
            .max(len_u32(self.read.len()));
        let per_sweep = largest / SWEEP_SIZES[SWEEP_SIZES.len() - 1] + 2;
        let allowed = per_sweep.saturating_mul(limits.sweeps.saturating_mul(self.windows) + 1);
        if self.pages > allowed {
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
            exit: self.exit,
        }
    }
}

/// What one answer shows of the group's size at its moment (positions of the list after
/// `at`: the rows at `at` come first).
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The group held at least this many calls: every position up to the page's last row
    /// at `at` was at `at`.
    at_least: u32,
    /// And at most this many: a row after `at` stood at this position (`u32::MAX` when the
    /// page was full of the group).
    at_most: u32,
    /// Both, when the page showed the group's end next to what follows (or was page 1).
    exact: Option<u32>,
    /// How to leave the group from this answer, when it showed the end.
    exit: Option<Exit>,
    /// Every row of the page was at `at`: the group goes on past it.
    full_of_group: bool,
}

impl Seen {
    fn of(at: Timestamp, rows: &[RowKey], place: Place, size: u32) -> Seen {
        let start = place.first;
        let page_one = start == 0;
        let tie_rows = len_u32(count_at(at, rows));
        let full_of_group = rows.len() == size as usize && tie_rows == size;
        let at_least = if tie_rows > 0 {
            start.saturating_add(tie_rows)
        } else {
            0
        };
        if full_of_group {
            return Seen {
                at_least,
                at_most: u32::MAX,
                exact: None,
                exit: None,
                full_of_group,
            };
        }
        // A page past the end of the list bounds nothing (its positions hold no row).
        let at_most = if rows.is_empty() && !page_one {
            u32::MAX
        } else {
            start.saturating_add(tie_rows)
        };
        let shows_end = tie_rows > 0 || page_one;
        Seen {
            at_least,
            at_most,
            exact: shows_end.then_some(at_least),
            exit: shows_end.then(|| exit_from(at, rows, size, place)),
            full_of_group,
        }
    }
}

/// How to leave the group from an answer that showed its end: its last row (the end of the
/// data when the page is not full).
fn exit_from(at: Timestamp, rows: &[RowKey], size: u32, place: Place) -> Exit {
    if rows.is_empty() {
        Exit::End(at)
    } else {
        exit_through(at, rows, rows.len() == size as usize, place)
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
    /// No `Date` header to tell that no call can enter the group any more.
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
                "calls left the group during each of {windows} reads of it, so none proves it whole (one will once the group holds still for a read, or fits one page of 100 as its calls leave)"
            ),
            Incomplete::Young => f.write_str(
                "the group is younger than sync.lookback by the service's clock, so no read of it can be proven quiet yet (a pass a few seconds later can)",
            ),
            Incomplete::NoFacts => f.write_str(
                "the service's answers carry no Date header to tell that no call can enter the group any more",
            ),
        }
    }
}
