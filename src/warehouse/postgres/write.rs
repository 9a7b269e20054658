//! One page's write: its calls and its checkpoint in one PostgreSQL transaction, each table
//! written by ONE statement, the rows going as arrays (`unnest($1::uuid[], …)`, binary
//! protocol). A transaction costs two round trips whatever its size (`pipeline.rs`): its start
//! (`write/group.rs`: the fences, the stored calls' fingerprints, ids reserved), then every
//! statement, in order (the calls; their own children: parameters, attempts, notifications;
//! the attempts' outcomes and variables; the summaries), the checkpoints and the commit, none
//! waiting for another's answer.
//!
//! The rule is every destination's (`warehouse/write_plan.rs`): which calls are written, in
//! which round, how their children mirror the service and whether their summary is known.
//! One statement cannot touch a row twice, where row-by-row writes let the last one win: so a
//! call listed twice in a page goes into a second round of statements (the plan's rounds),
//! and a child uid repeated within a call keeps its last row (and an attempt's last sent list
//! of outcomes or variables), which is what the row-by-row writes leave.
//!
//! One job a file: this one page's statements and commit; `write/group.rs` pages of several
//! passes in one transaction, under their fences; `write/quiet.rs` an idle pass's pages, read
//! rather than written; `write/columns.rs` a round's rows as column batches.

mod columns;
mod group;
pub(super) mod quiet;
mod set_aside;

use std::collections::HashMap;
use tokio_postgres::error::SqlState;

use uuid::Uuid;

use self::columns::RoundRows;
use super::PgWarehouse;
use super::batch::{Batch, Write};
use super::pipeline::Pipeline;
use super::runs::ADVANCE_CHECKPOINTS;
use super::session::{PgContext, micros, wait};
use crate::service::{OutboundCall, Timestamp};
use crate::warehouse::destination::PageBatch;
use crate::warehouse::error::WarehouseError;
use crate::warehouse::rows::CallRow;
use crate::warehouse::set_aside::SetAside;
use crate::warehouse::write_plan::{PageWrite, rows_of};
use set_aside::AsideWrites;

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

const DELETING_GONE: &str = "deleting children the service no longer shows";

/// A page to write, as `write_hashed_page` was given it.
struct Page<'a> {
    schedule: Uuid,
    /// The fencing token of this process's claim on `schedule`.
    generation: i64,
    calls: &'a [OutboundCall],
    call_rows: &'a [CallRow<'a>],
    checkpoint: Option<Timestamp>,
    synced_at: String,
    /// The page's misfits, and its pass (for the conflicts found writing it).
    set_aside: &'a [SetAside],
    run: Option<i64>,
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

impl PgWarehouse {
    /// Writes `calls` of `schedule` and, when given, moves its checkpoint forward — all or
    /// nothing (see the SQLite warehouse's `write_hashed_page`).
    pub fn write_hashed_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        let PageBatch {
            schedule,
            ref calls,
            ref content_hashes,
            checkpoint,
            synced_at,
            ref set_aside,
            run,
        } = *page;
        self.reconnect_if_closed()?;
        let generation = self.locks.fence(schedule)?;
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        if !set_aside.is_empty() {
            // Rows to write: not a quiet page.
            self.expect_quiet(schedule, None);
        }
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
            set_aside,
            run,
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
        aside: &AsideWrites,
    ) -> Result<Option<HashMap<Uuid, u64>>, WarehouseError> {
        let schedules: Vec<Uuid> = checkpoints.iter().map(|(schedule, _)| *schedule).collect();
        let cursors: Vec<time::OffsetDateTime> = checkpoints
            .iter()
            .map(|(_, cursor)| micros(*cursor))
            .collect();
        let now = micros(Timestamp::now());
        let mut pipeline = Pipeline::default();
        let prepared: Result<Option<usize>, WarehouseError> = (|| {
            for round in rounds {
                self.push_round(&mut pipeline, round)?;
            }
            let counted = aside.push(self, &mut pipeline)?;
            if !checkpoints.is_empty() {
                let step = "saving a checkpoint";
                let statement = self.statement(ADVANCE_CHECKPOINTS, step)?;
                pipeline.push(statement, vec![&schedules, &cursors, &now], step);
            }
            Ok(counted)
        })();
        let counted = match prepared {
            Ok(counted) => counted,
            Err(err) => return self.end_transaction(Err(err), "committing a page"),
        };
        let client = self.client()?;
        let (answers, committed) = wait(async {
            futures::join!(pipeline.answers(&client), client.batch_execute("COMMIT"))
        });
        let inserted = rounds.iter().any(|r| r.write == Write::Insert);
        let stored_meanwhile = |answer: &Result<_, tokio_postgres::Error>| matches!(answer, Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION));
        if inserted && answers.iter().any(stored_meanwhile) {
            committed.pg(&self.target, "rolling back a page")?;
            return Ok(None);
        }
        let rows = pipeline.rows(answers, &self.target)?;
        committed.pg(&self.target, "committing a page")?;
        AsideWrites::counts(self, &rows, counted).map(Some)
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
