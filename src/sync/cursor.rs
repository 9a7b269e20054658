//! `PageWalker`: which page to ask for next, and how far the checkpoint may move. Pure.
//!
//! No client, no database: it takes the (uid, updated_at) keys of each page and returns the
//! next request and the cursor that is safe to persist with that page. All of the paging
//! correctness lives here, so it is tested by tables of pages. Its invariants, numbered, each
//! kept by the file named; the argument behind each is in `docs/how-it-stays-correct.md`,
//! "The walker, argued" and "Answers in any order":
//!
//! 1. **Keyset paging** (this file). Every request is `updated_after = cursor, page = 1`; the
//!    cursor becomes a full page's last instant, inclusive: rows that change jump to the end.
//! 2. **Tie groups** (`ties.rs`). A full page of the cursor's own instant `T` is a tie group:
//!    scanned up, then down once the service's clock has passed `T`, and left only from a page
//!    that shows the group's last row next to what follows (an exit probe makes one); pages
//!    per scan and scans are bounded (`TieUnsettled`).
//! 3. **Quiet runs** (`run.rs`). Pages of one query by page number, asked at once, proven by a
//!    count of the calls since an instant, equal before and after them; anything else falls
//!    back to (2).
//! 4. **Tie order proven, not assumed** (`cover.rs`, `ties.rs`). Instability is declared only
//!    on evidence no stable order produces; from then on each group is covered, or held (the
//!    checkpoint at it); a scanned group that changed is confirmed before the checkpoint
//!    passes it (`PageWalker::confirm`).
//! 5. **Answers in any order** (`run.rs`, `cover.rs`). A fact belongs to the moment its answer
//!    was taken, and two answers are ordered only by causality. A quiet run's pages lie
//!    between its two counts, so a run's repeat is evidence only under counts that held
//!    (`RunEnd::Repeated`); scans, probes, confirmations and covers send one request at a
//!    time, so their answers come in request order; a cover's window lies between its two
//!    measurements.
//! 6. **Distrust** (this file, `validate`). A page larger than asked, out of `updated_at`
//!    order, or holding rows before the cursor is a protocol error, as is a page number the
//!    service ignores. A uid twice in one answer means a call hidden in its place: the
//!    checkpoint is held at the earlier listing for the rest of the walk.
//! 7. **No instant passed unread** (this file, `page.rs`). A row stamped at or after the
//!    answer's clock (`PageFacts::future`) is stored but is no position: the walk reads on
//!    from the last row before it, and the in-time data ends on that page. A move of the
//!    checkpoint past a page (to its last row `L`) waits for the next answer from `L`: the
//!    query from the old position counted `N` calls, the page showed `b` before `L`, and
//!    a count from an instant never shrinks (stamps only grow), so an answer from `L` must
//!    count at least `N - b` (less the rows from the future, whose place is unknown).
//!    Fewer is a row stamped past calls it hid: `WalkError::CountShort`, the checkpoint held.

use std::time::Duration;

pub use cover::Incomplete;
use cover::{Cover, CoverStep};
pub use error::WalkError;
use page::Exit;
pub use page::{PageFacts, RowKey};
use run::{MIN_RUN_PAGES, Opener, Quiet, Run, RunEnd, RunStep};
use scan::TieWalk;

use crate::service::{MAX_PAGE_SIZE, Timestamp};

/// One list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageRequest {
    pub updated_after: Timestamp,
    pub page: u32,
    pub page_size: u32,
    pub purpose: Purpose,
}

/// What a request's rows are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A page of the walk: its rows are the data.
    Walk,
    /// A quiet check: whether anything changed since a run began. Its row, if any, is read
    /// by the walk in its turn; the caller need not keep it.
    QuietCheck,
}

/// What the walker learned from a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The cursor to persist in the same transaction as this page: everything before it has
    /// been read. Never behind the previous one.
    pub checkpoint: Timestamp,
    /// A call the page listed twice, as first listed: the checkpoint is held before it
    /// (invariant 6).
    pub listed_twice: Option<RowKey>,
}

/// A tie group a walk could not prove read whole, and read past with its checkpoint held at
/// the group's instant (the next pass reads it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldGroup {
    /// The group's `updated_at`.
    pub at: Timestamp,
    /// Its size as the latest answer that measured it showed.
    pub size: u32,
    /// Distinct calls read at `at` in the last window.
    pub read: u32,
    pub why: Incomplete,
}

impl std::fmt::Display for HeldGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} calls sharing updated_at {} are held: not proven read whole ({} read): {}; the checkpoint stays at {} and the next pass reads the group again",
            self.size, self.at, self.read, self.why, self.at
        )
    }
}

/// The checkpoint may move to `at` once an answer from `at` counts at least `calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Promise {
    at: Timestamp,
    calls: u64,
}

/// Runs in a row that could not be proven quiet after which a walk reads on without runs.
const MAX_FAILED_RUNS: u32 = 3;

/// Rows after a keyset page, in pages, from which the rest is read as quiet runs (a run
/// costs a count at its end, and its first a count at its start).
const UNTIED_RUN_PAGES: u32 = 16;

/// Limits that end a walk which would otherwise not terminate.
#[derive(Debug, Clone, Copy)]
pub struct WalkLimits {
    /// Downward scans of one tie group before giving up.
    pub max_tie_scans: u32,
    /// Pages of one scan, beyond those the group needs, before giving up.
    pub max_extra_pages_per_scan: u32,
    /// Reads of a group under an unstable tie order that something changed under, before
    /// giving up (`cover.rs`).
    pub max_cover_windows: u32,
    /// Sweeps of such a group's pages, each with another page size, per read.
    pub cover_sweeps: u32,
}

impl WalkLimits {
    fn cover(&self) -> cover::Limits {
        cover::Limits {
            windows: self.max_cover_windows,
            sweeps: self.cover_sweeps,
        }
    }
}

impl Default for WalkLimits {
    fn default() -> Self {
        WalkLimits {
            max_tie_scans: 8,
            max_extra_pages_per_scan: 32,
            max_cover_windows: 4,
            cover_sweeps: 16,
        }
    }
}

#[derive(Debug)]
pub struct PageWalker {
    page_size: u32,
    limits: WalkLimits,
    /// How much earlier than the service's clock a change may be stamped when it becomes
    /// visible (the late-commit window): what a quiet check allows for.
    late_commits: Duration,
    /// Whether quiet runs may start; off for the rest of the walk once
    /// [`MAX_FAILED_RUNS`] in a row could not be proven quiet.
    runs: bool,
    /// Runs in a row that could not be proven quiet.
    failed_runs: u32,
    /// Where the last run that could not be proven quiet began: a tie group there is read
    /// with the two scans, not run again.
    scan_at: Option<Timestamp>,
    /// Pages the next run may read before it ends at a group boundary.
    run_pages: u32,
    /// The latest count of calls stamped since an instant that a response gave: every
    /// request the walk makes from now on is asked after it, so a run may open with it.
    opener: Option<Opener>,
    /// Whether the service has shown that it orders ties differently from one request to
    /// the next: from then on every tie group is covered (`cover.rs`), neither run nor
    /// scanned, for the rest of the walk.
    unstable: bool,
    /// An instant the checkpoint may not pass in this walk: a group there could not be
    /// proven yet (`after_confirm`, `hold_or_fail`).
    held: Option<Timestamp>,
    /// The groups covered in vain (`hold_or_fail`).
    held_groups: Vec<HeldGroup>,
    /// A move of the checkpoint waiting for an answer to prove it (invariant 7).
    promise: Option<Promise>,
    /// The last answer was full and ended in rows from the future, the latest stamped so:
    /// more may follow that no request of this walk can reach (invariant 7).
    unread_future: Option<Timestamp>,
    checkpoint: Timestamp,
    state: State,
}

#[derive(Debug)]
enum State {
    Keyset {
        cursor: Timestamp,
    },
    /// Tie groups paged by page number in one query, while nothing moves.
    Run(Run),
    /// A full page at `cursor`, with many rows after it: one count of the calls stamped
    /// since `since` before a run from `cursor` may start (`expected`: its rows).
    Opening {
        cursor: Timestamp,
        since: Timestamp,
        expected: Option<u64>,
    },
    /// A run from `after` has read every call up to `last`: one count of the calls stamped
    /// since the opener's instant. The opener's count again: the checkpoint moves to
    /// `last`. Another: fall back to `after`.
    RunCheck {
        after: Timestamp,
        opener: Opener,
        end: RunEnd,
    },
    Tie(TieWalk),
    /// A tie group read again and again until every call of it has shown.
    Cover(Cover),
    /// Two scans read the group; before the walk leaves it, one page of the service's
    /// largest size shows whether the group now fits in one response (`confirm`).
    Confirm {
        tie: TieWalk,
        exit: Exit,
    },
    /// The group has been read but no page showed its last row next to what follows: one
    /// request with another page size, whose page should hold both.
    ExitProbe {
        tie: TieWalk,
        page: u32,
        page_size: u32,
    },
    Done,
}

impl PageWalker {
    /// A walk of everything updated at or after `start`; `late_commits` is how much earlier
    /// than the service's clock a change may be stamped when it becomes visible.
    pub fn new(
        start: Timestamp,
        page_size: u32,
        limits: WalkLimits,
        late_commits: Duration,
    ) -> Self {
        PageWalker {
            page_size: page_size.clamp(1, MAX_PAGE_SIZE),
            limits,
            late_commits,
            runs: true,
            failed_runs: 0,
            scan_at: None,
            run_pages: 0,
            opener: None,
            unstable: false,
            held: None,
            held_groups: Vec::new(),
            promise: None,
            unread_future: None,
            checkpoint: start,
            state: State::Keyset { cursor: start },
        }
    }

    /// The next request, or `None` when the walk has reached the end of the data.
    pub fn next_request(&self) -> Option<PageRequest> {
        let (updated_after, page, page_size, purpose) = match &self.state {
            State::Keyset { cursor } => (*cursor, 1, self.page_size, Purpose::Walk),
            State::Run(run) => (run.after, run.page, self.page_size, Purpose::Walk),
            State::Opening { since, .. } => (*since, 1, 1, Purpose::QuietCheck),
            State::RunCheck { opener, .. } => (opener.since, 1, 1, Purpose::QuietCheck),
            State::Tie(tie) => (tie.at, tie.page, self.page_size, Purpose::Walk),
            State::Confirm { tie, .. } => (tie.at, 1, MAX_PAGE_SIZE, Purpose::Walk),
            State::Cover(cover) => {
                let (page, page_size) = cover.request();
                (cover.at, page, page_size, Purpose::Walk)
            }
            State::ExitProbe {
                tie,
                page,
                page_size,
            } => (tie.at, *page, *page_size, Purpose::Walk),
            State::Done => return None,
        };
        Some(PageRequest {
            updated_after,
            page,
            page_size,
            purpose,
        })
    }

    /// Requests the walk will ask for after [`next_request`](Self::next_request)'s, in
    /// order, while nothing changes under it: the rest of a quiet run's planned pages. A
    /// run's count proves its pages whatever order the service serves them in, so they may
    /// be asked for at once. Asked ahead, an answer may be given to
    /// [`accept`](Self::accept) only while its request stayed among these (or became the
    /// next): a walk that left the run (it fell back, or found an unstable order) reads
    /// its pages again, asked after what it read since.
    pub fn requests_ahead(&self) -> Vec<PageRequest> {
        let State::Run(run) = &self.state else {
            return Vec::new();
        };
        let last = run.planned_last_page(self.page_size);
        (run.page + 1..=last)
            .map(|page| PageRequest {
                updated_after: run.after,
                page,
                page_size: self.page_size,
                purpose: Purpose::Walk,
            })
            .collect()
    }

    /// The instant the walk has reached: everything before it has been read.
    pub fn position(&self) -> Timestamp {
        self.checkpoint
    }

    /// The instant the walk has read to, its last move perhaps still waiting for the count
    /// that proves it (invariant 7): where a walk bounded by an instant stops.
    pub fn reached(&self) -> Timestamp {
        self.promise
            .map_or(self.checkpoint, |p| p.at.max(self.checkpoint))
    }

    /// The latest stamp of a full last answer whose tail was from the future: calls may
    /// follow it that the walk could not read (they sort after the service's clock).
    pub fn unread_future(&self) -> Option<Timestamp> {
        self.unread_future
    }

    /// Whether the service has shown, by evidence no stable order can produce, that it
    /// orders calls sharing an `updated_at` differently from one request to the next.
    pub fn tie_order_unstable(&self) -> bool {
        self.unstable
    }

    /// The tie groups this walk could not prove read whole, and read past with its
    /// checkpoint held at the earliest.
    pub fn held_groups(&self) -> &[HeldGroup] {
        &self.held_groups
    }

    /// Takes the rows returned for [`next_request`](Self::next_request), in the order
    /// received, and what the response said beside them.
    pub fn accept(&mut self, rows: &[RowKey], facts: PageFacts) -> Result<Accepted, WalkError> {
        let mut listed_twice = None;
        if let Some(request) = self.next_request() {
            validate(&request, rows)?; // (6)
            listed_twice = page::listed_twice(rows);
            if let Some(earlier) = listed_twice {
                self.hold_at(earlier.updated_at); // (6)
            }
            self.keep_promise(&request, facts)?; // (7)
            let listed_full = rows.len() == request.page_size as usize;
            // (7) Rows from the future come last (the page is in order): the in-time data
            // ends on this page, unless a keyset page reads on from its last in-time row.
            let in_time = rows.partition_point(|r| facts.future.is_none_or(|f| r.updated_at < f));
            let last_listed = rows.last().map(|r| r.updated_at);
            let (rows, from_future) = (&rows[..in_time], rows.len() - in_time);
            let full = listed_full && from_future == 0;
            self.unread_future = last_listed.filter(|_| listed_full && from_future > 0);
            // Each arm keeps the invariant numbered beside it (the module's list).
            self.state = match std::mem::replace(&mut self.state, State::Done) {
                // (1, 7)
                State::Keyset { cursor } => {
                    self.after_keyset_page(cursor, rows, (listed_full, from_future), facts)
                }
                // (3, 5)
                State::Run(run) => {
                    let step = run.step(rows, full, facts, self.page_size);
                    self.after_run_page(step)
                }
                // (3)
                State::Opening {
                    cursor,
                    since,
                    expected,
                } => self.after_opening((cursor, since, expected), rows, facts),
                // (3, 5)
                State::RunCheck { after, opener, end } => {
                    self.after_run_check(after, opener, end, rows, facts)
                }
                // (2, 4)
                State::Tie(tie) => self.after_tie_page(tie, rows, full, facts)?,
                // (4, 5)
                State::Cover(cover) => {
                    let at = cover.at;
                    match cover.step(rows, facts, self.late_commits, self.limits.cover()) {
                        CoverStep::Next(cover) => State::Cover(cover),
                        CoverStep::Done { exit, unstable } => {
                            if unstable {
                                self.found_unstable(at);
                            }
                            self.leave(exit)
                        }
                        CoverStep::Failed(failure) => self.hold_or_fail(failure)?,
                    }
                }
                // (2)
                State::ExitProbe {
                    tie,
                    page,
                    page_size,
                } => self.after_exit_probe(tie, rows, (full, facts), page, page_size)?,
                // (4)
                State::Confirm { tie, exit } => self.after_confirm(tie, exit, rows, full, facts),
                State::Done => State::Done,
            };
        }
        Ok(Accepted {
            checkpoint: self.checkpoint,
            listed_twice,
        })
    }

    fn after_keyset_page(
        &mut self,
        cursor: Timestamp,
        rows: &[RowKey],
        (full, from_future): (bool, usize),
        facts: PageFacts,
    ) -> State {
        let last = rows.last().map_or(cursor, |r| r.updated_at);
        // Not full, or full but for rows from the future that the in-time rows do not pass
        // the cursor before: the page listed every in-time row from the cursor on.
        if !full || (from_future > 0 && last == cursor) {
            self.advance(last);
            return State::Done;
        }
        if last > cursor {
            let before = (page::before_last(rows) + from_future) as u64;
            self.promise_move(last, facts.total_count.map(|n| n.saturating_sub(before)));
            if from_future > 0 {
                return State::Keyset { cursor: last };
            }
            return self.after_untied_page(rows, last, facts);
        }
        // A full page of nothing but `cursor`: a group to cover once the service has shown
        // an unstable tie order; else page 1 of a quiet run, when one may prove itself (its
        // check must be able to pass: the group older than the late-commit window), else of
        // an upward scan of the group.
        if self.unstable {
            return State::Cover(Cover::new(cursor, 0));
        }
        if let Some(opener) = self.tie_run_opener(cursor, facts) {
            let run = Run::new(cursor, opener, self.run_pages, facts.total_count);
            return self.after_run_page(run.step(rows, full, facts, self.page_size));
        }
        State::Tie(TieWalk::opened(cursor, rows, facts, self.late_commits))
    }

    /// A full keyset page whose rows end at `last`, after the cursor. With many rows after
    /// it, the pages from `last` are read as a quiet run, by page number, so that they can
    /// be asked for at once; the run needs a count of the calls stamped since an instant
    /// the rows read stay before, taken before its pages are asked for: one request, once a
    /// walk (the count that ends a run opens the next).
    fn after_untied_page(&mut self, rows: &[RowKey], last: Timestamp, facts: PageFacts) -> State {
        let keyset = State::Keyset { cursor: last };
        let Some(quiet) = Quiet::of(facts, self.late_commits) else {
            return keyset;
        };
        let runs_pay = quiet.total_count >= u64::from(UNTIED_RUN_PAGES * self.page_size);
        if !(self.runs && runs_pay) || self.unstable {
            return keyset;
        }
        // The rows from `last` on: the count less those before `last`.
        let before_last = rows.iter().filter(|r| r.updated_at < last).count() as u64;
        let expected = quiet.total_count.checked_sub(before_last);
        let pages = self.run_pages.max(MIN_RUN_PAGES);
        match self.opener {
            Some(opener) if last < opener.since => {
                State::Run(Run::new(last, opener, pages, expected))
            }
            _ if last < quiet.since => State::Opening {
                cursor: last,
                since: quiet.since,
                expected,
            },
            _ => keyset,
        }
    }

    /// What a quiet run from a tie group at `cursor` (its first page just read) opens with:
    /// the walk's count, when the group is before its instant, else none stamped since the
    /// page's clock less the late-commit window, assumed (which the run's check must find);
    /// `None` when no run may prove itself there.
    fn tie_run_opener(&self, cursor: Timestamp, facts: PageFacts) -> Option<Opener> {
        if !self.runs || self.scan_at == Some(cursor) {
            return None;
        }
        if let Some(opener) = self.opener.filter(|o| cursor < o.since) {
            return Some(opener);
        }
        Quiet::of(facts, self.late_commits)
            .filter(|q| q.since > cursor)
            .map(|q| Opener::assumed(q.since))
    }

    fn after_run_page(&mut self, step: RunStep) -> State {
        match step {
            RunStep::Next(run) => State::Run(run),
            RunStep::Check { after, opener, end } => State::RunCheck { after, opener, end },
            RunStep::FallBack(after) => self.fall_back(after),
        }
    }

    /// The count a run from `cursor` opens with.
    fn after_opening(
        &mut self,
        (cursor, since, expected): (Timestamp, Timestamp, Option<u64>),
        rows: &[RowKey],
        facts: PageFacts,
    ) -> State {
        match Opener::counted(since, rows, facts) {
            Some(opener) => {
                self.opener = Some(opener);
                let pages = self.run_pages.max(MIN_RUN_PAGES);
                State::Run(Run::new(cursor, opener, pages, expected))
            }
            None => State::Keyset { cursor },
        }
    }

    /// The answer to the count that ends a run from `after`.
    fn after_run_check(
        &mut self,
        after: Timestamp,
        opener: Opener,
        end: RunEnd,
        rows: &[RowKey],
        facts: PageFacts,
    ) -> State {
        let counted = Opener::counted(opener.since, rows, facts);
        let quiet = opener.holds(rows, facts);
        // Asked after every answer the walk took, the count opens whatever run comes next.
        self.opener = counted;
        let (last, full, left) = match end {
            RunEnd::Read { last, full, left } if quiet => (last, full, left),
            // A repeat is evidence only under a count that held (see `RunEnd::Repeated`).
            RunEnd::Repeated if quiet => {
                self.found_unstable(after);
                return State::Keyset { cursor: after };
            }
            RunEnd::Read { .. } | RunEnd::Repeated => return self.fall_back(after),
        };
        self.failed_runs = 0;
        self.run_pages = run::next_run_pages(self.run_pages);
        if !full {
            return self.leave(Exit::End(last));
        }
        self.advance(last);
        match counted {
            // The next run starts at once from where this one proved the calls read: its
            // pages can be asked for together, the next request being its first.
            // (Not from a run that stopped at the count's instant: keyset paging reads on.)
            Some(opener) if self.runs && !self.unstable && left.is_some() && last > after => {
                State::Run(Run::new(last, opener, self.run_pages, left))
            }
            _ => State::Keyset { cursor: last },
        }
    }

    /// A run that cannot be proven quiet: read again from where it began (the checkpoint).
    /// A tie group there is read with the two scans; runs start again after, until
    /// [`MAX_FAILED_RUNS`] in a row failed (a service that keeps changing would make their
    /// pages be read for nothing).
    fn fall_back(&mut self, after: Timestamp) -> State {
        tracing::debug!(%after, "a quiet run could not be proven quiet: read again from where it began");
        self.failed_runs += 1;
        self.runs = self.failed_runs < MAX_FAILED_RUNS;
        self.scan_at = Some(after);
        self.run_pages = 0;
        State::Keyset { cursor: after }
    }

    fn leave(&mut self, exit: Exit) -> State {
        match exit {
            Exit::Continue { at, promised } => {
                self.promise_move(at, promised);
                State::Keyset { cursor: at }
            }
            Exit::End(last) => {
                self.advance(last);
                State::Done
            }
        }
    }

    /// Moves the checkpoint to `to` once an answer from `to` counts at least `calls` (at
    /// once without a count to check). A move still waiting is dropped, the checkpoint short
    /// of it: every state asks from the promised instant first, so none waits here.
    fn promise_move(&mut self, to: Timestamp, calls: Option<u64>) {
        self.promise = None;
        match calls {
            Some(calls) => self.promise = Some(Promise { at: to, calls }),
            None => self.advance(to),
        }
    }

    /// The answer to `request`, when it is the first page from a promised instant: the
    /// promised move, or the protocol error of a count that fell short.
    fn keep_promise(&mut self, request: &PageRequest, facts: PageFacts) -> Result<(), WalkError> {
        let Some(promise) = self.promise else {
            return Ok(());
        };
        let from_there = request.updated_after == promise.at && request.page == 1;
        if request.purpose != Purpose::Walk || !from_there {
            return Ok(());
        }
        self.promise = None;
        match facts.total_count {
            Some(got) if got < promise.calls => Err(WalkError::CountShort {
                at: promise.at,
                promised: promise.calls,
                got,
                checkpoint: self.checkpoint,
            }),
            _ => {
                self.advance(promise.at);
                Ok(())
            }
        }
    }

    fn advance(&mut self, to: Timestamp) {
        let to = self.held.map_or(to, |held| to.min(held));
        self.checkpoint = self.checkpoint.max(to);
    }
}

fn validate(request: &PageRequest, rows: &[RowKey]) -> Result<(), WalkError> {
    let after = request.updated_after;
    let page = request.page;
    let page_size = request.page_size;
    if rows.len() > page_size as usize {
        return Err(WalkError::PageTooLarge {
            after,
            page,
            got: rows.len(),
            asked: page_size,
        });
    }
    let mut previous = after;
    for row in rows {
        if row.updated_at < after {
            return Err(WalkError::BeforeCursor {
                after,
                page,
                uid: row.uid,
                at: row.updated_at,
            });
        }
        if row.updated_at < previous {
            return Err(WalkError::OutOfOrder {
                after,
                page,
                uid: row.uid,
                at: row.updated_at,
                previous,
            });
        }
        previous = row.updated_at;
    }
    Ok(())
}

mod cover;
mod error;
mod page;
mod run;
mod scan;
#[cfg(test)]
mod tests;
mod ties;
