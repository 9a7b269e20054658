//! `write_page`: a page of calls, all their children and the checkpoint, in one transaction.
//!
//! Children mirror the service: rows the service no longer shows are deleted; a key the
//! service did not send (`None`) leaves the stored rows alone. A call whose content hash is
//! unchanged is skipped entirely — comparing content, not `updated_at`, because at second
//! precision a call can change twice within one second.
//!
//! The write costs what SQLite costs: the page's stored fingerprints are read in one query,
//! a call that was not stored has nothing to delete, and the summary columns are computed
//! from the children being written and stored with the call's one INSERT. Only a call whose
//! stored children are partly unknown (a key not sent) or which repeats a child uid has its
//! summary recomputed in SQL from the child tables (`summarize`), as every call once had.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rusqlite::{Transaction, TransactionBehavior, params};
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::rows::{self, CallRow, Summary};
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
        let path = self.path.as_path();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .sql(path, "starting a page transaction")?;
        let synced_at = synced_at.to_sqlite();
        let call_rows: Vec<CallRow> = calls.iter().map(|c| rows::call(schedule, c)).collect();
        let mut stored = stored_fingerprints(&tx, path, &call_rows)?;
        let mut written = PageWrite::default();
        for (call, row) in calls.iter().zip(&call_rows) {
            let fingerprint = Fingerprint::of(row);
            let before = stored.get(row.uid.as_str());
            if before == Some(&fingerprint) {
                written.calls_unchanged += 1;
                continue;
            }
            write_call(&tx, path, call, row, before.is_some(), &synced_at)?;
            // A call listed twice in one page is compared with what the page just wrote.
            stored.insert(row.uid.as_str(), fingerprint);
            written.calls_written += 1;
        }
        if let Some(cursor) = checkpoint {
            super::runs::advance_checkpoint(&tx, path, schedule, cursor)?;
        }
        tx.commit().sql(path, "committing a page")?;
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
        let call_rows: Vec<CallRow> = calls.iter().map(|c| rows::call(schedule, c)).collect();
        let stored = stored_fingerprints(&self.conn, &self.path, &call_rows)?;
        let changed = call_rows
            .iter()
            .filter(|row| stored.get(row.uid.as_str()) != Some(&Fingerprint::of(row)))
            .count();
        Ok(changed as u64)
    }
}

/// What decides whether a stored call is rewritten: its content and its schedule.
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint {
    content_hash: i64,
    schedule_uid: String,
}

impl Fingerprint {
    fn of(row: &CallRow) -> Fingerprint {
        Fingerprint {
            content_hash: row.content_hash,
            schedule_uid: row.schedule_uid.clone(),
        }
    }
}

/// The stored fingerprints of the page's calls that are stored, by uid: one query a page.
fn stored_fingerprints<'a>(
    conn: &rusqlite::Connection,
    path: &Path,
    call_rows: &'a [CallRow],
) -> Result<HashMap<&'a str, Fingerprint>, WarehouseError> {
    let uids: Vec<&str> = call_rows.iter().map(|r| r.uid.as_str()).collect();
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
                Fingerprint {
                    content_hash: r.get(1)?,
                    schedule_uid: r.get(2)?,
                },
            ))
        })
        .sql(path, "reading the page's stored calls")?;
    let mut stored = HashMap::with_capacity(uids.len());
    for item in found {
        let (uid, fingerprint) = item.sql(path, "reading a stored call")?;
        // Keyed by the page's own strings: the uid read back is one of them.
        if let Some(key) = uids.iter().find(|u| **u == uid) {
            stored.insert(*key, fingerprint);
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
    row: &CallRow,
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
    // A repeated child uid makes later rows overwrite (and delete) earlier ones of the same
    // call: only the child tables then know the outcome, and the old stored rows matter.
    let repeats = repeats_a_child_uid(call);
    let mirror = was_stored || repeats;
    let summary_known = !repeats && (!was_stored || sends_every_child_list(call));
    let notification_count = call.notifications().map_or(0, <[_]>::len);
    let summary = rows::summary(
        call,
        &attempts,
        i64::try_from(notification_count).unwrap_or(i64::MAX),
    );
    upsert_call_row(tx, path, row, &summary, synced_at)?;
    if mirror {
        clear_custom_parameters(tx, path, &row.uid)?;
    }
    insert_custom_parameters(tx, path, call, &row.uid)?;
    if let Some(sent) = &call.outbound_call_attempts {
        write_attempts(tx, path, &row.uid, sent, &attempts, mirror)?;
    }
    if let Some(notifications) = call.notifications() {
        write_notifications(tx, path, &row.uid, notifications, mirror)?;
    }
    if !summary_known {
        summarize(tx, path, &row.uid)?;
    }
    Ok(())
}

/// True when the call sends its attempts, notifications and every attempt's outcomes: the
/// stored children the summary reads are then exactly the ones sent.
fn sends_every_child_list(call: &OutboundCall) -> bool {
    call.notifications().is_some()
        && call
            .outbound_call_attempts
            .as_deref()
            .is_some_and(|attempts| attempts.iter().all(|a| a.call_outcomes.is_some()))
}

/// True when an attempt, outcome or notification uid appears twice in the call.
fn repeats_a_child_uid(call: &OutboundCall) -> bool {
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    let outcomes = attempts
        .iter()
        .flat_map(|a| a.call_outcomes.as_deref().unwrap_or_default());
    let notifications = call.notifications().unwrap_or_default();
    has_repeat(attempts.iter().map(|a| a.uid))
        || has_repeat(outcomes.map(|o| o.uid))
        || has_repeat(notifications.iter().map(|n| n.uid))
}

fn has_repeat(mut uids: impl Iterator<Item = Uuid>) -> bool {
    let mut seen = HashSet::new();
    uids.any(|uid| !seen.insert(uid))
}

fn upsert_call_row(
    tx: &Transaction<'_>,
    path: &Path,
    r: &CallRow,
    s: &Summary,
    synced_at: &str,
) -> Result<(), WarehouseError> {
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
           transferred = excluded.transferred, notification_count = excluded.notification_count",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
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
        ])
    })
    .sql(path, "writing a call")?;
    Ok(())
}

fn clear_custom_parameters(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
) -> Result<(), WarehouseError> {
    tx.prepare_cached("DELETE FROM call_custom_parameters WHERE call_uid = ?1")
        .and_then(|mut s| s.execute([call_uid]))
        .sql(path, "clearing custom parameters")?;
    Ok(())
}

fn insert_custom_parameters(
    tx: &Transaction<'_>,
    path: &Path,
    call: &OutboundCall,
    call_uid: &str,
) -> Result<(), WarehouseError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_custom_parameters (call_uid, name, value) VALUES (?1, ?2, ?3)",
        )
        .sql(path, "preparing the custom parameter insert")?;
    for (name, value) in rows::custom_parameters(call) {
        stmt.execute(params![call_uid, name, value])
            .sql(path, "writing a custom parameter")?;
    }
    Ok(())
}

/// Upserts the attempts the service sent (`rows` are their rows) and their outcomes and
/// variables; with `mirror`, first deletes the stored ones it no longer shows.
fn write_attempts(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
    sent: &[Attempt],
    rows: &[rows::AttemptRow],
    mirror: bool,
) -> Result<(), WarehouseError> {
    if mirror {
        // Outcomes and variables of a vanished attempt go with it (ON DELETE CASCADE).
        delete_missing(
            tx,
            path,
            ATTEMPTS,
            call_uid,
            rows.iter().map(|a| a.uid.as_str()),
        )?;
    }
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
        .sql(path, "preparing the attempt upsert")?;
    for (attempt, a) in sent.iter().zip(rows) {
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
        .sql(path, "writing an attempt")?;
        if let Some(outcomes) = &attempt.call_outcomes {
            write_outcomes(tx, path, call_uid, &a.uid, outcomes, mirror)?;
        }
        if let Some(variables) = &attempt.call_attempts_variables {
            write_variables(tx, path, call_uid, &a.uid, variables, mirror)?;
        }
    }
    Ok(())
}

fn write_outcomes(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
    attempt_uid: &str,
    outcomes: &[crate::api::Outcome],
    mirror: bool,
) -> Result<(), WarehouseError> {
    let rows: Vec<_> = outcomes.iter().map(rows::outcome).collect();
    if mirror {
        delete_missing(
            tx,
            path,
            OUTCOMES,
            attempt_uid,
            rows.iter().map(|o| o.0.as_str()),
        )?;
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (uid) DO UPDATE SET attempt_uid = excluded.attempt_uid,
               call_uid = excluded.call_uid, name = excluded.name,
               created_at = excluded.created_at, extra = excluded.extra",
        )
        .sql(path, "preparing the outcome upsert")?;
    for (uid, name, created_at, extra) in rows {
        stmt.execute(params![uid, attempt_uid, call_uid, name, created_at, extra])
            .sql(path, "writing an outcome")?;
    }
    Ok(())
}

fn write_variables(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
    attempt_uid: &str,
    variables: &[crate::api::AttemptVariable],
    mirror: bool,
) -> Result<(), WarehouseError> {
    let rows: Vec<_> = variables.iter().map(rows::variable).collect();
    if mirror {
        delete_missing(
            tx,
            path,
            VARIABLES,
            attempt_uid,
            rows.iter().map(|v| v.0.as_str()),
        )?;
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO attempt_variables (uid, attempt_uid, call_uid, name, value, status, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (uid) DO UPDATE SET attempt_uid = excluded.attempt_uid,
               call_uid = excluded.call_uid, name = excluded.name, value = excluded.value,
               status = excluded.status, created_at = excluded.created_at, extra = excluded.extra",
        )
        .sql(path, "preparing the variable upsert")?;
    for (uid, name, value, status, created_at, extra) in rows {
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
        .sql(path, "writing a variable")?;
    }
    Ok(())
}

fn write_notifications(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
    notifications: &[crate::api::Notification],
    mirror: bool,
) -> Result<(), WarehouseError> {
    let rows: Vec<_> = notifications.iter().map(rows::notification).collect();
    if mirror {
        delete_missing(
            tx,
            path,
            NOTIFICATIONS,
            call_uid,
            rows.iter().map(|n| n.0.as_str()),
        )?;
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_notifications (uid, call_uid, status, message_count, delivered_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (uid) DO UPDATE SET call_uid = excluded.call_uid, status = excluded.status,
               message_count = excluded.message_count, delivered_at = excluded.delivered_at,
               extra = excluded.extra",
        )
        .sql(path, "preparing the notification upsert")?;
    for (uid, status, count, delivered, extra) in rows {
        stmt.execute(params![uid, call_uid, status, count, delivered, extra])
            .sql(path, "writing a notification")?;
    }
    Ok(())
}

/// A child table that mirrors a list of the service: its stored uids of one parent, and
/// how one of them is deleted. Compile-time SQL, never input.
#[derive(Clone, Copy)]
struct MirroredTable {
    uids_of_parent: &'static str,
    delete_one: &'static str,
}

const ATTEMPTS: MirroredTable = MirroredTable {
    uids_of_parent: "SELECT uid FROM call_attempts WHERE call_uid = ?1",
    delete_one: "DELETE FROM call_attempts WHERE uid = ?1",
};
const OUTCOMES: MirroredTable = MirroredTable {
    uids_of_parent: "SELECT uid FROM attempt_outcomes WHERE attempt_uid = ?1",
    delete_one: "DELETE FROM attempt_outcomes WHERE uid = ?1",
};
const VARIABLES: MirroredTable = MirroredTable {
    uids_of_parent: "SELECT uid FROM attempt_variables WHERE attempt_uid = ?1",
    delete_one: "DELETE FROM attempt_variables WHERE uid = ?1",
};
const NOTIFICATIONS: MirroredTable = MirroredTable {
    uids_of_parent: "SELECT uid FROM call_notifications WHERE call_uid = ?1",
    delete_one: "DELETE FROM call_notifications WHERE uid = ?1",
};

/// Deletes the rows of `table` belonging to `parent` whose uid is not in `keep`.
fn delete_missing<'a>(
    tx: &Transaction<'_>,
    path: &Path,
    table: MirroredTable,
    parent: &str,
    keep: impl Iterator<Item = &'a str>,
) -> Result<(), WarehouseError> {
    let keep: HashSet<&str> = keep.collect();
    let stored: Vec<String> = tx
        .prepare_cached(table.uids_of_parent)
        .and_then(|mut s| {
            s.query_map([parent], |r| r.get(0))?
                .collect::<Result<_, _>>()
        })
        .sql(path, "reading the stored children of a call")?;
    let mut delete = tx
        .prepare_cached(table.delete_one)
        .sql(path, "preparing a child delete")?;
    for uid in stored.iter().filter(|uid| !keep.contains(uid.as_str())) {
        delete
            .execute([uid])
            .sql(path, "deleting children the service no longer shows")?;
    }
    Ok(())
}

/// Recomputes the call's summary columns from its child rows.
pub(super) fn summarize(
    tx: &Transaction<'_>,
    path: &Path,
    call_uid: &str,
) -> Result<(), WarehouseError> {
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
    .sql(path, "summarising a call's attempts")?;
    tx.prepare_cached(
        "UPDATE calls SET
           (last_attempt_status, last_attempt_started_at, last_attempt_answered_at,
            last_attempt_ended_at, last_attempt_duration) =
           (SELECT status, started_at, answered_at, ended_at, duration
            FROM call_attempts WHERE uid = calls.last_attempt_uid)
         WHERE uid = ?1",
    )
    .and_then(|mut s| s.execute([call_uid]))
    .sql(path, "summarising a call's last attempt")?;
    Ok(())
}
