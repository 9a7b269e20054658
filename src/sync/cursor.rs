//! `PageWalker`: which page to ask for next, and how far the checkpoint may move. Pure.
//!
//! No client, no database: it takes the (uid, updated_at) keys of each page and returns the
//! next request and the cursor that is safe to persist with that page. All of the paging
//! correctness lives here, so it is tested by tables of pages. Its invariants, numbered; the
//! arguments behind each are in `docs/how-it-stays-correct.md`, "The walker, argued":
//!
//! - **Keyset paging** (1). Every request is `updated_after = cursor, page = 1`; the cursor
//!   becomes a full page's last instant, inclusive: rows that change jump to the end.
//! - **Tie groups** (2). A full page of the cursor's own instant `T` is a tie group: scanned
//!   up, then down once the service's clock has passed `T`, and left only from a page that
//!   shows the group's last row next to what follows (an exit probe makes one); pages per
//!   scan and scans are bounded (`TieUnsettled`).
//! - **Quiet runs** (3, `run.rs`). Pages of one query by page number, asked at once, proven
//!   by a count of the calls since an instant, equal before and after them; anything else
//!   falls back to (2).
//! - **Tie order proven, not assumed** (4, `cover.rs`). Instability is declared only on
//!   evidence no stable order produces; from then on each group is covered, or held (the
//!   checkpoint at it); a scanned group that changed is confirmed before the checkpoint
//!   passes it (`PageWalker::confirm`).
//! - **Answers in any order** (5; the argument: `docs/how-it-stays-correct.md`, "Answers in any
//!   order"). Invariant: a fact belongs to the moment its answer was taken, and two answers
//!   are ordered only by causality (one the walker accepted before a request went out was
//!   taken before that request's answer). A quiet run's pages lie between its two counts,
//!   so a run's repeat is evidence only under counts that held (`RunEnd::Repeated`); scans,
//!   probes, confirmations and covers send one request at a time, so their answers come in
//!   request order, retries included; a cover's window lies between its two measurements.
//! - **Distrust** (6). A page larger than asked, out of `updated_at` order, or holding rows before
//!   the cursor is a protocol error, as is a page number the service ignores.

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;

pub use cover::Incomplete;
use cover::{Cover, CoverStep};
use page::{Exit, count_at, exit_through, len_u32, resumed, uids};
pub use page::{PageFacts, RowKey};
use run::{MIN_RUN_PAGES, Opener, Quiet, Run, RunEnd, RunStep};

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
}

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

#[derive(Debug)]
struct TieWalk {
    at: Timestamp,
    /// Every uid ever read at `at`. It grows only with rows actually read, so it bounds the
    /// pages a scan may take even against a service that answers every page alike. It is
    /// NOT the group's size: rows that have left the group stay in it.
    seen: HashSet<Uuid>,
    /// Where the group ended (its rows at positions `0..end`) on its last page, as the
    /// current downward scan found it. No row can enter a group once time has moved past
    /// it, so from then on the group holds at most this many rows.
    end: Option<u32>,
    scan: Scan,
    page: u32,
    /// How to leave the group, learnt in the current downward scan.
    exit: Option<Exit>,
    pages_in_scan: u32,
    down_scans: u32,
    /// The upward scan's previous page, for [`TieWalk::check_page_moves`].
    previous: Option<Repeat>,
    /// `total_count` of the group's first page.
    count: Option<u64>,
    /// Whether a later page's `total_count` differed from it: rows may have entered the
    /// group, which shifts positions as an unstable order would.
    count_moved: bool,
    /// Whether a page had no `total_count`: nothing tells entering rows from an unstable
    /// order then.
    count_unknown: bool,
    /// Whether the group was older than the late-commit window by the service's clock at
    /// its first page: no call can enter it any more.
    closed: bool,
    /// The uids read at `T` in the current downward scan.
    down_seen: HashSet<Uuid>,
    /// The page the current downward scan read last.
    down_previous: Option<u32>,
}

/// A page of an upward scan, and how many page numbers in a row answered with its rows.
#[derive(Debug)]
struct Repeat {
    page: u32,
    /// The first page number that answered with these rows.
    first: u32,
    uids: Vec<Uuid>,
    times: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    Up,
    /// Downward, still looking for the page where the group ends; `descended` once it has
    /// stepped down from a page without group rows.
    DownSeeking {
        descended: bool,
    },
    /// Downward from the group's last page towards page 1.
    Down,
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
        if let Some(request) = self.next_request() {
            validate(&request, rows)?;
            let full = rows.len() == request.page_size as usize;
            self.state = match std::mem::replace(&mut self.state, State::Done) {
                State::Keyset { cursor } => self.after_keyset_page(cursor, rows, full, facts),
                State::Run(run) => {
                    let step = run.step(rows, full, facts, self.page_size);
                    self.after_run_page(step)
                }
                State::Opening {
                    cursor,
                    since,
                    expected,
                } => self.after_opening((cursor, since, expected), rows, facts),
                State::RunCheck { after, opener, end } => {
                    self.after_run_check(after, opener, end, rows, facts)
                }
                State::Tie(tie) => self.after_tie_page(tie, rows, full, facts)?,
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
                State::ExitProbe {
                    tie,
                    page,
                    page_size,
                } => self.after_exit_probe(tie, rows, full, page, page_size)?,
                State::Confirm { tie, exit } => self.after_confirm(tie, exit, rows, full, facts),
                State::Done => State::Done,
            };
        }
        Ok(Accepted {
            checkpoint: self.checkpoint,
        })
    }

    fn after_keyset_page(
        &mut self,
        cursor: Timestamp,
        rows: &[RowKey],
        full: bool,
        facts: PageFacts,
    ) -> State {
        let last = rows.last().map_or(cursor, |r| r.updated_at);
        if !full {
            self.advance(last);
            return State::Done;
        }
        if last > cursor {
            self.advance(last);
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
        let mut tie = TieWalk::new(cursor, facts, self.late_commits);
        tie.record(rows);
        tie.previous = Some(Repeat {
            page: 1,
            first: 1,
            uids: uids(rows),
            times: 0,
        });
        tie.pages_in_scan = 1;
        tie.page = 2;
        State::Tie(tie)
    }

    fn after_tie_page(
        &mut self,
        mut tie: TieWalk,
        rows: &[RowKey],
        full: bool,
        facts: PageFacts,
    ) -> Result<State, WalkError> {
        let reordered = if tie.scan == Scan::Up {
            let read_again = tie.read_again_unmoved(rows, facts);
            tie.check_page_moves(rows)?;
            read_again
        } else {
            tie.read_again_out_of_place(rows)
        };
        if reordered {
            return Ok(self.cover(tie.at, len_u32(tie.seen.len())));
        }
        tie.record(rows);
        tie.pages_in_scan += 1;
        let (at, page) = (tie.at, tie.page);
        let tie_rows = count_at(at, rows);
        let has_tie_row = tie_rows > 0;
        let all_tie = full && tie_rows == rows.len();
        let past_group = rows.last().is_some_and(|r| r.updated_at > at);
        loop {
            match tie.scan {
                Scan::Up if all_tie => tie.page += 1,
                // Nothing follows the group: end at `T`, which the next pass reads again.
                Scan::Up if !past_group => {
                    let size = (page - 1).saturating_mul(self.page_size) + len_u32(tie_rows);
                    return Ok(self.leave_tie(tie, Exit::End(at), size));
                }
                // Rows after `T` exist, so none can enter the group any more: scan down,
                // starting with this very page.
                Scan::Up => {
                    tie.start_down_scan(page);
                    tie.read_again_out_of_place(rows);
                    continue;
                }
                Scan::DownSeeking { .. } if rows.is_empty() && page > 1 => {
                    tie.exit = Some(Exit::End(at));
                    tie.scan = Scan::Down;
                    tie.page = page - 1;
                }
                Scan::DownSeeking { descended: false } if all_tie => tie.page += 1,
                Scan::DownSeeking { .. } if !has_tie_row && page > 1 => {
                    tie.scan = Scan::DownSeeking { descended: true };
                    tie.page -= 1;
                }
                Scan::DownSeeking { .. } => {
                    // The group's last page: the group ends here now, and can only shrink.
                    // Full of the group, it ends on the page edge: no page shows what
                    // follows next to it, so no exit yet (a lower page or the probe makes one).
                    tie.saw_end(at, page, self.page_size, rows, full);
                    tie.scan = Scan::Down;
                    tie.page = page - 1;
                }
                Scan::Down => {
                    // Rows that left moved the group's end down onto a page still to read:
                    // a page showing it next to what follows is an exit as good as the first
                    // (departures cannot put rows between the two) and a nearer end. A page
                    // past the group still bounds its end (it ends before the page), and
                    // page 1 without a group row shows the group empty: an exit from `T`.
                    if !all_tie && (has_tie_row || page == 1) {
                        tie.saw_end(at, page, self.page_size, rows, full);
                    } else if !has_tie_row && !rows.is_empty() {
                        tie.ends_before(page, self.page_size);
                    }
                    tie.page -= 1;
                }
            }
            break;
        }
        if tie.scan == Scan::Down && tie.page == 0 {
            return Ok(match (tie.exit, tie.end) {
                (Some(exit), Some(end)) => self.leave_tie(tie, exit, end),
                (Some(exit), None) => self.confirm(tie, exit),
                (None, _) => probe_exit(tie, self.page_size),
            });
        }
        self.within_bounds(&tie)?;
        Ok(State::Tie(tie))
    }

    /// Ends a scan that takes more pages than the group can need.
    fn within_bounds(&self, tie: &TieWalk) -> Result<(), WalkError> {
        let allowed = tie
            .pages_needed(self.page_size)
            .saturating_add(self.limits.max_extra_pages_per_scan);
        if tie.pages_in_scan >= allowed {
            return Err(tie.unsettled());
        }
        Ok(())
    }

    fn after_exit_probe(
        &mut self,
        mut tie: TieWalk,
        rows: &[RowKey],
        full: bool,
        page: u32,
        page_size: u32,
    ) -> Result<State, WalkError> {
        tie.record(rows);
        tie.pages_in_scan += 1;
        let at = tie.at;
        // Position of the page's first row in the list after `T`.
        let first = page.saturating_sub(1).saturating_mul(page_size);
        let tie_rows = count_at(at, rows);
        let reached = first.saturating_add(len_u32(tie_rows));
        if tie.end.is_some_and(|end| reached > end) {
            // The group reaches past where the downward scan saw it end: rows entered it
            // after time had moved past it (a late commit), so that scan may have missed
            // some. Scan down again, from the page of the furthest group row seen.
            if tie.down_scans >= self.limits.max_tie_scans {
                return Err(tie.unsettled());
            }
            tie.start_down_scan((reached - 1) / self.page_size + 1);
            return Ok(State::Tie(tie));
        }
        if tie_rows == 0 && first > 0 {
            // Past the group: rows left it since its last page was read. Every row still in
            // it was read by the downward scan (departures only shift rows towards pages it
            // read later), so only an exit page is missing: the group now ends at or before
            // `first`, and the next probe goes there. With pages of the largest size: many
            // rows may have left (a campaign's batch dialled at once), and a probe reaching
            // 100 positions below `first` finds the group's end within them, where one of the
            // walk's size would step back a page at a time and outrun the scan's bound.
            tie.end = Some(first);
            self.within_bounds(&tie)?;
            return Ok(probe_exit(tie, MAX_PAGE_SIZE));
        }
        // The page holds the group's last row next to what follows, or starts at `T` itself
        // (page 1): leave from it.
        Ok(self.leave_tie(tie, exit_through(at, rows, full), reached))
    }

    /// Leaves a scanned tie group that held `size` calls when its end was last seen. With a
    /// stable tie order the scans read every one of them (the argument above), so fewer
    /// distinct uids read at `T` prove the order unstable: the group is covered instead.
    /// At the end of the data (the checkpoint stays at `T`, read again by the next pass) a
    /// call entering the group under the upward scan is read next time: there a shortfall
    /// proves nothing unless the count held on every page (a service without counts, which
    /// the spec always sends, is trusted there).
    fn leave_tie(&mut self, tie: TieWalk, exit: Exit, size: u32) -> State {
        let entries_possible = !tie.closed && (tie.count_moved || tie.count_unknown);
        let at_end = matches!(exit, Exit::End(at) if at == tie.at);
        if len_u32(tie.seen.len()) >= size || (at_end && entries_possible) {
            return self.confirm(tie, exit);
        }
        if entries_possible {
            // Calls may have entered the group under its scans (a late commit), which can
            // step a downward scan over one: the group is covered, but nothing here shows
            // the order unstable.
            return State::Cover(Cover::new(tie.at, size));
        }
        self.cover(tie.at, size)
    }

    /// Two scans read the group at `T` and found how to leave it. In a stable tie order they
    /// read every call of it; in an unstable one, calls leaving the group under the scans
    /// can hide a call no page showed (the departures move the positions the checks rely
    /// on). So before the checkpoint passes `T`, the walk confirms the group by what holds
    /// in any order: one response. A page of the service's largest size (100) that shows
    /// the group end holds every call still at `T` (the rest left, and are read at their
    /// new instants): the walk leaves from it. A larger group is covered (`cover.rs`); one
    /// that changes under every window of the cover, in sweeps that never read a call
    /// twice, is taken to be in the stable order the scans assumed. Leaving at `T` itself
    /// (the end of the data) needs no confirmation: the checkpoint stays at `T`, and the
    /// next pass reads the group again.
    fn confirm(&mut self, tie: TieWalk, exit: Exit) -> State {
        if exit == Exit::End(tie.at) {
            return self.leave(exit);
        }
        State::Confirm { tie, exit }
    }

    fn after_confirm(
        &mut self,
        tie: TieWalk,
        scanned: Exit,
        rows: &[RowKey],
        full: bool,
        facts: PageFacts,
    ) -> State {
        let at = tie.at;
        if !(full && count_at(at, rows) == rows.len()) {
            // The whole group, next to what follows, in one response.
            let closed = facts
                .served_at
                .is_some_and(|date| date.saturating_sub(self.late_commits) > at);
            if closed
                && rows
                    .iter()
                    .any(|r| r.updated_at == at && !tie.seen.contains(&r.uid))
            {
                // A call still in the group that neither scan read, in a group no call
                // could enter since (older than the late-commit window by this answer's
                // clock): the order is unstable. In a younger group, the call may have
                // entered after the scans (a late commit): no verdict, and the call is
                // read here all the same.
                self.found_unstable(at);
            }
            return self.leave(exit_through(at, rows, full));
        }
        match facts.served_at {
            // Without the service's clock, nothing can be proven: the scans are trusted, as
            // the spec (which always sends it) allows.
            None => self.leave(resumed(scanned)),
            Some(date) if !cover::closed(at, date, self.late_commits) => {
                // Too young to be covered (calls may still enter it, or leave it stamped
                // too close to it to be counted): the walk reads on from the scans' exit,
                // but the checkpoint stays at `T` for the rest of the pass, so the next
                // pass, when the group is older, proves it. What follows `T` is younger
                // still, so little is read again.
                tracing::debug!(%at, "a large tie group changed under its scans while younger than sync.lookback: the checkpoint stays at it for this pass");
                self.hold_at(at);
                self.leave(resumed(scanned))
            }
            Some(_) => State::Cover(Cover::confirming(
                at,
                len_u32(tie.seen.len()),
                resumed(scanned),
            )),
        }
    }

    /// A cover that could not prove its group: the walk reads on from the latest answer that
    /// showed the group's end, its checkpoint held at the group's instant for the rest of
    /// the pass (the group is *held*, and the next pass tries it again); without such an
    /// answer, or without the service's clock, the walk fails.
    fn hold_or_fail(&mut self, failure: cover::Failure) -> Result<State, WalkError> {
        let Some(exit) = failure.exit.filter(|_| failure.why != Incomplete::NoFacts) else {
            return Err(failure.into());
        };
        tracing::warn!(
            at = %failure.at,
            calls = failure.size,
            read = failure.read,
            "a tie group could not be proven read whole: {}; the checkpoint stays at its instant, and the walk reads on",
            failure.why
        );
        self.hold_at(failure.at);
        self.held_groups.push(HeldGroup {
            at: failure.at,
            size: failure.size,
            read: failure.read,
            why: failure.why,
        });
        // Not `resumed`: an exit at the end of the data ends the walk (read on from the
        // group's own instant, it would meet the group again).
        Ok(self.leave(exit))
    }

    /// The checkpoint may not pass `at` for the rest of the walk.
    fn hold_at(&mut self, at: Timestamp) {
        self.held = Some(self.held.map_or(at, |held| held.min(at)));
    }

    /// The service ordered a tie differently between two requests: cover the group at `at`,
    /// and every tie group after it.
    fn cover(&mut self, at: Timestamp, known: u32) -> State {
        self.found_unstable(at);
        State::Cover(Cover::new(at, known))
    }

    fn found_unstable(&mut self, at: Timestamp) {
        if !self.unstable {
            tracing::warn!(
                %at,
                "the service orders calls sharing an updated_at differently from one request to the next: each such group is read until every call of it has shown"
            );
        }
        // Runs need no switching off: a walk found unstable covers every tie group first.
        self.unstable = true;
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
            Exit::Continue(next) => {
                self.advance(next);
                State::Keyset { cursor: next }
            }
            Exit::End(last) => {
                self.advance(last);
                State::Done
            }
        }
    }

    fn advance(&mut self, to: Timestamp) {
        let to = self.held.map_or(to, |held| to.min(held));
        self.checkpoint = self.checkpoint.max(to);
    }
}

/// One request whose page holds positions `end - 1` and `end`: the group's last row next to
/// what follows, if the group still ends at `end`. Any page size that does not divide `end`
/// makes such a page; sizes up to the service's maximum are allowed, so one always exists.
/// The nearest below the walk's own size comes first (its page also reaches well below
/// `end - 1`, so rows that left meanwhile are likely still caught).
fn probe_exit(tie: TieWalk, page_size: u32) -> State {
    let end = tie.end.unwrap_or_else(|| len_u32(tie.seen.len()));
    if end == 0 {
        // Every row has left the group: page 1 after `T` starts with what follows it.
        return State::ExitProbe {
            page: 1,
            page_size,
            tie,
        };
    }
    let below = (1..page_size).rev();
    let above = page_size + 1..=MAX_PAGE_SIZE;
    let probe_size = below
        .chain(above)
        .find(|m| !end.is_multiple_of(*m))
        .unwrap_or(page_size);
    State::ExitProbe {
        page: (end - 1) / probe_size + 1,
        page_size: probe_size,
        tie,
    }
}

impl TieWalk {
    fn new(at: Timestamp, facts: PageFacts, late_commits: Duration) -> Self {
        let total_count = facts.total_count;
        TieWalk {
            at,
            closed: facts
                .served_at
                .is_some_and(|date| date.saturating_sub(late_commits) > at),
            down_seen: HashSet::new(),
            down_previous: None,
            count: total_count,
            count_moved: false,
            count_unknown: total_count.is_none(),
            seen: HashSet::new(),
            end: None,
            scan: Scan::Up,
            page: 1,
            exit: None,
            pages_in_scan: 0,
            down_scans: 0,
            previous: None,
        }
    }

    /// Page `self.page` of the upward scan holds a uid the scan read before, while no call
    /// can have entered the group (the count unchanged, or the group older than the
    /// late-commit window): positions only shift right when calls enter, so the service
    /// ordered the tie differently. A page equal to the previous one is left to
    /// [`TieWalk::check_page_moves`] (a service ignoring `page`).
    fn read_again_unmoved(&mut self, rows: &[RowKey], facts: PageFacts) -> bool {
        match (facts.total_count, self.count) {
            (Some(now), Some(first)) if now == first => {}
            (Some(_), Some(_)) => self.count_moved = true,
            _ => self.count_unknown = true,
        }
        let repeated_page = self
            .previous
            .as_ref()
            .is_some_and(|p| p.page != self.page && p.uids == uids(rows));
        (self.closed || (!self.count_moved && !self.count_unknown))
            && !repeated_page
            && rows
                .iter()
                .any(|r| r.updated_at == self.at && self.seen.contains(&r.uid))
    }

    /// Page `self.page`, one step down in a downward scan, holds calls this scan read before
    /// somewhere else than at its end. With a stable order, a call is read twice in one
    /// downward scan only because calls below it left, shifting it from the pages above onto
    /// the end of this one (calls entering shift the other way): the calls read again form
    /// the tail of the page's rows at `T`. Anything else is an order the service does not
    /// keep. (Steps up, as the scan seeks the group's end, are not judged: calls entering
    /// shift read calls onto the start of the next page.)
    fn read_again_out_of_place(&mut self, rows: &[RowKey]) -> bool {
        let step_down = self.down_previous.is_some_and(|p| self.page < p);
        self.down_previous = Some(self.page);
        let mut tail_started = false;
        let mut out_of_place = false;
        for row in rows.iter().filter(|r| r.updated_at == self.at) {
            let again = !self.down_seen.insert(row.uid);
            out_of_place |= tail_started && !again;
            tail_started |= again;
        }
        step_down && out_of_place
    }

    fn record(&mut self, rows: &[RowKey]) {
        for row in rows.iter().filter(|r| r.updated_at == self.at) {
            self.seen.insert(row.uid);
        }
    }

    /// Page numbers of an upward scan answered with the same full page of group rows: the
    /// service ignores `page`, and no number of scans would help. One repeat is not proof:
    /// a page's worth of rows entering the group before it between two requests shifts a
    /// page onto the next number. A service ignoring `page` repeats for ever, so it is
    /// judged on the second repeat in a row, and only for pages of 10 rows and more (with
    /// smaller pages a few entering rows make repeats; the page bound catches the rest).
    /// Downward scans are not judged: rows leaving shift pages the same way, and a service
    /// ignoring `page` is caught by the upward scan that always comes first.
    fn check_page_moves(&mut self, rows: &[RowKey]) -> Result<(), WalkError> {
        const JUDGED_PAGE_ROWS: usize = 10;
        const REPEATS: u32 = 2;
        let current = uids(rows);
        let repeat = self.previous.as_ref().filter(|p| {
            p.page != self.page
                && current.len() >= JUDGED_PAGE_ROWS
                && rows.iter().all(|r| r.updated_at == self.at)
                && p.uids == current
        });
        let (first, times) = repeat.map_or((self.page, 0), |p| (p.first, p.times + 1));
        if times >= REPEATS {
            return Err(WalkError::PageIgnored {
                after: self.at,
                page: self.page,
                previous: first,
            });
        }
        self.previous = Some(Repeat {
            page: self.page,
            first,
            uids: current,
            times,
        });
        Ok(())
    }

    /// `rows`, page `page`, hold the group's last row: it ends there now. Unless the page is
    /// full of the group (it then ends on the page edge), the page also shows what follows
    /// it, in one response: an exit.
    fn saw_end(&mut self, at: Timestamp, page: u32, page_size: u32, rows: &[RowKey], full: bool) {
        let tie_rows = count_at(at, rows);
        let before = page.saturating_sub(1).saturating_mul(page_size);
        self.end = Some(before.saturating_add(len_u32(tie_rows)));
        if !(full && tie_rows == rows.len())
            && let Some(exit) = exit_from(at, page, rows, full, tie_rows > 0)
        {
            self.exit = Some(exit);
        }
    }

    /// Page `page` of a downward scan holds no row of the group, yet rows: the group ends
    /// before it now, and can only shrink.
    fn ends_before(&mut self, page: u32, page_size: u32) {
        let before = page.saturating_sub(1).saturating_mul(page_size);
        self.end = Some(self.end.map_or(before, |end| end.min(before)));
    }

    /// A downward scan starting at `top`, looking first for the page where the group ends.
    fn start_down_scan(&mut self, top: u32) {
        self.down_seen.clear();
        self.down_previous = None;
        self.down_scans += 1;
        self.scan = Scan::DownSeeking { descended: false };
        self.page = top.max(1);
        self.pages_in_scan = 0;
        self.exit = None;
    }

    /// Pages a scan of the group can need: every row ever read at `T` plus the page edges.
    /// An upper bound (rows that left are counted), which is what a bound on work needs.
    fn pages_needed(&self, page_size: u32) -> u32 {
        len_u32(self.seen.len()) / page_size.max(1) + 2
    }

    fn unsettled(&self) -> WalkError {
        WalkError::TieUnsettled {
            at: self.at,
            size: self.end.map_or(self.seen.len(), |end| end as usize),
            scans: self.down_scans + 1,
            pages: self.pages_in_scan,
        }
    }
}

/// How to leave the group from the page where it ended, when that page proves it: it must
/// hold a row of the group (or be page 1) next to what follows, else rows right after the
/// group may have shifted onto a page already read.
fn exit_from(
    at: Timestamp,
    page: u32,
    rows: &[RowKey],
    full: bool,
    has_tie_row: bool,
) -> Option<Exit> {
    if rows.is_empty() && page > 1 {
        return Some(Exit::End(at));
    }
    if !has_tie_row && page > 1 {
        return None;
    }
    Some(exit_through(at, rows, full))
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
mod page;
mod run;
#[cfg(test)]
mod tests;
