//! The one integration-test binary: the simulator on loopback, real SQLite files, a
//! PostgreSQL server of its own (`pg.rs`).

mod harness;
// A PostgreSQL server for the run, a database per test.
mod pg;

/// The conformance suite a destination must pass: `conformance!(name, scenario)` runs the
/// async `scenario(Dest)` on every destination in the list below, as `name::sqlite`,
/// `name::postgres` (a destination that cannot run here is skipped, loudly:
/// `CALLSYNC_SKIP_POSTGRES=1`); `conformance!(name, scenario, [case => arg, …])` runs
/// `scenario(Dest, arg)` for each case, as `name::sqlite::case`. A new back end adds one line
/// to the list (and its `Dest` in `harness.rs`, which sets its configuration).
macro_rules! conformance {
    ($name:ident, $scenario:ident $(, $cases:tt)?) => {
        conformance!(@each $name, $scenario, [$($cases)?],
            sqlite => Sqlite,
            postgres => Postgres,
        );
    };
    (@each $name:ident, $scenario:ident, [], $($test:ident => $dest:ident,)*) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let dest = crate::harness::Dest::$dest;
                    if dest.available(concat!(module_path!(), "::", stringify!($test))) {
                        super::$scenario(dest).await
                    }
                }
            )*
        }
    };
    (@each $name:ident, $scenario:ident, [$cases:tt], $($test:ident => $dest:ident,)*) => {
        mod $name {
            $(conformance!(@cases $test, $dest, $scenario, $cases);)*
        }
    };
    (@cases $test:ident, $dest:ident, $scenario:ident, [$($case:ident => $arg:expr),+ $(,)?]) => {
        mod $test {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let dest = crate::harness::Dest::$dest;
                    if dest.available(concat!(module_path!(), "::", stringify!($case))) {
                        super::super::$scenario(dest, $arg).await
                    }
                }
            )+
        }
    };
}
// The warehouse a schedule must hold, mapped from the service's JSON independently.
mod expected;
// The PostgreSQL warehouse: TLS, migrations, claims, the BI role.
mod postgres;
// warehouse.schema: the warehouse in a schema of its own, two in one database, bad names refused.
mod postgres_schema;
// Incremental sync against the simulator in every setting (ties, churn, faults, …).
mod sync;
// A service ordering ties differently on every request: every group read whole, or a loud failure.
mod tie_order;
// Issue 49's load: churn, faults and pages in flight on every tie order; no false verdict.
mod live_ties;
// status's read side: more passes behind than it reads, a hostile walker, alike on every destination.
mod status;
// Clocks that disagree: a service's Date far from ours, calls stamped past it; status's lag bound.
mod clock;
// A page garbled after earlier pages of the pass were committed (a fake service).
mod bad_page;
// Bytes the service should not send: a name not UTF-8, with a NUL or half a surrogate pair, a page nested too deep.
mod bad_bytes;
// SIGKILL inside a pass, at points chosen by construction: the checkpoint is never ahead of the data.
mod crash;
// callsync migrate to schema 6 killed mid-copy: schema 5 stays whole; the next run migrates.
mod migrate;
// backup and restore on the binary.
mod backup;
// A warehouse callsync cannot write: refused at start, warned about by status; file owners.
mod writable;
// Files: one name per warehouse, modes under any umask, nothing made by readers or left by a failed backup.
mod files;
// backfill: ranges, checkpoint rules, the per-schedule lock.
mod backfill;
// The binary: subcommands, exit codes, one-line errors.
mod cli;
// A hostile service's control characters reach no terminal, log line or warehouse row.
mod hostile;
// A service that lies about one call a page: stamps ahead of the order or the clock.
mod lies;
// Calls set aside: a field that does not fit, a uid under two schedules, a uid twice.
mod set_aside;
// callsync check: credentials, schedules and warehouse, one line each, before the daemon starts.
mod check;
// The simulator, probed over HTTP rule by rule.
mod simulator;
// Daemons sharing the schedules: 3 processes, one killed mid-pass; walked since the tick.
mod sharing;
// A proxy that silences chosen PostgreSQL connections without closing them (a partition).
mod proxy;
// Fencing: a lock session cut without a word; no page commits after another's takeover.
mod fence;
// callsync run: ticks sent by hand, overlap, backoff, reconciliations, SIGTERM, the crons.
mod daemon;
// The systemd units: verify is silent, exposure is low.
mod systemd;
// Supply chain: the crates the user asked for stay in one module each; deny.toml says why.
mod supply_chain;
// Log lines: each pass line carries its own schedule's span, never another's.
mod logs;
// Every pass ends at the service's clock; the checkpoint never passes it.
mod horizon;
// Requests waiting in the limiter: their token taken when sent, counted only once sent.
mod queued;
// The request rate adapts to a rate-limited service; schedules share it.
mod rate;
// The write half on the command line: campaigns, schedules, calls.
mod campaign;
// The analyst's kit: the Datasette metadata's canned queries against the truth.
mod analyst;
// Descriptions on PostgreSQL, the BI role's script, the outcome pivot on both back ends.
mod described;
// The binary as scripts use it: --json lines, exit codes, -q/-v, completions, man pages.
mod scripting;
// callsync config: each key's value and source, secrets redacted.
mod config_cmd;
// No user info in a service URL; a token over plain http:// to another host is warned of.
mod url_credentials;
// The binary on a terminal: colours, NO_COLOR, the progress bar and log lines.
mod terminal;
// contrib/: the alerting rules and the dashboard select series exported from start-up.
mod monitoring;
// README.md, ARCHITECTURE.md and docs/: command lines, keys, links and figures that cannot drift,
// and the blocks that run.
mod docs;
