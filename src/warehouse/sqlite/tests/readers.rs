//! Schema 11: the warehouse as the analyst's readers take it. Python's `sqlite3` with
//! `PARSE_DECLTYPES` (its converters reproduced here), DuckDB's SQLite reader (which binds a
//! view's SQL against the tables as `PRAGMA table_info` shows them), and SQLite's own date
//! functions in the idioms docs/analyse.md gives ("Reading timestamps").

use super::*;

/// A warehouse with two calls' attempts, outcomes and the rest, as a pass writes them.
fn filled(dir: &tempfile::TempDir) -> Warehouse {
    let mut w = open(dir);
    write(
        &mut w,
        &[
            call(call_json(1, "2026-01-01T00:10:00Z", 2)),
            call(call_json(2, "2026-01-01T00:20:00.123456Z", 1)),
        ],
        Some("2026-01-01T00:20:00.123456Z"),
    );
    w
}

/// The tables and views analysts read.
fn relations(conn: &rusqlite::Connection) -> Vec<(String, String)> {
    conn.prepare(
        "SELECT type, name FROM sqlite_schema WHERE type IN ('table', 'view')
         AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .unwrap()
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// What Python's `sqlite3` does under `detect_types=PARSE_DECLTYPES` with the converters it
/// registers itself ("date", "timestamp"): looks the declared type up by its first word
/// (split at a space or `(`, case-insensitively) and converts the column's text with it;
/// `Err` where that conversion raises (Lib/sqlite3/dbapi2.py, `convert_date` and
/// `convert_timestamp`).
fn python_decltype_conversion(declared: &str, value: &str) -> Result<(), String> {
    let key = declared
        .split([' ', '('])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let ints = |text: &str, sep: char, n: usize| -> Result<(), String> {
        let parts: Vec<&str> = text.split(sep).collect();
        let ok = parts.len() == n && parts.iter().all(|p| p.parse::<i64>().is_ok());
        ok.then_some(())
            .ok_or_else(|| format!("ValueError on {value:?}"))
    };
    match key.as_str() {
        // `datepart, timepart = val.split(b" ")`, then `int`s of `-` and `:` parts; the
        // fraction is cut to 6 characters.
        "timestamp" => {
            let (date, time) = value
                .split_once(' ')
                .filter(|(_, t)| !t.contains(' '))
                .ok_or_else(|| format!("ValueError: not enough values to unpack ({value:?})"))?;
            ints(date, '-', 3)?;
            let hms = time.split('.').next().unwrap_or_default();
            ints(hms, ':', 3)
        }
        "date" => ints(value, '-', 3),
        _ => Ok(()),
    }
}

#[test]
fn pythons_decltype_converters_read_every_time_column_without_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let w = filled(&dir);
    let mut read = 0;
    for (_, name) in relations(&w.conn) {
        // Each column with its declared type (`sqlite3_column_decltype`, which Python reads, is
        // the same: a view's column declares its table column's type, an expression none).
        let declared: Vec<(String, String)> = w
            .conn
            .prepare("SELECT name, type FROM pragma_table_xinfo(?1) ORDER BY cid")
            .unwrap()
            .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let list: Vec<String> = declared.iter().map(|(c, _)| format!("\"{c}\"")).collect();
        let mut stmt = (w.conn)
            .prepare(&format!("SELECT {} FROM {name}", list.join(", ")))
            .unwrap();
        let declared: Vec<String> = declared.into_iter().map(|(_, t)| t).collect();
        let rows: Vec<Vec<rusqlite::types::Value>> = stmt
            .query_map([], |r| (0..declared.len()).map(|i| r.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for row in rows {
            for (value, declared) in row.iter().zip(&declared) {
                if let rusqlite::types::Value::Text(text) = value {
                    if let Err(raised) = python_decltype_conversion(declared, text.as_str()) {
                        panic!("{name}, declared {declared:?}: {raised}");
                    }
                    // docs/analyse.md's converter for TIMESTAMPTZ gives a `datetime`: years 1 to 9999.
                    assert!(
                        declared != "TIMESTAMPTZ" || !text.starts_with("0000-"),
                        "{name}: {text} is before Python's datetime.min"
                    );
                    read += 1;
                }
            }
        }
    }
    assert!(read > 100, "{read} values read");
    // The converter as Python has it: the old declared type raised on the warehouse's text.
    assert!(python_decltype_conversion("TIMESTAMP", "2026-01-01T00:10:00.000000Z").is_err());
    assert!(python_decltype_conversion("TIMESTAMP", "2026-01-01 00:10:00.5").is_ok());
    assert!(python_decltype_conversion("TIMESTAMPTZ", "2026-01-01T00:10:00.000000Z").is_ok());
}

#[test]
fn every_time_column_is_declared_timestamptz_in_tables_and_views() {
    let dir = tempfile::tempdir().unwrap();
    let w = filled(&dir);
    let mut times = 0;
    for (_, name) in relations(&w.conn) {
        for (column, declared) in columns(&w.conn, &name) {
            let time = column.ends_with("_at")
                || ["cursor", "horizon", "cooldown_until", "event_date_time"]
                    .contains(&column.as_str());
            if time {
                assert_eq!(declared, "TIMESTAMPTZ", "{name}.{column}");
                times += 1;
            }
        }
    }
    assert!(times > 40, "{times}");
}

/// DuckDB reads a view by binding its SQL against the tables' columns as `PRAGMA table_info`
/// lists them, which leaves generated columns out: a view naming one fails to bind, and DuckDB
/// falls back to reading every column of it as VARCHAR.
#[test]
fn no_view_names_a_column_duckdb_cannot_see() {
    let dir = tempfile::tempdir().unwrap();
    let w = open(&dir);
    let hidden: Vec<String> = w
        .conn
        .prepare(
            "SELECT t.name || '.' || c.name FROM sqlite_schema AS t, pragma_table_xinfo(t.name) AS c
             WHERE t.type = 'table' AND c.hidden != 0",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        hidden.contains(&"schedules.display_name".to_owned()),
        "{hidden:?}"
    );
    for (kind, view) in relations(&w.conn) {
        if kind != "view" {
            continue;
        }
        let sql: String = w
            .conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = ?1",
                [&view],
                |r| r.get(0),
            )
            .unwrap();
        // Comments may name them; the SQL may not.
        let code: String = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        for column in &hidden {
            let name = column.split('.').nth(1).unwrap();
            assert!(
                !code.contains(&format!(".{name}")),
                "{view} names the generated column {column}"
            );
        }
    }
}

/// SQLite's `datetime()` writes `YYYY-MM-DD HH:MM:SS` (a space), the warehouse RFC 3339 (a
/// `T`): compared as text, `updated_at > datetime('now', '-3 hours')` takes every row of the
/// bound's day (' ' sorts before 'T'). The forms docs/analyse.md gives compare instants.
#[test]
fn readmes_time_idioms_count_what_the_naive_one_miscounts() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = open(&dir);
    // 'now' is 2026-01-01T12:00:00Z: 3 hours before is 09:00. SQLite's date functions keep
    // milliseconds: the stamps around the bound are a millisecond or more from it.
    let stamps = [
        "2026-01-01T08:30:00.000000Z",
        "2026-01-01T08:59:59.999000Z",
        "2026-01-01T09:00:00.001000Z",
        "2026-01-01T11:00:00.500000Z",
    ];
    let calls: Vec<OutboundCall> = (1..)
        .zip(stamps)
        .map(|(n, at)| call(call_json(n, at, 0)))
        .collect();
    write(&mut w, &calls, None);
    let count = |condition: &str| -> i64 {
        w.conn
            .query_row(
                &format!("SELECT count(*) FROM call_results WHERE {condition}"),
                ["2026-01-01 12:00:00"],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(
        count("updated_at > datetime(?1, '-3 hours')"),
        4,
        "the trap"
    );
    for safe in [
        "updated_at > strftime('%Y-%m-%dT%H:%M:%f', ?1, '-3 hours')",
        "julianday(updated_at) > julianday(?1, '-3 hours')",
        "unixepoch(updated_at, 'subsec') > unixepoch(?1, '-3 hours')",
        "datetime(updated_at, 'subsec') > datetime(?1, '-3 hours')",
    ] {
        assert_eq!(count(safe), 2, "{safe}");
    }
    // Days and hours: date() and strftime() read the warehouse's form as the instant it is.
    let day: String = w
        .conn
        .query_row(
            "SELECT date(updated_at) || ' ' || strftime('%H', updated_at) FROM calls LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(day, "2026-01-01 08");
}
