//! A PostgreSQL server for the tests: started once per test run, on first use, from scratch
//! (`initdb` into a temp dir — as the `postgres` user through `runuser` when the tests run as
//! root, as PostgreSQL refuses root), listening on a Unix socket in a directory it owns, no
//! TCP port, trust authentication; a database per test ([`database`]). The server dies with
//! the test process (the thread that started it never ends, and its death signal is SIGQUIT),
//! and its directory is removed at exit.
//!
//! `CALLSYNC_SKIP_POSTGRES=1` skips every PostgreSQL case, saying so on stderr for each one
//! ([`available`]); without it, a missing `initdb` fails the tests (`.ci/run` installs
//! Debian's `postgresql` when it is missing).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use callsync::warehouse::postgres::PgTarget;

use crate::harness::PATIENCE;

/// A running test server.
pub struct Server {
    pub dir: PathBuf,
    pub socket_dir: PathBuf,
    /// The TCP port on 127.0.0.1 for TLS tests; `None` for the Unix-socket-only server.
    pub port: Option<u16>,
    /// The role that owns the cluster.
    pub superuser: String,
}

/// One test's database on the shared server.
#[derive(Debug, Clone)]
pub struct Database {
    pub name: String,
    /// `postgresql://postgres@/NAME?host=SOCKET_DIR`.
    pub url: String,
    /// The warehouse's `warehouse.schema` in it: `public` unless [`Database::in_schema`].
    pub schema: String,
}

impl Database {
    pub fn target(&self) -> PgTarget {
        PgTarget::parse(&self.url, None)
            .expect("the test database's URL parses")
            .with_schema(&self.schema)
    }

    /// The same database, the warehouse in `schema` (its configuration's `warehouse.schema`,
    /// and where [`query`] reads).
    pub fn in_schema(&self, schema: &str) -> Database {
        Database {
            schema: schema.to_owned(),
            ..self.clone()
        }
    }
}

/// False, saying so on stderr, when `CALLSYNC_SKIP_POSTGRES=1`: a test then returns early.
pub fn available(test: &str) -> bool {
    if std::env::var("CALLSYNC_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (CALLSYNC_SKIP_POSTGRES=1): the PostgreSQL case of {test}");
        return false;
    }
    true
}

/// The run's Unix-socket server, started on first use.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| Server::start(None))
}

/// A new, empty database on the run's server.
pub fn database() -> Database {
    server().database()
}

/// Running as root: the server and `initdb` run as `postgres`.
fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the postgres user exists (Debian's postgresql package creates it)")
    };
    (id("-u"), id("-g"))
}

/// Servers to stop at exit: (postmaster pid, directory).
static STARTED: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn stop_servers() {
    let started = STARTED.lock().map(|s| s.clone()).unwrap_or_default();
    for (pid, dir) in started {
        // SIGQUIT: immediate shutdown; the data is a test's.
        unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
        // Teardown at exit, deciding nothing: waits for the server to go (a poll every 20 ms),
        // and gives up after 10 s rather than hold the test binary's exit on a stuck server.
        let deadline = Instant::now() + Duration::from_secs(10);
        while unsafe { libc::kill(pid as i32, 0) } == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

impl Server {
    /// Starts a server; with `tls`, it also listens on 127.0.0.1 with that certificate and
    /// key (PEM files).
    pub fn start(tls: Option<(&Path, &Path)>) -> Server {
        assert!(
            Command::new("initdb").arg("--version").output().is_ok(),
            "initdb is not on the PATH: install PostgreSQL (Debian: apt-get install postgresql, and put /usr/lib/postgresql/*/bin on the PATH), or set CALLSYNC_SKIP_POSTGRES=1 to skip these tests"
        );
        let dir = tempfile::Builder::new()
            .prefix("callsync-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let data = dir.join("data");
        let socket_dir = dir.join("socket");
        std::fs::create_dir(&socket_dir).unwrap();
        let root = as_root();
        let superuser = if root {
            "postgres".to_owned()
        } else {
            std::env::var("USER").unwrap_or_else(|_| "postgres".into())
        };
        if root {
            let (uid, gid) = postgres_ids();
            for path in [&dir, &socket_dir] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
            }
        }
        let mut initdb = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "initdb"]);
            c
        } else {
            Command::new("initdb")
        };
        let out = initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-A",
                "trust",
                "-U",
                &superuser,
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let port = tls.map(|(cert, key)| {
            let port = free_port();
            let copy = |from: &Path, name: &str| {
                let to = data.join(name);
                std::fs::copy(from, &to).unwrap();
                if root {
                    let (uid, gid) = postgres_ids();
                    std::os::unix::fs::chown(&to, Some(uid), Some(gid)).unwrap();
                }
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            };
            copy(cert, "server.crt");
            copy(key, "server.key");
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhost all all 127.0.0.1/32 trust\n",
            )
            .unwrap();
            port
        });
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut args: Vec<String> = vec![
            "-D".into(),
            data.display().to_string(),
            "-k".into(),
            socket_dir.display().to_string(),
            "-c".into(),
            "fsync=off".into(),
            "-c".into(),
            "full_page_writes=off".into(),
            "-c".into(),
            "max_connections=300".into(),
        ];
        match port {
            Some(port) => args.extend([
                "-c".into(),
                "listen_addresses=127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "-c".into(),
                "ssl=on".into(),
            ]),
            None => args.extend(["-c".into(), "listen_addresses=".into()]),
        }
        // Started from a thread that never ends: the server's death signal fires when its
        // parent thread dies, which is then only when the test process does.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut command = Command::new("postgres");
            command
                .args(&args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log);
            if root {
                let (uid, gid) = postgres_ids();
                command.uid(uid).gid(gid);
            }
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                    Ok(())
                });
            }
            let child: std::io::Result<Child> = command.spawn();
            let _ = tx.send(child.map(|c| c.id()));
            loop {
                std::thread::park();
            }
        });
        let pid = rx.recv().unwrap().expect("postgres starts");
        {
            let mut started = STARTED.lock().unwrap();
            if started.is_empty() {
                // SAFETY: registering a plain extern "C" function.
                unsafe { libc::atexit(stop_servers) };
            }
            started.push((pid, dir.clone()));
        }
        let server = Server {
            dir,
            socket_dir,
            port,
            superuser,
        };
        server.wait_until_ready(pid);
        server
    }

    fn wait_until_ready(&self, pid: u32) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if admin(self, "postgres", "SELECT 1").is_ok() {
                return;
            }
            let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            assert!(alive, "the PostgreSQL test server stopped:\n{log}");
            assert!(
                Instant::now() < deadline,
                "the PostgreSQL test server did not accept connections within {PATIENCE:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of database `name` through the Unix socket.
    pub fn url(&self, name: &str) -> String {
        // The socket's file is named after the port.
        let port = self.port.map(|p| format!("&port={p}")).unwrap_or_default();
        format!(
            "postgresql://{}@/{name}?host={}{port}",
            self.superuser,
            self.socket_dir.display()
        )
    }

    /// A new, empty database.
    pub fn database(&self) -> Database {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "callsync_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin(self, "postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        Database {
            url: self.url(&name),
            name,
            schema: callsync::config::DEFAULT_SCHEMA.to_owned(),
        }
    }
}

/// Runs `sql` in `dbname` as the superuser, on a thread of its own (callable from async
/// tests and plain ones alike); returns the rows' first columns as text.
pub fn admin(server: &Server, dbname: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let url = server.url(dbname);
    let sql = sql.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            let messages = client
                .simple_query(&sql)
                .await
                .map_err(|e| match e.as_db_error() {
                    Some(db) => db.message().to_owned(),
                    None => e.to_string(),
                })?;
            Ok(messages
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
    })
    .join()
    .map_err(|_| "the admin thread panicked".to_owned())?
}

/// Runs `sql` in the test database `db`, its warehouse's schema first on the search path.
pub fn query(db: &Database, sql: &str) -> Vec<Vec<Option<String>>> {
    let sql = match db.schema.as_str() {
        callsync::config::DEFAULT_SCHEMA => sql.to_owned(),
        schema => format!("SET search_path TO {schema}; {sql}"),
    };
    admin(server(), &db.name, &sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Waits until no session holds an advisory lock in `db`: every claim on it let go. A lock
/// session its client gave up (its connection closed, after a claim was found lost) keeps its
/// locks until the server has heard of the close and ended that session, in the server's own
/// time: a claim asked sooner finds its schedule held. Polls every 10 ms (a polling interval,
/// not a wait for time to pass); panics naming `what` after [`PATIENCE`], which only a hang
/// reaches.
pub fn wait_until_no_claims(db: &Database, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let held = query(
            db,
            "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory'
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        );
        if held == [[Some("0".to_owned())]] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still waiting after {PATIENCE:?} for {what}: {held:?} advisory locks held"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}
