//! The PostgreSQL warehouse itself: TLS with libpq's sslmodes (a CA the test makes with
//! `openssl`), migrations serialized between processes, claims, the BI role.

use std::path::Path;
use std::process::Command;

use callsync::warehouse::postgres::{PgTarget, PgWarehouse};
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

#[test]
fn a_claim_excludes_other_sessions_until_dropped_or_its_connection_dies() {
    if !pg::available("postgres::claims") {
        return;
    }
    let db = pg::database();
    let target = db.target();
    let (first, second) = (
        PgWarehouse::open(&target).unwrap(),
        PgWarehouse::open(&target).unwrap(),
    );
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
    // The server ends the lock session (as when a daemon dies): the lock goes with it.
    pg::query(
        &db,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    drop((again, other));
    first
        .claim(schedule)
        .unwrap()
        .expect("free once its session died");
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

/// `callsync` with `args`: (exit code, stdout, stderr).
async fn callsync(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(args)
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
        let (code, out, err) = callsync(&all).await;
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
    for output in &outputs {
        assert!(!output.contains(PASSWORD), "the password shown: {output}");
    }
}
