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
//!      ends exactly on a page edge, one request with another page size makes such a page.
//!      Pages per scan and downward scans are bounded: a group that will not settle ends
//!      the pass with an error and the checkpoint stays at `T`.
//! - **Distrust.** A page larger than asked, out of `updated_at` order, or holding rows before
//!   the cursor is a protocol error, as is a page number the service ignores.

use std::collections::HashSet;

use uuid::Uuid;

use crate::api::{MAX_PAGE_SIZE, Timestamp};

/// The key of one listed row: all the walker needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowKey {
    pub uid: Uuid,
    pub updated_at: Timestamp,
}

/// One list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub updated_after: Timestamp,
    pub page: u32,
    pub page_size: u32,
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
    checkpoint: Timestamp,
    state: State,
}

#[derive(Debug)]
enum State {
    Keyset {
        cursor: Timestamp,
    },
    Tie(TieWalk),
    /// The group has settled but no page showed its last row next to what follows: one
    /// request with another page size, whose page holds both.
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
    /// Uids seen at `at`: the group's size as far as we know.
    seen: HashSet<Uuid>,
    scan: Scan,
    page: u32,
    /// How to leave the group, learnt in the current downward scan.
    exit: Option<Exit>,
    pages_in_scan: u32,
    down_scans: u32,
    previous_page_uids: Option<(u32, Vec<Uuid>)>,
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
    /// A walk of everything updated at or after `start`.
    pub fn new(start: Timestamp, page_size: u32, limits: WalkLimits) -> Self {
        PageWalker {
            page_size: page_size.clamp(1, MAX_PAGE_SIZE),
            limits,
            checkpoint: start,
            state: State::Keyset { cursor: start },
        }
    }

    /// The next request, or `None` when the walk has reached the end of the data.
    pub fn next_request(&self) -> Option<PageRequest> {
        let (updated_after, page, page_size) = match &self.state {
            State::Keyset { cursor } => (*cursor, 1, self.page_size),
            State::Tie(tie) => (tie.at, tie.page, self.page_size),
            State::ExitProbe {
                tie,
                page,
                page_size,
            } => (tie.at, *page, *page_size),
            State::Done => return None,
        };
        Some(PageRequest {
            updated_after,
            page,
            page_size,
        })
    }

    /// The instant the walk has reached: everything before it has been read.
    pub fn position(&self) -> Timestamp {
        self.checkpoint
    }

    /// Takes the rows returned for [`next_request`](Self::next_request), in the order received.
    pub fn accept(&mut self, rows: &[RowKey]) -> Result<Accepted, WalkError> {
        if let Some(request) = self.next_request() {
            validate(&request, rows)?;
            let full = rows.len() == request.page_size as usize;
            self.state = match std::mem::replace(&mut self.state, State::Done) {
                State::Keyset { cursor } => self.after_keyset_page(cursor, rows, full),
                State::Tie(tie) => self.after_tie_page(tie, rows, full)?,
                State::ExitProbe { tie, .. } => self.after_exit_probe(tie, rows, full)?,
                State::Done => State::Done,
            };
        }
        Ok(Accepted {
            checkpoint: self.checkpoint,
        })
    }

    fn after_keyset_page(&mut self, cursor: Timestamp, rows: &[RowKey], full: bool) -> State {
        let last = rows.last().map_or(cursor, |r| r.updated_at);
        if !full {
            self.advance(last);
            return State::Done;
        }
        if last > cursor {
            self.advance(last);
            return State::Keyset { cursor: last };
        }
        // A full page of nothing but `cursor`: it is page 1 of an upward scan of the group.
        let mut tie = TieWalk::new(cursor);
        tie.record(rows);
        tie.previous_page_uids = Some((1, uids(rows)));
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
        tie.check_page_moves(rows)?;
        tie.record(rows);
        tie.pages_in_scan += 1;
        let (at, page) = (tie.at, tie.page);
        let has_tie_row = rows.iter().any(|r| r.updated_at == at);
        let all_tie = full && rows.iter().all(|r| r.updated_at == at);
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
                    // The group's last page. Full of the group, it ends on the page edge: no
                    // page shows what follows next to it, so no exit yet (the probe makes one).
                    if !all_tie {
                        tie.exit = exit_from(at, page, rows, full, has_tie_row);
                    }
                    tie.scan = Scan::Down;
                    tie.page = page - 1;
                }
                Scan::Down => tie.page -= 1,
            }
            break;
        }
        if tie.scan == Scan::Down && tie.page == 0 {
            return Ok(match tie.exit {
                Some(exit) => self.leave(exit),
                None => probe_exit(tie, self.page_size),
            });
        }
        let allowed = tie.pages_needed(self.page_size) + self.limits.max_extra_pages_per_scan;
        if tie.pages_in_scan >= allowed {
            return Err(tie.unsettled());
        }
        Ok(State::Tie(tie))
    }

    fn after_exit_probe(
        &mut self,
        mut tie: TieWalk,
        rows: &[RowKey],
        full: bool,
    ) -> Result<State, WalkError> {
        tie.record(rows);
        let at = tie.at;
        let has_tie_row = rows.iter().any(|r| r.updated_at == at);
        let all_tie = full && rows.iter().all(|r| r.updated_at == at);
        let last = rows.last().map_or(at, |r| r.updated_at);
        let exit = match () {
            // Nothing at or after the group's last row: the group ends the data.
            _ if rows.is_empty() => Some(Exit::End(at)),
            _ if all_tie || !has_tie_row => None,
            _ if full => Some(Exit::Continue(last)),
            _ => Some(Exit::End(last)),
        };
        match exit {
            Some(exit) => Ok(self.leave(exit)),
            // The group changed since the downward scan: scan down again.
            None => {
                if tie.down_scans >= self.limits.max_tie_scans {
                    return Err(tie.unsettled());
                }
                let top = tie.pages_needed(self.page_size).saturating_sub(1).max(1);
                tie.start_down_scan(top);
                Ok(State::Tie(tie))
            }
        }
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

/// A page size for which the group's last row (position `size - 1`) and the row after it
/// (position `size`) fall on one page: any size that does not divide `size`. Sizes up to the
/// service's maximum are allowed, so one always exists.
fn probe_exit(tie: TieWalk, page_size: u32) -> State {
    let size = u32::try_from(tie.seen.len()).unwrap_or(u32::MAX).max(1);
    let below = (1..page_size).rev();
    let above = page_size + 1..=MAX_PAGE_SIZE;
    let probe_size = below
        .chain(above)
        .find(|m| size % m != 0)
        .unwrap_or(page_size);
    State::ExitProbe {
        page: size / probe_size + 1,
        page_size: probe_size,
        tie,
    }
}

impl TieWalk {
    fn new(at: Timestamp) -> Self {
        TieWalk {
            at,
            seen: HashSet::new(),
            scan: Scan::Up,
            page: 1,
            exit: None,
            pages_in_scan: 0,
            down_scans: 0,
            previous_page_uids: None,
        }
    }

    fn record(&mut self, rows: &[RowKey]) {
        for row in rows.iter().filter(|r| r.updated_at == self.at) {
            self.seen.insert(row.uid);
        }
    }

    /// Two page numbers answered with the same full page of group rows: the service ignores
    /// `page`, and no number of scans would help. (With small pages, rows entering the group
    /// can shift a whole page between two requests, so only pages of 10 and more are judged;
    /// the page bound catches the rest.)
    fn check_page_moves(&mut self, rows: &[RowKey]) -> Result<(), WalkError> {
        let current = uids(rows);
        if let Some((previous, before)) = &self.previous_page_uids
            && current.len() >= 10
            && *previous != self.page
            && rows.iter().all(|r| r.updated_at == self.at)
            && *before == current
        {
            return Err(WalkError::PageIgnored {
                after: self.at,
                page: self.page,
                previous: *previous,
            });
        }
        self.previous_page_uids = Some((self.page, current));
        Ok(())
    }

    /// A downward scan starting at `top`, looking first for the page where the group ends.
    fn start_down_scan(&mut self, top: u32) {
        self.down_scans += 1;
        self.scan = Scan::DownSeeking { descended: false };
        self.page = top.max(1);
        self.pages_in_scan = 0;
        self.previous_page_uids = None;
    }

    fn pages_needed(&self, page_size: u32) -> u32 {
        let size = u32::try_from(self.seen.len()).unwrap_or(u32::MAX);
        size / page_size.max(1) + 2
    }

    fn unsettled(&self) -> WalkError {
        WalkError::TieUnsettled {
            at: self.at,
            size: self.seen.len(),
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
    let last = rows.last().map_or(at, |r| r.updated_at);
    Some(if full {
        Exit::Continue(last)
    } else {
        Exit::End(last)
    })
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

fn uids(rows: &[RowKey]) -> Vec<Uuid> {
    rows.iter().map(|r| r.uid).collect()
}

#[cfg(test)]
mod tests;
