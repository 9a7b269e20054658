//! What analysts meet beyond the canned queries: every PostgreSQL table, view and column
//! described (`COMMENT ON`) with the text Datasette shows (`contrib/datasette/metadata.json`,
//! one source); the BI role's script run for an owner and a database of any name; and the
//! per-schedule outcome pivot (`schedule_outcomes`) equal to the simulator's truth on both
//! back ends.

use std::collections::BTreeMap;
use std::process::Command;

use callsync::simulator::SimulatorOptions;
use callsync::warehouse::descriptions;
use callsync::warehouse::postgres::{LOCAL_DAY_FUNCTION, PgWarehouse, postgres_only};
use uuid::Uuid;

use crate::harness::{Dest, TestEnv};
use crate::pg;

#[test]
fn every_postgres_table_view_and_column_is_described_as_datasette_describes_it() {
    if !pg::available("described::comments") {
        return;
    }
    let db = pg::database();
    PgWarehouse::open(&db.target()).expect("a new warehouse");
    let found = pg::query(
        &db,
        "SELECT c.relname::text, '', obj_description(c.oid, 'pg_class')
         FROM pg_class AS c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v')
         UNION ALL
         SELECT c.relname::text, a.attname::text, col_description(c.oid, a.attnum)
         FROM pg_class AS c
         JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v')
         ORDER BY 1, 2",
    );
    let source: BTreeMap<(String, String), String> = descriptions::shared()
        .into_iter()
        .chain(postgres_only())
        .flat_map(|d| {
            let object = d.object.clone();
            std::iter::once(((object.clone(), String::new()), d.description)).chain(
                d.columns
                    .into_iter()
                    .map(move |(c, about)| ((object.clone(), c), about)),
            )
        })
        .collect();
    assert!(found.len() > 200, "{} objects and columns", found.len());
    for row in &found {
        let key = (row[0].clone().unwrap(), row[1].clone().unwrap());
        let comment = row[2].as_deref();
        assert!(
            comment.is_some_and(|c| !c.trim().is_empty()),
            "{key:?} has no description: add it to contrib/datasette/metadata.json (or, for a PostgreSQL-only table, to warehouse/postgres/comments.rs)"
        );
        assert_eq!(comment, source.get(&key).map(String::as_str), "{key:?}");
    }
    let function = pg::query(
        &db,
        "SELECT obj_description('local_day(timestamptz)'::regprocedure, 'pg_proc')",
    );
    assert_eq!(function[0][0].as_deref(), Some(LOCAL_DAY_FUNCTION));
    // A comment changed by hand is put back at the next start; the others are left alone.
    pg::query(&db, "COMMENT ON COLUMN calls.uid IS 'changed'");
    PgWarehouse::open(&db.target()).expect("opens again");
    let uid = pg::query(
        &db,
        "SELECT col_description('calls'::regclass, 1), (SELECT attname::text FROM pg_attribute WHERE attrelid = 'calls'::regclass AND attnum = 1)",
    );
    assert_eq!(uid[0][1].as_deref(), Some("uid"));
    assert_eq!(
        uid[0][0].as_ref(),
        source.get(&("calls".to_owned(), "uid".to_owned()))
    );
}

/// `psql` on the test server's database `db`, with `-v` variables, running the BI role's
/// script: (success, stderr).
pub fn bi_role_script(db: &str, vars: &[(&str, &str)]) -> (bool, String) {
    let server = pg::server();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/postgres/bi-role.sql");
    let mut psql = Command::new("psql");
    psql.arg("-X")
        .arg("-q")
        .arg("-h")
        .arg(&server.socket_dir)
        .args(["-U", &server.superuser, "-d", db, "-f", script]);
    if let Some(port) = server.port {
        psql.args(["-p", &port.to_string()]);
    }
    for (name, value) in vars {
        psql.args(["-v", &format!("{name}={value}")]);
    }
    let out = psql
        .output()
        .expect("psql runs (PostgreSQL's bin directory on the PATH)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_bi_role_script_takes_the_owner_and_the_database_as_variables() {
    if !pg::available("described::bi_role_script") {
        return;
    }
    let db = pg::database();
    let owner = format!("owner_{}", db.name);
    pg::query(&db, &format!("CREATE ROLE {owner} LOGIN"));
    pg::query(&db, &format!("GRANT CREATE ON SCHEMA public TO {owner}"));

    let (ok, stderr) = bi_role_script(&db.name, &[("db", &db.name)]);
    assert!(!ok, "ran without an owner");
    assert!(stderr.contains("-v owner="), "{stderr}");

    let (ok, stderr) = bi_role_script(&db.name, &[("owner", &owner), ("db", &db.name)]);
    assert!(ok, "{stderr}");
    // A table the owner creates later is readable by the BI role, and the database is open
    // to it.
    pg::query(
        &db,
        &format!("SET ROLE {owner}; CREATE TABLE later (x int); RESET ROLE"),
    );
    let granted = pg::query(
        &db,
        &format!(
            "SELECT has_table_privilege('callsync_reader', 'later', 'SELECT'),
                    has_database_privilege('callsync_reader', '{}', 'CONNECT'),
                    has_table_privilege('callsync_reader', 'later', 'INSERT')",
            db.name
        ),
    );
    assert_eq!(
        granted,
        [[Some("t".into()), Some("t".into()), Some("f".into())]]
    );
}

conformance!(
    the_outcome_pivot_counts_each_schedules_outcomes_in_columns,
    the_outcome_pivot_counts_each_schedules_outcomes_in_columns
);

/// `schedule_outcomes` on either back end: per schedule, the warehouse's five most frequent
/// outcomes (ties by name) counted in columns, the rest in `other_outcomes`; test calls left
/// out.
async fn the_outcome_pivot_counts_each_schedules_outcomes_in_columns(dest: Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 3,
            calls_per_schedule: 40,
            seed: 11,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    env.pass_ok(&s).await;

    // The truth: outcome counts per schedule, and the ranking over all schedules.
    let mut per_schedule: BTreeMap<Uuid, BTreeMap<String, i64>> = BTreeMap::new();
    let mut calls_with: BTreeMap<Uuid, i64> = BTreeMap::new();
    for schedule in &s {
        for call in env.sim.truth(*schedule) {
            if call.is_test_call == Some(true) {
                continue;
            }
            let names: Vec<String> = call
                .outbound_call_attempts
                .iter()
                .flatten()
                .flat_map(|a| a.call_outcomes.iter().flatten())
                .map(|o| o.name.clone())
                .collect();
            if !names.is_empty() {
                *calls_with.entry(*schedule).or_default() += 1;
            }
            for name in names {
                *per_schedule
                    .entry(*schedule)
                    .or_default()
                    .entry(name)
                    .or_default() += 1;
            }
        }
    }
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for counts in per_schedule.values() {
        for (name, n) in counts {
            *totals.entry(name.clone()).or_default() += n;
        }
    }
    let mut ranked: Vec<(String, i64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    assert!(
        ranked.len() >= 2,
        "the simulator records outcomes: {ranked:?}"
    );
    let want: Vec<Vec<Option<String>>> = per_schedule
        .iter()
        .map(|(schedule, counts)| {
            let mut row = vec![
                Some(schedule.to_string()),
                Some(calls_with[schedule].to_string()),
                Some(counts.values().sum::<i64>().to_string()),
            ];
            for k in 0..5 {
                let name = ranked.get(k).map(|(n, _)| n.clone());
                let count = name.as_ref().and_then(|n| counts.get(n)).copied();
                row.push(name);
                row.push(Some(count.unwrap_or(0).to_string()));
            }
            let named: i64 = ranked
                .iter()
                .take(5)
                .filter_map(|(n, _)| counts.get(n))
                .sum();
            row.push(Some((counts.values().sum::<i64>() - named).to_string()));
            row
        })
        .collect();

    let columns = "schedule_uid, calls_with_outcomes, outcomes, outcome_1, outcome_1_count, \
                   outcome_2, outcome_2_count, outcome_3, outcome_3_count, outcome_4, \
                   outcome_4_count, outcome_5, outcome_5_count, other_outcomes";
    let have: Vec<Vec<Option<String>>> = match &env.pg {
        None => {
            let conn = rusqlite::Connection::open(env.warehouse_path()).unwrap();
            let mut stmt = conn
                .prepare(&format!(
                    "SELECT {columns} FROM schedule_outcomes ORDER BY schedule_uid"
                ))
                .unwrap();
            stmt.query_map([], |r| {
                (0..14)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i).map(|v| match v {
                            rusqlite::types::Value::Null => None,
                            rusqlite::types::Value::Integer(n) => Some(n.to_string()),
                            rusqlite::types::Value::Text(t) => Some(t),
                            other => Some(format!("{other:?}")),
                        })
                    })
                    .collect()
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        }
        Some(db) => {
            let text_columns = columns
                .split(", ")
                .map(|c| format!("{}::text", c.trim()))
                .collect::<Vec<_>>()
                .join(", ");
            pg::query(
                db,
                &format!(
                    "SELECT {text_columns} FROM schedule_outcomes ORDER BY schedule_uid::text"
                ),
            )
        }
    };
    assert_eq!(have, want);
}
