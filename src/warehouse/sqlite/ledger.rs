//! The upload ledger (`upload_chunks`): what each chunk of a contact-list upload became.
//!
//! A chunk is recorded as `sent` (committed) before its request goes out, and as `created`
//! with the service's uids when the answer comes. A `sent` chunk without an answer is the
//! hard case the upload resolves by asking the service; the ledger only remembers.

use rusqlite::{OptionalExtension, params};
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;
use crate::service::Timestamp;
use crate::warehouse::capabilities::{ChunkKey, ChunkState};

impl crate::warehouse::UploadLedger for Warehouse {
    fn chunk_state(&self, key: &ChunkKey) -> Result<Option<ChunkState>, WarehouseError> {
        let row: Option<(String, Option<String>, String)> = self
            .conn
            .query_row(
                "SELECT state, call_uids, sent_at FROM upload_chunks
                 WHERE schedule_uid = ?1 AND fingerprint = ?2 AND first_line = ?3",
                params![
                    key.schedule.to_string(),
                    key.fingerprint,
                    key.first_line as i64
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .sql(&self.path, "reading the upload ledger")?;
        Ok(
            row.map(|(state, uids, sent_at)| match (state.as_str(), uids) {
                ("created", Some(uids)) => {
                    ChunkState::Created(serde_json::from_str(&uids).unwrap_or_default())
                }
                // A time that does not read (edited by hand) counts as long ago: the chunk is
                // looked up once, not waited for.
                _ => ChunkState::Sent {
                    at: Timestamp::parse_warehouse_text(&sent_at).unwrap_or(Timestamp::EPOCH),
                },
            }),
        )
    }

    /// Records that the chunk is about to be sent, now (returned); committed before the
    /// request goes out.
    fn chunk_sent(
        &mut self,
        key: &ChunkKey,
        last_line: u64,
        rows: usize,
    ) -> Result<Timestamp, WarehouseError> {
        let now = Timestamp::now();
        self.conn
            .execute(
                "INSERT INTO upload_chunks
                   (schedule_uid, fingerprint, first_line, last_line, rows, state, sent_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'sent', ?6)
                 ON CONFLICT (schedule_uid, fingerprint, first_line)
                 DO UPDATE SET state = 'sent', sent_at = excluded.sent_at",
                params![
                    key.schedule.to_string(),
                    key.fingerprint,
                    key.first_line as i64,
                    last_line as i64,
                    rows as i64,
                    now.to_warehouse_text()
                ],
            )
            .sql(&self.path, "recording a chunk in the upload ledger")?;
        Ok(now)
    }

    /// Records the calls the service created for the chunk.
    fn chunk_created(&mut self, key: &ChunkKey, uids: &[Uuid]) -> Result<(), WarehouseError> {
        let uids = serde_json::to_string(uids).unwrap_or_else(|_| "[]".to_owned());
        self.conn
            .execute(
                "UPDATE upload_chunks SET state = 'created', call_uids = ?4, created_at = ?5
                 WHERE schedule_uid = ?1 AND fingerprint = ?2 AND first_line = ?3",
                params![
                    key.schedule.to_string(),
                    key.fingerprint,
                    key.first_line as i64,
                    uids,
                    Timestamp::now().to_warehouse_text()
                ],
            )
            .sql(&self.path, "recording created calls in the upload ledger")?;
        Ok(())
    }

    /// Forgets a chunk the service certainly did not create (it refused it).
    fn chunk_not_created(&mut self, key: &ChunkKey) -> Result<(), WarehouseError> {
        self.conn
            .execute(
                "DELETE FROM upload_chunks
                 WHERE schedule_uid = ?1 AND fingerprint = ?2 AND first_line = ?3",
                params![
                    key.schedule.to_string(),
                    key.fingerprint,
                    key.first_line as i64
                ],
            )
            .sql(&self.path, "updating the upload ledger")?;
        Ok(())
    }
}
