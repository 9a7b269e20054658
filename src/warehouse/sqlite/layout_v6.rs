//! Schema 6's migration: the version 5 rows copied into the insertion-ordered tables.
//!
//! `migrations/0006-insertion-ordered/up.sql` renames the version 5 tables `*_v5` and
//! creates the new ones; [`copy_rows`] (the migration's hook, in the same transaction) copies
//! each table with one statement, in the order of its new key, showing how far it got, then
//! runs `after-copy.sql` (drops the `*_v5` tables, creates the indexes and views). All in the one
//! transaction of the migration: a kill at any instant leaves the version 5 file, and the
//! next run starts again. The four WITHOUT ROWID child tables are created in schema 9's form
//! (`keys_first`) before the copy, so schema 9 does not copy them again.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Transaction;
use rusqlite_migration::{HookError, HookResult};

use super::keys_first::ChildTables;

/// The SQL run before the copy (the migration's own SQL).
pub(super) const UP: &str = include_str!("../../../migrations/0006-insertion-ordered/up.sql");

/// The SQL run after the copy.
const AFTER_COPY: &str = include_str!("../../../migrations/0006-insertion-ordered/after-copy.sql");

/// How often a log line says how far the migration got when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Schema 7's rewrite of a version 5 time value (`migrations/0007-utc-instants`, the same
/// expression): `YYYY-MM-DD HH:MM:SS[.f…]` becomes RFC 3339 UTC with six fraction digits and a
/// `Z`; anything else (NULL, a value in the new form) stays as it is. The copy writes the
/// schema 7 forms at once (and `phonetic_*` values of `''` as NULL, as schema 7 does), so
/// schema 7's rewrite, in the same transaction, finds every row already as it would make it
/// and writes nothing: one rewrite of a million calls instead of two.
macro_rules! instant {
    ($column:literal) => {
        concat!(
            "CASE WHEN ",
            $column,
            " LIKE '____-__-__ __:__:__%' THEN substr(",
            $column,
            ", 1, 10) || 'T' || substr(",
            $column,
            ", 12, 8) || '.' || substr(substr(",
            $column,
            ", 21) || '000000', 1, 6) || 'Z' ELSE ",
            $column,
            " END"
        )
    };
}

/// One table's copy: its version 5 name, and the statement copying every row.
///
/// Each statement scans its version 5 table once, in storage order (`CROSS JOIN` keeps it the
/// outer loop: SQLite would otherwise drive it from `calls_v5` and probe the child's
/// `call_uid` index call by call, a random page read per probe once the index outgrows the
/// cache), finds the ids of the row's call and attempt in the uid indexes, and inserts in the
/// order of the new table's key (sorted by SQLite's sorter where the scan order is not
/// already that order), so the new B-trees are appended to, never split at random.
struct TableCopy {
    old: &'static str,
    copy: &'static str,
}

/// Every table, parents first. A call keeps its version 5 rowid as its id, an attempt too:
/// both are the order in which they were inserted.
const TABLES: [TableCopy; 6] = [
    TableCopy {
        old: "calls_v5",
        copy: concat!(
            "INSERT INTO calls (id, uid, schedule_uid, external_id, status, progress, ",
            "is_test_call, cooldown_until, delay, priority, attempts_remaining, retry_intervals, ",
            "created_at, updated_at, phone_number, phone_e164, full_name, first_name, last_name, ",
            "phonetic_full_name, phonetic_first_name, phonetic_last_name, email, ",
            "event_date_time, extra, attempt_count, last_attempt_uid, last_attempt_status, ",
            "last_attempt_started_at, last_attempt_answered_at, last_attempt_ended_at, ",
            "last_attempt_duration, outcome_names, answered, transferred, notification_count, ",
            "content_hash, synced_at) SELECT ",
            "rowid, uid, schedule_uid, external_id, status, progress, is_test_call, ",
            instant!("cooldown_until"),
            ", delay, priority, attempts_remaining, retry_intervals, ",
            instant!("created_at"),
            ", ",
            instant!("updated_at"),
            ", phone_number, phone_e164, full_name, first_name, last_name, ",
            "NULLIF(phonetic_full_name, ''), NULLIF(phonetic_first_name, ''), ",
            "NULLIF(phonetic_last_name, ''), email, ",
            instant!("event_date_time"),
            ", extra, attempt_count, last_attempt_uid, last_attempt_status, ",
            instant!("last_attempt_started_at"),
            ", ",
            instant!("last_attempt_answered_at"),
            ", ",
            instant!("last_attempt_ended_at"),
            ", last_attempt_duration, outcome_names, answered, transferred, notification_count, ",
            "content_hash, ",
            instant!("synced_at"),
            " FROM calls_v5 ORDER BY rowid"
        ),
    },
    TableCopy {
        old: "call_custom_parameters_v5",
        copy: concat!(
            "INSERT INTO call_custom_parameters (call_id, call_uid, name, value) SELECT c.rowid, ",
            "p.call_uid, p.name, p.value FROM call_custom_parameters_v5 AS p CROSS JOIN calls_v5 ",
            "AS c ON c.uid = p.call_uid ORDER BY c.rowid, p.name"
        ),
    },
    TableCopy {
        old: "call_attempts_v5",
        copy: concat!(
            "INSERT INTO call_attempts (id, call_id, uid, call_uid, position, status, ",
            "started_at, answered_at, ended_at, duration, created_at, updated_at, error_details, ",
            "transfer_started_at, transfer_answered_at, transfer_destination, extra) SELECT ",
            "a.rowid, c.rowid, a.uid, a.call_uid, a.position, a.status, ",
            instant!("a.started_at"),
            ", ",
            instant!("a.answered_at"),
            ", ",
            instant!("a.ended_at"),
            ", a.duration, ",
            instant!("a.created_at"),
            ", ",
            instant!("a.updated_at"),
            ", a.error_details, ",
            instant!("a.transfer_started_at"),
            ", ",
            instant!("a.transfer_answered_at"),
            ", a.transfer_destination, a.extra",
            " FROM call_attempts_v5 AS a CROSS JOIN calls_v5 AS c ON c.uid = a.call_uid ORDER BY ",
            "a.rowid"
        ),
    },
    TableCopy {
        old: "attempt_outcomes_v5",
        copy: concat!(
            "INSERT INTO attempt_outcomes (call_id, attempt_id, uid, attempt_uid, call_uid, ",
            "name, created_at, extra) SELECT ",
            "c.rowid, a.rowid, o.uid, o.attempt_uid, o.call_uid, o.name, ",
            instant!("o.created_at"),
            ", o.extra",
            " FROM attempt_outcomes_v5 AS o CROSS JOIN call_attempts_v5 AS a ON a.uid = ",
            "o.attempt_uid CROSS JOIN calls_v5 AS c ON c.uid = o.call_uid ORDER BY c.rowid, ",
            "a.rowid, o.uid"
        ),
    },
    TableCopy {
        old: "attempt_variables_v5",
        copy: concat!(
            "INSERT INTO attempt_variables (call_id, attempt_id, uid, attempt_uid, call_uid, ",
            "name, value, status, created_at, extra) SELECT ",
            "c.rowid, a.rowid, v.uid, v.attempt_uid, v.call_uid, v.name, v.value, v.status, ",
            instant!("v.created_at"),
            ", v.extra",
            " FROM attempt_variables_v5 AS v CROSS JOIN call_attempts_v5 AS a ON a.uid = ",
            "v.attempt_uid CROSS JOIN calls_v5 AS c ON c.uid = v.call_uid ORDER BY c.rowid, ",
            "a.rowid, v.uid"
        ),
    },
    TableCopy {
        old: "call_notifications_v5",
        copy: concat!(
            "INSERT INTO call_notifications (call_id, uid, call_uid, status, message_count, ",
            "delivered_at, extra) SELECT ",
            "c.rowid, n.uid, n.call_uid, n.status, n.message_count, ",
            instant!("n.delivered_at"),
            ", n.extra",
            " FROM call_notifications_v5 AS n CROSS JOIN calls_v5 AS c ON c.uid = n.call_uid ",
            "ORDER BY c.rowid, n.uid"
        ),
    },
];

/// The migration's hook: copies every row, checks that none was left behind, and finishes
/// the schema (`after-copy.sql`), showing how far it got throughout.
/// (The page cache it runs with is `schema::MIGRATION_CACHE_KIB`.)
pub(super) fn copy_rows(tx: &Transaction<'_>, children: ChildTables) -> HookResult {
    // The copy's INSERTs name their columns: the child tables may be created in schema 9's
    // form now, so that schema 9 finds nothing to rebuild in the same transaction.
    if children == ChildTables::KeyFirst {
        super::keys_first::create_key_first(tx)?;
    }
    let mut rows = [0u64; TABLES.len()];
    for (n, table) in rows.iter_mut().zip(&TABLES) {
        let count: i64 = tx.query_row(&format!("SELECT count(*) FROM {}", table.old), [], |r| {
            r.get(0)
        })?;
        *n = u64::try_from(count).unwrap_or(0);
    }
    let progress = &Progress::start(rows[0], rows.iter().sum());
    std::thread::scope(|scope| {
        // Log lines every 10 s come from a thread of their own: a statement copying a table
        // runs for minutes at a million calls.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        scope.spawn(move || progress.log_until(&stopped));
        let result = copy_tables(tx, &rows, progress).and_then(|()| {
            progress.phase("dropping the version 5 tables and creating the indexes");
            tx.execute_batch(AFTER_COPY)?;
            Ok(())
        });
        drop(stop);
        progress.finish();
        result
    })
}

/// Copies every table; `rows` are the rows of each version 5 table, all of which must arrive.
fn copy_tables(tx: &Transaction<'_>, rows: &[u64], progress: &Progress) -> HookResult {
    for (table, &before) in TABLES.iter().zip(rows) {
        let name = table.old.trim_end_matches("_v5");
        progress.phase(name);
        let copied = tx.execute(table.copy, [])? as u64;
        if copied != before {
            return Err(HookError::Hook(format!(
                "{copied} of the {before} rows of {name} copied (rows without their call or \
                 attempt?); the warehouse is left at schema 5: restore a backup or report this"
            )));
        }
        progress.copied(name, copied);
    }
    Ok(())
}

/// How far the migration got: a bar on a terminal, a log line every 10 s otherwise.
struct Progress {
    started: Instant,
    total: u64,
    bar: Option<indicatif::ProgressBar>,
    state: Mutex<State>,
}

/// What the migration is doing, and the rows of the tables copied so far.
struct State {
    phase: &'static str,
    copied: u64,
}

impl Progress {
    /// Says nothing at all when there are no rows: a new warehouse runs this migration too
    /// (every migration from 0), and has nothing to copy.
    fn start(calls: u64, total: u64) -> Progress {
        if total > 0 {
            tracing::info!(
                calls,
                rows = total,
                "migrating the warehouse to schema 6 (insertion-ordered): copying every row, in one transaction"
            );
        }
        let bar = (total > 0 && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let style = indicatif::ProgressStyle::with_template(
                "migrating to schema 6 [{elapsed_precise}] {bar:40} {pos}/{len} rows: {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            // The clock moves while one statement copies a table.
            bar.enable_steady_tick(Duration::from_secs(1));
            bar
        });
        Progress {
            started: Instant::now(),
            total,
            bar,
            state: Mutex::new(State {
                phase: "starting",
                copied: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panicking logger: the state is still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The migration moves on to `phase` (a table being copied, or what follows).
    fn phase(&self, phase: &'static str) {
        tracing::debug!(doing = phase, "migration: next step");
        self.state().phase = phase;
        if let Some(bar) = &self.bar {
            bar.set_message(phase);
        }
    }

    /// A table's `rows` are copied.
    fn copied(&self, table: &'static str, rows: u64) {
        let copied = {
            let mut state = self.state();
            state.copied += rows;
            state.copied
        };
        // One event per table, for whoever needs to act at a given point of the copy (the
        // crash test kills the process there).
        tracing::debug!(
            table,
            rows,
            copied,
            total = self.total,
            "migration: a table copied"
        );
        if let Some(bar) = &self.bar {
            bar.set_position(copied);
        }
    }

    /// Without a terminal, logs where the migration is every 10 s until `stop` is dropped.
    fn log_until(&self, stop: &std::sync::mpsc::Receiver<()>) {
        if self.bar.is_some() || self.total == 0 {
            return;
        }
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(LOG_EVERY) {
            let (phase, copied) = {
                let state = self.state();
                (state.phase, state.copied)
            };
            tracing::info!(
                doing = phase,
                rows_copied = copied,
                rows = self.total,
                elapsed_secs = self.started.elapsed().as_secs(),
                "migrating the warehouse to schema 6"
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.total == 0 {
            return;
        }
        tracing::info!(
            rows = self.total,
            elapsed_secs = self.started.elapsed().as_secs_f64(),
            "migration to schema 6: rows copied and indexed; committing"
        );
    }
}
