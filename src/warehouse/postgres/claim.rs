//! One process per schedule on a PostgreSQL warehouse: a session-level advisory lock per
//! schedule (`pg_try_advisory_lock`), taken on the process's lock session — one connection
//! shared by every claim of the process, apart from the writer's. The server releases a
//! session's locks when its connection ends, so a process killed with SIGKILL, or a machine
//! lost, frees its schedules as soon as the server notices the connection gone.
//!
//! One session for all claims, not one connection per claim: a daemon with 10,000 schedules
//! walking dozens at once would otherwise hold dozens of connections, and N daemons would
//! exhaust `max_connections` (100 by default). A session lock is re-entrant within its
//! session, so the set of schedules held tells a second claim in this process apart. A claim
//! whose session has died has lost its lock: [`LockSession::still_held`] says so before each
//! page is written, and the next claim opens a new session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_postgres::Client;
use uuid::Uuid;

use super::session::{PgContext, RowColumn, connect, problem, wait};
use super::target::PgTarget;
use crate::warehouse::error::WarehouseError;

pub(super) struct LockSession {
    target: PgTarget,
    inner: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    /// The session new claims are taken on; replaced when it has closed.
    current: Option<Arc<Client>>,
    /// The schedules this process holds, and the session each lock is on.
    held: HashMap<Uuid, Arc<Client>>,
}

/// Proof that this process holds a schedule's advisory lock; released on drop.
pub struct PgClaim {
    locks: Arc<LockSession>,
    schedule: Uuid,
    session: Arc<Client>,
}

/// The advisory lock key of a schedule: its 128 bits folded into 64.
pub(super) fn lock_key(schedule: Uuid) -> i64 {
    let bits = schedule.as_u128();
    ((bits >> 64) as u64 ^ bits as u64) as i64
}

impl LockSession {
    pub(super) fn new(target: PgTarget) -> Self {
        LockSession {
            target,
            inner: Mutex::new(Sessions::default()),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // A panic while holding it leaves plain data behind, still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True unless this process claimed `schedule` on a session that has since died.
    pub(super) fn still_held(&self, schedule: Uuid) -> bool {
        self.sessions()
            .held
            .get(&schedule)
            .is_none_or(|session| !session.is_closed())
    }
}

impl LockSession {
    /// Takes `schedule`'s lock without waiting; `None` when another session (another process,
    /// or this one) holds it.
    pub(super) fn claim(
        self: &Arc<Self>,
        schedule: Uuid,
    ) -> Result<Option<PgClaim>, WarehouseError> {
        let locks = self;
        let mut sessions = locks.sessions();
        if sessions
            .held
            .get(&schedule)
            .is_some_and(|session| !session.is_closed())
        {
            return Ok(None);
        }
        let session = match &sessions.current {
            Some(session) if !session.is_closed() => session.clone(),
            _ => {
                let session = Arc::new(connect(&locks.target)?);
                sessions.current = Some(session.clone());
                session
            }
        };
        let taken: bool =
            wait(session.query_one("SELECT pg_try_advisory_lock($1)", &[&lock_key(schedule)]))
                .pg(&locks.target, "claiming a schedule")?
                .column(0, &locks.target, "claiming a schedule")?;
        if !taken {
            return Ok(None);
        }
        sessions.held.insert(schedule, session.clone());
        Ok(Some(PgClaim {
            locks: locks.clone(),
            schedule,
            session,
        }))
    }

    /// Fails when this process's claim on `schedule` was lost with its session.
    pub(super) fn check(&self, schedule: Uuid) -> Result<(), WarehouseError> {
        if self.still_held(schedule) {
            return Ok(());
        }
        Err(WarehouseError::Postgres {
            target: self.target.display().to_owned(),
            step: "checking the schedule's claim",
            cause: format!(
                "the connection holding schedule {schedule}'s lock closed, so another callsync may walk it now; this pass stops, the next one claims it again"
            ),
        })
    }
}

impl Drop for PgClaim {
    fn drop(&mut self) {
        let mut sessions = self.locks.sessions();
        if sessions
            .held
            .get(&self.schedule)
            .is_some_and(|s| Arc::ptr_eq(s, &self.session))
        {
            sessions.held.remove(&self.schedule);
        }
        if self.session.is_closed() {
            return;
        }
        // Synchronous, so that a claim right after this drop finds the lock free.
        if let Err(err) = wait(
            self.session
                .execute("SELECT pg_advisory_unlock($1)", &[&lock_key(self.schedule)]),
        ) {
            tracing::warn!(
                schedule = %self.schedule,
                error = %problem(&err),
                "cannot release a schedule's lock; it goes with the connection"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_for_different_schedules() {
        let a = Uuid::parse_str("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11").unwrap();
        let b = Uuid::parse_str("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b12").unwrap();
        assert_ne!(lock_key(a), lock_key(b));
        assert_eq!(lock_key(a), lock_key(a));
    }
}
