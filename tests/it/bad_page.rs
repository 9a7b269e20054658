//! A page the service garbles after earlier pages of the same pass were committed: those
//! pages and their checkpoint stay, nothing of the bad page is written, the pass's
//! `sync_runs` row names the schedule and the request, and other schedules go on.
//!
//! The simulator breaks every response of a schedule, not one request in the middle of a
//! pass, so this test serves the list endpoint itself: a few lines of axum over fixed data.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use callsync::config::{AuthConfig, Secret};
use callsync::service::{OutboundCall, Timestamp};
use callsync::sync::{PassPlan, PassResult};
use callsync::warehouse::Destination;
use callsync::warehouse::sqlite::Warehouse;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::expected;
use crate::harness::config_for;

const BROKEN: Uuid = Uuid::from_u128(0xb0_0000);
const HEALTHY: Uuid = Uuid::from_u128(0xc0_0000);
/// The value that once made `callsync sync` panic: valid text, year 10000 in UTC.
const BAD_INSTANT: &str = "9999-12-31T23:30:00-01:00";

/// The `n`-th second of 2026.
fn at(n: u64) -> String {
    Timestamp::parse("2026-01-01T00:00:00Z")
        .unwrap()
        .saturating_add(std::time::Duration::from_secs(n))
        .to_rfc3339()
}

/// Call `n` of `schedule`, updated at second `n`, as the list endpoint returns it.
fn call(schedule: Uuid, n: u64) -> Value {
    json!({
        "uid": Uuid::from_u128(schedule.as_u128() + u128::from(n)),
        "status": "pending", "progress": "in_queue", "is_test_call": false,
        "attempts_remaining": 2, "retry_intervals": [60],
        "created_at": at(0), "updated_at": at(n), "cooldown_until": null,
        "outbound_call_info": {"phone_number": "15550100", "first_name": "Ada",
            "custom_parameters": {"plan": "gold"}},
        "outbound_call_attempts": [], "call_notifications": []
    })
}

/// Each schedule's calls in list order.
struct Data(HashMap<Uuid, Vec<Value>>);

/// `GET /api/v1/schedules/{uid}/outbound_calls`: keyset pages as the spec orders them;
/// for the broken schedule, any page from second 199 on holds a call whose
/// `cooldown_until` cannot be an instant.
async fn list(
    State(data): State<Arc<Data>>,
    Path(schedule): Path<Uuid>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Value> {
    let after = Timestamp::parse(&query["updated_after"]).unwrap();
    let page: usize = query["page"].parse().unwrap();
    let size: usize = query["page_size"].parse().unwrap();
    let rows: Vec<Value> = data.0[&schedule]
        .iter()
        .filter(|c| Timestamp::parse(c["updated_at"].as_str().unwrap()).unwrap() >= after)
        .skip((page - 1) * size)
        .take(size)
        .cloned()
        .collect();
    let mut rows = rows;
    if schedule == BROKEN && after >= Timestamp::parse(&at(199)).unwrap() {
        // An updated_at that does not read: the call has no position, so the page fails
        // (a call whose other fields do not fit is set aside instead: `set_aside.rs`).
        rows[5]["updated_at"] = json!(BAD_INSTANT);
    }
    Json(json!({ "data": rows }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_page_after_committed_pages_keeps_them_and_writes_nothing_of_itself() {
    let data = Data(HashMap::from([
        (BROKEN, (1..=250).map(|n| call(BROKEN, n)).collect()),
        (HEALTHY, (1..=30).map(|n| call(HEALTHY, n)).collect()),
    ]));
    let app = Router::new()
        .route("/api/v1/schedules/{schedule}/outbound_calls", get(list))
        .with_state(Arc::new(data));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = url::Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let config = config_for(
        base_url,
        AuthConfig::Static(Secret::new("t")),
        vec![BROKEN, HEALTHY],
        dir.path().join("w.db"),
    );
    let engine = crate::harness::engine_for(&config);
    let plan = PassPlan::incremental(engine.settings());
    let reports = engine
        .sync_all(&[BROKEN, HEALTHY], &plan, &CancellationToken::new())
        .await;
    engine.close().await;
    server.abort();

    // Pages 1 (seconds 1-100) and 2 (100-199) were committed with their checkpoint; page 3
    // (199-298) failed to decode, at once (a wrong value is not worth retrying).
    let request = format!(
        "GET /api/v1/schedules/{BROKEN}/outbound_calls?updated_after={}&page=1&page_size=100",
        at(199)
    );
    let expected_error = format!(
        "{request}: unreadable response (bad_response; application/json): `{BAD_INSTANT}` is not an RFC 3339 timestamp with a zone, within the years 0000 to 9999 in UTC (e.g. 2026-01-31T09:30:00Z): its instant falls outside them"
    );
    let PassResult::Failed {
        kind: callsync::ErrorKind::BadResponse,
        error,
    } = &reports[0].result
    else {
        panic!("the broken schedule must fail: {:?}", reports[0]);
    };
    assert!(
        error.starts_with(&expected_error)
            && error.ends_with(
                "; the service sent what callsync cannot read, and asking again brings the same: report the response to the service's operators"
            ),
        "{error}"
    );
    let s = &reports[0].stats;
    assert_eq!(
        (
            s.pages,
            s.calls_seen,
            s.calls_written,
            s.requests,
            s.retries
        ),
        (2, 200, 199, 3, 0)
    );
    assert_eq!(
        reports[1].result,
        PassResult::Completed,
        "the other schedule goes on"
    );

    // The warehouse: exactly the calls of the committed pages, and the checkpoint after them.
    let path = dir.path().join("w.db");
    let committed: Vec<OutboundCall> = (1..=199)
        .map(|n| serde_json::from_value(call(BROKEN, n)).unwrap())
        .collect();
    assert_eq!(
        expected::differences(&path, BROKEN, &committed),
        Vec::<String>::new()
    );
    let healthy: Vec<OutboundCall> = (1..=30)
        .map(|n| serde_json::from_value(call(HEALTHY, n)).unwrap())
        .collect();
    assert_eq!(
        expected::differences(&path, HEALTHY, &healthy),
        Vec::<String>::new()
    );
    let warehouse = Warehouse::open_read_only(&path).unwrap();
    let checkpoint = warehouse.checkpoint(BROKEN).unwrap().map(|c| c.cursor);
    assert_eq!(checkpoint, Some(Timestamp::parse(&at(199)).unwrap()));

    // Its `sync_runs` row says what failed, on which schedule and request.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (pages, written, error): (i64, i64, String) = conn
        .query_row(
            "SELECT pages, calls_written, error FROM sync_runs
             WHERE schedule_uid = ?1 AND finished_at IS NOT NULL",
            [BROKEN.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((pages, written), (2, 199));
    assert!(error.starts_with(&expected_error), "{error}");
    let healthy_error: Option<String> = conn
        .query_row(
            "SELECT error FROM sync_runs WHERE schedule_uid = ?1",
            [HEALTHY.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(healthy_error, None);
}
