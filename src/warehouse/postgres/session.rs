//! The connection helpers every file of the PostgreSQL warehouse uses: the runtime that
//! drives connections, waiting for an answer on the caller's thread, connecting (and `ping`
//! for `/healthz`), errors with their step and the column read, and instants in
//! PostgreSQL's microseconds. Nothing here knows `PgWarehouse`.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::FromSql;
use tokio_postgres::{Client, Row};

use super::target::PgTarget;
use super::tls;
use crate::warehouse::error::WarehouseError;

/// How long connecting may take when the URI sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The runtime that drives every PostgreSQL connection of the process (its I/O only: the
/// callers wait on their own threads).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("callsync-postgres")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Waits for `future` on this thread (a tokio-postgres request: its connection is driven by
/// [`runtime`]).
pub(super) fn wait<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// No answer came within the patience given to [`wait_within`].
#[derive(Debug)]
pub(super) struct Unanswered;

/// [`wait`], for at most `patience`: a connection the network has cut without a word (a
/// partition, a NAT's timeout, a failover) never answers, and the kernel may take minutes to
/// say so, or never does when what went silent is a proxy. The timer runs on [`runtime`], so
/// this works on any thread, inside another runtime or not.
pub(super) fn wait_within<F: Future>(
    patience: Duration,
    future: F,
) -> Result<F::Output, Unanswered> {
    // The runtime exists: a connection was made on it before anything waits on one.
    let Ok(runtime) = runtime() else {
        return Err(Unanswered);
    };
    let _timers = runtime.enter();
    futures::executor::block_on(tokio::time::timeout(patience, future)).map_err(|_| Unanswered)
}

/// Opens a connection to `target`, driven on [`runtime`] until the client is dropped.
pub(super) fn connect(target: &PgTarget) -> Result<Client, WarehouseError> {
    connect_session(target).map(|(client, _)| client)
}

/// [`connect`], with the handle that ends the connection's task: aborting it closes the
/// socket at once (the server then frees the session's locks as soon as it hears of it), and
/// `Client::is_closed` turns true.
pub(super) fn connect_session(
    target: &PgTarget,
) -> Result<(Client, tokio::task::AbortHandle), WarehouseError> {
    let connection_error = |cause: String| WarehouseError::Connect {
        target: target.display().to_owned(),
        cause,
        advice: UNREACHABLE,
    };
    let tls = tls::connector(target).map_err(connection_error)?;
    let mut config = target.config.clone();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    session_settings(&mut config, target.schema());
    keep_alive(&mut config);
    let runtime =
        runtime().map_err(|e| connection_error(format!("cannot start its runtime: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let task = runtime.spawn(async move {
        match config.connect(tls).await {
            Ok((client, connection)) => {
                let _ = tx.send(Ok(client));
                drive(connection).await;
            }
            Err(err) => {
                let _ = tx.send(Err(err));
            }
        }
    });
    match rx.recv() {
        Ok(Ok(client)) => Ok((client, task.abort_handle())),
        Ok(Err(err)) => {
            Err(refused(target, &err).unwrap_or_else(|| connection_error(problem(&err))))
        }
        Err(_) => Err(connection_error("the connection task stopped".into())),
    }
}

/// What to check when the server does not answer.
const UNREACHABLE: &str = "check warehouse.url, that the server runs and lets this user in (pg_hba.conf), and the password";

/// What to do about a connection the server (or tokio-postgres) refused for what the
/// configuration says.
const CREDENTIALS: &str = "check the user in warehouse.url and the server's pg_hba.conf, and give the password, if the server asks for one, in warehouse.password_file (or the systemd credential warehouse_password), in libpq's password file (passfile= in warehouse.url, $PGPASSFILE, ~/.pgpass), or in $PGPASSWORD";

/// The error for a connection refused for what the configuration says — credentials
/// (SQLSTATE class 28), a database that does not exist (3D000), a password the server asks
/// for and none was given (tokio-postgres's own `invalid configuration`) — which trying
/// again will not cure; `None` for another failure (a server down, a network).
fn refused(target: &PgTarget, err: &tokio_postgres::Error) -> Option<WarehouseError> {
    let advice = match err.as_db_error().map(|db| db.code().code()) {
        Some(code) if code.starts_with("28") => CREDENTIALS,
        Some("3D000") => {
            "create the database (createdb, as its owner-to-be), or name an existing one in warehouse.url"
        }
        // tokio-postgres's kind is not public; its text for this kind is fixed.
        None if err.to_string() == "invalid configuration" => CREDENTIALS,
        _ => return None,
    };
    Some(WarehouseError::Refused {
        target: target.display().to_owned(),
        cause: problem(err),
        advice,
    })
}

/// Drives `connection` until it ends, its server's notices told as callsync's own lines
/// ([`notice_line`]) rather than left to tokio-postgres, which logs each at INFO under its
/// own name.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(tokio_postgres::AsyncMessage::Notice(notice))) => {
                match notice_line(notice.message()) {
                    (true, line) => tracing::warn!(notice = notice.message(), "{line}"),
                    (false, line) => tracing::debug!(notice = notice.message(), "{line}"),
                }
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => {
                tracing::debug!(error = %err, "a PostgreSQL connection ended");
                return;
            }
            None => return,
        }
    }
}

/// What callsync says of a server's notice: `(true, …)` a warning with what to do, for those
/// callsync's own SQL raises; `(false, …)` the others (`… already exists, skipping`), which
/// need no one.
fn notice_line(message: &str) -> (bool, String) {
    if message.starts_with("callsync_reader not created") {
        return (
            true,
            "the read-only role callsync_reader was not created (callsync's PostgreSQL role may not create roles), so BI tools have no role to read through: have a superuser run contrib/postgres/bi-role.sql once (docs/postgres.md): it creates the role and grants it every table and view".to_owned(),
        );
    }
    (false, format!("PostgreSQL notice: {message}"))
}

/// Commits of callsync's sessions do not wait for the server's WAL flush
/// (`synchronous_commit = off`): a pass commits several small transactions (its run's row, each
/// page with its checkpoint), and waiting for a flush each time halved the passes a daemon walks
/// (BENCHMARKS.md, "First sync, PostgreSQL"). It is safe for what
/// callsync keeps: a server crash loses only the last transactions committed (under a second),
/// whole and in order, so a lost page loses its checkpoint with it and the next pass reads those
/// calls from the service again; the checkpoint is never ahead of the data. Options the URI
/// sets (`options=-c …`) come after, so an operator can set it back.
///
/// Two more settings of the server's side come with it, for a connection the network cuts
/// without a word (a partition, a NAT's timeout, a failover): the server probes an idle
/// client after [`KEEPALIVE_IDLE`] (`tcp_keepalives_*`; its default is the system's, two
/// hours), so that a lost daemon's schedule locks are freed for another within a minute, not
/// hours; and a transaction left idle for a minute is ended
/// (`idle_in_transaction_session_timeout`): a page's statements follow each other without a
/// pause, so only a client gone silent mid-page leaves one so long — and its open page would
/// otherwise hold its schedule's fence (`claim.rs`) against the next owner until then.
///
/// Every statement callsync sends reads by key or walks a whole index; none wants a table read
/// from end to end where an index serves (`enable_seqscan = off`, which still lets the server
/// scan a table no index serves). The planner otherwise goes by statistics that a young
/// warehouse outgrows within its first sync: a table last analyzed at a few pages is read end
/// to end for each page's ten stored calls, and a connection that planned the statement so
/// keeps the plan until the next analyze, reading the table end to end where each page needed
/// ten rows (BENCHMARKS.md, "First sync, PostgreSQL"). Nor does any
/// want its plan compiled (`jit = off`): callsync's statements are small, and a plan that must
/// still read a table end to end, its cost raised past `jit_above_cost` by the setting above,
/// was compiled for longer than it ran (BENCHMARKS.md, "First sync, PostgreSQL"). Nor planned again each time it is run
/// (`plan_cache_mode = force_generic_plan`): a statement is prepared once per connection, and
/// its one plan, by key, serves every page. The server otherwise plans a statement anew for
/// each run whose parameters it cannot estimate: a page's outcomes and variables, joined to
/// their attempts by uid, were planned at every page, the planning a large part of the
/// server's work (`pg_stat_statements`; BENCHMARKS.md, "First sync, PostgreSQL").
/// An operator's `options` can set any of these back.
///
/// Last, after the URI's options so that it wins over one there, `search_path` is
/// `warehouse.schema` alone: every statement callsync sends names its tables unqualified, so
/// every session (a writer's, a fork's, the claims', a reader's, a migration's) finds them, and
/// creates them, in that schema and nowhere else. The built-in types and functions live in
/// `pg_catalog`, which PostgreSQL searches first whatever the path says.
fn session_settings(config: &mut tokio_postgres::Config, schema: &str) {
    let ours = format!(
        "-c synchronous_commit=off -c idle_in_transaction_session_timeout=60000 \
         -c tcp_keepalives_idle={} -c tcp_keepalives_interval={} -c tcp_keepalives_count={} \
         -c enable_seqscan=off -c jit=off -c plan_cache_mode=force_generic_plan",
        KEEPALIVE_IDLE.as_secs(),
        KEEPALIVE_INTERVAL.as_secs(),
        KEEPALIVE_RETRIES,
    );
    // A plain identifier (`config/validate.rs`): nothing in it to escape.
    let options = match config.get_options() {
        Some(given) => format!("{ours} {given} -c search_path={schema}"),
        None => format!("{ours} -c search_path={schema}"),
    };
    config.options(options);
}

/// An idle TCP connection is probed after this long without traffic, by both sides.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Then every this long…
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// …and given up after this many probes unanswered: a dead peer is known within 30 s.
const KEEPALIVE_RETRIES: u32 = 3;
/// Data sent and not acknowledged for this long ends the connection (`TCP_USER_TIMEOUT`;
/// Linux's own bound is about 15 minutes of retransmissions).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalives on callsync's connections, and a bound on unacknowledged data, so that the
/// kernel tells a connection the network cut from a quiet one: libpq's defaults probe after
/// two hours, and tokio-postgres's, too. Settings the URI gives (`keepalives=0`,
/// `keepalives_idle=…`, `tcp_user_timeout=…`) win. Unix sockets have no use for them.
fn keep_alive(config: &mut tokio_postgres::Config) {
    if !config.get_keepalives() {
        return;
    }
    // tokio-postgres's default, as it cannot say whether the URI set it.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
}

/// How long `/healthz` waits for the server to answer.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the server answers now, for `/healthz`: a new connection, as the next pass's
/// claims would make, and `SELECT 1`, within [`PING_TIMEOUT`]. Async, on the caller's
/// runtime: a health probe never waits on a writer's thread.
pub async fn ping(target: &PgTarget) -> Result<(), WarehouseError> {
    let unreachable = |cause: String| WarehouseError::Connect {
        target: target.display().to_owned(),
        cause,
        advice: UNREACHABLE,
    };
    let tls = tls::connector(target).map_err(unreachable)?;
    let config = target.config.clone();
    let answered = async {
        let (client, connection) = config
            .connect(tls)
            .await
            .map_err(|e| unreachable(problem(&e)))?;
        let connection = tokio::spawn(connection);
        let answer = client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| unreachable(problem(&e)));
        drop(client);
        let _ = connection.await;
        answer
    };
    tokio::time::timeout(PING_TIMEOUT, answered)
        .await
        .unwrap_or_else(|_| {
            Err(unreachable(format!(
                "no answer within {} s",
                PING_TIMEOUT.as_secs()
            )))
        })
}

/// tokio-postgres's error on one line: the server's message, detail and hint for a database
/// error (its `Display` says only "db error"), else the error and its causes.
pub(crate) fn problem(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        let mut text = format!("{} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return crate::untrusted::untrusted_text(&text, 1000);
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    crate::untrusted::untrusted_text(&text, 1000)
}

pub(super) fn pg_error(
    target: &PgTarget,
    step: &'static str,
    err: &tokio_postgres::Error,
) -> WarehouseError {
    let (target, cause) = (target.display().to_owned(), problem(err));
    // By its code, not its words: a server may answer in another language (`lc_messages`).
    // Every other 0A000 (a feature the server lacks) fails again when asked once more.
    if err.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) {
        return WarehouseError::PlanChanged {
            target,
            step,
            cause,
        };
    }
    WarehouseError::Server {
        target,
        step,
        cause,
    }
}

/// `.pg(target, "step")?` on a tokio-postgres result, as `.sql(path, "step")` on rusqlite's.
pub(super) trait PgContext<T> {
    fn pg(self, target: &PgTarget, step: &'static str) -> Result<T, WarehouseError>;
}

impl<T> PgContext<T> for Result<T, tokio_postgres::Error> {
    fn pg(self, target: &PgTarget, step: &'static str) -> Result<T, WarehouseError> {
        self.map_err(|e| pg_error(target, step, &e))
    }
}

/// `row.column(i, target, "step")`: a column of a row the server sent, read with `try_get`.
/// The server is outside callsync: a column altered by hand, or a table of another version,
/// holds another type than the migrations made, and that is an error naming the column and
/// the query, never a panic (`Row::get` panics).
pub(super) trait RowColumn {
    fn column<'a, T: FromSql<'a>>(
        &'a self,
        idx: usize,
        target: &PgTarget,
        step: &'static str,
    ) -> Result<T, WarehouseError>;
}

impl RowColumn for Row {
    fn column<'a, T: FromSql<'a>>(
        &'a self,
        idx: usize,
        target: &PgTarget,
        step: &'static str,
    ) -> Result<T, WarehouseError> {
        self.try_get(idx).map_err(|e| {
            let name = self
                .columns()
                .get(idx)
                .map_or_else(|| format!("#{idx}"), |c| c.name().to_owned());
            WarehouseError::Server {
                target: target.display().to_owned(),
                step,
                cause: format!(
                    "column `{name}`: {}; the table is not as callsync's migrations made it (compare it with migrations-postgres/)",
                    problem(&e)
                ),
            }
        })
    }
}

/// A timestamp for PostgreSQL: `timestamptz` holds microseconds, so finer instants are
/// truncated towards the past (a checkpoint stored so reads again, never skips).
pub(super) fn micros(t: crate::service::Timestamp) -> time::OffsetDateTime {
    t.truncated(1_000).as_offset_date_time()
}

/// The first microsecond at or after `t`: an instant stored to the microsecond is at or
/// after it exactly when it is at or after `t`.
pub(super) fn micros_from(t: crate::service::Timestamp) -> time::OffsetDateTime {
    let down = t.truncated(1_000);
    if down < t {
        down.saturating_add(std::time::Duration::from_micros(1))
            .as_offset_date_time()
    } else {
        down.as_offset_date_time()
    }
}

pub(super) fn instant(
    target: &PgTarget,
    value: time::OffsetDateTime,
    what: &'static str,
) -> Result<crate::service::Timestamp, WarehouseError> {
    crate::service::Timestamp::try_from(value).map_err(|_| WarehouseError::BadTimestamp {
        path: target.display().into(),
        what,
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn instants_are_truncated_to_microseconds_towards_the_past() {
        for (text, want) in [
            (
                "2026-01-31T09:30:00.123456789Z",
                "2026-01-31T09:30:00.123456Z",
            ),
            (
                "1969-12-31T23:59:59.999999999Z",
                "1969-12-31T23:59:59.999999Z",
            ),
            ("2026-01-31T09:30:00Z", "2026-01-31T09:30:00Z"),
        ] {
            let t = crate::service::Timestamp::parse(text).unwrap();
            let got = crate::service::Timestamp::try_from(super::micros(t)).unwrap();
            assert_eq!(got.to_rfc3339(), want);
            assert!(got <= t);
        }
    }
}

#[cfg(test)]
mod session_settings_tests {
    use super::*;

    const OURS: &str = "-c synchronous_commit=off -c idle_in_transaction_session_timeout=60000 \
         -c tcp_keepalives_idle=15 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3 \
         -c enable_seqscan=off -c jit=off -c plan_cache_mode=force_generic_plan";

    #[test]
    fn commits_do_not_wait_for_the_flush_unless_the_uri_says_so() {
        let mut config: tokio_postgres::Config =
            "postgresql://u@/db?host=/run/postgresql".parse().unwrap();
        session_settings(&mut config, "public");
        assert_eq!(
            config.get_options(),
            Some(format!("{OURS} -c search_path=public").as_str())
        );
        let mut config: tokio_postgres::Config =
            "postgresql://u@/db?options=-c%20synchronous_commit%3Don"
                .parse()
                .unwrap();
        session_settings(&mut config, "public");
        assert_eq!(
            config.get_options(),
            Some(format!("{OURS} -c synchronous_commit=on -c search_path=public").as_str()),
            "the URI's own setting comes after callsync's, and wins"
        );
    }

    /// `warehouse.schema` is the whole search path, after the URI's options: it wins over a
    /// `search_path` there.
    #[test]
    fn the_search_path_is_the_warehouse_s_schema_whatever_the_uri_says() {
        let mut config: tokio_postgres::Config =
            "postgresql://u@/db?options=-c%20search_path%3Delsewhere"
                .parse()
                .unwrap();
        session_settings(&mut config, "analytics");
        assert_eq!(
            config.get_options(),
            Some(format!("{OURS} -c search_path=elsewhere -c search_path=analytics").as_str())
        );
    }

    #[test]
    fn connections_keep_tcp_keepalives_unless_the_uri_says_otherwise() {
        let mut config: tokio_postgres::Config = "postgresql://u@db.example/db".parse().unwrap();
        keep_alive(&mut config);
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        assert_eq!(config.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        let mut config: tokio_postgres::Config =
            "postgresql://u@db.example/db?keepalives_idle=60&tcp_user_timeout=90"
                .parse()
                .unwrap();
        keep_alive(&mut config);
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(90))
        );
        let mut config: tokio_postgres::Config =
            "postgresql://u@db.example/db?keepalives=0".parse().unwrap();
        keep_alive(&mut config);
        assert!(!config.get_keepalives());
        assert_eq!(config.get_keepalives_interval(), None);
    }
}

#[cfg(test)]
mod notice_tests {
    use super::notice_line;

    #[test]
    fn callsyncs_own_notices_are_warnings_with_a_remedy_the_rest_debug() {
        let (warn, line) =
            notice_line("callsync_reader not created: permission denied to create role");
        assert!(warn);
        assert!(
            line.starts_with("the read-only role callsync_reader was not created")
                && line.contains("contrib/postgres/bi-role.sql"),
            "{line}"
        );
        assert_eq!(
            notice_line("relation \"callsync_schema\" already exists, skipping"),
            (
                false,
                "PostgreSQL notice: relation \"callsync_schema\" already exists, skipping"
                    .to_owned()
            )
        );
    }
}
