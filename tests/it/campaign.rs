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

    // A uid the service does not know: 404, one line, exit 1.
    let missing = callsync(&config, &["schedule", "enable", &Uuid::nil().to_string()]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("HTTP 404"),
        "{}",
        stderr(&missing)
    );
}
