//! Bytes the service should not have sent, on the binary: a name with a byte that is not
//! UTF-8, or a NUL, is stored with U+FFFD and logged once, naming its call, and the pass
//! completes (a NUL alike on every destination); so is half a surrogate pair (a lone
//! `\ud83d`), in names and parameters, listed or in details; a page nested too deep to read
//! fails its pass at once, asked once, as `bad_response`, in `sync --json` and in `status`.

use callsync::simulator::{BadBody, FaultPlan, LoneSurrogate, SimulatorOptions};
use callsync::warehouse::Destination;
use serde_json::Value;

use crate::cli::{callsync, stderr};
use crate::harness::TestEnv;

/// stdout's JSON lines, one pass each.
fn pass_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect()
}

/// The pass line of `schedule`.
fn line_of(lines: &[Value], schedule: uuid::Uuid) -> &Value {
    lines
        .iter()
        .find(|l| l["schedule_uid"] == schedule.to_string())
        .unwrap_or_else(|| panic!("no pass line for {schedule}: {lines:?}"))
}

/// `callsync sync --json` of `env`: exit 0, every schedule's pass completed without a retry.
async fn sync_completing_every_pass(
    env: &TestEnv,
    schedules: &[uuid::Uuid],
) -> std::process::Output {
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let out = callsync(&["--config", c, "sync", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = pass_lines(&out);
    for schedule in schedules {
        let line = line_of(&lines, *schedule);
        assert_eq!(
            (line["outcome"].as_str(), line["retries"].as_u64()),
            (Some("completed"), Some(0)),
            "{line}"
        );
    }
    out
}

/// The list requests the simulator received for `schedule`.
fn list_requests(env: &TestEnv, schedule: uuid::Uuid) -> usize {
    let path = format!("/api/v1/schedules/{schedule}/outbound_calls");
    env.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .count()
}

conformance!(
    a_name_the_service_garbled_is_stored_with_a_replacement_and_logged_once,
    garbled_name_stored_with_a_replacement,
    [
        not_utf8 => callsync::simulator::BadBody::InvalidUtf8Name,
        nul => callsync::simulator::BadBody::NulInName,
    ]
);

/// A name ending in a byte that is not UTF-8, or in a NUL (`\u0000`: JSON allows it,
/// PostgreSQL's text does not), is stored with U+FFFD in its place on every destination
/// alike, logged once at WARN naming the call, and every pass completes without a retry: one
/// character never holds a schedule back.
async fn garbled_name_stored_with_a_replacement(
    dest: crate::harness::Dest,
    garble: fn(uuid::Uuid) -> BadBody,
) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 150,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let mut truth = env.sim.truth(s[0]);
    truth.sort_by_key(|c| c.updated_at);
    // Inside the first page, not on its last row: listed once.
    let garbled = truth[50].uid;
    let name = truth[50].outbound_call_info.first_name.clone();
    assert!(
        name.as_deref().is_some_and(|n| !n.is_empty()),
        "a seeded call with a first name: {name:?}"
    );
    env.sim.break_schedule(s[0], Some(garble(garbled)));
    let out = sync_completing_every_pass(&env, &s).await;
    // One WARN line, naming the call.
    let err = stderr(&out);
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("not UTF-8")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(
        warned[0].contains(" WARN ") && warned[0].contains(&format!("uid={garbled}")),
        "{err}"
    );

    // The warehouse: the truth, with U+FFFD where the byte or the NUL was.
    let mut expected = truth;
    expected[50].outbound_call_info.first_name = name.map(|n| format!("{n}\u{FFFD}"));
    env.assert_holds(s[0], &expected);
    env.assert_holds(s[1], &env.sim.truth(s[1]));
}

conformance!(
    lone_surrogates_are_stored_as_replacements_and_the_pass_completes,
    lone_surrogates_stored_as_replacements,
    [
        listed => false,
        from_details => true,
    ]
);

/// Half a surrogate pair in a call's text (a lone `\ud83d`, as a JavaScript or Java service
/// writes a string cut mid-emoji) is stored as U+FFFD where it was, on every destination;
/// a whole pair stays its emoji; every call is stored, each pass completes without a retry,
/// its checkpoint at the newest call, and each call so served is named at WARN. The calls
/// come from the list pages, or (a summary list) from their details.
async fn lone_surrogates_stored_as_replacements(dest: crate::harness::Dest, summary_list: bool) {
    const RATE: f64 = 0.2;
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 150,
            summary_list,
            faults: FaultPlan {
                lone_surrogate_rate: RATE,
                ..FaultPlan::default()
            },
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let (expected, served): (Vec<_>, Vec<_>) = s
        .iter()
        .map(|schedule| with_replacements(&env.sim.truth(*schedule), RATE))
        .unzip();
    let served: std::collections::BTreeSet<uuid::Uuid> = served.into_iter().flatten().collect();
    let forms: std::collections::BTreeSet<String> = served
        .iter()
        .map(|uid| format!("{:?}", LoneSurrogate::of(*uid, RATE)))
        .collect();
    assert_eq!(forms.len(), 4, "every form served: {forms:?}");
    let out = sync_completing_every_pass(&env, &s).await;
    // The WARN lines name exactly the calls served with a lone surrogate.
    let err = stderr(&out);
    let named: std::collections::BTreeSet<uuid::Uuid> = err
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("half a surrogate pair"))
        .map(|l| {
            let uid = l.split("uid=").nth(1).and_then(|rest| rest.get(..36));
            uid.and_then(|u| u.parse().ok())
                .unwrap_or_else(|| panic!("a WARN naming no call: {l}"))
        })
        .collect();
    assert_eq!(named, served, "{err}");

    for (schedule, expected) in s.iter().zip(&expected) {
        env.assert_holds(*schedule, expected);
        let newest = expected.iter().map(|c| c.updated_at).max();
        assert_eq!(checkpoint(&env, *schedule), newest, "{schedule}");
    }
}

/// `calls` as the warehouse must hold them when served at `rate` (`LoneSurrogate` says
/// which calls get what): U+FFFD where each lone surrogate was, an emoji where a pair was;
/// and the calls so served.
fn with_replacements(
    calls: &[callsync::service::OutboundCall],
    rate: f64,
) -> (Vec<callsync::service::OutboundCall>, Vec<uuid::Uuid>) {
    let mut expected = calls.to_vec();
    let mut served = Vec::new();
    for call in &mut expected {
        let Some(form) = LoneSurrogate::of(call.uid, rate) else {
            continue;
        };
        let stored = match form {
            LoneSurrogate::HighAtTheEnd | LoneSurrogate::LoneLow => "\u{FFFD}",
            LoneSurrogate::HighBeforeAnotherEscape => "\u{FFFD}\u{e9}",
            LoneSurrogate::EmojiThenHalf => "\u{1F600}\u{FFFD}",
        };
        served.push(call.uid);
        let info = &mut call.outbound_call_info;
        let name = info
            .first_name
            .as_mut()
            .expect("a seeded call has a first name");
        name.push_str(stored);
        let parameter = info.custom_parameters.values_mut().find_map(|v| match v {
            Value::String(text) => Some(text),
            _ => None,
        });
        let parameter = parameter.expect("a seeded call has a parameter holding text");
        parameter.insert(0, '\u{FFFD}');
    }
    assert!(served.len() >= 10, "some calls served so: {served:?}");
    (expected, served)
}

/// The schedule's checkpoint, wherever the warehouse is.
fn checkpoint(env: &TestEnv, schedule: uuid::Uuid) -> Option<callsync::service::Timestamp> {
    let saved = match &env.pg {
        Some(db) => callsync::warehouse::postgres::PgWarehouse::open_existing(&db.target())
            .expect("open")
            .checkpoint(schedule),
        None => callsync::warehouse::sqlite::Warehouse::open(
            &env.warehouse_path(),
            std::time::Duration::from_secs(5),
        )
        .expect("open")
        .checkpoint(schedule),
    };
    saved.expect("checkpoint").map(|c| c.cursor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_nested_too_deep_fails_its_pass_at_once_as_a_bad_response() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 30,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    env.sim.break_schedule(s[0], Some(BadBody::DeeplyNested));
    // Five attempts allowed, a few milliseconds apart: none is made.
    let config = env.write_config("");
    let c = config.to_str().unwrap();

    let out = callsync(&["--config", c, "sync", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = pass_lines(&out);
    let failed = line_of(&lines, s[0]);
    assert_eq!(
        (
            failed["outcome"].as_str(),
            failed["error_kind"].as_str(),
            failed["requests"].as_u64(),
            failed["retries"].as_u64()
        ),
        (Some("failed"), Some("bad_response"), Some(1), Some(0)),
        "{failed}"
    );
    let error = failed["error"].as_str().unwrap_or_default().to_owned();
    let request = format!("GET /api/v1/schedules/{}/outbound_calls?", s[0]);
    assert!(
        error.starts_with(&request)
            && error.contains(
                ": unreadable response (bad_response; application/json): recursion limit exceeded"
            ),
        "{error}"
    );
    assert_eq!(list_requests(&env, s[0]), 1, "asked once, never again");
    assert_eq!(line_of(&lines, s[1])["outcome"], "completed");
    env.assert_holds(s[0], &[]);
    env.assert_holds(s[1], &env.sim.truth(s[1]));

    // `status`, as text and as JSON, shows the error with its kind; exit 3.
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["schedule_uid"] == s[0].to_string())
        .unwrap();
    assert_eq!(row["last_result"], "failed");
    assert_eq!(row["last_run"]["error"].as_str(), Some(error.as_str()));
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("FAILED (bad_response): {error}")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
