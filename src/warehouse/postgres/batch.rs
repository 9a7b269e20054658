//! What the PostgreSQL writer sends: each table's columns and conflict key, a page's rows of
//! one table gathered column by column into arrays (`Batch`, one array parameter a column),
//! and the two `unnest()` statements a table is written with (`Table::sql`), each built once
//! (a page asks for one each time it writes the table).
//!
//! Uids and instants travel as the server's own binary types (`uuid[]`, `timestamptz[]`), not
//! as text it parses: parsing them was a measurable share of the server's CPU on a first sync
//! (BENCHMARKS.md, "First sync, PostgreSQL").
//!
//! `Write::Upsert` (`ON CONFLICT … DO UPDATE`): a row's own id is the next of its table's
//! sequence, and a child row's keys to its call and attempt (`call_id`, `attempt_id`) are not
//! sent: the statement finds them by the uids the row carries (`call_uid`, `attempt_uid`),
//! joined to the rows written before it in the same transaction. So a page's statements need no
//! answer of each other, and go to the server together (`write.rs`). A row whose call or
//! attempt is not found is not written (the join drops it), as the writer skipped one before.
//!
//! `Write::Insert`, for a page of new calls only: every id is sent, reserved by the page, and
//! the rows are inserted as they are, as COPY writes them — no join, and no probe of the key's
//! index before each row (a plain insert checks the key as it adds the row).

use std::sync::OnceLock;

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::session::micros;
use crate::service::Timestamp;

/// How a column travels: text (JSON cast by the server to `jsonb`), a uid, an instant, a
/// 64-bit integer or a flag; an id, which an upsert does not send (the server finds it) and
/// an insert does (the page reserved it, `write.rs`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Uuid,
    Json,
    /// SQLite's UTC text (`rows.rs`), read as `timestamp` at UTC.
    Time,
    Int,
    Bool,
    /// The row's own id (`GENERATED … AS IDENTITY`): the next of its sequence in an upsert.
    Id,
    /// The id of the call whose uid is the row's `call_uid`: in an upsert, found by joining.
    CallId,
    /// The id of the attempt whose uid is the row's `attempt_uid`, of that call: in an upsert,
    /// found by joining.
    AttemptId,
}

impl Kind {
    fn is_id(self) -> bool {
        matches!(self, Kind::Id | Kind::CallId | Kind::AttemptId)
    }
}

/// How a table's rows are written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Write {
    /// Upserted (`ON CONFLICT … DO UPDATE`), ids found by the server.
    Upsert,
    /// Inserted with the ids they carry: rows no stored row can share a key with.
    Insert,
}

impl Write {
    /// Whether a column of `kind` is sent.
    fn sends(self, kind: Kind) -> bool {
        self == Write::Insert || !kind.is_id()
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
    /// Its insert statement's SQL, once built.
    insert: OnceLock<String>,
}

impl Table {
    const fn new(
        name: &'static str,
        columns: &'static [(&'static str, Kind)],
        key: &'static [&'static str],
        writing: &'static str,
    ) -> Table {
        Table {
            name,
            columns,
            key,
            writing,
            upsert: OnceLock::new(),
            insert: OnceLock::new(),
        }
    }

    /// Its statement for `write` (`upsert_sql`, `insert_sql`), built the first time it is
    /// asked for.
    pub(super) fn sql(&self, write: Write) -> &str {
        match write {
            Write::Upsert => self.upsert.get_or_init(|| upsert_sql(self)),
            Write::Insert => self.insert.get_or_init(|| insert_sql(self)),
        }
    }
}

use Kind::{AttemptId, Bool, CallId, Id, Int, Json, Text, Time};

pub(super) static CALLS: Table = Table::new(
    "calls",
    &[
        ("id", Id),
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
    &["uid"],
    "writing calls",
);

pub(super) static PARAMETERS: Table = Table::new(
    "call_custom_parameters",
    &[
        ("call_id", Kind::CallId),
        ("call_uid", Kind::Uuid),
        ("name", Text),
        ("value", Text),
    ],
    &["call_id", "name"],
    "writing custom parameters",
);

pub(super) static ATTEMPTS: Table = Table::new(
    "call_attempts",
    &[
        ("id", Id),
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
    &["call_id", "uid"],
    "writing attempts",
);

pub(super) static OUTCOMES: Table = Table::new(
    "attempt_outcomes",
    &[
        ("call_id", Kind::CallId),
        ("attempt_id", Kind::AttemptId),
        ("uid", Kind::Uuid),
        ("attempt_uid", Kind::Uuid),
        ("call_uid", Kind::Uuid),
        ("name", Text),
        ("created_at", Time),
        ("extra", Json),
    ],
    &["call_id", "attempt_id", "uid"],
    "writing outcomes",
);

pub(super) static VARIABLES: Table = Table::new(
    "attempt_variables",
    &[
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
    &["call_id", "attempt_id", "uid"],
    "writing variables",
);

pub(super) static NOTIFICATIONS: Table = Table::new(
    "call_notifications",
    &[
        ("call_id", Kind::CallId),
        ("uid", Kind::Uuid),
        ("call_uid", Kind::Uuid),
        ("status", Text),
        ("message_count", Int),
        ("delivered_at", Time),
        ("extra", Json),
    ],
    &["call_id", "uid"],
    "writing notifications",
);

/// One value of a row: text (for a text, JSON, uid or instant column: a uid or instant in the
/// warehouse's text form, `rows.rs`), an integer or a flag.
pub(super) enum Cell {
    Text(Option<String>),
    Int(Option<i64>),
    Flag(Option<bool>),
}

pub(super) fn text(value: Option<&str>) -> Cell {
    Cell::Text(value.map(str::to_owned))
}

/// A table's rows, column by column: one array parameter per column.
enum Column {
    Text(Vec<Option<String>>),
    Uuid(Vec<Option<Uuid>>),
    Time(Vec<Option<OffsetDateTime>>),
    Int(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
}

pub(super) struct Batch {
    pub(super) table: &'static Table,
    columns: Vec<Column>,
    pub(super) len: usize,
    /// The first uid or instant text that could not be read as one (only a bug can form
    /// one): the batch is then not sent.
    pub(super) unsendable: Option<String>,
}

impl Batch {
    pub(super) fn new(table: &'static Table) -> Batch {
        Batch {
            table,
            columns: table
                .columns
                .iter()
                .map(|(_, kind)| match kind {
                    Int | Id | CallId | AttemptId => Column::Int(Vec::new()),
                    Bool => Column::Bool(Vec::new()),
                    Kind::Uuid => Column::Uuid(Vec::new()),
                    Time => Column::Time(Vec::new()),
                    _ => Column::Text(Vec::new()),
                })
                .collect(),
            len: 0,
            unsendable: None,
        }
    }

    /// Adds a row: one value per column, in the table's order (a mismatch is a bug here,
    /// caught by the unit test of every table); an id the row does not know is `None`.
    pub(super) fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len(), "{}", self.table.name);
        let unsendable = &mut self.unsendable;
        for (column, value) in self.columns.iter_mut().zip(row) {
            match (column, value) {
                (Column::Text(c), Cell::Text(v)) => c.push(v),
                (Column::Uuid(c), Cell::Text(v)) => c.push(read(v, unsendable, |t| t.parse().ok())),
                (Column::Time(c), Cell::Text(v)) => c.push(read(v, unsendable, instant)),
                (Column::Int(c), Cell::Int(v)) => c.push(v),
                (Column::Bool(c), Cell::Flag(v)) => c.push(v),
                _ => debug_assert!(false, "a value of the wrong kind for {}", self.table.name),
            }
        }
        self.len += 1;
    }

    /// Adds `other`'s rows, of the same table, after its own.
    pub(super) fn append(&mut self, other: Batch) {
        debug_assert!(std::ptr::eq(self.table, other.table), "{}", self.table.name);
        for (column, more) in self.columns.iter_mut().zip(other.columns) {
            match (column, more) {
                (Column::Text(c), Column::Text(m)) => c.extend(m),
                (Column::Uuid(c), Column::Uuid(m)) => c.extend(m),
                (Column::Time(c), Column::Time(m)) => c.extend(m),
                (Column::Int(c), Column::Int(m)) => c.extend(m),
                (Column::Bool(c), Column::Bool(m)) => c.extend(m),
                _ => debug_assert!(false, "columns of another kind for {}", self.table.name),
            }
        }
        self.len += other.len;
        self.unsendable = self.unsendable.take().or(other.unsendable);
    }

    /// The values of the integer column `name` (none for another column).
    #[cfg(test)]
    pub(super) fn ints(&self, name: &str) -> Vec<Option<i64>> {
        (self.columns.iter().zip(self.table.columns))
            .find_map(|(column, (n, _))| match column {
                Column::Int(values) if *n == name => Some(values.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The parameters of its statement for `write`: its columns that `write` sends.
    pub(super) fn params(&self, write: Write) -> Vec<&(dyn ToSql + Sync)> {
        self.columns
            .iter()
            .zip(self.table.columns)
            .filter(|(_, (_, kind))| write.sends(*kind))
            .map(|(c, _)| -> &(dyn ToSql + Sync) {
                match c {
                    Column::Text(v) => v,
                    Column::Uuid(v) => v,
                    Column::Time(v) => v,
                    Column::Int(v) => v,
                    Column::Bool(v) => v,
                }
            })
            .collect()
    }
}

/// `text` read by `parse`; a text it cannot read is kept in `unsendable` (the first one).
fn read<T>(
    text: Option<String>,
    unsendable: &mut Option<String>,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let text = text?;
    let value = parse(&text);
    if value.is_none() && unsendable.is_none() {
        *unsendable = Some(text);
    }
    value
}

/// The instant of the warehouse's text form (`2026-01-31T09:30:00.250000Z`, always to the
/// microsecond), read field by field: `time`'s RFC 3339 parser takes several times longer,
/// and a first sync reads a million of them. Any other form goes through
/// `Timestamp::parse_warehouse_text`, cut to the microsecond as the text form is.
fn instant(text: &str) -> Option<OffsetDateTime> {
    let b = text.as_bytes();
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let fixed = b.len() == 27
        && at(4, b'-')
        && at(7, b'-')
        && at(10, b'T')
        && at(13, b':')
        && at(16, b':')
        && at(19, b'.')
        && at(26, b'Z');
    if !fixed {
        return Timestamp::parse_warehouse_text(text).ok().map(micros);
    }
    let number = |from: usize, to: usize| -> Option<u32> {
        b.get(from..to)?.iter().try_fold(0u32, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let small = |from: usize| u8::try_from(number(from, from + 2)?).ok();
    let year = i32::try_from(number(0, 4)?).ok()?;
    let month = Month::try_from(small(5)?).ok()?;
    let date = Date::from_calendar_date(year, month, small(8)?).ok()?;
    let time =
        time::Time::from_hms_micro(small(11)?, small(14)?, small(17)?, number(20, 26)?).ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc())
}

/// The statement for `write`: `INSERT … SELECT … FROM unnest(arrays) [joins]`, each array a
/// column `write` sends.
fn insert_from_arrays(table: &Table, write: Write, joins: &str) -> String {
    let quoted = |name: &str| format!("\"{name}\"");
    let upsert = write == Write::Upsert;
    // An upsert's new row takes the next id of its table's sequence.
    let written = |kind: &Kind| !upsert || *kind != Id;
    let names: Vec<String> = (table.columns.iter())
        .filter(|(_, k)| written(k))
        .map(|(n, _)| quoted(n))
        .collect();
    let sent: Vec<&(&str, Kind)> = (table.columns.iter())
        .filter(|(_, k)| write.sends(*k))
        .collect();
    let sent_names: Vec<String> = sent.iter().map(|(n, _)| quoted(n)).collect();
    let arrays: Vec<String> = sent
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            let array = match kind {
                Int | Id | CallId | AttemptId => "int8[]",
                Bool => "bool[]",
                Kind::Uuid => "uuid[]",
                Time => "timestamptz[]",
                Text | Json => "text[]",
            };
            format!("${}::{array}", i + 1)
        })
        .collect();
    let values: Vec<String> = (table.columns.iter())
        .filter(|(_, k)| written(k))
        .map(|(name, kind)| match kind {
            Json => format!("u.\"{name}\"::jsonb"),
            CallId if upsert => "c.id".to_owned(),
            AttemptId if upsert => "a.id".to_owned(),
            _ => format!("u.\"{name}\""),
        })
        .collect();
    let overriding = if names.contains(&quoted("id")) {
        " OVERRIDING SYSTEM VALUE"
    } else {
        ""
    };
    // A join may reorder the rows, which would give new rows their ids in another order than
    // the page's, SQLite's: they are put back in order.
    let from = if joins.is_empty() {
        format!(" AS u({})", sent_names.join(", "))
    } else {
        format!(
            " WITH ORDINALITY AS u({}, row_number){joins} ORDER BY u.row_number",
            sent_names.join(", ")
        )
    };
    format!(
        "INSERT INTO {table} ({names}){overriding} SELECT {values}
         FROM unnest({arrays}){from}",
        table = table.name,
        names = names.join(", "),
        values = values.join(", "),
        arrays = arrays.join(", "),
    )
}

/// The insert of rows that carry their ids (reserved by the page): the rows as they are, as
/// `COPY` would write them; a row whose key is stored fails the statement.
fn insert_sql(table: &Table) -> String {
    insert_from_arrays(table, Write::Insert, "")
}

/// The upsert: `… [JOIN the call [and its attempt]] ON CONFLICT (key) DO UPDATE SET every
/// other column`. The joins find the ids of the rows written before it in the transaction.
fn upsert_sql(table: &Table) -> String {
    let kinds = || table.columns.iter().map(|(_, kind)| *kind);
    let mut joins = String::new();
    if kinds().any(|k| k == CallId) {
        joins.push_str(" JOIN calls AS c ON c.uid = u.\"call_uid\"");
    }
    if kinds().any(|k| k == AttemptId) {
        joins
            .push_str(" JOIN call_attempts AS a ON a.call_id = c.id AND a.uid = u.\"attempt_uid\"");
    }
    let updates: Vec<String> = (table.columns.iter())
        .filter(|(name, kind)| !table.key.contains(name) && *kind != Id)
        .map(|(name, _)| format!("\"{name}\" = excluded.\"{name}\""))
        .collect();
    let key: Vec<String> = table.key.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "{} ON CONFLICT ({}) DO UPDATE SET {}",
        insert_from_arrays(table, Write::Upsert, &joins),
        key.join(", "),
        updates.join(", ")
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
            for write in [Write::Upsert, Write::Insert] {
                let sql = table.sql(write);
                let sent = (table.columns.iter())
                    .filter(|(_, k)| write.sends(*k))
                    .count();
                assert!(sql.contains(&format!("${sent}::")), "{sql}");
                assert!(!sql.contains(&format!("${}::", sent + 1)), "{sql}");
                let batch = Batch::new(table);
                assert_eq!(batch.params(write).len(), sent, "{}", table.name);
            }
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

    #[test]
    fn an_instant_reads_back_as_the_microsecond_its_text_form_shows() {
        for text in [
            "2026-01-31T09:30:00.250000Z",
            "2026-01-31T09:30:00.123456789Z",
            "1999-12-31T23:59:59.999999999Z",
            "1969-07-20T20:17:40.000001500Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "2024-02-29T12:00:00+05:30",
        ] {
            let t = Timestamp::parse(text).expect(text);
            let form = t.to_warehouse_text();
            assert_eq!(instant(&form), Some(micros(t)), "{form}");
        }
        // The form of schema 6 and older, and anything else `parse_warehouse_text` reads.
        let old = "2026-01-31 09:30:00.25";
        let t = Timestamp::parse_warehouse_text(old).expect("the old form");
        assert_eq!(instant(old), Some(micros(t)));
        for bad in [
            "2026-13-31T09:30:00.000000Z",
            "2026-02-30T09:30:00.000000Z",
            "2026-01-31T24:30:00.000000Z",
            "2026-01-31T09:30:0x.000000Z",
            "2026-01-31T09:30:00.00000+Z",
            "",
        ] {
            assert_eq!(instant(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_text_that_is_no_uid_or_instant_keeps_the_batch_from_being_sent() {
        let mut batch = Batch::new(&PARAMETERS);
        let row = |uid: &str| {
            vec![
                Cell::Int(None),
                text(Some(uid)),
                text(Some("plan")),
                text(None),
            ]
        };
        batch.push(row("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11"));
        assert_eq!(batch.unsendable, None);
        batch.push(row("not-a-uid"));
        batch.push(row("nor-this"));
        assert_eq!(batch.unsendable.as_deref(), Some("not-a-uid"));

        let mut batch = Batch::new(&NOTIFICATIONS);
        let row = |delivered: &str| {
            vec![
                Cell::Int(None),
                text(Some("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11")),
                text(Some("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b12")),
                text(Some("sent")),
                Cell::Int(Some(1)),
                text(Some(delivered)),
                text(None),
            ]
        };
        batch.push(row("2026-01-31T09:30:00.250000Z"));
        assert_eq!(batch.unsendable, None);
        batch.push(row("yesterday"));
        assert_eq!(batch.unsendable.as_deref(), Some("yesterday"));
    }

    #[test]
    fn an_insert_sends_the_ids_an_upsert_finds() {
        let sql = VARIABLES.sql(Write::Insert);
        assert!(
            !sql.contains("ON CONFLICT") && !sql.contains("JOIN"),
            "{sql}"
        );
        assert!(sql.contains("u.\"call_id\", u.\"attempt_id\""), "{sql}");
        let sql = VARIABLES.sql(Write::Upsert);
        assert!(
            sql.contains("ON CONFLICT (\"call_id\", \"attempt_id\", \"uid\")"),
            "{sql}"
        );
        assert!(
            sql.contains("SELECT c.id, a.id") && sql.contains("ORDER BY"),
            "{sql}"
        );
        // A new row's own id: the reserved one, else the next of its sequence.
        let sql = CALLS.sql(Write::Insert);
        assert!(sql.starts_with("INSERT INTO calls (\"id\", "), "{sql}");
        assert!(sql.contains("OVERRIDING SYSTEM VALUE"), "{sql}");
        let sql = CALLS.sql(Write::Upsert);
        assert!(
            !sql.contains("\"id\"") && !sql.contains("OVERRIDING"),
            "{sql}"
        );
    }
}
