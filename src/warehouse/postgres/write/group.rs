//! Pages of several passes in one transaction. The daemon's passes hand their pages to the
//! writer together (`Destination::write_pages`), and a group of them (of several schedules,
//! no call in two of them) is one transaction: a page's statements and commit cost the server
//! more than its rows, and a group shares them (BENCHMARKS.md, "First sync, PostgreSQL"). Each
//! page of a group is planned as alone, and the rounds of all its pages are merged round by
//! round. A group the server refuses, for whatever reason, is written page by page: a page's
//! failure stays its own. A page written alone is a group of one.
//!
//! A page is written only under its schedule's claim, and its transaction begins with the
//! claim's fence (`claim.rs`): a process that lost its claim, even without knowing it, never
//! commits a page after another process claimed the schedule.

use std::collections::HashMap;

use uuid::Uuid;

use super::columns::{Reserved, RoundRows, ids_wanted, round_rows};
use super::quiet::{READ_FINGERPRINTS, stored_among, stored_fingerprints};
use super::set_aside::AsideWrites;
use super::{Inserts, Page, PagesEnd};
use crate::service::Timestamp;
use crate::warehouse::destination::PageBatch;
use crate::warehouse::error::WarehouseError;
use crate::warehouse::postgres::PgWarehouse;
use crate::warehouse::postgres::claim::READ_FENCES;
use crate::warehouse::postgres::pipeline::Pipeline;
use crate::warehouse::postgres::session::{PgContext, RowColumn, wait};
use crate::warehouse::rows::CallRow;
use crate::warehouse::set_aside::{self, SetAside};
use crate::warehouse::write_plan::{Fingerprint, PageWrite, plan, rows_of};

/// Reserves `$1` ids of calls and `$2` of attempts, each list in the order its sequence gave
/// them: the ids a page's new calls and attempts take when the page writes no stored call.
/// NULLs when callsync's role may not take them (`nextval` needs the sequences' USAGE or
/// UPDATE, where an insert's own identity default needs neither: a role that writes the tables
/// of an owner who granted no more still writes, upserting every page).
const RESERVE_IDS: &str = "SELECT
       CASE WHEN may THEN array(SELECT nextval(c) FROM generate_series(1, $1::int8)) END,
       CASE WHEN may THEN array(SELECT nextval(a) FROM generate_series(1, $2::int8)) END
     FROM (SELECT c, a,
             coalesce(has_sequence_privilege(c, 'USAGE, UPDATE')
                      AND has_sequence_privilege(a, 'USAGE, UPDATE'), false) AS may
           FROM (SELECT pg_get_serial_sequence('calls', 'id')::regclass AS c,
                        pg_get_serial_sequence('call_attempts', 'id')::regclass AS a) AS s) AS s";

const RESERVING: &str = "reserving ids for the page's calls";
const CHECKING_FENCES: &str = "checking the schedules' fences";

impl PgWarehouse {
    /// Whether `pages` may be written in one transaction: no schedule twice (a statement
    /// moves each checkpoint once), no call in two pages (a statement writes each row once;
    /// within a page, the plan's rounds take care of that), and no pass still expecting its
    /// pages quiet (those are read first, [`Self::write_quiet_pages`]).
    pub(in crate::warehouse::postgres) fn may_write_together(&self, pages: &[PageBatch]) -> bool {
        let mut schedules = std::collections::HashSet::new();
        let mut owners: HashMap<Uuid, Uuid> = HashMap::new();
        pages.iter().all(|page| {
            schedules.insert(page.schedule)
                && self.quiet_expected(page.schedule).is_none()
                && (page.calls.iter())
                    .all(|c| *owners.entry(c.uid).or_insert(page.schedule) == page.schedule)
        })
    }

    /// `pages` in one transaction ([`Self::write_group`]); `None` when it was rolled back as
    /// stored meanwhile.
    pub(in crate::warehouse::postgres) fn write_together(
        &self,
        pages: &[PageBatch],
    ) -> Result<Option<Vec<PageWrite>>, WarehouseError> {
        self.reconnect_if_closed()?;
        let generations = (pages.iter())
            .map(|page| self.locks.fence(page.schedule))
            .collect::<Result<Vec<i64>, _>>()?;
        let schedule_uids: Vec<String> = pages.iter().map(|p| p.schedule.to_string()).collect();
        let call_rows: Vec<Vec<CallRow<'_>>> = (pages.iter().zip(&schedule_uids))
            .map(|(page, uid)| rows_of(uid, &page.calls, &page.content_hashes))
            .collect();
        let group: Vec<Page<'_>> = (pages.iter().zip(&call_rows).zip(generations))
            .map(|((page, call_rows), generation)| Page {
                schedule: page.schedule,
                generation,
                calls: &page.calls,
                call_rows,
                checkpoint: page.checkpoint,
                synced_at: page.synced_at.to_warehouse_text(),
                set_aside: &page.set_aside,
                run: page.run,
            })
            .collect();
        self.replanning(|| match self.write_group(&group, Inserts::Allowed)? {
            PagesEnd::Written(counts) => Ok(Some(counts)),
            PagesEnd::StoredMeanwhile => Ok(None),
        })
    }

    /// One transaction: the pages' start ([`Self::begin_group`]), then their statements, one
    /// a table for all of them (the rounds of every page merged, round by round), their
    /// checkpoints and the commit ([`Self::write_and_commit`]).
    pub(super) fn write_group(
        &self,
        pages: &[Page<'_>],
        inserts: Inserts,
    ) -> Result<PagesEnd, WarehouseError> {
        let (stored, mut reserved) = match self.begin_group(pages, inserts) {
            Ok(begun) => begun,
            Err(err) => return self.end_transaction(Err(err), "committing a page"),
        };
        let mut counts = Vec::with_capacity(pages.len());
        let mut rounds: Vec<Vec<RoundRows>> = Vec::new();
        let mut aside = AsideWrites::new();
        let mut checkpoints: Vec<(Uuid, Timestamp)> = Vec::with_capacity(pages.len());
        for page in pages {
            let plan = plan(
                page.calls,
                page.call_rows,
                stored_among(&stored, page.calls),
                page.schedule,
            );
            let conflicts = set_aside::conflicts(page.schedule, page.calls, page.run, &plan);
            let rows: Vec<&SetAside> = page.set_aside.iter().chain(&conflicts.rows).collect();
            let checkpoint = set_aside::held(page.checkpoint, conflicts.hold_at);
            aside.add(
                (page.schedule, checkpoint),
                set_aside::fitting(page.calls, &plan),
                &rows,
            );
            if let Some(cursor) = checkpoint {
                checkpoints.push((page.schedule, cursor));
            }
            let own = (reserved.as_mut()).map(|r| r.take_front(ids_wanted(page.calls)));
            for (i, round) in plan.rounds().iter().enumerate() {
                // Only a page's first round can be new calls only: a call's second write in
                // a page is of a stored call.
                let reserved = own.as_ref().filter(|_| i == 0);
                let rows = round_rows(page.calls, page.call_rows, round, reserved, &page.synced_at);
                match rounds.get_mut(i) {
                    Some(merged) => merged.push(rows),
                    None => rounds.push(vec![rows]),
                }
            }
            counts.push(PageWrite {
                set_aside: plan.counts.set_aside + page.set_aside.len() as u64,
                hold_at: conflicts.hold_at,
                ..plan.counts
            });
        }
        let rounds: Vec<RoundRows> = (rounds.into_iter())
            .filter_map(|pages| pages.into_iter().reduce(RoundRows::merge))
            .collect();
        Ok(
            match self.write_and_commit(&rounds, &checkpoints, &aside)? {
                Some(set_aside) => PagesEnd::Written(
                    (counts.into_iter().zip(pages))
                        .map(|(written, page)| PageWrite {
                            set_aside_now: Some(
                                set_aside.get(&page.schedule).copied().unwrap_or(0),
                            ),
                            ..written
                        })
                        .collect(),
                ),
                None => PagesEnd::StoredMeanwhile,
            },
        )
    }

    /// One round trip: the pages' transaction begins, their fences are checked
    /// ([`Self::check_fence`]), their stored calls' fingerprints are read, and ids are
    /// reserved for their calls and attempts, in case none is stored (`Reserved`).
    fn begin_group(
        &self,
        pages: &[Page<'_>],
        inserts: Inserts,
    ) -> Result<(HashMap<Uuid, Fingerprint>, Option<Reserved>), WarehouseError> {
        let schedules: Vec<Uuid> = pages.iter().map(|page| page.schedule).collect();
        let uids: Vec<Uuid> = (pages.iter())
            .flat_map(|page| page.calls.iter().map(|c| c.uid))
            .collect();
        let wanted = (pages.iter())
            .map(|page| ids_wanted(page.calls))
            .fold([0, 0], |[c, a], [dc, da]| [c + dc, a + da])
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let mut pipeline = Pipeline::default();
        let fences = self.statement(READ_FENCES, CHECKING_FENCES)?;
        pipeline.push(fences, vec![&schedules], CHECKING_FENCES);
        if !uids.is_empty() {
            let read = self.statement(READ_FINGERPRINTS, "reading the page's stored calls")?;
            pipeline.push(read, vec![&uids], "reading the page's stored calls");
            if inserts == Inserts::Allowed {
                let reserve = self.statement(RESERVE_IDS, RESERVING)?;
                pipeline.push(reserve, vec![&wanted[0], &wanted[1]], RESERVING);
            }
        }
        let client = self.client()?;
        let (begun, answers) = wait(async {
            futures::join!(client.batch_execute("BEGIN"), pipeline.answers(&client))
        });
        begun.pg(&self.target, "starting a page transaction")?;
        let mut answers = pipeline.rows(answers, &self.target)?.into_iter();
        let fences: HashMap<Uuid, i64> = (answers.next().unwrap_or_default().iter())
            .map(|row| {
                let schedule = row.column(0, &self.target, CHECKING_FENCES)?;
                Ok((schedule, row.column(1, &self.target, CHECKING_FENCES)?))
            })
            .collect::<Result<_, WarehouseError>>()?;
        for page in pages {
            let current = fences.get(&page.schedule).copied();
            self.check_fence(page.schedule, page.generation, current)?;
        }
        let stored = stored_fingerprints(&answers.next().unwrap_or_default())
            .pg(&self.target, "reading the page's stored calls")?;
        let reserved = match answers.next().as_deref() {
            Some([row]) => {
                let calls: Option<Vec<i64>> = row.column(0, &self.target, RESERVING)?;
                let attempts: Option<Vec<i64>> = row.column(1, &self.target, RESERVING)?;
                calls
                    .zip(attempts)
                    .map(|(calls, attempts)| Reserved { calls, attempts })
            }
            _ => None,
        };
        Ok((stored, reserved))
    }

    /// A page's fence (`claim.rs`), first in its transaction: `schedule`'s fencing token
    /// (`current`, read `FOR SHARE` there) is still `generation`, the one this process's
    /// claim took, and stays so until the page commits (another process's claim waits for the
    /// commit). Else another process has claimed the schedule since, and the page is refused.
    fn check_fence(
        &self,
        schedule: Uuid,
        generation: i64,
        current: Option<i64>,
    ) -> Result<(), WarehouseError> {
        if current == Some(generation) {
            return Ok(());
        }
        tracing::warn!(
            %schedule,
            held = generation,
            now = ?current,
            "another process claimed the schedule since this one did; the page is not written"
        );
        Err(self.locks.taken_over(schedule))
    }
}
