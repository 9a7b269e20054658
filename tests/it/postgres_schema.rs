//! `warehouse.schema` on PostgreSQL: the warehouse in a schema of the analysts' choosing —
//! every table, view, function, comment and callsync's own bookkeeping there and nothing in
//! `public`; two warehouses in two schemas of one database, each synced whole, their claims
//! apart though advisory locks belong to the database; a name that is no plain identifier
//! refused as a configuration error naming the key.

use callsync::simulator::SimulatorOptions;
use callsync::warehouse::postgres::{PgWarehouse, latest_version};

use crate::cli::{callsync, stderr};
use crate::harness::{Dest, TestEnv};
use crate::pg::{self, Database};

fn options(schedules: usize, calls: usize) -> SimulatorOptions {
    SimulatorOptions {
        schedules,
        calls_per_schedule: calls,
        seed: 11,
        ..SimulatorOptions::default()
    }
}

/// One value of `sql`'s answer in `db` (its warehouse's schema first on the search path).
fn one(db: &Database, sql: &str) -> String {
    let rows = pg::query(db, sql);
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0].clone().unwrap_or_default()
}

/// What the database holds in `schema`: its relations and functions, by name.
fn objects_in(db: &Database, schema: &str) -> Vec<String> {
    pg::query(
        db,
        &format!(
            "SELECT relname::text FROM pg_class WHERE relnamespace = '{schema}'::regnamespace
             UNION ALL
             SELECT proname::text FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace
             ORDER BY 1"
        ),
    )
    .into_iter()
    .filter_map(|row| row[0].clone())
    .collect()
}

/// A sync into `warehouse.schema = "analytics"` holds exactly what the service shows, and
/// everything callsync keeps — tables, views, `local_day`, `callsync_schema`, the claims'
/// fencing tokens, the descriptions — lives in `analytics`: `public` holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_into_a_schema_of_its_own_holds_the_truth_and_leaves_public_empty() {
    if !pg::available("postgres_schema::a_sync_into_a_schema_of_its_own") {
        return;
    }
    let mut env = TestEnv::start_on(options(2, 60), Dest::Postgres).await;
    let db = env.pg.clone().expect("a database").in_schema("analytics");
    env.use_postgres(db.clone());
    let schedules = env.schedules();
    let first = env.pass_ok(&schedules).await;
    assert_eq!(
        first.iter().map(|r| r.stats.calls_written).sum::<u64>(),
        120
    );
    env.assert_matches_truth(&schedules);
    let second = env.pass_ok(&schedules).await;
    assert!(
        second.iter().all(|r| r.stats.calls_written == 0),
        "{second:?}"
    );

    let public = db.in_schema("public");
    assert_eq!(objects_in(&public, "public"), Vec::<String>::new());
    let ours = objects_in(&db, "analytics");
    for name in [
        "calls",
        "call_results",
        "sync_runs",
        "sync_checkpoints",
        "callsync_schema",
        "schedule_claims",
        "local_day",
    ] {
        assert!(ours.iter().any(|o| o == name), "{name} not in {ours:?}");
    }
    assert_eq!(
        one(&db, "SELECT version FROM analytics.callsync_schema"),
        latest_version().to_string()
    );
    assert_eq!(
        one(&db, "SELECT count(*) FROM analytics.schedule_claims"),
        "2",
        "each schedule's claim took its fencing token in analytics"
    );
    assert_eq!(
        one(
            &db,
            "SELECT count(*) FROM analytics.sync_runs WHERE outcome = 'completed'"
        ),
        "4"
    );
    assert_eq!(
        one(
            &db,
            "SELECT col_description('analytics.calls'::regclass, 1) IS NOT NULL
                AND obj_description('analytics.call_results'::regclass, 'pg_class') IS NOT NULL"
        ),
        "t",
        "the descriptions are on analytics' tables"
    );

    // contrib/postgres/bi-role.sql grants the BI role the schema it is told (`-v schema=`).
    let reads = "SELECT has_schema_privilege('callsync_reader', 'analytics', 'USAGE')
                    AND has_table_privilege('callsync_reader', 'analytics.call_results', 'SELECT')";
    pg::query(
        &db,
        "REVOKE ALL ON SCHEMA analytics FROM callsync_reader;
         REVOKE ALL ON ALL TABLES IN SCHEMA analytics FROM callsync_reader",
    );
    assert_eq!(one(&db, reads), "f");
    let superuser = pg::server().superuser.clone();
    let (ran, stderr) = crate::described::bi_role_script(
        &db.name,
        &[
            ("owner", &superuser),
            ("db", &db.name),
            ("schema", "analytics"),
        ],
    );
    assert!(ran, "bi-role.sql: {stderr}");
    assert_eq!(one(&db, reads), "t", "bi-role.sql granted analytics");
}

/// Two warehouses in two schemas of one database, each syncing the same schedules: each
/// holds the truth. A schedule claimed in `north` is walked into `south` all the same (the
/// claims of two warehouses are apart, though advisory locks belong to the database), while a
/// claim held in `south` itself keeps a second process of `south` off it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_warehouses_in_two_schemas_of_one_database_both_sync_fully() {
    if !pg::available("postgres_schema::two_warehouses_in_two_schemas") {
        return;
    }
    let mut env = TestEnv::start_on(options(3, 40), Dest::Postgres).await;
    let db = env.pg.clone().expect("a database");
    let (north, south) = (db.in_schema("north"), db.in_schema("south"));
    let schedules = env.schedules();

    // Another process walking every schedule into north, its claims held.
    let north_process = PgWarehouse::open(&north.target()).expect("north opens");
    let north_claims: Vec<_> = schedules
        .iter()
        .map(|s| north_process.claim(*s).expect("claims").expect("free"))
        .collect();
    env.use_postgres(south.clone());
    env.pass_ok(&schedules).await;
    env.assert_matches_truth(&schedules);
    drop(north_claims);
    drop(north_process);

    env.use_postgres(north.clone());
    env.pass_ok(&schedules).await;
    env.assert_matches_truth(&schedules);
    env.use_postgres(south.clone());
    env.assert_matches_truth(&schedules);

    // Within one warehouse, a claim still keeps another process off its schedule.
    let south_process = PgWarehouse::open(&south.target()).expect("south opens");
    let held = south_process
        .claim(schedules[0])
        .expect("claims")
        .expect("free");
    let reports = env.pass(&schedules[..1]).await;
    assert!(
        !reports[0].succeeded(),
        "walked while another process of south held it: {reports:?}"
    );
    drop(held);
}

/// `warehouse.schema` that is not a plain identifier stops every command with exit 2, naming
/// the key and what it allows, before anything is created; a plain one is checked, created and
/// synced into by the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_is_no_plain_identifier_is_a_config_error_naming_the_key() {
    if !pg::available("postgres_schema::a_schema_that_is_no_plain_identifier") {
        return;
    }
    let mut env = TestEnv::start_on(options(1, 20), Dest::Postgres).await;
    let db = env.pg.clone().expect("a database");
    for (bad, says) in [
        (
            "Sales",
            "must be a plain identifier: a lower-case letter or _ first, then lower-case letters, digits or _, at most 63 bytes",
        ),
        (
            "pg_calls",
            "may not begin with pg_, which PostgreSQL reserves for its own schemas",
        ),
    ] {
        env.use_postgres(db.in_schema(bad));
        let config = env.write_config("");
        let c = config.to_str().unwrap();
        for command in ["sync", "check", "status"] {
            let out = callsync(&["--config", c, command]).await;
            assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(
                err.contains(&format!("config: warehouse.schema: \"{bad}\" {says}")),
                "{command}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{command}: {err}");
        }
    }
    assert_eq!(
        one(
            &db,
            "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'
               AND nspname NOT IN ('public', 'information_schema')"
        ),
        "0",
        "no schema was created"
    );

    let good = db.in_schema("call_results_2026");
    env.use_postgres(good.clone());
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let out = callsync(&["--config", c, "check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let checked = String::from_utf8_lossy(&out.stdout).into_owned();
    let shown = good.target().display().to_owned();
    assert!(shown.ends_with(" (schema call_results_2026)"), "{shown}");
    assert!(
        checked.contains(&format!(
            "{shown} answers, holds no warehouse yet, and this role may create it"
        )),
        "{checked}"
    );
    let out = callsync(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    env.assert_matches_truth(&env.schedules());
    assert_eq!(objects_in(&db, "public"), Vec::<String>::new());
}
