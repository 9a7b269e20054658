//! Log lines as an operator reads them: one line per pass per schedule, inside that
//! schedule's span alone (passes run concurrently, so a span leaking across `.await` would
//! put one schedule's line under another's name).

use callsync::simulator::SimulatorOptions;
use uuid::Uuid;

use crate::harness::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pass_line_names_its_own_schedule() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 3,
        calls_per_schedule: 250,
        ..SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let unknown = Uuid::from_u128(0xdead);
    let config = env.write_config("page_size = 20\nconcurrency = 4\n");
    let mut args = vec![
        "--config".to_owned(),
        config.display().to_string(),
        "sync".into(),
    ];
    for schedule in [s[0], unknown, s[1], s[2]] {
        args.extend(["--schedule".to_owned(), schedule.to_string()]);
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(&args)
        .env("CALLSYNC_LOG__FORMAT", "json")
        .env("CALLSYNC_LOG__LEVEL", "info")
        .env_remove("RUST_LOG")
        .output()
        .expect("callsync runs");
    assert_eq!(
        output.status.code(),
        Some(1),
        "the unknown schedule fails the run"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut lines: Vec<(String, String)> = Vec::new();
    for line in stderr.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let message = event["fields"]["message"].as_str().unwrap_or_default();
        if message.starts_with("pass ") {
            let span = &event["span"];
            assert_eq!(span["name"], "pass", "{line}");
            lines.push((
                span["schedule"].as_str().expect("schedule").to_owned(),
                message.to_owned(),
            ));
        }
    }
    lines.sort();
    let mut expected: Vec<(String, String)> = s
        .iter()
        .map(|s| (s.to_string(), "pass completed".to_owned()))
        .collect();
    expected.push((
        unknown.to_string(),
        "pass failed; the checkpoint stays at the last committed page".to_owned(),
    ));
    expected.sort();
    assert_eq!(lines, expected, "{stderr}");
}
