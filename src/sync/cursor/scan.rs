//! The two scans of a tie group (invariant 2 of `cursor.rs`): what they read, where they saw the
//! group end, and what they may take as evidence of an unstable order (invariant 4). Pure
//! state; the walk's arms that drive it are `ties.rs`'s.

use std::collections::HashSet;
use std::time::Duration;

use uuid::Uuid;

use super::error::WalkError;
use super::page::{Exit, PageFacts, Place, RowKey, count_at, exit_through, len_u32, uids};
use crate::service::Timestamp;

#[derive(Debug)]
pub(super) struct TieWalk {
    pub(super) at: Timestamp,
    /// Every uid ever read at `at`. It grows only with rows actually read, so it bounds the
    /// pages a scan may take even against a service that answers every page alike. It is
    /// NOT the group's size: rows that have left the group stay in it.
    pub(super) seen: HashSet<Uuid>,
    /// Where the group ended (its rows at positions `0..end`) on its last page, as the
    /// current downward scan found it. No row can enter a group once time has moved past
    /// it, so from then on the group holds at most this many rows.
    pub(super) end: Option<u32>,
    pub(super) scan: Scan,
    pub(super) page: u32,
    /// How to leave the group, learnt in the current downward scan.
    pub(super) exit: Option<Exit>,
    pub(super) pages_in_scan: u32,
    pub(super) down_scans: u32,
    /// The upward scan's previous page, for [`TieWalk::check_page_moves`].
    previous: Option<Repeat>,
    /// `total_count` of the group's first page.
    count: Option<u64>,
    /// Whether a later page's `total_count` differed from it: rows may have entered the
    /// group, which shifts positions as an unstable order would.
    pub(super) count_moved: bool,
    /// Whether a page had no `total_count`: nothing tells entering rows from an unstable
    /// order then.
    pub(super) count_unknown: bool,
    /// Whether the group was older than the late-commit window by the service's clock at
    /// its first page: no call can enter it any more.
    pub(super) closed: bool,
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
pub(super) enum Scan {
    Up,
    /// Downward, still looking for the page where the group ends; `descended` once it has
    /// stepped down from a page without group rows.
    DownSeeking {
        descended: bool,
    },
    /// Downward from the group's last page towards page 1.
    Down,
}

impl TieWalk {
    /// The group at `at`, its first page (`rows`) read: the upward scan goes on from page 2.
    pub(super) fn opened(
        at: Timestamp,
        rows: &[RowKey],
        facts: PageFacts,
        late_commits: Duration,
    ) -> TieWalk {
        let mut tie = TieWalk::new(at, facts, late_commits);
        tie.record(rows);
        tie.previous = Some(Repeat {
            page: 1,
            first: 1,
            uids: uids(rows),
            times: 0,
        });
        tie.pages_in_scan = 1;
        tie.page = 2;
        tie
    }

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
    pub(super) fn read_again_unmoved(&mut self, rows: &[RowKey], facts: PageFacts) -> bool {
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
    pub(super) fn read_again_out_of_place(&mut self, rows: &[RowKey]) -> bool {
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

    pub(super) fn record(&mut self, rows: &[RowKey]) {
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
    pub(super) fn check_page_moves(&mut self, rows: &[RowKey]) -> Result<(), WalkError> {
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
    pub(super) fn saw_end(
        &mut self,
        at: Timestamp,
        page: u32,
        page_size: u32,
        rows: &[RowKey],
        (full, facts): (bool, PageFacts),
    ) {
        let tie_rows = count_at(at, rows);
        let place = Place::of(page, page_size, facts);
        self.end = Some(place.first.saturating_add(len_u32(tie_rows)));
        if !(full && tie_rows == rows.len())
            && let Some(exit) = exit_from(at, place, rows, full, tie_rows > 0)
        {
            self.exit = Some(exit);
        }
    }

    /// Page `page` of a downward scan holds no row of the group, yet rows: the group ends
    /// before it now, and can only shrink.
    pub(super) fn ends_before(&mut self, page: u32, page_size: u32) {
        let before = page.saturating_sub(1).saturating_mul(page_size);
        self.end = Some(self.end.map_or(before, |end| end.min(before)));
    }

    /// A downward scan starting at `top`, looking first for the page where the group ends.
    pub(super) fn start_down_scan(&mut self, top: u32) {
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
    pub(super) fn pages_needed(&self, page_size: u32) -> u32 {
        len_u32(self.seen.len()) / page_size.max(1) + 2
    }

    pub(super) fn unsettled(&self) -> WalkError {
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
    place: Place,
    rows: &[RowKey],
    full: bool,
    has_tie_row: bool,
) -> Option<Exit> {
    let page_one = place.first == 0;
    if rows.is_empty() && !page_one {
        return Some(Exit::End(at));
    }
    if !has_tie_row && !page_one {
        return None;
    }
    Some(exit_through(at, rows, full, place))
}
