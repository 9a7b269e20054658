//! The binary as scripts and monitoring use it: `--json` pass lines, `status`'s exit code 3,
//! `-q`/`-v`, `--config` only where it is read, completions and man pages, and `simulate`'s
//! knobs and its error for a taken port.

use std::collections::BTreeSet;
use std::io::BufRead;

use callsync::simulator::{BadBody, SimulatorOptions};
use serde_json::Value;

use crate::cli::{callsync, callsync_with_env, stderr};
use crate::harness::TestEnv;

/// stdout as JSON Lines: one object per line, nothing else.
fn json_lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect()
}

/// The field names docs/commands.md documents for a pass line, in their order.
const PASS_FIELDS: [&str; 25] = [
    "schedule_uid",
    "kind",
    "outcome",
    "error",
    "dry_run",
    "pages",
    "calls_seen",
    "calls_written",
    "would_write",
    "requests",
    "retries",
    "detail_requests",
    "rate_limited",
    "throttled_secs",
    "future_rows",
    "duration_secs",
    "horizon",
    "position",
    "lag_secs",
    "slowed_by",
    "error_kind",
    "run_id",
    "clock",
    "date_skew_secs",
    "held_groups",
];

/// The latest `sync_runs.id` of each schedule, in order.
fn runs_of(env: &TestEnv, schedules: &[uuid::Uuid]) -> Vec<i64> {
    let db = rusqlite::Connection::open(env.warehouse_path()).expect("the warehouse");
    schedules
        .iter()
        .map(|s| {
            db.query_row(
                "SELECT max(id) FROM sync_runs WHERE schedule_uid = ?1",
                [s.to_string()],
                |r| r.get(0),
            )
            .expect("a pass")
        })
        .collect()
}

fn assert_fields(line: &Value) {
    let keys: Vec<&str> = line
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, PASS_FIELDS, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_and_backfill_print_one_json_line_per_pass() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 120,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s: Vec<String> = env.schedules().iter().map(|s| s.to_string()).collect();

    let out = callsync(&["--config", c, "sync", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    for (line, schedule) in lines.iter().zip(&s) {
        assert_fields(line);
        assert_eq!(line["schedule_uid"], schedule.as_str());
        assert_eq!(line["kind"], "incremental");
        assert_eq!(line["outcome"], "completed");
        assert_eq!(line["error"], Value::Null);
        assert_eq!(line["dry_run"], false);
        // Keyset paging reads the row a page ends with again on the next.
        assert_eq!(line["calls_seen"], 121);
        assert_eq!(line["calls_written"], 120);
        assert_eq!(line["would_write"], Value::Null);
        assert_eq!(line["pages"], 2);
        assert_eq!(line["requests"], 2);
        assert_eq!(line["retries"], 0);
        assert_eq!(line["future_rows"], 0);
        assert_eq!(line["slowed_by"], serde_json::json!([]));
        for instant in ["horizon", "position"] {
            let text = line[instant].as_str().expect(instant);
            callsync::service::Timestamp::parse(text).expect("RFC 3339");
        }
        assert!(line["lag_secs"].is_number(), "{line}");
        assert!(line["duration_secs"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(line["error_kind"], Value::Null);
    }
    // Each line names its `sync_runs` row.
    let ids: Vec<i64> = lines
        .iter()
        .map(|l| l["run_id"].as_i64().expect("run_id"))
        .collect();
    assert_eq!(ids, runs_of(&env, &env.schedules()));
    env.assert_matches_truth(&env.schedules());

    // A dry run: nothing written, what would be is `would_write`.
    let out = callsync(&["--config", c, "sync", "--json", "--dry-run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert_fields(line);
        assert_eq!(line["dry_run"], true);
        assert_eq!(line["calls_written"], Value::Null);
        assert_eq!(line["would_write"], 0, "nothing changed: {line}");
        assert_eq!(line["run_id"], Value::Null, "a dry run records no pass");
    }

    // A failed pass and a skipped one are lines too, with their error; the exit code says so;
    // the logs stay on stderr.
    let unknown = "0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11";
    let lock = callsync::warehouse::sqlite::ScheduleLock::acquire(
        &env.warehouse_path(),
        env.schedules()[1],
    )
    .expect("the lock");
    let out = callsync(&[
        "--config",
        c,
        "sync",
        "--json",
        "--schedule",
        unknown,
        "--schedule",
        &s[0],
        "--schedule",
        &s[1],
    ])
    .await;
    drop(lock);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["schedule_uid"], unknown);
    assert_eq!(lines[0]["outcome"], "failed");
    let error = lines[0]["error"].as_str().expect("an error");
    assert!(error.contains("404"), "{error}");
    assert_eq!(lines[0]["error_kind"], "not_found");
    assert!(lines[0]["run_id"].is_i64(), "{}", lines[0]);
    assert_eq!(lines[1]["outcome"], "completed");
    assert_eq!(lines[1]["error_kind"], Value::Null);
    assert_eq!(lines[2]["outcome"], "skipped");
    assert_eq!(lines[2]["error_kind"], "busy");
    assert_eq!(lines[2]["run_id"], Value::Null);
    assert_eq!(lines[2]["calls_seen"], 0);
    let why = lines[2]["error"].as_str().expect("why");
    assert!(
        why.contains("is being synced by another callsync process"),
        "{why}"
    );
    let err = stderr(&out);
    assert!(err.contains("pass failed"), "{err}");

    let out = callsync(&["--config", c, "backfill", "--schedule", &s[0], "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_fields(&lines[0]);
    assert_eq!(lines[0]["kind"], "backfill");
    assert_eq!(lines[0]["outcome"], "completed");
    assert_eq!(lines[0]["calls_seen"], 121);
    assert_eq!(lines[0]["calls_written"], 0, "already there");
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exits_3_when_a_watched_schedule_last_failed() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let [good, bad] = [env.schedules()[0], env.schedules()[1]];

    let out = callsync(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for json in [false, true] {
        let args: &[&str] = if json {
            &["--config", c, "status", "--json"]
        } else {
            &["--config", c, "status"]
        };
        let out = callsync(args).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }

    env.sim.break_schedule(bad, Some(BadBody::InvalidJson));
    let out = callsync(&["--config", c, "sync", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failed_pass = json_lines(&out)
        .into_iter()
        .find(|line| line["schedule_uid"] == bad.to_string())
        .expect("the failed pass's line");
    // A body that arrived whole but is not JSON: not retried, its own kind.
    assert_eq!(failed_pass["error_kind"], "bad_response");
    let attention =
        format!("attention: schedule {bad}: its last pass failed (bad_response) (exit code 3)\n");
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stderr(&out), attention);
    let status: Value = serde_json::from_slice(&out.stdout).expect("the JSON is still printed");
    // The pass `sync --json` named, by its run id, and its kind: what a script matches.
    let bad_row = (status.as_array().unwrap().iter())
        .find(|row| row["schedule_uid"] == bad.to_string())
        .unwrap();
    assert_eq!(bad_row["last_run"]["run_id"], failed_pass["run_id"]);
    assert_eq!(bad_row["last_run"]["error_kind"], "bad_response");
    assert_eq!(bad_row["failed_passes"], 1);
    assert_eq!(
        bad_row["backing_off"],
        Value::Null,
        "one failure: tried at the next tick"
    );
    let results: BTreeSet<(String, String)> = status
        .as_array()
        .expect("an array")
        .iter()
        .map(|row| {
            let text = |name: &str| row[name].as_str().unwrap_or_default().to_owned();
            (text("schedule_uid"), text("last_result"))
        })
        .collect();
    assert_eq!(
        results,
        BTreeSet::from([
            (good.to_string(), "completed".to_owned()),
            (bad.to_string(), "failed".to_owned())
        ])
    );
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stderr(&out), attention);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&bad.to_string()));

    // A second failure in a row: the daemon sits the next tick out, and status says until
    // when, not that the daemon has stopped.
    let out = callsync(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bad_row = (status.as_array().unwrap().iter())
        .find(|row| row["schedule_uid"] == bad.to_string())
        .unwrap();
    assert_eq!(bad_row["failed_passes"], 2);
    let backing_off = &bad_row["backing_off"];
    assert_eq!(
        (&backing_off["failures"], &backing_off["ticks"]),
        (&2.into(), &1.into())
    );
    let next_try = backing_off["next_try_at"].as_str().unwrap();
    let finished = bad_row["last_run"]["finished_at"].as_str().unwrap();
    assert!(next_try > finished, "{next_try} after {finished}");
    assert_eq!(
        stderr(&out),
        format!(
            "attention: schedule {bad}: its last pass failed (bad_response); the daemon backs off until {next_try} (exit code 3)\n"
        )
    );
    let out = callsync(&["--config", c, "status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "  BACKING OFF  after 2 failed passes in a row the daemon sits out 1 tick of sync.cron: next try at {next_try}\n"
        )) && !text.contains("NO PASS RECORDED"),
        "{text}"
    );

    // Only the schedules configured are watched: one taken out of sync.schedules (after a
    // 404, say) does not fail every check.
    let out = callsync_with_env(
        &["--config", c, "status"],
        &[("CALLSYNC_SYNC__SCHEDULES", &good.to_string())],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A failure to read the warehouse is still 1.
    std::fs::write(env.warehouse_path(), "not a database").unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", env.warehouse_path().display()));
    }
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_and_verbose_set_the_log_level_and_rust_log_wins() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    // log.level = "warn" in this configuration.
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s = env.schedules()[0].to_string();
    let unknown = "0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11";
    let levels = |err: &str| -> BTreeSet<String> {
        ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"]
            .into_iter()
            .filter(|level| err.contains(&format!(" {level} ")))
            .map(str::to_owned)
            .collect()
    };
    let sync = |flag: &'static str| {
        let mut args = vec![
            "--config",
            c,
            "sync",
            "--schedule",
            &s,
            "--schedule",
            unknown,
        ];
        if !flag.is_empty() {
            args.push(flag);
        }
        args
    };

    let out = callsync(&sync("")).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(levels(&stderr(&out)), BTreeSet::from(["ERROR".into()]));
    let out = callsync(&sync("-v")).await;
    let err = stderr(&out);
    assert!(err.contains(" DEBUG ") && err.contains(" INFO "), "{err}");
    assert!(!err.contains(" TRACE "), "{err}");
    assert!(!err.contains('\x1b'), "no colours into a pipe: {err:?}");
    let out = callsync(&sync("-vv")).await;
    assert!(stderr(&out).contains(" TRACE "));
    // -q: errors only, and the error line of the command.
    let out = callsync_with_env(&sync("-q"), &[("CALLSYNC_LOG__LEVEL", "info")]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(levels(&err), BTreeSet::from(["ERROR".into()]), "{err}");
    // RUST_LOG wins over both.
    let out = callsync_with_env(&sync("-v"), &[("RUST_LOG", "off")]).await;
    assert!(levels(&stderr(&out)).is_empty(), "{}", stderr(&out));
    let out = callsync_with_env(&sync("-q"), &[("RUST_LOG", "info")]).await;
    assert!(levels(&stderr(&out)).contains("INFO"), "{}", stderr(&out));
    let out = callsync(&["-q", "-v", "status"]).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_is_offered_only_to_the_commands_that_read_it() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    for command in ["simulate", "demo", "completions", "man"] {
        let out = callsync(&[command, "--help"]).await;
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(!help.contains("--config"), "{command}: {help}");
        let out = callsync(&[command, "--config", c]).await;
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            stderr(&out).starts_with("error: unexpected argument '--config' found"),
            "{command}: {}",
            stderr(&out)
        );
    }
    for command in ["simulate", "demo"] {
        let out = callsync(&["--config", c, command]).await;
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert_eq!(
            stderr(&out),
            format!("error: callsync {command} reads no configuration file: leave out --config\n")
        );
    }
    let out = callsync(&["--config", c, "status", "--config", c]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: --config is given twice, before and after the command: give it once\n"
    );
    let out = callsync(&["migrate", "--config", c]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // After a nested command too.
    let out = callsync(&["checkpoint", "show", "--config", c]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = callsync(&["checkpoint", "--config", c, "show"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Every command's name, nested ones too (`checkpoint show` gives `checkpoint`, `show`).
fn command_names(command: &clap::Command) -> Vec<String> {
    command
        .get_subcommands()
        .flat_map(|sub| std::iter::once(sub.get_name().to_owned()).chain(command_names(sub)))
        .collect()
}

#[tokio::test]
async fn completions_and_man_pages_name_every_command() {
    let command = callsync::cli::command();
    let names = command_names(&command);
    assert!(names.len() > 20, "{names:?}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = callsync(&["completions", shell]).await;
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        for name in &names {
            assert!(
                script.contains(name.as_str()),
                "{shell}: {name} missing:\n{script}"
            );
        }
        // fish names it `-l config`.
        assert!(script.contains("config"), "{shell}");
    }
    let out = callsync(&["completions", "tcsh"]).await;
    assert_eq!(out.status.code(), Some(2));

    let out = callsync(&["man"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // roff escapes the dashes: `call\-flow`.
    let page = String::from_utf8_lossy(&out.stdout).replace("\\-", "-");
    assert!(page.contains(".TH callsync 1"), "{page}");
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        assert!(
            page.contains(&format!("callsync-{}(1)", sub.get_name())),
            "{} missing from the page",
            sub.get_name()
        );
    }
    // Exit codes and the environment in sections of their own, not clap_mangen's EXTRA.
    for section in [
        ".SH \"EXIT STATUS\"\n.TP\n\\fB0\\fR\nsuccess\n",
        ".SH \"ENVIRONMENT\"\n",
        ".SH \"FILES\"\n",
    ] {
        assert!(page.contains(section), "{section:?} missing:\n{page}");
    }
    assert!(!page.contains(".SH EXTRA"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let out = callsync(&["man", "--out", pages.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let written: BTreeSet<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    assert_eq!(printed, written);
    for page in [
        "callsync.1",
        "callsync-sync.1",
        "callsync-checkpoint-show.1",
    ] {
        let text = std::fs::read_to_string(pages.join(page)).unwrap();
        assert!(text.starts_with(".ie"), "{page}");
    }
    let sync = std::fs::read_to_string(pages.join("callsync-sync.1")).unwrap();
    assert!(sync.contains("\\-\\-json"), "{sync}");
}

#[tokio::test]
async fn simulate_on_a_taken_port_exits_1_saying_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        callsync(&["simulate", "--listen", &addr]),
    )
    .await
    .expect("it stops at once");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "error: cannot start the simulator: {addr} is in use (another simulator, or another program, listens there): stop it, or choose another address with --listen (127.0.0.1:0 takes any free port)\n"
        )
    );
    assert!(out.stdout.is_empty());
}

/// `callsync simulate ARGS` on a free port, until dropped; its banner's values by name.
struct SimulateProcess {
    child: std::process::Child,
    banner: std::collections::HashMap<String, String>,
}

impl SimulateProcess {
    fn start(args: &[&str]) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .args(["simulate", "--listen", "127.0.0.1:0", "--calls", "5"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("callsync starts");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        // Read in a thread, so that a banner that never comes fails the test.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut banner = std::collections::HashMap::new();
            for line in stdout.lines().map_while(Result::ok) {
                if let Some((name, value)) = line.trim().split_once(" = ") {
                    banner.insert(name.trim().to_owned(), value.trim_matches('"').to_owned());
                }
                if line.starts_with("  schedules") {
                    break;
                }
            }
            let _ = sender.send(banner);
        });
        let banner = receiver.recv_timeout(std::time::Duration::from_secs(30));
        let mut process = SimulateProcess {
            child,
            banner: Default::default(),
        };
        process.banner = banner.expect("simulate printed its banner");
        process
    }

    fn get(&self, name: &str) -> &str {
        self.banner
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in {:?}", self.banner))
    }

    fn list_url(&self) -> String {
        let schedules = self.get("schedules").trim_matches(['[', ']']);
        let schedule = schedules
            .split(", ")
            .next()
            .unwrap_or_default()
            .trim_matches('"');
        format!(
            "{}/api/v1/schedules/{schedule}/outbound_calls",
            self.get("base_url").trim_end_matches('/')
        )
    }
}

impl Drop for SimulateProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn simulate_exposes_its_fault_rate_limit_and_token_knobs() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();

    let sim = SimulateProcess::start(&["--429-rate", "1", "--retry-after", "7"]);
    let answer = http
        .get(sim.list_url())
        .bearer_auth(sim.get("access_token"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    assert_eq!(answer.headers()["retry-after"], "7");
    drop(sim);

    let sim = SimulateProcess::start(&["--fail-rate", "1"]);
    for expected in [500, 502, 503] {
        let answer = http
            .get(sim.list_url())
            .bearer_auth(sim.get("access_token"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), expected);
    }
    drop(sim);

    let sim = SimulateProcess::start(&["--rate-limit", "2"]);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let answer = http
            .get(sim.list_url())
            .bearer_auth(sim.get("access_token"))
            .send()
            .await
            .unwrap();
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses[..2], [200, 200], "{statuses:?}");
    assert!(statuses[2..].contains(&429), "{statuses:?}");
    drop(sim);

    let sim = SimulateProcess::start(&["--token-lifetime", "5", "--summary-list"]);
    let token: Value = http
        .post(sim.get("token_url"))
        .basic_auth(sim.get("client_id"), Some(sim.get("client_secret")))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(token["expires_in"], 5);
    let page: Value = http
        .get(sim.list_url())
        .bearer_auth(sim.get("access_token"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let attempted = page["data"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|call| {
            call["outbound_call_attempts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        })
        .expect("a call with attempts");
    // The list leaves out what the call's detail holds.
    let detail: Value = http
        .get(format!(
            "{}/api/v1/outbound_calls/{}",
            sim.get("base_url").trim_end_matches('/'),
            attempted["uid"].as_str().unwrap()
        ))
        .bearer_auth(sim.get("access_token"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let attempt = |call: &Value| call["outbound_call_attempts"][0].clone();
    assert!(attempt(&detail).get("call_outcomes").is_some(), "{detail}");
    assert!(
        attempt(attempted).get("call_outcomes").is_none(),
        "{attempted}"
    );
    drop(sim);

    for (args, problem) in [
        (vec!["--fail-rate", "2"], "\"2\" is not a share from 0 to 1"),
        (vec!["--child-changes-without-bump"], "--dialer"),
        (vec!["--token-lifetime", "0"], "0 is not in 1.."),
    ] {
        let out = callsync(&[&["simulate"], args.as_slice()].concat()).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(problem), "{args:?}: {}", stderr(&out));
    }
}

conformance!(
    checkpoint_json_prints_each_schedule_and_each_move_as_one_object,
    checkpoint_json_scenario
);

/// `checkpoint show|set|reset --json`: one object a line, the move's `from` and `to` as
/// `migrate --json`'s, names from the configuration; on SQLite and PostgreSQL alike.
async fn checkpoint_json_scenario(dest: crate::harness::Dest) {
    let env = TestEnv::start_on(
        SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 20,
            ..SimulatorOptions::default()
        },
        dest,
    )
    .await;
    let s = env.schedules();
    let named = format!(
        "[[sync.schedule]]\nuid = \"{}\"\nname = \"Renewals\"\n",
        s[1]
    );
    let config = env.write_config("");
    // The second schedule named: listed once, under [[sync.schedule]].
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&format!(", \"{}\"", s[1]), "")
        .replace("[log]", &format!("{named}\n[log]"));
    std::fs::write(&config, text).unwrap();
    let c = config.to_str().unwrap();
    let out = callsync(&["--config", c, "sync"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let last = |schedule| {
        env.sim
            .truth(schedule)
            .iter()
            .map(|c| c.updated_at)
            .max()
            .unwrap()
            .to_rfc3339()
    };

    let out = callsync(&["--config", c, "checkpoint", "show", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines = json_lines(&out);
    for line in &mut lines {
        assert!(line["written"].is_string(), "{line}");
        line["written"] = Value::Null;
    }
    lines.sort_by_key(|line| line["schedule_uid"].to_string());
    let mut expected = vec![
        serde_json::json!({"schedule_uid": s[0], "schedule_name": null, "cursor": last(s[0]), "written": null}),
        serde_json::json!({"schedule_uid": s[1], "schedule_name": "Renewals", "cursor": last(s[1]), "written": null}),
    ];
    expected.sort_by_key(|line| line["schedule_uid"].to_string());
    assert_eq!(lines, expected);

    let one = s[1].to_string();
    let out = callsync(&[
        "--config",
        c,
        "checkpoint",
        "set",
        "--schedule",
        &one,
        "--cursor",
        "2026-01-01T01:00:00+01:00",
        "--json",
    ])
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json_lines(&out),
        [
            serde_json::json!({"schedule_uid": one, "schedule_name": "Renewals",
            "from": last(s[1]), "to": "2026-01-01T00:00:00Z"})
        ]
    );
    // stdout is a pipe here: the undo line is on stderr too.
    assert_eq!(
        stderr(&out),
        format!(
            "schedule {one}: cursor was {}, now 2026-01-01T00:00:00Z\n",
            last(s[1])
        )
    );
    let out = callsync(&[
        "--config",
        c,
        "checkpoint",
        "reset",
        "--schedule",
        &one,
        "--json",
    ])
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json_lines(&out),
        [
            serde_json::json!({"schedule_uid": one, "schedule_name": "Renewals",
            "from": "2026-01-01T00:00:00Z", "to": null})
        ]
    );
    let out = callsync(&[
        "--config",
        c,
        "checkpoint",
        "show",
        "--schedule",
        &one,
        "--json",
    ])
    .await;
    assert_eq!(
        json_lines(&out),
        [
            serde_json::json!({"schedule_uid": one, "schedule_name": "Renewals",
            "cursor": null, "written": null})
        ]
    );
    // An error stays a line on stderr, as with every other --json: stdout holds no JSON.
    let typo = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11";
    let out = callsync(&[
        "--config",
        c,
        "checkpoint",
        "reset",
        "--schedule",
        typo,
        "--json",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).starts_with(&format!("error: schedule {typo} is in neither")),
        "{}",
        stderr(&out)
    );
}
