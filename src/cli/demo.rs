//! `callsync demo`: the whole thing on one machine in under a minute.
//!
//! Starts the simulator on loopback with a few schedules and the dialer running, writes a
//! configuration for it under `./demo/`, runs the daemon against it for a short while with a
//! progress line per tick, then prints what an analyst looks at first — read from the BI
//! views — and how to open `./demo/callsync.db`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::output::print_out;
use crate::config::{self, Config};
use crate::service::Timestamp;
use crate::simulator::{DialerOptions, Simulator, SimulatorOptions};
use crate::warehouse::{Backend, Overview};

/// How long the daemon runs in the demo.
const RUN_FOR: Duration = Duration::from_secs(12);

/// The first line of the configuration the demo writes: how a later demo knows the directory
/// is its own.
const CONFIG_HEADER: &str =
    "# Written by `callsync demo` for its in-process simulator (gone when the demo ends).";

/// `dir` holds something the demo did not write: it would delete `callsync.db` and overwrite
/// `callsync.toml` there (`--dir /var/lib/callsync` would wipe a production warehouse).
#[derive(Debug, thiserror::Error)]
#[error(
    "demo: {} holds {name}, which no earlier demo wrote; choose a new or empty directory with --dir, or pass --force to overwrite its callsync.toml and delete its callsync.db",
    dir.display()
)]
pub struct ForeignDirectory {
    dir: PathBuf,
    name: String,
}

/// Runs the demo in `dir`, which must be new, empty or an earlier demo's unless `force`.
pub async fn run(dir: &Path, force: bool) -> Result<()> {
    if !force {
        refuse_foreign_directory(dir)?;
    }
    let sim = Simulator::start(
        "127.0.0.1:0".parse().context("loopback address")?,
        SimulatorOptions {
            schedules: 3,
            calls_per_schedule: 400,
            seed: 2026,
            dialer: Some(DialerOptions {
                tick: Duration::from_millis(100),
                calls_per_tick: 6,
                ..DialerOptions::default()
            }),
            ..SimulatorOptions::default()
        },
    )
    .await
    .context("cannot start the simulator")?;
    let config = write_config(dir, &sim)?;
    let path = demo_warehouse(&config)?;
    let warehouse = crate::warehouse::open(&config.warehouse)?;
    print_out(format_args!(
        "callsync demo\n  simulator  {} (3 schedules, 1,200 calls, dialer running)\n  \
         config     {}\n  warehouse  {}\n  running the daemon for {} s (a pass every 2 s)…\n",
        sim.base_url(),
        dir.join("callsync.toml").display(),
        path.display(),
        RUN_FOR.as_secs()
    ))?;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(crate::daemon::run(config, async {
        let _ = stopped.await;
    }));
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    ticker.tick().await;
    for _ in 0..RUN_FOR.as_secs() / 2 {
        ticker.tick().await;
        print_out(format_args!("  {}\n", progress_line(warehouse.as_ref())))?;
    }
    let _ = stop.send(());
    daemon
        .await
        .context("the daemon task failed")?
        .context("the daemon failed")?;
    sim.shutdown().await;

    let overview = (warehouse.reader())
        .and_then(|w| w.overview())
        .with_context(|| format!("cannot read {}", path.display()))?;
    print_out(render(&overview, &path))?;
    Ok(())
}

/// Refuses `dir` when it holds anything but an earlier demo's files: its configuration
/// (known by [`CONFIG_HEADER`]) and the warehouse with its companions (`-wal`, `-shm`, the
/// lock directory), which are all named `callsync.db…`.
fn refuse_foreign_directory(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let config = dir.join("callsync.toml");
    let demo_config = std::fs::read_to_string(&config)
        .is_ok_and(|text| text.lines().next() == Some(CONFIG_HEADER));
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name == "callsync.toml" || name.starts_with("callsync.db");
        if !(ours && demo_config) {
            return Err(ForeignDirectory {
                dir: dir.to_owned(),
                name,
            }
            .into());
        }
    }
    Ok(())
}

fn write_config(dir: &Path, sim: &Simulator) -> Result<Config> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let db = dir.join("callsync.db");
    for stale in ["callsync.db", "callsync.db-wal", "callsync.db-shm"] {
        let _ = std::fs::remove_file(dir.join(stale));
    }
    // Named, so the views' schedule_name (and Datasette) show a name next to each call.
    let schedules: String = sim
        .schedule_uids()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "[[sync.schedule]]\nuid = \"{s}\"\nname = \"Demo schedule {}\"\n",
                i + 1
            )
        })
        .collect();
    let text = format!(
        "{CONFIG_HEADER}\n\
         [api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n\n\
         [warehouse]\npath = \"{}\"\n\n\
         [sync]\ncron = \"*/2 * * * * *\"\nlookback_secs = 2\n\n{}\n\
         [log]\nlevel = \"warn\"\n",
        sim.base_url(),
        sim.access_token(),
        db.display(),
        schedules
    );
    let file: PathBuf = dir.join("callsync.toml");
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(config::load(Some(&file))?)
}

/// The file the demo's configuration names (it writes `warehouse.path`).
fn demo_warehouse(config: &config::Config) -> Result<PathBuf> {
    config
        .warehouse
        .destination
        .sqlite_path()
        .map(Path::to_owned)
        .context("the demo's configuration names no SQLite warehouse")
}

fn progress_line(warehouse: &dyn Backend) -> String {
    match (warehouse.reader()).and_then(|w| w.status_at(Timestamp::now())) {
        Ok(rows) => {
            let calls: i64 = rows.iter().map(|r| r.calls).sum();
            let attempts: i64 = rows.iter().map(|r| r.attempts).sum();
            let passes = rows.iter().filter(|r| r.last_run.is_some()).count();
            format!(
                "{calls} calls, {attempts} attempts in the warehouse ({passes} schedules synced)"
            )
        }
        Err(_) => "waiting for the first pass…".to_owned(),
    }
}

fn render(o: &Overview, path: &Path) -> String {
    let mut out = String::from("\nCalls by status and progress (call_results)\n");
    for (status, progress, n) in &o.by_status {
        let _ = writeln!(out, "  {status:<10} {progress:<12} {n:>6}");
    }
    out.push_str("\nTop outcomes (outcome_results)\n");
    for (name, n) in &o.top_outcomes {
        let _ = writeln!(out, "  {name:<20} {n:>6}");
    }
    out.push_str("\nAnswer rate per schedule (dialled calls, test calls left out)\n");
    for (schedule, dialled, answered) in &o.answer_rates {
        let rate = if *dialled > 0 {
            100.0 * *answered as f64 / *dialled as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  {schedule:<36}  {answered:>5} / {dialled:<5} {rate:5.1}%"
        );
    }
    let db = path.display();
    let _ = write!(
        out,
        "\nOpen the warehouse:\n  sqlite3 {db} 'SELECT status, progress, count(*) FROM call_results GROUP BY 1, 2'\n  \
         datasette {db} --metadata contrib/datasette/metadata.json   (pip install datasette; from callsync's repository)\nThe views and example queries are in docs/analyse.md; every table in docs/warehouse.md.\n"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(dir: &Path) -> Option<String> {
        refuse_foreign_directory(dir)
            .err()
            .map(|e| e.to_string().replace(&dir.display().to_string(), "<dir>"))
    }

    #[test]
    fn only_a_new_or_empty_directory_or_an_earlier_demos_is_used() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("demo");
        assert_eq!(refusal(&dir), None, "a new directory");
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(refusal(&dir), None, "an empty directory");

        // A production warehouse, without the demo's configuration beside it.
        std::fs::write(dir.join("callsync.db"), "data").unwrap();
        assert_eq!(
            refusal(&dir).as_deref(),
            Some(
                "demo: <dir> holds callsync.db, which no earlier demo wrote; choose a new or empty directory with --dir, or pass --force to overwrite its callsync.toml and delete its callsync.db"
            )
        );
        std::fs::write(dir.join("callsync.toml"), "[api]\n").unwrap();
        assert!(refusal(&dir).is_some(), "an operator's configuration");

        // An earlier demo's files.
        std::fs::write(
            dir.join("callsync.toml"),
            format!("{CONFIG_HEADER}\n[api]\n"),
        )
        .unwrap();
        std::fs::write(dir.join("callsync.db-wal"), "").unwrap();
        std::fs::create_dir(dir.join("callsync.db.locks")).unwrap();
        assert_eq!(refusal(&dir), None);
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        assert!(refusal(&dir).unwrap().contains(" holds notes.txt, "));
    }
}
