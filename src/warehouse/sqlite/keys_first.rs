//! Schema 9's migration: the four WITHOUT ROWID child tables with their key columns declared
//! first (`migrations/0009-keys-declared-first/up.sql` says why).
//!
//! The tables' one definition is in the migration's directory, a file each. Schema 6's copy
//! (`layout_v6`, in the same transaction when a version 5 file is migrated) creates the tables
//! from these files before it fills them, so such a file has nothing to rebuild here: schema 9
//! costs it nothing. A file at schema 6, 7 or 8 has each table whose declared order is not
//! already key first copied into its new form, in key order; the views reading the tables are
//! dropped first and created again as schema 7 made them.

use rusqlite::Transaction;
use rusqlite_migration::HookResult;

/// The migration's own SQL (comments only: the hook does the work).
pub(super) const UP: &str = include_str!("../../../migrations/0009-keys-declared-first/up.sql");

/// The views reading three of the tables, as schema 7 created them.
const VIEWS: &str = include_str!("../../../migrations/0009-keys-declared-first/views.sql");

/// The views in [`VIEWS`]: a table they read cannot be renamed while they exist.
const VIEW_NAMES: [&str; 3] = [
    "outcome_results",
    "variable_results",
    "notification_results",
];

/// A child table and its schema 9 definition.
struct ChildTable {
    name: &'static str,
    create: &'static str,
}

/// The four WITHOUT ROWID child tables.
const TABLES: [ChildTable; 4] = [
    ChildTable {
        name: "call_custom_parameters",
        create: include_str!(
            "../../../migrations/0009-keys-declared-first/call_custom_parameters.sql"
        ),
    },
    ChildTable {
        name: "attempt_outcomes",
        create: include_str!("../../../migrations/0009-keys-declared-first/attempt_outcomes.sql"),
    },
    ChildTable {
        name: "attempt_variables",
        create: include_str!("../../../migrations/0009-keys-declared-first/attempt_variables.sql"),
    },
    ChildTable {
        name: "call_notifications",
        create: include_str!("../../../migrations/0009-keys-declared-first/call_notifications.sql"),
    },
];

/// Which form schema 6's copy creates the child tables in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChildTables {
    /// Schema 9's, key columns first: what this build writes (schema 9 then has nothing to do).
    KeyFirst,
    /// Schema 6's own, as callsync 6 to 8 left it (tests make such files).
    #[cfg_attr(not(test), allow(dead_code))]
    AsSchema6,
}

/// Replaces the four child tables schema 6 has just created, empty, by schema 9's form.
pub(super) fn create_key_first(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    for table in &TABLES {
        tx.execute_batch(&format!("DROP TABLE {};", table.name))?;
        tx.execute_batch(table.create)?;
    }
    Ok(())
}

/// The migration's hook: rebuilds each table whose columns are not declared key first.
pub(super) fn rebuild_where_needed(tx: &Transaction<'_>) -> HookResult {
    let mut pending = Vec::new();
    for table in &TABLES {
        if !declares_key_first(tx, table.name)? {
            pending.push(table);
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    for view in VIEW_NAMES {
        tx.execute_batch(&format!("DROP VIEW {view};"))?;
    }
    for table in pending {
        rebuild(tx, table)?;
    }
    tx.execute_batch(VIEWS)?;
    Ok(())
}

/// Whether `table`'s declared columns are its key columns in key order, then the others.
fn declares_key_first(tx: &Transaction<'_>, table: &str) -> rusqlite::Result<bool> {
    let mut stmt = tx.prepare("SELECT pk FROM pragma_table_info(?1) ORDER BY cid")?;
    let pks: Vec<i64> = stmt
        .query_map([table], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let keys = pks.iter().filter(|&&pk| pk > 0).count();
    Ok(pks.iter().enumerate().all(|(place, &pk)| {
        if place < keys {
            usize::try_from(pk).is_ok_and(|pk| pk == place + 1)
        } else {
            pk == 0
        }
    }))
}

/// Copies `table` into its schema 9 form, in key order (the new B-tree is appended to), and
/// creates its indexes again with their own SQL.
fn rebuild(tx: &Transaction<'_>, table: &ChildTable) -> HookResult {
    let name = table.name;
    let indexes: Vec<String> = tx
        .prepare(
            "SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1
               AND sql IS NOT NULL ORDER BY name",
        )?
        .query_map([name], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    tracing::info!(
        table = name,
        "migrating to schema 9: declaring the key columns first"
    );
    let old = format!("{name}_v8");
    tx.execute_batch(&format!("ALTER TABLE {name} RENAME TO {old};"))?;
    tx.execute_batch(table.create)?;
    let columns = joined(
        tx,
        "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
        name,
    )?;
    let key = joined(
        tx,
        "SELECT name FROM pragma_table_info(?1) WHERE pk > 0 ORDER BY pk",
        name,
    )?;
    let copied = tx.execute(
        &format!("INSERT INTO {name} ({columns}) SELECT {columns} FROM {old} ORDER BY {key}"),
        [],
    )?;
    tx.execute_batch(&format!("DROP TABLE {old};"))?;
    for index in &indexes {
        tx.execute_batch(index)?;
    }
    tracing::debug!(
        table = name,
        rows = copied,
        "migration to schema 9: a table copied"
    );
    Ok(())
}

/// The names `query` returns for `table`, comma-separated.
fn joined(tx: &Transaction<'_>, query: &str, table: &str) -> rusqlite::Result<String> {
    let names: Vec<String> = tx
        .prepare(query)?
        .query_map([table], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables of `conn` that schema 9's hook would rebuild.
    fn pending(conn: &mut rusqlite::Connection) -> Vec<&'static str> {
        let tx = conn.transaction().unwrap();
        TABLES
            .iter()
            .filter(|table| !declares_key_first(&tx, table.name).unwrap())
            .map(|table| table.name)
            .collect()
    }

    /// This build's schema 6 copy creates the child tables key first: a version 5 file reaches
    /// schema 9 without a second copy. A file an older callsync left at schema 6 to 8 has all
    /// four rebuilt.
    #[test]
    fn only_tables_an_older_callsync_created_are_rebuilt() {
        for version in [6, 8] {
            let mut conn = rusqlite::Connection::open_in_memory().unwrap();
            super::super::schema::migrations(ChildTables::KeyFirst)
                .to_version(&mut conn, version)
                .unwrap();
            assert_eq!(
                pending(&mut conn),
                Vec::<&str>::new(),
                "this build, {version}"
            );

            let mut conn = rusqlite::Connection::open_in_memory().unwrap();
            super::super::schema::migrate_to(&mut conn, version).unwrap();
            assert_eq!(
                pending(&mut conn),
                [
                    "call_custom_parameters",
                    "attempt_outcomes",
                    "attempt_variables",
                    "call_notifications"
                ],
                "as released, {version}"
            );
        }
    }
}
