//! `PageWalker`: which page to ask for next, and how far the checkpoint may move. Pure.
//!
//! No client, no database: it takes the (uid, updated_at) keys of each page and returns the
//! next request and the cursor that is safe to persist with that page. All of the paging
//! correctness lives here, so it is tested by tables of pages.
//!
//! - **Keyset paging.** Every request is `updated_after = cursor, page = 1`; after a full page
//!   the cursor becomes its last row's `updated_at` (inclusive, so rows sharing that instant
//!   are read again, never skipped). Rows that change while we page jump to the end and are
//!   read again later; page-number offsets never shift under us.
//! - **Tie groups.** When a full page holds nothing but the cursor's own instant `T`, the
//!   cursor cannot move and page numbers are unavoidable inside the group. Offsets move both
//!   ways under a scan: rows leave `T` when updated (later rows shift left) and rows enter it
//!   while `T` is still the service's "now" (later rows shift right). The walk therefore:
//!   1. scans **upwards** until the page where the group ends. If nothing follows the group,
//!      the walk ends with the checkpoint at `T` (inclusive: the next pass reads the group
//!      again, so a row that entered behind the scan is not lost). If rows after `T` show,
//!      the service's clock has passed `T`: no row can enter the group any more.
//!   2. scans **downwards** from the group's last page to page 1. With no rows entering, a
//!      downward scan cannot step over a row: departures only shift unread rows towards pages
//!      still to be read. Rows that left are read later at their new `updated_at`.
//!   3. leaves the group from a page that holds both the group's last row and what follows
//!      it, read in one response, so nothing right after the group is skipped; when the group
//!      ends exactly on a page edge, one request with another page size makes such a page
//!      (an *exit probe*). The probe is placed from where the downward scan saw the group
//!      end — its lowest page not full of the group, even one past the group (rows left
//!      after it was read; page 1 without a group row shows the group empty and is itself
//!      an exit) —, not from every uid ever seen at `T` (rows that left would place it past the
//!      group). A probe that lands past the group proves only that more rows left: every
//!      row still at `T` was read by the downward scan, so the next probe goes lower, with
//!      no new scan. Only a group that *grew* after time moved past it (a late commit) is
//!      scanned down again.
//!      Pages per scan and downward scans are bounded: a group that will not settle ends
//!      the pass with an error and the checkpoint stays at `T`.
//! - **Quiet runs** (`run.rs`). The second scan and the probe are there for rows that move
//!   while a group is read; most groups (a settled bulk upload, history) see none. So a tie
//!   group is first read as a *run*: page after page of the same query (`updated_after = T`),
//!   through the group and on through the groups after it, without the second scan and
//!   without going back to page 1 at each new instant. A run ends at a group boundary (after
//!   `run_pages` pages, or where few rows share the last instant, as when ties stop) or at
//!   the end of the data, with a **quiet check**: `updated_after = Q, page_size = 1`
//!   answering nothing, `Q` being the service's clock at the run's first page (its `Date`)
//!   minus the late-commit window (`sync.lookback`). A row that left a group during the run
//!   is stamped at or after `Q`, and one that entered it (a late commit) changes
//!   `pagination.total_count`, which every page of the run must repeat. Both holding, no
//!   position moved under the run: it read every row up to its last page, and the
//!   checkpoint moves to that page's last instant, from which keyset paging resumes. Anything
//!   else (a change, a `Q` not past the rows read, more rows than counted, a page repeated)
//!   falls back: the walk reads again from the checkpoint with the two scans, for the rest of
//!   the walk; without a `Date` or a `total_count`, or with a group younger than `Q`, no run
//!   starts. Runs grow (the first ends at its first boundary, the next at 4, 8 … 32 pages),
//!   so a live schedule wastes one short run a pass, and the checkpoint of a quiet one trails
//!   the pages written by a run at most: a crash replays that run. (A call deleted during a
//!   run while another enters it would leave the count unchanged; the service shows no
//!   deletion, and the two scans share that blind spot.)
//! - **Distrust.** A page larger than asked, out of `updated_at` order, or holding rows before
//!   the cursor is a protocol error, as is a page number the service ignores.

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;

pub use page::{PageFacts, RowKey};
use page::{count_at, uids};
use run::{Quiet, Run, RunStep};

use crate::service::{MAX_PAGE_SIZE, Timestamp};

/// One list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub updated_after: Timestamp,
    pub page: u32,
    pub page_size: u32,
    pub purpose: Purpose,
}

/// What a request's rows are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// Limits that end a walk which would otherwise not terminate.
#[derive(Debug, Clone, Copy)]
pub struct WalkLimits {
    /// Downward scans of one tie group before giving up.
    pub max_tie_scans: u32,
    /// Pages of one scan, beyond those the group needs, before giving up.
    pub max_extra_pages_per_scan: u32,
}

impl Default for WalkLimits {
    fn default() -> Self {
        WalkLimits {
            max_tie_scans: 8,
            max_extra_pages_per_scan: 32,
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
    /// Whether tie groups are read as quiet runs; off for the rest of the walk once one
    /// could not be proven quiet.
    runs: bool,
    /// Pages the next run may read before it ends at a group boundary.
    run_pages: u32,
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
    /// A run from `after` has read up to a page whose last row is at `last`: one request for
    /// anything stamped since `since`. Nothing: the checkpoint moves to `last`. Anything:
    /// fall back to `after`.
    RunCheck {
        after: Timestamp,
        since: Timestamp,
        last: Timestamp,
        full: bool,
    },
    Tie(TieWalk),
    /// The group has been read but no page showed its last row next to what follows: one
    /// request with another page size, whose page should hold both.
    ExitProbe {
        tie: TieWalk,
        page: u32,
        page_size: u32,
    },
    Done,
}

/// Where the walk goes once a tie group has settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// Nothing after the group: the walk is over, the cursor is this instant.
    End(Timestamp),
    /// Keyset paging resumes from this instant (the last row of the page that ended the group).
    Continue(Timestamp),
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
            run_pages: 0,
            checkpoint: start,
            state: State::Keyset { cursor: start },
        }
    }

    /// The next request, or `None` when the walk has reached the end of the data.
    pub fn next_request(&self) -> Option<PageRequest> {
        let (updated_after, page, page_size, purpose) = match &self.state {
            State::Keyset { cursor } => (*cursor, 1, self.page_size, Purpose::Walk),
            State::Run(run) => (run.after, run.page, self.page_size, Purpose::Walk),
            State::RunCheck { since, .. } => (*since, 1, 1, Purpose::QuietCheck),
            State::Tie(tie) => (tie.at, tie.page, self.page_size, Purpose::Walk),
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

    /// The instant the walk has reached: everything before it has been read.
    pub fn position(&self) -> Timestamp {
        self.checkpoint
    }

    /// Takes the rows returned for [`next_request`](Self::next_request), in the order
    /// received, and what the response said beside them.
    pub fn accept(&mut self, rows: &[RowKey], facts: PageFacts) -> Result<Accepted, WalkError> {
        if let Some(request) = self.next_request() {
            validate(&request, rows)?;
            let full = rows.len() == request.page_size as usize;
            self.state = match std::mem::replace(&mut self.state, State::Done) {
                State::Keyset { cursor } => self.after_keyset_page(cursor, rows, full, facts),
                State::Run(run) => match run.step(rows, full, facts, self.page_size) {
                    RunStep::Next(run) => State::Run(run),
                    RunStep::Check {
                        after,
                        since,
                        last,
                        full,
                    } => State::RunCheck {
                        after,
                        since,
                        last,
                        full,
                    },
                    RunStep::FallBack(after) => self.fall_back(after),
                },
                State::RunCheck {
                    after, last, full, ..
                } => self.after_run_check(after, last, full, rows, facts),
                State::Tie(tie) => self.after_tie_page(tie, rows, full)?,
                State::ExitProbe {
                    tie,
                    page,
                    page_size,
                } => self.after_exit_probe(tie, rows, full, page, page_size)?,
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
            return State::Keyset { cursor: last };
        }
        // A full page of nothing but `cursor`: page 1 of a quiet run, when one may prove
        // itself (its check must be able to pass: the group older than the late-commit
        // window), else of an upward scan of the group.
        if let Some(quiet) =
            Quiet::of(facts, self.late_commits).filter(|q| self.runs && q.since > cursor)
        {
            return State::Run(Run::start(cursor, rows, quiet, self.run_pages));
        }
        let mut tie = TieWalk::new(cursor);
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
    ) -> Result<State, WalkError> {
        if tie.scan == Scan::Up {
            tie.check_page_moves(rows)?;
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
                Scan::Up if !past_group => return Ok(self.leave(Exit::End(at))),
                // Rows after `T` exist, so none can enter the group any more: scan down,
                // starting with this very page.
                Scan::Up => {
                    tie.start_down_scan(page);
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
            return Ok(match tie.exit {
                Some(exit) => self.leave(exit),
                None => probe_exit(tie, self.page_size),
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
            // `first`, and the next probe goes there.
            tie.end = Some(first);
            self.within_bounds(&tie)?;
            return Ok(probe_exit(tie, self.page_size));
        }
        // The page holds the group's last row next to what follows, or starts at `T` itself
        // (page 1): leave from it.
        Ok(self.leave(exit_through(at, rows, full)))
    }

    /// The answer to the quiet check of a run from `after` that read up to a page ending at
    /// `last`.
    fn after_run_check(
        &mut self,
        after: Timestamp,
        last: Timestamp,
        full: bool,
        rows: &[RowKey],
        facts: PageFacts,
    ) -> State {
        if !run::is_quiet(rows, facts) {
            return self.fall_back(after);
        }
        self.run_pages = run::next_run_pages(self.run_pages);
        self.leave(if full {
            Exit::Continue(last)
        } else {
            Exit::End(last)
        })
    }

    /// A run that cannot be proven quiet: read again from where it began (the checkpoint),
    /// with the two scans, and without runs for the rest of the walk (a service that
    /// changed once is likely to again, and a run's pages would be read for nothing).
    fn fall_back(&mut self, after: Timestamp) -> State {
        tracing::debug!(%after, "a quiet run could not be proven quiet: read again with two scans");
        self.runs = false;
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
    fn new(at: Timestamp) -> Self {
        TieWalk {
            at,
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

/// Leaving the group from a page that shows its end next to what follows: keyset paging
/// resumes from the page's last row, or the walk ends there when the page is the last.
fn exit_through(at: Timestamp, rows: &[RowKey], full: bool) -> Exit {
    let last = rows.last().map_or(at, |r| r.updated_at);
    if full {
        Exit::Continue(last)
    } else {
        Exit::End(last)
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

/// A count of rows as a list position (saturating, which no real group reaches).
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

mod page;
mod run;
#[cfg(test)]
mod tests;
