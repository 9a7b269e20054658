//! `write_page`: a page of calls, all their children and the checkpoint, in one transaction,
//! by the rule every destination follows (`warehouse/write_plan.rs`).
//!
//! The write costs what SQLite costs: the page's stored fingerprints are read in one query,
//! a call that was not stored has nothing to delete, and the summary columns are computed
//! from the children being written and stored with the call's one INSERT. Only a call whose
//! stored children are partly unknown (a key not sent) or which repeats a child uid has its
//! summary recomputed in SQL from the child tables (`summarize`), as every call once had.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Transaction, TransactionBehavior, params};
use uuid::Uuid;

use super::children::{
    Parent, clear, insert_custom_parameters, write_attempts, write_notifications,
};
use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use super::set_aside as set_aside_rows;
use crate::service::OutboundCall;
use crate::warehouse::destination::PageBatch;
use crate::warehouse::rows::{self, CallRow, Summary};
use crate::warehouse::set_aside;
use crate::warehouse::write_plan::{ChildRule, Fingerprint, PageWrite, plan, rows_of};

impl Warehouse {
    /// Writes `calls` of `schedule` and, when given, moves its checkpoint forward to
    /// `checkpoint` — all or nothing. The checkpoint never moves backwards. The tests' way in:
    /// a pass hands its pages over hashed ([`Warehouse::write_hashed_page`]).
    #[cfg(test)]
    pub fn write_page(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        checkpoint: Option<crate::service::Timestamp>,
        synced_at: crate::service::Timestamp,
    ) -> Result<PageWrite, WarehouseError> {
        let page = PageBatch {
            schedule,
            calls: calls.to_vec(),
            content_hashes: calls.iter().map(OutboundCall::content_hash).collect(),
            checkpoint,
            synced_at,
            set_aside: Vec::new(),
            run: None,
        };
        self.write_hashed_page(&page)
    }

    /// [`Warehouse::write_page`] with the calls' content hashes (`OutboundCall::content_hash`,
    /// in order) already computed by the caller, as a pass hands its pages over: a call is
    /// serialized and hashed once a pass.
    pub fn write_hashed_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
        let PageBatch {
            schedule,
            ref calls,
            ref content_hashes,
            checkpoint,
            synced_at,
            ref set_aside,
            ..
        } = *page;
        let path = self.path.as_path();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql(path, "starting a page transaction")?;
        let synced_at = synced_at.to_warehouse_text();
        // Formatted once a page, not once a call.
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        let stored = stored_fingerprints(&tx, path, calls)?;
        let plan = plan(calls, &call_rows, stored, schedule);
        for write in &plan.calls {
            let (call, row) = (&calls[write.index], &call_rows[write.index]);
            write_call(&tx, path, call, row, write.was_stored, &synced_at)?;
        }
        let conflicts = set_aside::conflicts(schedule, calls, page.run, &plan);
        let checkpoint = set_aside::held(checkpoint, conflicts.hold_at);
        let fitting = set_aside::fitting(calls, &plan);
        let cursor = checkpoint.map(|c| c.to_warehouse_text());
        let had = set_aside_rows::take_out(&tx, path, &schedule_uid, &fitting, cursor.as_deref())?;
        set_aside_rows::write(&tx, path, &schedule_uid, set_aside, &synced_at)?;
        set_aside_rows::write(&tx, path, &schedule_uid, &conflicts.rows, &synced_at)?;
        let set_aside_now = if had || !set_aside.is_empty() || !conflicts.rows.is_empty() {
            set_aside_rows::count(&tx, path, &schedule_uid)?
        } else {
            0
        };
        if let Some(cursor) = checkpoint {
            super::runs::advance_checkpoint(&tx, path, schedule, cursor)?;
        }
        tx.commit().sql(path, "committing a page")?;
        Ok(PageWrite {
            set_aside: plan.counts.set_aside + set_aside.len() as u64,
            hold_at: conflicts.hold_at,
            set_aside_now: Some(set_aside_now),
            ..plan.counts
        })
    }
}

/// The stored fingerprints of the page's calls that are stored, by uid: one query a page.
pub(super) fn stored_fingerprints(
    conn: &rusqlite::Connection,
    path: &Path,
    calls: &[OutboundCall],
) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
    let uids: Vec<String> = calls.iter().map(|c| c.uid.to_string()).collect();
    // A JSON array of uuid strings always serializes.
    let uids_json = serde_json::to_string(&uids).unwrap_or_else(|_| "[]".into());
    let mut stmt = conn
        .prepare_cached(
            "SELECT uid, content_hash, schedule_uid FROM calls
             WHERE uid IN (SELECT value FROM json_each(?1))",
        )
        .sql(path, "preparing the stored-call lookup")?;
    let found = stmt
        .query_map([uids_json], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .sql(path, "reading the page's stored calls")?;
    let mut stored = HashMap::with_capacity(uids.len());
    for item in found {
        let (uid, content_hash, schedule) = item.sql(path, "reading a stored call")?;
        // The uid is one of the page's own (the query asked for them); a schedule uid that
        // does not parse (no callsync writes one) is no schedule's: the call is rewritten.
        if let Ok(uid) = Uuid::parse_str(&uid) {
            let schedule = Uuid::parse_str(&schedule).unwrap_or(Uuid::nil());
            stored.insert(
                uid,
                Fingerprint {
                    content_hash,
                    schedule,
                },
            );
        }
    }
    Ok(stored)
}

/// Upserts one call and its children. `was_stored`: the call has rows from an earlier write,
/// so children the service no longer shows may have to go.
fn write_call(
    tx: &Transaction<'_>,
    path: &Path,
    call: &OutboundCall,
    row: &CallRow<'_>,
    was_stored: bool,
    synced_at: &str,
) -> Result<(), WarehouseError> {
    let attempts: Vec<rows::AttemptRow> = call
        .outbound_call_attempts
        .iter()
        .flatten()
        .enumerate()
        .map(|(position, a)| rows::attempt(position, a))
        .collect();
    let ChildRule {
        mirror,
        summary_known,
    } = ChildRule::of(call, was_stored);
    let notification_count = call.notifications().map_or(0, <[_]>::len);
    let summary = rows::summary(
        call,
        &attempts,
        i64::try_from(notification_count).unwrap_or(i64::MAX),
    );
    let call_id = upsert_call_row(tx, path, row, &summary, synced_at)?;
    let parent = Parent {
        call_id,
        call_uid: &row.uid,
    };
    if mirror {
        clear(
            tx,
            path,
            "DELETE FROM call_custom_parameters WHERE call_id = ?1",
            [call_id],
        )?;
    }
    insert_custom_parameters(tx, path, call, &parent)?;
    if let Some(sent) = &call.outbound_call_attempts {
        write_attempts(tx, path, &parent, sent, &attempts, mirror)?;
    }
    if let Some(notifications) = call.notifications() {
        write_notifications(tx, path, &parent, notifications, mirror)?;
    }
    if !summary_known {
        summarize(tx, path, call_id)?;
    }
    Ok(())
}

/// Inserts or updates the call's row; returns its id.
fn upsert_call_row(
    tx: &Transaction<'_>,
    path: &Path,
    r: &CallRow<'_>,
    s: &Summary,
    synced_at: &str,
) -> Result<i64, WarehouseError> {
    tx.prepare_cached(
        "INSERT INTO calls (uid, schedule_uid, external_id, status, progress, is_test_call,
           cooldown_until, delay, priority, attempts_remaining, retry_intervals, created_at,
           updated_at, phone_number, phone_e164, full_name, first_name, last_name,
           phonetic_full_name, phonetic_first_name, phonetic_last_name, email, event_date_time,
           extra, content_hash, synced_at, attempt_count, last_attempt_uid, last_attempt_status,
           last_attempt_started_at, last_attempt_answered_at, last_attempt_ended_at,
           last_attempt_duration, outcome_names, answered, transferred, notification_count)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
           ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35,
           ?36, ?37)
         ON CONFLICT (uid) DO UPDATE SET schedule_uid = excluded.schedule_uid,
           external_id = excluded.external_id, status = excluded.status,
           progress = excluded.progress, is_test_call = excluded.is_test_call,
           cooldown_until = excluded.cooldown_until, delay = excluded.delay,
           priority = excluded.priority, attempts_remaining = excluded.attempts_remaining,
           retry_intervals = excluded.retry_intervals, created_at = excluded.created_at,
           updated_at = excluded.updated_at, phone_number = excluded.phone_number,
           phone_e164 = excluded.phone_e164, full_name = excluded.full_name,
           first_name = excluded.first_name, last_name = excluded.last_name,
           phonetic_full_name = excluded.phonetic_full_name,
           phonetic_first_name = excluded.phonetic_first_name,
           phonetic_last_name = excluded.phonetic_last_name, email = excluded.email,
           event_date_time = excluded.event_date_time, extra = excluded.extra,
           content_hash = excluded.content_hash, synced_at = excluded.synced_at,
           attempt_count = excluded.attempt_count, last_attempt_uid = excluded.last_attempt_uid,
           last_attempt_status = excluded.last_attempt_status,
           last_attempt_started_at = excluded.last_attempt_started_at,
           last_attempt_answered_at = excluded.last_attempt_answered_at,
           last_attempt_ended_at = excluded.last_attempt_ended_at,
           last_attempt_duration = excluded.last_attempt_duration,
           outcome_names = excluded.outcome_names, answered = excluded.answered,
           transferred = excluded.transferred, notification_count = excluded.notification_count
         RETURNING id",
    )
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                r.uid,
                r.schedule_uid,
                r.external_id,
                r.status,
                r.progress,
                r.is_test_call,
                r.cooldown_until,
                r.delay,
                r.priority,
                r.attempts_remaining,
                r.retry_intervals,
                r.created_at,
                r.updated_at,
                r.phone_number,
                r.phone_e164,
                r.full_name,
                r.first_name,
                r.last_name,
                r.phonetic_full_name,
                r.phonetic_first_name,
                r.phonetic_last_name,
                r.email,
                r.event_date_time,
                r.extra,
                r.content_hash,
                synced_at,
                s.attempt_count,
                s.last_attempt_uid,
                s.last_attempt_status,
                s.last_attempt_started_at,
                s.last_attempt_answered_at,
                s.last_attempt_ended_at,
                s.last_attempt_duration,
                s.outcome_names,
                s.answered,
                s.transferred,
                s.notification_count,
            ],
            |r| r.get(0),
        )
    })
    .sql(path, "writing a call")
}

/// Recomputes the call's summary columns from its child rows.
pub(super) fn summarize(
    tx: &Transaction<'_>,
    path: &Path,
    call_id: i64,
) -> Result<(), WarehouseError> {
    tx.prepare_cached(
        "UPDATE calls SET
           attempt_count = (SELECT count(*) FROM call_attempts WHERE call_id = calls.id),
           last_attempt_uid = (SELECT uid FROM call_attempts WHERE call_id = calls.id
               ORDER BY coalesce(started_at, created_at) DESC, position DESC LIMIT 1),
           answered = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_id = calls.id AND answered_at IS NOT NULL),
           transferred = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_id = calls.id AND transfer_started_at IS NOT NULL),
           notification_count = (SELECT count(*) FROM call_notifications WHERE call_id = calls.id),
           outcome_names = (SELECT group_concat(name, ', ') FROM (
               SELECT o.name AS name, min(a.position) AS first_position, min(o.created_at) AS first_at
               FROM attempt_outcomes AS o JOIN call_attempts AS a ON a.id = o.attempt_id
               WHERE o.call_id = calls.id
               GROUP BY o.name ORDER BY first_position, first_at, o.name))
         WHERE id = ?1",
    )
    .and_then(|mut s| s.execute([call_id]))
    .sql(path, "summarising a call's attempts")?;
    tx.prepare_cached(
        "UPDATE calls SET
           (last_attempt_status, last_attempt_started_at, last_attempt_answered_at,
            last_attempt_ended_at, last_attempt_duration) =
           (SELECT status, started_at, answered_at, ended_at, duration
            FROM call_attempts WHERE call_id = calls.id AND uid = calls.last_attempt_uid)
         WHERE id = ?1",
    )
    .and_then(|mut s| s.execute([call_id]))
    .sql(path, "summarising a call's last attempt")?;
    Ok(())
}
