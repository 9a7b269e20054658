//! A call's children written (custom parameters, attempts with their outcomes and
//! variables, notifications), for `upsert.rs`'s `write_call`: each list the service sent is
//! upserted and, with `mirror`, the stored rows it no longer shows are deleted first.

use std::collections::HashSet;
use std::path::Path;

use rusqlite::{CachedStatement, Transaction, params};

use super::error::{SqlContext, WarehouseError};
use crate::service::{Attempt, OutboundCall};
use crate::warehouse::rows;

/// The call whose children are written: its id (their key) and its uid (a plain column).
pub(super) struct Parent<'a> {
    pub(super) call_id: i64,
    pub(super) call_uid: &'a str,
}

/// Runs `delete` (compile-time SQL, never input) with the ids given.
pub(super) fn clear(
    tx: &Transaction<'_>,
    path: &Path,
    delete: &'static str,
    ids: impl rusqlite::Params,
) -> Result<(), WarehouseError> {
    tx.prepare_cached(delete)
        .and_then(|mut s| s.execute(ids))
        .sql(path, "deleting children the service no longer shows")?;
    Ok(())
}

pub(super) fn insert_custom_parameters(
    tx: &Transaction<'_>,
    path: &Path,
    call: &OutboundCall,
    parent: &Parent<'_>,
) -> Result<(), WarehouseError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_custom_parameters (call_id, call_uid, name, value)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .sql(path, "preparing the custom parameter insert")?;
    for (name, value) in rows::custom_parameters(call) {
        stmt.execute(params![parent.call_id, parent.call_uid, name, value])
            .sql(path, "writing a custom parameter")?;
    }
    Ok(())
}

/// Upserts the attempts the service sent (`rows` are their rows) and their outcomes and
/// variables; with `mirror`, first deletes the stored ones it no longer shows.
pub(super) fn write_attempts(
    tx: &Transaction<'_>,
    path: &Path,
    parent: &Parent<'_>,
    sent: &[Attempt],
    rows: &[rows::AttemptRow],
    mirror: bool,
) -> Result<(), WarehouseError> {
    if mirror {
        delete_missing_attempts(tx, path, parent.call_id, rows)?;
    }
    // An attempt keeps its id when it is updated (ON CONFLICT … DO UPDATE), so outcomes and
    // variables of an attempt whose lists were not sent stay attached to it.
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO call_attempts (uid, call_id, call_uid, position, status, started_at,
               answered_at, ended_at, duration, created_at, updated_at, error_details,
               transfer_started_at, transfer_answered_at, transfer_destination, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
             ON CONFLICT (call_id, uid) DO UPDATE SET call_uid = excluded.call_uid,
               position = excluded.position, status = excluded.status,
               started_at = excluded.started_at, answered_at = excluded.answered_at,
               ended_at = excluded.ended_at, duration = excluded.duration,
               created_at = excluded.created_at, updated_at = excluded.updated_at,
               error_details = excluded.error_details,
               transfer_started_at = excluded.transfer_started_at,
               transfer_answered_at = excluded.transfer_answered_at,
               transfer_destination = excluded.transfer_destination, extra = excluded.extra
             RETURNING id",
        )
        .sql(path, "preparing the attempt upsert")?;
    for (attempt, a) in sent.iter().zip(rows) {
        let attempt_id: i64 = stmt
            .query_row(
                params![
                    a.uid,
                    parent.call_id,
                    parent.call_uid,
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
                ],
                |r| r.get(0),
            )
            .sql(path, "writing an attempt")?;
        let of = AttemptOf {
            parent,
            attempt_id,
            attempt_uid: &a.uid,
        };
        if let Some(outcomes) = &attempt.call_outcomes {
            write_attempt_list(tx, path, &of, &OUTCOMES, outcomes, mirror)?;
        }
        if let Some(variables) = &attempt.call_attempts_variables {
            write_attempt_list(tx, path, &of, &VARIABLES, variables, mirror)?;
        }
    }
    Ok(())
}

/// An attempt's outcomes and variables, cleared when the attempt goes and when the service
/// sends their lists again (mirroring).
const CLEAR_OUTCOMES: &str = "DELETE FROM attempt_outcomes WHERE call_id = ?1 AND attempt_id = ?2";
const CLEAR_VARIABLES: &str =
    "DELETE FROM attempt_variables WHERE call_id = ?1 AND attempt_id = ?2";

/// The attempt whose outcomes or variables are written.
struct AttemptOf<'a> {
    parent: &'a Parent<'a>,
    attempt_id: i64,
    attempt_uid: &'a str,
}

/// Deletes the call's stored attempts the service no longer shows, with their outcomes and
/// variables (no foreign key cascades to them: see up.sql of schema 6).
fn delete_missing_attempts(
    tx: &Transaction<'_>,
    path: &Path,
    call_id: i64,
    rows: &[rows::AttemptRow],
) -> Result<(), WarehouseError> {
    let keep: HashSet<&str> = rows.iter().map(|a| a.uid.as_str()).collect();
    let stored: Vec<(i64, String)> = tx
        .prepare_cached("SELECT id, uid FROM call_attempts WHERE call_id = ?1")
        .and_then(|mut s| {
            s.query_map([call_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .sql(path, "reading the stored attempts of a call")?;
    for (id, _) in stored
        .iter()
        .filter(|(_, uid)| !keep.contains(uid.as_str()))
    {
        clear(tx, path, "DELETE FROM call_attempts WHERE id = ?1", [id])?;
        clear(tx, path, CLEAR_OUTCOMES, [call_id, *id])?;
        clear(tx, path, CLEAR_VARIABLES, [call_id, *id])?;
    }
    Ok(())
}

/// An attempt's list the service sends whole, outcomes or variables, and how its items are
/// written: each row the item's uid, its attempt's and its call's keys, then its own columns.
struct AttemptList<T> {
    /// Clears the attempt's stored list (mirroring).
    clear: &'static str,
    /// INSERT OR REPLACE on the item's key, so a uid repeated in the list keeps its last row,
    /// as it always did.
    insert: &'static str,
    preparing: &'static str,
    writing: &'static str,
    /// Runs `insert` for one item (its columns bound as they are: no copy, no conversion).
    execute: fn(&mut CachedStatement<'_>, &AttemptOf<'_>, &T) -> rusqlite::Result<usize>,
}

const OUTCOMES: AttemptList<crate::service::Outcome> = AttemptList {
    clear: CLEAR_OUTCOMES,
    insert: "INSERT OR REPLACE INTO attempt_outcomes (call_id, attempt_id, uid, attempt_uid,
               call_uid, name, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    preparing: "preparing the outcome insert",
    writing: "writing an outcome",
    execute: |stmt, of, o| {
        let (uid, name, created_at, extra) = rows::outcome(o);
        stmt.execute(params![
            of.parent.call_id,
            of.attempt_id,
            uid,
            of.attempt_uid,
            of.parent.call_uid,
            name,
            created_at,
            extra
        ])
    },
};

const VARIABLES: AttemptList<crate::service::AttemptVariable> = AttemptList {
    clear: CLEAR_VARIABLES,
    insert: "INSERT OR REPLACE INTO attempt_variables (call_id, attempt_id, uid, attempt_uid,
               call_uid, name, value, status, created_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    preparing: "preparing the variable insert",
    writing: "writing a variable",
    execute: |stmt, of, v| {
        let (uid, name, value, status, created_at, extra) = rows::variable(v);
        stmt.execute(params![
            of.parent.call_id,
            of.attempt_id,
            uid,
            of.attempt_uid,
            of.parent.call_uid,
            name,
            value,
            status,
            created_at,
            extra
        ])
    },
};

/// Writes an attempt's `items` of `list`; with `mirror`, replaces the stored ones.
fn write_attempt_list<T>(
    tx: &Transaction<'_>,
    path: &Path,
    of: &AttemptOf<'_>,
    list: &AttemptList<T>,
    items: &[T],
    mirror: bool,
) -> Result<(), WarehouseError> {
    if mirror {
        clear(tx, path, list.clear, [of.parent.call_id, of.attempt_id])?;
    }
    let mut stmt = tx.prepare_cached(list.insert).sql(path, list.preparing)?;
    for item in items {
        (list.execute)(&mut stmt, of, item).sql(path, list.writing)?;
    }
    Ok(())
}

/// Writes the call's notifications; with `mirror`, replaces the stored ones.
pub(super) fn write_notifications(
    tx: &Transaction<'_>,
    path: &Path,
    parent: &Parent<'_>,
    notifications: &[crate::service::Notification],
    mirror: bool,
) -> Result<(), WarehouseError> {
    if mirror {
        clear(
            tx,
            path,
            "DELETE FROM call_notifications WHERE call_id = ?1",
            [parent.call_id],
        )?;
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO call_notifications (call_id, uid, call_uid, status,
               message_count, delivered_at, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .sql(path, "preparing the notification insert")?;
    for n in notifications {
        let (uid, status, count, delivered, extra) = rows::notification(n);
        stmt.execute(params![
            parent.call_id,
            uid,
            parent.call_uid,
            status,
            count,
            delivered,
            extra
        ])
        .sql(path, "writing a notification")?;
    }
    Ok(())
}
