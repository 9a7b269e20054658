//! The configuration file a benchmark runs callsync with.

use std::path::{Path, PathBuf};

use callsync::simulator::Simulator;

/// Writes `DIR/callsync.toml`: callsync's defaults for everything but what it reads (`sim`'s
/// address, token and schedules), where it writes (`warehouse`: the `[warehouse]` key,
/// `path = "…"` or `url = "…"`), `sync` (more `[sync]` lines, each ending with a newline; ""
/// for none) and the log level.
pub fn write_config(
    dir: &Path,
    sim: &Simulator,
    warehouse: &str,
    sync: &str,
    log_level: &str,
) -> PathBuf {
    let schedules: Vec<String> = sim
        .schedule_uids()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect();
    let path = dir.join("callsync.toml");
    let text = format!(
        "[api]\nbase_url = \"{}\"\naccess_token = \"{}\"\n[warehouse]\n{warehouse}\n[sync]\nschedules = [{}]\n{sync}[log]\nlevel = \"{log_level}\"\n",
        sim.base_url(),
        sim.access_token(),
        schedules.join(", "),
    );
    std::fs::write(&path, text).expect("the config is written");
    path
}
