//! callsync's `spawn_app`: a simulator on 127.0.0.1:0, a warehouse in a temp dir, a config
//! pointing at both, and the checks every test ends with.

use std::path::PathBuf;
use std::time::Duration;

use callsync::config::{
    ApiConfig, AuthConfig, Config, DestinationConfig, DetailsMode, LogConfig, MetricsConfig,
    OAuthConfig, PostgresConfig, RetryConfig, Secret, SyncConfig, WarehouseConfig,
};
use callsync::service::OutboundCall;
use callsync::simulator::{Simulator, SimulatorOptions};
use callsync::sync::{Engine, Mode, PassPlan, PassReport};
use callsync::warehouse::sqlite::{Snapshot, Warehouse};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::expected;

/// How long a test waits for an event before it calls it a hang: generous, so that only a
/// hang reaches it, never a slow machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` until it holds, every 10 ms (a polling interval, not a wait for time to
/// pass); panics naming `what` after [`PATIENCE`].
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still waiting after {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`wait_for`], for a value that must be awaited (an HTTP request, say): the first that
/// `next` gives.
pub async fn wait_for_value<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut next: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = next().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still waiting after {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct TestEnv {
    pub sim: Simulator,
    pub dir: TempDir,
    pub config: Config,
    /// The PostgreSQL database the warehouse is in; `None`: the SQLite file at
    /// `config.warehouse.path`.
    pub pg: Option<crate::pg::Database>,
}

/// Which warehouse a scenario syncs into: the conformance scenarios run on each
/// (`conformance!` in `main.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    Sqlite,
    Postgres,
}

impl Dest {
    /// Whether `test` can run on this destination here; says so on stderr when not.
    pub fn available(self, test: &str) -> bool {
        match self {
            Dest::Sqlite => true,
            Dest::Postgres => crate::pg::available(test),
        }
    }
}

/// How the client authenticates in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    Static,
    OAuth,
}

impl TestEnv {
    pub async fn start(options: SimulatorOptions) -> TestEnv {
        Self::start_with(options, Auth::Static).await
    }

    pub async fn start_with(options: SimulatorOptions, auth: Auth) -> TestEnv {
        let sim = Simulator::start("127.0.0.1:0".parse().unwrap(), options)
            .await
            .expect("simulator starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let config = test_config(&sim, dir.path().join("warehouse.db"), auth);
        TestEnv {
            sim,
            dir,
            config,
            pg: None,
        }
    }

    /// [`TestEnv::start`] with the warehouse in `dest` (a new database for PostgreSQL).
    pub async fn start_on(options: SimulatorOptions, dest: Dest) -> TestEnv {
        Self::start_with_on(options, Auth::Static, dest).await
    }

    pub async fn start_with_on(options: SimulatorOptions, auth: Auth, dest: Dest) -> TestEnv {
        let mut env = Self::start_with(options, auth).await;
        if dest == Dest::Postgres {
            env.use_postgres(crate::pg::database());
        }
        env
    }

    /// Points the test's configuration at `db` from now on.
    pub fn use_postgres(&mut self, db: crate::pg::Database) {
        self.config.warehouse.destination = DestinationConfig::Postgres(PostgresConfig {
            url: db.url.clone(),
            password: None,
            schema: db.schema.clone(),
        });
        self.pg = Some(db);
    }

    /// An engine writing into this test's warehouse, wherever it is.
    pub fn engine(&self) -> Engine {
        engine_for(&self.config)
    }

    pub fn schedules(&self) -> Vec<Uuid> {
        self.sim.schedule_uids()
    }

    /// One incremental pass of `schedules`, as `callsync sync` runs it.
    pub async fn pass(&self, schedules: &[Uuid]) -> Vec<PassReport> {
        let engine = self.engine();
        let plan = PassPlan::incremental(engine.settings());
        let reports = engine
            .sync_all(schedules, &plan, &CancellationToken::new())
            .await;
        engine.close().await;
        reports
    }

    /// With a dialer making child-only changes (`child_changes_without_bump`): lets it work
    /// until it has changed calls, syncs until the warehouse equals the truth, then lets it
    /// make changes and syncs again incrementally, until a change the pass could not see (one
    /// that left `updated_at` alone) was made. Afterwards the warehouse differs from the truth
    /// in ways only a reconciliation can see. Decided by events (the truth changed, a
    /// difference remains), never by how long the dialer ran.
    pub async fn make_child_only_changes(&self, schedules: &[Uuid]) {
        let truths =
            || -> Vec<Vec<OutboundCall>> { schedules.iter().map(|s| self.sim.truth(*s)).collect() };
        let seeded = truths();
        wait_for("the dialer changes calls", || truths() != seeded).await;
        self.sim.set_dialer_running(false);
        self.pass_ok(schedules).await;
        self.assert_matches_truth(schedules);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let synced = truths();
            self.sim.set_dialer_running(true);
            wait_for("the dialer changes calls", || truths() != synced).await;
            self.sim.set_dialer_running(false);
            self.pass_ok(schedules).await;
            if schedules
                .iter()
                .any(|s| !self.diff_from(*s, &self.sim.truth(*s)).is_empty())
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no child-only change within {PATIENCE:?}: an incremental pass saw every change"
            );
        }
    }

    /// A pass that must succeed for every schedule.
    pub async fn pass_ok(&self, schedules: &[Uuid]) -> Vec<PassReport> {
        let reports = self.pass(schedules).await;
        for r in &reports {
            assert!(
                r.succeeded(),
                "pass of {} failed: {:?}",
                r.schedule,
                r.result
            );
        }
        reports
    }

    /// Creates the (empty) warehouse, as any process that opens it for writing does.
    pub fn create_warehouse(&self) {
        drop(
            Warehouse::open(&self.warehouse_path(), Duration::from_secs(5))
                .expect("warehouse opens"),
        );
    }

    pub fn snapshot(&self, schedule: Uuid) -> Snapshot {
        if let Some(db) = &self.pg {
            return expected::pg_snapshot(db, schedule);
        }
        Warehouse::open(&self.warehouse_path(), Duration::from_secs(5))
            .expect("warehouse opens")
            .snapshot(Some(schedule))
            .expect("snapshot")
    }

    /// The warehouse holds exactly what the service shows: every call, every child row,
    /// nothing missing, nothing extra.
    pub fn assert_matches_truth(&self, schedules: &[Uuid]) {
        for schedule in schedules {
            self.assert_holds(*schedule, &self.sim.truth(*schedule));
        }
        self.assert_no_bad_requests();
    }

    /// Differences between the warehouse's rows for `schedule` and what `calls` (the
    /// service's JSON) make under the table contract, mapped independently of the product's
    /// own mapping (`expected.rs`).
    pub fn diff_from(&self, schedule: Uuid, calls: &[OutboundCall]) -> Vec<String> {
        match &self.pg {
            None => expected::differences(&self.warehouse_path(), schedule, calls),
            Some(db) => expected::pg_differences(db, schedule, calls),
        }
    }

    /// The warehouse's rows for `schedule` are exactly those of `calls`.
    pub fn assert_holds(&self, schedule: Uuid, calls: &[OutboundCall]) {
        const SHOWN: usize = 30;
        let diff = self.diff_from(schedule, calls);
        assert!(
            diff.is_empty(),
            "warehouse differs from the service for schedule {schedule} ({} calls expected, {} differences{}):\n{}",
            calls.len(),
            diff.len(),
            if diff.len() > SHOWN {
                ", the first shown"
            } else {
                ""
            },
            diff[..diff.len().min(SHOWN)].join("\n")
        );
    }

    /// The client never sends a request the service rejects as malformed.
    pub fn assert_no_bad_requests(&self) {
        let bad: Vec<_> = self
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.status == 400)
            .collect();
        assert!(bad.is_empty(), "the client caused 400s: {bad:#?}");
    }

    /// The SQLite file of the test's configuration (where it would be, on PostgreSQL).
    pub fn warehouse_path(&self) -> PathBuf {
        self.dir.path().join("warehouse.db")
    }

    /// A TOML configuration for the `callsync` binary pointing at this simulator and
    /// warehouse; `sync_extra` lines go into `[sync]`.
    pub fn write_config(&self, sync_extra: &str) -> PathBuf {
        let schedules: Vec<String> = self
            .schedules()
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect();
        let text = format!(
            "[api]\nbase_url = \"{base}\"\naccess_token = \"{token}\"\n\n\
             [api.retry]\ninitial_interval_ms = 5\nmax_interval_secs = 1\n\n\
             [warehouse]\n{warehouse}\n\n\
             [sync]\nschedules = [{schedules}]\n{sync_extra}\n\
             [log]\nlevel = \"warn\"\n",
            base = self.sim.base_url(),
            token = self.sim.access_token(),
            warehouse = match &self.pg {
                None => format!("path = \"{}\"", self.warehouse_path().display()),
                Some(db) => format!("url = \"{}\"\nschema = \"{}\"", db.url, db.schema),
            },
            schedules = schedules.join(", "),
        );
        let path = self.dir.path().join("callsync.toml");
        std::fs::write(&path, text).expect("config written");
        path
    }
}

/// An engine writing into the warehouse `config` names, as `callsync sync` starts one.
pub fn engine_for(config: &Config) -> Engine {
    let backend =
        callsync::warehouse::open(&config.warehouse).expect("the warehouse is configured");
    Engine::start(config, backend.as_ref(), Mode::Write).expect("engine starts")
}

pub fn test_config(sim: &Simulator, warehouse: PathBuf, auth: Auth) -> Config {
    let auth = match auth {
        Auth::Static => AuthConfig::Static(Secret::new(sim.access_token())),
        Auth::OAuth => AuthConfig::OAuth(OAuthConfig {
            token_url: sim.token_url(),
            client_id: sim.client_id().to_owned(),
            client_secret: Secret::new(sim.client_secret()),
            scope: None,
        }),
    };
    config_for(sim.base_url().clone(), auth, sim.schedule_uids(), warehouse)
}

/// A test configuration for the service at `base_url` (the simulator, or a test's own
/// fake): quick retries, pages of 100, the warehouse at `warehouse`.
pub fn config_for(
    base_url: url::Url,
    auth: AuthConfig,
    schedules: Vec<Uuid>,
    warehouse: PathBuf,
) -> Config {
    Config {
        api: ApiConfig {
            base_url,
            auth: Some(auth.into()),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            requests_per_second: None,
            detail_concurrency: 4,
            max_response_bytes: 32 * 1024 * 1024,
            create_settle: Duration::from_secs(60),
            retry: RetryConfig {
                max_attempts: 12,
                max_elapsed: Duration::from_secs(30),
                initial_interval: Duration::from_millis(5),
                max_interval: Duration::from_millis(100),
                multiplier: 2.0,
            },
        },
        warehouse: WarehouseConfig {
            destination: DestinationConfig::Sqlite { path: warehouse },
            busy_timeout: Duration::from_secs(10),
            keep_runs: Some(Duration::from_secs(90 * 86_400)),
            timezone: chrono_tz::UTC,
        },
        sync: SyncConfig {
            schedules,
            schedule_names: Default::default(),
            schedule_campaigns: Default::default(),
            lookback: Duration::from_secs(5),
            cron: callsync::config::CronSchedule::parse("0 */5 * * * *").unwrap(),
            page_size: 100,
            details: DetailsMode::Auto,
            concurrency: 4,
            filter: Default::default(),
            reconcile_cron: None,
            reconcile_window: Duration::from_secs(7 * 86_400),
            shutdown_timeout: Duration::from_secs(10),
            behind_after: Duration::from_secs(120),
            max_clock_skew: Duration::from_secs(300),
            max_lag: Duration::from_secs(3600),
            instance: None,
        },
        log: LogConfig::default(),
        metrics: MetricsConfig::default(),
        backup: None,
        source: None,
    }
}

/// `PRAGMA integrity_check` and the number of calls of a warehouse (or a backup), read
/// read-only as a BI reader would: a read-write connection closing last would remove the WAL.
pub fn integrity_and_calls(path: &std::path::Path) -> (String, i64) {
    let read_only = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn = rusqlite::Connection::open_with_flags(path, read_only).expect("opens");
    let check = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    let calls = conn
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .expect("count");
    (check, calls)
}

/// The results `Destination::write_pages` gives, one a page, in order.
pub fn write_pages(
    dest: &mut dyn callsync::warehouse::Destination,
    pages: Vec<callsync::warehouse::PageBatch>,
) -> Vec<Result<callsync::warehouse::PageWrite, callsync::warehouse::WarehouseError>> {
    let mut results = Vec::new();
    dest.write_pages(pages, &mut |written| results.push(written));
    results
}

/// Records the start of a pass of `kind` as a pass opens one (`Destination::open_pass`,
/// with no other walker to defer to); its row's id.
pub fn start_run(
    dest: &mut dyn callsync::warehouse::Destination,
    schedule: Uuid,
    kind: callsync::warehouse::RunKind,
    started_at: callsync::service::Timestamp,
    walker: &callsync::warehouse::ProcessIdentity,
) -> callsync::warehouse::RunId {
    use callsync::warehouse::{PassOpened, PassStart};
    let start = PassStart {
        schedule,
        kind,
        started_at,
        walker,
        unless_walked_since: None,
    };
    match dest.open_pass(&start).expect("the pass opens") {
        PassOpened::Started { run: Some(run), .. } => run,
        other => panic!("the pass's start is recorded: {other:?}"),
    }
}
