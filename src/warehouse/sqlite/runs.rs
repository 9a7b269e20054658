//! Checkpoints and `sync_runs`: where each schedule's next pass starts, and what passes did.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use crate::service::Timestamp;
use crate::untrusted::untrusted_text;
use crate::warehouse::records::{
    Checkpoint, PROCESS_ENDED, ProcessIdentity, RunId, RunKind, WALKER_CHARS,
};

impl Warehouse {
    pub fn start_run(
        &mut self,
        schedule: Uuid,
        kind: RunKind,
        started_at: Timestamp,
        walker: &ProcessIdentity,
    ) -> Result<RunId, WarehouseError> {
        self.conn
            .prepare_cached(
                "INSERT INTO sync_runs (schedule_uid, kind, started_at, host, instance, pid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    schedule.to_string(),
                    kind.as_str(),
                    started_at.to_warehouse_text(),
                    walker.host,
                    walker.instance,
                    walker.pid,
                ])
            })
            .sql(&self.path, "recording the start of a pass")?;
        Ok(RunId(self.conn.last_insert_rowid()))
    }

    /// Who walked `schedule`'s latest pass of `kind`, if that pass began at or after `since`
    /// and finished. The caller holds the schedule's claim, so a latest pass not finished
    /// is one whose process died: not walked, whatever its start; nor is one found so
    /// ([`PROCESS_ENDED`]).
    pub fn walked_since(
        &self,
        schedule: Uuid,
        kind: RunKind,
        since: Timestamp,
    ) -> Result<Option<ProcessIdentity>, WarehouseError> {
        type Latest = (String, bool, Option<String>, Option<String>, Option<u32>);
        let latest: Option<Latest> = self
            .conn
            .prepare_cached(
                "SELECT started_at, finished_at IS NOT NULL AND error IS NOT ?3, host, instance,
                        pid
                 FROM sync_runs WHERE schedule_uid = ?1 AND kind = ?2 ORDER BY id DESC LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![schedule.to_string(), kind.as_str(), PROCESS_ENDED],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()
            })
            .sql(&self.path, "reading a schedule's latest pass")?;
        let Some((started_at, true, host, instance, pid)) = latest else {
            return Ok(None);
        };
        if parse(&self.path, &started_at, "sync_runs.started_at")? < since {
            return Ok(None);
        }
        // Text from a file, shown in log lines: made safe first.
        let safe = |text: Option<String>| text.map(|t| untrusted_text(&t, WALKER_CHARS));
        let host = safe(host).unwrap_or_else(|| "?".to_owned());
        Ok(Some(ProcessIdentity {
            instance: safe(instance).unwrap_or_else(|| host.clone()),
            host,
            pid: pid.unwrap_or_default(),
        }))
    }
}

/// Moves the checkpoint to `cursor` unless it already is at or past it. Compares instants,
/// not text.
pub(super) fn advance_checkpoint(
    conn: &Connection,
    path: &Path,
    schedule: Uuid,
    cursor: Timestamp,
) -> Result<(), WarehouseError> {
    match read_checkpoint(conn, path, schedule)? {
        Some(stored) if stored.cursor >= cursor => Ok(()),
        _ => write_checkpoint(conn, path, schedule, cursor),
    }
}

pub(super) fn write_checkpoint(
    conn: &Connection,
    path: &Path,
    schedule: Uuid,
    cursor: Timestamp,
) -> Result<(), WarehouseError> {
    conn.prepare_cached(
        "INSERT INTO sync_checkpoints (schedule_uid, cursor, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (schedule_uid) DO UPDATE SET cursor = excluded.cursor,
           updated_at = excluded.updated_at",
    )
    .and_then(|mut s| {
        s.execute(params![
            schedule.to_string(),
            cursor.to_warehouse_text(),
            Timestamp::now().to_warehouse_text()
        ])
    })
    .sql(path, "saving a checkpoint")?;
    Ok(())
}

pub(super) fn read_checkpoint(
    conn: &Connection,
    path: &Path,
    schedule: Uuid,
) -> Result<Option<Checkpoint>, WarehouseError> {
    let row: Option<(String, String)> = conn
        .prepare_cached("SELECT cursor, updated_at FROM sync_checkpoints WHERE schedule_uid = ?1")
        .and_then(|mut s| {
            s.query_row([schedule.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .sql(path, "reading a checkpoint")?;
    row.map(|(cursor, updated_at)| {
        Ok(Checkpoint {
            schedule_uid: schedule,
            cursor: parse(path, &cursor, "sync_checkpoints.cursor")?,
            updated_at: parse(path, &updated_at, "sync_checkpoints.updated_at")?,
        })
    })
    .transpose()
}

pub(super) fn parse(
    path: &Path,
    text: &str,
    what: &'static str,
) -> Result<Timestamp, WarehouseError> {
    Timestamp::parse_warehouse_text(text).map_err(|_| WarehouseError::BadTimestamp {
        path: path.to_owned(),
        what,
        value: text.to_owned(),
    })
}
