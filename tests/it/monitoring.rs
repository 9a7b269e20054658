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

/// Series that exist from a schedule's first pass on: the lag needs the service's clock, a
/// duration a pass.
const KNOWN_AFTER_A_PASS: [&str; 2] = [
    "callsync_lag_seconds",
    "callsync_last_pass_duration_seconds",
];

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
        // A datasource variable's query is the plugin's name, not PromQL.
        if variable["type"] == "query" {
            exprs.push(
                variable["query"]["query"]
                    .as_str()
                    .expect("query")
                    .to_owned(),
            );
        }
    }
    exprs
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(contrib("grafana/callsync-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON")
}

/// The unit a panel showing `metric` must have, when the name says it: seconds (a timestamp
/// shown as an age too), bytes, or a count of passes; `None` for rates and infos.
fn unit_of(metric: &str) -> Option<&'static str> {
    if metric.ends_with("_bytes") {
        Some("bytes")
    } else if metric.ends_with("_passes") {
        Some("none")
    } else if metric.ends_with("_seconds_total") || !metric.contains("_seconds") {
        None
    } else {
        Some("s")
    }
}

fn panel<'d>(dashboard: &'d serde_json::Value, title: &str) -> &'d serde_json::Value {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title:?}"))
}

#[test]
fn the_dashboard_has_a_datasource_and_a_schedule_variable_true_units_and_names() {
    let dashboard = dashboard();
    let text = std::fs::read_to_string(contrib("grafana/callsync-dashboard.json")).unwrap();
    // File provisioning does not fill `__inputs`: a data source variable instead.
    assert!(
        !text.contains("DS_PROMETHEUS"),
        "an import-only ${{DS_…}} input is left"
    );
    assert!(dashboard.get("__inputs").is_none());
    let variables: Vec<(&str, &str)> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        variables,
        [
            ("datasource", "datasource"),
            ("instance", "query"),
            ("schedule", "query")
        ]
    );
    let mut datasources = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        datasources.push(&panel["datasource"]);
        let title = panel["title"].as_str().unwrap();
        let exprs: Vec<&str> = panel["targets"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|t| datasources.push(&t["datasource"]))
            .map(|t| t["expr"].as_str().unwrap())
            .collect();
        let units: BTreeSet<&str> = exprs
            .iter()
            .flat_map(|e| metric_names(e))
            .filter_map(|m| unit_of(&m))
            .collect();
        let unit = panel["fieldConfig"]["defaults"]["unit"].as_str().unwrap();
        assert!(
            units.is_empty() || units == BTreeSet::from([unit]),
            "panel {title:?} has unit {unit:?} but shows {units:?}"
        );
        // A per-schedule series is chosen by the variable and shown by name.
        for (expr, target) in exprs.iter().zip(panel["targets"].as_array().unwrap()) {
            if expr.contains("schedule") {
                assert!(expr.contains("schedule=~\"$schedule\""), "{title}: {expr}");
                assert!(
                    expr.contains("group_left (name) callsync_schedule_info"),
                    "{title}: {expr}"
                );
                let legend = target["legendFormat"].as_str().unwrap();
                assert!(legend.contains("{{name}}"), "{title}: {legend}");
            }
        }
    }
    for datasource in datasources {
        assert_eq!(datasource["uid"], "${datasource}");
    }
    assert_eq!(
        panel(&dashboard, "Lag per schedule")["fieldConfig"]["defaults"]["unit"],
        "s"
    );
    assert_eq!(
        panel(&dashboard, "Behind and failed passes in a row")["fieldConfig"]["defaults"]["unit"],
        "none"
    );
}

/// Evaluates `expr` over `series` (promtool's input notation) at 960 s with `promtool test
/// rules`, expecting `samples` (labels, value); `false` when promtool is not installed.
fn promtool_evaluates(expr: &str, series: &[(&str, &str)], samples: &[(&str, f64)]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yml");
    let rule = serde_json::json!({"groups": [{"name": "t", "rules": [{"record": "evaluated", "expr": expr}]}]});
    std::fs::write(&rules, rule.to_string()).unwrap();
    let input: Vec<serde_json::Value> = series
        .iter()
        .map(|(s, v)| serde_json::json!({"series": s, "values": v}))
        .collect();
    let expected: Vec<serde_json::Value> = samples
        .iter()
        .map(|(labels, value)| serde_json::json!({"labels": format!("evaluated{labels}"), "value": value}))
        .collect();
    let test = serde_json::json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input,
            "promql_expr_test": [{"expr": "evaluated", "eval_time": "960s", "exp_samples": expected}],
        }],
    });
    let tests = dir.path().join("test.yml");
    std::fs::write(&tests, test.to_string()).unwrap();
    let Ok(output) = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&tests)
        .output()
    else {
        return false;
    };
    assert!(
        output.status.success(),
        "promtool test rules failed for {expr}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    true
}

#[test]
fn last_success_age_says_never_for_a_schedule_that_never_synced_not_56_years() {
    let dashboard = dashboard();
    let panel = panel(&dashboard, "Last success age");
    let defaults = &panel["fieldConfig"]["defaults"];
    assert_eq!(defaults["unit"], "s");
    // -1, the query's value for "no success since start-up", reads "never".
    assert_eq!(defaults["mappings"][0]["options"]["-1"]["text"], "never");
    let expr = panel["targets"][0]["expr"]
        .as_str()
        .unwrap()
        .replace("$instance", ".*")
        .replace("$schedule", ".*");
    // At 960 s: one schedule synced at 400 s, one never (its gauge at 0 since start-up).
    let info = |s: &str, name: &str| {
        format!(
            "callsync_schedule_info{{instance=\"d:1\",job=\"callsync\",schedule=\"{s}\",name=\"{name}\"}}"
        )
    };
    let success = |s: &str| {
        format!(
            "callsync_last_success_timestamp_seconds{{instance=\"d:1\",job=\"callsync\",schedule=\"{s}\"}}"
        )
    };
    let series = [
        (info("a", "Renewals").as_str(), "1x20"),
        (info("b", "").as_str(), "1x20"),
        (success("a").as_str(), "400x20"),
        (success("b").as_str(), "0x20"),
    ]
    .map(|(s, v)| (s.to_owned(), v));
    let series: Vec<(&str, &str)> = series.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    let evaluated = promtool_evaluates(
        &expr,
        &series,
        &[
            (
                "{instance=\"d:1\",job=\"callsync\",schedule=\"a\",name=\"Renewals\"}",
                560.0,
            ),
            ("{instance=\"d:1\",job=\"callsync\",schedule=\"b\"}", -1.0),
        ],
    );
    if !evaluated {
        eprintln!("promtool not installed: the never-synced query was checked by its mapping only");
    }
}

/// What Prometheus 2.x sends as `Accept` when it scrapes.
const PROMETHEUS_ACCEPTS: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `promtool check metrics` on a raw scrape: its parser and its lint (counters' `_total`,
/// units, no `info` type). Skipped, loudly, where Prometheus is not installed.
fn promtool_checks_metrics(exposition: &str) {
    use std::io::Write as _;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!(
            "PROMTOOL NOT INSTALLED: `promtool check metrics` was NOT run on the scrape (apt-get install prometheus)"
        );
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics:\n{}{}\n{exposition}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
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
    let dashboard = dashboard();
    let rule_exprs = rule_expressions(&rules);
    assert_eq!(rule_exprs.len(), rules.matches("- alert:").count());
    let alerted: BTreeSet<String> = rule_exprs.iter().flat_map(|e| metric_names(e)).collect();
    for series in [
        "callsync_last_success_timestamp_seconds",
        "callsync_backup_last_success_timestamp_seconds",
    ] {
        assert!(alerted.contains(series), "{series} not in {alerted:?}");
    }
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
    env.config.sync.reconcile_cron =
        Some(callsync::config::CronSchedule::parse("0 0 3 * * *").unwrap());
    // Backups on, none made yet: their series exist from start-up too (CallsyncBackupStale).
    env.config.backup = Some(callsync::config::BackupConfig {
        cron: callsync::config::CronSchedule::parse("0 15 2 * * *").unwrap(),
        dir: env.dir.path().join("backups"),
        keep: 7,
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(callsync::daemon::run(env.config.clone(), async {
        let _ = stopped.await;
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + PATIENCE;
    let scrape = |accept: &'static str| {
        http.get(format!("http://{listen}/metrics"))
            .header("accept", accept)
            .send()
    };
    let answer = loop {
        if let Ok(response) = scrape(PROMETHEUS_ACCEPTS).await {
            break response;
        }
        assert!(Instant::now() < deadline, "/metrics never answered");
        // Polling interval under the patience above.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        answer.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let exposition = answer.text().await.unwrap();
    assert!(exposition.ends_with("# EOF\n"), "{exposition}");
    // The text format, for a scraper that asks for it (promtool, older Prometheus).
    let answer = scrape("text/plain;version=0.0.4").await.unwrap();
    assert_eq!(
        answer.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = answer.text().await.unwrap();
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
    assert!(
        !text.contains("# EOF") && !text.contains(" info\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE callsync_build_info gauge\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter\n"),
        "{text}"
    );
    promtool_checks_metrics(&text);

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
    assert!(
        exposition.contains("callsync_passes_total{kind=\"reconcile\",result=\"failed\"} 0"),
        "{exposition}"
    );
    // No backup in backup.dir yet: none made, none failed.
    for line in [
        "callsync_backup_last_success_timestamp_seconds 0.0\n",
        "callsync_backup_failures_total 0\n",
        "callsync_backup_size_bytes 0\n",
    ] {
        assert!(exposition.contains(line), "{line} missing:\n{exposition}");
    }
    // Per configured schedule, from start-up.
    for schedule in env.schedules() {
        for line in [
            format!("callsync_last_success_timestamp_seconds{{schedule=\"{schedule}\"}} 0"),
            format!("callsync_behind_passes{{schedule=\"{schedule}\"}} 0"),
            format!("callsync_failed_passes{{schedule=\"{schedule}\"}} 0"),
            format!("callsync_schedule_info{{schedule=\"{schedule}\",name=\"\"}} 1"),
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

#[test]
fn last_backup_age_says_never_when_there_is_no_backup() {
    let dashboard = dashboard();
    let panel = panel(&dashboard, "Last backup age");
    let defaults = &panel["fieldConfig"]["defaults"];
    assert_eq!(defaults["unit"], "s");
    assert_eq!(defaults["mappings"][0]["options"]["-1"]["text"], "never");
    let expr = panel["targets"][0]["expr"]
        .as_str()
        .unwrap()
        .replace("$instance", ".*");
    let backup = |instance: &str| {
        format!(
            "callsync_backup_last_success_timestamp_seconds{{instance=\"{instance}\",job=\"callsync\"}}"
        )
    };
    let series = [(backup("a:1"), "400x20"), (backup("b:1"), "0x20")];
    let series: Vec<(&str, &str)> = series.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    let evaluated = promtool_evaluates(
        &expr,
        &series,
        &[
            ("{instance=\"a:1\",job=\"callsync\"}", 560.0),
            ("{instance=\"b:1\",job=\"callsync\"}", -1.0),
        ],
    );
    if !evaluated {
        eprintln!(
            "PROMTOOL NOT INSTALLED: the no-backup query was checked by its mapping only (apt-get install prometheus)"
        );
    }
}

/// The `expr` of the rule named `alert` in the rules file.
fn alert_expression(alert: &str) -> String {
    let rules = std::fs::read_to_string(contrib("prometheus/callsync-alerts.yml")).unwrap();
    let at = rules
        .find(&format!("- alert: {alert}\n"))
        .unwrap_or_else(|| panic!("no alert {alert}"));
    rule_expressions(&rules[at..]).remove(0)
}

/// An hour-long reconciliation that still moves does not fire CallsyncNoRecentSuccess; one
/// that stopped moving, or a schedule with no pass running, does.
#[test]
fn no_recent_success_spares_a_long_pass_that_moves() {
    let expr = alert_expression("CallsyncNoRecentSuccess");
    // At 960 s, no success since start-up (0) for all three: a runs a pass that answered a
    // request at 900 s; b's running pass last moved at 60 s; c runs none.
    let labels = |s: &str| format!("{{instance=\"d:1\",job=\"callsync\",schedule=\"{s}\"}}");
    let series: Vec<(String, &str)> = [("a", "900x20"), ("b", "60x20"), ("c", "0x20")]
        .iter()
        .flat_map(|(s, progress)| {
            [
                (
                    format!(
                        "callsync_schedule_info{}",
                        labels(s).replace('}', ",name=\"\"}")
                    ),
                    "1x20",
                ),
                (
                    format!("callsync_last_success_timestamp_seconds{}", labels(s)),
                    "0x20",
                ),
                (
                    format!("callsync_pass_progress_timestamp_seconds{}", labels(s)),
                    *progress,
                ),
            ]
        })
        .collect();
    let series: Vec<(&str, &str)> = series.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    // The threshold as written is an hour: shifted by the evaluation's 960 s, as promtool
    // evaluates from 0. Only b and c fire.
    let expr = expr.replace("> 3600", "> 900");
    let evaluated = promtool_evaluates(
        &expr,
        &series,
        &[
            ("{job=\"callsync\",schedule=\"b\"}", 960.0),
            ("{job=\"callsync\",schedule=\"c\"}", 960.0),
        ],
    );
    if !evaluated {
        eprintln!(
            "PROMTOOL NOT INSTALLED: CallsyncNoRecentSuccess was not evaluated (apt-get install prometheus)"
        );
    }
}
