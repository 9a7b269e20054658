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

/// Runs `sync` of a known and an unknown schedule (an INFO and an ERROR line at least) with
/// stderr into a file, `JOURNAL_STREAM` set by `journal_stream` from the file's identity.
fn sync_log_with_journal_stream(journal_stream: impl Fn(u64, u64) -> String) -> String {
    sync_log_with_journal_stream_as("text", journal_stream)
}

/// [`sync_log_with_journal_stream`] with `[log] format = FORMAT`.
fn sync_log_with_journal_stream_as(
    format: &str,
    journal_stream: impl Fn(u64, u64) -> String,
) -> String {
    use std::os::unix::fs::MetadataExt as _;
    let env = futures::executor::block_on(TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 5,
        ..SimulatorOptions::default()
    }));
    let config = env.write_config("");
    let log_path = env.warehouse_path().with_extension("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let meta = log.metadata().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", &config.display().to_string(), "sync"])
        .args(["--schedule", &env.schedules()[0].to_string()])
        .args(["--schedule", &Uuid::from_u128(0xdead).to_string()])
        .env("JOURNAL_STREAM", journal_stream(meta.dev(), meta.ino()))
        .env("CALLSYNC_LOG__LEVEL", "info")
        .env("CALLSYNC_LOG__FORMAT", format)
        .env_remove("RUST_LOG")
        .stderr(log)
        .status()
        .expect("callsync runs");
    assert_eq!(status.code(), Some(1), "the unknown schedule fails the run");
    std::fs::read_to_string(&log_path).unwrap()
}

/// A log line's RFC 3339 timestamp, as the text format writes it (`2026-11-24T08:00:01.…Z`).
fn has_timestamp(line: &str) -> bool {
    line.split_whitespace().any(|word| {
        let b = word.as_bytes();
        b.len() >= 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[0].is_ascii_digit()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_journal_lines_carry_their_priority_and_no_timestamp() {
    let log = tokio::task::spawn_blocking(|| {
        sync_log_with_journal_stream(|dev, ino| format!("{dev}:{ino}"))
    })
    .await
    .unwrap();
    let events: Vec<&str> = log.lines().filter(|l| l.contains("callsync::")).collect();
    assert!(!events.is_empty(), "{log}");
    for line in &events {
        assert!(
            ["<3>", "<4>", "<6>", "<7>"]
                .iter()
                .any(|p| line.starts_with(p)),
            "no priority: {line}"
        );
        assert!(!has_timestamp(line), "a timestamp: {line}");
    }
    assert!(
        events
            .iter()
            .any(|l| l.starts_with("<6> INFO") && l.contains("pass completed")),
        "{log}"
    );
    assert!(
        events
            .iter()
            .any(|l| l.starts_with("<3>ERROR") && l.contains("pass failed")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_stream_naming_another_file_changes_nothing() {
    let log = tokio::task::spawn_blocking(|| {
        sync_log_with_journal_stream(|dev, ino| format!("{dev}:{}", ino + 1))
    })
    .await
    .unwrap();
    let events: Vec<&str> = log.lines().filter(|l| l.contains("callsync::")).collect();
    assert!(!events.is_empty(), "{log}");
    for line in &events {
        assert!(!line.starts_with('<'), "a priority: {line}");
        assert!(has_timestamp(line), "no timestamp: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_journal_json_lines_carry_their_priority_too() {
    let log = tokio::task::spawn_blocking(|| {
        sync_log_with_journal_stream_as("json", |dev, ino| format!("{dev}:{ino}"))
    })
    .await
    .unwrap();
    let mut levels = std::collections::BTreeSet::new();
    for line in log.lines().filter(|l| l.contains("callsync::")) {
        let (priority, json) = line.split_at(3);
        let event: serde_json::Value =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line}"));
        let level = event["level"].as_str().expect("level");
        let expected = match level {
            "ERROR" => "<3>",
            "WARN" => "<4>",
            "INFO" => "<6>",
            _ => "<7>",
        };
        assert_eq!(priority, expected, "{line}");
        levels.insert(level.to_owned());
    }
    assert!(
        levels.contains("ERROR") && levels.contains("INFO"),
        "{levels:?}\n{log}"
    );
}

/// `-q` logs errors only: the failed pass's line still names its schedule, by uid and by the
/// configuration's name, its `sync_runs` row and the kind of its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_q_an_error_line_keeps_its_schedule_name_and_run() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 5,
        ..SimulatorOptions::default()
    })
    .await;
    let ghost = Uuid::from_u128(0xdead);
    let config = env.write_config(&format!(
        "\n[[sync.schedule]]\nuid = \"{ghost}\"\nname = \"Ghost line\"\n"
    ));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["-q", "--config", &config.display().to_string(), "sync"])
        .env_remove("RUST_LOG")
        .output()
        .expect("callsync runs");
    assert_eq!(output.status.code(), Some(1), "the unknown schedule fails");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("pass failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{stderr}");
    assert!(
        failed[0].contains(&format!(
            "pass{{schedule={ghost} schedule_name=\"Ghost line\" kind=\"incremental\" run=2}}"
        )),
        "{stderr}"
    );
    assert!(failed[0].contains("error_kind=\"not_found\""), "{stderr}");
    assert!(
        stderr.lines().all(|l| l.contains("ERROR")),
        "-q shows errors only: {stderr}"
    );
}

/// Retried requests are INFO: at `level = "warn"` a pass that needed retries and then
/// completed prints nothing, while the pass line (at INFO) counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_that_work_are_no_warning() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 60,
        faults: callsync::simulator::FaultPlan {
            error_5xx_rate: 0.3,
            ..Default::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("page_size = 10\n");
    let run = |level: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .args(["--config", &config.display().to_string(), "sync", "--json"])
            .env("CALLSYNC_LOG__LEVEL", level)
            .env_remove("RUST_LOG")
            .output()
            .expect("callsync runs")
    };
    let warn = run("warn");
    assert_eq!(warn.status.code(), Some(0), "{warn:?}");
    let pass: serde_json::Value = serde_json::from_slice(&warn.stdout).expect("a pass line");
    assert!(pass["retries"].as_u64().unwrap() > 0, "{pass}");
    assert_eq!(String::from_utf8_lossy(&warn.stderr), "");
    env.assert_matches_truth(&env.schedules());
}
