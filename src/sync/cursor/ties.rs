//! The tie-group walk (invariant 2 of `cursor.rs`): a full page of the cursor's own instant
//! `T` is scanned up, then down once the service's clock has passed `T`, and left only from a
//! page that shows the group's last row next to what follows (an exit probe makes one); pages
//! per scan and scans are bounded (`TieUnsettled`). A scanned group that changed is confirmed
//! before the checkpoint passes it; one that shows an unstable order is covered
//! (`cover.rs`), and one that cannot be proven is held (invariant 4).

use super::cover::{self, Cover, Incomplete};
use super::error::WalkError;
use super::page::{Exit, Place, count_at, exit_through, len_u32, resumed};
use super::scan::{Scan, TieWalk};
use super::{HeldGroup, PageFacts, PageWalker, RowKey, State};
use crate::service::{MAX_PAGE_SIZE, Timestamp};

impl PageWalker {
    pub(super) fn after_tie_page(
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
                    tie.saw_end(at, page, self.page_size, rows, (full, facts));
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
                        tie.saw_end(at, page, self.page_size, rows, (full, facts));
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

    pub(super) fn after_exit_probe(
        &mut self,
        mut tie: TieWalk,
        rows: &[RowKey],
        (full, facts): (bool, PageFacts),
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
        let exit = exit_through(at, rows, full, Place::of(page, page_size, facts));
        Ok(self.leave_tie(tie, exit, reached))
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

    pub(super) fn after_confirm(
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
            return self.leave(exit_through(
                at,
                rows,
                full,
                Place::of(1, MAX_PAGE_SIZE, facts),
            ));
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
    pub(super) fn hold_or_fail(&mut self, failure: cover::Failure) -> Result<State, WalkError> {
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
    pub(super) fn hold_at(&mut self, at: Timestamp) {
        self.held = Some(self.held.map_or(at, |held| held.min(at)));
    }

    /// The service ordered a tie differently between two requests: cover the group at `at`,
    /// and every tie group after it.
    fn cover(&mut self, at: Timestamp, known: u32) -> State {
        self.found_unstable(at);
        State::Cover(Cover::new(at, known))
    }

    pub(super) fn found_unstable(&mut self, at: Timestamp) {
        if !self.unstable {
            tracing::warn!(
                %at,
                "the service orders calls sharing an updated_at differently from one request to the next: each such group is read until every call of it has shown"
            );
        }
        // Runs need no switching off: a walk found unstable covers every tie group first.
        self.unstable = true;
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
