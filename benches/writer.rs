//! The write half alone (not a test): pre-parsed pages into a new warehouse with
//! `Warehouse::write_hashed_page` (the page a pass hands over, hashed within the measured
//! time), measured against the reference in the same run.
//!
//! `cargo bench --bench writer` (`CALLS` [200000] to change the size). The calls are the
//! simulator's seeded 18-row calls (`SHAPE=varied`: its default calls) of one schedule,
//! exactly as the service returns them, in the order a pass reads them (`updated_at`, then
//! uid), 100 per page, each page with the checkpoint a pass would give it. References: bare
//! prepared INSERTs of the same rows into a new file with schema 5 and with callsync's schema
//! (`common::reference`). Then the same pages are written a second time, unchanged: that
//! write must store nothing. Prints calls/s of each, the ratio to the (schema 6) reference,
//! and warehouse bytes per call.

mod common;
#[path = "common/pages.rs"]
mod pages;

use std::path::Path;
use std::time::{Duration, Instant};

use callsync::service::{OutboundCall, Timestamp};
use callsync::simulator::{CallShape, Simulator, SimulatorOptions};
use callsync::warehouse::PageWrite;
use callsync::warehouse::sqlite::Warehouse;
use uuid::Uuid;

/// Calls per page, as the default `sync.page_size`.
const PAGE: usize = 100;

fn main() {
    let calls = std::env::var("CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let (schedule, truth) = seeded_calls(calls);
    if std::env::args().any(|a| a == "indexes") {
        index_costs(&truth);
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let reference5 = common::reference::insert_rate(
        &dir.path().join("reference5.db"),
        &truth,
        common::reference::Layout::Uid5,
    );
    let reference = common::reference::insert_rate(
        &dir.path().join("reference.db"),
        &truth,
        common::reference::Layout::Ordered6,
    );
    let path = dir.path().join("callsync.db");
    let (first, written) = write_all(&path, schedule, &truth);
    let (second, written_again) = write_all(&path, schedule, &truth);
    assert_eq!(
        written.calls_written,
        truth.len() as u64,
        "a first write stores every call"
    );
    assert_eq!(
        written_again.calls_written, 0,
        "an unchanged page is written again"
    );
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let rate = |took: Duration| truth.len() as f64 / took.as_secs_f64();
    println!("\n## writer: {calls} pre-parsed calls, {PAGE} per page, into a new warehouse\n");
    println!(
        "| calls | schema 5 reference calls/s | reference calls/s | write_page calls/s | × reference | second write calls/s | × faster | written again | bytes/call |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {calls} | {reference5:.0} | {reference:.0} | {:.0} | {:.2} | {:.0} | {:.1} | {} | {} |",
        rate(first),
        rate(first) / reference,
        rate(second),
        first.as_secs_f64() / second.as_secs_f64(),
        written_again.calls_written,
        bytes / truth.len().max(1) as u64
    );
}

/// The seeded calls of one schedule in the order a pass lists them.
fn seeded_calls(calls: usize) -> (Uuid, Vec<OutboundCall>) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let sim = Simulator::start(
            "127.0.0.1:0".parse().expect("a loopback address"),
            SimulatorOptions {
                schedules: 1,
                calls_per_schedule: calls,
                seed: 42,
                // `SHAPE=varied` for the simulator's default calls.
                shape: match std::env::var("SHAPE").as_deref() {
                    Ok("varied") => CallShape::Varied,
                    _ => CallShape::Eighteen,
                },
                ..SimulatorOptions::default()
            },
        )
        .await
        .expect("the simulator starts");
        let schedule = sim.schedule_uids()[0];
        let mut truth = sim.truth(schedule);
        sim.shutdown().await;
        truth.sort_by_key(|c| (c.updated_at, c.uid));
        (schedule, truth)
    })
}

/// Writes every page of `calls` into the warehouse at `path`, with the checkpoint a pass
/// would move to (the page's last `updated_at`); the time taken and what was written.
fn write_all(path: &Path, schedule: Uuid, calls: &[OutboundCall]) -> (Duration, PageWrite) {
    let mut warehouse = Warehouse::open(path, Duration::from_secs(5)).expect("the warehouse opens");
    let synced_at = Timestamp::now();
    let mut total = PageWrite::default();
    let mut pages = pages::unhashed(schedule, calls, PAGE, synced_at);
    let started = Instant::now();
    for page in &mut pages {
        pages::hash(page);
        let written = warehouse
            .write_hashed_page(page)
            .expect("a page is written");
        total.calls_written += written.calls_written;
        total.calls_unchanged += written.calls_unchanged;
    }
    let took = started.elapsed();
    // Closing checkpoints the WAL into the file, so its size counts every row.
    drop(warehouse);
    (took, total)
}

/// `cargo bench --bench writer -- indexes`: the schema 6 reference's bare INSERTs with each of
/// its optional indexes dropped, and with each index schema 5 had and schema 6 left out added
/// back: what each costs the writes and what it saves the queries it serves ([`SERVED`]),
/// both measured on every variant in one run.
fn index_costs(truth: &[OutboundCall]) {
    use common::reference::{Layout, insert_rate_altered};
    let variants = [
        ("schema 6 as shipped", ""),
        ("without calls_by_external_id", "DROP INDEX calls_by_external_id;"),
        ("without calls_by_schedule_updated", "DROP INDEX calls_by_schedule_updated;"),
        ("without call_custom_parameters_by_name", "DROP INDEX call_custom_parameters_by_name;"),
        (
            "+ call_custom_parameters (name, value) instead of (name)",
            "DROP INDEX call_custom_parameters_by_name;
             CREATE INDEX p_nv ON call_custom_parameters (name, value);",
        ),
        ("+ calls (schedule_uid, status, progress)", "CREATE INDEX c_ssp ON calls (schedule_uid, status, progress);"),
        ("+ calls (updated_at)", "CREATE INDEX c_u ON calls (updated_at);"),
        ("+ call_attempts (status)", "CREATE INDEX a_s ON call_attempts (status);"),
        (
            "+ attempt_outcomes (name), attempt_variables (name)",
            "CREATE INDEX o_n ON attempt_outcomes (name); CREATE INDEX v_n ON attempt_variables (name);",
        ),
        (
            "+ child uid indexes (outcomes, variables, notifications, attempts)",
            "CREATE INDEX o_u ON attempt_outcomes (uid); CREATE INDEX v_u ON attempt_variables (uid);
             CREATE INDEX n_u ON call_notifications (uid); CREATE INDEX a_u ON call_attempts (uid);",
        ),
    ];
    let dir = tempfile::tempdir().expect("a temp dir");
    let params = ServedParams::of(truth);
    println!(
        "\n## index costs: {} calls, bare INSERTs into schema 6, then the queries the indexes serve (ms)\n",
        truth.len()
    );
    let names: Vec<&str> = SERVED.iter().map(|q| q.name).collect();
    println!(
        "| variant | calls/s | × as shipped | bytes/call | {} |",
        names.join(" | ")
    );
    println!("|---|---:|---:|---:|{}", "---:|".repeat(SERVED.len()));
    let mut shipped = None;
    for (i, (name, alter)) in variants.iter().enumerate() {
        let path = dir.path().join(format!("v{i}.db"));
        let rate = insert_rate_altered(&path, truth, Layout::Ordered6, alter);
        let base = *shipped.get_or_insert(rate);
        let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        let times: Vec<String> = query_times(&path, &params)
            .iter()
            .map(|ms| format!("{ms:.1}"))
            .collect();
        println!(
            "| {name} | {rate:.0} | {:.2} | {} | {} |",
            rate / base,
            bytes / truth.len().max(1) as u64,
            times.join(" | ")
        );
        let _ = std::fs::remove_file(&path);
    }
}

/// A query an optional index serves (or would serve), run once per value of its parameter.
struct Served {
    name: &'static str,
    sql: &'static str,
    param: fn(&ServedParams) -> Vec<String>,
}

/// The queries of the index table: each index of schema 6 is there for one of them, each
/// schema 5 index left out would serve one.
const SERVED: [Served; 7] = [
    Served {
        name: "100 calls by external_id",
        sql: "SELECT count(*) FROM calls WHERE external_id = ?1",
        param: |p| p.external_ids.clone(),
    },
    Served {
        name: "status counts",
        sql: "SELECT (SELECT count(*) FROM calls WHERE schedule_uid = ?1)
                + (SELECT count(*) FROM call_attempts WHERE call_id IN
                    (SELECT id FROM calls WHERE schedule_uid = ?1))
                + (SELECT count(*) FROM attempt_outcomes WHERE call_id IN
                    (SELECT id FROM calls WHERE schedule_uid = ?1))
                + (SELECT count(*) FROM attempt_variables WHERE call_id IN
                    (SELECT id FROM calls WHERE schedule_uid = ?1))",
        param: |p| vec![p.schedule.clone()],
    },
    Served {
        name: "call_results of the schedule's last 10 %",
        sql: "SELECT count(*), sum(answered) FROM call_results
              WHERE schedule_uid = (SELECT schedule_uid FROM calls LIMIT 1) AND updated_at >= ?1",
        param: |p| vec![p.recent.clone()],
    },
    Served {
        name: "calls_per_custom_parameter_value",
        sql: "SELECT p.value, count(*), sum(r.answered) FROM call_custom_parameters AS p
              JOIN call_results AS r USING (call_id)
              WHERE p.name = ?1 AND coalesce(r.is_test_call, 0) = 0
              GROUP BY p.value ORDER BY 2 DESC, p.value",
        param: |p| vec![p.parameter.clone()],
    },
    Served {
        name: "attempts of a status",
        sql: "SELECT count(*) FROM call_attempts WHERE status = ?1",
        param: |p| vec![p.attempt_status.clone()],
    },
    Served {
        name: "outcomes of a name",
        sql: "SELECT count(*) FROM attempt_outcomes WHERE name = ?1",
        param: |p| vec![p.outcome.clone()],
    },
    Served {
        name: "100 outcomes by uid",
        sql: "SELECT count(*) FROM attempt_outcomes WHERE uid = ?1",
        param: |p| p.outcome_uids.clone(),
    },
];

/// Values the served queries look up, taken from the data written.
#[derive(Clone)]
struct ServedParams {
    schedule: String,
    external_ids: Vec<String>,
    recent: String,
    parameter: String,
    attempt_status: String,
    outcome: String,
    outcome_uids: Vec<String>,
}

impl ServedParams {
    fn of(truth: &[OutboundCall]) -> ServedParams {
        let step = (truth.len() / 100).max(1);
        let sample = || truth.iter().step_by(step).take(100);
        let attempts = || {
            truth
                .iter()
                .flat_map(|c| c.outbound_call_attempts.as_deref().unwrap_or_default())
        };
        let mut updated: Vec<Timestamp> = truth.iter().map(|c| c.updated_at).collect();
        updated.sort();
        ServedParams {
            schedule: String::new(),
            external_ids: sample().filter_map(|c| c.external_id.clone()).collect(),
            recent: updated
                .get(updated.len() * 9 / 10)
                .map_or_else(String::new, |t| t.to_warehouse_text()),
            parameter: truth
                .iter()
                .flat_map(|c| c.outbound_call_info.custom_parameters.keys())
                .next()
                .cloned()
                .unwrap_or_default(),
            attempt_status: attempts()
                .next()
                .map_or_else(String::new, |a| a.status.clone()),
            outcome: attempts()
                .flat_map(|a| a.call_outcomes.as_deref().unwrap_or_default())
                .next()
                .map_or_else(String::new, |o| o.name.clone()),
            outcome_uids: sample()
                .flat_map(|c| c.outbound_call_attempts.as_deref().unwrap_or_default())
                .flat_map(|a| a.call_outcomes.as_deref().unwrap_or_default())
                .step_by(4)
                .take(100)
                .map(|o| o.uid.to_string())
                .collect(),
        }
    }
}

/// Milliseconds each of [`SERVED`] takes on the warehouse at `path`, run a second time (its
/// pages cached: the query's own cost, not the disk's).
fn query_times(path: &Path, params: &ServedParams) -> Vec<f64> {
    let conn = rusqlite::Connection::open(path).expect("the reference opens");
    let schedule: String = conn
        .query_row("SELECT schedule_uid FROM calls LIMIT 1", [], |r| r.get(0))
        .expect("a call");
    let params = ServedParams {
        schedule,
        ..params.clone()
    };
    SERVED
        .iter()
        .map(|q| {
            let values = (q.param)(&params);
            let mut stmt = conn.prepare(q.sql).expect("a served query prepares");
            let mut run = || {
                for value in &values {
                    stmt.query_row([value], |_| Ok(()))
                        .expect("a served query runs");
                }
            };
            run(); // warms the cache
            let started = Instant::now();
            run();
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}
