//! `COMMENT ON` every table, view and column of the PostgreSQL warehouse, and on
//! `local_day`, from `warehouse/descriptions.rs` (one source with Datasette's metadata), so
//! Metabase, Grafana, DBeaver and `\d+` describe what Datasette does. Applied after the
//! migrations, under their lock, and only where a comment differs from the source: a start
//! that finds them right writes nothing. Commenting needs the owner's privileges; a role
//! without them is told so (WARN) and goes on, as the descriptions are no data.

use std::collections::HashMap;

use tokio_postgres::Client;

use super::session::{PgContext, RowColumn, wait};
use super::target::PgTarget;
use crate::warehouse::descriptions::{self, Described};
use crate::warehouse::error::WarehouseError;

const STEP: &str = "describing the tables (COMMENT ON)";

/// (relation, column; `""` for the relation itself) → (the relation's kind, its comment).
type Found = HashMap<(String, String), (String, String)>;

/// `"name"`, quoted as SQL quotes an identifier.
fn identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`, quoted as SQL quotes a literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The tables only the PostgreSQL warehouse has.
pub fn postgres_only() -> Vec<Described> {
    let described = |object: &str, description: &str, columns: &[(&str, &str)]| Described {
        object: object.to_owned(),
        description: description.to_owned(),
        columns: columns
            .iter()
            .map(|(c, d)| ((*c).to_owned(), (*d).to_owned()))
            .collect(),
    };
    vec![
        described(
            "callsync_schema",
            "PostgreSQL only: the version of callsync's schema (migrations-postgres/), one row. callsync refuses a database whose version it does not know.",
            &[(
                "version",
                "The schema version: the number of migrations applied.",
            )],
        ),
        described(
            "schedule_claims",
            "PostgreSQL only: each schedule's fencing token. A process that claims a schedule (its advisory lock) bumps generation; each page it writes checks the number is still its own, so a process that lost its claim unknowingly cannot commit.",
            &[
                ("schedule_uid", "The schedule."),
                (
                    "generation",
                    "Bumped by every claim; the writer's page commits only while it holds the latest.",
                ),
                ("claimed_at", "When the latest claim was taken (UTC)."),
            ],
        ),
    ]
}

/// `local_day(t)`'s description (PostgreSQL's function).
pub const LOCAL_DAY_FUNCTION: &str = "The day of instant t in the warehouse's time zone (warehouse.timezone; UTC until set), from timezone_offsets: the same days as the views' created_day and started_day, and as SQLite's local_days. SELECT local_day(started_at), count(*) FROM attempt_results GROUP BY 1.";

/// What the warehouse's schema holds now: each relation's kind and comment, each column's
/// comment (`""` for none), keyed by (relation, column; `""` for the relation itself).
fn found(client: &Client, target: &PgTarget) -> Result<Found, WarehouseError> {
    let rows = wait(client.query(
        "SELECT c.relname::text, c.relkind::text, '',
                coalesce(obj_description(c.oid, 'pg_class'), '')
         FROM pg_class AS c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v')
         UNION ALL
         SELECT c.relname::text, c.relkind::text, a.attname::text,
                coalesce(col_description(c.oid, a.attnum), '')
         FROM pg_class AS c
         JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v')",
        &[],
    ))
    .pg(target, STEP)?;
    let mut found = HashMap::new();
    for row in rows {
        let relation: String = row.column(0, target, STEP)?;
        let kind: String = row.column(1, target, STEP)?;
        let column: String = row.column(2, target, STEP)?;
        let comment: String = row.column(3, target, STEP)?;
        found.insert((relation, column), (kind, comment));
    }
    Ok(found)
}

/// The statements that make the comments the source's, for the objects that exist.
fn statements(found: &Found) -> Vec<String> {
    let mut sql = Vec::new();
    for described in descriptions::shared().into_iter().chain(postgres_only()) {
        let object = &described.object;
        let Some((kind, comment)) = found.get(&(object.clone(), String::new())) else {
            continue;
        };
        if *comment != described.description {
            let noun = if kind == "v" { "VIEW" } else { "TABLE" };
            sql.push(format!(
                "COMMENT ON {noun} {} IS {}",
                identifier(object),
                literal(&described.description)
            ));
        }
        for (column, about) in &described.columns {
            let key = (object.clone(), column.clone());
            if found.get(&key).is_some_and(|(_, comment)| comment != about) {
                sql.push(format!(
                    "COMMENT ON COLUMN {}.{} IS {}",
                    identifier(object),
                    identifier(column),
                    literal(about)
                ));
            }
        }
    }
    sql
}

/// Brings every comment in line with the source; returns how many it wrote.
pub(super) fn describe(client: &Client, target: &PgTarget) -> Result<usize, WarehouseError> {
    let mut sql = statements(&found(client, target)?);
    let function: Option<String> = wait(client.query_one(
        "SELECT obj_description(to_regprocedure('local_day(timestamptz)'), 'pg_proc')",
        &[],
    ))
    .pg(target, STEP)?
    .column(0, target, STEP)?;
    if function.as_deref() != Some(LOCAL_DAY_FUNCTION) {
        sql.push(format!(
            "COMMENT ON FUNCTION local_day(timestamptz) IS {}",
            literal(LOCAL_DAY_FUNCTION)
        ));
    }
    if sql.is_empty() {
        return Ok(0);
    }
    let batch = format!("BEGIN; {}; COMMIT;", sql.join(";\n"));
    if let Err(err) = wait(client.batch_execute(&batch)) {
        let _ = wait(client.batch_execute("ROLLBACK"));
        return Err::<usize, _>(err).pg(target, STEP);
    }
    Ok(sql.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_only_postgresql_has_are_described_column_by_column() {
        for d in postgres_only() {
            assert!(!d.description.trim().is_empty(), "{}", d.object);
            assert!(!d.columns.is_empty(), "{}", d.object);
            for (column, about) in &d.columns {
                assert!(!about.trim().is_empty(), "{}.{column}", d.object);
            }
        }
    }

    #[test]
    fn names_and_texts_are_quoted() {
        assert_eq!(identifier("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(literal("the call's day"), "'the call''s day'");
    }

    #[test]
    fn only_what_differs_is_written() {
        let mut found = HashMap::new();
        let calls = descriptions::shared()
            .into_iter()
            .find(|d| d.object == "calls")
            .unwrap();
        found.insert(
            ("calls".into(), String::new()),
            ("r".into(), calls.description),
        );
        found.insert(("calls".into(), "uid".into()), ("r".into(), String::new()));
        found.insert(
            ("call_results".into(), String::new()),
            ("v".into(), String::new()),
        );
        let sql = statements(&found);
        assert_eq!(sql.len(), 2, "{sql:?}");
        assert!(
            sql[0].starts_with("COMMENT ON VIEW \"call_results\" IS '"),
            "{sql:?}"
        );
        assert!(
            sql[1].starts_with("COMMENT ON COLUMN \"calls\".\"uid\" IS '"),
            "{sql:?}"
        );
    }
}
