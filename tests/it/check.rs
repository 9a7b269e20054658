//! `callsync check` on the binary: a line per check, every check run even after a failure,
//! exit 0 when all pass and 1 when any fails; nothing created.

use std::path::Path;

use callsync::simulator::SimulatorOptions;
use uuid::Uuid;

use crate::cli::{callsync, stderr};
use crate::harness::TestEnv;
use crate::writable::{callsync_as_nobody_if_root, chmod, not_writable, running_as_root};

async fn two_schedules() -> TestEnv {
    TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 5,
        ..SimulatorOptions::default()
    })
    .await
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The configuration `write_config` writes, with `from` replaced by `to`, as `name`.
fn edited_config(env: &TestEnv, name: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(env.write_config("")).unwrap();
    assert!(text.contains(from), "{from:?} not in {text}");
    let path = env.dir.path().join(name);
    std::fs::write(&path, text.replace(from, to)).unwrap();
    path.to_str().unwrap().to_owned()
}

fn to_be_created(db: &Path) -> String {
    format!(
        "ok   warehouse: {} does not exist yet; its directory is writable, and callsync will create it\n",
        db.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_checks_pass_with_exit_0_and_nothing_is_created() {
    let env = two_schedules().await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let [s1, s2] = env.schedules()[..] else {
        panic!("two schedules")
    };
    let db = env.warehouse_path();

    let out = callsync(&["--config", c, "check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "ok   config: {c}\n\
             ok   credentials: the service accepted the access token\n\
             ok   schedule {s1}: exists on the service\n\
             ok   schedule {s2}: exists on the service\n{}",
            to_be_created(&db)
        )
    );
    assert_eq!(stderr(&out), "");
    assert!(!db.exists(), "check creates no warehouse");
    // One list request of one call per schedule, the first doubling as the credentials'.
    let lists: Vec<String> = env
        .sim
        .requests()
        .iter()
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert_eq!(
        lists,
        [s1, s2].map(|s| format!("GET /api/v1/schedules/{s}/outbound_calls?page=1&page_size=1"))
    );

    env.pass_ok(&env.schedules()).await;
    let out = callsync(&["check", "--config", c]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(&format!(
            "ok   warehouse: {} is writable, a callsync warehouse of schema version {}\n",
            db.display(),
            callsync::warehouse::sqlite::latest_version()
        )),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_fails_the_credentials_and_still_reports_the_rest() {
    let env = two_schedules().await;
    let token = env.sim.access_token();
    let c = edited_config(&env, "bad-token.toml", &token, "not-the-token");
    let [s1, s2] = env.schedules()[..] else {
        panic!("two schedules")
    };

    let out = callsync(&["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let printed = stdout(&out);
    // What passed on stdout, what failed on stderr.
    assert_eq!(
        printed,
        format!("ok   config: {c}\n{}", to_be_created(&env.warehouse_path()))
    );
    let failed = stderr(&out);
    assert!(
        failed.contains(&format!(
            "FAILED credentials: the service refused the token (HTTP 401); check api.access_token (or its file or systemd credential): is it expired or revoked?\n\
             FAILED schedule {s1}: not checked: the credentials check failed\n\
             FAILED schedule {s2}: not checked: the credentials check failed\n"
        )),
        "{failed}"
    );
    assert!(!printed.contains(&token) && !failed.contains("not-the-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_schedule_fails_naming_it_and_the_others_are_checked() {
    let env = two_schedules().await;
    let [s1, s2] = env.schedules()[..] else {
        panic!("two schedules")
    };
    // First in the list: its 404 still proves that the token was accepted.
    let unknown = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let c = edited_config(
        &env,
        "unknown.toml",
        "schedules = [",
        &format!("schedules = [\"{unknown}\", "),
    );

    let out = callsync(&["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "ok   config: {c}\n\
             ok   credentials: the service accepted the access token\n\
             ok   schedule {s1}: exists on the service\n\
             ok   schedule {s2}: exists on the service\n{}",
            to_be_created(&env.warehouse_path())
        )
    );
    assert!(
        stderr(&out).contains(&format!(
            "FAILED schedule {unknown}: the service has no schedule {unknown} (HTTP 404); remove it from sync.schedules or correct it, and check api.base_url (it must not include /api/v1)\n"
        )),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_directory_this_user_cannot_write_fails_naming_it() {
    let env = two_schedules().await;
    let config = env.write_config("");
    // Root may write anything: the check then runs as `nobody` on root's directory.
    chmod(
        env.dir.path(),
        if running_as_root() { 0o755 } else { 0o555 },
    );
    chmod(&config, 0o644);
    let out = callsync_as_nobody_if_root(&["--config", config.to_str().unwrap(), "check"]).await;
    chmod(env.dir.path(), 0o755);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let printed = stdout(&out);
    let db = env.warehouse_path();
    assert!(
        stderr(&out).ends_with(&format!(
            "FAILED warehouse: {}\n",
            not_writable(&db, "the directory", env.dir.path())
        )),
        "{}",
        stderr(&out)
    );
    // The service's checks passed, and were still reported.
    assert_eq!(printed.matches("\nok   schedule ").count(), 2, "{printed}");
    assert!(!db.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_prints_one_object_per_check() {
    let env = two_schedules().await;
    let token = env.sim.access_token();
    let c = edited_config(&env, "bad-token.toml", &token, "not-the-token");
    let out = callsync(&["--config", &c, "check", "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let checks: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let [s1, s2] = env.schedules()[..] else {
        panic!("two schedules")
    };
    let summary: Vec<(String, bool)> = checks
        .iter()
        .map(|c| {
            assert_eq!(c.as_object().unwrap().len(), 3, "{c}");
            (
                c["check"].as_str().unwrap().to_owned(),
                c["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("config".to_owned(), true),
            ("credentials".to_owned(), false),
            (format!("schedule {s1}"), false),
            (format!("schedule {s2}"), false),
            ("warehouse".to_owned(), true),
        ]
    );
    assert_eq!(checks[0]["detail"], c.as_str());
    assert!(
        checks[1]["detail"]
            .as_str()
            .unwrap()
            .starts_with("the service refused the token (HTTP 401)"),
        "{}",
        checks[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_fetches_a_token_and_a_refused_client_secret_says_so() {
    let env = two_schedules().await;
    let oauth = |secret: &str| {
        format!(
            "[api.oauth]\ntoken_url = \"{}\"\nclient_id = \"{}\"\nclient_secret = \"{secret}\"\n\n[api.retry]",
            env.sim.token_url(),
            env.sim.client_id()
        )
    };
    let token_line = format!("access_token = \"{}\"\n", env.sim.access_token());
    let config = |name: &str, secret: &str| {
        let c = edited_config(&env, name, &token_line, "");
        let text = std::fs::read_to_string(&c)
            .unwrap()
            .replace("[api.retry]", &oauth(secret));
        std::fs::write(&c, text).unwrap();
        c
    };

    let c = config("oauth.toml", env.sim.client_secret());
    let out = callsync(&["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "\nok   credentials: a token was issued by api.oauth.token_url and accepted by the service\n"
        ),
        "{}",
        stdout(&out)
    );

    let c = config("bad-secret.toml", "not-the-secret");
    let out = callsync(&["--config", &c, "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(
        stderr(&out).contains(
            "FAILED credentials: the token endpoint (api.oauth.token_url) refused the client credentials (HTTP 401); check api.oauth.client_id and the client secret\n"
        ),
        "{}",
        stderr(&out)
    );
    assert!(!printed.contains("not-the-secret") && !stderr(&out).contains("not-the-secret"));
    assert!(printed.contains("\nok   warehouse: "), "{printed}");
}

/// What `run` refuses, `check` fails with `run`'s own message (systemd would otherwise restart
/// `run` forever after a green check): another program's database, bytes that are no database,
/// a newer callsync's warehouse. The file is left as it was, with nothing created beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_the_warehouses_run_refuses_with_runs_message() {
    let env = two_schedules().await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let db = env.warehouse_path();
    let foreign = |db: &Path| {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1);")
            .unwrap();
    };
    let random = |db: &Path| {
        let bytes: Vec<u8> = (0..8192u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(db, bytes).unwrap();
    };
    let newer = |db: &Path| {
        drop(
            callsync::warehouse::sqlite::Warehouse::open(db, std::time::Duration::from_secs(5))
                .unwrap(),
        );
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    };
    type Make<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Make); 3] = [
        ("another program's", &foreign),
        ("random bytes", &random),
        ("newer", &newer),
    ];
    for (case, make) in cases {
        for file in files_beside(&db) {
            std::fs::remove_file(db.with_file_name(file)).unwrap();
        }
        make(&db);
        let files_before = files_beside(&db);
        let bytes_before = std::fs::read(&db).unwrap();

        let run = callsync(&["--config", c, "sync"]).await;
        // Another program's file is the configuration's mistake (warehouse.path): exit 2.
        let code = if case == "another program's" { 2 } else { 1 };
        assert_eq!(run.status.code(), Some(code), "{case}: {}", stderr(&run));
        let refusal = stderr(&run);
        let refusal = refusal
            .strip_prefix("error: ")
            .and_then(|e| e.strip_suffix('\n'))
            .unwrap_or_else(|| panic!("{case}: one error line: {refusal}"));
        let out = callsync(&["--config", c, "check"]).await;
        assert_eq!(out.status.code(), Some(1), "{case}: {}", stderr(&out));
        assert!(
            stderr(&out).ends_with(&format!("FAILED warehouse: {refusal}\n")),
            "{case}: {}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(&db).unwrap(), bytes_before, "{case}");
        assert_eq!(files_beside(&db), files_before, "{case}");
    }
}

/// The names in the warehouse's directory that start with its file name.
fn files_beside(db: &Path) -> Vec<String> {
    let name = db.file_name().unwrap().to_string_lossy().into_owned();
    let mut names: Vec<String> = std::fs::read_dir(db.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&name))
        .collect();
    names.sort();
    names
}

/// `metrics.listen` is bound and let go: a port another process holds fails the check, on
/// stderr; under the journal with the error priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_binds_the_metrics_address_and_failed_lines_carry_a_priority_under_the_journal() {
    use std::os::unix::fs::MetadataExt as _;
    let env = two_schedules().await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let free_addr = free.local_addr().unwrap();
    drop(free);
    let config = env.write_config(&format!("\n[metrics]\nlisten = \"{free_addr}\"\n"));
    let out = callsync(&["--config", config.to_str().unwrap(), "check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(&format!("ok   metrics: {free_addr} can be listened on\n")),
        "{}",
        stdout(&out)
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let config = env.write_config(&format!("\n[metrics]\nlisten = \"{taken_addr}\"\n"));
    // stderr into a file that JOURNAL_STREAM names, as systemd sets it.
    let log_path = env.dir.path().join("check.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let meta = log.metadata().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", config.to_str().unwrap(), "check"])
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .env_remove("RUST_LOG")
        .stderr(log)
        .output()
        .expect("callsync runs");
    drop(taken);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stdout(&out).contains("FAILED"), "{}", stdout(&out));
    let journal = std::fs::read_to_string(&log_path).unwrap();
    let line = journal
        .lines()
        .find(|l| l.contains("FAILED metrics"))
        .unwrap_or_else(|| panic!("{journal}"));
    assert!(
        line.starts_with(&format!(
            "<3>FAILED metrics: cannot listen on {taken_addr} (metrics.listen): "
        )),
        "{line}"
    );
}

/// `backup.dir` is tried as the daemon would use it: a directory that can be created passes
/// (and is not left behind), one that cannot — under /proc, even for root — fails, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tries_the_backup_dir_as_the_daemon_would() {
    let env = two_schedules().await;
    let creatable = env.dir.path().join("backups/daily");
    let config = env.write_config(&format!(
        "\n[backup]\ncron = \"0 15 2 * * *\"\ndir = \"{}\"\n",
        creatable.display()
    ));
    let out = callsync(&["--config", config.to_str().unwrap(), "check"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with(&format!(
            "ok   backup.dir: {} is writable (or creatable): scheduled backups can be made there\n",
            creatable.display()
        )),
        "{}",
        stdout(&out)
    );
    assert!(
        !env.dir.path().join("backups").exists(),
        "check leaves no directory"
    );

    let config = env
        .write_config("\n[backup]\ncron = \"0 15 2 * * *\"\ndir = \"/proc/nonexistent/backups\"\n");
    let out = callsync(&["--config", config.to_str().unwrap(), "check"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let failed = stderr(&out);
    assert!(
        failed.starts_with(
            "FAILED backup.dir: scheduled backups in /proc/nonexistent/backups: cannot create the directory: "
        ) && failed.ends_with("; check [backup] dir\n"),
        "{failed}"
    );
}
