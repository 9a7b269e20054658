//! What the PostgreSQL writer sends: each table's columns and conflict key, a page's rows of
//! one table gathered column by column into arrays (`Batch`, one array parameter a column),
//! and the one `unnest()` upsert statement a table is written with (`Table::upsert_sql`, built
//! once: a page asks for it each time it writes the table).
//!
//! A child row's keys to its call and attempt (`call_id`, `attempt_id`) are not sent: the
//! statement finds them by the uids the row carries (`call_uid`, `attempt_uid`), joined to
//! the rows written before it in the same transaction. So a page's statements need no answer
//! of each other, and go to the server together (`write.rs`). A row whose call or attempt is
//! not found is not written (the join drops it), as the writer skipped one before.

use std::sync::OnceLock;

use tokio_postgres::types::ToSql;

/// How a column travels: text (cast by the server to its type), a 64-bit integer or a flag;
/// or not at all, found by the server.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Uuid,
    Json,
    /// SQLite's UTC text (`rows.rs`), read as `timestamp` at UTC.
    Time,
    Int,
    Bool,
    /// The id of the call whose uid is the row's `call_uid`.
    CallId,
    /// The id of the attempt whose uid is the row's `attempt_uid`, of that call.
    AttemptId,
}

impl Kind {
    /// Whether the row carries the value (else the server finds it).
    fn sent(self) -> bool {
        !matches!(self, Kind::CallId | Kind::AttemptId)
    }
}

pub(super) struct Table {
    pub(super) name: &'static str,
    pub(super) columns: &'static [(&'static str, Kind)],
    /// The conflict target of the upsert.
    pub(super) key: &'static [&'static str],
    /// What writing it is called in an error.
    pub(super) writing: &'static str,
    /// Its upsert statement's SQL, once built.
    upsert: OnceLock<String>,
}

impl Table {
    /// Its upsert statement (`build_upsert_sql`), built the first time it is asked for.
    pub(super) fn upsert_sql(&self) -> &str {
        self.upsert.get_or_init(|| build_upsert_sql(self))
    }
}

use Kind::{AttemptId, Bool, CallId, Int, Json, Text, Time};

pub(super) static CALLS: Table = Table {
    name: "calls",
    columns: &[
        ("uid", Kind::Uuid),
        ("schedule_uid", Kind::Uuid),
        ("external_id", Text),
        ("status", Text),
        ("progress", Text),
        ("is_test_call", Bool),
        ("cooldown_until", Time),
        ("delay", Json),
        ("priority", Json),
        ("attempts_remaining", Int),
        ("retry_intervals", Json),
        ("created_at", Time),
        ("updated_at", Time),
        ("phone_number", Text),
        ("phone_e164", Text),
        ("full_name", Text),
        ("first_name", Text),
        ("last_name", Text),
        ("phonetic_full_name", Text),
        ("phonetic_first_name", Text),
        ("phonetic_last_name", Text),
        ("email", Text),
        ("event_date_time", Time),
        ("extra", Json),
        ("content_hash", Int),
        ("synced_at", Time),
        ("attempt_count", Int),
        ("last_attempt_uid", Kind::Uuid),
        ("last_attempt_status", Text),
        ("last_attempt_started_at", Time),
        ("last_attempt_answered_at", Time),
        ("last_attempt_ended_at", Time),
        ("last_attempt_duration", Int),
        ("outcome_names", Text),
        ("answered", Bool),
        ("transferred", Bool),
        ("notification_count", Int),
    ],
    key: &["uid"],
    writing: "writing calls",
    upsert: OnceLock::new(),
};

pub(super) static PARAMETERS: Table = Table {
    name: "call_custom_parameters",
    columns: &[
        ("call_id", Kind::CallId),
        ("call_uid", Kind::Uuid),
        ("name", Text),
        ("value", Text),
    ],
    key: &["call_id", "name"],
    writing: "writing custom parameters",
    upsert: OnceLock::new(),
};

pub(super) static ATTEMPTS: Table = Table {
    name: "call_attempts",
    columns: &[
        ("uid", Kind::Uuid),
        ("call_id", Kind::CallId),
        ("call_uid", Kind::Uuid),
        ("position", Int),
        ("status", Text),
        ("started_at", Time),
        ("answered_at", Time),
        ("ended_at", Time),
        ("duration", Int),
        ("created_at", Time),
        ("updated_at", Time),
        ("error_details", Json),
        ("transfer_started_at", Time),
        ("transfer_answered_at", Time),
        ("transfer_destination", Text),
        ("extra", Json),
    ],
    key: &["call_id", "uid"],
    writing: "writing attempts",
    upsert: OnceLock::new(),
};

pub(super) static OUTCOMES: Table = Table {
    name: "attempt_outcomes",
    columns: &[
        ("call_id", Kind::CallId),
        ("attempt_id", Kind::AttemptId),
        ("uid", Kind::Uuid),
        ("attempt_uid", Kind::Uuid),
        ("call_uid", Kind::Uuid),
        ("name", Text),
        ("created_at", Time),
        ("extra", Json),
    ],
    key: &["call_id", "attempt_id", "uid"],
    writing: "writing outcomes",
    upsert: OnceLock::new(),
};

pub(super) static VARIABLES: Table = Table {
    name: "attempt_variables",
    columns: &[
        ("call_id", Kind::CallId),
        ("attempt_id", Kind::AttemptId),
        ("uid", Kind::Uuid),
        ("attempt_uid", Kind::Uuid),
        ("call_uid", Kind::Uuid),
        ("name", Text),
        ("value", Text),
        ("status", Text),
        ("created_at", Time),
        ("extra", Json),
    ],
    key: &["call_id", "attempt_id", "uid"],
    writing: "writing variables",
    upsert: OnceLock::new(),
};

pub(super) static NOTIFICATIONS: Table = Table {
    name: "call_notifications",
    columns: &[
        ("call_id", Kind::CallId),
        ("uid", Kind::Uuid),
        ("call_uid", Kind::Uuid),
        ("status", Text),
        ("message_count", Int),
        ("delivered_at", Time),
        ("extra", Json),
    ],
    key: &["call_id", "uid"],
    writing: "writing notifications",
    upsert: OnceLock::new(),
};

/// One value of a row, as its column travels.
pub(super) enum V {
    T(Option<String>),
    I(Option<i64>),
    B(Option<bool>),
}

pub(super) fn t(value: Option<&str>) -> V {
    V::T(value.map(str::to_owned))
}

/// A table's rows, column by column: one array parameter per column.
enum Column {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
}

pub(super) struct Batch {
    pub(super) table: &'static Table,
    columns: Vec<Column>,
    pub(super) len: usize,
}

impl Batch {
    pub(super) fn new(table: &'static Table) -> Batch {
        Batch {
            table,
            columns: table
                .columns
                .iter()
                .filter(|(_, kind)| kind.sent())
                .map(|(_, kind)| match kind {
                    Int => Column::Int(Vec::new()),
                    Bool => Column::Bool(Vec::new()),
                    _ => Column::Text(Vec::new()),
                })
                .collect(),
            len: 0,
        }
    }

    /// Adds a row: one value per column sent, in the table's order (a mismatch is a bug
    /// here, caught by the unit test of every table).
    pub(super) fn push(&mut self, row: Vec<V>) {
        debug_assert_eq!(row.len(), self.columns.len(), "{}", self.table.name);
        for (column, value) in self.columns.iter_mut().zip(row) {
            match (column, value) {
                (Column::Text(c), V::T(v)) => c.push(v),
                (Column::Int(c), V::I(v)) => c.push(v),
                (Column::Bool(c), V::B(v)) => c.push(v),
                _ => debug_assert!(false, "a value of the wrong kind for {}", self.table.name),
            }
        }
        self.len += 1;
    }

    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.columns
            .iter()
            .map(|c| -> &(dyn ToSql + Sync) {
                match c {
                    Column::Text(v) => v,
                    Column::Int(v) => v,
                    Column::Bool(v) => v,
                }
            })
            .collect()
    }
}

/// `INSERT … SELECT … FROM unnest(arrays) [JOIN the call [and its attempt]] ON CONFLICT (key)
/// DO UPDATE SET every other column`.
fn build_upsert_sql(table: &Table) -> String {
    let quoted = |name: &str| format!("\"{name}\"");
    let names: Vec<String> = table.columns.iter().map(|(n, _)| quoted(n)).collect();
    let sent: Vec<&(&str, Kind)> = table.columns.iter().filter(|(_, k)| k.sent()).collect();
    let sent_names: Vec<String> = sent.iter().map(|(n, _)| quoted(n)).collect();
    let arrays: Vec<String> = sent
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            let array = match kind {
                Int => "int8[]",
                Bool => "bool[]",
                _ => "text[]",
            };
            format!("${}::{array}", i + 1)
        })
        .collect();
    let values: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| match kind {
            Kind::Uuid => format!("u.\"{name}\"::uuid"),
            Json => format!("u.\"{name}\"::jsonb"),
            Time => format!("(u.\"{name}\"::timestamp AT TIME ZONE 'UTC')"),
            Text | Int | Bool => format!("u.\"{name}\""),
            CallId => "c.id".to_owned(),
            AttemptId => "a.id".to_owned(),
        })
        .collect();
    // A join may reorder the rows, which would give new rows their ids (`GENERATED … AS
    // IDENTITY`) in another order than the page's, SQLite's: they are put back in order.
    let kinds = || table.columns.iter().map(|(_, kind)| *kind);
    let mut joins = String::new();
    if kinds().any(|k| k == CallId) {
        joins.push_str(" JOIN calls AS c ON c.uid = u.\"call_uid\"::uuid");
    }
    if kinds().any(|k| k == AttemptId) {
        joins.push_str(
            " JOIN call_attempts AS a ON a.call_id = c.id AND a.uid = u.\"attempt_uid\"::uuid",
        );
    }
    let (ordinality, order) = if joins.is_empty() {
        ("", "")
    } else {
        (" WITH ORDINALITY", " ORDER BY u.row_number")
    };
    let sent_names = if joins.is_empty() {
        sent_names.join(", ")
    } else {
        format!("{}, row_number", sent_names.join(", "))
    };
    let updates: Vec<String> = table
        .columns
        .iter()
        .filter(|(name, _)| !table.key.contains(name))
        .map(|(name, _)| format!("\"{name}\" = excluded.\"{name}\""))
        .collect();
    let key: Vec<String> = table.key.iter().map(|k| quoted(k)).collect();
    format!(
        "INSERT INTO {table} ({names}) SELECT {values}
         FROM unnest({arrays}){ordinality} AS u({sent_names}){joins}{order}
         ON CONFLICT ({key}) DO UPDATE SET {updates}",
        table = table.name,
        names = names.join(", "),
        values = values.join(", "),
        arrays = arrays.join(", "),
        key = key.join(", "),
        updates = updates.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_names_its_key_among_its_columns() {
        for table in [
            &CALLS,
            &PARAMETERS,
            &ATTEMPTS,
            &OUTCOMES,
            &VARIABLES,
            &NOTIFICATIONS,
        ] {
            for key in table.key {
                assert!(
                    table.columns.iter().any(|(c, _)| c == key),
                    "{}: {key}",
                    table.name
                );
            }
            let sql = table.upsert_sql();
            let sent = table.columns.iter().filter(|(_, k)| k.sent()).count();
            assert!(sql.contains(&format!("${sent}::")), "{sql}");
            assert!(!sql.contains(&format!("${}::", sent + 1)), "{sql}");
            assert_eq!(Batch::new(table).params().len(), sent, "{}", table.name);
            let has = |name: &str| table.columns.iter().any(|(n, _)| *n == name);
            let resolves = |kind: Kind| table.columns.iter().any(|(_, k)| *k == kind);
            assert!(!resolves(CallId) || has("call_uid"), "{}", table.name);
            assert!(
                !resolves(AttemptId) || (resolves(CallId) && has("attempt_uid")),
                "{}",
                table.name
            );
        }
    }
}
