//! The `callsync` binary: subcommands, exit codes, one-line errors, `--config` anywhere.

use std::path::Path;
use std::process::Output;

use callsync::simulator::SimulatorOptions;

use crate::harness::TestEnv;

pub(crate) async fn callsync(args: &[&str]) -> Output {
    callsync_with_env(args, &[]).await
}

/// `callsync args` with `vars` set (and no RUST_LOG or CREDENTIALS_DIRECTORY of our own).
pub(crate) async fn callsync_with_env(args: &[&str], vars: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .envs(vars.iter().copied())
        .output()
        .await
        .expect("callsync runs")
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn help_lists_every_subcommand() {
    let out = callsync(&["--help"]).await;
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for command in ["sync", "backfill", "status", "migrate", "simulate"] {
        assert!(
            text.contains(&format!("  {command} ")),
            "{command} missing from:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_bad_config_exits_2_with_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"https://x.example\"\naccess_token = \"secret-token\"\n[warehouse]\npath = \"{}\"\n[sync]\npage_size = 500\n",
            db.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    for args in [
        vec!["--config", c, "sync"],
        vec!["sync", "--config", c],
        vec!["--config", c, "migrate"],
    ] {
        let out = callsync(&args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert_eq!(
            err, "error: config: sync.page_size: 500 is outside 1..=100\n",
            "{args:?}"
        );
        assert!(!err.contains("secret-token"));
    }
    assert!(!db.exists(), "nothing is written on a bad config");
    let missing = callsync(&["--config", "/nonexistent.toml", "status"]).await;
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        stderr(&missing),
        "error: config: cannot read /nonexistent.toml: no such file\n"
    );
}

#[tokio::test]
async fn a_bad_environment_or_syntax_exits_2_naming_its_source_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let config = dir.path().join("ok.toml");
    let valid = format!(
        "[api]\nbase_url = \"https://x.example\"\naccess_token = \"TOPSECRET-abc123\"\n[warehouse]\npath = \"{}\"\n[sync]\nschedules = [\"0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11\"]\n",
        db.display()
    );
    std::fs::write(&config, &valid).unwrap();
    let c = config.to_str().unwrap();

    let out = callsync_with_env(&["--config", c, "sync"], &[("CALLSYNC_SYNC__BOGUS", "1")]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: config: CALLSYNC_SYNC__BOGUS: unknown key sync.bogus; expected one of `schedules`, `schedule`, `lookback_secs`, `cron`, `page_size`, `details`, `concurrency`, `reconcile_cron`, `reconcile_window`, `shutdown_timeout_secs`, `behind_after`, `max_clock_skew_secs`, `max_lag_secs`, `instance`, `filter`\n"
    );

    let out = callsync_with_env(&["--config", c, "sync"], &[("RUST_LOG", "foo=[")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: cannot set up logging: RUST_LOG=\"foo=[\" is not a valid filter"),
        "{err}"
    );
    assert!(err.ends_with("; fix or unset RUST_LOG\n"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // A typo of a level is not a target that silences every line (even `ERROR pass failed`).
    let levels =
        "off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug)";
    let out = callsync_with_env(&["--config", c, "sync"], &[("RUST_LOG", "eror")]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "error: cannot set up logging: RUST_LOG=\"eror\" is not a log level: \"eror\" is not one of {levels}; fix or unset RUST_LOG\n"
        )
    );
    std::fs::write(&config, format!("{valid}[log]\nlevel = \"warnings\"\n")).unwrap();
    let out = callsync(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "error: config: log.level: \"warnings\" is not a log level: \"warnings\" is not one of {levels}\n"
        )
    );

    // The closing quote missing: the line with the token must not be quoted back.
    std::fs::write(&config, valid.replace("abc123\"", "abc123")).unwrap();
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: config: {c}: not valid TOML at line 3, column 33: invalid basic string, expected `\"`\n"
        )
    );
    assert!(!db.exists(), "nothing is written on a bad configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_status_and_migrate_through_the_binary() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 120,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();

    let out = callsync(&["migrate", "--config", c]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "warehouse {}: schema version 0 -> {}\n",
            env.warehouse_path().display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );

    let out = callsync(&["--config", c, "sync"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    env.assert_matches_truth(&env.schedules());

    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = status.as_array().expect("an array");
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row["calls"], 120);
        assert_eq!(row["last_run"]["kind"], "incremental");
        assert_eq!(row["last_run"]["error"], serde_json::Value::Null);
        assert!(row["cursor"].is_string());
    }
    let out = callsync(&["--config", c, "status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("120 calls"), "{text}");

    // One schedule the service does not know: that one fails, the run exits 1.
    let unknown = "0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11";
    let out = callsync(&["--config", c, "sync", "--schedule", unknown]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("404") && err.contains(unknown), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_commands_that_talk_to_the_service_need_credentials() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    // The file as the README installs it: the token reaches only the daemon, through
    // systemd's LoadCredential=, so an operator or a BI-group user runs without it.
    let with_token = std::fs::read_to_string(env.write_config("")).unwrap();
    let without: String = with_token
        .lines()
        .filter(|l| !l.starts_with("access_token"))
        .map(|l| format!("{l}\n"))
        .collect();
    let config = env.dir.path().join("no-secret.toml");
    std::fs::write(&config, without).unwrap();
    let c = config.to_str().unwrap();
    let s = env.schedules()[0].to_string();

    for command in [
        vec!["sync"],
        vec!["sync", "--dry-run"],
        vec!["backfill", "--schedule", &s],
        vec!["run"],
        vec!["check"],
    ] {
        let args: Vec<&str> = ["--config", c].iter().copied().chain(command).collect();
        let out = callsync(&args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            stderr(&out),
            "error: config: api: no credentials: set api.access_token, api.access_token_file, the systemd credential access_token, or an [api.oauth] table\n",
            "{args:?}"
        );
    }
    assert!(!env.warehouse_path().exists(), "nothing is written");
    assert!(
        env.sim.requests().is_empty(),
        "the service is not contacted"
    );

    let out = callsync(&["--config", c, "migrate"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "warehouse {}: schema version 0 -> {}\n",
            env.warehouse_path().display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );

    // The daemon's view: the same file, the token as a systemd credential.
    let credentials = tempfile::tempdir().unwrap();
    std::fs::write(
        credentials.path().join("access_token"),
        env.sim.access_token(),
    )
    .unwrap();
    let out = callsync_with_env(
        &["--config", c, "sync"],
        &[(
            "CREDENTIALS_DIRECTORY",
            credentials.path().to_str().unwrap(),
        )],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));

    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(status[0]["schedule_uid"], s.as_str());
    assert_eq!(status[0]["calls"], 20);

    let last = env
        .sim
        .truth(env.schedules()[0])
        .iter()
        .map(|c| c.updated_at)
        .max()
        .unwrap();
    let out = callsync(&["--config", c, "checkpoint", "show"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("schedule {s}: cursor {last} (written ")),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_or_unreadable_secret_file_stops_only_the_commands_that_need_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let schedule = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11";
    // Missing, and a directory (unreadable as a file even by root, unlike mode 0000).
    for token_file in [dir.path().join("no-such-token"), dir.path().to_owned()] {
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            format!(
                "[api]\nbase_url = \"http://127.0.0.1:9\"\naccess_token_file = \"{}\"\n[warehouse]\npath = \"{}\"\n[sync]\nschedules = [\"{schedule}\"]\n",
                token_file.display(),
                db.display()
            ),
        )
        .unwrap();
        let c = config.to_str().unwrap();
        for command in [
            vec!["migrate"],
            vec!["status"],
            vec!["status", "--json"],
            vec![
                "checkpoint",
                "set",
                "--schedule",
                schedule,
                "--cursor",
                "2026-01-01T00:00:00Z",
            ],
            vec!["checkpoint", "show"],
            vec!["checkpoint", "reset", "--schedule", schedule],
        ] {
            let args: Vec<&str> = ["--config", c].iter().copied().chain(command).collect();
            let out = callsync(&args).await;
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        }
        for command in [
            vec!["sync"],
            vec!["backfill", "--schedule", schedule],
            vec!["run"],
        ] {
            let args: Vec<&str> = ["--config", c].iter().copied().chain(command).collect();
            let out = callsync(&args).await;
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let err = stderr(&out);
            assert!(
                err.starts_with(&format!(
                    "error: config: api.access_token_file: cannot read {}: ",
                    token_file.display()
                )),
                "{args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
}

#[tokio::test]
async fn the_example_config_with_its_placeholder_token_filled_in_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let example = include_str!("../../config/callsync.example.toml");
    assert!(
        !example.lines().any(|l| l.starts_with("access_token")),
        "the example has no active secret line"
    );
    let config = dir.path().join("callsync.toml");
    let db = dir.path().join("w.db");
    std::fs::write(
        &config,
        example
            .replace("# access_token = \"...\"", "access_token = \"replace-me\"")
            .replace(
                "path = \"callsync.db\"",
                &format!("path = \"{}\"", db.display()),
            ),
    )
    .unwrap();
    let out = callsync(&["--config", config.to_str().unwrap(), "sync"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: config: api.access_token: is a placeholder, not a secret: set the real one, or delete api.access_token to use api.access_token_file or the systemd credential\n"
    );
    assert!(!db.exists());
}

#[tokio::test]
async fn a_damaged_or_newer_warehouse_is_one_line_naming_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let schedule = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11";
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:9\"\naccess_token = \"abc123\"\n[warehouse]\npath = \"{}\"\n[sync]\nschedules = [\"{schedule}\"]\n",
            db.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let commands = [
        vec!["migrate"],
        vec!["status"],
        vec!["checkpoint", "show"],
        vec!["checkpoint", "reset", "--schedule", schedule],
        vec!["sync"],
        vec!["sync", "--dry-run"],
    ];
    let check = |out: &Output, args: &[&str], expected: &str| {
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert_eq!(
            err.matches(&db.display().to_string()).count(),
            1,
            "{args:?}: {err}"
        );
        assert!(err.contains(expected), "{args:?}: {err}");
        if args.first() != Some(&"migrate") {
            assert!(!err.contains("migrate"), "{args:?}: {err}");
        }
    };

    std::fs::write(&db, vec![7u8; 8192]).unwrap();
    for command in &commands {
        let args: Vec<&str> = ["--config", c].iter().chain(command).copied().collect();
        let out = callsync(&args).await;
        check(
            &out,
            &args,
            "file is not a database; the file is damaged or not a database: restore it from a backup, or move it away to start a new warehouse\n",
        );
    }
    std::fs::remove_file(&db).unwrap();
    assert!(callsync(&["--config", c, "migrate"]).await.status.success());
    let latest = callsync::warehouse::sqlite::latest_version();
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", (latest + 1) as i64)
        .unwrap();
    let latest = callsync::warehouse::sqlite::latest_version();
    let newer = format!(
        "has schema version {}, newer than this callsync knows ({latest}); upgrade callsync\n",
        latest + 1
    );
    for command in &commands {
        let args: Vec<&str> = ["--config", c].iter().chain(command).copied().collect();
        let out = callsync(&args).await;
        check(&out, &args, &newer);
    }
}

#[tokio::test]
async fn a_directory_as_the_config_file_or_an_empty_warehouse_path_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = callsync(&["--config", d, "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: config: {d}: is a directory; pass the configuration file itself (e.g. --config {d}/callsync.toml)\n"
        )
    );
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[api]\nbase_url = \"https://x.example\"\n[warehouse]\npath = \"\"\n",
    )
    .unwrap();
    let out = callsync(&["--config", config.to_str().unwrap(), "migrate"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: config: warehouse.path: is empty; name the SQLite file, e.g. \"/var/lib/callsync/callsync.db\"\n"
    );
}

#[tokio::test]
async fn status_before_the_first_sync_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"https://x.example\"\n[warehouse]\npath = \"{}\"\n",
            db.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let expected = format!(
        "error: there is no warehouse at {} yet: run `callsync sync` or start the daemon to create it (or check warehouse.path)\n",
        db.display()
    );
    for command in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["checkpoint", "show"],
    ] {
        let args: Vec<&str> = ["--config", c].iter().copied().chain(command).collect();
        let out = callsync(&args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&out), expected, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // The test suite's and CI's own switches, exported in the shell that runs them, are
        // not configuration keys: the same answer with them set.
        let switches = [
            ("CALLSYNC_SKIP_POSTGRES", "1"),
            ("CALLSYNC_REQUIRE_ADVISORIES", "1"),
            ("CALLSYNC_BENCH_POSTGRES", "postgresql://x@/y"),
        ];
        let with_switches = callsync_with_env(&args, &switches).await;
        assert_eq!(with_switches.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&with_switches), expected, "{args:?}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec!["c.toml"], "a read-only command creates nothing");
}

#[tokio::test]
async fn variables_that_are_not_utf8_never_panic() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"https://x.example\"\n[warehouse]\npath = \"{}\"\n",
            dir.path().join("w.db").display()
        ),
    )
    .unwrap();
    let not_utf8 = std::ffi::OsStr::from_bytes(b"\xff");
    let run = |var: &'static str| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
            .args(["--config", config.to_str().unwrap(), "migrate"])
            .env_remove("RUST_LOG")
            .env(var, not_utf8)
            .output()
    };
    // Another program's variable is none of callsync's business.
    let out = run("SOMEONE_ELSES").await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run("CALLSYNC_API__ACCESS_TOKEN").await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: config: CALLSYNC_API__ACCESS_TOKEN: is not valid UTF-8 text; set it to text or unset it\n"
    );
}

#[tokio::test]
async fn sync_without_schedules_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"https://x.example\"\naccess_token = \"t\"\n[warehouse]\npath = \"{}\"\n",
            Path::new(dir.path()).join("w.db").display()
        ),
    )
    .unwrap();
    let out = callsync(&["--config", config.to_str().unwrap(), "sync"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: no schedules to sync: list them in sync.schedules or pass --schedule UID\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_reports_and_writes_nothing() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 80,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s = env.schedules()[0];

    let out = callsync(&["--config", c, "sync", "--dry-run"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("schedule {s}: would write 80 of 80 calls seen")),
        "{text}"
    );
    assert!(
        !env.warehouse_path().exists(),
        "a dry run creates no warehouse"
    );

    assert!(callsync(&["--config", c, "sync"]).await.status.success());
    let before = env.snapshot(s);
    env.sim.bulk_create_now(s, 10);
    let out = callsync(&["--config", c, "sync", "--dry-run"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would write 10 of "), "{text}");
    assert_eq!(env.snapshot(s), before, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_can_be_shown_moved_and_reset() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 30,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s = env.schedules()[0].to_string();
    assert!(callsync(&["--config", c, "sync"]).await.status.success());
    let last = env
        .sim
        .truth(env.schedules()[0])
        .iter()
        .map(|c| c.updated_at)
        .max()
        .unwrap();

    let out = callsync(&["--config", c, "checkpoint", "show"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("schedule {s}: cursor {last} (written ")),
        "{text}"
    );

    let out = callsync(&[
        "--config",
        c,
        "checkpoint",
        "set",
        "--schedule",
        &s,
        "--cursor",
        "2026-01-01T01:00:00+01:00",
    ])
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("schedule {s}: cursor was {last}, now 2026-01-01T00:00:00Z\n")
    );
    let out = callsync(&["--config", c, "checkpoint", "reset", "--schedule", &s]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "schedule {s}: cursor was 2026-01-01T00:00:00Z, now none (the next pass reads everything)\n"
        )
    );
    let out = callsync(&["--config", c, "checkpoint", "show", "--schedule", &s]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("schedule {s}: cursor none (written never)\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlikely_cursors_and_unknown_schedules_need_force() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s = env.schedules()[0].to_string();
    assert!(callsync(&["--config", c, "sync"]).await.status.success());
    let show = || async {
        let out = callsync(&["--config", c, "checkpoint", "show", "--schedule", &s]).await;
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = show().await;

    let set = |cursor: &'static str, force: bool| {
        let mut args = vec!["--config", c, "checkpoint", "set", "--schedule", &s];
        args.extend(["--cursor", cursor]);
        if force {
            args.push("--force");
        }
        async move { callsync(&args).await }
    };
    let out = set("2999-01-01T00:00:00Z", false).await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: --cursor 2999-01-01T00:00:00Z is more than 5 minutes ahead of this machine's clock ("),
        "{err}"
    );
    assert!(err.ends_with("; pass --force to set it anyway\n"), "{err}");
    let out = set("0000-06-01T00:00:00Z", false).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: --cursor 0000-06-01T00:00:00Z is before the year 1, which the service cannot be asked about; pass --force to set it anyway\n"
    );
    assert_eq!(show().await, before, "nothing moved");
    let out = set("2999-01-01T00:00:00Z", true).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        show()
            .await
            .starts_with(&format!("schedule {s}: cursor 2999-01-01T00:00:00Z "))
    );

    // A uid in neither the configuration nor the warehouse: a typo, most likely.
    let typo = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11";
    let problem = format!(
        "schedule {typo} is in neither sync.schedules nor the warehouse {} (a typo?)",
        env.warehouse_path().display()
    );
    for command in [
        vec!["checkpoint", "show", "--schedule", typo],
        vec!["checkpoint", "reset", "--schedule", typo],
        // Last: once set, the warehouse knows it.
        vec![
            "checkpoint",
            "set",
            "--schedule",
            typo,
            "--cursor",
            "2026-01-01T00:00:00Z",
        ],
    ] {
        let args: Vec<&str> = ["--config", c].iter().copied().chain(command).collect();
        let out = callsync(&args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            stderr(&out),
            format!("error: {problem}; pass --force to use it anyway\n"),
            "{args:?}"
        );
        let forced: Vec<&str> = args.iter().copied().chain(["--force"]).collect();
        let out = callsync(&forced).await;
        assert!(out.status.success(), "{forced:?}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with(&format!("warning: {problem}; going on (--force)\n")),
            "{forced:?}: {}",
            stderr(&out)
        );
    }

    // A schedule the warehouse knows is fine without being configured.
    let unconfigured = env.dir.path().join("unconfigured.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("schedules") {
                "schedules = []\n".to_owned()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&unconfigured, text).unwrap();
    let u = unconfigured.to_str().unwrap();
    let out = callsync(&["--config", u, "checkpoint", "reset", "--schedule", &s]).await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_to_completion_and_leaves_a_warehouse_with_results() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        callsync(&["demo", "--dir", demo.to_str().unwrap()]),
    )
    .await
    .expect("the demo finishes within a minute");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for section in [
        "Calls by status and progress",
        "Top outcomes",
        "Answer rate per schedule",
        "sqlite3 ",
    ] {
        assert!(text.contains(section), "{section} missing from:\n{text}");
    }
    let rows: i64 = rusqlite::Connection::open(demo.join("callsync.db"))
        .unwrap()
        .query_row("SELECT count(*) FROM call_results", [], |r| r.get(0))
        .unwrap();
    // The 1,200 seeded calls, plus those the dialer's campaign added while the demo ran.
    assert!(rows >= 1200, "{rows} calls");
    // The demo's configuration names its schedules: BI shows a name next to every call.
    let named: i64 = rusqlite::Connection::open(demo.join("callsync.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM call_results WHERE schedule_name LIKE 'Demo schedule _'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(named, rows);
    // The overview the analyst reads is the warehouse: its status table adds up to it.
    let by_status: i64 = text
        .lines()
        .skip_while(|l| !l.starts_with("Calls by status and progress"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .last()
                .and_then(|n| n.parse::<i64>().ok())
                .unwrap_or_else(|| panic!("a count ends {l:?}"))
        })
        .sum();
    assert_eq!(by_status, rows, "{text}");
    // Answer rates by the schedules' names.
    let rates: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Answer rate per schedule"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rates.len(), 3, "{text}");
    assert!(
        rates
            .iter()
            .all(|l| l.trim_start().starts_with("Demo schedule ")),
        "{text}"
    );
}

/// `callsync args` with stdout a pipe whose reader is gone before it starts (`| true`).
async fn callsync_into_a_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        // Not `output()`: tokio's would replace stdout with a pipe of its own.
        .spawn()
        .expect("callsync starts")
        .wait_with_output()
        .await
        .expect("callsync runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_panics_on_a_closed_stdout_and_a_moved_cursor_says_where_it_was() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 30,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let s = env.schedules()[0].to_string();
    // With --force the demo uses a directory holding other files, and leaves them be.
    let demo = env.dir.path().join("demo");
    std::fs::create_dir(&demo).unwrap();
    std::fs::write(demo.join("notes.txt"), "mine").unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["--config", c, "migrate"],
        vec!["--config", c, "sync"],
        vec!["--config", c, "sync", "--dry-run"],
        vec!["--config", c, "status"],
        vec!["--config", c, "status", "--json"],
        vec!["--config", c, "checkpoint", "show"],
        vec!["--config", c, "checkpoint", "show", "--schedule", &s],
        vec!["demo", "--force", "--dir", demo.to_str().unwrap()],
    ];
    for args in &commands {
        let out = callsync_into_a_closed_pipe(args).await;
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(demo.join("notes.txt")).unwrap(),
        "mine"
    );
    let last = env
        .sim
        .truth(env.schedules()[0])
        .iter()
        .map(|c| c.updated_at)
        .max()
        .unwrap();
    // The cursor moved before the line was printed: it is on stderr too, to undo the move.
    let out = callsync_into_a_closed_pipe(&[
        "--config",
        c,
        "checkpoint",
        "set",
        "--schedule",
        &s,
        "--cursor",
        "2026-01-01T00:00:00Z",
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!("schedule {s}: cursor was {last}, now 2026-01-01T00:00:00Z\n")
    );
    let out =
        callsync_into_a_closed_pipe(&["--config", c, "checkpoint", "reset", "--schedule", &s])
            .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "schedule {s}: cursor was 2026-01-01T00:00:00Z, now none (the next pass reads everything)\n"
        )
    );
}

#[tokio::test]
async fn the_demo_refuses_a_directory_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let production = [
        ("callsync.db", "a production warehouse"),
        ("callsync.toml", "[api]\n"),
    ];
    for (name, text) in production {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let out = callsync(&["demo", "--dir", d]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("error: demo: {d} holds callsync.")),
        "{err}"
    );
    assert!(
        err.ends_with(", which no earlier demo wrote; choose a new or empty directory with --dir, or pass --force to overwrite its callsync.toml and delete its callsync.db\n"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    for (name, text) in production {
        assert_eq!(
            std::fs::read_to_string(dir.path().join(name)).unwrap(),
            text
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn sigterm_stops_the_simulator_even_when_stderr_is_a_closed_pipe() {
    use std::io::BufRead;
    // `callsync simulate … 2>&1 | head` closes stderr under the process: a failed log write
    // must not take the signal handling down with it.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["simulate", "--listen", "127.0.0.1:0", "--calls", "10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("callsync starts");
    drop(child.stderr.take());
    // stdout stays open (this test is about stderr alone).
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut banner = String::new();
    stdout.read_line(&mut banner).expect("banner");
    assert!(!banner.is_empty(), "the simulator printed its banner");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM was ignored");
        }
        // Polling interval under the patience above.
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn the_config_simulate_prints_syncs_its_schedules_as_it_is() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["simulate", "--listen", "127.0.0.1:0", "--calls", "10"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("callsync starts");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    // What `sed -n '/^\[api\]/,$p'` cuts out, as docs/walkthrough.md does; read in a
    // thread, so that an output without it fails the test instead of hanging it.
    let (cut, config) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        for line in stdout.lines().map_while(Result::ok) {
            if line == "[api]" || !text.is_empty() {
                text.push_str(&line);
                text.push('\n');
            }
            if line.starts_with("schedules = [") {
                break;
            }
        }
        let _ = cut.send(text);
    });
    let config = config.recv_timeout(std::time::Duration::from_secs(30));
    let Ok(config) = config else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("simulate printed no config");
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/callsync.toml"), &config).unwrap();
    // From ./config/callsync.toml, with the warehouse in the working directory.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("sync")
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .expect("callsync runs");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{config}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = rusqlite::Connection::open(dir.path().join("callsync.db")).unwrap();
    let (schedules, calls): (i64, i64) = db
        .query_row(
            "SELECT count(DISTINCT schedule_uid), count(*) FROM calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((schedules, calls), (3, 30), "{config}");
}

/// A daemon that has stopped, or cannot record its passes, leaves the last pass it recorded
/// looking healthy: `status` counts the `sync.cron` ticks since then and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_when_no_pass_was_recorded_for_several_ticks_of_the_cron() {
    use callsync::service::Timestamp;
    use callsync::warehouse::sqlite::Warehouse;
    use callsync::warehouse::{Destination, RunKind, RunOutcome, RunRecord};
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 1,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("cron = \"0 */5 * * * *\"\n");
    let c = config.to_str().unwrap();
    let [stale, fresh] = env.schedules()[..] else {
        panic!("two schedules");
    };
    let ago = |secs: i128| {
        Timestamp::from_unix_nanos(Timestamp::now().unix_nanos() - secs * 1_000_000_000)
            .expect("a timestamp")
    };
    // The stale schedule's last pass ended an hour ago: 12 ticks of a 5-minute cron since; the
    // fresh one's a minute ago.
    let stale_at = ago(3600);
    {
        let mut w = Warehouse::open(&env.warehouse_path(), std::time::Duration::from_secs(5))
            .expect("warehouse");
        for (schedule, at) in [(stale, stale_at), (fresh, ago(60))] {
            let run = w
                .start_run(
                    schedule,
                    RunKind::Incremental,
                    at,
                    &callsync::warehouse::ProcessIdentity::this_process(None),
                )
                .expect("started");
            let record = RunRecord {
                outcome: RunOutcome::Completed,
                stats: Default::default(),
                finished_at: at,
                horizon: None,
                lag_secs: None,
                error: None,
                error_kind: None,
            };
            w.finish_run(run, &record).expect("finished");
        }
    }

    let out = callsync(&["--config", c, "status", "--json"]).await;
    // A schedule without a recorded pass for 3 ticks needs someone: exit 3, which says so.
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "attention: schedule {stale}: no pass recorded for "
        )),
        "{}",
        stderr(&out)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let row = |uid: uuid::Uuid| {
        rows.as_array()
            .expect("an array")
            .iter()
            .find(|r| r["schedule_uid"] == uid.to_string())
            .cloned()
            .expect("a row")
    };
    // 12, or 13 when a tick fell between the pass's time and the status's.
    let ticks = row(stale)["ticks_since_last_pass"]
        .as_u64()
        .expect("counted");
    assert!((12..=13).contains(&ticks), "{ticks}");
    assert_eq!(row(stale)["no_recent_pass"], true);
    assert!(
        row(fresh)["ticks_since_last_pass"]
            .as_u64()
            .expect("counted")
            <= 1
    );
    assert_eq!(row(fresh)["no_recent_pass"], false);

    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let said = |ticks| {
        format!(
            "  NO PASS RECORDED for {ticks} ticks of sync.cron (last at {}): the daemon has stopped, cannot record its passes, or is in one long pass; see its log (journalctl -u callsync)\n",
            stale_at.to_warehouse_text()
        )
    };
    assert!(
        text.contains(&said(12)) || text.contains(&said(13)),
        "{text}"
    );
    assert_eq!(text.matches("NO PASS RECORDED").count(), 1, "{text}");
}

/// No file: `CALLSYNC_*` variables alone configure a command; `CALLSYNC_CONFIG` names a file.
#[tokio::test]
async fn the_environment_alone_configures_and_callsync_config_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("env.db");
    let run = |vars: Vec<(&'static str, String)>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"));
        command
            .arg("migrate")
            // No ./config/callsync.toml there.
            .current_dir(dir.path())
            .env_remove("RUST_LOG");
        for (key, value) in vars {
            command.env(key, value);
        }
        command.output()
    };
    let out = run(vec![
        ("CALLSYNC_API__BASE_URL", "http://127.0.0.1:9".into()),
        (
            "CALLSYNC_SYNC__SCHEDULES",
            uuid::Uuid::from_u128(7).to_string(),
        ),
        ("CALLSYNC_WAREHOUSE__PATH", warehouse.display().to_string()),
    ])
    .await
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "warehouse {}: schema version 0 -> {}\n",
            warehouse.display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );

    let other = dir.path().join("other.db");
    let file = dir.path().join("named.toml");
    std::fs::write(
        &file,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:9\"\n[sync]\nschedules = [\"{}\"]\n[warehouse]\npath = \"{}\"\n",
            uuid::Uuid::from_u128(7),
            other.display()
        ),
    )
    .unwrap();
    let out = run(vec![("CALLSYNC_CONFIG", file.display().to_string())])
        .await
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "warehouse {}: schema version 0 -> {}\n",
            other.display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );
}

/// A misspelt log target would silence every line, the failing pass's ERROR included: it is
/// a configuration error (exit 2) naming it, from `log.level` or `RUST_LOG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_log_target_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("callsync.toml");
    let db = dir.path().join("callsync.db");
    let text = |level: &str| {
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:1\"\n\n[warehouse]\npath = \"{}\"\n\n\
             [sync]\nschedules = [\"0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11\"]\n\n[log]\nlevel = \"{level}\"\n",
            db.display()
        )
    };
    let c = config.to_str().unwrap();
    std::fs::write(&config, text("calsync=info")).unwrap();
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "error: config: log.level: \"calsync=info\" names the log target \"calsync\", which nothing logs under: a target is callsync, callsync::MODULE"
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    std::fs::write(&config, text("callsync=info")).unwrap();
    let out = callsync_with_env(
        &["--config", c, "status"],
        &[("RUST_LOG", "info,callsync::snyc=debug")],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "error: cannot set up logging: RUST_LOG=\"info,callsync::snyc=debug\" names the log target \"callsync::snyc\""
        ),
        "{err}"
    );
    assert!(err.ends_with("; fix or unset RUST_LOG\n"), "{err}");
    assert!(!db.exists(), "nothing is created");
}

/// `status` lists every configured schedule, one that never recorded a pass too: "never
/// synced", exit 0 while the configuration is younger than 3 ticks of `sync.cron` (the daemon
/// may not have reached it yet), exit 3 once it is older.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_a_configured_schedule_never_synced_and_exits_3_once_it_is_due() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 10,
        ..SimulatorOptions::default()
    })
    .await;
    let synced = env.schedules()[0];
    let never = uuid::Uuid::from_u128(0x0b2e_7a55_9999_4c0b_9f39_0d3c_5a3f_2b11);
    let config = env.dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n\n[warehouse]\npath = \"{}\"\n\n\
             [sync]\nschedules = [\"{synced}\", \"{never}\"]\ncron = \"0 0 * * * *\"\n",
            env.sim.base_url(),
            env.sim.access_token(),
            env.warehouse_path().display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let out = callsync(&["--config", c, "sync", "--schedule", &synced.to_string()]).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // Configured just now: listed, not yet due.
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "schedule {never}\n  cursor       none  (lag -)\n  last pass    never synced (in sync.schedules; the warehouse holds no pass of it)\n  last success never\n  rows         0 calls"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("schedule {synced}\n")), "{text}");
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |uid: uuid::Uuid| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["schedule_uid"] == uid.to_string())
            .cloned()
            .unwrap_or_else(|| panic!("{uid} listed: {rows}"))
    };
    assert_eq!(row(never)["never_synced"], true);
    assert_eq!(row(never)["last_run"], serde_json::Value::Null);
    assert_eq!(row(never)["no_recent_pass"], false);
    assert_eq!(row(synced)["never_synced"], false);

    // Configured four hours ago (four ticks of an hourly cron, or three when now falls on
    // the hour): due, exit 3 naming it.
    let four_hours_ago =
        std::time::SystemTime::now() - std::time::Duration::from_secs(4 * 3600 - 60);
    std::fs::File::options()
        .write(true)
        .open(&config)
        .unwrap()
        .set_modified(four_hours_ago)
        .unwrap();
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let ticks = if text.contains("NEVER SYNCED though configured 4 ticks") {
        4
    } else {
        3
    };
    assert!(
        text.contains(&format!("  NEVER SYNCED though configured {ticks} ticks of sync.cron ago: the daemon is not running, was not restarted since the schedule was added, or cannot record its passes; see its log (journalctl -u callsync)\n")),
        "{text}"
    );
    assert_eq!(
        stderr(&out),
        format!(
            "attention: schedule {never}: never synced, though configured {ticks} ticks of sync.cron ago (exit code 3)\n"
        )
    );
    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let never_row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["schedule_uid"] == never.to_string())
        .unwrap();
    assert_eq!(never_row["no_recent_pass"], true);
    assert_eq!(never_row["ticks_since_last_pass"], ticks);
}

/// Every error is one line without a character a terminal acts on, whatever it quotes: a
/// path with a line break and an escape sequence, a CSV header with both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_quoting_line_breaks_or_escapes_is_one_safe_line() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("x\ny\u{1b}[31m.toml");
    let out = callsync(&["--config", odd.to_str().unwrap(), "status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: config: cannot read {} y\\u{{1b}}[31m.toml: no such file\n",
            dir.path().join("x").display()
        )
    );

    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:1\"\naccess_token = \"tok\"\n\n[warehouse]\npath = \"{}\"\n",
            dir.path().join("callsync.db").display()
        ),
    )
    .unwrap();
    let csv = dir.path().join("list.csv");
    std::fs::write(
        &csv,
        "\"phone\r\nnum\u{1b}]0;owned\u{7}\",external_id\n+15550001,a\n",
    )
    .unwrap();
    let out = callsync(&[
        "--config",
        config.to_str().unwrap(),
        "upload",
        "--schedule",
        "0b2e7a55-9999-4c0b-9f39-0d3c5a3f2b11",
        csv.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}: no phone_number column (columns: phone num\\u{{1b}}]0;owned\\u{{7}}, external_id); name one phone_number or use --map COLUMN=phone_number\n",
            csv.display()
        )
    );
}
