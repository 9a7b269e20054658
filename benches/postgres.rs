//! The PostgreSQL warehouse's write half (not a test): pre-parsed pages into a new database
//! with `PgWarehouse::write_hashed_page` (100 calls a page, each with its checkpoint, one
//! transaction a page), measured against a reference in the same run that COPYs (binary) the
//! same rows bare into the same schema in a new database, one transaction, no upsert.
//!
//! Needs a server: `CALLSYNC_BENCH_POSTGRES` is a URI of a role that may create databases,
//! e.g. a throw-away local one on a Unix socket:
//!
//! ```sh
//! initdb -D /tmp/pg -A trust -U postgres && pg_ctl -D /tmp/pg -o "-k /tmp -c listen_addresses=''" start
//! CALLSYNC_BENCH_POSTGRES='postgresql://postgres@/postgres?host=/tmp' cargo bench --bench postgres
//! ```
//!
//! Then, end to end, the release binary's first sync (`callsync sync`, default configuration)
//! of the same calls from the simulator into a third new database.
//!
//! `CALLS` [20000] changes the size. Prints calls/s of each and the ratios (goal: BENCHMARKS.md, "First sync, PostgreSQL").

use std::time::{Duration, Instant};

use callsync::service::{OutboundCall, Timestamp};
use callsync::simulator::{CallShape, Simulator, SimulatorOptions};
use callsync::warehouse::postgres::{PgTarget, PgWarehouse};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

#[path = "common/pages.rs"]
mod pages;
#[path = "common/pg.rs"]
mod pg;
use pg::{admin_sql, connect, with_dbname};

const PAGE: usize = 100;

fn main() {
    let Ok(admin) = std::env::var("CALLSYNC_BENCH_POSTGRES") else {
        eprintln!("set CALLSYNC_BENCH_POSTGRES to a server's URI (see benches/postgres.rs)");
        std::process::exit(2);
    };
    let calls: usize = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (sim, schedule, truth) = runtime.block_on(seeded_calls(calls));
    let admin_target = PgTarget::parse(&admin, None).expect("CALLSYNC_BENCH_POSTGRES parses");
    let suffix = std::process::id();
    let (ours, reference, synced) = (
        format!("bench_write_{suffix}"),
        format!("bench_copy_{suffix}"),
        format!("bench_sync_{suffix}"),
    );
    runtime.block_on(admin_sql(
        &admin,
        &format!("CREATE DATABASE {ours}; CREATE DATABASE {reference}; CREATE DATABASE {synced};"),
    ));

    // The reference: the same schema, migrated; then the rows COPYed bare.
    let reference_target = admin_target.with_dbname(&reference);
    drop(PgWarehouse::open(&reference_target).expect("the reference migrates"));
    let reference_url = with_dbname(&admin, &reference);
    let copy_took = runtime.block_on(copy_bare(&reference_url, schedule, &truth));

    let target = admin_target.with_dbname(&ours);
    let mut warehouse = PgWarehouse::open(&target).expect("the warehouse opens");
    // A page is written only under its schedule's claim, as a pass writes it.
    let claim = warehouse.claim(schedule).expect("the claim is taken");
    let claim = claim.expect("the schedule is free");
    let synced_at = Timestamp::now();
    let mut pages = pages::unhashed(schedule, &truth, PAGE, synced_at);
    let started = Instant::now();
    let mut written = 0;
    for page in &mut pages {
        pages::hash(page);
        written += warehouse
            .write_hashed_page(page)
            .expect("a page is written")
            .calls_written;
    }
    let took = started.elapsed();
    assert_eq!(written, truth.len() as u64);
    // Its lock session too, before the database is dropped.
    drop(claim);
    drop(warehouse);

    // End to end: the release binary's first sync of the simulator's schedule, as a user runs
    // it (`callsync sync`, default configuration), into a third new database.
    let synced_url = with_dbname(&admin, &synced);
    let sync_took = first_sync(&sim, &synced_url);
    let synced_calls = runtime.block_on(async {
        let client = connect(&synced_url).await;
        let row = client
            .query_one("SELECT count(*) FROM calls", &[])
            .await
            .expect("calls counted");
        row.get::<_, i64>(0)
    });
    assert_eq!(
        synced_calls,
        truth.len() as i64,
        "the sync wrote every call"
    );
    runtime.block_on(sim.shutdown());
    runtime.block_on(admin_sql(
        &admin,
        &format!("DROP DATABASE {ours}; DROP DATABASE {reference}; DROP DATABASE {synced};"),
    ));

    let rate = |took: Duration| truth.len() as f64 / took.as_secs_f64();
    println!("\n## postgres: {calls} pre-parsed calls, {PAGE} per page, into a new database\n");
    println!(
        "| calls | COPY reference calls/s | write_page calls/s | × reference | first sync (`callsync sync`) s | calls/s | × reference |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {calls} | {:.0} | {:.0} | {:.2} | {:.1} | {:.0} | {:.2} |",
        rate(copy_took),
        rate(took),
        rate(took) / rate(copy_took),
        sync_took.as_secs_f64(),
        rate(sync_took),
        rate(sync_took) / rate(copy_took)
    );
}

/// `callsync sync` of the release binary (or `BENCH_BINARY`) against `sim`, writing into the
/// database at `url`: its wall time.
fn first_sync(sim: &Simulator, url: &str) -> Duration {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("callsync.toml");
    let schedules: Vec<String> = sim
        .schedule_uids()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect();
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n[warehouse]\nurl = \"{url}\"\n[sync]\nschedules = [{}]\n[log]\nlevel = \"warn\"\n",
            sim.base_url(),
            sim.access_token(),
            schedules.join(", ")
        ),
    )
    .expect("the config is written");
    let binary =
        std::env::var_os("BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_callsync").into());
    let started = Instant::now();
    let status = std::process::Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("sync")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("callsync runs");
    let took = started.elapsed();
    assert!(status.success(), "callsync sync: {status}");
    took
}

/// The simulator (kept running for the end-to-end sync) and its schedule's calls in the
/// order a pass lists them.
async fn seeded_calls(calls: usize) -> (Simulator, Uuid, Vec<OutboundCall>) {
    let sim = Simulator::start(
        "127.0.0.1:0".parse().expect("loopback"),
        SimulatorOptions {
            schedules: 1,
            calls_per_schedule: calls,
            seed: 42,
            shape: CallShape::Eighteen,
            ..SimulatorOptions::default()
        },
    )
    .await
    .expect("the simulator starts");
    let schedule = sim.schedule_uids()[0];
    let mut truth = sim.truth(schedule);
    truth.sort_by_key(|c| (c.updated_at, c.uid));
    (sim, schedule, truth)
}

fn at(t: Option<Timestamp>) -> Option<OffsetDateTime> {
    t.map(Timestamp::as_offset_date_time)
}

fn json(v: &Option<Value>) -> Option<Value> {
    v.clone().filter(|v| !v.is_null())
}

/// The same rows, COPYed bare (binary) into the schema in one transaction; ids are the
/// identities a new database assigns in COPY order (1, 2, …).
async fn copy_bare(url: &str, schedule: Uuid, calls: &[OutboundCall]) -> Duration {
    let mut client = connect(url).await;
    let started = Instant::now();
    let tx = client.transaction().await.expect("begin");
    let copy = async |sql: &str, types: &[Type], rows: Vec<Vec<Box<dyn ToSql + Sync + Send>>>| {
        let sink = tx.copy_in(sql).await.expect("COPY starts");
        let writer = BinaryCopyInWriter::new(sink, types);
        futures::pin_mut!(writer);
        for row in &rows {
            let refs: Vec<&(dyn ToSql + Sync)> =
                row.iter().map(|v| &**v as &(dyn ToSql + Sync)).collect();
            writer.as_mut().write(&refs).await.expect("a row");
        }
        writer.finish().await.expect("COPY ends");
    };
    let now = OffsetDateTime::now_utc();
    let (mut call_rows, mut params, mut attempts, mut outcomes, mut variables, mut notes) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let mut attempt_id = 0i64;
    for (i, c) in calls.iter().enumerate() {
        let call_id = i as i64 + 1;
        let info = &c.outbound_call_info;
        let list = c.outbound_call_attempts.as_deref().unwrap_or_default();
        let b = |v: Box<dyn ToSql + Sync + Send>| v;
        call_rows.push(vec![
            b(Box::new(c.uid)),
            b(Box::new(schedule)),
            b(Box::new(c.external_id.clone())),
            b(Box::new(c.status.clone())),
            b(Box::new(c.progress.clone())),
            b(Box::new(c.is_test_call)),
            b(Box::new(at(c.cooldown_until))),
            b(Box::new(json(&c.delay))),
            b(Box::new(json(&c.priority))),
            b(Box::new(c.attempts_remaining)),
            b(Box::new(
                c.retry_intervals.as_ref().map(|r| serde_json::json!(r)),
            )),
            b(Box::new(c.created_at.as_offset_date_time())),
            b(Box::new(c.updated_at.as_offset_date_time())),
            b(Box::new(info.phone_number.clone())),
            b(Box::new(info.phone_number.clone())),
            b(Box::new(info.full_name.clone())),
            b(Box::new(info.first_name.clone())),
            b(Box::new(info.last_name.clone())),
            b(Box::new(info.email.clone())),
            b(Box::new(at(info.event_date_time))),
            b(Box::new(list.len() as i32)),
            b(Box::new(list.last().map(|a| a.uid))),
            b(Box::new(list.last().map(|a| a.status.clone()))),
            b(Box::new(c.content_hash() as i64)),
            b(Box::new(now)),
        ]);
        for (name, value) in &info.custom_parameters {
            params.push(vec![
                b(Box::new(c.uid)),
                b(Box::new(name.clone())),
                b(Box::new(value.as_str().map(str::to_owned))),
                b(Box::new(call_id)),
            ]);
        }
        for (position, a) in list.iter().enumerate() {
            attempt_id += 1;
            attempts.push(vec![
                b(Box::new(a.uid)),
                b(Box::new(c.uid)),
                b(Box::new(position as i32)),
                b(Box::new(a.status.clone())),
                b(Box::new(at(a.started_at))),
                b(Box::new(at(a.answered_at))),
                b(Box::new(at(a.ended_at))),
                b(Box::new(a.duration)),
                b(Box::new(at(a.created_at))),
                b(Box::new(at(a.updated_at))),
                b(Box::new(json(&a.error_details))),
                b(Box::new(call_id)),
            ]);
            for o in a.call_outcomes.as_deref().unwrap_or_default() {
                outcomes.push(vec![
                    b(Box::new(o.uid)),
                    b(Box::new(a.uid)),
                    b(Box::new(c.uid)),
                    b(Box::new(o.name.clone())),
                    b(Box::new(at(o.created_at))),
                    b(Box::new(attempt_id)),
                    b(Box::new(call_id)),
                ]);
            }
            for v in a.call_attempts_variables.as_deref().unwrap_or_default() {
                variables.push(vec![
                    b(Box::new(v.uid)),
                    b(Box::new(a.uid)),
                    b(Box::new(c.uid)),
                    b(Box::new(v.name.clone())),
                    b(Box::new(v.value.as_ref().map(Value::to_string))),
                    b(Box::new(v.status.clone())),
                    b(Box::new(at(v.created_at))),
                    b(Box::new(attempt_id)),
                    b(Box::new(call_id)),
                ]);
            }
        }
        for n in c.notifications().unwrap_or_default() {
            notes.push(vec![
                b(Box::new(n.uid)),
                b(Box::new(c.uid)),
                b(Box::new(n.status.clone())),
                b(Box::new(n.message_count)),
                b(Box::new(at(n.delivered_at))),
                b(Box::new(call_id)),
            ]);
        }
    }
    use Type as T;
    copy(
        "COPY calls (uid, schedule_uid, external_id, status, progress, is_test_call, cooldown_until,
           delay, priority, attempts_remaining, retry_intervals, created_at, updated_at,
           phone_number, phone_e164, full_name, first_name, last_name, email, event_date_time,
           attempt_count, last_attempt_uid, last_attempt_status, content_hash, synced_at)
         FROM STDIN BINARY",
        &[
            T::UUID, T::UUID, T::TEXT, T::TEXT, T::TEXT, T::BOOL, T::TIMESTAMPTZ, T::JSONB,
            T::JSONB, T::INT8, T::JSONB, T::TIMESTAMPTZ, T::TIMESTAMPTZ, T::TEXT, T::TEXT,
            T::TEXT, T::TEXT, T::TEXT, T::TEXT, T::TIMESTAMPTZ, T::INT4, T::UUID, T::TEXT,
            T::INT8, T::TIMESTAMPTZ,
        ],
        call_rows,
    )
    .await;
    copy(
        "COPY call_custom_parameters (call_uid, name, value, call_id) FROM STDIN BINARY",
        &[T::UUID, T::TEXT, T::TEXT, T::INT8],
        params,
    )
    .await;
    copy(
        "COPY call_attempts (uid, call_uid, position, status, started_at, answered_at, ended_at,
           duration, created_at, updated_at, error_details, call_id) FROM STDIN BINARY",
        &[
            T::UUID,
            T::UUID,
            T::INT4,
            T::TEXT,
            T::TIMESTAMPTZ,
            T::TIMESTAMPTZ,
            T::TIMESTAMPTZ,
            T::INT8,
            T::TIMESTAMPTZ,
            T::TIMESTAMPTZ,
            T::JSONB,
            T::INT8,
        ],
        attempts,
    )
    .await;
    copy(
        "COPY attempt_outcomes (uid, attempt_uid, call_uid, name, created_at, attempt_id, call_id)
         FROM STDIN BINARY",
        &[
            T::UUID,
            T::UUID,
            T::UUID,
            T::TEXT,
            T::TIMESTAMPTZ,
            T::INT8,
            T::INT8,
        ],
        outcomes,
    )
    .await;
    copy(
        "COPY attempt_variables (uid, attempt_uid, call_uid, name, value, status, created_at,
           attempt_id, call_id) FROM STDIN BINARY",
        &[
            T::UUID,
            T::UUID,
            T::UUID,
            T::TEXT,
            T::TEXT,
            T::TEXT,
            T::TIMESTAMPTZ,
            T::INT8,
            T::INT8,
        ],
        variables,
    )
    .await;
    copy(
        "COPY call_notifications (uid, call_uid, status, message_count, delivered_at, call_id)
         FROM STDIN BINARY",
        &[T::UUID, T::UUID, T::TEXT, T::INT8, T::TIMESTAMPTZ, T::INT8],
        notes,
    )
    .await;
    tx.commit().await.expect("commit");
    started.elapsed()
}
