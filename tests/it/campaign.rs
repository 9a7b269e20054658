//! The write half on the command line: call flow → campaign → schedule → call → enable,
//! against the simulator, through the release binary's own argument parsing and exit codes.

use std::process::Output;

use callsync::simulator::SimulatorOptions;
use uuid::Uuid;

use crate::harness::{PATIENCE, TestEnv, wait_for};

async fn callsync(config: &std::path::Path, args: &[&str]) -> Output {
    callsync_with(config, args, &[]).await
}

/// callsync with `CALLSYNC_…` settings over the config file's.
async fn callsync_with(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    command(config, args, env)
        .output()
        .await
        .expect("callsync runs")
}

fn command(
    config: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    command
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn uid(out: &Output) -> Uuid {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
        .parse()
        .unwrap_or_else(|_| panic!("a uid, not {:?}", stdout(out)))
}

fn posts(env: &TestEnv) -> usize {
    env.sim
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_is_set_up_from_the_command_line() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 1,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let flow = env.sim.call_flow_uid().to_string();

    let out = callsync(&config, &["call-flow", &flow]).await;
    assert_eq!(uid(&out), env.sim.campaign_uid());
    let out = callsync(&config, &["call-flow", &flow, "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["campaign_uid"], env.sim.campaign_uid().to_string());

    let campaign = uid(&callsync(
        &config,
        &["campaign", "create", "--name", "Spring renewals"],
    )
    .await);
    let schedule_args = |starts: &'static str, ends: &'static str, intervals: &'static str| {
        vec![
            "schedule",
            "create",
            "--campaign",
            Box::leak(campaign.to_string().into_boxed_str()),
            "--name",
            "Week 1",
            "--starts-at",
            starts,
            "--ends-at",
            ends,
            "--retry-intervals",
            intervals,
        ]
    };

    // Refused before anything is sent: exit 2, one line naming the problem.
    let before = posts(&env);
    for (args, problem) in [
        (
            schedule_args("2026-03-02T09:00:00Z", "2026-03-01T09:00:00Z", "60,300"),
            "is not after --starts-at",
        ),
        (
            schedule_args("2026-03-01T09:00:00Z", "2026-03-02T09:00:00Z", "60,-5"),
            "-5 is not a positive number",
        ),
        (
            schedule_args("2026-03-01T09:00:00", "2026-03-02T09:00:00Z", "60"),
            "--starts-at",
        ),
    ] {
        let out = callsync(&config, &args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(problem),
            "{problem}: {}",
            stderr(&out)
        );
    }
    assert_eq!(posts(&env), before, "nothing was sent");

    let out = callsync(
        &config,
        &schedule_args(
            "2026-03-01T09:00:00Z",
            "2026-03-31T17:00:00+02:00",
            "60,300,900",
        ),
    )
    .await;
    let schedule = uid(&out).to_string();

    let call = [
        "call",
        "create",
        "--schedule",
        &schedule,
        "--phone",
        "+15550100",
        "--name",
        "Ada",
        "--external-id",
        "ext-1",
        "--param",
        "plan=gold",
        "--param",
        "renewal_at=2026-04-01T00:00:00Z",
    ];
    let created = uid(&callsync(&config, &call).await);
    // --json: the object the service answered, custom parameters keyed by numeric id as
    // endpoint 4 answers them.
    let mut as_json = call.to_vec();
    as_json[9] = "ext-2";
    as_json.push("--json");
    let out = callsync(&config, &as_json).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["external_id"], "ext-2", "{json}");
    let params = json["outbound_call_info"]["custom_parameters"]
        .as_object()
        .unwrap();
    assert_eq!(params.len(), 2, "{json}");
    assert!(params.keys().all(|k| k.parse::<u32>().is_ok()), "{json}");
    assert!(params.values().any(|v| v == "gold"), "{json}");
    let third: Uuid = json["uid"].as_str().unwrap().parse().unwrap();
    let bad = callsync(
        &config,
        &[
            "call",
            "create",
            "--schedule",
            &schedule,
            "--phone",
            "555-0100",
            "--param",
            "due_at=2026-04-01 10:00",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("phone_number:"), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("due_at:"), "{}", stderr(&bad));

    let out = callsync(&config, &["schedule", "enable", &schedule]).await;
    assert_eq!(stdout(&out), format!("schedule {schedule} is enabled"));
    // An enabled schedule takes calls only with --force: the service's 409, explained.
    let refused = callsync(&config, &call).await;
    assert_eq!(refused.status.code(), Some(1));
    let line = stderr(&refused);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("HTTP 409"), "{line}");
    assert!(line.contains("with --force"), "{line}");
    let mut forced = call.to_vec();
    forced.push("--force");
    let second = uid(&callsync(&config, &forced).await);
    let out = callsync(&config, &["schedule", "disable", &schedule, "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["is_enabled"], false);

    // The service holds exactly what was created, custom parameters keyed by name.
    let truth = env.sim.truth(schedule.parse().unwrap());
    let uids: Vec<Uuid> = truth.iter().map(|c| c.uid).collect();
    assert_eq!(uids.len(), 3);
    assert!(uids.contains(&created) && uids.contains(&second) && uids.contains(&third));
    let info = &truth[0].outbound_call_info;
    assert_eq!(info.custom_parameters["plan"], "gold");

    // What callsync created, it remembers, names included, for BI.
    let db = rusqlite::Connection::open(env.warehouse_path()).unwrap();
    let (name, kind, enabled): (String, String, bool) = db
        .query_row(
            "SELECT name, type, is_enabled FROM campaigns WHERE uid = ?1",
            [campaign.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (name.as_str(), kind.as_str(), enabled),
        ("Spring renewals", "scheduled_call", false)
    );
    let (name, of, intervals, enabled): (String, String, String, bool) = db
        .query_row(
            "SELECT name, campaign_uid, retry_intervals, is_enabled FROM schedules WHERE uid = ?1",
            [&schedule],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (name.as_str(), of, intervals.as_str(), enabled),
        ("Week 1", campaign.to_string(), "[60,300,900]", false),
        "the last state set (disabled) and the campaign kept"
    );

    // --json on the creates: the objects as the service answered them.
    let out = callsync(
        &config,
        &["campaign", "create", "--name", "Autumn", "--json"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&json["name"], &json["is_enabled"], &json["type"]),
        (&"Autumn".into(), &false.into(), &"scheduled_call".into()),
        "{json}"
    );
    let autumn = json["uid"].as_str().unwrap().to_owned();
    let out = callsync(
        &config,
        &[
            "schedule",
            "create",
            "--campaign",
            &autumn,
            "--name",
            "Week 9",
            "--starts-at",
            "2026-10-01T09:00:00Z",
            "--ends-at",
            "2026-10-02T09:00:00Z",
            "--retry-intervals",
            "60,300",
            "--json",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["name"], "Week 9", "{json}");
    assert_eq!(
        json["retry_intervals"],
        serde_json::json!([60, 300]),
        "{json}"
    );
    assert_eq!(json["is_enabled"], false, "{json}");
    assert!(
        json["uid"].as_str().unwrap().parse::<Uuid>().is_ok(),
        "{json}"
    );

    // A uid the service does not know: 404, one line, exit 1.
    let missing = callsync(&config, &["schedule", "enable", &Uuid::nil().to_string()]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("HTTP 404"),
        "{}",
        stderr(&missing)
    );
}

/// A contact list of `rows` rows: a header, then rows numbered from 0 (CSV line = n + 2).
fn contacts(rows: usize, bad: impl Fn(usize) -> Option<String>) -> String {
    let mut text = String::from(CONTACTS_HEADER);
    for n in 0..rows {
        let row = bad(n).unwrap_or_else(|| contact(n));
        text.push_str(&row);
        text.push('\n');
    }
    text
}

const CONTACTS_HEADER: &str = "phone,full_name,external_id,plan,renewal_at\n";

/// Contact `n`: its own phone number and `ext-n`.
fn contact(n: usize) -> String {
    format!(
        "+1555{n:07},\"Contact {n}, Esq.\",ext-{n},{},2026-04-01T00:00:00Z",
        ["gold", "silver"][n % 2]
    )
}

/// A contact list of these contacts, in this order.
fn contacts_numbered(numbers: impl Iterator<Item = usize>) -> String {
    let mut text = String::from(CONTACTS_HEADER);
    for n in numbers {
        text.push_str(&contact(n));
        text.push('\n');
    }
    text
}

/// The list requests the simulator has answered.
fn list_requests(env: &TestEnv) -> Vec<callsync::simulator::RequestRecord> {
    env.sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/outbound_calls"))
        .collect()
}

/// A test env with one disabled schedule, its config, and a CSV file of `text`.
async fn upload_env(text: &str) -> (TestEnv, std::path::PathBuf, std::path::PathBuf, String) {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 0,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let schedule = env.schedules()[0].to_string();
    let out = callsync(&config, &["schedule", "disable", &schedule]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = env.warehouse_path().with_file_name("contacts.csv");
    std::fs::write(&csv, text).unwrap();
    (env, config, csv, schedule)
}

fn upload_args<'a>(schedule: &'a str, csv: &'a std::path::Path) -> Vec<&'a str> {
    vec![
        "upload",
        "--schedule",
        schedule,
        csv.to_str().unwrap(),
        "--map",
        "phone=phone_number",
    ]
}

/// The schedule's calls by external_id; panics on a duplicate.
fn created_by_external_id(
    env: &TestEnv,
    schedule: &str,
) -> std::collections::BTreeMap<String, Uuid> {
    let mut seen = std::collections::BTreeMap::new();
    for call in env.sim.truth(schedule.parse().unwrap()) {
        let id = call
            .external_id
            .clone()
            .expect("every uploaded call has an external_id");
        assert!(
            seen.insert(id.clone(), call.uid).is_none(),
            "{id} created twice"
        );
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contact_list_becomes_calls_once_and_syncs_with_its_parameters() {
    let (env, config, csv, schedule) = upload_env(&contacts(2_500, |_| None)).await;
    let lists_before = list_requests(&env).len();
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("2500 rows: 2500 calls created (3 chunks), 0 found already created (0 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"),
        "{}",
        stdout(&out)
    );
    let created = created_by_external_id(&env, &schedule);
    assert_eq!(created.len(), 2_500);
    // The service got at most 1,000 entries a request.
    let bulks = env
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/bulk"))
        .count();
    assert_eq!(bulks, 3);
    // The empty schedule was listed in one request.
    assert_eq!(list_requests(&env).len() - lists_before, 1);

    // Again: the ledger knows every chunk; nothing is sent, nor even asked.
    let lists_before = list_requests(&env).len();
    let again = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(
        stdout(&again).ends_with("2500 rows: 0 calls created (0 chunks), 2500 found already created (3 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"),
        "{}",
        stdout(&again)
    );
    assert_eq!(created_by_external_id(&env, &schedule), created);
    assert_eq!(
        list_requests(&env).len(),
        lists_before,
        "a finished upload asks nothing"
    );

    // The daemon's sync brings them into the warehouse, parameters keyed by name.
    let s = env.schedules();
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
    let db = rusqlite::Connection::open(env.warehouse_path()).unwrap();
    let gold: i64 = db
        .query_row(
            "SELECT count(*) FROM call_custom_parameters WHERE name = 'plan' AND value = 'gold'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(gold, 1_250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rows_are_all_reported_by_line_and_column_and_nothing_is_sent() {
    let text = contacts(3_000, |n| match n {
        1 => Some("555-0100,Bad Phone,ext-1,gold,2026-04-01T00:00:00Z".into()),
        3 => Some("+15550003,No Id,,gold,2026-04-01T00:00:00Z".into()),
        5 => Some("+15550005,Twin,ext-4,gold,2026-04-01T00:00:00Z".into()),
        // A field short, a field too many (an unquoted comma): each one row's problem.
        7 => Some("+15550007,Short Row,ext-7".into()),
        10 => Some("+15550010,Doe, Jane,ext-10,gold,2026-04-01T00:00:00Z".into()),
        2_900 => Some("+15552900,Local Time,ext-2900,gold,2026-04-01 10:00".into()),
        // Longer than E.164 allows (15 digits): the service would refuse the whole chunk.
        2_950 => Some("+1234567890123456,Sixteen,ext-2950,gold,2026-04-01T00:00:00Z".into()),
        2_951 => Some("+1234567890123456789,Nineteen,ext-2951,gold,2026-04-01T00:00:00Z".into()),
        _ => None,
    });
    let (env, config, csv, schedule) = upload_env(&text).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    for expected in [
        "line 3, column phone: ",
        "line 5, column external_id: missing",
        "line 7, column external_id: \"ext-4\" is also on line 6",
        "line 9: 3 fields where the header has 5",
        "line 12: 6 fields where the header has 5",
        "line 2902, column renewal_at: ",
        "line 2952, column phone: \"+1234567890123456\" is not in international form (E.164): + followed by 7 to 15 digits",
        "line 2953, column phone: \"+1234567890123456789\" is not in international form",
        "8 problems in 3000 rows; nothing was sent",
    ] {
        assert!(err.contains(expected), "{expected:?} missing from:\n{err}");
    }
    assert_eq!(posts(&env), 1, "only the disable before the upload");
    assert!(env.sim.truth(schedule.parse().unwrap()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chunk_names_its_csv_lines_the_others_are_sent_and_a_rerun_finishes_the_file() {
    // Row 1,005 (chunk 2, entry 5) has a value the service refuses (a parameter named
    // `…_at` must be a datetime, to it), though callsync sees no datetime to check.
    let text = contacts(2_500, |n| {
        (n == 1_005).then(|| "+15550001005,Soon,ext-1005,gold,next week".into())
    });
    let (env, config, csv, schedule) = upload_env(&text).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("line 1007, column renewal_at: Invalid custom parameter"),
        "{err}"
    );
    assert!(err.contains("the service refused 1000 rows of"), "{err}");
    // Chunks 1 and 3 were sent: the refusal is counted, not the end of the upload.
    assert!(
        stdout(&out).ends_with(
            "2500 rows: 1500 calls created (2 chunks), 0 found already created (0 chunks), 0 skipped (already in the schedule), 1000 refused by the service (1 chunk)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 1_500);

    let fixed = contacts(2_500, |_| None);
    std::fs::write(&csv, fixed).unwrap();
    // A changed file is another upload: its chunks 1 and 3 are looked up, not resent.
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "2500 rows: 1000 calls created (1 chunk), 1500 found already created (2 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 2_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enabled_schedule_is_refused_without_force() {
    let (env, config, csv, schedule) = upload_env(&contacts(10, |_| None)).await;
    callsync(&config, &["schedule", "enable", &schedule]).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the schedule is enabled"),
        "{}",
        stderr(&out)
    );
    assert!(env.sim.truth(schedule.parse().unwrap()).is_empty());
    let mut forced = upload_args(&schedule, &csv);
    forced.push("--force");
    let out = callsync(&config, &forced).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(created_by_external_id(&env, &schedule).len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_killed_at_any_instant_and_run_again_creates_each_call_once() {
    use callsync::simulator::FaultPlan;
    use std::time::Duration;

    let rows = 6_000;
    let (env, config, csv, schedule) = upload_env(&contacts(rows, |_| None)).await;
    // A short settle window (a killed run leaves a chunk `sent` that may never have gone
    // out: the next run waits that long for it before sending it).
    let quick = [
        ("CALLSYNC_API__REQUEST_TIMEOUT_SECS", "3"),
        ("CALLSYNC_API__CREATE_SETTLE_SECS", "1"),
    ];
    let spawn = || {
        command(&config, &upload_args(&schedule, &csv), &quick)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("callsync starts")
    };
    let count = || env.sim.truth(schedule.parse().unwrap()).len();

    // The hard case: the service created a chunk and holds its answer; the client dies
    // waiting. Twice, so that a run also resumes after a run that resumed.
    for _ in 0..2 {
        env.sim.set_faults(FaultPlan {
            hold_write_answers: Duration::from_secs(60),
            ..FaultPlan::default()
        });
        let before = count();
        let mut child = spawn();
        wait_for("a chunk created while its answer is held", || {
            count() > before
        })
        .await;
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
    // Then at arbitrary instants (seeded, so a failure replays).
    env.sim.set_faults(FaultPlan::default());
    let mut rng = 0x9e37_79b9_u64;
    for _ in 0..4 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let delay = Duration::from_millis(20 + (rng >> 33) % 400);
        let mut child = spawn();
        // Injected delay: the kill lands at a seeded instant, wherever the run is then (the
        // verdict, each call once, holds at any; the held cases above are the sure ones).
        tokio::time::sleep(delay).await;
        let _ = child.start_kill();
        child.wait().await.unwrap();
    }
    let out = callsync_with(&config, &upload_args(&schedule, &csv), &quick).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let created = created_by_external_id(&env, &schedule);
    let expected: std::collections::BTreeSet<String> =
        (0..rows).map(|n| format!("ext-{n}")).collect();
    assert_eq!(
        created
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        expected
    );
}

fn bulk_posts(env: &TestEnv) -> usize {
    env.sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/bulk"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_slower_than_the_request_timeout_gets_each_call_once() {
    use callsync::simulator::FaultPlan;
    use std::time::Duration;

    let (env, config, csv, schedule) = upload_env(&contacts(1_500, |_| None)).await;
    let slow = [
        ("CALLSYNC_API__REQUEST_TIMEOUT_SECS", "1"),
        ("CALLSYNC_API__CREATE_SETTLE_SECS", "20"),
    ];
    // Both ways a service outlasts the client: it acts late (the calls appear 2.5 s after
    // the request, long after the client gave up), or it acts at once and answers late.
    let late_action = FaultPlan {
        delay_writes: Duration::from_millis(2_500),
        ..FaultPlan::default()
    };
    let late_answer = FaultPlan {
        hold_write_answers: Duration::from_millis(2_500),
        ..FaultPlan::default()
    };
    let mut expected = 0;
    for (faults, external_ids) in [(late_action, "a"), (late_answer, "b")] {
        let text = contacts(1_500, |_| None).replace(",ext-", &format!(",{external_ids}-"));
        std::fs::write(&csv, text).unwrap();
        env.sim.set_faults(faults);
        let out = callsync_with(&config, &upload_args(&schedule, &csv), &slow).await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).ends_with(
                "1500 rows: 1500 calls created (2 chunks), 0 found already created (0 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"
            ),
            "{}",
            stdout(&out)
        );
        expected += 1_500;
        // Panics on an external_id created twice. (The request log cannot tell: it records
        // a request when its answer is sent, and an answer to a client gone is not sent.)
        assert_eq!(created_by_external_id(&env, &schedule).len(), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_killed_while_the_service_still_works_on_its_chunk_is_finished_once() {
    use callsync::simulator::FaultPlan;
    use std::time::Duration;

    let (env, config, csv, schedule) = upload_env(&contacts(1_500, |_| None)).await;
    // The service works on a chunk after the client is gone: its first write is held until
    // the test lets it go, then acted on 1 s later (an injected delay), client or not.
    env.sim.set_faults(FaultPlan {
        delay_writes: Duration::from_secs(1),
        ..FaultPlan::default()
    });
    let hold = env.sim.hold_writes(1, 1);
    let settle = [("CALLSYNC_API__CREATE_SETTLE_SECS", "30")];
    let writes_before = env.sim.delayed_writes();
    let mut first = command(&config, &upload_args(&schedule, &csv), &settle)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("callsync starts");
    // Killed once the service has the first chunk's request in full (and holds it).
    tokio::time::timeout(PATIENCE, hold.arrived(1))
        .await
        .expect("the first chunk reaches the service");
    assert_eq!(
        env.sim.delayed_writes(),
        writes_before + 1,
        "the chunk was sent"
    );
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    assert!(
        env.sim.truth(schedule.parse().unwrap()).is_empty(),
        "killed before the service created the chunk"
    );
    // Run again at once, the service now working on the first chunk: the ledger says it
    // went out moments ago, so the run waits for it (or finds it) instead of sending it again.
    drop(hold);
    let out = callsync_with(&config, &upload_args(&schedule, &csv), &settle).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "1500 rows: 500 calls created (1 chunk), 1000 found already created (1 chunk), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 1_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upload_into_the_same_schedule_is_refused_while_the_first_runs() {
    let (env, config, csv, schedule) = upload_env(&contacts(1_500, |_| None)).await;
    // The first run's first chunk is held by the service until the test lets it go: the
    // first run holds its lock for as long as the test needs (its request timeout is a
    // patience only a hang reaches).
    let hold = env.sim.hold_writes(1, 1);
    let patient = [("CALLSYNC_API__REQUEST_TIMEOUT_SECS", "120")];
    let first = command(&config, &upload_args(&schedule, &csv), &patient)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("callsync starts");
    tokio::time::timeout(PATIENCE, hold.arrived(1))
        .await
        .expect("the first run sends its first chunk");
    // The same file again, and another file whose contacts overlap the first's (each run
    // looks for the contacts already there before it sends: two at once could both send
    // one): both refused, nothing sent.
    let other = csv.with_file_name("other.csv");
    std::fs::write(&other, contacts_numbered(1_490..1_510)).unwrap();
    for file in [&csv, &other] {
        let second = callsync(&config, &upload_args(&schedule, file)).await;
        assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
        let line = stderr(&second);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains(&format!(
                "another callsync process is uploading into schedule {schedule} (one upload into a schedule at a time, whatever the file"
            )),
            "{line}"
        );
    }

    drop(hold);
    let first = first.wait_with_output().await.unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).ends_with("1500 rows: 1500 calls created (2 chunks), 0 found already created (0 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"),
        "{}",
        stdout(&first)
    );
    assert_eq!(bulk_posts(&env), 2, "the refused runs sent nothing");
    // Once the first has ended, the other file runs: its 10 contacts the first created are
    // refused by line, none created twice.
    let out = callsync(&config, &upload_args(&schedule, &other)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("is already in the schedule").count(),
        10,
        "{}",
        stderr(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 1_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_mid_upload_is_never_sent_past_the_change() {
    use callsync::upload::{self, UploadError, UploadOptions, UploadProgress};
    use callsync::warehouse::sqlite::Warehouse;

    /// Rewrites the file once the first chunk is done, with a row the check never saw.
    struct EditAfterFirstChunk {
        path: std::path::PathBuf,
        text: String,
    }
    impl UploadProgress for EditAfterFirstChunk {
        fn chunk_done(&self, rows_done: u64, _rows: u64) {
            if rows_done == 1_000 {
                std::fs::write(&self.path, &self.text).unwrap();
            }
        }
        fn waiting(&self, _: Option<&str>) {}
    }

    let (env, _config, csv, schedule) = upload_env(&contacts(2_500, |_| None)).await;
    let options = UploadOptions {
        schedule: schedule.parse().unwrap(),
        path: csv.clone(),
        renames: vec![("phone".into(), "phone_number".into())],
        force: false,
        allow_missing_external_id: false,
        skip_existing: false,
        settle: std::time::Duration::from_secs(5),
    };
    let checked = upload::check(&options).unwrap();
    assert_eq!(checked.problem_count, 0);
    let edit = EditAfterFirstChunk {
        path: csv.clone(),
        text: contacts(2_500, |n| {
            (n == 1_900).then(|| "+15551900,Edited,ext-1900,platinum,tomorrow".into())
        }),
    };
    let client =
        callsync::api::ApiClient::new(&env.config.api, &env.config.api.credentials().unwrap())
            .unwrap();
    let mut warehouse =
        Warehouse::open(&env.warehouse_path(), env.config.warehouse.busy_timeout).unwrap();
    let err = upload::send(&client, &mut warehouse, &options, &checked, &edit)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            UploadError::FileChanged {
                first_line: 1002,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("nothing from line 1002 on was sent: run the upload again"),
        "{err}"
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_schedule_is_one_plain_line_and_nothing_is_sent() {
    let (env, config, csv, _schedule) = upload_env(&contacts(10, |_| None)).await;
    let unknown = Uuid::from_u128(0x5eed).to_string();
    let before = posts(&env);
    let out = callsync(&config, &upload_args(&unknown, &csv)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "error: schedule {unknown} not found on the service (HTTP 404); check the uid (`callsync schedule create` prints it) and api.base_url; nothing was sent"
        )
    );
    assert_eq!(posts(&env), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_needs_no_credentials_and_a_dropped_column_is_not_sent() {
    let text = "phone,full_name,external_id,plan,notes\n\
                +15550001,Ada,ext-1,gold,call after 5\n\
                +15550002,Bob,ext-2,silver,\n";
    let (env, config, csv, schedule) = upload_env(text).await;
    let mut args = upload_args(&schedule, &csv);
    args.extend(["--map", "notes="]);

    // No token anywhere: a dry run sends nothing, so it needs none, and writes nothing.
    let bare = config.with_file_name("no-credentials.toml");
    let db = config.with_file_name("dry-run.db");
    std::fs::write(
        &bare,
        format!(
            "[api]\nbase_url = \"{}\"\n\n[warehouse]\npath = \"{}\"\n",
            env.sim.base_url(),
            db.display()
        ),
    )
    .unwrap();
    let requests_before = env.sim.requests().len();
    let mut dry = args.clone();
    dry.push("--dry-run");
    let out = callsync(&bare, &dry).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{}: 2 rows checked, all valid; would send 1 chunk to schedule {schedule} (dry run: nothing sent)",
            csv.display()
        )
    );
    assert_eq!(stderr(&out), "", "no log noise");
    assert_eq!(env.sim.requests().len(), requests_before);
    assert!(!db.exists());
    // Without --dry-run the credentials are required, before anything is sent.
    let out = callsync(&bare, &args).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no credentials"), "{}", stderr(&out));

    let out = callsync(&config, &args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let truth = env.sim.truth(schedule.parse().unwrap());
    assert_eq!(truth.len(), 2);
    for call in &truth {
        let params = &call.outbound_call_info.custom_parameters;
        assert!(params.contains_key("plan"), "{params:?}");
        assert!(!params.contains_key("notes"), "{params:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_json_is_one_object_of_the_summary_dry_run_refused_and_finished() {
    // Row 1,005 (chunk 2) has a value the service refuses, as in the refused-chunk test.
    let text = contacts(2_500, |n| {
        (n == 1_005).then(|| "+15550001005,Soon,ext-1005,gold,next week".into())
    });
    let (env, config, csv, schedule) = upload_env(&text).await;
    // The schedule named in the configuration: its name comes with its uid.
    let named = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&format!("schedules = [\"{schedule}\"]"), "schedules = []")
        .replace(
            "[log]",
            &format!("[[sync.schedule]]\nuid = \"{schedule}\"\nname = \"Renewals\"\n\n[log]"),
        );
    std::fs::write(&config, named).unwrap();
    let mut args = upload_args(&schedule, &csv);
    args.push("--json");
    let json = |out: &Output| -> serde_json::Value {
        let text = stdout(out);
        assert_eq!(text.lines().count(), 1, "one line: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let file = csv.display().to_string();

    let requests_before = env.sim.requests().len();
    let mut dry = args.clone();
    dry.push("--dry-run");
    let out = callsync(&config, &dry).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&out),
        serde_json::json!({
            "file": file,
            "schedule_uid": schedule,
            "schedule_name": "Renewals",
            "dry_run": true,
            "rows": 2_500,
            "chunks_to_send": 3,
        })
    );
    assert_eq!(
        env.sim.requests().len(),
        requests_before,
        "a dry run sends nothing"
    );

    // A refused chunk: the summary is still the object on stdout (chunks 1 and 3 were
    // sent), the reasons are in it and on stderr, and the error is the plain line, exit 1.
    let out = callsync(&config, &args).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("line 1007, column renewal_at: Invalid custom parameter"),
        "{err}"
    );
    assert!(
        err.contains("error: the service refused 1000 rows of"),
        "{err}"
    );
    assert_eq!(
        json(&out),
        serde_json::json!({
            "file": file,
            "schedule_uid": schedule,
            "schedule_name": "Renewals",
            "dry_run": false,
            "rows": 2_500,
            "calls_created": 1_500,
            "chunks_created": 2,
            "rows_found": 0,
            "chunks_found": 0,
            "rows_skipped": 0,
            "rows_refused": 1_000,
            "chunks_refused": 1,
            "refusals": [{
                "line": 1_007,
                "column": "renewal_at",
                "reason": "Invalid custom parameter: renewal_at must be an ISO 8601 datetime with a timezone (+hh:mm or Z), not \"next week\"",
            }],
        })
    );

    // Fixed and run again: the refused chunk created, the others found; exit 0.
    std::fs::write(&csv, contacts(2_500, |_| None)).unwrap();
    let out = callsync(&config, &args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&out),
        serde_json::json!({
            "file": file,
            "schedule_uid": schedule,
            "schedule_name": "Renewals",
            "dry_run": false,
            "rows": 2_500,
            "calls_created": 1_000,
            "chunks_created": 1,
            "rows_found": 1_500,
            "chunks_found": 2,
            "rows_skipped": 0,
            "rows_refused": 0,
            "chunks_refused": 0,
            "refusals": [],
        })
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 2_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contacts_already_in_the_schedule_are_refused_or_skipped_never_called_twice() {
    // An earlier list: contacts 0–99.
    let (env, config, csv, schedule) = upload_env(&contacts(100, |_| None)).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // The next list starts with 30 new contacts, repeats 50 earlier ones (20–69), ends with
    // 20 new ones: one chunk whose first row is new.
    let text = contacts_numbered((100..130).chain(20..70).chain(130..150));
    std::fs::write(&csv, text).unwrap();

    let lists_before = list_requests(&env).len();
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    for expected in [
        "line 32, column external_id: \"ext-20\" is already in the schedule (call ",
        "line 81, column external_id: \"ext-69\" is already in the schedule (call ",
        "50 rows have an external_id schedule",
        "nothing was sent: remove those rows, or pass --skip-existing",
    ] {
        assert!(err.contains(expected), "{expected:?} missing from:\n{err}");
    }
    assert_eq!(
        err.matches("is already in the schedule").count(),
        50,
        "{err}"
    );
    assert_eq!(bulk_posts(&env), 1, "only the first list's chunk");
    assert_eq!(created_by_external_id(&env, &schedule).len(), 100);
    // The schedule's 100 calls were found in a few page requests, not one per row.
    let lists = list_requests(&env).len() - lists_before;
    assert!(lists <= 4, "{lists} list requests");

    let mut skipping = upload_args(&schedule, &csv);
    skipping.push("--skip-existing");
    let out = callsync(&config, &skipping).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "100 rows: 50 calls created (1 chunk), 0 found already created (0 chunks), 50 skipped (already in the schedule), 0 refused by the service (0 chunks)"
        ),
        "{}",
        stdout(&out)
    );
    // The service's truth: every contact once, by external_id and by phone.
    let created = created_by_external_id(&env, &schedule);
    assert_eq!(created.len(), 150);
    let phones: std::collections::BTreeSet<String> = env
        .sim
        .truth(schedule.parse().unwrap())
        .into_iter()
        .filter_map(|c| c.outbound_call_info.phone_number)
        .collect();
    assert_eq!(phones.len(), 150, "a phone number twice");

    // Again: the ledger knows the 50 it created; the others are still skipped.
    let out = callsync(&config, &skipping).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "100 rows: 0 calls created (0 chunks), 50 found already created (1 chunk), 50 skipped (already in the schedule), 0 refused by the service (0 chunks)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule), created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_whose_answer_was_lost_is_confirmed_in_a_few_requests_and_created_once() {
    use callsync::simulator::FaultPlan;
    use std::time::Duration;

    let (env, config, csv, schedule) = upload_env(&contacts(1_000, |_| None)).await;
    // The service creates the chunk at once and holds its answer past the client's timeout.
    env.sim.set_faults(FaultPlan {
        hold_write_answers: Duration::from_secs(10),
        ..FaultPlan::default()
    });
    let lost = [
        ("CALLSYNC_API__REQUEST_TIMEOUT_SECS", "3"),
        ("CALLSYNC_API__CREATE_SETTLE_SECS", "30"),
    ];
    let lists_before = list_requests(&env).len();
    let out = callsync_with(&config, &upload_args(&schedule, &csv), &lost).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(
            "1000 rows: 1000 calls created (1 chunk), 0 found already created (0 chunks), 0 skipped (already in the schedule), 0 refused by the service (0 chunks)"
        ),
        "{}",
        stdout(&out)
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 1_000);
    // One request lists the empty schedule; the rest confirm the chunk: one by its first
    // row's external_id, then its 1,000 calls in pages of 100 (ten, not a thousand).
    let lists = &list_requests(&env)[lists_before..];
    let confirming = lists.len() - 1;
    assert!(confirming <= 12, "{confirming} requests: {lists:#?}");
    let by_external_id = lists
        .iter()
        .filter(|r| r.query.contains("external_id="))
        .count();
    assert_eq!(by_external_id, 1, "{lists:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_with_an_empty_header_is_refused_by_its_position() {
    let text = "phone,full_name,,external_id\n+15550001,Ada,gold,ext-1\n";
    let (env, config, csv, schedule) = upload_env(text).await;
    let posts_before = posts(&env);
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("line 1: column 3 (C) after \"full_name\" has an empty header"),
        "{}",
        stderr(&out)
    );
    assert_eq!(posts(&env), posts_before);
    assert!(env.sim.truth(schedule.parse().unwrap()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_list_asks_for_each_row_a_long_one_walks_the_schedule() {
    // A schedule of 2,500 calls, filled by an upload (3 bulk creates: 3 groups of calls
    // sharing one updated_at).
    let (env, config, csv, schedule) = upload_env(&contacts(2_500, |_| None)).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // 20 rows, 10 of them already there: the walk would take about 50 requests, asking
    // for each row 20 (after the first page, which tells the schedule's size).
    std::fs::write(&csv, contacts_numbered((2_500..2_510).chain(0..10))).unwrap();
    let lists_before = list_requests(&env).len();
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("is already in the schedule").count(),
        10,
        "{err}"
    );
    assert!(
        err.contains("line 12, column external_id: \"ext-0\" is already in the schedule (call "),
        "{err}"
    );
    let lists = &list_requests(&env)[lists_before..];
    let by_external_id = lists
        .iter()
        .filter(|r| r.query.contains("external_id="))
        .count();
    assert_eq!((lists.len(), by_external_id), (21, 20), "{lists:#?}");

    // 200 new rows: more than the walk's requests, so the schedule is walked, at most two
    // requests per 100 calls (each group of calls sharing an updated_at is read twice), one
    // page to confirm each of its four tie groups (the bulk chunks of 1,000, 1,000, 500 and
    // 10: too young for quiet runs, so scanned), and one for its end.
    std::fs::write(&csv, contacts_numbered(2_500..2_700)).unwrap();
    let lists_before = list_requests(&env).len();
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lists = &list_requests(&env)[lists_before..];
    assert!(
        lists.iter().all(|r| !r.query.contains("external_id=")),
        "{lists:#?}"
    );
    assert!(
        lists.len() <= 2 * 25 + 4 + 1,
        "{} list requests",
        lists.len()
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 2_700);
}
