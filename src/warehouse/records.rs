//! The records every destination keeps alike: checkpoints, how a pass is named
//! (`RunKind`), who walked it (`ProcessIdentity`), what it did (`RunStats`, `RunRecord`), how it
//! ended (`RunOutcome`), and a kind's name read back from the warehouse (`Stored`).

use serde::Serialize;
use uuid::Uuid;

use crate::service::Timestamp;

/// The `sync_runs.error` of a pass stopped by shutdown: not a failure, the next pass resumes
/// from its last committed page.
pub const INTERRUPTED: &str = "interrupted by shutdown";

/// The `sync_runs.error` of a pass whose process ended in the middle of it (killed, crashed,
/// its machine lost), written by the next callsync that opened the warehouse for writing
/// once nothing held the schedule any more (`interrupted.rs`). Its outcome is `interrupted`,
/// its `finished_at` its `started_at` (when it ended is not known). Not a pass that walked:
/// [`crate::warehouse::Destination::open_pass`] passes over it.
pub const PROCESS_ENDED: &str = "interrupted: its process ended mid-pass (killed or crashed); the next pass resumed from the last committed page";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub schedule_uid: Uuid,
    /// The next incremental pass reads calls updated at or after this (minus the lookback).
    pub cursor: Timestamp,
    /// When the cursor was last written.
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    Incremental,
    Backfill,
    Reconcile,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Incremental => "incremental",
            RunKind::Backfill => "backfill",
            RunKind::Reconcile => "reconcile",
        }
    }
}

impl StoredName for RunKind {
    const ALL: &'static [Self] = &[RunKind::Incremental, RunKind::Backfill, RunKind::Reconcile];

    fn as_str(self) -> &'static str {
        RunKind::as_str(self)
    }
}

impl StoredName for RunOutcome {
    const ALL: &'static [Self] = &RunOutcome::ALL;

    fn as_str(self) -> &'static str {
        RunOutcome::as_str(self)
    }
}

impl StoredName for crate::ErrorKind {
    const ALL: &'static [Self] = &crate::ErrorKind::ALL;

    fn as_str(self) -> &'static str {
        crate::ErrorKind::as_str(self)
    }
}

/// One of callsync's kinds that the warehouse stores by name (`sync_runs.kind`,
/// `error_kind`): every value, and the name each is stored as.
pub trait StoredName: Copy + PartialEq + 'static {
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;

    /// The value stored as `name`, if this callsync knows it.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

/// A kind's name as the warehouse holds it: one this callsync knows, or another — stored by a
/// newer callsync that shares the warehouse, or by hand — kept as stored, made safe to show,
/// so that `status` reads a warehouse whatever wrote it. It serializes as the stored name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored<T> {
    Known(T),
    Unknown(String),
}

/// The most characters of a stored kind's name shown: callsync's own are a word.
const KIND_CHARS: usize = 64;

impl<T: StoredName> Stored<T> {
    /// What the warehouse holds as `name`.
    pub(crate) fn read(name: &str) -> Stored<T> {
        match T::parse(name) {
            Some(known) => Stored::Known(known),
            None => Stored::Unknown(crate::untrusted::untrusted_text(name, KIND_CHARS)),
        }
    }

    /// The kind, when this callsync knows it.
    pub fn known(&self) -> Option<T> {
        match self {
            Stored::Known(kind) => Some(*kind),
            Stored::Unknown(_) => None,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Stored::Known(kind) => kind.as_str(),
            Stored::Unknown(name) => name,
        }
    }
}

impl<T: StoredName> std::fmt::Display for Stored<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<T: StoredName> Serialize for Stored<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Who walked a pass: the machine, the daemon's instance name and its process. Several
/// daemons may share a warehouse's schedules; `sync_runs` and `status` say which walked what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessIdentity {
    pub host: String,
    /// `[daemon] instance`; the host name by default.
    pub instance: String,
    pub pid: u32,
}

impl ProcessIdentity {
    /// This process, named `instance` (the host name when `None`).
    pub fn this_process(instance: Option<&str>) -> Self {
        let host = host_name();
        ProcessIdentity {
            instance: instance.map_or_else(|| host.clone(), str::to_owned),
            host,
            pid: std::process::id(),
        }
    }
}

impl std::fmt::Display for ProcessIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.instance == self.host {
            write!(f, "{} pid {}", self.host, self.pid)
        } else {
            write!(f, "{} on {} pid {}", self.instance, self.host, self.pid)
        }
    }
}

/// The machine's host name (uname's node name), `localhost` if it is empty or not UTF-8.
pub(crate) fn host_name() -> String {
    match rustix::system::uname().nodename().to_str() {
        Ok(name) if !name.is_empty() => name.to_owned(),
        _ => "localhost".to_owned(),
    }
}

/// The most characters of a stored host or instance name shown.
pub(crate) const WALKER_CHARS: usize = 255;

/// The row id of a `sync_runs` row (a number in `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct RunId(pub(crate) i64);

impl RunId {
    /// `sync_runs.id`: what a log line or a script names the row by.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    pub pages: u64,
    pub calls_seen: u64,
    pub calls_written: u64,
    pub requests: u64,
    pub retries: u64,
    /// `GET /outbound_calls/{uid}` requests (list items completed by their detail).
    pub detail_requests: u64,
    /// 429 responses.
    pub rate_limited: u64,
    /// Milliseconds spent waiting for the shared request rate limiter.
    pub throttled_ms: u64,
    /// Calls stamped later than the service's own clock (a node whose clock runs ahead).
    pub future_rows: u64,
}

impl RunStats {
    /// What held a pass back, most telling first; empty when nothing stands out. One rule
    /// for the pass line and for `callsync status`.
    pub fn slowed_by(&self, duration_ms: u64) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        // A fifth of the pass spent waiting for permits is the limiter's doing, not the
        // service's latency.
        if self.rate_limited > 0 || self.throttled_ms.saturating_mul(5) >= duration_ms.max(1) {
            reasons.push("rate limit");
        }
        if self.detail_requests > 0 && self.detail_requests >= self.pages {
            reasons.push("detail fetches");
        }
        if self.retries > 0 {
            reasons.push("errors and retries");
        }
        reasons
    }
}

/// How a pass ended, as `sync_runs.outcome` stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    /// Read everything that had changed when it began.
    Completed,
    /// Read what had changed when it began, but ended further behind the service's clock
    /// than `sync.behind_after`, with changes already waiting: calls change faster than
    /// callsync may read them.
    Behind,
    /// Stopped by shutdown after committing its pages; the next pass resumes.
    Interrupted,
    Failed,
}

impl RunOutcome {
    /// Every outcome a finished pass is stored with.
    pub const ALL: [RunOutcome; 4] = [
        RunOutcome::Completed,
        RunOutcome::Behind,
        RunOutcome::Interrupted,
        RunOutcome::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Behind => "behind",
            RunOutcome::Interrupted => "interrupted",
            RunOutcome::Failed => "failed",
        }
    }

    /// How a `sync_runs` row read back ended: `None` while it has not (no `finished_at`:
    /// running, or its process died). A finished pass without an outcome this callsync knows
    /// (written by a newer one?) reads as failed rather than as running for ever.
    pub(crate) fn of_stored_run(finished: bool, outcome: Option<&str>) -> Option<Self> {
        finished.then(|| {
            outcome
                .and_then(<Self as StoredName>::parse)
                .unwrap_or(RunOutcome::Failed)
        })
    }
}

/// Everything `sync_runs` keeps of a finished pass.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub outcome: RunOutcome,
    pub stats: RunStats,
    pub finished_at: Timestamp,
    /// The service's clock when the pass began; it read what had changed by then.
    pub horizon: Option<Timestamp>,
    /// The service's clock at the end minus the checkpoint (negative: ahead of it).
    pub lag_secs: Option<f64>,
    /// Why it failed (or that it was interrupted); `None` otherwise.
    pub error: Option<String>,
    /// What kind of failure stopped it; `None` unless it failed.
    pub error_kind: Option<crate::ErrorKind>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of pass is in `ALL` once, and reads back as itself: a kind added to the
    /// enum and not to `ALL` stops this match compiling (stored, it would read as unknown).
    #[test]
    fn every_run_kind_reads_back_as_itself() {
        for (position, kind) in RunKind::ALL.iter().copied().enumerate() {
            let listed_at = match kind {
                RunKind::Incremental => 0,
                RunKind::Backfill => 1,
                RunKind::Reconcile => 2,
            };
            assert_eq!(listed_at, position, "{}", kind.as_str());
            assert_eq!(Stored::read(kind.as_str()), Stored::Known(kind));
        }
        assert_eq!(RunKind::ALL.len(), 3);
        assert_eq!(
            Stored::<RunKind>::read("resync"),
            Stored::Unknown("resync".into())
        );
    }
}
