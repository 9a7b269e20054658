//! Snapshots: every row of the contract tables, and their differences — how tests and the
//! benches compare two warehouses, or a warehouse with the truth.

use std::collections::BTreeMap;

use rusqlite::types::Value;
use uuid::Uuid;

use super::error::{SqlContext, WarehouseError};
use super::handle::Warehouse;

/// One row: column name → value.
pub type Row = BTreeMap<String, Value>;

/// Every row of the contract tables (without `synced_at`, which differs between equal
/// warehouses), sorted by primary key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub calls: Vec<Row>,
    pub call_custom_parameters: Vec<Row>,
    pub call_attempts: Vec<Row>,
    pub attempt_outcomes: Vec<Row>,
    pub attempt_variables: Vec<Row>,
    pub call_notifications: Vec<Row>,
}

impl Warehouse {
    /// The contract tables' rows, for one schedule or all.
    pub fn snapshot(&self, schedule: Option<Uuid>) -> Result<Snapshot, WarehouseError> {
        let filter = schedule.map(|s| s.to_string());
        let calls_of = "(SELECT id FROM calls WHERE ?1 IS NULL OR schedule_uid = ?1)";
        let read = |table: &str, parent: &str, order: &str| {
            self.rows(
                &format!("SELECT * FROM {table} WHERE {parent} IN {calls_of} ORDER BY {order}"),
                filter.as_deref(),
            )
        };
        Ok(Snapshot {
            calls: read("calls", "id", "uid")?,
            call_custom_parameters: read("call_custom_parameters", "call_id", "call_uid, name")?,
            call_attempts: read("call_attempts", "call_id", "uid")?,
            attempt_outcomes: read("attempt_outcomes", "call_id", "uid")?,
            attempt_variables: read("attempt_variables", "call_id", "uid")?,
            call_notifications: read("call_notifications", "call_id", "uid")?,
        })
    }

    fn rows(&self, sql: &str, schedule: Option<&str>) -> Result<Vec<Row>, WarehouseError> {
        let mut stmt = self
            .conn
            .prepare(sql)
            .sql(&self.path, "reading a snapshot")?;
        let names: Vec<String> = stmt.column_names().iter().map(|c| c.to_string()).collect();
        stmt.query_map([schedule], |r| {
            let mut row = Row::new();
            for (i, name) in names.iter().enumerate() {
                // Ids are the order rows were inserted in, not content: two warehouses with
                // the same rows may number them differently.
                if !matches!(name.as_str(), "synced_at" | "id" | "call_id" | "attempt_id") {
                    row.insert(name.clone(), r.get::<_, Value>(i)?);
                }
            }
            Ok(row)
        })
        .and_then(Iterator::collect)
        .sql(&self.path, "reading a snapshot")
    }
}

impl Snapshot {
    /// Up to 20 differences, `table key: column: left != right`, for readable test failures.
    pub fn diff(&self, other: &Snapshot) -> Vec<String> {
        let tables = [
            ("calls", &self.calls, &other.calls),
            (
                "call_custom_parameters",
                &self.call_custom_parameters,
                &other.call_custom_parameters,
            ),
            ("call_attempts", &self.call_attempts, &other.call_attempts),
            (
                "attempt_outcomes",
                &self.attempt_outcomes,
                &other.attempt_outcomes,
            ),
            (
                "attempt_variables",
                &self.attempt_variables,
                &other.attempt_variables,
            ),
            (
                "call_notifications",
                &self.call_notifications,
                &other.call_notifications,
            ),
        ];
        let mut out = Vec::new();
        for (table, left, right) in tables {
            diff_table(table, left, right, &mut out);
        }
        out.truncate(20);
        out
    }
}

fn diff_table(table: &str, left: &[Row], right: &[Row], out: &mut Vec<String>) {
    let key = |row: &Row| {
        ["uid", "call_uid", "name"]
            .iter()
            .filter_map(|k| row.get(*k).map(|v| format!("{v:?}")))
            .collect::<Vec<_>>()
            .join("/")
    };
    let l: BTreeMap<String, &Row> = left.iter().map(|r| (key(r), r)).collect();
    let r: BTreeMap<String, &Row> = right.iter().map(|r| (key(r), r)).collect();
    for (k, lrow) in &l {
        match r.get(k) {
            None => out.push(format!("{table} {k}: only on the left")),
            Some(rrow) => {
                for (col, lv) in lrow.iter() {
                    let rv = rrow.get(col);
                    if rv != Some(lv) {
                        out.push(format!("{table} {k}: {col}: {lv:?} != {rv:?}"));
                    }
                }
            }
        }
    }
    for k in r.keys().filter(|k| !l.contains_key(*k)) {
        out.push(format!("{table} {k}: only on the right"));
    }
}
