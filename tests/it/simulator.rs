//! The simulator, probed over real HTTP rule by rule against the spec and our documented
//! choices: it must be as faithful as the client, since it stands in for the service.

use std::time::Duration;

use callsync::service::{CallPage, OutboundCall, Timestamp};
use callsync::simulator::{
    DialerOptions, FaultPlan, ManualClock, Precision, Simulator, SimulatorOptions,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn start(options: SimulatorOptions) -> Simulator {
    Simulator::start("127.0.0.1:0".parse().unwrap(), options)
        .await
        .expect("simulator starts")
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().expect("client")
}

struct Probe {
    sim: Simulator,
    http: reqwest::Client,
}

impl Probe {
    async fn new(options: SimulatorOptions) -> Probe {
        Probe {
            sim: start(options).await,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{}",
            self.sim.base_url().as_str().trim_end_matches('/'),
            path
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .get(self.url(path))
            .bearer_auth(self.sim.access_token())
            .send()
            .await
            .expect("request");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .request(method, self.url(path))
            .bearer_auth(self.sim.access_token())
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn list(&self, query: &str) -> CallPage {
        let schedule = self.sim.schedule_uids()[0];
        let (status, body) = self
            .get(&format!(
                "/api/v1/schedules/{schedule}/outbound_calls?{query}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        serde_json::from_value(body).expect("a page")
    }

    fn truth(&self) -> Vec<OutboundCall> {
        self.sim.truth(self.sim.schedule_uids()[0])
    }
}

fn error_titles(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["title"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_request_needs_a_valid_bearer_token() {
    let clock = ManualClock::new(Timestamp::parse("2026-04-01T09:00:00Z").unwrap());
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        token_lifetime: Duration::from_secs(1),
        ..SimulatorOptions::default()
    })
    .await;
    let path = p.url(&format!(
        "/api/v1/schedules/{}/outbound_calls",
        p.sim.schedule_uids()[0]
    ));
    let missing = p.http.get(&path).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["title"], "Unauthorized");
    assert_eq!(body["detail"], "missing Authorization header");
    let wrong = p.http.get(&path).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    // OAuth client credentials, in the form body or as HTTP Basic.
    let token: Value = p
        .http
        .post(p.sim.token_url())
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", p.sim.client_id()),
            ("client_secret", p.sim.client_secret()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (token["token_type"].as_str(), token["expires_in"].as_u64()),
        (Some("Bearer"), Some(1))
    );
    let access = token["access_token"].as_str().unwrap().to_owned();
    let ok = p.http.get(&path).bearer_auth(&access).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let basic = p
        .http
        .post(p.sim.token_url())
        .basic_auth(p.sim.client_id(), Some(p.sim.client_secret()))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::OK);
    let bad = p
        .http
        .post(p.sim.token_url())
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "x"),
            ("client_secret", "y"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        bad.json::<Value>().await.unwrap()["error"],
        "invalid_client"
    );

    // A token lasts its lifetime on the simulator's clock, to the instant.
    clock.advance(Duration::from_millis(999));
    let last = p.http.get(&path).bearer_auth(&access).send().await.unwrap();
    assert_eq!(last.status(), StatusCode::OK);
    clock.advance(Duration::from_millis(1));
    let expired = p.http.get(&path).bearer_auth(&access).send().await.unwrap();
    assert_eq!(expired.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        expired.json::<Value>().await.unwrap()["detail"],
        "the access token has expired"
    );
}

#[tokio::test]
async fn pagination_defaults_links_and_ends() {
    let p = Probe::new(SimulatorOptions {
        calls_per_schedule: 120,
        ..SimulatorOptions::default()
    })
    .await;
    let first = p.list("updated_after=2000-01-01T00:00:00Z").await;
    let pg = first.pagination.clone().unwrap();
    assert_eq!(
        (
            first.data.len(),
            pg.total_count,
            pg.total_pages,
            pg.page_size,
            pg.current_page
        ),
        (50, 120, 3, 50, 1)
    );
    assert!(pg.links.prev.is_none());
    let next = pg.links.next.unwrap();
    assert!(
        next.starts_with("http://127.0.0.1:")
            && next.contains("page=2")
            && next.contains("updated_after="),
        "{next}"
    );
    assert!(pg.links.last.unwrap().contains("page=3"));
    let last = p.list("updated_after=2000-01-01T00:00:00Z&page=3").await;
    assert_eq!(last.data.len(), 20);
    assert!(last.pagination.as_ref().unwrap().links.next.is_none());
    assert!(
        last.pagination
            .unwrap()
            .links
            .prev
            .unwrap()
            .contains("page=2")
    );
    let beyond = p.list("updated_after=2000-01-01T00:00:00Z&page=9").await;
    assert!(beyond.data.is_empty());
}

#[tokio::test]
async fn updated_after_is_inclusive_ascending_and_decodes_offsets() {
    let p = Probe::new(SimulatorOptions {
        calls_per_schedule: 60,
        ..SimulatorOptions::default()
    })
    .await;
    let truth = p.truth();
    let pivot = truth[30].updated_at;
    let page = p
        .list(&format!(
            "page_size=100&updated_after={}",
            pivot.to_rfc3339()
        ))
        .await;
    assert_eq!(
        page.data.first().map(|c| c.updated_at),
        Some(pivot),
        "inclusive"
    );
    let keys: Vec<_> = page.data.iter().map(|c| (c.updated_at, c.uid)).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "ordered by updated_at, then uid");
    assert_eq!(
        page.data.len(),
        truth.iter().filter(|c| c.updated_at >= pivot).count()
    );
    // The same instant with a +02:00 offset, `+` sent as %2B.
    let shifted = pivot
        .as_offset_date_time()
        .to_offset(time::macros::offset!(+2));
    let text = shifted
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let same = p
        .list(&format!(
            "page_size=100&updated_after={}",
            text.replace('+', "%2B")
        ))
        .await;
    assert_eq!(same.data, page.data);
}

#[tokio::test]
async fn malformed_queries_are_400s_in_the_spec_shape() {
    let p = Probe::new(SimulatorOptions::default()).await;
    let schedule = p.sim.schedule_uids()[0];
    for (query, title) in [
        ("foo=1", "Unexpected field: foo"),
        ("page_size=101", "Invalid value"),
        ("page_size=0", "Invalid value"),
        ("page=0", "Invalid value"),
        ("page=two", "Invalid value"),
        ("is_test_call=yes", "Invalid value"),
        ("updated_after=2026-01-01T00:00:00", "Invalid value"),
        ("status=pending&status=completed", "Duplicate field: status"),
        (
            "page_size=10&updated_after=2026-01-01T00:00:00Z&page_size=20",
            "Duplicate field: page_size",
        ),
        ("status=", "Invalid value"),
        ("progress=answered,", "Invalid value"),
        ("source=api,,quick_call_api", "Invalid value"),
    ] {
        let (status, body) = p
            .get(&format!(
                "/api/v1/schedules/{schedule}/outbound_calls?{query}"
            ))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(body["title"], "Invalid request", "{query}");
        assert_eq!(error_titles(&body), vec![title.to_owned()], "{query}");
    }
    let (status, body) = p
        .send(
            reqwest::Method::POST,
            &format!("/api/v1/schedules/{schedule}/outbound_calls?force=true&force=true"),
            json!({"phone_number": "+15550100"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_titles(&body),
        vec!["Duplicate field: force".to_owned()]
    );
    let (status, body) = p
        .get("/api/v1/outbound_calls/0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11")
        .await;
    assert_eq!(
        (status, body["title"].as_str()),
        (StatusCode::NOT_FOUND, Some("Not found"))
    );
}

#[tokio::test]
async fn every_filter_follows_its_matching_rule() {
    let p = Probe::new(SimulatorOptions {
        calls_per_schedule: 300,
        seed: 3,
        ..SimulatorOptions::default()
    })
    .await;
    let truth = p.truth();
    let count = |f: &dyn Fn(&OutboundCall) -> bool| truth.iter().filter(|c| f(c)).count() as u64;
    let attempts = |c: &OutboundCall| c.outbound_call_attempts.clone().unwrap_or_default();
    let some = &truth[7];
    let name = some.outbound_call_info.last_name.clone().unwrap();
    let cases: Vec<(String, u64)> = vec![
        (
            "status=completed".into(),
            count(&|c| c.status == "completed"),
        ),
        ("status=pending,completed".into(), truth.len() as u64),
        (
            "progress=answered".into(),
            count(&|c| c.progress.as_deref() == Some("answered")),
        ),
        (
            "is_test_call=true".into(),
            count(&|c| c.is_test_call == Some(true)),
        ),
        (
            format!("external_id={}", some.external_id.clone().unwrap()),
            1,
        ),
        (
            format!("last_name={}", name.to_uppercase()),
            count(&|c| {
                c.outbound_call_info
                    .last_name
                    .as_deref()
                    .is_some_and(|n| n.to_lowercase().contains(&name.to_lowercase()))
            }),
        ),
        (
            "attempt_status=busy".into(),
            count(&|c| attempts(c).iter().any(|a| a.status == "busy")),
        ),
        (
            "outcome=interested".into(),
            count(&|c| {
                attempts(c)
                    .iter()
                    .flat_map(|a| a.call_outcomes.clone().unwrap_or_default())
                    .any(|o| o.name == "interested")
            }),
        ),
    ];
    let total = |page: &CallPage| page.pagination.as_ref().unwrap().total_count;
    for (query, expected) in cases {
        assert!(expected > 0, "{query}: the seed must exercise the filter");
        let page = p
            .list(&format!("updated_after=2000-01-01T00:00:00Z&{query}"))
            .await;
        assert_eq!(total(&page), expected, "{query}");
    }
    let api = total(&p.list("source=api").await);
    let quick = total(&p.list("source=quick_call_api").await);
    assert_eq!(api + quick, truth.len() as u64);
    assert!(quick > 0);
}

#[tokio::test]
async fn campaigns_schedules_and_call_creation_follow_the_spec() {
    let p = Probe::new(SimulatorOptions::default()).await;
    use reqwest::Method;
    let (status, body) = p
        .send(
            Method::POST,
            "/api/v1/campaigns",
            json!({"name": "c", "type": "scheduled_call", "is_enabled": true}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["errors"][0]["source"]["pointer"], "/is_enabled");
    // A value of the wrong type points at itself, in every typed body.
    for (path, body, pointer) in [
        (
            "/api/v1/campaigns",
            json!({"name": 5, "type": "scheduled_call"}),
            "/name",
        ),
        (
            "/api/v1/campaigns/00000000-0000-4000-8000-000000000000/schedules",
            json!({"name": "s", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2026-02-01T00:00:00Z",
                   "retry_type": "consistent", "retry_intervals": [60, "x"]}),
            "/retry_intervals/1",
        ),
        ("/api/v1/campaigns", json!({"type": "scheduled_call"}), ""),
    ] {
        let (status, answer) = p.send(Method::POST, path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(
            answer["errors"][0]["source"]["pointer"], pointer,
            "{answer}"
        );
    }
    let (status, campaign) = p
        .send(
            Method::POST,
            "/api/v1/campaigns",
            json!({"name": "c", "type": "scheduled_call"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        (
            campaign["is_enabled"].as_bool(),
            campaign["direction"].as_str()
        ),
        (Some(false), Some("outbound"))
    );

    let (status, schedule) = p
        .send(
            Method::POST,
            &format!("/api/v1/campaigns/{}/schedules", campaign["uid"].as_str().unwrap()),
            json!({"name": "s", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2026-02-01T00:00:00Z",
                   "retry_type": "consistent", "retry_intervals": [60, 120, 300]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        (
            schedule["is_enabled"].as_bool(),
            schedule["is_auto"].as_bool()
        ),
        (Some(false), Some(false))
    );
    let s = schedule["uid"].as_str().unwrap().to_owned();

    let new_call = json!({"phone_number": "+15550100", "full_name": "Ada Lovelace", "external_id": "e1",
                          "custom_parameters": {"plan": "gold"}});
    let (status, call) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls"),
            new_call.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    assert_eq!(call["attempts_remaining"], 4);
    assert_eq!(call["outbound_call_info"]["phone_number"], "15550100");
    let keys: Vec<&String> = call["outbound_call_info"]["custom_parameters"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert!(
        keys.iter().all(|k| k.parse::<u32>().is_ok()),
        "keyed by numeric id: {keys:?}"
    );
    let (_, detail) = p
        .get(&format!(
            "/api/v1/outbound_calls/{}",
            call["uid"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        detail["outbound_call_info"]["custom_parameters"]["plan"],
        "gold"
    );
    assert_eq!(
        (detail["status"].as_str(), detail["progress"].as_str()),
        (Some("pending"), Some("in_queue"))
    );

    // Bulk: all or nothing, errors point at their entry.
    let bad =
        json!({"outbound_calls": [new_call, {"phone_number": "555"}, {"phone_number": "+1555x"}]});
    let (status, body) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls/bulk"),
            bad,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let pointers: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["source"]["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        vec![
            "/outbound_calls/1/phone_number",
            "/outbound_calls/2/phone_number"
        ]
    );
    assert_eq!(p.sim.truth(s.parse().unwrap()).len(), 1, "nothing created");
    let good =
        json!({"outbound_calls": [{"phone_number": "+15550101"}, {"phone_number": "+15550102"}]});
    let (status, body) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls/bulk"),
            good,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let uids = body["data"].as_array().unwrap();
    assert_eq!(uids.len(), 2);
    let truth = p.sim.truth(s.parse().unwrap());
    let bulk: Vec<&OutboundCall> = truth
        .iter()
        .filter(|c| uids.contains(&json!(c.uid.to_string())))
        .collect();
    assert_eq!(
        bulk[0].updated_at, bulk[1].updated_at,
        "one bulk request, one updated_at"
    );

    // Enabled: creation needs force=true (409 otherwise, our documented choice).
    let (status, enabled) = p
        .send(
            Method::PATCH,
            &format!("/api/v1/schedules/{s}"),
            json!({"is_enabled": true}),
        )
        .await;
    assert_eq!(
        (status, enabled["is_enabled"].as_bool()),
        (StatusCode::OK, Some(true))
    );
    let one = json!({"phone_number": "+15550103"});
    let (status, _) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls"),
            one.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls?force=true"),
            one,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn call_flows_lead_to_their_campaign() {
    let p = Probe::new(SimulatorOptions::default()).await;
    let (flow, campaign) = (p.sim.call_flow_uid(), p.sim.campaign_uid());
    let summary = p.sim.summary();
    assert!(
        summary.contains(&format!("call_flow     = \"{flow}\""))
            && summary.contains(&format!("campaign      = \"{campaign}\"")),
        "`simulate` prints both:\n{summary}"
    );
    let (status, body) = p.get(&format!("/api/v1/call_flows/{flow}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["campaign_uid"], campaign.to_string());
    // The campaign it leads to is the seeded one: schedules can be created in it.
    let (status, _) = p
        .send(
            reqwest::Method::POST,
            &format!("/api/v1/campaigns/{campaign}/schedules"),
            json!({"name": "s", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2026-02-01T00:00:00Z",
                   "retry_type": "consistent", "retry_intervals": [60]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = p
        .get("/api/v1/call_flows/0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Every uid in a call: its own and its children's.
fn call_uids(call: &OutboundCall) -> Vec<uuid::Uuid> {
    let mut uids = vec![call.uid];
    for a in call.outbound_call_attempts.iter().flatten() {
        uids.push(a.uid);
        uids.extend(a.call_outcomes.iter().flatten().map(|o| o.uid));
        uids.extend(a.call_attempts_variables.iter().flatten().map(|v| v.uid));
    }
    uids.extend(call.call_notifications.iter().flatten().map(|n| n.uid));
    uids
}

fn assert_rfc_4122_v4(uid: uuid::Uuid) {
    assert_eq!(
        (uid.get_version(), uid.get_variant()),
        (Some(uuid::Version::Random), uuid::Variant::RFC4122),
        "{uid}"
    );
}

#[tokio::test]
async fn uids_are_rfc_4122_v4_and_new_resources_never_reuse_seeded_ones() {
    let p = Probe::new(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 200,
        ..SimulatorOptions::default()
    })
    .await;
    use reqwest::Method;
    let mut seeded = vec![p.sim.campaign_uid(), p.sim.call_flow_uid()];
    for schedule in p.sim.schedule_uids() {
        seeded.push(schedule);
        seeded.extend(p.sim.truth(schedule).iter().flat_map(call_uids));
    }
    let children = seeded.len() - 2 - 2 * 201;
    assert!(children > 100, "the seed made attempts and their children");
    for uid in &seeded {
        assert_rfc_4122_v4(*uid);
    }

    // What the reviewer saw: the 1st new campaign took the call flow's uid, the 2nd new one
    // schedule S1's.
    let mut created = Vec::new();
    for _ in 0..2 {
        let (_, campaign) = p
            .send(
                Method::POST,
                "/api/v1/campaigns",
                json!({"name": "c", "type": "scheduled_call"}),
            )
            .await;
        created.push(campaign["uid"].as_str().unwrap().parse().unwrap());
    }
    let (_, schedule) = p
        .send(
            Method::POST,
            &format!("/api/v1/campaigns/{}/schedules", created[0]),
            json!({"name": "s", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2026-02-01T00:00:00Z",
                   "retry_type": "consistent", "retry_intervals": [60]}),
        )
        .await;
    let s = schedule["uid"].as_str().unwrap().to_owned();
    created.push(s.parse().unwrap());
    let (_, call) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls"),
            json!({"phone_number": "+15550100"}),
        )
        .await;
    created.push(call["uid"].as_str().unwrap().parse().unwrap());
    let (_, bulk) = p
        .send(
            Method::POST,
            &format!("/api/v1/schedules/{s}/outbound_calls/bulk"),
            json!({"outbound_calls": [{"phone_number": "+15550101"}, {"phone_number": "+15550102"}]}),
        )
        .await;
    created.extend(serde_json::from_value::<Vec<uuid::Uuid>>(bulk["data"].clone()).unwrap());
    created.extend(p.sim.bulk_create_now(p.sim.schedule_uids()[0], 2));
    assert_eq!(created.len(), 8);
    let mut all = seeded.clone();
    all.extend(&created);
    for uid in &created {
        assert_rfc_4122_v4(*uid);
    }
    all.sort();
    all.dedup();
    assert_eq!(
        all.len(),
        seeded.len() + created.len(),
        "no uid is used twice"
    );
}

/// Compares two JSON documents that must be equal except for timestamps, and collects the
/// shift of every timestamp (in nanoseconds) from `a` to `b`.
fn same_but_shifted(a: &Value, b: &Value, at: &str, shifts: &mut Vec<i128>) {
    match (a, b) {
        (Value::String(x), Value::String(y)) => match (Timestamp::parse(x), Timestamp::parse(y)) {
            (Ok(x), Ok(y)) => shifts.push(y.unix_nanos() - x.unix_nanos()),
            _ => assert_eq!(x, y, "{at}"),
        },
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (k, v) in x {
                same_but_shifted(v, &y[k], &format!("{at}/{k}"), shifts);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_but_shifted(v, w, &format!("{at}/{i}"), shifts);
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[tokio::test]
async fn one_seed_makes_the_same_data_shifted_to_the_start_second() {
    let options = SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 300,
        seed: 5,
        ..SimulatorOptions::default()
    };
    let at = |text: &str| -> SimulatorOptions {
        SimulatorOptions {
            clock: ManualClock::new(Timestamp::parse(text).unwrap()).into(),
            ..options.clone()
        }
    };
    // Started 3.7 s apart, in seconds 4 apart: the timestamps move by 4 s, the rest stays.
    let a = start(at("2026-04-01T09:00:00.400Z")).await;
    let b = start(at("2026-04-01T09:00:04.100Z")).await;
    assert_eq!(
        (a.campaign_uid(), a.call_flow_uid(), a.schedule_uids()),
        (b.campaign_uid(), b.call_flow_uid(), b.schedule_uids())
    );
    assert_eq!(
        (a.access_token(), a.client_secret()),
        (b.access_token(), b.client_secret())
    );
    let mut shifts = Vec::new();
    for schedule in a.schedule_uids() {
        let (x, y) = (a.truth(schedule), b.truth(schedule));
        same_but_shifted(
            &serde_json::to_value(&x).unwrap(),
            &serde_json::to_value(&y).unwrap(),
            "",
            &mut shifts,
        );
    }
    shifts.sort();
    shifts.dedup();
    assert_eq!(shifts, [4_000_000_000], "one shift for every timestamp");

    let other = start(SimulatorOptions { seed: 6, ..options }).await;
    assert_ne!(other.schedule_uids(), a.schedule_uids());
}

#[tokio::test]
async fn precision_summary_lists_and_details() {
    let p = Probe::new(SimulatorOptions {
        precision: Precision::Seconds,
        summary_list: true,
        calls_per_schedule: 200,
        ..SimulatorOptions::default()
    })
    .await;
    let page = p
        .list("updated_after=2000-01-01T00:00:00Z&page_size=100")
        .await;
    for call in &page.data {
        assert_eq!(
            call.updated_at.unix_nanos() % 1_000_000_000,
            0,
            "second precision"
        );
    }
    let dialled = page
        .data
        .iter()
        .find(|c| {
            !c.outbound_call_attempts
                .as_deref()
                .unwrap_or_default()
                .is_empty()
        })
        .expect("some calls were dialled");
    assert!(
        dialled.lacks_attempt_children(),
        "summary list items omit children"
    );
    let (_, detail) = p
        .get(&format!("/api/v1/outbound_calls/{}", dialled.uid))
        .await;
    let detail: OutboundCall = serde_json::from_value(detail).unwrap();
    assert!(
        !detail.lacks_attempt_children(),
        "the detail endpoint has them"
    );
}

#[tokio::test]
async fn faults_at_full_rate() {
    let p = Probe::new(SimulatorOptions::default()).await;
    let path = format!(
        "/api/v1/schedules/{}/outbound_calls",
        p.sim.schedule_uids()[0]
    );
    p.sim.set_faults(FaultPlan {
        error_5xx_rate: 1.0,
        ..FaultPlan::default()
    });
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = p
            .http
            .get(p.url(&path))
            .bearer_auth(p.sim.access_token())
            .send()
            .await
            .unwrap();
        let html = r.headers()[reqwest::header::CONTENT_TYPE] == "text/html";
        seen.push((r.status().as_u16(), html));
    }
    seen.sort();
    assert_eq!(seen, vec![(500, false), (502, true), (503, false)]);
    p.sim.set_faults(FaultPlan {
        rate_429: 1.0,
        retry_after_secs: 7,
        ..FaultPlan::default()
    });
    let r = p
        .http
        .get(p.url(&path))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status(), r.headers()["retry-after"].to_str().unwrap()),
        (StatusCode::TOO_MANY_REQUESTS, "7")
    );
    p.sim.set_faults(FaultPlan {
        truncate_rate: 1.0,
        ..FaultPlan::default()
    });
    let r = p
        .http
        .get(p.url(&path))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the status arrives");
    assert!(r.bytes().await.is_err(), "then the body is cut off");
    p.sim.set_faults(FaultPlan::default());
    assert_eq!(p.get(&path).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dialer_moves_calls_and_late_commits_show_up_late() {
    let clock = ManualClock::new(Timestamp::parse("2026-04-01T09:00:00Z").unwrap());
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        calls_per_schedule: 200,
        late_commit: Some(Duration::from_millis(800)),
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(5),
            calls_per_tick: 5,
            ..DialerOptions::default()
        }),
        ..SimulatorOptions::default()
    })
    .await;
    let before = p.truth();
    let started = p.sim.now();
    clock.advance(Duration::from_millis(200));
    p.sim.set_dialer_running(false);
    let stopped = p.truth();
    assert!(
        stopped.iter().all(|c| c.updated_at < started),
        "changes are not visible before δ"
    );
    // On a manual clock, settling moves it to when the last late commit shows.
    p.sim.settle().await;
    assert!(p.sim.now() >= started.saturating_add(Duration::from_millis(800)));
    let after = p.truth();
    let moved: Vec<_> = after.iter().filter(|c| c.updated_at >= started).collect();
    assert!(!moved.is_empty(), "the dialer changed calls");
    for call in moved {
        let old = before.iter().find(|b| b.uid == call.uid).unwrap();
        assert!(
            call.outbound_call_attempts.as_ref().unwrap().len()
                > old.outbound_call_attempts.as_ref().unwrap().len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_changes_can_leave_updated_at_alone() {
    let clock = ManualClock::new(Timestamp::parse("2026-04-01T09:00:00Z").unwrap());
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        calls_per_schedule: 100,
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(5),
            calls_per_tick: 5,
            child_changes_without_bump: true,
            ..DialerOptions::default()
        }),
        ..SimulatorOptions::default()
    })
    .await;
    let before = p.truth();
    clock.advance(Duration::from_millis(200));
    p.sim.set_dialer_running(false);
    let after = p.truth();
    let silent = after.iter().filter(|c| {
        before
            .iter()
            .any(|b| b.uid == c.uid && b.updated_at == c.updated_at && b != *c)
    });
    assert!(
        silent.count() > 0,
        "some calls changed without a new updated_at"
    );
}

#[tokio::test]
async fn the_generator_seeds_what_was_asked() {
    let sim = start(SimulatorOptions {
        schedules: 3,
        calls_per_schedule: 250,
        ..SimulatorOptions::default()
    })
    .await;
    let uids = sim.schedule_uids();
    assert_eq!(uids.len(), 3);
    for s in uids {
        let calls = sim.truth(s);
        assert_eq!(calls.len(), 250);
        assert!(
            calls
                .iter()
                .all(|c| c.outbound_call_info.custom_parameters.contains_key("plan"))
        );
    }
}

/// `(title, pointer)` of every error item, in order.
fn problems(body: &Value) -> Vec<(String, String)> {
    body["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["title"].as_str().unwrap_or("").to_owned(),
                        e["source"]["pointer"]
                            .as_str()
                            .unwrap_or("(none)")
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn create_bodies_are_checked_field_by_field_with_pointers() {
    let p = Probe::new(SimulatorOptions::default()).await;
    use reqwest::Method;
    let schedule = p.sim.schedule_uids()[0];
    let single = format!("/api/v1/schedules/{schedule}/outbound_calls?force=true");
    let bulk = format!("/api/v1/schedules/{schedule}/outbound_calls/bulk?force=true");
    let before = p.truth().len();
    let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(t, p)| (t.to_string(), p.to_string()))
            .collect()
    };

    // The reviewer's bodies: a wrong type, or a missing phone number, in the 2nd entry.
    let (status, body) = p
        .send(
            Method::POST,
            &bulk,
            json!({"outbound_calls":[{"phone_number":"+15550000001"},{"phone_number":15550000002_u64}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        problems(&body),
        owned(&[("Invalid type", "/outbound_calls/1/phone_number")])
    );
    let (status, body) = p
        .send(
            Method::POST,
            &bulk,
            json!({"outbound_calls":[{"phone_number":"+15550000001"},{"full_name":"x"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        problems(&body),
        owned(&[("Missing field", "/outbound_calls/1/phone_number")])
    );

    // Every problem of every entry, each pointing at its field; the same entry gives the same
    // errors alone (pointer `/<field>`) as in a bulk request.
    let bad_entries = [
        (
            json!({"phone_number": "+15550100", "email": 7}),
            vec![("Invalid type", "/email")],
        ),
        (
            json!({"phone_number": null}),
            vec![("Missing field", "/phone_number")],
        ),
        (
            json!({"phone_number": "+15550100", "custom_parameters": {"plan": true, "due_at": "soon"}}),
            vec![
                ("Invalid type", "/custom_parameters/plan"),
                ("Invalid custom parameter", "/custom_parameters/due_at"),
            ],
        ),
        (
            json!({"phone_number": "5550100", "nickname": "Ada"}),
            vec![
                ("Unexpected field: nickname", "/nickname"),
                ("Invalid phone number", "/phone_number"),
            ],
        ),
        (json!(["+15550100"]), vec![("Invalid type", "")]),
    ];
    let good = json!({"phone_number": "+15550100", "full_name": "Ada", "custom_parameters": {"plan": "gold"}});
    let mut entries = vec![good.clone()];
    let mut expected_bulk = Vec::new();
    for (i, (entry, expected)) in bad_entries.iter().enumerate() {
        let (status, body) = p.send(Method::POST, &single, entry.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{entry}");
        assert_eq!(problems(&body), owned(expected), "{entry}");
        entries.push(entry.clone());
        expected_bulk.extend(
            expected
                .iter()
                .map(|(t, ptr)| (t.to_string(), format!("/outbound_calls/{}{ptr}", i + 1))),
        );
    }
    entries.push(good.clone());
    let (status, body) = p
        .send(Method::POST, &bulk, json!({ "outbound_calls": entries }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problems(&body), expected_bulk);
    assert_eq!(body["detail"], "7 invalid value(s); nothing was created");

    // Not JSON at all: the pointer is the whole document.
    let r = p
        .http
        .post(p.url(&bulk))
        .bearer_auth(p.sim.access_token())
        .header("content-type", "application/json")
        .body("{\"outbound_calls\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(problems(&body), owned(&[("Invalid body", "")]));

    assert_eq!(p.truth().len(), before, "nothing was created");
    // Only phone_number is required, alone or in bulk.
    let minimal = json!({"phone_number": "+15550100"});
    assert_eq!(
        p.send(Method::POST, &single, minimal.clone()).await.0,
        StatusCode::CREATED
    );
    let (status, body) = p
        .send(
            Method::POST,
            &bulk,
            json!({"outbound_calls": [minimal, good]}),
        )
        .await;
    assert_eq!(
        (status, body["data"].as_array().map(Vec::len)),
        (StatusCode::CREATED, Some(2))
    );
    assert_eq!(p.truth().len(), before + 3);
}

#[tokio::test]
async fn framework_rejections_are_json_in_the_spec_shape() {
    let p = Probe::new(SimulatorOptions::default()).await;
    let schedule = p.sim.schedule_uids()[0];
    let bulk = p.url(&format!(
        "/api/v1/schedules/{schedule}/outbound_calls/bulk?force=true"
    ));
    // The status, the error body's title, and its Allow header if any.
    async fn shape(r: reqwest::Response) -> (u16, String, Option<String>) {
        let status = r.status().as_u16();
        let allow = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        let json = r.headers()["content-type"] == "application/json";
        let body: Value = r.json().await.expect("a JSON body");
        assert!(
            json && body["detail"].is_string() && body["errors"].is_array(),
            "{body}"
        );
        (status, body["title"].as_str().unwrap().to_owned(), allow)
    }

    // A valid 1,000-entry bulk request of over 2 MB (axum's default limit) is accepted.
    let long = "x".repeat(2_100);
    let entries: Vec<Value> = (0..1000)
        .map(|i| json!({"phone_number": format!("+1555{i:07}"), "full_name": long}))
        .collect();
    let body = serde_json::to_vec(&json!({ "outbound_calls": entries })).unwrap();
    assert!(body.len() > 2 * 1024 * 1024);
    let r = p
        .http
        .post(&bulk)
        .bearer_auth(p.sim.access_token())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(
        r.json::<Value>().await.unwrap()["data"]
            .as_array()
            .unwrap()
            .len(),
        1000
    );

    // Over the 32 MiB limit: 413.
    let huge = vec![b' '; 32 * 1024 * 1024 + 1];
    let r = p
        .http
        .post(&bulk)
        .bearer_auth(p.sim.access_token())
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(shape(r).await, (413, "Payload too large".into(), None));

    // Not JSON, or no Content-Type at all: 415.
    for content_type in [Some("text/plain"), None] {
        let mut request = p
            .http
            .post(&bulk)
            .bearer_auth(p.sim.access_token())
            .body(r#"{"outbound_calls": [{"phone_number": "+15550100"}]}"#);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        let r = request.send().await.unwrap();
        assert_eq!(shape(r).await, (415, "Unsupported media type".into(), None));
    }
    // `; charset=utf-8` is still JSON.
    let r = p
        .http
        .post(&bulk)
        .bearer_auth(p.sim.access_token())
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"outbound_calls": [{"phone_number": "+15550100"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);

    // A known path with the wrong method: 405 with Allow.
    let r = p.http.get(p.sim.token_url()).send().await.unwrap();
    assert_eq!(
        shape(r).await,
        (405, "Method not allowed".into(), Some("POST".into()))
    );
    let r = p.http.delete(p.sim.token_url()).send().await.unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["detail"],
        "DELETE is not allowed on /oauth/token; the Allow header lists the methods that are"
    );
    let r = p
        .http
        .get(p.url(&format!("/api/v1/schedules/{schedule}")))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(
        shape(r).await,
        (405, "Method not allowed".into(), Some("PATCH".into()))
    );
    // Unknown routes, and a path that does not decode.
    for path in ["/api/v1/nothing/here", "/elsewhere"] {
        let r = p
            .http
            .get(p.url(path))
            .bearer_auth(p.sim.access_token())
            .send()
            .await
            .unwrap();
        assert_eq!(shape(r).await, (404, "Not found".into(), None), "{path}");
    }
    let r = p
        .http
        .get(p.url("/api/v1/outbound_calls/%FF"))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(shape(r).await, (400, "Invalid request".into(), None));
}

#[tokio::test]
async fn unauthorized_answers_carry_a_bearer_challenge_and_the_scheme_is_case_insensitive() {
    let p = Probe::new(SimulatorOptions::default()).await;
    let path = p.url(&format!(
        "/api/v1/schedules/{}/outbound_calls",
        p.sim.schedule_uids()[0]
    ));
    let token = p.sim.access_token();
    let with_header = |value: Option<String>| {
        let mut request = p.http.get(&path);
        if let Some(v) = value {
            request = request.header("authorization", v);
        }
        request.send()
    };
    let realm = r#"Bearer realm="callsync-simulator""#;
    for (header, challenge, detail) in [
        (None, realm.to_owned(), "missing Authorization header"),
        (
            Some(format!("Basic {token}")),
            realm.to_owned(),
            "the Authorization header must be `Bearer <token>`",
        ),
        (
            Some("Bearer nope".to_owned()),
            format!(
                r#"{realm}, error="invalid_token", error_description="the access token is not valid""#
            ),
            "the access token is not valid",
        ),
    ] {
        let r = with_header(header.clone()).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{header:?}");
        assert_eq!(
            r.headers()["www-authenticate"].to_str().unwrap(),
            challenge,
            "{header:?}"
        );
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (body["title"].as_str(), body["detail"].as_str()),
            (Some("Unauthorized"), Some(detail)),
            "{header:?}"
        );
    }
    for scheme in ["bearer", "BEARER", "Bearer ", "bEaReR"] {
        let r = with_header(Some(format!("{scheme} {token}")))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{scheme:?}");
    }

    // The token endpoint: `basic` in any case; a refused client gets a Basic challenge.
    let encoded = {
        // HTTP Basic credentials by hand, to send the scheme name in lower case.
        let r = p
            .http
            .post(p.sim.token_url())
            .basic_auth(p.sim.client_id(), Some(p.sim.client_secret()))
            .build()
            .unwrap();
        r.headers()["authorization"].to_str().unwrap()["Basic ".len()..].to_owned()
    };
    let r = p
        .http
        .post(p.sim.token_url())
        .header("authorization", format!("basic {encoded}"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = p
        .http
        .post(p.sim.token_url())
        .basic_auth("x", Some("y"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.headers()["www-authenticate"],
        r#"Basic realm="callsync-simulator""#
    );
}

/// The rules every call history follows, seeded or dialled (docs/simulator.md, "The dialer"), at
/// `scale` real seconds per nominal second or slower.
fn assert_lifelike(calls: &[OutboundCall], now: Timestamp, scale: f64) {
    let span = |secs: i64| Duration::from_nanos((secs as f64 * scale * 1e9).round() as u64);
    for c in calls {
        let uid = c.uid;
        assert!(
            c.created_at <= c.updated_at && c.updated_at <= now,
            "{uid}: created_at <= updated_at <= now"
        );
        let attempts = c.outbound_call_attempts.as_deref().unwrap_or_default();
        let intervals = c.retry_intervals.clone().unwrap_or_default();
        assert!(attempts.len() <= intervals.len() + 1, "{uid}: attempts");
        for (k, a) in attempts.iter().enumerate() {
            let (started, ended) = (a.started_at.unwrap(), a.ended_at.unwrap());
            let updated = a.updated_at.unwrap();
            assert_eq!(a.created_at, Some(started), "{uid}");
            assert!(c.created_at <= started, "{uid}: dialled after creation");
            assert_eq!(a.answered_at.is_some(), a.status == "hangup", "{uid}");
            let answered = a.answered_at.unwrap_or(started);
            assert!(
                started <= answered && answered <= ended && ended <= updated,
                "{uid}: started <= answered <= ended <= attempt.updated_at"
            );
            assert!(
                updated <= c.updated_at,
                "{uid}: attempt.updated_at <= call.updated_at"
            );
            if let Some(transfer) = a.transfer_started_at {
                let connected = a.transfer_answered_at.unwrap();
                assert!(answered <= transfer && transfer <= connected && connected <= ended);
            }
            let children = a
                .call_outcomes
                .iter()
                .flatten()
                .map(|o| o.created_at)
                .chain(
                    a.call_attempts_variables
                        .iter()
                        .flatten()
                        .map(|v| v.created_at),
                );
            for at in children {
                assert!((ended..=updated).contains(&at.unwrap()), "{uid}: children");
            }
            if k > 0 {
                let previous = attempts[k - 1].ended_at.unwrap();
                assert!(
                    started >= previous.saturating_add(span(intervals[k - 1])),
                    "{uid}: attempt {k} started before the cooldown after attempt {} ended",
                    k - 1
                );
            }
        }
        for n in c.call_notifications.iter().flatten() {
            assert!(
                n.delivered_at.unwrap() <= c.updated_at,
                "{uid}: notification"
            );
        }
        let answered = attempts.last().is_some_and(|a| a.answered_at.is_some());
        if c.status == "completed" {
            assert!(answered || attempts.len() == intervals.len() + 1, "{uid}");
            assert_eq!((c.attempts_remaining, c.cooldown_until), (Some(0), None));
            let progress = if answered { "answered" } else { "unanswered" };
            assert_eq!(c.progress.as_deref(), Some(progress), "{uid}");
        } else {
            assert_eq!(c.status, "pending", "{uid}");
            assert!(!answered, "{uid}: an answered call is completed");
            let left = (intervals.len() + 1 - attempts.len()) as i64;
            assert_eq!(c.attempts_remaining, Some(left), "{uid}");
            match attempts.last() {
                None => assert_eq!(
                    (c.progress.as_deref(), c.cooldown_until),
                    (Some("in_queue"), None),
                    "{uid}"
                ),
                Some(last) => {
                    assert_eq!(c.progress.as_deref(), Some("unanswered"), "{uid}");
                    let wait = span(intervals[attempts.len() - 1]);
                    assert!(
                        c.cooldown_until.unwrap() >= last.ended_at.unwrap().saturating_add(wait),
                        "{uid}: cooldown_until = end of the last attempt + the next interval"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dialer_keeps_histories_lifelike_and_keeps_working() {
    let scale = 0.001;
    let options = SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 150,
        seed: 9,
        ..SimulatorOptions::default()
    };
    // The generator follows the same rules, at real time.
    let seeded = Probe::new(options.clone()).await;
    let calls: Vec<OutboundCall> = seeded
        .sim
        .schedule_uids()
        .into_iter()
        .flat_map(|s| seeded.sim.truth(s))
        .collect();
    assert_lifelike(&calls, Timestamp::now(), 1.0);
    assert!(
        calls
            .iter()
            .any(|c| c.outbound_call_attempts.as_ref().unwrap().len() > 1)
    );

    // On a manual clock: 2 s of work happen when the test says, the same on every run.
    let clock = ManualClock::new(Timestamp::parse("2026-04-01T09:00:00Z").unwrap());
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(5),
            calls_per_tick: 5,
            time_scale: scale,
            // 0.1 s at this scale.
            new_calls_every: Some(Duration::from_secs(100)),
            child_changes_without_bump: false,
        }),
        ..options
    })
    .await;
    let all = |p: &Probe| -> Vec<OutboundCall> {
        p.sim
            .schedule_uids()
            .into_iter()
            .flat_map(|s| p.sim.truth(s))
            .collect()
    };
    let started = p.sim.now();
    clock.advance(Duration::from_millis(2000));
    p.sim.set_dialer_running(false);
    let now = p.sim.now();
    let calls = all(&p);
    assert_lifelike(&calls, now, scale);

    let mut uids: Vec<_> = calls.iter().flat_map(call_uids).collect();
    uids.iter().for_each(|u| assert_rfc_4122_v4(*u));
    let n = uids.len();
    uids.sort();
    uids.dedup();
    assert_eq!(uids.len(), n, "every uid is new");

    let arrived: Vec<&OutboundCall> = calls.iter().filter(|c| c.created_at >= started).collect();
    assert!(arrived.len() >= 10, "new calls arrived: {}", arrived.len());
    assert!(
        arrived.iter().any(|c| c.status == "completed"),
        "new calls are dialled too"
    );
    let retried = calls
        .iter()
        .filter(|c| {
            let attempts = c.outbound_call_attempts.as_deref().unwrap_or_default();
            attempts.len() >= 2 && attempts[1].started_at.unwrap() >= started
        })
        .count();
    assert!(retried > 0, "calls were retried after their cooldown");
    let progress: std::collections::BTreeSet<_> = calls
        .iter()
        .map(|c| (c.status.as_str(), c.progress.as_deref().unwrap_or("")))
        .collect();
    for state in [
        ("completed", "answered"),
        ("completed", "unanswered"),
        ("pending", "unanswered"),
    ] {
        assert!(progress.contains(&state), "{state:?} in {progress:?}");
    }
    // Still at work after the first rush: attempts ended in the last half second.
    let recent = now.saturating_sub(Duration::from_millis(500));
    assert!(
        calls
            .iter()
            .flat_map(|c| c.outbound_call_attempts.iter().flatten())
            .any(|a| a.updated_at.unwrap() >= recent),
        "the dialer keeps producing changes"
    );
}

#[tokio::test]
async fn the_same_seed_replays_the_same_run() {
    let run = |seed: u64| async move {
        let sim = start(SimulatorOptions {
            seed,
            calls_per_schedule: 3,
            ..SimulatorOptions::default()
        })
        .await;
        let schedule = sim.schedule_uids()[0];
        let seeded: Vec<_> = sim.truth(schedule).iter().map(|c| c.uid).collect();
        // Made at runtime, after the seeded data: from the seed's second stream.
        let created = sim.bulk_create_now(schedule, 3);
        sim.shutdown().await;
        (seeded, created)
    };
    let (seeded, created) = run(5).await;
    assert_eq!(run(5).await, (seeded.clone(), created.clone()));
    let (other_seeded, other_created) = run(6).await;
    assert_ne!(other_seeded, seeded);
    assert_ne!(other_created, created);
    assert!(created.iter().all(|uid| !seeded.contains(uid)));
}

/// One answer, as bytes: the status, the `Date` header and the body, with the simulator's
/// own address (which differs between two simulators by design) written as `{base_url}`.
async fn raw(
    sim: &Simulator,
    http: &reqwest::Client,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, String, String) {
    let base = sim.base_url().as_str().trim_end_matches('/').to_owned();
    let mut request = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(sim.access_token());
    if let Some(body) = body {
        request = request.json(&body);
    }
    let r = request.send().await.expect("request");
    let status = r.status().as_u16();
    let date = r.headers()[reqwest::header::DATE]
        .to_str()
        .expect("a Date")
        .to_owned();
    let text = r.text().await.expect("body").replace(&base, "{base_url}");
    (status, date, text)
}

/// Two answers are the same byte for byte; if not, shows where they part.
fn assert_same_answer(i: usize, a: &(u16, String, String), b: &(u16, String, String)) {
    assert_eq!((a.0, &a.1), (b.0, &b.1), "answer {i}: status and Date");
    if a.2 != b.2 {
        let at =
            a.2.bytes()
                .zip(b.2.bytes())
                .take_while(|(x, y)| x == y)
                .count();
        let around = |text: &str| {
            let bytes = text.as_bytes();
            String::from_utf8_lossy(&bytes[at.saturating_sub(80)..(at + 80).min(bytes.len())])
                .into_owned()
        };
        panic!(
            "answer {i} differs between two runs of one seed and clock, from byte {at}:\n{}\n{}",
            around(&a.2),
            around(&b.2)
        );
    }
}

#[tokio::test]
async fn a_manual_clock_and_a_seed_replay_a_run_byte_for_byte() {
    let t0 = Timestamp::parse("2026-02-03T04:05:06.789012345Z").unwrap();
    let options = |clock: &ManualClock| SimulatorOptions {
        seed: 21,
        clock: clock.clone().into(),
        schedules: 2,
        calls_per_schedule: 120,
        late_commit: Some(Duration::from_secs(2)),
        dialer: Some(DialerOptions {
            tick: Duration::from_millis(100),
            calls_per_tick: 1,
            time_scale: 1.0,
            new_calls_every: Some(Duration::from_secs(120)),
            child_changes_without_bump: true,
        }),
        faults: FaultPlan {
            error_5xx_rate: 0.2,
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    };
    // The same requests at the same instants of the clock; each run's answers, in order.
    let run = || async {
        let clock = ManualClock::new(t0);
        let sim = start(options(&clock)).await;
        let http = client();
        let s = sim.schedule_uids();
        let mut answers = Vec::new();
        for minute in 0..20 {
            for schedule in &s {
                for page in 1..=2 {
                    let path = format!(
                        "/api/v1/schedules/{schedule}/outbound_calls?updated_after=2026-01-01T00:00:00Z&page={page}&page_size=100"
                    );
                    answers.push(raw(&sim, &http, reqwest::Method::GET, &path, None).await);
                }
            }
            if minute == 7 {
                let body = json!({"phone_number": "+15550001234", "first_name": "Ada"});
                let path = format!("/api/v1/schedules/{}/outbound_calls?force=true", s[1]);
                answers.push(raw(&sim, &http, reqwest::Method::POST, &path, Some(body)).await);
            }
            // Uneven steps: the dialer's ticks fall on the clock, wherever the steps end.
            clock.advance(Duration::from_millis(60_000 + 137 * minute));
        }
        let truth: Vec<Vec<OutboundCall>> = s.iter().map(|s| sim.truth(*s)).collect();
        sim.shutdown().await;
        (answers, truth)
    };
    let (first, truth) = run().await;
    let (second, _) = run().await;
    assert_eq!(first.len(), second.len());
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_same_answer(i, a, b);
    }
    // The run did what it had to replay: faults, a new call, and the dialer's work over 20
    // minutes of the clock (attempts stamped after the start, calls that arrived).
    assert!(first.iter().any(|(status, _, _)| *status >= 500));
    assert!(first.iter().any(|(status, _, _)| *status == 201));
    let calls: Vec<&OutboundCall> = truth.iter().flatten().collect();
    assert!(calls.iter().filter(|c| c.updated_at > t0).count() > 20);
    assert!(
        calls
            .iter()
            .any(|c| c.created_at > t0 && c.status == "completed")
    );
    assert!(
        calls
            .iter()
            .all(|c| c.updated_at <= t0.saturating_add(Duration::from_millis(1_226_030))),
        "nothing is stamped after where the 20 steps left the clock"
    );
    assert_eq!(first[0].1, "Tue, 03 Feb 2026 04:05:06 GMT");
    // 19 steps after 04:05:06.789: 19 minutes and 23.427 s later.
    assert_eq!(first.last().unwrap().1, "Tue, 03 Feb 2026 04:24:30 GMT");
}

#[tokio::test]
async fn the_date_header_follows_the_manual_clock() {
    let clock = ManualClock::new(Timestamp::parse("2031-05-06T07:08:09.999Z").unwrap());
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = p.sim.schedule_uids()[0];
    let list = format!("/api/v1/schedules/{schedule}/outbound_calls");
    let date = |r: &reqwest::Response| {
        r.headers()[reqwest::header::DATE]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let answer = p
        .http
        .get(p.url(&list))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(date(&answer), "Tue, 06 May 2031 07:08:09 GMT");
    clock.advance(Duration::from_millis(61_001));
    // Every answer carries it: a success, an error, the token endpoint.
    let answer = p
        .http
        .get(p.url(&list))
        .bearer_auth(p.sim.access_token())
        .send()
        .await
        .unwrap();
    assert_eq!(date(&answer), "Tue, 06 May 2031 07:09:11 GMT");
    let unauthorized = p.http.get(p.url(&list)).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(date(&unauthorized), "Tue, 06 May 2031 07:09:11 GMT");
    let token = p
        .http
        .post(p.sim.token_url())
        .form(&[("grant_type", "client_credentials")])
        .basic_auth(p.sim.client_id(), Some(p.sim.client_secret()))
        .send()
        .await
        .unwrap();
    assert_eq!(token.status(), StatusCode::OK);
    assert_eq!(date(&token), "Tue, 06 May 2031 07:09:11 GMT");
    assert_eq!(
        p.sim.now(),
        Timestamp::parse("2031-05-06T07:09:11.000Z").unwrap()
    );
}

#[tokio::test]
async fn a_call_created_at_a_manual_instant_is_stamped_with_it() {
    let at = Timestamp::parse("2030-01-01T00:00:00.123456789Z").unwrap();
    let clock = ManualClock::new(at);
    let p = Probe::new(SimulatorOptions {
        clock: clock.clone().into(),
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = p.sim.schedule_uids()[0];
    // The seeded history ends before the clock's start second.
    assert!(p.truth().iter().all(|c| c.updated_at <= at));
    let (status, call) = p
        .send(
            reqwest::Method::POST,
            &format!("/api/v1/schedules/{schedule}/outbound_calls?force=true"),
            json!({"phone_number": "+15550001234"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{call}");
    // Microseconds, the simulator's default precision.
    assert_eq!(call["created_at"], "2030-01-01T00:00:00.123456Z");
    assert_eq!(call["updated_at"], "2030-01-01T00:00:00.123456Z");
    clock.advance(Duration::from_secs(3600));
    let uids = p.sim.bulk_create_now(schedule, 2);
    let later = Timestamp::parse("2030-01-01T01:00:00.123456Z").unwrap();
    let (_, detail) = p.get(&format!("/api/v1/outbound_calls/{}", uids[0])).await;
    assert_eq!(detail["created_at"], later.to_rfc3339().as_str());
    let truth = p.truth();
    let stamped = |uid: &str| {
        truth
            .iter()
            .find(|c| c.uid.to_string() == uid)
            .map(|c| (c.created_at, c.updated_at))
    };
    let single = call["uid"].as_str().unwrap();
    assert_eq!(
        stamped(single),
        Some((
            Timestamp::parse("2030-01-01T00:00:00.123456Z").unwrap(),
            Timestamp::parse("2030-01-01T00:00:00.123456Z").unwrap()
        ))
    );
    assert_eq!(stamped(&uids[1].to_string()), Some((later, later)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_wait_for_the_test_and_the_others_go_on() {
    use crate::harness::PATIENCE;
    use tokio::time::timeout;

    let p = Probe::new(SimulatorOptions::default()).await;
    let s = p.sim.schedule_uids()[0];
    let bulk = format!("/api/v1/schedules/{s}/outbound_calls/bulk?force=true");
    let calls = |phone: &str| json!({"outbound_calls": [{"phone_number": phone}]});
    let seeded = p.sim.truth(s).len();

    // Writes: only the first is held; the second goes on meanwhile.
    let hold = p.sim.hold_writes(1, 1);
    let first = tokio::spawn({
        let (http, url, token) = (client(), p.url(&bulk), p.sim.access_token());
        let body = calls("+15550201");
        async move {
            let sent = http.post(url).bearer_auth(token).json(&body).send();
            sent.await.expect("request").status()
        }
    });
    timeout(PATIENCE, hold.arrived(1))
        .await
        .expect("the first write arrives");
    let (status, _) = timeout(
        PATIENCE,
        p.send(reqwest::Method::POST, &bulk, calls("+15550202")),
    )
    .await
    .expect("the second write is not held");
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        p.sim.truth(s).len(),
        seeded + 1,
        "the held write was not acted on"
    );
    assert!(!first.is_finished());
    drop(hold);
    assert_eq!(
        timeout(PATIENCE, first).await.expect("released").unwrap(),
        StatusCode::CREATED
    );
    assert_eq!(p.sim.truth(s).len(), seeded + 2);

    // List requests: from the second on, until released.
    let hold = p.sim.hold_list_requests(2);
    p.list("page=1").await;
    let second = tokio::spawn({
        let (http, url, token) = (
            client(),
            p.url(&format!("/api/v1/schedules/{s}/outbound_calls?page=1")),
            p.sim.access_token(),
        );
        async move {
            http.get(url)
                .bearer_auth(token)
                .send()
                .await
                .expect("request")
                .status()
        }
    });
    timeout(PATIENCE, hold.arrived(2))
        .await
        .expect("the second list request arrives");
    assert!(!second.is_finished());
    hold.release(2);
    assert_eq!(
        timeout(PATIENCE, second).await.expect("released").unwrap(),
        StatusCode::OK
    );
}

/// `CallShape::Eighteen`: every seeded call carries 18 rows (the call, 4 custom parameters,
/// 2 attempts, 4 outcomes, 6 variables, 1 notification), every uid distinct and random (v4),
/// none stamped after the service's clock.
#[tokio::test]
async fn the_eighteen_row_shape_gives_every_call_18_rows_with_random_uids() {
    let sim = start(SimulatorOptions {
        calls_per_schedule: 200,
        shape: callsync::simulator::CallShape::Eighteen,
        ..SimulatorOptions::default()
    })
    .await;
    let schedule = sim.schedule_uids()[0];
    let calls = sim.truth(schedule);
    assert_eq!(calls.len(), 200);
    let now = Timestamp::now();
    let mut uids = std::collections::HashSet::new();
    for call in &calls {
        let attempts = call.outbound_call_attempts.as_deref().unwrap();
        let outcomes: usize = attempts
            .iter()
            .map(|a| a.call_outcomes.as_ref().unwrap().len())
            .sum();
        let variables: usize = attempts
            .iter()
            .map(|a| a.call_attempts_variables.as_ref().unwrap().len())
            .sum();
        let notifications = call.notifications().unwrap();
        let counts = (
            call.outbound_call_info.custom_parameters.len(),
            attempts.len(),
            outcomes,
            variables,
            notifications.len(),
        );
        assert_eq!(counts, (4, 2, 4, 6, 1), "{}", call.uid);
        assert!(call.updated_at <= now, "{} updated in the future", call.uid);
        let children = attempts.iter().flat_map(|a| {
            std::iter::once(a.uid)
                .chain(a.call_outcomes.iter().flatten().map(|o| o.uid))
                .chain(a.call_attempts_variables.iter().flatten().map(|v| v.uid))
        });
        for uid in std::iter::once(call.uid)
            .chain(children)
            .chain(notifications.iter().map(|n| n.uid))
        {
            assert_eq!(uid.get_version_num(), 4);
            assert!(uids.insert(uid), "{uid} repeated");
        }
    }
}
