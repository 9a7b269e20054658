//! `callsync migrate`, `backup` and `restore`: the warehouse file as a whole.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::output::print_out;
use super::usage::UsageError;
use crate::config::Config;
use crate::warehouse::Capability;

/// One JSON object on a line of stdout, for `--json` (paths as `display` writes them, so a
/// name that is not UTF-8 cannot fail the line).
fn print_json(value: &serde_json::Value) -> Result<()> {
    // Not `println!`: the work is done, and a closed stdout must not turn that into a panic.
    let _ = writeln!(std::io::stdout(), "{value}");
    Ok(())
}

fn contents_json(contents: &crate::warehouse::Contents) -> serde_json::Value {
    serde_json::json!({
        "schema_version": contents.schema_version,
        "schedules": contents.schedules,
        "calls": contents.calls,
    })
}

pub(super) fn migrate(config: &Config, json: bool) -> Result<ExitCode> {
    let backend = super::destination::backend(config)?;
    let name = backend.name();
    // Every error it returns names the file or the database already.
    let report = backend.migrate()?;
    if json {
        print_json(&serde_json::json!({
            "warehouse": name,
            "from": report.from,
            "to": report.to,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    print_out(format_args!(
        "warehouse {name}: schema version {} -> {}\n",
        report.from, report.to
    ))?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn backup(
    config: &Config,
    dest: &std::path::Path,
    force: bool,
    json: bool,
) -> Result<ExitCode> {
    let backend = super::destination::backend(config)?;
    backend.offers(Capability::Backup)?;
    let path = backend.name();
    // Every error opening it names the path already.
    let warehouse = backend.reader()?;
    let report = warehouse
        .backup_to(dest, force)
        .with_context(|| format!("cannot back up the warehouse {path}"))?;
    if json {
        let mut line = contents_json(&report.contents);
        line["warehouse"] = serde_json::json!(path);
        line["path"] = serde_json::json!(report.path.display().to_string());
        line["bytes"] = serde_json::json!(report.bytes);
        print_json(&line)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Not `println!`: the copy is made, and a closed stdout must not turn that into a panic.
    let _ = writeln!(
        std::io::stdout(),
        "backed up {} to {}: {} bytes, {}",
        path,
        report.path.display(),
        report.bytes,
        report.contents
    );
    Ok(ExitCode::SUCCESS)
}

pub(super) fn restore(config: &Config, backup: &std::path::Path, json: bool) -> Result<ExitCode> {
    let backend = super::destination::backend(config)?;
    backend.offers(Capability::Restore)?;
    if backup.is_dir() {
        return Err(UsageError(restore_from_directory(backup)).into());
    }
    let path = backend.name();
    let report = backend.restore(backup)?;
    if json {
        let mut line = contents_json(&report.contents);
        line["backup"] = serde_json::json!(backup.display().to_string());
        line["warehouse"] = serde_json::json!(path);
        line["bytes"] = serde_json::json!(report.bytes);
        let removed: Vec<String> = report
            .removed
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        line["removed"] = serde_json::json!(removed);
        print_json(&line)?;
        return Ok(ExitCode::SUCCESS);
    }
    let removed: Vec<String> = report
        .removed
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    // Not `println!`: the restore is done, and a closed stdout must not turn that into a panic.
    let _ = writeln!(
        std::io::stdout(),
        "restored {} into {}: {} bytes, {}; {}",
        backup.display(),
        path,
        report.bytes,
        report.contents,
        if removed.is_empty() {
            "no old WAL files to remove".to_owned()
        } else {
            format!("removed the old {}", removed.join(" and "))
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// What `restore DIR` says: a directory is no backup; which file in it to pass, the newest
/// `.db` file by name (the daemon's `callsync-YYYYMMDDTHHMMSSZ.db` sort by time) when there
/// is one.
fn restore_from_directory(dir: &std::path::Path) -> String {
    let newest = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "db"))
        .max();
    let which = match newest {
        Some(file) => format!(
            "pass one backup file in it, e.g. the newest: callsync restore {}",
            file.display()
        ),
        None => "it holds no backup (*.db): pass the backup file itself, as `callsync backup PATH` or the daemon (backup.dir, callsync-YYYYMMDDTHHMMSSZ.db) wrote it".to_owned(),
    };
    format!(
        "cannot restore {}: it is a directory, not a backup file; {which}",
        dir.display()
    )
}
