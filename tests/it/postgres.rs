//! The PostgreSQL warehouse itself: TLS with libpq's sslmodes (a CA the test makes with
//! `openssl`), migrations serialized between processes, claims, the BI role.

use std::path::Path;
use std::process::Command;

use callsync::warehouse::postgres::{PgTarget, PgWarehouse};
use callsync::warehouse::{Destination, PageBatch};
use uuid::Uuid;

use crate::pg;

/// A CA, and a server certificate it signed for `localhost` only, in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let key = format!("{ca}.key");
        let crt = format!("{ca}.crt");
        let subject = format!("/CN=callsync test {ca}");
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&args);
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&args);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

#[test]
fn tls_verify_full_connects_with_its_ca_and_refuses_a_wrong_ca_or_host_name() {
    if !pg::available("postgres::tls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certificates(dir.path());
    let server = pg::Server::start(Some((
        &dir.path().join("server.crt"),
        &dir.path().join("server.key"),
    )));
    let port = server.port.expect("a TLS server listens on TCP");
    let ca = dir.path().join("ca.crt");
    let other_ca = dir.path().join("other-ca.crt");
    let url = |host: &str, mode: &str, ca: &Path| {
        format!(
            "postgresql://{}@{host}:{port}/postgres?sslmode={mode}&sslrootcert={}",
            server.superuser,
            ca.display()
        )
    };
    let open = |url: &str| PgWarehouse::open(&PgTarget::parse(url, None).expect("parses"));

    let verified =
        open(&url("localhost", "verify-full", &ca)).expect("verify-full with the server's CA");
    // The server really spoke TLS to us.
    let ssl = pg::admin(
        &server,
        "postgres",
        "SELECT count(*) FROM pg_stat_ssl WHERE ssl",
    )
    .unwrap();
    assert_ne!(ssl[0][0].as_deref(), Some("0"), "no TLS connection seen");
    drop(verified);

    let wrong_ca = open(&url("localhost", "verify-full", &other_ca))
        .err()
        .expect("a certificate from another CA is refused")
        .to_string();
    assert!(
        wrong_ca.contains("cannot connect to the warehouse postgresql://")
            && wrong_ca.contains("certificate"),
        "{wrong_ca}"
    );
    let wrong_name = open(&url("127.0.0.1", "verify-full", &ca))
        .err()
        .expect("a certificate for another name is refused")
        .to_string();
    assert!(
        wrong_name.contains("certificate") && wrong_name.contains("127.0.0.1"),
        "{wrong_name}"
    );
    // verify-ca checks the chain only; require encrypts without verifying (libpq's rules).
    open(&url("127.0.0.1", "verify-ca", &ca)).expect("verify-ca ignores the name");
    open(&format!(
        "postgresql://{}@127.0.0.1:{port}/postgres?sslmode=require",
        server.superuser
    ))
    .expect("require without a root certificate does not verify");
    assert!(open(&url("127.0.0.1", "verify-ca", &other_ca)).is_err());
}

#[test]
fn two_processes_migrating_at_once_migrate_once() {
    if !pg::available("postgres::migrations") {
        return;
    }
    let db = pg::database();
    let target = db.target();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let target = target.clone();
            std::thread::spawn(move || PgWarehouse::migrate(&target).map(|r| (r.from, r.to)))
        })
        .collect();
    let mut reports: Vec<(usize, usize)> = threads
        .into_iter()
        .map(|t| t.join().unwrap().expect("every migration succeeds"))
        .collect();
    reports.sort();
    let latest = reports[0].1;
    assert_eq!(reports[0], (0, latest), "one migrated");
    assert_eq!(
        reports[1..],
        [(latest, latest); 3],
        "the others waited for it"
    );
    let version = pg::query(&db, "SELECT version FROM callsync_schema");
    assert_eq!(version, [[Some(latest.to_string())]]);
}

#[test]
fn another_programs_database_is_refused() {
    if !pg::available("postgres::foreign") {
        return;
    }
    let db = pg::database();
    pg::query(&db, "CREATE TABLE calls (id int)");
    let err = PgWarehouse::open(&db.target()).err().unwrap().to_string();
    assert!(err.contains("another program"), "{err}");
}

/// The server is outside callsync: a column someone altered to another type is an error that
/// names the column and the query, never a panic (the reads use `try_get`, not `Row::get`).
#[test]
fn a_column_of_another_type_is_an_error_naming_it_not_a_panic() {
    if !pg::available("postgres::column_types") {
        return;
    }
    let db = pg::database();
    let target = db.target();
    drop(PgWarehouse::open(&target).unwrap());
    let schedule = Uuid::from_u128(9);
    pg::query(
        &db,
        &format!(
            "INSERT INTO sync_checkpoints VALUES ('{schedule}', now(), now());
             INSERT INTO sync_runs (schedule_uid, kind, started_at) VALUES ('{schedule}', 'incremental', now());
             ALTER TABLE sync_runs ALTER COLUMN pages TYPE text;
             ALTER TABLE sync_checkpoints ALTER COLUMN cursor TYPE text"
        ),
    );
    let mut warehouse = PgWarehouse::open_existing(&target).unwrap();
    let now = callsync::service::Timestamp::now();
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        warehouse.status_at(now).map(|_| ())
    }))
    .expect("status does not panic")
    .unwrap_err()
    .to_string();
    assert!(
        status.contains("column `cursor`") && status.contains("reading a checkpoint"),
        "{status}"
    );
    let checkpoint = warehouse.checkpoint(schedule).unwrap_err().to_string();
    assert!(checkpoint.contains("column `cursor`"), "{checkpoint}");
    // A pass's opening records its row all the same: the checkpoint it cannot read is the
    // pass's failure, which the pass keeps in that row.
    let walker = callsync::warehouse::ProcessIdentity {
        host: "a-host".into(),
        instance: "a-host".into(),
        pid: 1,
    };
    let start = callsync::warehouse::PassStart {
        schedule,
        kind: callsync::warehouse::RunKind::Incremental,
        started_at: now,
        walker: &walker,
        unless_walked_since: None,
    };
    match warehouse.open_pass(&start).unwrap() {
        callsync::warehouse::PassOpened::Started {
            run: Some(_),
            checkpoint: Err(err),
        } => assert!(err.to_string().contains("column `cursor`"), "{err}"),
        other => panic!("the row recorded, the checkpoint failed: {other:?}"),
    }
    pg::query(
        &db,
        "ALTER TABLE sync_checkpoints ALTER COLUMN cursor TYPE timestamptz USING cursor::timestamptz",
    );
    let status = warehouse.status_at(now).unwrap_err().to_string();
    assert!(
        status.contains("column `pages`") && status.contains("reading the last passes"),
        "{status}"
    );
    // Prepared while the column was text, the checkpoint's statement is prepared again.
    let checkpoint = warehouse
        .checkpoint(schedule)
        .unwrap()
        .expect("the checkpoint");
    assert_eq!(checkpoint.schedule_uid, schedule);
}

/// A group of passes' ends that the server refuses whole (one pass's error text holds a NUL
/// byte, which PostgreSQL's text cannot) is recorded pass by pass: that pass's end fails,
/// the others' are recorded, with their own figures.
#[test]
fn a_group_of_ends_refused_whole_is_recorded_pass_by_pass() {
    if !pg::available("postgres::group_ends") {
        return;
    }
    use callsync::service::Timestamp;
    use callsync::warehouse::{ProcessIdentity, RunKind, RunOutcome, RunRecord, RunStats};
    let db = pg::database();
    let mut w = PgWarehouse::open(&db.target()).unwrap();
    let walker = ProcessIdentity {
        host: "a-host".into(),
        instance: "an-instance".into(),
        pid: 7,
    };
    let started = Timestamp::parse("2026-01-02T03:04:05Z").unwrap();
    let runs: Vec<_> = (1..=3u128)
        .map(|n| {
            let schedule = Uuid::from_u128(0x70 + n);
            let run =
                crate::harness::start_run(&mut w, schedule, RunKind::Incremental, started, &walker);
            (schedule, run)
        })
        .collect();
    let record = |pages, error: Option<&str>| RunRecord {
        outcome: RunOutcome::Failed,
        stats: RunStats {
            pages,
            ..RunStats::default()
        },
        finished_at: started,
        horizon: None,
        lag_secs: None,
        error: error.map(str::to_owned),
        error_kind: None,
    };
    let records = [
        record(1, Some("HTTP 503")),
        record(2, Some("a NUL \0 here")),
        record(3, None),
    ];
    let ended: Vec<(_, &RunRecord)> = runs.iter().map(|(_, run)| *run).zip(&records).collect();
    let results = w.finish_runs(&ended);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let refused = results[1]
        .as_ref()
        .expect_err("the NUL refused")
        .to_string();
    assert!(refused.contains("recording the end of a pass"), "{refused}");
    let stored = pg::query(
        &db,
        "SELECT pages::text, finished_at IS NOT NULL, error FROM sync_runs ORDER BY id",
    );
    let row = |pages: &str, finished: &str, error: Option<&str>| {
        vec![
            Some(pages.to_owned()),
            Some(finished.to_owned()),
            error.map(str::to_owned),
        ]
    };
    assert_eq!(
        stored,
        vec![
            row("1", "t", Some("HTTP 503")),
            row("0", "f", None),
            row("3", "t", None),
        ]
    );
}

/// Statements are prepared once per connection; a column whose type changes under a running
/// callsync makes the server refuse them ("cached plan must not change result type"), and
/// the warehouse prepares them again and asks once more, on a single statement as in a
/// page's transaction (rolled back first), rather than failing every pass until a restart.
#[test]
fn statements_prepared_before_a_column_changed_type_are_prepared_again() {
    if !pg::available("postgres::replanned") {
        return;
    }
    use callsync::service::Timestamp;
    use callsync::warehouse::{
        PassOpened, PassStart, ProcessIdentity, RunKind, RunOutcome, RunRecord, RunStats,
    };
    let db = pg::database();
    let mut w = PgWarehouse::open(&db.target()).unwrap();
    let schedule = Uuid::from_u128(0x61);
    let walker = ProcessIdentity {
        host: "a-host".into(),
        instance: "an-instance".into(),
        pid: 7,
    };
    let started = Timestamp::parse("2026-01-02T03:04:05Z").unwrap();
    let run = crate::harness::start_run(&mut w, schedule, RunKind::Incremental, started, &walker);
    let record = RunRecord {
        outcome: RunOutcome::Completed,
        stats: RunStats::default(),
        finished_at: started,
        horizon: None,
        lag_secs: None,
        error: None,
        error_kind: None,
    };
    w.finish_run(run, &record).unwrap();
    // The opening of the next pass, on a tick before the last began: that one walked it.
    let tick = PassStart {
        schedule,
        kind: RunKind::Incremental,
        started_at: Timestamp::now(),
        walker: &walker,
        unless_walked_since: Some(started),
    };
    let mut walked = || match w.open_pass(&tick).unwrap() {
        PassOpened::WalkedBy(by) => Some(by),
        PassOpened::Started { .. } => None,
    };
    assert_eq!(walked().as_ref(), Some(&walker));
    pg::query(
        &db,
        "ALTER TABLE sync_runs ALTER COLUMN host TYPE varchar(300)",
    );
    assert_eq!(walked().as_ref(), Some(&walker), "prepared again");
    pg::query(
        &db,
        "ALTER TABLE sync_runs ALTER COLUMN instance TYPE varchar(300)",
    );
    assert_eq!(walked().as_ref(), Some(&walker), "and again");
}

/// A fresh database and two warehouses on it, as two processes would open them (each its
/// own lock session); `None` where PostgreSQL is not available (`test`, the test's name).
fn two_processes(test: &str) -> Option<(pg::Database, PgWarehouse, PgWarehouse)> {
    if !pg::available(test) {
        return None;
    }
    let db = pg::database();
    let target = db.target();
    let (first, second) = (
        PgWarehouse::open(&target).unwrap(),
        PgWarehouse::open(&target).unwrap(),
    );
    Some((db, first, second))
}

#[test]
fn a_claim_excludes_other_sessions_until_dropped_or_its_connection_dies() {
    let Some((db, first, second)) = two_processes("postgres::claims") else {
        return;
    };
    let schedule = Uuid::from_u128(7);
    let held = first.claim(schedule).unwrap().expect("free");
    assert!(second.claim(schedule).unwrap().is_none(), "another process");
    assert!(
        first.claim(schedule).unwrap().is_none(),
        "this process again"
    );
    let other = second
        .claim(Uuid::from_u128(8))
        .unwrap()
        .expect("another schedule is free");
    drop(held);
    let again = second.claim(schedule).unwrap().expect("free once dropped");
    // The server ends the lock session (as when a daemon dies): the lock goes with it. The
    // call waits for the session to be gone (its second argument, a patience only a hang
    // reaches): without it the claim below could run before the server had let the lock go.
    pg::query(
        &db,
        "SELECT pg_terminate_backend(pid, 60000) FROM pg_locks WHERE locktype = 'advisory'
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    drop((again, other));
    first
        .claim(schedule)
        .unwrap()
        .expect("free once its session died");
}

/// The passes of a tick claim their schedules in one statement, and end releasing them in
/// one: a group's claim takes the free schedules (bumping each one's fence), refuses one
/// another process holds and one this process holds, and its release frees them for another
/// process, whose own group claim then bumps their fences again.
#[test]
fn a_group_claim_takes_the_free_schedules_and_its_release_frees_them() {
    use callsync::warehouse::{Claim, Destination};
    let Some((db, first, second)) = two_processes("postgres::group_claims") else {
        return;
    };
    let s = |n: u128| Uuid::from_u128(n);
    let _theirs = second.claim(s(2)).unwrap().expect("free");
    let _ours = first.claim(s(4)).unwrap().expect("free");
    let taken: Vec<Option<_>> = first
        .claim_all(&[s(1), s(2), s(3), s(4), s(5)])
        .into_iter()
        .map(|claim| claim.expect("the group claims"))
        .collect();
    let granted: Vec<bool> = taken.iter().map(Option::is_some).collect();
    assert_eq!(granted, [true, false, true, false, true]);
    assert!(first.claim(s(1)).unwrap().is_none(), "held in this process");
    let generations = |db: &pg::Database| -> Vec<(String, String)> {
        pg::query(
            db,
            "SELECT schedule_uid::text, generation::text FROM schedule_claims ORDER BY 1",
        )
        .into_iter()
        .map(|row| (row[0].clone().unwrap(), row[1].clone().unwrap()))
        .collect()
    };
    let expect = |pairs: &[(u128, u32)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, g)| (s(*n).to_string(), g.to_string()))
            .collect()
    };
    assert_eq!(
        generations(&db),
        expect(&[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)])
    );
    let refused: Vec<bool> = second
        .claim_all(&[s(1), s(3)])
        .into_iter()
        .map(|claim| claim.expect("the group claims").is_some())
        .collect();
    assert_eq!(refused, [false, false], "held by the other process");

    let claims: Vec<Claim> = taken.into_iter().flatten().map(Claim::new).collect();
    Destination::release(&first, claims);
    let advisory = || {
        pg::query(
            &db,
            "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )[0][0]
            .clone()
    };
    assert_eq!(advisory().as_deref(), Some("2"), "only 2 and 4 still held");
    let regained: Vec<bool> = second
        .claim_all(&[s(1), s(3), s(5)])
        .into_iter()
        .map(|claim| claim.expect("the group claims").is_some())
        .collect();
    assert_eq!(regained, [true, true, true], "free once released");
    assert_eq!(
        generations(&db),
        expect(&[(1, 2), (2, 1), (3, 2), (4, 1), (5, 2)])
    );
}

/// The writer's threads claim together (each on its own handle, one lock session between
/// them): of claims of one schedule at once, one is granted, though the server would grant
/// each of them (a session's lock is re-entrant); the others see it held.
#[test]
fn of_claims_of_one_schedule_at_once_in_one_process_one_is_granted() {
    if !pg::available("postgres::concurrent_claims") {
        return;
    }
    let db = pg::database();
    let first = PgWarehouse::open(&db.target()).unwrap();
    let handles: Vec<PgWarehouse> = (0..6).map(|_| first.fork()).collect();
    let schedule = Uuid::from_u128(11);
    for round in 0..20 {
        let start = std::sync::Barrier::new(handles.len());
        let claims: Vec<_> = std::thread::scope(|scope| {
            let claiming: Vec<_> = handles
                .iter()
                .map(|w| {
                    let start = &start;
                    scope.spawn(move || {
                        start.wait();
                        w.claim(schedule).unwrap()
                    })
                })
                .collect();
            claiming.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let granted: Vec<_> = claims.into_iter().flatten().collect();
        assert_eq!(granted.len(), 1, "round {round}: one claim granted");
        drop(granted);
        let again = first.claim(schedule).unwrap();
        assert!(
            again.is_some(),
            "round {round}: free once the one granted is dropped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bi_role_reads_the_views_and_writes_nothing() {
    if !pg::available("postgres::bi_role") {
        return;
    }
    let env = crate::harness::TestEnv::start_on(
        callsync::simulator::SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 30,
            seed: 3,
            ..Default::default()
        },
        crate::harness::Dest::Postgres,
    )
    .await;
    let s = env.schedules();
    env.pass_ok(&s).await;
    let db = env.pg.clone().unwrap();
    let role = format!("bi_{}", db.name);
    pg::query(
        &db,
        &format!("CREATE ROLE {role} LOGIN IN ROLE callsync_reader"),
    );
    let as_bi = |sql: &str| {
        let url = pg::server().url(&db.name).replacen(
            &format!("{}@", pg::server().superuser),
            &format!("{role}@"),
            1,
        );
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client
                    .simple_query(&sql)
                    .await
                    .map(|m| m.len())
                    .map_err(|e| {
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().to_owned())
                    })
            })
        })
        .join()
        .unwrap()
    };
    for view in ["call_results", "attempt_results", "outcome_results"] {
        as_bi(&format!("SELECT * FROM {view}")).unwrap_or_else(|e| panic!("{view}: {e}"));
    }
    let refused = as_bi("DELETE FROM calls").unwrap_err();
    assert!(refused.contains("permission denied"), "{refused}");
    let count = pg::query(&db, "SELECT count(*) FROM call_results");
    assert_eq!(count, [[Some("30".to_owned())]]);
}

/// `callsync` with `args`, in the directory `cwd`: (exit code, stdout, stderr).
async fn callsync(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .expect("callsync runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_postgres_and_no_output_shows_the_password() {
    if !pg::available("postgres::commands") {
        return;
    }
    const PASSWORD: &str = "pg-s3cret-never-shown";
    let env = crate::harness::TestEnv::start_on(
        callsync::simulator::SimulatorOptions {
            schedules: 2,
            calls_per_schedule: 40,
            seed: 5,
            ..Default::default()
        },
        crate::harness::Dest::Postgres,
    )
    .await;
    let password_file = env.dir.path().join("pg-password");
    std::fs::write(&password_file, PASSWORD).unwrap();
    let config = env.write_config("");
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "[warehouse]\n",
        &format!(
            "[warehouse]\npassword_file = \"{}\"\n",
            password_file.display()
        ),
        1,
    );
    std::fs::write(&config, text).unwrap();
    let config = config.display().to_string();
    let s = env.schedules();
    let db = env.pg.clone().unwrap();
    let mut outputs: Vec<String> = Vec::new();
    let run = async |args: &[&str], want: i32| -> (String, String) {
        let mut all = vec!["--config", config.as_str(), "-v"];
        all.extend(args);
        let (code, out, err) = callsync(env.dir.path(), &all).await;
        assert_eq!(code, want, "callsync {args:?}: {out}{err}");
        (out.clone(), format!("{out}{err}"))
    };
    macro_rules! run {
        ($args:expr, $want:expr) => {{
            let (out, all) = run($args, $want).await;
            outputs.push(all);
            out
        }};
    }
    let out = run!(&["migrate"], 0);
    assert!(
        out.contains(&format!(
            "warehouse postgresql://{}@",
            pg::server().superuser
        )),
        "{out}"
    );
    let latest = callsync::warehouse::postgres::latest_version();
    assert!(
        out.contains(&format!("schema version 0 -> {latest}")),
        "{out}"
    );
    let out = run!(&["check"], 0);
    assert!(
        out.contains("ok   warehouse: postgresql://")
            && out.contains(&format!("schema version {latest}")),
        "{out}"
    );
    run!(&["sync"], 0);
    env.assert_matches_truth(&s);
    let out = run!(&["status", "--json"], 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{out}");
    assert_eq!(rows[0]["calls"], 40, "{out}");
    assert_eq!(rows[0]["last_result"], "completed", "{out}");
    let schedule = s[0].to_string();
    let out = run!(
        &[
            "checkpoint",
            "set",
            "--schedule",
            &schedule,
            "--cursor",
            "2020-01-01T00:00:00Z",
        ],
        0
    );
    assert!(out.contains("now 2020-01-01T00:00:00Z"), "{out}");
    let out = run!(&["checkpoint", "show", "--schedule", &schedule], 0);
    assert!(out.contains("cursor 2020-01-01T00:00:00Z"), "{out}");
    // A daemon holding the schedule: the checkpoint stays as it is.
    let holder = PgWarehouse::open(&db.target()).unwrap();
    let _held = holder.claim(s[0]).unwrap().unwrap();
    let out = run!(&["checkpoint", "reset", "--schedule", &schedule], 1);
    assert!(out.is_empty());
    assert!(
        outputs.last().unwrap().contains("another callsync process"),
        "{outputs:?}"
    );
    let out = run!(&["backup", "/nonexistent/backup.db"], 2);
    assert!(out.is_empty());
    assert!(outputs.last().unwrap().contains("pg_dump"), "{outputs:?}");
    // The write commands record into PostgreSQL; the upload, whose ledger is an SQLite file,
    // is refused before anything is sent; neither leaves an SQLite file at warehouse.path.
    let posts = || {
        env.sim
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .count()
    };
    let campaign = run!(&["campaign", "create", "--name", "Spring renewals"], 0);
    let recorded = pg::query(
        &db,
        &format!(
            "SELECT name FROM campaigns WHERE uid = '{}'",
            campaign.trim()
        ),
    );
    assert_eq!(recorded, [[Some("Spring renewals".to_owned())]]);
    let out = run!(&["schedule", "disable", &schedule], 0);
    assert!(out.contains("is disabled"), "{out}");
    let recorded = pg::query(
        &db,
        &format!("SELECT is_enabled::text FROM schedules WHERE uid = '{schedule}'"),
    );
    assert_eq!(recorded, [[Some("false".to_owned())]]);
    let csv = env.dir.path().join("contacts.csv");
    std::fs::write(&csv, "phone\n+14155550100\n").unwrap();
    let before = posts();
    let out = run!(
        &[
            "upload",
            "--schedule",
            &schedule,
            csv.to_str().unwrap(),
            "--map",
            "phone=phone_number",
        ],
        2
    );
    assert!(out.is_empty());
    let refusal = outputs.last().unwrap();
    assert!(
        refusal.contains("warehouse.url") && refusal.contains("warehouse.path"),
        "{refusal}"
    );
    assert_eq!(posts(), before, "nothing was sent");
    // Without warehouse.path, an SQLite warehouse would be `callsync.db` in the working
    // directory: the commands ran in the test's directory, which holds none.
    let files: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".db") || name.contains(".db-"))
        .collect();
    assert!(files.is_empty(), "SQLite files made: {files:?}");
    for output in &outputs {
        assert!(!output.contains(PASSWORD), "the password shown: {output}");
    }
}

/// Rows of values as text (`None`: NULL).
type TextRows = Vec<Vec<Option<String>>>;

/// A value of a view as text, in the SQLite warehouse's form: instants as RFC 3339 UTC with
/// six fraction digits, flags as 0/1.
fn sqlite_text(value: rusqlite::types::Value) -> Option<String> {
    use rusqlite::types::Value;
    match value {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Text(t) => Some(t),
        Value::Blob(b) => Some(format!("{b:?}")),
    }
}

/// `relation`'s rows on both destinations, each as text in the SQLite warehouse's form, sorted:
/// PostgreSQL's native types turned into SQLite's forms by the query (the one difference of
/// representation, `timezone_offsets`' first row from -infinity, mapped to SQLite's year 0).
fn rows_on_both(
    sqlite: &std::path::Path,
    db: &pg::Database,
    relation: &str,
) -> (TextRows, TextRows) {
    let conn = rusqlite::Connection::open(sqlite).expect("the SQLite warehouse opens");
    let columns: Vec<String> = conn
        .prepare(&format!(
            "SELECT name FROM pragma_table_info('{relation}') ORDER BY cid"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let pg_columns = pg::query(
        db,
        &format!(
            "SELECT column_name, data_type FROM information_schema.columns
             WHERE table_name = '{relation}' AND table_schema = current_schema()
             ORDER BY ordinal_position"
        ),
    );
    let names: Vec<String> = pg_columns.iter().map(|c| c[0].clone().unwrap()).collect();
    assert_eq!(
        names, columns,
        "{relation}: the same columns in the same order"
    );
    let mut sqlite_rows: TextRows = conn
        .prepare(&format!("SELECT * FROM {relation}"))
        .unwrap()
        .query_map([], |r| {
            (0..columns.len())
                .map(|i| r.get::<_, rusqlite::types::Value>(i).map(sqlite_text))
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let select: Vec<String> = pg_columns
        .iter()
        .map(|c| {
            let (name, kind) = (c[0].as_deref().unwrap(), c[1].as_deref().unwrap());
            match kind {
                "timestamp with time zone" => format!(
                    "CASE WHEN {name} = '-infinity' THEN '0001-01-01T00:00:00.000000Z'
                     ELSE to_char({name} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') END"
                ),
                "boolean" => format!("{name}::integer::text"),
                _ => format!("{name}::text"),
            }
        })
        .collect();
    let mut pg_rows = pg::query(db, &format!("SELECT {} FROM {relation}", select.join(", ")));
    sqlite_rows.sort();
    pg_rows.sort();
    (sqlite_rows, pg_rows)
}

/// Schema 7 in step: the same simulator synced into both destinations, every view and
/// `timezone_offsets` hold the same rows, and a day in the configured zone (`local_day` on
/// PostgreSQL, schema 7's `date(t, offset)` on SQLite) is the same day for every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_views_hold_on_postgres_what_they_hold_on_sqlite() {
    if !pg::available("postgres::views") {
        return;
    }
    for shape in [
        callsync::simulator::CallShape::Varied,
        callsync::simulator::CallShape::Eighteen,
    ] {
        let mut env = crate::harness::TestEnv::start(callsync::simulator::SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 60,
            seed: 20,
            shape,
            ..Default::default()
        })
        .await;
        let s = env.schedules();
        env.config.sync.schedule_names =
            std::collections::BTreeMap::from([(s[0], "Renewals".to_owned())]);
        env.config.warehouse.timezone = chrono_tz::America::New_York;
        env.pass_ok(&s).await;
        env.assert_matches_truth(&s);
        let db = pg::database();
        env.use_postgres(db.clone());
        env.pass_ok(&s).await;
        env.assert_matches_truth(&s);

        let sqlite = env.warehouse_path();
        for relation in [
            "call_results",
            "attempt_results",
            "outcome_results",
            "variable_results",
            "notification_results",
            "timezone_offsets",
        ] {
            let (on_sqlite, on_postgres) = rows_on_both(&sqlite, &db, relation);
            if shape == callsync::simulator::CallShape::Eighteen {
                assert!(!on_sqlite.is_empty(), "{relation}: rows to compare");
            }
            assert_eq!(
                on_postgres, on_sqlite,
                "{shape:?}: {relation} on PostgreSQL differs from SQLite"
            );
        }

        let conn = rusqlite::Connection::open(&sqlite).unwrap();
        let mut sqlite_days: TextRows = conn
            .prepare(
                "SELECT attempt_uid, date(started_at, (SELECT utc_offset_secs FROM timezone_offsets
                   WHERE starts_at <= started_at ORDER BY starts_at DESC LIMIT 1) || ' seconds')
                 FROM attempt_results WHERE started_at IS NOT NULL",
            )
            .unwrap()
            .query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?]))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut pg_days = pg::query(
            &db,
            "SELECT attempt_uid::text, local_day(started_at)::text
             FROM attempt_results WHERE started_at IS NOT NULL",
        );
        sqlite_days.sort();
        pg_days.sort();
        if shape == callsync::simulator::CallShape::Eighteen {
            assert!(!sqlite_days.is_empty(), "attempts with a day");
        }
        assert_eq!(pg_days, sqlite_days, "{shape:?}: local_day");
    }
}

/// `/healthz` asks the PostgreSQL server on every request: 503 naming the warehouse while
/// the server cannot be reached (its socket gone from the directory the daemon's URI names),
/// 200 again once it can. Decided on events: each answer follows the socket's removal or
/// return, which it checks on its own connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_says_503_while_the_server_is_unreachable_and_200_once_it_is_back() {
    if !pg::available("postgres::healthz") {
        return;
    }
    let mut env = crate::harness::TestEnv::start(callsync::simulator::SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 5,
        ..Default::default()
    })
    .await;
    let db = pg::database();
    // The daemon reaches the server through a directory of its own, holding a link to the
    // server's socket: removing the link makes the server unreachable to new connections.
    let socket_name = ".s.PGSQL.5432";
    let link_dir = env.dir.path().join("socket");
    std::fs::create_dir(&link_dir).unwrap();
    let link = link_dir.join(socket_name);
    let socket = pg::server().socket_dir.join(socket_name);
    std::os::unix::fs::symlink(&socket, &link).unwrap();
    let url = db.url.replacen(
        &pg::server().socket_dir.display().to_string(),
        &link_dir.display().to_string(),
        1,
    );
    assert_ne!(url, db.url);
    env.config.warehouse.destination =
        callsync::config::DestinationConfig::Postgres(callsync::config::PostgresConfig {
            url,
            password: None,
            schema: callsync::config::DEFAULT_SCHEMA.to_owned(),
        });
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .unwrap();
    env.config.metrics.listen = Some(listen);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(callsync::daemon::run(env.config.clone(), async {
        let _ = stopped.await;
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let healthz = async || -> Option<(u16, String)> {
        let response = http
            .get(format!("http://{listen}/healthz"))
            .send()
            .await
            .ok()?;
        Some((response.status().as_u16(), response.text().await.ok()?))
    };
    let deadline = std::time::Instant::now() + crate::harness::PATIENCE;
    let first = loop {
        if let Some(answer) = healthz().await {
            break answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/healthz never answered"
        );
        // Polling interval under the patience above.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // "ok", then what the daemon is doing ("busy since …" while its first pass runs).
    assert!(first.0 == 200 && first.1.starts_with("ok\n"), "{first:?}");

    std::fs::remove_file(&link).unwrap();
    let (status, body) = healthz().await.expect("/healthz answers");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("cannot connect to the warehouse postgresql://")
            && body.contains(&db.name),
        "{body}"
    );

    std::os::unix::fs::symlink(&socket, &link).unwrap();
    let back = healthz().await.expect("/healthz answers");
    assert!(back.0 == 200 && back.1.starts_with("ok\n"), "{back:?}");
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
}

/// An engine that synced a simulator's 2 schedules × 20 calls (of `seed`) into a new
/// PostgreSQL database once, kept, with its connections, for the passes a test runs next.
struct SyncedOnce {
    env: crate::harness::TestEnv,
    schedules: Vec<Uuid>,
    db: pg::Database,
    engine: callsync::sync::Engine,
    plan: callsync::sync::PassPlan,
}

impl SyncedOnce {
    async fn start(seed: u64) -> SyncedOnce {
        let env = crate::harness::TestEnv::start_on(
            callsync::simulator::SimulatorOptions {
                schedules: 2,
                calls_per_schedule: 20,
                seed,
                ..Default::default()
            },
            crate::harness::Dest::Postgres,
        )
        .await;
        let engine = env.engine();
        let synced = SyncedOnce {
            schedules: env.schedules(),
            db: env.pg.clone().expect("a PostgreSQL destination"),
            plan: callsync::sync::PassPlan::incremental(engine.settings()),
            engine,
            env,
        };
        let first = synced.pass().await;
        assert!(first.iter().all(|r| r.succeeded()), "{first:?}");
        synced
    }

    async fn pass(&self) -> Vec<callsync::sync::PassReport> {
        let cancel = tokio_util::sync::CancellationToken::new();
        self.engine
            .sync_all(&self.schedules, &self.plan, &cancel)
            .await
    }

    /// Closes the engine; the warehouse must equal the truth.
    async fn close_and_compare(self) {
        self.engine.close().await;
        self.env.assert_matches_truth(&self.schedules);
    }
}

/// The server closing the warehouse's connections (a restart, a failover, an administrator)
/// costs at most the pass it breaks: the engine connects again at its next operation, and the
/// next pass succeeds and leaves the warehouse equal to the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_closed_are_opened_again() {
    if !pg::available("postgres::reconnect") {
        return;
    }
    let synced = SyncedOnce::start(8).await;
    let db = &synced.db;
    let ended = pg::query(
        db,
        "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    assert_ne!(
        ended,
        [[Some("0".to_owned())]],
        "the engine's connections ended"
    );
    // The first pass after may still meet a connection the client has not yet seen closed;
    // it fails, and the client then knows.
    let mut passes = Vec::new();
    for _ in 0..2 {
        let reports = synced.pass().await;
        let ok = reports.iter().all(|r| r.succeeded());
        passes.push(reports);
        if ok {
            break;
        }
    }
    assert!(
        passes.last().unwrap().iter().all(|r| r.succeeded()),
        "no pass succeeded after the server closed the connections: {passes:?}"
    );
    synced.close_and_compare().await;
}

/// A page's statements and the claim's, prepared when the engine first wrote, are refused by
/// the server once a column they return changed type (here to a domain over the same type,
/// which callsync reads as before): the claim is asked again, the page's transaction is
/// rolled back and written again, with statements prepared anew, so the pass succeeds, and
/// the warehouse equals the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_whose_statements_a_changed_column_refused_is_written_again() {
    if !pg::available("postgres::replanned_page") {
        return;
    }
    let synced = SyncedOnce::start(9).await;
    let (env, s, db) = (&synced.env, &synced.schedules, &synced.db);
    pg::query(
        db,
        "CREATE DOMAIN fingerprint AS bigint;
         ALTER TABLE calls ALTER COLUMN content_hash TYPE fingerprint;
         CREATE DOMAIN fencing_token AS bigint;
         ALTER TABLE schedule_claims ALTER COLUMN generation TYPE fencing_token",
    );
    for schedule in s {
        env.sim.bulk_create_now(*schedule, 5);
    }
    let second = synced.pass().await;
    assert!(second.iter().all(|r| r.succeeded()), "{second:?}");
    assert!(
        second.iter().all(|r| r.stats.calls_written == 5),
        "the new calls written once each: {second:?}"
    );
    synced.close_and_compare().await;
}

/// A database of another program's tables, and one that does not exist: named as such, with
/// what to do, and exit code 2 from every command that opens the warehouse (the daemon's
/// too, so systemd does not restart it for ever); nothing is created in the foreign one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_missing_database_is_a_configuration_error() {
    if !pg::available("postgres::foreign_cli") {
        return;
    }
    let env = crate::harness::TestEnv::start_on(
        callsync::simulator::SimulatorOptions {
            schedules: 1,
            calls_per_schedule: 5,
            ..Default::default()
        },
        crate::harness::Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().unwrap();
    pg::query(&db, "CREATE TABLE invoices (id int)");
    pg::query(&db, "CREATE VIEW unpaid AS SELECT * FROM invoices");
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let foreign = format!(
        "{} is a PostgreSQL database of another program, not a callsync warehouse (its schema public holds tables, not callsync's: invoices, unpaid); point warehouse.url at a database of callsync's own (createdb callsync) or at a callsync warehouse, or give callsync a schema of its own in this one (warehouse.schema = \"callsync\")\n",
        db.target().display()
    );
    for command in [&["sync"][..], &["migrate"], &["status"], &["run"]] {
        let mut args = vec!["--config", c];
        args.extend(command);
        let (code, out, err) = callsync(env.dir.path(), &args).await;
        assert_eq!(code, 2, "{command:?}: {out}{err}");
        assert!(err.ends_with(&foreign), "{command:?}: {err}");
    }
    let tables = pg::query(
        &db,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
    );
    assert_eq!(
        tables,
        [[Some("1".to_owned())]],
        "nothing created beside them"
    );

    // A database the server does not have.
    let missing = db
        .url
        .replacen(&format!("/{}?", db.name), "/no_such_database?", 1);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&db.url, &missing);
    std::fs::write(&config, text).unwrap();
    for command in [&["sync"][..], &["run"]] {
        let mut args = vec!["--config", c];
        args.extend(command);
        let (code, out, err) = callsync(env.dir.path(), &args).await;
        assert_eq!(code, 2, "{command:?}: {out}{err}");
        assert!(
            err.contains("database \"no_such_database\" does not exist (3D000); create the database (createdb, as its owner-to-be), or name an existing one in warehouse.url\n"),
            "{command:?}: {err}"
        );
    }
}

/// Passes left open by a process that ended are marked interrupted by the next process that
/// opens the warehouse for writing — only once nothing holds their schedule's claim: a
/// daemon elsewhere still walking one keeps its row open.
#[test]
fn a_pass_left_open_is_marked_interrupted_once_its_claim_is_free() {
    if !pg::available("postgres::interrupted") {
        return;
    }
    use callsync::service::Timestamp;
    use callsync::warehouse::{ProcessIdentity, RunKind};
    let db = pg::database();
    let (walking, ended) = (Uuid::from_u128(0x51), Uuid::from_u128(0x52));
    // Another machine's daemon, walking `walking` now.
    let elsewhere = PgWarehouse::open(&db.target()).unwrap();
    let held = elsewhere.claim(walking).unwrap().expect("free");
    let mut w = PgWarehouse::open(&db.target()).unwrap();
    let walker = ProcessIdentity {
        host: "another-host".into(),
        instance: "another-host".into(),
        pid: 4242,
    };
    for schedule in [walking, ended] {
        crate::harness::start_run(
            &mut w,
            schedule,
            RunKind::Incremental,
            Timestamp::now(),
            &walker,
        );
    }
    drop(w);
    let rows = || {
        pg::query(
            &db,
            "SELECT schedule_uid::text, outcome, error, (finished_at = started_at)::text
             FROM sync_runs ORDER BY id",
        )
    };
    let marked = |schedule: Uuid| {
        vec![
            Some(schedule.to_string()),
            Some("interrupted".to_owned()),
            Some(callsync::warehouse::PROCESS_ENDED.to_owned()),
            Some("true".to_owned()),
        ]
    };
    let open = |schedule: Uuid| vec![Some(schedule.to_string()), None, None, None];

    let _next = PgWarehouse::open(&db.target()).unwrap();
    assert_eq!(rows(), [open(walking), marked(ended)]);
    drop(held);
    let _later = PgWarehouse::open(&db.target()).unwrap();
    assert_eq!(rows(), [marked(walking), marked(ended)]);
}

/// The pages of several passes go in one transaction (their rows share the transaction id
/// that wrote them, `xmin`), and a group the server refuses whole is written page by page:
/// only the page it refuses fails (here a trigger refuses one call, as the server refuses a
/// value it cannot store), and the others are written with their checkpoints. A group in
/// which one schedule's fence moved commits nothing: another process claimed it, so this
/// process's lock session lost it, and every claim on that session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_pages_refused_whole_is_written_page_by_page() {
    if !pg::available("postgres::group_pages") {
        return;
    }
    use callsync::service::{OutboundCall, Timestamp};
    use callsync::warehouse::{PageBatch, WarehouseError};
    let env = crate::harness::TestEnv::start(callsync::simulator::SimulatorOptions {
        schedules: 4,
        calls_per_schedule: 3,
        ..callsync::simulator::SimulatorOptions::default()
    })
    .await;
    let s = env.schedules();
    let truth: Vec<Vec<OutboundCall>> = s.iter().map(|&schedule| env.sim.truth(schedule)).collect();
    let db = pg::database();
    let target = db.target();
    tokio::task::spawn_blocking(move || {
        let mut w = PgWarehouse::open(&target).unwrap();
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let page = |n: usize, calls: &[OutboundCall]| PageBatch {
            schedule: s[n],
            content_hashes: calls.iter().map(OutboundCall::content_hash).collect(),
            calls: calls.to_vec(),
            checkpoint: Some(at("2026-01-01T00:10:00Z")),
            synced_at: at("2026-01-01T01:00:00Z"),
            set_aside: Vec::new(),
            run: None,
        };
        // How many calls, and transactions that wrote them, by schedule.
        let stored = |db: &pg::Database| {
            pg::query(
                db,
                "SELECT schedule_uid::text, count(*)::text, count(DISTINCT xmin::text)::text
                 FROM calls GROUP BY 1 ORDER BY 1",
            )
        };
        let transactions = |db: &pg::Database| {
            pg::query(
                db,
                "SELECT count(DISTINCT xmin::text)::text FROM
                   (SELECT xmin FROM calls UNION ALL SELECT xmin FROM sync_checkpoints) AS r",
            )
        };
        // Three calls written by one transaction, for each schedule of `of`.
        let rows = |of: &[usize]| {
            let mut rows: Vec<_> = (of.iter())
                .map(|&n| vec![Some(s[n].to_string()), Some("3".into()), Some("1".into())])
                .collect();
            rows.sort();
            rows
        };
        let claims: Vec<_> = (s.iter())
            .map(|schedule| w.claim(*schedule).unwrap().expect("free"))
            .collect();

        let written =
            crate::harness::write_pages(&mut w, vec![page(0, &truth[0]), page(1, &truth[1])]);
        assert!(written.iter().all(Result::is_ok), "{written:?}");
        assert_eq!(stored(&db), rows(&[0, 1]));
        assert_eq!(
            transactions(&db),
            [[Some("1".to_owned())]],
            "one transaction"
        );

        let refused = truth[2][1].uid;
        pg::query(
            &db,
            &format!(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
                 CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON calls FOR EACH ROW
                   WHEN (NEW.uid = '{refused}') EXECUTE FUNCTION refuse()"
            ),
        );
        let written =
            crate::harness::write_pages(&mut w, vec![page(2, &truth[2]), page(3, &truth[3])]);
        let err = written[0].as_ref().expect_err("refused").to_string();
        assert!(err.contains("refused by the test"), "{err}");
        assert_eq!(written[1].as_ref().unwrap().calls_written, 3);
        assert_eq!(stored(&db), rows(&[0, 1, 3]));
        assert_eq!(
            transactions(&db),
            [[Some("2".to_owned())]],
            "the next page alone"
        );
        let checkpoints = pg::query(&db, "SELECT count(*)::text FROM sync_checkpoints");
        assert_eq!(
            checkpoints,
            [[Some("3".to_owned())]],
            "none for the page refused"
        );

        pg::query(&db, "DROP TRIGGER refuse ON calls");
        pg::query(
            &db,
            &format!(
                "UPDATE schedule_claims SET generation = generation + 1
                 WHERE schedule_uid = '{}'",
                s[3]
            ),
        );
        let fenced =
            crate::harness::write_pages(&mut w, vec![page(2, &truth[2]), page(3, &truth[3][..1])]);
        for result in &fenced {
            assert!(
                matches!(result, Err(WarehouseError::ClaimLost { .. })),
                "{fenced:?}"
            );
        }
        assert_eq!(
            transactions(&db),
            [[Some("2".to_owned())]],
            "nothing committed"
        );
        drop(claims);
    })
    .await
    .expect("the scenario ran");
}

/// A pass that opened with a checkpoint reads its pages first, outside a transaction: one
/// that changes nothing writes nothing and takes no fence (a transaction would have met the
/// fence another claim moved, and been refused). A page whose calls are unchanged but whose
/// checkpoint would move the stored one is written in a transaction, fenced (refused here),
/// and once claimed again it moves the checkpoint; a page with a changed call is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_page_is_read_not_written_and_any_other_is_written_under_the_fence() {
    if !pg::available("postgres::unchanged_page") {
        return;
    }
    use callsync::service::{OutboundCall, Timestamp};
    use callsync::warehouse::{
        PageWrite, PassOpened, PassStart, ProcessIdentity, RunKind, WarehouseError,
    };
    let env = crate::harness::TestEnv::start(callsync::simulator::SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..callsync::simulator::SimulatorOptions::default()
    })
    .await;
    let schedule = env.schedules()[0];
    let calls = env.sim.truth(schedule);
    let db = pg::database();
    let target = db.target();
    tokio::task::spawn_blocking(move || {
        let mut w = PgWarehouse::open(&target).unwrap();
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let walker = ProcessIdentity {
            host: "a-host".into(),
            instance: "a-host".into(),
            pid: 1,
        };
        let open = |w: &mut PgWarehouse| {
            let start = PassStart {
                schedule,
                kind: RunKind::Incremental,
                started_at: Timestamp::now(),
                walker: &walker,
                unless_walked_since: None,
            };
            match w.open_pass(&start).unwrap() {
                PassOpened::Started { checkpoint, .. } => checkpoint.unwrap().map(|c| c.cursor),
                other => panic!("{other:?}"),
            }
        };
        let write = |w: &mut PgWarehouse, calls: &[OutboundCall], checkpoint: &str| {
            w.write_hashed_page(&PageBatch {
                schedule,
                calls: calls.to_vec(),
                content_hashes: calls.iter().map(OutboundCall::content_hash).collect(),
                checkpoint: Some(at(checkpoint)),
                synced_at: Timestamp::now(),
                set_aside: Vec::new(),
                run: None,
            })
        };
        let (first, later) = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z");
        let claim = w.claim(schedule).unwrap().expect("free");
        assert_eq!(open(&mut w), None, "a first sync");
        assert_eq!(write(&mut w, &calls, first).unwrap().calls_written, 20);
        drop(claim);

        let claim = w.claim(schedule).unwrap().expect("free");
        assert_eq!(open(&mut w), Some(at(first)));
        // Another claim moves the fence: only a page that writes meets it.
        pg::query(
            &db,
            "UPDATE schedule_claims SET generation = generation + 1",
        );
        let unchanged = write(&mut w, &calls, first).expect("read, not written: no fence");
        assert_eq!(
            unchanged,
            PageWrite {
                calls_written: 0,
                calls_unchanged: 20,
                ..PageWrite::default()
            }
        );
        let moved = write(&mut w, &calls, later);
        assert!(
            matches!(moved, Err(WarehouseError::ClaimLost { .. })),
            "a checkpoint to move is written, under the fence: {moved:?}"
        );
        drop(claim);

        // The refusal gave up the lock session, and its lock goes with it once the server has
        // heard the connection close and ended the session, in its own time (a claim asked
        // sooner finds the schedule held): the next claim waits for that.
        pg::wait_until_no_claims(&db, "the server to let the given-up lock session's lock go");
        let claim = w.claim(schedule).unwrap().expect("free");
        assert_eq!(open(&mut w), Some(at(first)), "nothing was written");
        let moved = write(&mut w, &calls, later).unwrap();
        assert_eq!(moved.calls_written, 0);
        assert_eq!(
            w.checkpoint(schedule).unwrap().map(|c| c.cursor),
            Some(at(later))
        );
        let mut changed = calls.clone();
        changed[3].status = "a status never seen".into();
        assert_eq!(write(&mut w, &changed, later).unwrap().calls_written, 1);
        let stored = pg::query(
            &db,
            &format!("SELECT status FROM calls WHERE uid = '{}'", changed[3].uid),
        );
        assert_eq!(stored, [[Some("a status never seen".to_owned())]]);
        drop(claim);

        // An unchanged page is judged against the cursor its pass opened with, not read
        // again; a checkpoint moved back since by this process (under the claim, as
        // `callsync checkpoint` moves one) is not that cursor any more: the page moves it.
        let claim = w.claim(schedule).unwrap().expect("free");
        assert_eq!(open(&mut w), Some(at(later)));
        w.replace_checkpoint(schedule, Some(at(first))).unwrap();
        let page = write(&mut w, &changed, later).unwrap();
        assert_eq!((page.calls_written, page.calls_unchanged), (0, 20));
        assert_eq!(
            w.checkpoint(schedule).unwrap().map(|c| c.cursor),
            Some(at(later))
        );
        drop(claim);
    })
    .await
    .expect("the scenario ran");
}

/// A young warehouse is read by key: planned while its tables were a few pages (never
/// analyzed), a first sync and the idle pass after it never read a table of calls or of their
/// children end to end, where the planner's statistics alone would have it (callsync's
/// sessions run with `enable_seqscan = off`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_warehouse_is_read_by_key_not_end_to_end() {
    if !pg::available("postgres::read_by_key") {
        return;
    }
    let env = crate::harness::TestEnv::start_on(
        callsync::simulator::SimulatorOptions {
            schedules: 6,
            calls_per_schedule: 250,
            ..Default::default()
        },
        crate::harness::Dest::Postgres,
    )
    .await;
    let db = env.pg.clone().expect("a database");
    let schedules = env.schedules();
    env.pass_ok(&schedules).await;
    env.pass_ok(&schedules).await;
    // A session's counts reach the statistics when it ends: once callsync's have.
    crate::harness::wait_for("callsync's sessions to end", || {
        pg::query(
            &db,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ) == [[Some("0".to_owned())]]
    })
    .await;
    // The migrations scanned each table once, empty (indexes, constraints): rows read end
    // to end count the reads since.
    let scans = pg::query(
        &db,
        "SELECT relname, seq_tup_read, idx_scan FROM pg_stat_user_tables
         WHERE relname IN ('calls', 'call_custom_parameters', 'call_attempts',
                           'attempt_outcomes', 'attempt_variables', 'call_notifications')
         ORDER BY relname",
    );
    let read_end_to_end: Vec<_> = scans
        .iter()
        .filter(|row| row[1].as_deref() != Some("0"))
        .collect();
    assert!(read_end_to_end.is_empty(), "{read_end_to_end:?}");
    let calls = scans.iter().find(|row| row[0].as_deref() == Some("calls"));
    assert!(
        calls.is_some_and(|row| row[2].as_deref() != Some("0")),
        "the calls were read, by key: {scans:?}"
    );
    env.assert_matches_truth(&schedules);
}
