//! Schema 6's migration: the version 5 rows copied into the insertion-ordered tables.
//!
//! `migrations/0006-insertion-ordered/up.sql` renames the version 5 tables `*_v5` and
//! creates the new ones; [`copy_rows`] (the migration's hook, in the same transaction) copies
//! the rows a range of calls at a time, in insertion order, showing how far it got, then runs
//! `after-copy.sql` (drops the `*_v5` tables, creates the indexes and views). All in the one
//! transaction of the migration: a kill at any instant leaves the version 5 file, and the
//! next run starts again.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use rusqlite::Transaction;
use rusqlite_migration::{HookError, HookResult};

/// The SQL run before the copy (the migration's own SQL).
pub(super) const UP: &str = include_str!("../../migrations/0006-insertion-ordered/up.sql");

/// The SQL run after the copy.
const AFTER_COPY: &str = include_str!("../../migrations/0006-insertion-ordered/after-copy.sql");

/// Version 5 rowids of calls copied per statement: small enough to report progress often,
/// large enough that a statement's planning is nothing beside its rows.
const CALLS_PER_CHUNK: i64 = 20_000;

/// How often a log line says how far the copy got when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// One table's copy: its version 5 name, and the statement copying the rows of the calls
/// whose version 5 rowid is in `[?1, ?2)`, in the order of the new table's key.
struct TableCopy {
    old: &'static str,
    copy: &'static str,
}

/// Every table, parents first. A call keeps its version 5 rowid as its id, an attempt too:
/// both are the order in which they were inserted, and children find them without a lookup.
const TABLES: [TableCopy; 6] = [
    TableCopy {
        old: "calls_v5",
        copy: "INSERT INTO calls (id, uid, schedule_uid, external_id, status, progress,
                 is_test_call, cooldown_until, delay, priority, attempts_remaining,
                 retry_intervals, created_at, updated_at, phone_number, phone_e164, full_name,
                 first_name, last_name, phonetic_full_name, phonetic_first_name,
                 phonetic_last_name, email, event_date_time, extra, attempt_count,
                 last_attempt_uid, last_attempt_status, last_attempt_started_at,
                 last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
                 outcome_names, answered, transferred, notification_count, content_hash,
                 synced_at)
               SELECT rowid, uid, schedule_uid, external_id, status, progress,
                 is_test_call, cooldown_until, delay, priority, attempts_remaining,
                 retry_intervals, created_at, updated_at, phone_number, phone_e164, full_name,
                 first_name, last_name, phonetic_full_name, phonetic_first_name,
                 phonetic_last_name, email, event_date_time, extra, attempt_count,
                 last_attempt_uid, last_attempt_status, last_attempt_started_at,
                 last_attempt_answered_at, last_attempt_ended_at, last_attempt_duration,
                 outcome_names, answered, transferred, notification_count, content_hash,
                 synced_at
               FROM calls_v5 WHERE rowid >= ?1 AND rowid < ?2 ORDER BY rowid",
    },
    TableCopy {
        old: "call_custom_parameters_v5",
        copy: "INSERT INTO call_custom_parameters (call_id, call_uid, name, value)
               SELECT c.rowid, p.call_uid, p.name, p.value
               FROM calls_v5 AS c JOIN call_custom_parameters_v5 AS p ON p.call_uid = c.uid
               WHERE c.rowid >= ?1 AND c.rowid < ?2 ORDER BY c.rowid, p.name",
    },
    TableCopy {
        old: "call_attempts_v5",
        copy: "INSERT INTO call_attempts (id, call_id, uid, call_uid, position, status,
                 started_at, answered_at, ended_at, duration, created_at, updated_at,
                 error_details, transfer_started_at, transfer_answered_at,
                 transfer_destination, extra)
               SELECT a.rowid, c.rowid, a.uid, a.call_uid, a.position, a.status,
                 a.started_at, a.answered_at, a.ended_at, a.duration, a.created_at,
                 a.updated_at, a.error_details, a.transfer_started_at, a.transfer_answered_at,
                 a.transfer_destination, a.extra
               FROM calls_v5 AS c JOIN call_attempts_v5 AS a ON a.call_uid = c.uid
               WHERE c.rowid >= ?1 AND c.rowid < ?2 ORDER BY a.rowid",
    },
    TableCopy {
        old: "attempt_outcomes_v5",
        copy: "INSERT INTO attempt_outcomes (call_id, attempt_id, uid, attempt_uid, call_uid,
                 name, created_at, extra)
               SELECT c.rowid, a.rowid, o.uid, o.attempt_uid, o.call_uid, o.name,
                 o.created_at, o.extra
               FROM calls_v5 AS c JOIN attempt_outcomes_v5 AS o ON o.call_uid = c.uid
               JOIN call_attempts_v5 AS a ON a.uid = o.attempt_uid
               WHERE c.rowid >= ?1 AND c.rowid < ?2 ORDER BY c.rowid, a.rowid, o.uid",
    },
    TableCopy {
        old: "attempt_variables_v5",
        copy: "INSERT INTO attempt_variables (call_id, attempt_id, uid, attempt_uid, call_uid,
                 name, value, status, created_at, extra)
               SELECT c.rowid, a.rowid, v.uid, v.attempt_uid, v.call_uid, v.name, v.value,
                 v.status, v.created_at, v.extra
               FROM calls_v5 AS c JOIN attempt_variables_v5 AS v ON v.call_uid = c.uid
               JOIN call_attempts_v5 AS a ON a.uid = v.attempt_uid
               WHERE c.rowid >= ?1 AND c.rowid < ?2 ORDER BY c.rowid, a.rowid, v.uid",
    },
    TableCopy {
        old: "call_notifications_v5",
        copy: "INSERT INTO call_notifications (call_id, uid, call_uid, status, message_count,
                 delivered_at, extra)
               SELECT c.rowid, n.uid, n.call_uid, n.status, n.message_count, n.delivered_at,
                 n.extra
               FROM calls_v5 AS c JOIN call_notifications_v5 AS n ON n.call_uid = c.uid
               WHERE c.rowid >= ?1 AND c.rowid < ?2 ORDER BY c.rowid, n.uid",
    },
];

/// The migration's hook: copies every row, checks that none was left behind, and finishes
/// the schema.
pub(super) fn copy_rows(tx: &Transaction<'_>) -> HookResult {
    // The copy probes the version 5 indexes call by call: with the writer's 16 MiB cache
    // most probes of a large warehouse would be a read. The cache is given back below.
    let cache: i64 = tx.pragma_query_value(None, "cache_size", |r| r.get(0))?;
    tx.pragma_update(None, "cache_size", -256 * 1024)?;
    let result = copy_all(tx);
    tx.pragma_update(None, "cache_size", cache)?;
    result?;
    tx.execute_batch(AFTER_COPY)?;
    Ok(())
}

fn copy_all(tx: &Transaction<'_>) -> HookResult {
    let (calls, last_rowid): (i64, i64) = tx.query_row(
        "SELECT count(*), coalesce(max(rowid), 0) FROM calls_v5",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut progress = Progress::start(u64::try_from(calls).unwrap_or(0));
    let mut copied = [0u64; TABLES.len()];
    let mut statements = TABLES
        .iter()
        .map(|t| tx.prepare(t.copy))
        .collect::<Result<Vec<_>, _>>()?;
    let mut from = 1;
    while from <= last_rowid {
        let to = from.saturating_add(CALLS_PER_CHUNK);
        for (stmt, n) in statements.iter_mut().zip(&mut copied) {
            *n += stmt.execute([from, to])? as u64;
        }
        from = to;
        progress.copied(copied[0]);
    }
    progress.finish();
    for (table, n) in TABLES.iter().zip(copied) {
        let before: i64 =
            tx.query_row(&format!("SELECT count(*) FROM {}", table.old), [], |r| {
                r.get(0)
            })?;
        if u64::try_from(before).ok() != Some(n) {
            return Err(HookError::Hook(format!(
                "{} of the {before} rows of {} copied (rows without their call or attempt?); \
                 the warehouse is left at schema 5: restore a backup or report this",
                n,
                table.old.trim_end_matches("_v5")
            )));
        }
    }
    Ok(())
}

/// How far the copy got: a bar on a terminal, a log line every 10 s otherwise.
struct Progress {
    total: u64,
    started: Instant,
    logged: Instant,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn start(total: u64) -> Progress {
        tracing::info!(
            calls = total,
            "migrating the warehouse to schema 6 (insertion-ordered): copying every call, in one transaction"
        );
        let bar = (total > 0 && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let style = indicatif::ProgressStyle::with_template(
                "migrating to schema 6 [{elapsed_precise}] {bar:40} {pos}/{len} calls ({per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        let now = Instant::now();
        Progress {
            total,
            started: now,
            logged: now,
            bar,
        }
    }

    fn copied(&mut self, calls: u64) {
        // One event per chunk, for whoever needs to act at a given point of the copy (the
        // crash test kills the process there).
        tracing::debug!(
            calls,
            total = self.total,
            "migration: a range of calls copied"
        );
        if let Some(bar) = &self.bar {
            bar.set_position(calls);
        } else if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            tracing::info!(
                calls,
                total = self.total,
                elapsed_secs = self.started.elapsed().as_secs(),
                "migrating the warehouse to schema 6: calls copied"
            );
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
        tracing::info!(
            calls = self.total,
            elapsed_secs = self.started.elapsed().as_secs_f64(),
            "migration to schema 6: rows copied; dropping the version 5 tables and indexing"
        );
    }
}
