//! One process per schedule on a PostgreSQL warehouse: a session-level advisory lock per
//! schedule (`pg_try_advisory_lock`), taken on the process's lock session — one connection
//! shared by every claim of the process, apart from the writer's — and a fencing token that
//! every page checks inside its own transaction.
//!
//! **Invariants.** No page of a process commits after another process claimed its schedule,
//! whatever the network did: each claim bumps the schedule's `schedule_claims.generation`
//! under its lock and keeps the number, and every page's transaction begins with
//! `SELECT generation … FOR SHARE` (`write/group.rs`) and rolls back unless it is still that
//! number ([`WarehouseError::ClaimLost`]). Every query on the lock session is bounded twice
//! ([`LOCK_STATEMENT_TIMEOUT`] on the server, [`LOCK_PATIENCE`] on the client), so a claim, a
//! release, a pass's end and a shutdown never wait on a session the network cut for longer.
//! The argument (why a lock alone is not enough, why one session, why not a lock in the
//! page's transaction): `docs/how-it-stays-correct.md`, "PostgreSQL: claims and fences".

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};
use uuid::Uuid;

use super::session::{RowColumn, connect_session, pg_error, problem, wait_within};
use super::target::PgTarget;
use crate::warehouse::error::WarehouseError;

/// How long the client waits for the lock session to answer a query before it gives the
/// session up (its claims with it). A claim or a release answers in milliseconds; only a
/// connection that went silent reaches it. It bounds what a pass's end and a shutdown wait
/// on a dead lock session.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(5);

/// The server's own bound on a lock-session statement (`statement_timeout`), below
/// [`LOCK_PATIENCE`]: a server that is alive answers with an error first, and the session is
/// kept. Only a fence bump waits for anything: a page transaction of the previous owner that
/// holds the fence row.
const LOCK_STATEMENT_TIMEOUT: Duration = Duration::from_secs(4);

/// What the lock session calls itself (`pg_stat_activity.application_name`).
pub const LOCK_SESSION_NAME: &str = "callsync claims";

/// Takes a schedule's lock without waiting and, when it was free, bumps its fencing token,
/// in one round trip: whether the lock was taken, and the new token. The lock is taken
/// first (the CTE calls a volatile function, so it runs once, before the insert reads it);
/// the bump runs only under it.
const LOCK_AND_BUMP: &str = "WITH lock AS (SELECT pg_try_advisory_lock($1) AS taken),
     bump AS (
       INSERT INTO schedule_claims (schedule_uid, generation, claimed_at)
       SELECT $2, 1, now() FROM lock WHERE lock.taken
       ON CONFLICT (schedule_uid) DO UPDATE
         SET generation = schedule_claims.generation + 1, claimed_at = now()
       RETURNING generation)
     SELECT lock.taken, (SELECT generation FROM bump) FROM lock";

/// [`LOCK_AND_BUMP`] for a group of schedules, each once, as arrays: one round trip and one
/// statement for all (the passes of a tick open together, `sync/bookkeeping.rs`). The locks
/// are tried first, each once (a materialized CTE calling a volatile function); the bumps
/// run only under the locks taken. For each, in order: whether the lock was taken, and the
/// new token.
const LOCK_AND_BUMP_ALL: &str = "WITH asked AS (
       SELECT * FROM unnest($1::int8[], $2::uuid[]) WITH ORDINALITY AS a (key, schedule_uid, n)
     ), lock AS MATERIALIZED (
       SELECT n, schedule_uid, pg_try_advisory_lock(key) AS taken FROM asked
     ), bump AS (
       INSERT INTO schedule_claims (schedule_uid, generation, claimed_at)
       SELECT schedule_uid, 1, now() FROM lock WHERE lock.taken
       ON CONFLICT (schedule_uid) DO UPDATE
         SET generation = schedule_claims.generation + 1, claimed_at = now()
       RETURNING schedule_uid, generation)
     SELECT lock.taken, bump.generation
     FROM lock LEFT JOIN bump ON bump.schedule_uid = lock.schedule_uid
     ORDER BY lock.n";

/// Releases a group of locks of one session: one statement for all.
const RELEASE_ALL: &str = "SELECT pg_advisory_unlock(key) FROM unnest($1::int8[]) AS key";

/// The fences a transaction of pages checks first, of the schedules `$1`: the rows stay
/// locked (`FOR SHARE`) until the pages commit, so a takeover's bump waits for them, and a
/// page after the bump sees it.
pub(super) const READ_FENCES: &str =
    "SELECT schedule_uid, generation FROM schedule_claims WHERE schedule_uid = ANY($1)
     FOR SHARE";

pub(super) struct LockSession {
    /// The warehouse's target, with the lock session's name and `statement_timeout`.
    target: PgTarget,
    inner: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    /// The session new claims are taken on; replaced when it has closed or been given up.
    current: Option<Arc<Session>>,
    /// The schedules this process holds: the session each lock is on, and its token.
    held: HashMap<Uuid, Held>,
    /// The schedules a claim of this process is being taken on (its statement in flight):
    /// a second claim of one of them is refused as if it were held.
    claiming: HashSet<Uuid>,
}

struct Held {
    session: Arc<Session>,
    generation: i64,
    /// A page's fence showed another process claimed the schedule since: every later page
    /// under this claim is refused for that reason, not for the session given up with it.
    taken_over: bool,
}

/// One connection that holds advisory locks.
struct Session {
    client: Client,
    /// Ends the connection's task (and so the socket) when the session is given up.
    task: AbortHandle,
    given_up: AtomicBool,
    /// The claim's and the release's statements, prepared once on this connection: parsed
    /// and planned for each claim, they took the server's CPU at 10,000 schedules.
    prepared: Mutex<HashMap<&'static str, Statement>>,
}

/// Proof that this process holds a schedule's advisory lock; released on drop.
pub struct PgClaim {
    locks: Arc<LockSession>,
    schedule: Uuid,
    session: Arc<Session>,
    /// Let go already, with others ([`LockSession::release_all`]): nothing left for drop.
    released: bool,
}

/// The advisory lock key of a schedule in the warehouse of `schema`: its 128 bits folded into
/// 64, and, for a schema other than `public`, the schema's name folded in too.
///
/// Advisory locks belong to the database, not to a schema: without the name, two warehouses
/// in two schemas of one database syncing the same schedule would take each other's claims —
/// each pass of one skipped while the other walks the schedule into the other warehouse.
/// `public`'s keys are the ones callsync took before `warehouse.schema` existed, so a daemon of
/// either version claims the same schedule of the same warehouse with the same key.
pub(super) fn lock_key(schedule: Uuid, schema: &str) -> i64 {
    let bits = schedule.as_u128();
    let folded = (bits >> 64) as u64 ^ bits as u64;
    let schema_bits = match schema {
        crate::config::DEFAULT_SCHEMA => 0,
        schema => fnv1a(schema.as_bytes()),
    };
    (folded ^ schema_bits) as i64
}

/// FNV-1a, 64 bits: a hash every callsync computes alike, whatever its build (the standard
/// library's hasher is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Session {
    fn open(target: &PgTarget) -> Result<Arc<Session>, WarehouseError> {
        let (client, task) = connect_session(target)?;
        Ok(Arc::new(Session {
            client,
            task,
            given_up: AtomicBool::new(false),
            prepared: Mutex::default(),
        }))
    }

    /// `sql` prepared on this session: once, then kept (as [`Self::ask`] answers).
    fn prepared(
        &self,
        target: &PgTarget,
        step: &'static str,
        sql: &'static str,
    ) -> Result<Result<Statement, tokio_postgres::Error>, WarehouseError> {
        let kept = self.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(statement) = kept.get(sql) {
            return Ok(Ok(statement.clone()));
        }
        drop(kept);
        let prepared = self.ask(target, step, self.client.prepare(sql))?;
        if let Ok(statement) = &prepared {
            self.prepared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(sql, statement.clone());
        }
        Ok(prepared)
    }

    /// `query` over `sql` prepared on this session ([`Self::prepared`]), asked as
    /// [`Self::ask`] asks.
    fn ask_prepared<T, F>(
        &self,
        target: &PgTarget,
        step: &'static str,
        sql: &'static str,
        query: impl FnOnce(Statement) -> F,
    ) -> Result<Result<T, tokio_postgres::Error>, WarehouseError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match self.prepared(target, step, sql)? {
            Ok(statement) => self.ask(target, step, query(statement)),
            Err(err) => Ok(Err(err)),
        }
    }

    fn forget_prepared(&self) {
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Whether its locks may still be held: not given up, and its connection not closed.
    fn alive(&self) -> bool {
        !self.given_up.load(Ordering::SeqCst) && !self.client.is_closed()
    }

    /// Closes the connection (the server frees its locks as soon as it hears of it, if it
    /// has not already) and counts every claim on it as lost.
    fn give_up(&self) {
        self.given_up.store(true, Ordering::SeqCst);
        self.task.abort();
    }

    /// `query`'s answer within [`LOCK_PATIENCE`]; a session that does not answer in time, or
    /// whose connection broke, is given up.
    fn ask<T>(
        &self,
        target: &PgTarget,
        step: &'static str,
        query: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<Result<T, tokio_postgres::Error>, WarehouseError> {
        match wait_within(LOCK_PATIENCE, query) {
            Ok(answer) => {
                if answer.is_err() && self.client.is_closed() {
                    self.give_up();
                }
                Ok(answer)
            }
            Err(_) => {
                self.give_up();
                tracing::warn!(
                    warehouse = target.display(),
                    step,
                    "the lock session did not answer within {} s; it is closed, and its claims count as lost",
                    LOCK_PATIENCE.as_secs()
                );
                Err(WarehouseError::Server {
                    target: target.display().to_owned(),
                    step,
                    cause: format!(
                        "the server did not answer within {} s (the connection may have been cut); the lock connection was closed, and the next claim opens another",
                        LOCK_PATIENCE.as_secs()
                    ),
                })
            }
        }
    }
}

impl LockSession {
    pub(super) fn new(target: PgTarget) -> Self {
        let mut target = target;
        target.config.application_name(LOCK_SESSION_NAME);
        let bound = format!(
            "-c statement_timeout={}",
            LOCK_STATEMENT_TIMEOUT.as_millis()
        );
        let options = match target.config.get_options() {
            Some(given) => format!("{bound} {given}"),
            None => bound,
        };
        target.config.options(options);
        LockSession {
            target,
            inner: Mutex::new(Sessions::default()),
        }
    }

    /// `schedule`'s advisory lock key in this warehouse.
    fn key(&self, schedule: Uuid) -> i64 {
        lock_key(schedule, self.target.schema())
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // A panic while holding it leaves plain data behind, still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session to claim on: the current one, or a new one when it has died.
    fn current(&self, sessions: &mut Sessions) -> Result<Arc<Session>, WarehouseError> {
        if let Some(session) = sessions.current.as_ref().filter(|s| s.alive()) {
            return Ok(session.clone());
        }
        let session = Session::open(&self.target)?;
        sessions.current = Some(session.clone());
        Ok(session)
    }

    /// Takes `schedule`'s lock without waiting; `None` when another session (another process,
    /// or this one) holds it, or when the previous owner's page still holds its fence.
    ///
    /// The round trip is made outside the mutex, so that the claims of many passes ride the
    /// lock session together (pipelined on its connection) instead of one after another:
    /// held under it, they were the idle pass's critical path at 10,000 schedules. The
    /// `claiming` set keeps a second claim of the same schedule in this process out
    /// meanwhile, as `held` does once it is taken (the session's lock is re-entrant, so the
    /// server would grant it twice).
    pub(super) fn claim(
        self: &Arc<Self>,
        schedule: Uuid,
    ) -> Result<Option<PgClaim>, WarehouseError> {
        {
            let mut sessions = self.sessions();
            let held = sessions
                .held
                .get(&schedule)
                .is_some_and(|held| held.session.alive());
            if held || !sessions.claiming.insert(schedule) {
                return Ok(None);
            }
        }
        let taken = self.lock_and_bump(schedule);
        let mut sessions = self.sessions();
        sessions.claiming.remove(&schedule);
        let Some((session, generation)) = taken? else {
            return Ok(None);
        };
        sessions.held.insert(
            schedule,
            Held {
                session: session.clone(),
                generation,
                taken_over: false,
            },
        );
        Ok(Some(PgClaim {
            locks: self.clone(),
            schedule,
            session,
            released: false,
        }))
    }

    /// [`Self::claim`] for each of `schedules`, in one statement ([`LOCK_AND_BUMP_ALL`]) for
    /// those neither held nor being claimed by this process. When that statement fails (the
    /// session died, a previous owner's page held a fence past the server's bound, a plan
    /// changed), the locks it may have taken are let go and each schedule is claimed alone,
    /// with [`Self::claim`]'s own handling of each case.
    pub(super) fn claim_all(
        self: &Arc<Self>,
        schedules: &[Uuid],
    ) -> Vec<Result<Option<PgClaim>, WarehouseError>> {
        let asked: Vec<Uuid> = {
            let mut sessions = self.sessions();
            schedules
                .iter()
                .copied()
                .filter(|schedule| {
                    let held = sessions
                        .held
                        .get(schedule)
                        .is_some_and(|held| held.session.alive());
                    !held && sessions.claiming.insert(*schedule)
                })
                .collect()
        };
        let taken = match asked.len() {
            0 | 1 => None,
            _ => self.lock_and_bump_all(&asked),
        };
        let mut sessions = self.sessions();
        for schedule in &asked {
            sessions.claiming.remove(schedule);
        }
        let Some((session, generations)) = taken else {
            drop(sessions);
            // Alone: a schedule already held or being claimed is refused there, as here.
            return schedules.iter().map(|s| self.claim(*s)).collect();
        };
        let mut taken: HashMap<Uuid, i64> = asked
            .iter()
            .zip(generations)
            .filter_map(|(schedule, generation)| Some((*schedule, generation?)))
            .collect();
        schedules
            .iter()
            .map(|schedule| {
                let Some(generation) = taken.remove(schedule) else {
                    return Ok(None);
                };
                sessions.held.insert(
                    *schedule,
                    Held {
                        session: session.clone(),
                        generation,
                        taken_over: false,
                    },
                );
                Ok(Some(PgClaim {
                    locks: self.clone(),
                    schedule: *schedule,
                    session: session.clone(),
                    released: false,
                }))
            })
            .collect()
    }

    /// [`LOCK_AND_BUMP_ALL`] on the current session: the session, and for each of `asked`
    /// its new token if its lock was taken. `None` when the statement failed, after letting
    /// go of the locks it may have taken.
    fn lock_and_bump_all(&self, asked: &[Uuid]) -> Option<(Arc<Session>, Vec<Option<i64>>)> {
        let step = "claiming schedules";
        let session = self.current(&mut self.sessions()).ok()?;
        let keys: Vec<i64> = asked.iter().map(|s| self.key(*s)).collect();
        let answer = session.ask_prepared(&self.target, step, LOCK_AND_BUMP_ALL, |statement| {
            let client = &session.client;
            let (keys, asked) = (&keys, asked);
            async move { client.query(&statement, &[keys, &asked]).await }
        });
        let rows = match answer {
            Ok(Ok(rows)) if rows.len() == asked.len() => rows,
            failed => {
                tracing::debug!(
                    error = ?failed.map(|answer| answer.map(|rows| rows.len())),
                    schedules = asked.len(),
                    "cannot claim a group of schedules together; claiming each alone"
                );
                for schedule in asked {
                    unlock(&self.target, &session, *schedule);
                }
                return None;
            }
        };
        let mut generations = Vec::with_capacity(rows.len());
        for (row, schedule) in rows.iter().zip(asked) {
            let taken: Result<bool, _> = row.column(0, &self.target, step);
            let generation: Result<Option<i64>, _> = row.column(1, &self.target, step);
            match (taken, generation) {
                (Ok(true), Ok(Some(generation))) => generations.push(Some(generation)),
                (Ok(false), _) => generations.push(None),
                // A lock taken without a token, or an answer that does not read: let go,
                // and the schedule counts as busy until the next tick.
                _ => {
                    unlock(&self.target, &session, *schedule);
                    generations.push(None);
                }
            }
        }
        Some((session, generations))
    }

    /// [`LOCK_AND_BUMP`] on the current session; when that session turns out dead on the
    /// way, once more on a new one. The session the lock was taken on, with the schedule's new
    /// fencing token; `None` when another session holds the lock, or when the server
    /// cancelled the bump (`statement_timeout`): a page transaction of the previous owner
    /// still holds the fence, and the schedule is as good as busy.
    fn lock_and_bump(&self, schedule: Uuid) -> Result<Option<(Arc<Session>, i64)>, WarehouseError> {
        let step = "claiming a schedule";
        let (mut retried, mut replanned) = (false, false);
        loop {
            let session = self.current(&mut self.sessions())?;
            let key = self.key(schedule);
            let asked = session.ask_prepared(&self.target, step, LOCK_AND_BUMP, |statement| {
                let client = &session.client;
                async move { client.query_one(&statement, &[&key, &schedule]).await }
            });
            let answer = match asked {
                Ok(Ok(row)) => row,
                Ok(Err(_)) | Err(_) if !session.alive() && !retried => {
                    retried = true;
                    continue;
                }
                Ok(Err(err)) => {
                    // The lock may have been taken before the bump failed: a session-level
                    // lock outlives its statement's error.
                    unlock(&self.target, &session, schedule);
                    if err.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) && !replanned {
                        // A plan prepared before `schedule_claims` changed under it: nothing
                        // was done; prepared anew, asked once more (`PgWarehouse::replanning`).
                        session.forget_prepared();
                        replanned = true;
                        continue;
                    }
                    if err.code() == Some(&SqlState::QUERY_CANCELED) {
                        tracing::info!(
                            %schedule,
                            "the schedule's previous walker is still committing a page; leaving it for now"
                        );
                        return Ok(None);
                    }
                    return Err(pg_error(&self.target, step, &err));
                }
                Err(err) => return Err(err),
            };
            let taken: bool = answer.column(0, &self.target, step)?;
            let generation: Option<i64> = answer.column(1, &self.target, step)?;
            return match (taken, generation) {
                (true, Some(generation)) => Ok(Some((session, generation))),
                (false, _) => Ok(None),
                (true, None) => {
                    unlock(&self.target, &session, schedule);
                    Err(WarehouseError::Server {
                        target: self.target.display().to_owned(),
                        step,
                        cause: "the server took the lock but bumped no fencing token (is schedule_claims as migrations-postgres/0004 made it?)".into(),
                    })
                }
            };
        }
    }

    /// The fencing token of this process's claim on `schedule`, for a page's transaction to
    /// check; an error when this process holds no claim on it, or lost it with its session.
    pub(super) fn fence(&self, schedule: Uuid) -> Result<i64, WarehouseError> {
        match self.sessions().held.get(&schedule) {
            Some(held) if held.session.alive() => Ok(held.generation),
            Some(held) => Err(WarehouseError::ClaimLost {
                schedule,
                target: self.target.display().to_owned(),
                taken: held.taken_over,
            }),
            None => Err(WarehouseError::Server {
                target: self.target.display().to_owned(),
                step: "checking the schedule's claim",
                cause: format!(
                    "this process holds no claim on schedule {schedule}; a page is written only under its schedule's claim"
                ),
            }),
        }
    }

    /// Another process claimed `schedule` (its fence moved on): this process's lock is gone,
    /// so its session has lost it, and every lock on that session with it. The session is
    /// given up; the next claim opens another. The claim remembers why, so that a page under
    /// it written later (one of a refused group's, written alone) says the same.
    pub(super) fn taken_over(&self, schedule: Uuid) -> WarehouseError {
        if let Some(held) = self.sessions().held.get_mut(&schedule) {
            held.taken_over = true;
            held.session.give_up();
        }
        WarehouseError::ClaimLost {
            schedule,
            target: self.target.display().to_owned(),
            taken: true,
        }
    }
}

/// Releases `schedule`'s lock on `session`, within [`LOCK_PATIENCE`]; a session known dead
/// is not asked (its locks went with it).
fn unlock(target: &PgTarget, session: &Session, schedule: Uuid) {
    if !session.alive() {
        return;
    }
    let step = "releasing a schedule's lock";
    let key = lock_key(schedule, target.schema());
    let released =
        session.ask_prepared(target, step, "SELECT pg_advisory_unlock($1)", |statement| {
            let client = &session.client;
            async move { client.execute(&statement, &[&key]).await }
        });
    let error = match released {
        Ok(Ok(_)) => return,
        Ok(Err(err)) => problem(&err),
        Err(err) => err.to_string(),
    };
    tracing::warn!(
        %schedule,
        %error,
        "cannot release a schedule's lock; it goes with the connection"
    );
}

impl PgClaim {
    /// Forgets the claim in this process's set of held schedules (unless a newer claim of the
    /// schedule, on another session, took its place).
    fn forget(&self) {
        let mut sessions = self.locks.sessions();
        if sessions
            .held
            .get(&self.schedule)
            .is_some_and(|held| Arc::ptr_eq(&held.session, &self.session))
        {
            sessions.held.remove(&self.schedule);
        }
    }
}

impl Drop for PgClaim {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.forget();
        // Synchronous, so that a claim right after this drop finds the lock free; out of the
        // mutex, as a claim of this schedule meanwhile on the same session only counts the
        // re-entrant lock up before this takes it down.
        unlock(&self.locks.target, &self.session, self.schedule);
    }
}

/// Lets a group of claims go: for each session they are on, one statement unlocks them all
/// ([`RELEASE_ALL`]); when that fails, each alone.
pub(super) fn release_all(mut claims: Vec<PgClaim>) {
    while let Some(first) = claims.first() {
        let session = first.session.clone();
        let (same, others): (Vec<PgClaim>, Vec<PgClaim>) = claims
            .into_iter()
            .partition(|claim| Arc::ptr_eq(&claim.session, &session));
        claims = others;
        release_on(&session, same);
    }
}

/// [`release_all`] of claims all on `session`. Each is forgotten first, then its lock
/// released, as drop does: a claim of the schedule in between only counts the re-entrant lock
/// up before this takes it down.
fn release_on(session: &Session, mut claims: Vec<PgClaim>) {
    let Some(first) = claims.first() else { return };
    if claims.len() == 1 || !session.alive() {
        // Dropped: one statement for one, and none for a dead session (its locks went with it).
        return;
    }
    let target = first.locks.target.clone();
    for claim in &mut claims {
        claim.forget();
        claim.released = true;
    }
    let keys: Vec<i64> = claims
        .iter()
        .map(|claim| lock_key(claim.schedule, target.schema()))
        .collect();
    let step = "releasing schedules' locks";
    let released = session.ask_prepared(&target, step, RELEASE_ALL, |statement| {
        let client = &session.client;
        let keys = &keys;
        async move { client.execute(&statement, &[keys]).await }
    });
    if let Ok(Ok(_)) = released {
        return;
    }
    tracing::debug!(
        error = ?released.map(|answer| answer.map_err(|e| problem(&e))),
        "cannot release a group of schedules' locks together; releasing each alone"
    );
    for claim in &claims {
        unlock(&target, session, claim.schedule);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_for_different_schedules() {
        let a = Uuid::parse_str("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11").unwrap();
        let b = Uuid::parse_str("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b12").unwrap();
        assert_ne!(lock_key(a, "public"), lock_key(b, "public"));
        assert_eq!(lock_key(a, "public"), lock_key(a, "public"));
    }

    /// `public` keeps the keys of callsync before `warehouse.schema` (a daemon of each
    /// version contends for one warehouse's schedule); another schema has keys of its own,
    /// the same in every process.
    #[test]
    fn keys_of_another_schema_differ_and_public_keeps_the_old_ones() {
        let a = Uuid::parse_str("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11").unwrap();
        let before = {
            let bits = a.as_u128();
            ((bits >> 64) as u64 ^ bits as u64) as i64
        };
        assert_eq!(lock_key(a, "public"), before);
        assert_ne!(lock_key(a, "analytics"), before);
        assert_ne!(lock_key(a, "analytics"), lock_key(a, "sales"));
        assert_eq!(lock_key(a, "analytics"), lock_key(a, "analytics"));
        // FNV-1a's published value for "a": the hash is the same in every build.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_lock_session_names_itself_and_bounds_its_statements() {
        let target = PgTarget::parse(
            "postgresql://u@/db?host=/run/postgresql&options=-cx%3D1",
            None,
        )
        .unwrap();
        let locks = LockSession::new(target);
        assert_eq!(
            locks.target.config.get_application_name(),
            Some(LOCK_SESSION_NAME)
        );
        assert_eq!(
            locks.target.config.get_options(),
            Some("-c statement_timeout=4000 -cx=1")
        );
        assert!(LOCK_STATEMENT_TIMEOUT < LOCK_PATIENCE);
    }
}
