//! Pages and their checkpoints in one PostgreSQL transaction, each table written by ONE
//! statement: the pages' rows go as arrays (`unnest($1::uuid[], …)`, binary protocol). A
//! transaction costs two round trips whatever its size (`pipeline.rs`): its start, with the
//! fences, the stored calls' fingerprints (which decide what is written) and ids reserved for
//! the calls and attempts; then every statement, in order (the calls; their own children:
//! parameters, attempts, notifications; the attempts' outcomes and variables; the summaries),
//! the checkpoints and the commit, none waiting for another's answer.
//!
//! The daemon's passes hand their pages to the writer together (`Destination::write_pages`),
//! and a group of them (of several schedules, no call in two of them) is one transaction: on
//! pages of 10 new calls the statements and the commit were most of a page's cost to the
//! server, which a group shares (10,000 first-sync pages: 17 s of the server's CPU alone, 6 s
//! in groups). Each page of a group is planned as alone, and the rounds of all its pages are
//! merged round by round. A group the server refuses, for whatever reason, is written page by
//! page: a page's failure stays its own. A page written alone is a group of one. A page whose
//! calls are all new is inserted with the ids it reserved, as COPY writes rows; any other is
//! upserted (`ON CONFLICT`), a child row finding its call's and attempt's ids on the server by
//! the uids it carries (`batch.rs`). A page that changes no call costs two, or one (below).
//!
//! The rule is every destination's (`warehouse/write_plan.rs`): which calls are written, in
//! which round, how their children mirror the service and whether their summary is known.
//! One statement cannot touch a row twice, where row-by-row writes let the last one win: so a
//! call listed twice in a page goes into a second round of statements (the plan's rounds),
//! and a child uid repeated within a call keeps its last row (and an attempt's last sent list
//! of outcomes or variables), which is what the row-by-row writes leave.
//!
//! A page is written only under its schedule's claim, and its transaction begins with the
//! claim's fence (`claim.rs`): a process that lost its claim, even without knowing it, never
//! commits a page after another process claimed the schedule.
//!
//! An idle pass's page changes nothing: its calls are stored as they are, its checkpoint
//! stays. So a pass that opened with a checkpoint reads its pages first outside a transaction
//! (the stored fingerprints, one statement, against the cursor it opened with), and writes
//! nothing for one that changes nothing: nothing is written, so there is nothing to fence or
//! commit. Its first page that changes something is written as any other, and so are its
//! pages after it (a round trip more for that one page, where an idle page saves one and four
//! statements).

use std::collections::HashMap;
use std::sync::PoisonError;

use tokio_postgres::error::SqlState;
use uuid::Uuid;

use super::PgWarehouse;
use super::batch::{
    ATTEMPTS, Batch, CALLS, NOTIFICATIONS, OUTCOMES, PARAMETERS, V, VARIABLES, Write, t,
};
use super::claim::READ_FENCES;
use super::pipeline::Pipeline;
use super::runs::ADVANCE_CHECKPOINTS;
use super::session::{PgContext, RowColumn, micros, wait};
use crate::service::{Attempt, OutboundCall, Timestamp};
use crate::warehouse::destination::{Looked, PageBatch};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::rows::{self, AttemptRow, CallRow};
use crate::warehouse::write_plan::{ChildRule, Fingerprint, PageWrite, plan, rows_of};

const READ_FINGERPRINTS: &str =
    "SELECT uid, content_hash, schedule_uid FROM calls WHERE uid = ANY($1)";

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

/// Deletes the attempts of the mirrored calls `$1` (uids) the service no longer shows (`$2`,
/// `$3`: the attempts kept, by call uid and uid), with their outcomes and variables.
const DELETE_GONE_ATTEMPTS: &str = "WITH gone AS (
       DELETE FROM call_attempts
       WHERE call_id IN (SELECT id FROM calls WHERE uid = ANY($1::text[]::uuid[]))
         AND (call_uid, uid) NOT IN
           (SELECT k.c::uuid, k.u::uuid FROM unnest($2::text[], $3::text[]) AS k(c, u))
       RETURNING call_id, id),
     outcomes AS (
       DELETE FROM attempt_outcomes AS x USING gone
       WHERE x.call_id = gone.call_id AND x.attempt_id = gone.id)
     DELETE FROM attempt_variables AS x USING gone
     WHERE x.call_id = gone.call_id AND x.attempt_id = gone.id";

/// Recomputes the summary columns of the calls `$1` (uids) from their child rows: the SQLite
/// warehouse's `summarize`, with its orderings spelt out (NULLs as SQLite sorts them, names
/// byte by byte); then their last attempt's columns, from the attempt the first one chose.
const SUMMARIZE: [(&str, &str); 2] = [
    (
        "UPDATE calls SET
           attempt_count = (SELECT count(*) FROM call_attempts WHERE call_id = calls.id),
           last_attempt_uid = (SELECT uid FROM call_attempts WHERE call_id = calls.id
               ORDER BY coalesce(started_at, created_at) DESC NULLS LAST, position DESC
               LIMIT 1),
           answered = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_id = calls.id AND answered_at IS NOT NULL),
           transferred = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_id = calls.id AND transfer_started_at IS NOT NULL),
           notification_count =
               (SELECT count(*) FROM call_notifications WHERE call_id = calls.id),
           outcome_names = (SELECT string_agg(name, ', '
                   ORDER BY first_position, first_at NULLS FIRST, name COLLATE \"C\")
               FROM (SELECT o.name AS name, min(a.position) AS first_position,
                       min(o.created_at) AS first_at
                     FROM attempt_outcomes AS o
                     JOIN call_attempts AS a ON a.id = o.attempt_id
                     WHERE o.call_id = calls.id
                     GROUP BY o.name) AS g)
         WHERE uid = ANY($1::text[]::uuid[])",
        "summarising calls' attempts",
    ),
    (
        "UPDATE calls SET
           (last_attempt_status, last_attempt_started_at, last_attempt_answered_at,
            last_attempt_ended_at, last_attempt_duration) =
           (SELECT status, started_at, answered_at, ended_at, duration
            FROM call_attempts WHERE call_id = calls.id AND uid = calls.last_attempt_uid)
         WHERE uid = ANY($1::text[]::uuid[])",
        "summarising calls' last attempts",
    ),
];

const RESERVING: &str = "reserving ids for the page's calls";
const CHECKING_FENCES: &str = "checking the schedules' fences";

/// A page to write, as `write_hashed_page` was given it.
struct Page<'a> {
    schedule: Uuid,
    /// The fencing token of this process's claim on `schedule`.
    generation: i64,
    calls: &'a [OutboundCall],
    call_rows: &'a [CallRow<'a>],
    checkpoint: Option<Timestamp>,
    synced_at: String,
}

/// Whether a page of new calls only may be inserted (`RoundRows::write`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Inserts {
    Allowed,
    /// The page is upserted whole: its first try was refused, a call of it stored meanwhile.
    Never,
}

/// How a transaction of pages ended.
enum PagesEnd {
    /// Each page's counts, in order.
    Written(Vec<PageWrite>),
    /// Rolled back: a call the pages inserted as new was stored by another transaction after
    /// they read their stored calls (a call moved between two schedules written at once).
    StoredMeanwhile,
}

/// Ids reserved for pages' calls and attempts (`RESERVE_IDS`), each list ascending.
struct Reserved {
    calls: Vec<i64>,
    attempts: Vec<i64>,
}

impl Reserved {
    /// The first `calls` and `attempts` ids (fewer when there are not as many), taken off.
    fn take_front(&mut self, [calls, attempts]: [usize; 2]) -> Reserved {
        let front = |ids: &mut Vec<i64>, n: usize| {
            let rest = ids.split_off(n.min(ids.len()));
            std::mem::replace(ids, rest)
        };
        Reserved {
            calls: front(&mut self.calls, calls),
            attempts: front(&mut self.attempts, attempts),
        }
    }
}

/// How many ids `calls` may take: one each, and one for each of their attempts.
fn ids_wanted(calls: &[OutboundCall]) -> [usize; 2] {
    let attempts = (calls.iter())
        .map(|c| c.outbound_call_attempts.as_ref().map_or(0, Vec::len))
        .sum();
    [calls.len(), attempts]
}

const DELETING_GONE: &str = "deleting children the service no longer shows";

/// A call of the round being written, with what its write needs.
struct Pending<'p> {
    call: &'p OutboundCall,
    row: &'p CallRow<'p>,
    /// Its id and its written attempts' (in `written`'s order), when its round is inserted
    /// with reserved ids.
    ids: Option<(i64, Vec<i64>)>,
    attempts: Vec<AttemptRow>,
    /// The attempts written, as indices into `attempts`: a uid repeated, its last row.
    written: Vec<usize>,
    /// Children the service no longer shows are deleted.
    mirror: bool,
    /// The summary computed from the children sent is the stored one.
    summary_known: bool,
}

/// A round's rows, gathered before any of its statements is sent: they are the statements'
/// parameters, which live until the page's answers are in. Calls are named by uid.
struct RoundRows {
    /// `Insert` when every call of the round is new to the warehouse (not stored before the
    /// page, nor earlier in it), and the page reserved ids enough: then no stored row shares a
    /// key with its rows (each key holds the new call's id, and a round holds a child's key
    /// once), and they are inserted with their ids as COPY would, with no index probe before
    /// each row and no join. A call another transaction stored meanwhile (a call moved between
    /// two schedules written at once) makes the insert fail: the page is rolled back and
    /// written again at once, upserted (`PageEnd::StoredMeanwhile`). Else `Upsert`.
    write: Write,
    calls: Batch,
    /// The mirrored calls, whose custom parameters are replaced whole.
    mirrored: Vec<String>,
    parameters: Batch,
    kept: Kept,
    attempts: Batch,
    /// The mirrored calls whose notifications were sent, replacing the stored ones.
    notified: Vec<String>,
    notifications: Batch,
    /// The outcomes, then the variables, each with the attempts whose lists they replace.
    lists: [(Batch, Replaced); 2],
    /// The calls whose summary the children sent do not tell.
    unknown: Vec<String>,
}

impl RoundRows {
    /// The rows of two pages' rounds, as one round: inserted when both are, else upserted
    /// (an upsert does not send the ids an insert's rows carry). The pages name no call in
    /// common (`PgWarehouse::may_write_together`), so no row is written twice.
    fn merge(mut self, round: RoundRows) -> RoundRows {
        if round.write == Write::Upsert {
            self.write = Write::Upsert;
        }
        self.calls.append(round.calls);
        self.mirrored.extend(round.mirrored);
        self.parameters.append(round.parameters);
        self.kept.calls.extend(round.kept.calls);
        self.kept.of_calls.extend(round.kept.of_calls);
        self.kept.uids.extend(round.kept.uids);
        self.attempts.append(round.attempts);
        self.notified.extend(round.notified);
        self.notifications.append(round.notifications);
        for ((batch, replaced), (more, also)) in self.lists.iter_mut().zip(round.lists) {
            batch.append(more);
            replaced.calls.extend(also.calls);
            replaced.attempts.extend(also.attempts);
        }
        self.unknown.extend(round.unknown);
        self
    }
}

/// The attempts a mirrored call keeps (every other of its attempts goes), by call uid and
/// uid, and the calls they are of.
#[derive(Default)]
struct Kept {
    calls: Vec<String>,
    of_calls: Vec<String>,
    uids: Vec<String>,
}

/// The attempts whose list of outcomes (or variables) is replaced whole, by call uid and uid.
#[derive(Default)]
struct Replaced {
    calls: Vec<String>,
    attempts: Vec<String>,
}

impl PgWarehouse {
    /// Writes `calls` of `schedule` and, when given, moves its checkpoint forward — all or
    /// nothing (see the SQLite warehouse's `write_hashed_page`).
    pub fn write_hashed_page(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        content_hashes: &[u64],
        checkpoint: Option<Timestamp>,
        synced_at: Timestamp,
    ) -> Result<PageWrite, WarehouseError> {
        self.reconnect_if_closed()?;
        let generation = self.locks.fence(schedule)?;
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        if let Some(opened_at) = self.quiet_expected(schedule)
            && let Some(unchanged) =
                self.replanning(|| {
                    let stored = self.stored_calls(calls)?;
                    Ok(self.unchanged_given(
                        schedule, calls, &call_rows, checkpoint, opened_at, stored,
                    ))
                })?
        {
            return Ok(unchanged);
        }
        let page = Page {
            schedule,
            generation,
            calls,
            call_rows: &call_rows,
            checkpoint,
            synced_at: synced_at.to_warehouse_text(),
        };
        // A refused statement aborts the transaction, which is rolled back (or, refused with
        // the commit, rolled back by it) before the page is asked again.
        self.replanning(|| match self.write_group(std::slice::from_ref(&page), Inserts::Allowed)? {
            PagesEnd::Written(counts) => Ok(only_page(counts)),
            PagesEnd::StoredMeanwhile => {
                tracing::info!(
                    %schedule,
                    "another transaction stored a call of the page while it was inserted as new; writing the page again"
                );
                match self.write_group(std::slice::from_ref(&page), Inserts::Never)? {
                    PagesEnd::Written(counts) => Ok(only_page(counts)),
                    // Never: a page that inserts nothing is not refused so.
                    PagesEnd::StoredMeanwhile => Err(WarehouseError::Server {
                        target: self.target.display().to_owned(),
                        step: "committing a page",
                        cause: "the page was rolled back as stored meanwhile though it inserted nothing; nothing of it was written, and this is a bug in callsync: report it".to_owned(),
                    }),
                }
            }
        })
    }

    /// [`crate::warehouse::Destination::write_pages`]: the pages of several passes in one
    /// transaction ([`Self::write_together`]), which costs the server a fraction of a
    /// transaction each (on pages of 10 new calls, most of a page's cost is its statements'
    /// and its transaction's, not its rows'). Pages that cannot go together (two of one
    /// schedule, a call in two of them, a pass still reading its pages first), or a group the
    /// server refused, are each written alone, as `write_page` does: so a page's failure is
    /// its own, and the single page's path keeps its whole handling. Each result goes to
    /// `written` once its page is committed.
    pub fn write_pages(
        &mut self,
        pages: Vec<PageBatch>,
        written: &mut dyn FnMut(Result<PageWrite, WarehouseError>),
    ) {
        if pages.len() > 1 && self.may_write_together(&pages) {
            match self.write_together(&pages) {
                Ok(Some(counts)) => return counts.into_iter().map(Ok).for_each(written),
                Ok(None) => tracing::debug!(
                    pages = pages.len(),
                    "another transaction stored a call of a group of pages while it was inserted as new; writing each page alone"
                ),
                Err(err) => tracing::debug!(
                    error = %err,
                    pages = pages.len(),
                    "cannot write a group of pages in one transaction; writing each alone"
                ),
            }
        }
        for page in &pages {
            let (calls, hashes) = (&page.calls, &page.content_hashes);
            let (checkpoint, synced_at) = (page.checkpoint, page.synced_at);
            written(self.write_hashed_page(page.schedule, calls, hashes, checkpoint, synced_at));
        }
    }

    /// Whether `pages` may be written in one transaction: no schedule twice (a statement
    /// moves each checkpoint once), no call in two pages (a statement writes each row once;
    /// within a page, the plan's rounds take care of that), and no pass still expecting its
    /// pages quiet (those are read first, [`Self::write_quiet_pages`]).
    fn may_write_together(&self, pages: &[PageBatch]) -> bool {
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
    fn write_together(
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
    fn write_group(
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
        for page in pages {
            let plan = plan(
                page.calls,
                page.call_rows,
                stored_among(&stored, page.calls),
                page.schedule,
            );
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
            counts.push(plan.counts);
        }
        let rounds: Vec<RoundRows> = (rounds.into_iter())
            .filter_map(|pages| pages.into_iter().reduce(RoundRows::merge))
            .collect();
        let checkpoints: Vec<(Uuid, Timestamp)> = (pages.iter())
            .filter_map(|page| Some((page.schedule, page.checkpoint?)))
            .collect();
        let committed = self.write_and_commit(&rounds, &checkpoints)?;
        Ok(if committed {
            PagesEnd::Written(counts)
        } else {
            PagesEnd::StoredMeanwhile
        })
    }

    /// Notes the cursor of the checkpoint `schedule`'s pass opened with, if any: then its
    /// pages are read first, as long as they change nothing ([`Self::unchanged_given`]).
    pub(super) fn expect_quiet(&self, schedule: Uuid, opened_at: Option<Timestamp>) {
        let mut expected = self.quiet.lock().unwrap_or_else(PoisonError::into_inner);
        match opened_at {
            Some(cursor) => expected.insert(schedule, cursor),
            None => expected.remove(&schedule),
        };
    }

    /// The cursor `schedule`'s pass opened with, while its pages have changed nothing.
    fn quiet_expected(&self, schedule: Uuid) -> Option<Timestamp> {
        let expected = self.quiet.lock().unwrap_or_else(PoisonError::into_inner);
        expected.get(&schedule).copied()
    }

    /// Given the page's stored fingerprints (read in one statement outside a transaction,
    /// for it alone or with a group's pages): the page's counts when no call of it changed
    /// and its checkpoint would not move `opened_at`, the cursor the pass opened with (the
    /// write would change nothing); else `None`, and the schedule's pages are written in a
    /// transaction from now on.
    ///
    /// `opened_at` stands for the stored cursor, not read again: a page that changes nothing
    /// leaves it as it was, the claim keeps every other process's pass and `checkpoint`
    /// command from moving it meanwhile, and this process's `replace_checkpoint` forgets it.
    /// A claim lost unknowingly changes nothing: then no write of this process commits (the
    /// fence refuses it), and an unchanged page writes nothing either.
    fn unchanged_given(
        &self,
        schedule: Uuid,
        calls: &[OutboundCall],
        call_rows: &[CallRow<'_>],
        checkpoint: Option<Timestamp>,
        opened_at: Timestamp,
        stored: HashMap<Uuid, Fingerprint>,
    ) -> Option<PageWrite> {
        let plan = plan(calls, call_rows, stored, schedule);
        // `ADVANCE_CHECKPOINT` moves it only forward, compared to the microsecond.
        let stays = checkpoint.is_none_or(|c| micros(opened_at) >= micros(c));
        if plan.calls.is_empty() && stays {
            return Some(plan.counts);
        }
        self.expect_quiet(schedule, None);
        None
    }

    /// [`crate::warehouse::Destination::write_quiet_pages`]: the stored calls of every page
    /// whose pass still expects it quiet, read in one statement; each page that changes
    /// nothing answered so ([`Self::unchanged_given`]), every other handed back to be written
    /// on its own (in parallel with the others', on the writer's threads). When that read
    /// fails, every page is handed back: its own write reads again, and fails on its own.
    pub fn write_quiet_pages(
        &mut self,
        pages: Vec<PageBatch>,
    ) -> Vec<Result<Looked, WarehouseError>> {
        let opened: Vec<Option<Timestamp>> = pages
            .iter()
            .map(|p| self.quiet_expected(p.schedule))
            .collect();
        let uids: Vec<Uuid> = (pages.iter().zip(&opened))
            .filter(|(_, opened)| opened.is_some())
            .flat_map(|(page, _)| page.calls.iter().map(|c| c.uid))
            .collect();
        let stored = match self.reconnect_if_closed() {
            Ok(()) if uids.is_empty() => Ok(HashMap::new()),
            Ok(()) => self.replanning(|| self.stored_of(&uids)),
            Err(err) => Err(err),
        };
        let stored = stored.inspect_err(|err| {
            tracing::debug!(
                error = %err,
                pages = pages.len(),
                "cannot read a group of pages' stored calls together; writing each alone"
            );
        });
        let Ok(stored) = stored else {
            return pages
                .into_iter()
                .map(|page| Ok(Looked::ToWrite(page)))
                .collect();
        };
        (pages.into_iter().zip(opened))
            .map(|(page, opened)| {
                let Some(opened_at) = opened else {
                    return Ok(Looked::ToWrite(page));
                };
                self.locks.fence(page.schedule)?;
                let unchanged = {
                    let schedule_uid = page.schedule.to_string();
                    let call_rows = rows_of(&schedule_uid, &page.calls, &page.content_hashes);
                    let own = stored_among(&stored, &page.calls);
                    self.unchanged_given(
                        page.schedule,
                        &page.calls,
                        &call_rows,
                        page.checkpoint,
                        opened_at,
                        own,
                    )
                };
                Ok(match unchanged {
                    Some(counts) => Looked::Written(counts),
                    None => Looked::ToWrite(page),
                })
            })
            .collect()
    }

    /// The stored fingerprints of `calls`: one statement.
    fn stored_calls(
        &self,
        calls: &[OutboundCall],
    ) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
        let uids: Vec<Uuid> = calls.iter().map(|c| c.uid).collect();
        self.stored_of(&uids)
    }

    /// The stored fingerprints of the calls `uids`: one statement.
    fn stored_of(&self, uids: &[Uuid]) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
        let step = "reading the page's stored calls";
        let statement = self.statement(READ_FINGERPRINTS, step)?;
        let rows = wait(self.client()?.query(&statement, &[&uids])).pg(&self.target, step)?;
        stored_fingerprints(&rows).pg(&self.target, step)
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

    /// One round trip: every round's statements ([`Self::push_round`]), the checkpoints moved
    /// forward (each schedule's once), and the commit. A statement refused aborts the
    /// transaction, and the commit sent with it then rolls it back; a statement that could not
    /// be prepared leaves the page unsent, and its transaction is rolled back here. False when an
    /// insert was refused for a key another transaction stored meanwhile (`PageEnd`), the
    /// transaction rolled back.
    fn write_and_commit(
        &self,
        rounds: &[RoundRows],
        checkpoints: &[(Uuid, Timestamp)],
    ) -> Result<bool, WarehouseError> {
        let schedules: Vec<Uuid> = checkpoints.iter().map(|(schedule, _)| *schedule).collect();
        let cursors: Vec<time::OffsetDateTime> = checkpoints
            .iter()
            .map(|(_, cursor)| micros(*cursor))
            .collect();
        let now = micros(Timestamp::now());
        let mut pipeline = Pipeline::default();
        let prepared: Result<(), WarehouseError> = (|| {
            for round in rounds {
                self.push_round(&mut pipeline, round)?;
            }
            if !checkpoints.is_empty() {
                let step = "saving a checkpoint";
                let statement = self.statement(ADVANCE_CHECKPOINTS, step)?;
                pipeline.push(statement, vec![&schedules, &cursors, &now], step);
            }
            Ok(())
        })();
        if let Err(err) = prepared {
            return self.end_transaction(Err(err), "committing a page");
        }
        let client = self.client()?;
        let (answers, committed) = wait(async {
            futures::join!(pipeline.answers(&client), client.batch_execute("COMMIT"))
        });
        let inserted = rounds.iter().any(|r| r.write == Write::Insert);
        let stored_meanwhile = |answer: &Result<_, tokio_postgres::Error>| matches!(answer, Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION));
        if inserted && answers.iter().any(stored_meanwhile) {
            committed.pg(&self.target, "rolling back a page")?;
            return Ok(false);
        }
        pipeline.rows(answers, &self.target)?;
        committed.pg(&self.target, "committing a page")?;
        Ok(true)
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

    /// How many of `calls` `write_hashed_page` would write; writes nothing.
    pub fn count_changes(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        content_hashes: &[u64],
    ) -> Result<u64, WarehouseError> {
        self.reconnect_if_closed()?;
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        let stored = self.replanning(|| self.stored_calls(calls))?;
        Ok(plan(calls, &call_rows, stored, schedule)
            .counts
            .calls_written)
    }

    /// Adds a round's statements (no uid twice in a round), in the order their rows need
    /// each other: the calls; their own children (custom parameters, replaced whole when
    /// mirrored; attempts, upserted so that an attempt keeps its id, a mirrored call's others
    /// deleted with their outcomes and variables; notifications, when sent); the outcomes and
    /// variables of each attempt whose list was sent (a mirrored call's attempts' lists
    /// replaced whole); the summaries the children sent do not tell.
    fn push_round<'a>(
        &self,
        pipeline: &mut Pipeline<'a>,
        round: &'a RoundRows,
    ) -> Result<(), WarehouseError> {
        self.write_rows(pipeline, &round.calls, round.write)?;
        self.delete_of_calls(pipeline, "call_custom_parameters", &round.mirrored)?;
        self.write_rows(pipeline, &round.parameters, round.write)?;
        let kept = &round.kept;
        if !kept.calls.is_empty() {
            let step = "deleting attempts the service no longer shows";
            let statement = self.statement(DELETE_GONE_ATTEMPTS, step)?;
            pipeline.push(
                statement,
                vec![&kept.calls, &kept.of_calls, &kept.uids],
                step,
            );
        }
        self.write_rows(pipeline, &round.attempts, round.write)?;
        self.delete_of_calls(pipeline, "call_notifications", &round.notified)?;
        self.write_rows(pipeline, &round.notifications, round.write)?;
        for (batch, replaced) in &round.lists {
            if !replaced.calls.is_empty() {
                let sql = format!(
                    "DELETE FROM {} AS x USING unnest($1::text[], $2::text[]) AS k(c, u)
                       JOIN calls AS c ON c.uid = k.c::uuid
                       JOIN call_attempts AS a ON a.call_id = c.id AND a.uid = k.u::uuid
                     WHERE x.call_id = a.call_id AND x.attempt_id = a.id",
                    batch.table.name
                );
                let statement = self.statement(&sql, DELETING_GONE)?;
                let params = vec![&replaced.calls as _, &replaced.attempts as _];
                pipeline.push(statement, params, DELETING_GONE);
            }
            self.write_rows(pipeline, batch, round.write)?;
        }
        if !round.unknown.is_empty() {
            for (sql, step) in SUMMARIZE {
                let statement = self.statement(sql, step)?;
                pipeline.push(statement, vec![&round.unknown], step);
            }
        }
        Ok(())
    }

    /// Adds `batch`'s statement for `write` (nothing for an empty batch).
    fn write_rows<'a>(
        &self,
        pipeline: &mut Pipeline<'a>,
        batch: &'a Batch,
        write: Write,
    ) -> Result<(), WarehouseError> {
        if batch.len == 0 {
            return Ok(());
        }
        let step = batch.table.writing;
        if let Some(value) = &batch.unsendable {
            return Err(WarehouseError::Unsendable {
                target: self.target.display().to_owned(),
                step,
                value: value.clone(),
            });
        }
        let statement = self.statement(batch.table.sql(write), step)?;
        pipeline.push(statement, batch.params(write), step);
        Ok(())
    }

    /// Adds the deletion of `table`'s rows of the calls `uids` (compile-time table names
    /// only).
    fn delete_of_calls<'a>(
        &self,
        pipeline: &mut Pipeline<'a>,
        table: &'static str,
        uids: &'a Vec<String>,
    ) -> Result<(), WarehouseError> {
        if uids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "DELETE FROM {table}
             WHERE call_id IN (SELECT id FROM calls WHERE uid = ANY($1::text[]::uuid[]))"
        );
        let statement = self.statement(&sql, DELETING_GONE)?;
        pipeline.push(statement, vec![uids], DELETING_GONE);
        Ok(())
    }
}

/// The only page's counts of a group of one.
fn only_page(counts: Vec<PageWrite>) -> PageWrite {
    counts.into_iter().next().unwrap_or_default()
}

/// The stored fingerprints of `calls`, among those of a group's pages.
fn stored_among(
    stored: &HashMap<Uuid, Fingerprint>,
    calls: &[OutboundCall],
) -> HashMap<Uuid, Fingerprint> {
    (calls.iter())
        .filter_map(|c| stored.get(&c.uid).map(|f| (c.uid, *f)))
        .collect()
}

/// `uid → (content_hash, schedule_uid)` of the page's stored calls, from their rows.
fn stored_fingerprints(
    rows: &[tokio_postgres::Row],
) -> Result<HashMap<Uuid, Fingerprint>, tokio_postgres::Error> {
    rows.iter()
        .map(|r| {
            let fingerprint = Fingerprint {
                content_hash: r.try_get(1)?,
                schedule: r.try_get(2)?,
            };
            Ok((r.try_get(0)?, fingerprint))
        })
        .collect()
}

/// The calls `round` names, with what their write needs; with ids from `reserved` when the
/// round is inserted (`None` when it is not, or `reserved` runs short).
fn pending_of<'p>(
    calls: &'p [OutboundCall],
    call_rows: &'p [CallRow<'p>],
    round: &[(usize, bool)],
    reserved: Option<&Reserved>,
) -> (Vec<Pending<'p>>, Write) {
    let mut pending: Vec<Pending<'p>> = round
        .iter()
        .map(|&(i, was_stored)| {
            let call = &calls[i];
            let ChildRule {
                mirror,
                summary_known,
            } = ChildRule::of(call, was_stored);
            let attempts: Vec<AttemptRow> = (call.outbound_call_attempts.iter().flatten())
                .enumerate()
                .map(|(position, a)| rows::attempt(position, a))
                .collect();
            Pending {
                call,
                row: &call_rows[i],
                ids: None,
                written: last_indices(&attempts, |a| a.uid.as_str()),
                attempts,
                mirror,
                summary_known,
            }
        })
        .collect();
    let fresh = round.iter().all(|&(_, was_stored)| !was_stored);
    let write = match reserved {
        Some(reserved) if fresh && give_ids(&mut pending, reserved) => Write::Insert,
        _ => Write::Upsert,
    };
    (pending, write)
}

/// Gives each call of `pending` and each of its written attempts the next of the `reserved`
/// ids, in page order, as the sequence would have; false (and no ids given) when there are not
/// enough.
fn give_ids(pending: &mut [Pending<'_>], reserved: &Reserved) -> bool {
    let attempts_wanted: usize = pending.iter().map(|p| p.written.len()).sum();
    if reserved.calls.len() < pending.len() || reserved.attempts.len() < attempts_wanted {
        return false;
    }
    let mut attempt_ids = reserved.attempts.iter().copied();
    for (p, &id) in pending.iter_mut().zip(&reserved.calls) {
        let ids = attempt_ids.by_ref().take(p.written.len()).collect();
        p.ids = Some((id, ids));
    }
    true
}

impl Pending<'_> {
    fn id(&self) -> V {
        V::I(self.ids.as_ref().map(|(id, _)| *id))
    }

    /// The attempts written, each with its id (`None` unless reserved).
    fn written_attempts(&self) -> impl Iterator<Item = (Option<i64>, &AttemptRow)> {
        let ids = self.ids.as_ref().map(|(_, ids)| ids);
        (self.written.iter().enumerate())
            .map(move |(n, &i)| (ids.and_then(|ids| ids.get(n).copied()), &self.attempts[i]))
    }
}

/// The rows of the calls `round` names.
fn round_rows(
    calls: &[OutboundCall],
    call_rows: &[CallRow<'_>],
    round: &[(usize, bool)],
    reserved: Option<&Reserved>,
    synced_at: &str,
) -> RoundRows {
    let (pending, write) = pending_of(calls, call_rows, round, reserved);
    let uids = |keep: &dyn Fn(&Pending<'_>) -> bool| -> Vec<String> {
        pending
            .iter()
            .filter(|p| keep(p))
            .map(|p| p.row.uid.clone())
            .collect()
    };
    let mut call_batch = Batch::new(&CALLS);
    for p in &pending {
        call_batch.push(call_values(p, synced_at));
    }
    let (attempts, kept) = attempts_batch(&pending);
    let (notifications, notified) = notifications_batch(&pending);
    RoundRows {
        write,
        calls: call_batch,
        mirrored: uids(&|p| p.mirror),
        parameters: parameters_batch(&pending),
        kept,
        attempts,
        notified,
        notifications,
        lists: attempt_children(&pending),
        unknown: uids(&|p| !p.summary_known),
    }
}

/// A call's row of `calls`, with its summary.
fn call_values(p: &Pending<'_>, synced_at: &str) -> Vec<V> {
    let r = p.row;
    let notification_count = p.call.notifications().map_or(0, <[_]>::len);
    let s = rows::summary(
        p.call,
        &p.attempts,
        i64::try_from(notification_count).unwrap_or(i64::MAX),
    );
    vec![
        p.id(),
        t(Some(&r.uid)),
        t(Some(r.schedule_uid)),
        t(r.external_id),
        t(Some(r.status)),
        t(r.progress),
        V::B(r.is_test_call),
        V::T(r.cooldown_until.clone()),
        V::T(r.delay.clone()),
        V::T(r.priority.clone()),
        V::I(r.attempts_remaining),
        V::T(r.retry_intervals.clone()),
        V::T(Some(r.created_at.clone())),
        V::T(Some(r.updated_at.clone())),
        t(r.phone_number),
        V::T(r.phone_e164.clone()),
        t(r.full_name),
        t(r.first_name),
        t(r.last_name),
        t(r.phonetic_full_name),
        t(r.phonetic_first_name),
        t(r.phonetic_last_name),
        t(r.email),
        V::T(r.event_date_time.clone()),
        V::T(r.extra.clone()),
        V::I(Some(r.content_hash)),
        t(Some(synced_at)),
        V::I(Some(s.attempt_count)),
        V::T(s.last_attempt_uid),
        V::T(s.last_attempt_status),
        V::T(s.last_attempt_started_at),
        V::T(s.last_attempt_answered_at),
        V::T(s.last_attempt_ended_at),
        V::I(s.last_attempt_duration),
        V::T(s.outcome_names),
        V::B(Some(s.answered)),
        V::B(Some(s.transferred)),
        V::I(Some(s.notification_count)),
    ]
}

/// The calls' custom parameters.
fn parameters_batch(pending: &[Pending<'_>]) -> Batch {
    let mut parameters = Batch::new(&PARAMETERS);
    for p in pending {
        for (name, value) in rows::custom_parameters(p.call) {
            parameters.push(vec![
                p.id(),
                t(Some(&p.row.uid)),
                t(Some(name)),
                V::T(value),
            ]);
        }
    }
    parameters
}

/// The attempts of the calls that sent their list (a uid repeated: its last row), and what
/// each mirrored call keeps.
fn attempts_batch(pending: &[Pending<'_>]) -> (Batch, Kept) {
    let mut kept = Kept::default();
    let mut attempts = Batch::new(&ATTEMPTS);
    for p in pending
        .iter()
        .filter(|p| p.call.outbound_call_attempts.is_some())
    {
        if p.mirror {
            kept.calls.push(p.row.uid.clone());
            for a in &p.attempts {
                kept.of_calls.push(p.row.uid.clone());
                kept.uids.push(a.uid.clone());
            }
        }
        for (id, a) in p.written_attempts() {
            attempts.push(vec![
                V::I(id),
                t(Some(&a.uid)),
                p.id(),
                t(Some(&p.row.uid)),
                V::I(Some(a.position)),
                t(Some(&a.status)),
                V::T(a.started_at.clone()),
                V::T(a.answered_at.clone()),
                V::T(a.ended_at.clone()),
                V::I(a.duration),
                V::T(a.created_at.clone()),
                V::T(a.updated_at.clone()),
                V::T(a.error_details.clone()),
                V::T(a.transfer_started_at.clone()),
                V::T(a.transfer_answered_at.clone()),
                V::T(a.transfer_destination.clone()),
                V::T(a.extra.clone()),
            ]);
        }
    }
    (attempts, kept)
}

/// The calls' notifications, when sent (a uid repeated: its last row), and the mirrored
/// calls whose stored ones they replace.
fn notifications_batch(pending: &[Pending<'_>]) -> (Batch, Vec<String>) {
    let mut notifications = Batch::new(&NOTIFICATIONS);
    let mut replaced = Vec::new();
    for p in pending {
        let Some(sent) = p.call.notifications() else {
            continue;
        };
        if p.mirror {
            replaced.push(p.row.uid.clone());
        }
        for n in last_of_each(sent, |n| n.uid) {
            let (uid, status, count, delivered, extra) = rows::notification(n);
            notifications.push(vec![
                p.id(),
                V::T(Some(uid)),
                t(Some(&p.row.uid)),
                V::T(status),
                V::I(count),
                V::T(delivered),
                V::T(extra),
            ]);
        }
    }
    (notifications, replaced)
}

/// An attempt's list of children (outcomes or variables) as rows: the item's uid, then its
/// own columns.
type Items = Vec<(String, Vec<V>)>;

/// The outcomes and variables of each attempt whose list was sent, two lists written alike,
/// each row led by the item's uid, its attempt's and its call's, then the item's own columns;
/// with the mirrored calls' attempts whose lists they replace.
fn attempt_children(pending: &[Pending<'_>]) -> [(Batch, Replaced); 2] {
    let mut children = [
        (Batch::new(&OUTCOMES), Replaced::default()),
        (Batch::new(&VARIABLES), Replaced::default()),
    ];
    for p in pending {
        let Some(sent) = p.call.outbound_call_attempts.as_deref() else {
            continue;
        };
        for (attempt_id, a) in p.written_attempts() {
            let Some(uid) = sent
                .get(usize::try_from(a.position).unwrap_or(usize::MAX))
                .map(|s| s.uid)
            else {
                continue;
            };
            for ((batch, replaced), items) in children.iter_mut().zip(sent_lists(sent, uid)) {
                let Some(items) = items else {
                    continue;
                };
                if p.mirror {
                    replaced.calls.push(p.row.uid.clone());
                    replaced.attempts.push(a.uid.clone());
                }
                for (item, own) in items {
                    let mut row = vec![
                        p.id(),
                        V::I(attempt_id),
                        V::T(Some(item)),
                        t(Some(&a.uid)),
                        t(Some(&p.row.uid)),
                    ];
                    row.extend(own);
                    batch.push(row);
                }
            }
        }
    }
    children
}

/// The outcomes and the variables of the attempt `uid`, each as the last occurrence of the
/// uid that sent its list has it (a uid repeated within a list: its last item); `None` for a
/// list not sent.
fn sent_lists(sent: &[Attempt], uid: Uuid) -> [Option<Items>; 2] {
    let same = sent.iter().filter(|s| s.uid == uid);
    let outcomes = same
        .clone()
        .filter_map(|s| s.call_outcomes.as_ref())
        .next_back()
        .map(|list| {
            last_of_each(list, |o| o.uid)
                .into_iter()
                .map(|o| {
                    let (uid, name, created_at, extra) = rows::outcome(o);
                    (uid, vec![V::T(Some(name)), V::T(created_at), V::T(extra)])
                })
                .collect()
        });
    let variables = same
        .filter_map(|s| s.call_attempts_variables.as_ref())
        .next_back()
        .map(|list| {
            last_of_each(list, |v| v.uid)
                .into_iter()
                .map(|v| {
                    let (uid, name, value, status, created_at, extra) = rows::variable(v);
                    let own = vec![
                        V::T(Some(name)),
                        V::T(value),
                        V::T(status),
                        V::T(created_at),
                        V::T(extra),
                    ];
                    (uid, own)
                })
                .collect()
        });
    [outcomes, variables]
}

/// The items whose key appears last among those with that key, in their order.
fn last_of_each<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    (last_indices(items, key).into_iter())
        .map(|i| &items[i])
        .collect()
}

/// [`last_of_each`], as indices into `items`.
fn last_indices<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<usize> {
    let mut last: HashMap<K, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    (items.iter().enumerate())
        .filter(|(i, item)| last.get(&key(item)) == Some(i))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CALL: &str = "6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11";
    const FIRST: &str = "9b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11";
    const SECOND: &str = "9b2e7a55-2222-4c0b-9f39-0d3c5a3f2b11";

    /// A call with two attempts: the first sends its outcomes and variables, the second only
    /// its (empty) outcomes.
    fn call() -> OutboundCall {
        serde_json::from_value(json!({
            "uid": CALL, "status": "completed", "is_test_call": false,
            "created_at": "2026-01-31T09:00:00Z", "updated_at": "2026-01-31T09:05:00Z",
            "outbound_call_info": {"phone_number": "15550100", "custom_parameters": {"plan": "gold"}},
            "outbound_call_attempts": [
                {"uid": FIRST, "status": "hangup",
                 "call_outcomes": [{"uid": "0b2e7a55-3333-4c0b-9f39-0d3c5a3f2b11", "name": "sale"}],
                 "call_attempts_variables": [
                     {"uid": "0b2e7a55-4444-4c0b-9f39-0d3c5a3f2b11", "name": "callback", "value": true}]},
                {"uid": SECOND, "status": "busy", "call_outcomes": []}
            ],
            "call_notifications": [{"uid": "0b2e7a55-5555-4c0b-9f39-0d3c5a3f2b11", "status": "sent"}]
        }))
        .unwrap()
    }

    /// The rows of `call()` written alone, stored before (`was_stored`) or not, with the
    /// ids `reserved` (if any).
    fn rows_with(was_stored: bool, reserved: Option<&Reserved>) -> RoundRows {
        let calls = [call()];
        let schedule = Uuid::nil().to_string();
        let call_rows = rows_of(&schedule, &calls, &[7]);
        round_rows(
            &calls,
            &call_rows,
            &[(0, was_stored)],
            reserved,
            "2026-01-31T10:00:00.000000Z",
        )
    }

    fn rows(was_stored: bool) -> RoundRows {
        rows_with(was_stored, None)
    }

    fn reserved(calls: usize, attempts: usize) -> Reserved {
        Reserved {
            calls: (10..).take(calls).collect(),
            attempts: (20..).take(attempts).collect(),
        }
    }

    #[test]
    fn a_new_call_is_inserted_with_the_ids_reserved_in_order() {
        let round = rows_with(false, Some(&reserved(1, 2)));
        assert!(round.write == Write::Insert);
        assert_eq!(round.calls.ints("id"), [Some(10)]);
        assert_eq!(round.parameters.ints("call_id"), [Some(10)]);
        assert_eq!(round.attempts.ints("id"), [Some(20), Some(21)]);
        assert_eq!(round.attempts.ints("call_id"), [Some(10), Some(10)]);
        assert_eq!(round.notifications.ints("call_id"), [Some(10)]);
        let [(outcomes, _), (variables, _)] = &round.lists;
        for list in [outcomes, variables] {
            assert_eq!(list.ints("call_id"), [Some(10)], "{}", list.table.name);
            assert_eq!(list.ints("attempt_id"), [Some(20)], "{}", list.table.name);
        }
    }

    #[test]
    fn a_stored_call_or_too_few_ids_is_upserted_with_ids_found_by_the_server() {
        for round in [
            rows_with(true, Some(&reserved(1, 2))),
            rows_with(false, Some(&reserved(1, 1))),
            rows_with(false, Some(&reserved(0, 2))),
            rows(false),
        ] {
            assert!(round.write == Write::Upsert);
            assert_eq!(round.calls.ints("id"), [None]);
            assert_eq!(round.attempts.ints("id"), [None, None]);
            assert_eq!(round.attempts.ints("call_id"), [None, None]);
        }
    }

    #[test]
    fn a_stored_call_names_by_uid_what_its_write_replaces_and_keeps() {
        let round = rows(true);
        let lens = |b: &Batch| b.len;
        assert_eq!(
            [
                &round.calls,
                &round.parameters,
                &round.attempts,
                &round.notifications
            ]
            .map(lens),
            [1, 1, 2, 1]
        );
        assert_eq!(round.mirrored, [CALL]);
        assert_eq!(round.kept.calls, [CALL]);
        assert_eq!(round.kept.of_calls, [CALL, CALL]);
        assert_eq!(round.kept.uids, [FIRST, SECOND]);
        assert_eq!(round.notified, [CALL]);
        let [(outcomes, outcome_lists), (variables, variable_lists)] = &round.lists;
        assert_eq!((outcomes.len, variables.len), (1, 1));
        // Both attempts sent their outcomes (the second an empty list, which empties it); only
        // the first sent its variables, so the second's stored ones stay.
        assert_eq!(outcome_lists.calls, [CALL, CALL]);
        assert_eq!(outcome_lists.attempts, [FIRST, SECOND]);
        assert_eq!(variable_lists.calls, [CALL]);
        assert_eq!(variable_lists.attempts, [FIRST]);
        // The summary reads the attempts, their outcomes and the notifications, all sent.
        assert!(round.unknown.is_empty());
    }

    #[test]
    fn a_new_call_replaces_nothing() {
        let round = rows(false);
        assert!(round.mirrored.is_empty() && round.notified.is_empty());
        assert!(round.kept.calls.is_empty() && round.kept.uids.is_empty());
        for (batch, replaced) in &round.lists {
            assert_eq!(batch.len, 1, "{}", batch.table.name);
            assert!(replaced.calls.is_empty() && replaced.attempts.is_empty());
        }
        assert!(
            round.unknown.is_empty(),
            "a new call's summary is the one sent"
        );
    }

    #[test]
    fn the_last_of_each_key_keeps_its_place() {
        let items = [(1, 'a'), (2, 'b'), (1, 'c'), (3, 'd')];
        let got: Vec<char> = last_of_each(&items, |i| i.0).iter().map(|i| i.1).collect();
        assert_eq!(got, ['b', 'c', 'd']);
    }
}
