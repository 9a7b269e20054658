//! The alerting rules and the Grafana dashboard in `contrib/` select only series a daemon
//! exports from start-up, before any pass has finished: an alert over a series that appears
//! later (or never) would match nothing and stay silent.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use callsync::simulator::{FaultPlan, SimulatorOptions};
use tokio::time::Instant;

use crate::harness::TestEnv;

const PATIENCE: Duration = Duration::from_secs(30);

/// Series that exist from a schedule's first pass on: the lag needs the service's clock.
const KNOWN_AFTER_A_PASS: [&str; 1] = ["callsync_lag_seconds"];

fn contrib(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(path)
}

/// Every `callsync_…` name in `text` (metric names are `[a-z0-9_]` after the prefix).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("callsync_") {
        let preceded_by_word = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded_by_word {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The `expr` of every rule, as written in the rules file (one line, or a `|` block).
fn rule_expressions(rules: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(expr) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        if expr.trim() != "|" {
            exprs.push(expr.trim().to_owned());
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut block = String::new();
        while let Some(next) =
            lines.next_if(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
        {
            block.push_str(next.trim());
            block.push('\n');
        }
        exprs.push(block);
    }
    exprs
}

/// The `expr` of every panel target and the template query, from the dashboard's JSON.
fn dashboard_expressions(dashboard: &serde_json::Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        exprs.push(
            variable["query"]["query"]
                .as_str()
                .expect("query")
                .to_owned(),
        );
    }
    exprs
}

/// The names of the samples in an exposition (histograms' `_bucket`, `_sum`, `_count`).
fn exported(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_dashboard_use_only_series_exported_from_start_up() {
    let rules = std::fs::read_to_string(contrib("prometheus/callsync-alerts.yml")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(contrib("grafana/callsync-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let rule_exprs = rule_expressions(&rules);
    assert_eq!(rule_exprs.len(), rules.matches("- alert:").count());
    let alerted: BTreeSet<String> = rule_exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(
        alerted.contains("callsync_last_success_timestamp_seconds"),
        "{alerted:?}"
    );
    let shown: BTreeSet<String> = dashboard_expressions(&dashboard)
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();

    // Every answer takes 5 s: no pass can finish before the scrape.
    let mut env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 5,
        faults: FaultPlan {
            slow_rate: 1.0,
            slow_delay: Duration::from_secs(5),
            ..FaultPlan::default()
        },
        ..SimulatorOptions::default()
    })
    .await;
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = socket.local_addr().unwrap();
    drop(socket);
    env.config.metrics.listen = Some(listen);
    env.config.sync.reconcile_cron = Some("0 0 3 * * *".into());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(callsync::daemon::run(env.config.clone(), async {
        let _ = stopped.await;
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + PATIENCE;
    let exposition = loop {
        if let Ok(response) = http.get(format!("http://{listen}/metrics")).send().await {
            break response.text().await.unwrap();
        }
        assert!(Instant::now() < deadline, "/metrics never answered");
        // Polling interval under the patience above.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();

    assert!(
        exposition
            .lines()
            .filter(|l| l.starts_with("callsync_passes_total{"))
            .all(|l| l.ends_with(" 0")),
        "a pass finished before the scrape:\n{exposition}"
    );
    let exported = exported(&exposition);
    let missing: Vec<&String> = alerted.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "alerted on but not exported at start-up: {missing:?}\n{exposition}"
    );
    // A panel may show a series known only once a pass has read the service (an empty
    // graph until then), never one the daemon does not export at all.
    let missing: Vec<&String> = shown
        .difference(&exported)
        .filter(|name| !KNOWN_AFTER_A_PASS.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "shown on the dashboard but not exported: {missing:?}\n{exposition}"
    );
    // Per configured schedule and kind, from start-up.
    for schedule in env.schedules() {
        for line in [
            format!("callsync_last_success_timestamp_seconds{{schedule=\"{schedule}\"}} 0"),
            format!("callsync_behind_passes{{schedule=\"{schedule}\"}} 0"),
            format!(
                "callsync_passes_total{{schedule=\"{schedule}\",kind=\"reconcile\",result=\"failed\"}} 0"
            ),
        ] {
            assert!(exposition.contains(&line), "{line} missing:\n{exposition}");
        }
    }
}

/// `promtool check rules` where Prometheus is installed; elsewhere nothing to check.
#[test]
fn promtool_accepts_the_rules_when_installed() {
    let rules = contrib("prometheus/callsync-alerts.yml");
    let Ok(output) = std::process::Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
    else {
        eprintln!("promtool not installed: the rules are checked by the metrics test only");
        return;
    };
    assert!(
        output.status.success(),
        "promtool check rules failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn metric_names_are_found_whole() {
    assert_eq!(
        metric_names(
            "time() - callsync_last_success_timestamp_seconds{x=\"callsync\"} > 1 and my_callsync_x"
        ),
        BTreeSet::from(["callsync_last_success_timestamp_seconds".to_owned()])
    );
}
