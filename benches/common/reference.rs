//! The reference: what SQLite alone allows for callsync's rows, in both layouts.
//!
//! [`Layout::Uid5`]: the SQL files of `migrations/` up to schema 5 applied in order to a new
//! file (every child row keyed and indexed by uids); [`Layout::Ordered6`]: the current schema,
//! as callsync creates it (integer ids in insertion order, children clustered by call id).
//! Then inserts the rows of the given calls — the call with its
//! summary columns, custom parameters, attempts, outcomes, variables, notifications — with
//! bare prepared INSERTs: no lookups, no upserts, one transaction per 100 calls, WAL,
//! `synchronous = NORMAL`, and the writer connection's page cache and WAL checkpoint interval
//! (with SQLite's defaults — a 2 MiB cache, a checkpoint every 1,000 WAL pages — the bare
//! INSERTs ran at about 0.6× of what they do with callsync's settings, so a yardstick on the
//! defaults would measure the settings, not the write path). Independent of callsync's own
//! write path on purpose: it is the yardstick, measured in the same run as what it measures.

use std::path::Path;
use std::time::Instant;

use callsync::service::{OutboundCall, Timestamp};
use rusqlite::{Connection, params};

/// Calls per transaction, as callsync's pages.
const CALLS_PER_TRANSACTION: usize = 100;

/// The schema the reference inserts into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Schema 5 (callsync up to a0d8e46): uid primary keys, `call_uid`/`attempt_uid` indexes.
    Uid5,
    /// Schema 6: insertion-ordered (the current `migrations/`).
    Ordered6,
}

/// Inserts `calls` into a new warehouse at `path` in `layout`; returns calls per second.
pub fn insert_rate(path: &Path, calls: &[OutboundCall], layout: Layout) -> f64 {
    insert_rate_altered(path, calls, layout, "")
}

/// [`insert_rate`] with `alter` (SQL: indexes dropped or added) run on the new file first:
/// what an index costs the writes, measured in one run.
pub fn insert_rate_altered(
    path: &Path,
    calls: &[OutboundCall],
    layout: Layout,
    alter: &str,
) -> f64 {
    let mut conn = new_warehouse(path, layout);
    conn.execute_batch(alter).expect("the schema is altered");
    let started = Instant::now();
    for chunk in calls.chunks(CALLS_PER_TRANSACTION) {
        let tx = conn.transaction().expect("a transaction");
        for call in chunk {
            match layout {
                Layout::Uid5 => insert_call(&tx, call),
                Layout::Ordered6 => insert_call_ordered(&tx, call),
            }
        }
        tx.commit().expect("a commit");
    }
    calls.len() as f64 / started.elapsed().as_secs_f64()
}

fn new_warehouse(path: &Path, layout: Layout) -> Connection {
    if layout == Layout::Ordered6 {
        // callsync's own schema, as it creates it.
        callsync::warehouse::sqlite::Warehouse::migrate(path, std::time::Duration::from_secs(5))
            .expect("the reference file is created");
    }
    let conn = Connection::open(path).expect("the reference file opens");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    conn.pragma_update(None, "foreign_keys", "ON")
        .expect("foreign keys");
    conn.pragma_update(
        None,
        "cache_size",
        callsync::warehouse::sqlite::WRITER_CACHE_KIB,
    )
    .expect("cache size");
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        callsync::warehouse::sqlite::WAL_CHECKPOINT_PAGES,
    )
    .expect("WAL checkpoint interval");
    if layout == Layout::Ordered6 {
        return conn;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut versions: Vec<_> = std::fs::read_dir(&root)
        .expect("migrations/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().as_ref() < "0006")
        })
        .collect();
    versions.sort();
    for version in versions {
        let sql = std::fs::read_to_string(version.join("up.sql")).expect("an up.sql");
        conn.execute_batch(&sql).expect("a migration applies");
    }
    conn
}

fn ts(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::to_warehouse_text)
}

fn insert_call(tx: &rusqlite::Transaction<'_>, call: &OutboundCall) {
    let info = &call.outbound_call_info;
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    let last = attempts.last();
    let uid = call.uid.to_string();
    tx.prepare_cached(
        "INSERT INTO calls (uid, schedule_uid, external_id, status, progress, is_test_call,
           cooldown_until, attempts_remaining, retry_intervals, created_at, updated_at,
           phone_number, phone_e164, full_name, first_name, last_name, email, attempt_count,
           last_attempt_uid, last_attempt_status, last_attempt_started_at,
           last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
           outcome_names, answered, transferred, notification_count, content_hash, synced_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
           ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
    )
    .expect("prepare")
    .execute(params![
        uid,
        "00000000-0000-4000-8000-000000000000",
        call.external_id,
        call.status,
        call.progress,
        call.is_test_call,
        ts(call.cooldown_until),
        call.attempts_remaining,
        serde_json::to_string(&call.retry_intervals).ok(),
        call.created_at.to_warehouse_text(),
        call.updated_at.to_warehouse_text(),
        info.phone_number,
        info.phone_number.as_ref().map(|p| format!("+{p}")),
        info.full_name,
        info.first_name,
        info.last_name,
        info.email,
        attempts.len() as i64,
        last.map(|a| a.uid.to_string()),
        last.map(|a| a.status.clone()),
        ts(last.and_then(|a| a.started_at)),
        ts(last.and_then(|a| a.answered_at)),
        ts(last.and_then(|a| a.ended_at)),
        last.and_then(|a| a.duration),
        None::<String>,
        attempts.iter().any(|a| a.answered_at.is_some()),
        false,
        call.notifications().map_or(0, <[_]>::len) as i64,
        call.content_hash() as i64,
        Timestamp::now().to_warehouse_text(),
    ])
    .expect("a call");
    let mut params_stmt = tx
        .prepare_cached(
            "INSERT INTO call_custom_parameters (call_uid, name, value) VALUES (?1, ?2, ?3)",
        )
        .expect("prepare");
    for (name, value) in &info.custom_parameters {
        params_stmt
            .execute(params![uid, name, value.as_str()])
            .expect("a parameter");
    }
    for (position, a) in attempts.iter().enumerate() {
        let attempt_uid = a.uid.to_string();
        tx.prepare_cached(
            "INSERT INTO call_attempts (uid, call_uid, position, status, started_at,
               answered_at, ended_at, duration, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .expect("prepare")
        .execute(params![
            attempt_uid,
            uid,
            position as i64,
            a.status,
            ts(a.started_at),
            ts(a.answered_at),
            ts(a.ended_at),
            a.duration,
            ts(a.created_at),
            ts(a.updated_at),
        ])
        .expect("an attempt");
        for o in a.call_outcomes.as_deref().unwrap_or_default() {
            tx.prepare_cached(
                "INSERT INTO attempt_outcomes (uid, attempt_uid, call_uid, name, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .expect("prepare")
            .execute(params![
                o.uid.to_string(),
                attempt_uid,
                uid,
                o.name,
                ts(o.created_at)
            ])
            .expect("an outcome");
        }
        for v in a.call_attempts_variables.as_deref().unwrap_or_default() {
            tx.prepare_cached(
                "INSERT INTO attempt_variables (uid, attempt_uid, call_uid, name, value, status,
                   created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .expect("prepare")
            .execute(params![
                v.uid.to_string(),
                attempt_uid,
                uid,
                v.name,
                v.value.as_ref().map(ToString::to_string),
                v.status,
                ts(v.created_at)
            ])
            .expect("a variable");
        }
    }
    for n in call.notifications().unwrap_or_default() {
        tx.prepare_cached(
            "INSERT INTO call_notifications (uid, call_uid, status, message_count, delivered_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .expect("prepare")
        .execute(params![
            n.uid.to_string(),
            uid,
            n.status,
            n.message_count,
            ts(n.delivered_at)
        ])
        .expect("a notification");
    }
}

/// The same rows as [`insert_call`], into schema 6: children carry the call's (and attempt's)
/// integer id, taken from `last_insert_rowid`.
fn insert_call_ordered(tx: &rusqlite::Transaction<'_>, call: &OutboundCall) {
    let info = &call.outbound_call_info;
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    let last = attempts.last();
    let uid = call.uid.to_string();
    tx.prepare_cached(
        "INSERT INTO calls (uid, schedule_uid, external_id, status, progress, is_test_call,
           cooldown_until, attempts_remaining, retry_intervals, created_at, updated_at,
           phone_number, phone_e164, full_name, first_name, last_name, email, attempt_count,
           last_attempt_uid, last_attempt_status, last_attempt_started_at,
           last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
           outcome_names, answered, transferred, notification_count, content_hash, synced_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
           ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
    )
    .expect("prepare")
    .execute(params![
        uid,
        "00000000-0000-4000-8000-000000000000",
        call.external_id,
        call.status,
        call.progress,
        call.is_test_call,
        ts(call.cooldown_until),
        call.attempts_remaining,
        serde_json::to_string(&call.retry_intervals).ok(),
        call.created_at.to_warehouse_text(),
        call.updated_at.to_warehouse_text(),
        info.phone_number,
        info.phone_number.as_ref().map(|p| format!("+{p}")),
        info.full_name,
        info.first_name,
        info.last_name,
        info.email,
        attempts.len() as i64,
        last.map(|a| a.uid.to_string()),
        last.map(|a| a.status.clone()),
        ts(last.and_then(|a| a.started_at)),
        ts(last.and_then(|a| a.answered_at)),
        ts(last.and_then(|a| a.ended_at)),
        last.and_then(|a| a.duration),
        None::<String>,
        attempts.iter().any(|a| a.answered_at.is_some()),
        false,
        call.notifications().map_or(0, <[_]>::len) as i64,
        call.content_hash() as i64,
        Timestamp::now().to_warehouse_text(),
    ])
    .expect("a call");
    let call_id = tx.last_insert_rowid();
    let mut params_stmt = tx
        .prepare_cached(
            "INSERT INTO call_custom_parameters (call_id, call_uid, name, value)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .expect("prepare");
    for (name, value) in &info.custom_parameters {
        params_stmt
            .execute(params![call_id, uid, name, value.as_str()])
            .expect("a parameter");
    }
    for (position, a) in attempts.iter().enumerate() {
        let attempt_uid = a.uid.to_string();
        tx.prepare_cached(
            "INSERT INTO call_attempts (call_id, uid, call_uid, position, status, started_at,
               answered_at, ended_at, duration, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .expect("prepare")
        .execute(params![
            call_id,
            attempt_uid,
            uid,
            position as i64,
            a.status,
            ts(a.started_at),
            ts(a.answered_at),
            ts(a.ended_at),
            a.duration,
            ts(a.created_at),
            ts(a.updated_at),
        ])
        .expect("an attempt");
        let attempt_id = tx.last_insert_rowid();
        for o in a.call_outcomes.as_deref().unwrap_or_default() {
            tx.prepare_cached(
                "INSERT INTO attempt_outcomes (call_id, attempt_id, uid, attempt_uid, call_uid,
                   name, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .expect("prepare")
            .execute(params![
                call_id,
                attempt_id,
                o.uid.to_string(),
                attempt_uid,
                uid,
                o.name,
                ts(o.created_at)
            ])
            .expect("an outcome");
        }
        for v in a.call_attempts_variables.as_deref().unwrap_or_default() {
            tx.prepare_cached(
                "INSERT INTO attempt_variables (call_id, attempt_id, uid, attempt_uid, call_uid,
                   name, value, status, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .expect("prepare")
            .execute(params![
                call_id,
                attempt_id,
                v.uid.to_string(),
                attempt_uid,
                uid,
                v.name,
                v.value.as_ref().map(ToString::to_string),
                v.status,
                ts(v.created_at)
            ])
            .expect("a variable");
        }
    }
    for n in call.notifications().unwrap_or_default() {
        tx.prepare_cached(
            "INSERT INTO call_notifications (call_id, uid, call_uid, status, message_count,
               delivered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .expect("prepare")
        .execute(params![
            call_id,
            n.uid.to_string(),
            uid,
            n.status,
            n.message_count,
            ts(n.delivered_at)
        ])
        .expect("a notification");
    }
}
