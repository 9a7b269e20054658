//! `SyncError`: why a pass of one schedule stopped.
//!
//! A variant whose cause is a `source()` does not repeat it in its message (ARCHITECTURE.md,
//! "Errors"); [`crate::error_chain`] prints them together.

use uuid::Uuid;

use super::cursor::WalkError;
use super::service_clock::ClockTaken;
use crate::ErrorKind;
use crate::api::ApiError;
use crate::service::Timestamp;
use crate::warehouse::WarehouseError;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
    /// The warehouse's configuration, found wrong when it is used (`warehouse.url`, its
    /// password file).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{request}")]
    Walk {
        request: String,
        #[source]
        source: WalkError,
    },
    #[error("cannot start the warehouse writer thread")]
    WriterStart(#[source] std::io::Error),
    #[error("the warehouse writer stopped unexpectedly (see the error logged before this one)")]
    WriterGone,
    /// Calls stamped so far past the clock the pass takes for the service's that the
    /// checkpoint, capped at that clock, cannot pass them (`sync/service_clock.rs`).
    #[error(
        "schedule {schedule}: calls are stamped up to {stamped} ({ahead_secs:.0} s past the service's clock as this pass takes it, {clock} from {}), further than sync.max_clock_skew_secs; the checkpoint stays before them, and more of them than a page holds cannot be read until that clock catches up. Check the clocks of the service (its Date header and its calls' updated_at) and of this machine",
        taken.describe()
    )]
    ClockBehindCalls {
        schedule: Uuid,
        clock: Timestamp,
        taken: ClockTaken,
        stamped: Timestamp,
        ahead_secs: f64,
    },
    /// A call's detail older than its list item: written, it would stand in the warehouse
    /// for the newer version while the checkpoint passes that version's `updated_at`.
    #[error(
        "call {call}: GET /api/v1/outbound_calls/{call} answered the version of {detail}, older than the {listed} its list item shows (the detail endpoint lags the list, as a replica behind its primary would); its page is not written and the checkpoint stays before it, so the next pass asks again. If every pass says so, report it to the service's operators"
    )]
    DetailBehindList {
        call: Uuid,
        listed: Timestamp,
        detail: Timestamp,
    },
}

impl SyncError {
    /// The configuration is wrong (`warehouse.url`, its password file, the warehouse it
    /// names): exit code 2.
    pub fn is_configuration(&self) -> bool {
        match self {
            SyncError::Config(_) => true,
            SyncError::Warehouse(err) => err.is_configuration(),
            _ => false,
        }
    }

    /// This process's claim on the schedule no longer held on the server
    /// ([`WarehouseError::ClaimLost`]): the pass ends as [`crate::sync::PassResult::ClaimLost`].
    pub fn lost_claim(&self) -> bool {
        matches!(self, SyncError::Warehouse(WarehouseError::ClaimLost { .. }))
    }

    /// The failure's kind for scripts (`error_kind`): the API's ([`ApiError::kind`]),
    /// `warehouse` (the SQLite file or the writer thread), `protocol` (pages that break the
    /// walk's rules, a detail older than its list item), `busy` (another process holds the
    /// schedule), `clock` (calls stamped past the service's clock further than the walk can
    /// go).
    pub fn kind(&self) -> ErrorKind {
        match self {
            SyncError::Api(err) => err.kind(),
            SyncError::Walk { .. } | SyncError::DetailBehindList { .. } => ErrorKind::Protocol,
            SyncError::Warehouse(WarehouseError::Busy { .. }) => ErrorKind::Busy,
            SyncError::ClockBehindCalls { .. } => ErrorKind::Clock,
            SyncError::Config(_) => ErrorKind::Config,
            SyncError::Warehouse(err) if err.is_configuration() => ErrorKind::Config,
            SyncError::Warehouse(_) | SyncError::WriterStart(_) | SyncError::WriterGone => {
                ErrorKind::Warehouse
            }
        }
    }
}
