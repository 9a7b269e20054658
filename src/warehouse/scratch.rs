//! Scratch tables for the upload: on disk in SQLite's temporary database (the file is deleted
//! on close), not in memory, whatever the size of the file or the schedule; nothing of them
//! needs to be durable, so each lives in one transaction.

use rusqlite::Connection;
use uuid::Uuid;

use crate::service::OutboundCall;

/// The external_ids seen so far, on disk (SQLite's temporary database), not in memory.
pub struct SeenExternalIds {
    scratch: Connection,
}

impl SeenExternalIds {
    pub fn new() -> Result<Self, rusqlite::Error> {
        let scratch = Connection::open("")?;
        scratch.execute_batch(
            "CREATE TABLE seen (external_id TEXT PRIMARY KEY, line INTEGER NOT NULL) WITHOUT ROWID;
             BEGIN",
        )?;
        Ok(SeenExternalIds { scratch })
    }

    /// The line `id` was first seen on, if not this one.
    pub fn first_seen(&mut self, id: &str, line: u64) -> Result<Option<u64>, rusqlite::Error> {
        let inserted = self
            .scratch
            .prepare_cached("INSERT OR IGNORE INTO seen VALUES (?1, ?2)")?
            .execute(rusqlite::params![id, line as i64])?;
        if inserted == 1 {
            return Ok(None);
        }
        let first: i64 = self
            .scratch
            .prepare_cached("SELECT line FROM seen WHERE external_id = ?1")?
            .query_row([id], |r| r.get(0))?;
        Ok(Some(first as u64))
    }

    pub fn finish(self) -> Result<(), rusqlite::Error> {
        self.scratch.execute_batch("COMMIT")
    }
}

/// Calls by external_id: on disk (SQLite's temporary database), not in memory, however many
/// calls a schedule has.
pub struct CallsByExternalId {
    scratch: Connection,
}

impl CallsByExternalId {
    pub fn new() -> Result<Self, rusqlite::Error> {
        let scratch = Connection::open("")?;
        // One transaction for the scratch table's life: nothing of it needs to be durable.
        scratch.execute_batch(
            "CREATE TABLE calls (external_id TEXT NOT NULL, uid BLOB NOT NULL,
                                 PRIMARY KEY (external_id, uid)) WITHOUT ROWID;
             BEGIN",
        )?;
        Ok(CallsByExternalId { scratch })
    }

    pub fn add(&mut self, call: &OutboundCall) -> Result<(), rusqlite::Error> {
        if let Some(id) = &call.external_id {
            self.scratch
                .prepare_cached("INSERT OR IGNORE INTO calls VALUES (?1, ?2)")?
                .execute(rusqlite::params![id, call.uid.as_bytes().as_slice()])?;
        }
        Ok(())
    }

    /// The calls with this external_id.
    pub fn uids(&self, external_id: &str) -> Result<Vec<Uuid>, rusqlite::Error> {
        let mut statement = self
            .scratch
            .prepare_cached("SELECT uid FROM calls WHERE external_id = ?1")?;
        let uids = statement.query_map([external_id], |r| r.get::<_, Vec<u8>>(0))?;
        let mut out = Vec::new();
        for uid in uids {
            out.extend(Uuid::from_slice(&uid?).ok());
        }
        Ok(out)
    }
}
