//! `set_aside_calls` in the SQLite file (`warehouse/set_aside.rs` says which rows): written in
//! the page's transaction, its rows taken out when a later read of the call fits.

use std::path::Path;

use rusqlite::{Connection, params};
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use crate::warehouse::set_aside::SetAside;

/// Upserts `rows` of `schedule`, seen at `seen_at` (warehouse text).
pub(super) fn write(
    conn: &Connection,
    path: &Path,
    schedule: &str,
    rows: &[SetAside],
    seen_at: &str,
) -> Result<(), WarehouseError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO set_aside_calls (schedule_uid, call_uid, kind, updated_at, reason,
                 raw_json, first_seen, last_seen, run_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
             ON CONFLICT (schedule_uid, call_uid) DO UPDATE SET
                 kind = excluded.kind, updated_at = excluded.updated_at,
                 reason = excluded.reason, raw_json = excluded.raw_json,
                 last_seen = excluded.last_seen, run_id = excluded.run_id",
        )
        .sql(path, "preparing to set calls aside")?;
    for row in rows {
        stmt.execute(params![
            schedule,
            row.call_uid.to_string(),
            row.kind.as_str(),
            row.updated_at.to_warehouse_text(),
            row.reason,
            row.raw_json,
            seen_at,
            row.run,
        ])
        .sql(path, "setting a call aside")?;
    }
    Ok(())
}

/// Takes out `schedule`'s rows that a page no longer needs: those of its calls `fitting`
/// (read again, and taken as they are), and its conflicts before `cursor`, the checkpoint the
/// page saves (a conflict holds the checkpoint at its instant while it is listed, so a
/// checkpoint past it means the walk read that instant again without it). One look-up a
/// page when the schedule has none set aside, as nearly always.
/// Returns whether the schedule had rows.
pub(super) fn take_out(
    conn: &Connection,
    path: &Path,
    schedule: &str,
    fitting: &[Uuid],
    cursor: Option<&str>,
) -> Result<bool, WarehouseError> {
    let any: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM set_aside_calls WHERE schedule_uid = ?1)")
        .and_then(|mut s| s.query_row([schedule], |r| r.get(0)))
        .sql(path, "looking for calls set aside")?;
    if !any {
        return Ok(false);
    }
    let uids: Vec<String> = fitting.iter().map(Uuid::to_string).collect();
    // A JSON array of uuid strings always serializes.
    let uids = serde_json::to_string(&uids).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(
        "DELETE FROM set_aside_calls
         WHERE schedule_uid = ?1 AND (call_uid IN (SELECT value FROM json_each(?2))
                                      OR (kind = 'conflict' AND updated_at < ?3))",
    )
    .and_then(|mut s| s.execute(params![schedule, uids, cursor]))
    .sql(path, "taking out calls set aside that now fit")?;
    Ok(true)
}

/// How many calls `schedule` has set aside.
pub(super) fn count(conn: &Connection, path: &Path, schedule: &str) -> Result<u64, WarehouseError> {
    conn.prepare_cached("SELECT count(*) FROM set_aside_calls WHERE schedule_uid = ?1")
        .and_then(|mut s| s.query_row([schedule], |r| r.get::<_, i64>(0)))
        .map(|n| u64::try_from(n).unwrap_or(0))
        .sql(path, "counting calls set aside")
}
