//! What a destination may offer beyond the contract every one fulfils: a backup into a file
//! and its restore, and the upload's ledger of sent chunks. A back end that does not offer
//! one declines it with [`WarehouseError::Declined`] (see `Destination`'s methods of these
//! names), so the command line asks and never checks which back end it has.

use std::path::PathBuf;

use uuid::Uuid;

use super::error::WarehouseError;
use crate::service::Timestamp;

/// What a warehouse file holds, as `backup` and `restore` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contents {
    pub schema_version: usize,
    pub schedules: u64,
    pub calls: u64,
}

impl std::fmt::Display for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "schema version {}, {} schedules, {} calls",
            self.schema_version, self.schedules, self.calls
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    pub path: PathBuf,
    pub bytes: u64,
    pub contents: Contents,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    pub bytes: u64,
    pub contents: Contents,
    /// The old warehouse's `-wal`/`-shm` files, removed.
    pub removed: Vec<PathBuf>,
}

/// Which upload a chunk belongs to, and where it is in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkKey {
    pub schedule: Uuid,
    /// SHA-256 (hex) of the file's bytes and the column mapping.
    pub fingerprint: String,
    /// CSV line of the chunk's first row.
    pub first_line: u64,
}

/// What the ledger knows of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkState {
    /// Sent (last at `at`); whether the service created it is not known.
    Sent { at: Timestamp },
    /// Created: the new calls' uids in row order.
    Created(Vec<Uuid>),
}

/// `callsync upload`'s ledger (`upload_chunks`): a chunk is recorded as `sent` (committed)
/// before its request goes out, and as `created` with the service's uids when the answer
/// comes.
pub trait UploadLedger {
    fn chunk_state(&self, key: &ChunkKey) -> Result<Option<ChunkState>, WarehouseError>;
    /// Records the chunk sent, now; returns when.
    fn chunk_sent(
        &mut self,
        key: &ChunkKey,
        last_line: u64,
        rows: usize,
    ) -> Result<Timestamp, WarehouseError>;
    fn chunk_created(&mut self, key: &ChunkKey, uids: &[Uuid]) -> Result<(), WarehouseError>;
    /// Forgets a chunk the service certainly did not create.
    fn chunk_not_created(&mut self, key: &ChunkKey) -> Result<(), WarehouseError>;
}
