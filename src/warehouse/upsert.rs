//! `write_page`: a page of calls, all their children and the checkpoint, in one transaction.
//!
//! Children mirror the service: rows the service no longer shows are deleted; a key the
//! service did not send (`None`) leaves the stored rows alone. A call whose content hash is
//! unchanged is skipped entirely — comparing content, not `updated_at`, because at second
//! precision a call can change twice within one second. The per-call summary columns are
//! recomputed in SQL from the child tables, so they always agree with them.

use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::rows;
use super::{PageWrite, Warehouse};
use crate::api::{Attempt, OutboundCall, Timestamp};

impl Warehouse {
    /// Writes `calls` of `schedule` and, when given, moves its checkpoint forward to
    /// `checkpoint` — all or nothing. The checkpoint never moves backwards.
    pub fn write_page(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        checkpoint: Option<Timestamp>,
        synced_at: Timestamp,
    ) -> Result<PageWrite, WarehouseError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql("starting a page transaction")?;
        let synced_at = synced_at.to_sqlite();
        let mut written = PageWrite::default();
        for call in calls {
            if write_call(&tx, schedule, call, &synced_at)? {
                written.calls_written += 1;
            } else {
                written.calls_unchanged += 1;
            }
        }
        if let Some(cursor) = checkpoint {
            super::runs::advance_checkpoint(&tx, schedule, cursor)?;
        }
        tx.commit().sql("committing a page")?;
        Ok(written)
    }
}

impl Warehouse {
    /// How many of `calls` `write_page` would write (new or changed content); writes nothing.
    pub fn count_changes(
        &self,
        schedule: Uuid,
        calls: &[OutboundCall],
    ) -> Result<u64, WarehouseError> {
        let mut changed = 0;
        for call in calls {
            let row = rows::call(schedule, call);
            if stored_fingerprint(&self.conn, &row.uid)?
                != Some((row.content_hash, row.schedule_uid))
            {
                changed += 1;
            }
        }
        Ok(changed)
    }
}

/// The stored content hash and schedule of a call, if it is stored.
fn stored_fingerprint(
    conn: &rusqlite::Connection,
    uid: &str,
) -> Result<Option<(i64, String)>, WarehouseError> {
    conn.prepare_cached("SELECT content_hash, schedule_uid FROM calls WHERE uid = ?1")
        .and_then(|mut s| {
            s.query_row([uid], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .sql("reading a stored call")
}

/// Upserts one call and its children; `false` when its content was already stored.
fn write_call(
    tx: &Transaction<'_>,
    schedule: Uuid,
    call: &OutboundCall,
    synced_at: &str,
) -> Result<bool, WarehouseError> {
    let row = rows::call(schedule, call);
    let stored = stored_fingerprint(tx, &row.uid)?;
    if stored.as_ref() == Some(&(row.content_hash, row.schedule_uid.clone())) {
        return Ok(false);
    }
    upsert_call_row(tx, &row, synced_at)?;
    replace_custom_parameters(tx, call, &row.uid)?;
    if let Some(attempts) = &call.outbound_call_attempts {
        mirror_attempts(tx, &row.uid, attempts)?;
    }
    if let Some(notifications) = call.notifications() {
        let uids: Vec<String> = notifications.iter().map(|n| n.uid.to_string()).collect();
        delete_missing(tx, "call_notifications", "call_uid", &row.uid, &uids)?;
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO call_notifications (uid, call_uid, status, message_count, delivered_at, extra)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (uid) DO UPDATE SET call_uid = excluded.call_uid, status = excluded.status,
                   message_count = excluded.message_count, delivered_at = excluded.delivered_at,
                   extra = excluded.extra",
            )
            .sql("preparing the notification upsert")?;
        for n in notifications {
            let (uid, status, count, delivered, extra) = rows::notification(n);
            stmt.execute(params![uid, row.uid, status, count, delivered, extra])
                .sql("writing a notification")?;
        }
    }
    summarize(tx, &row.uid)?;
    Ok(true)
}

fn upsert_call_row(
    tx: &Transaction<'_>,
    r: &rows::CallRow,
    synced_at: &str,
) -> Result<(), WarehouseError> {
    tx.prepare_cached(
        "INSERT INTO calls (uid, schedule_uid, external_id, status, progress, is_test_call,
           cooldown_until, delay, priority, attempts_remaining, retry_intervals, created_at,
           updated_at, phone_number, phone_e164, full_name, first_name, last_name,
           phonetic_full_name, phonetic_first_name, phonetic_last_name, email, event_date_time,
           extra, content_hash, synced_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
           ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)
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
           content_hash = excluded.content_hash, synced_at = excluded.synced_at",
    )
    .and_then(|mut s| {
        s.execute(params![
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
        ])
    })
    .sql("writing a call")?;
    Ok(())
}

fn replace_custom_parameters(
    tx: &Transaction<'_>,
    call: &OutboundCall,
    call_uid: &str,
) -> Result<(), WarehouseError> {
    tx.prepare_cached("DELETE FROM call_custom_parameters WHERE call_uid = ?1")
        .and_then(|mut s| s.execute([call_uid]))
        .sql("clearing custom parameters")?;
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_custom_parameters (call_uid, name, value) VALUES (?1, ?2, ?3)",
        )
        .sql("preparing the custom parameter insert")?;
    for (name, value) in rows::custom_parameters(call) {
        stmt.execute(params![call_uid, name, value])
            .sql("writing a custom parameter")?;
    }
    Ok(())
}

fn mirror_attempts(
    tx: &Transaction<'_>,
    call_uid: &str,
    attempts: &[Attempt],
) -> Result<(), WarehouseError> {
    let uids: Vec<String> = attempts.iter().map(|a| a.uid.to_string()).collect();
    // Outcomes and variables of a vanished attempt go with it (ON DELETE CASCADE).
    delete_missing(tx, "call_attempts", "call_uid", call_uid, &uids)?;
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_attempts (uid, call_uid, position, status, started_at, answered_at,
               ended_at, duration, created_at, updated_at, error_details, transfer_started_at,
               transfer_answered_at, transfer_destination, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
             ON CONFLICT (uid) DO UPDATE SET call_uid = excluded.call_uid,
               position = excluded.position, status = excluded.status,
               started_at = excluded.started_at, answered_at = excluded.answered_at,
               ended_at = excluded.ended_at, duration = excluded.duration,
               created_at = excluded.created_at, updated_at = excluded.updated_at,
               error_details = excluded.error_details,
               transfer_started_at = excluded.transfer_started_at,
               transfer_answered_at = excluded.transfer_answered_at,
               transfer_destination = excluded.transfer_destination, extra = excluded.extra",
        )
        .sql("preparing the attempt upsert")?;
    for (position, attempt) in attempts.iter().enumerate() {
        let a = rows::attempt(position, attempt);
        stmt.execute(params![
            a.uid,
            call_uid,
            a.position,
            a.status,
            a.started_at,
            a.answered_at,
            a.ended_at,
            a.duration,
            a.created_at,
            a.updated_at,
            a.error_details,
            a.transfer_started_at,
            a.transfer_answered_at,
            a.transfer_destination,
            a.extra,
        ])
        .sql("writing an attempt")?;
        if let Some(outcomes) = &attempt.call_outcomes {
            mirror_outcomes(tx, call_uid, &a.uid, outcomes)?;
        }
        if let Some(variables) = &attempt.call_attempts_variables {
            mirror_variables(tx, call_uid, &a.uid, variables)?;
        }
    }
    Ok(())
}

fn mirror_outcomes(
    tx: &Transaction<'_>,
    call_uid: &str,
    attempt_uid: &str,
    outcomes: &[crate::api::Outcome],
) -> Result<(), WarehouseError> {
    let uids: Vec<String> = outcomes.iter().map(|o| o.uid.to_string()).collect();
    delete_missing(tx, "attempt_outcomes", "attempt_uid", attempt_uid, &uids)?;
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (uid) DO UPDATE SET attempt_uid = excluded.attempt_uid,
               call_uid = excluded.call_uid, name = excluded.name,
               created_at = excluded.created_at, extra = excluded.extra",
        )
        .sql("preparing the outcome upsert")?;
    for o in outcomes {
        let (uid, name, created_at, extra) = rows::outcome(o);
        stmt.execute(params![uid, attempt_uid, call_uid, name, created_at, extra])
            .sql("writing an outcome")?;
    }
    Ok(())
}

fn mirror_variables(
    tx: &Transaction<'_>,
    call_uid: &str,
    attempt_uid: &str,
    variables: &[crate::api::AttemptVariable],
) -> Result<(), WarehouseError> {
    let uids: Vec<String> = variables.iter().map(|v| v.uid.to_string()).collect();
    delete_missing(tx, "attempt_variables", "attempt_uid", attempt_uid, &uids)?;
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO attempt_variables (uid, attempt_uid, call_uid, name, value, status, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (uid) DO UPDATE SET attempt_uid = excluded.attempt_uid,
               call_uid = excluded.call_uid, name = excluded.name, value = excluded.value,
               status = excluded.status, created_at = excluded.created_at, extra = excluded.extra",
        )
        .sql("preparing the variable upsert")?;
    for v in variables {
        let (uid, name, value, status, created_at, extra) = rows::variable(v);
        stmt.execute(params![
            uid,
            attempt_uid,
            call_uid,
            name,
            value,
            status,
            created_at,
            extra
        ])
        .sql("writing a variable")?;
    }
    Ok(())
}

/// Deletes the rows of `table` belonging to `parent` whose uid is not in `keep`.
fn delete_missing(
    tx: &Transaction<'_>,
    table: &'static str,
    parent_column: &'static str,
    parent: &str,
    keep: &[String],
) -> Result<(), WarehouseError> {
    let keep = serde_json::to_string(keep).unwrap_or_else(|_| "[]".into());
    // `table` and `parent_column` are compile-time constants, never input.
    let sql = format!(
        "DELETE FROM {table} WHERE {parent_column} = ?1
         AND uid NOT IN (SELECT value FROM json_each(?2))"
    );
    tx.prepare_cached(&sql)
        .and_then(|mut s| s.execute(params![parent, keep]))
        .sql("deleting children the service no longer shows")?;
    Ok(())
}

/// Recomputes the call's summary columns from its child rows.
fn summarize(tx: &Transaction<'_>, call_uid: &str) -> Result<(), WarehouseError> {
    tx.prepare_cached(
        "UPDATE calls SET
           attempt_count = (SELECT count(*) FROM call_attempts WHERE call_uid = calls.uid),
           last_attempt_uid = (SELECT uid FROM call_attempts WHERE call_uid = calls.uid
               ORDER BY coalesce(started_at, created_at) DESC, position DESC LIMIT 1),
           answered = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_uid = calls.uid AND answered_at IS NOT NULL),
           transferred = EXISTS (SELECT 1 FROM call_attempts
               WHERE call_uid = calls.uid AND transfer_started_at IS NOT NULL),
           notification_count = (SELECT count(*) FROM call_notifications WHERE call_uid = calls.uid),
           outcome_names = (SELECT group_concat(name, ', ') FROM (
               SELECT o.name AS name, min(a.position) AS first_position, min(o.created_at) AS first_at
               FROM attempt_outcomes AS o JOIN call_attempts AS a ON a.uid = o.attempt_uid
               WHERE o.call_uid = calls.uid
               GROUP BY o.name ORDER BY first_position, first_at, o.name))
         WHERE uid = ?1",
    )
    .and_then(|mut s| s.execute([call_uid]))
    .sql("summarising a call's attempts")?;
    tx.prepare_cached(
        "UPDATE calls SET
           (last_attempt_status, last_attempt_started_at, last_attempt_answered_at,
            last_attempt_ended_at, last_attempt_duration) =
           (SELECT status, started_at, answered_at, ended_at, duration
            FROM call_attempts WHERE uid = calls.last_attempt_uid)
         WHERE uid = ?1",
    )
    .and_then(|mut s| s.execute([call_uid]))
    .sql("summarising a call's last attempt")?;
    Ok(())
}
