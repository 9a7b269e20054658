//! The write half on the command line: call flow → campaign → schedule → call → enable,
//! against the simulator, through the release binary's own argument parsing and exit codes.

use std::process::Output;

use callsync::simulator::SimulatorOptions;
use uuid::Uuid;

use crate::harness::TestEnv;

async fn callsync(config: &std::path::Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .await
        .expect("callsync runs")
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
    assert_eq!(uids.len(), 2);
    assert!(uids.contains(&created) && uids.contains(&second));
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
    let mut text = String::from("phone,full_name,external_id,plan,renewal_at\n");
    for n in 0..rows {
        let row = bad(n).unwrap_or_else(|| {
            format!(
                "+1555{n:07},\"Contact {n}, Esq.\",ext-{n},{},2026-04-01T00:00:00Z",
                ["gold", "silver"][n % 2]
            )
        });
        text.push_str(&row);
        text.push('\n');
    }
    text
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
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("2500 rows, 2500 calls created, 3 chunks sent, 0 chunks found already created, 0 rows refused"),
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

    // Again: the ledger knows every chunk; nothing is sent.
    let again = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(
        stdout(&again).ends_with("2500 rows, 0 calls created, 0 chunks sent, 3 chunks found already created, 0 rows refused"),
        "{}",
        stdout(&again)
    );
    assert_eq!(created_by_external_id(&env, &schedule), created);

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
        2_900 => Some("+15552900,Local Time,ext-2900,gold,2026-04-01 10:00".into()),
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
        "line 2902, column renewal_at: ",
        "4 problems in 3000 rows; nothing was sent",
    ] {
        assert!(err.contains(expected), "{expected:?} missing from:\n{err}");
    }
    assert_eq!(posts(&env), 1, "only the disable before the upload");
    assert!(env.sim.truth(schedule.parse().unwrap()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_in_chunk_3_names_its_csv_lines_and_a_rerun_finishes_the_file() {
    // Row 2,005 (chunk 3, entry 5) has a number the service refuses (too short for it),
    // though it is + and digits as far as callsync can tell.
    let text = contacts(2_500, |n| {
        (n == 2_005).then(|| "+123,Short,ext-2005,gold,2026-04-01T00:00:00Z".into())
    });
    let (env, config, csv, schedule) = upload_env(&text).await;
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("lines 2002–2501"), "{err}");
    assert!(
        err.contains("line 2007, column phone: Invalid phone number"),
        "{err}"
    );
    assert_eq!(created_by_external_id(&env, &schedule).len(), 2_000);

    let fixed = contacts(2_500, |_| None);
    std::fs::write(&csv, fixed).unwrap();
    // A changed file is another upload: its chunks 1 and 2 are looked up, not resent.
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
    assert!(out.status.success(), "{}", stderr(&out));
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
    let spawn = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .arg("--config")
            .arg(&config)
            .args(upload_args(&schedule, &csv))
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
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
        for _ in 0..600 {
            if count() > before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            count() > before,
            "a chunk was created while its answer is held"
        );
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
        tokio::time::sleep(delay).await;
        let _ = child.start_kill();
        child.wait().await.unwrap();
    }
    let out = callsync(&config, &upload_args(&schedule, &csv)).await;
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
