//! `callsync migrate`, `backup` and `restore`: the warehouse file as a whole.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::output::print_out;
use crate::config::Config;
use crate::warehouse::Warehouse;

pub(super) fn migrate(config: &Config) -> Result<ExitCode> {
    if let Some(target) = super::destination::postgres(config)? {
        let report = crate::warehouse::postgres::PgWarehouse::migrate(&target)?;
        print_out(format_args!(
            "warehouse {}: schema version {} -> {}\n",
            target.display(),
            report.from,
            report.to
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = &config.warehouse.path;
    // Every error it returns names the path already.
    let report = Warehouse::migrate(path, config.warehouse.busy_timeout)?;
    print_out(format_args!(
        "warehouse {}: schema version {} -> {}\n",
        path.display(),
        report.from,
        report.to
    ))?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn backup(config: &Config, dest: &std::path::Path, force: bool) -> Result<ExitCode> {
    super::destination::refuse_on_postgres(config, "backup")?;
    let path = &config.warehouse.path;
    // Every error opening it names the path already.
    let warehouse = Warehouse::open_read_only(path)?;
    let report = warehouse
        .backup_to(dest, force)
        .with_context(|| format!("cannot back up the warehouse {}", path.display()))?;
    // Not `println!`: the copy is made, and a closed stdout must not turn that into a panic.
    let _ = writeln!(
        std::io::stdout(),
        "backed up {} to {}: {} bytes, {}",
        path.display(),
        report.path.display(),
        report.bytes,
        report.contents
    );
    Ok(ExitCode::SUCCESS)
}

pub(super) fn restore(config: &Config, backup: &std::path::Path) -> Result<ExitCode> {
    super::destination::refuse_on_postgres(config, "restore")?;
    let path = &config.warehouse.path;
    let report = crate::warehouse::restore(backup, path, config.warehouse.busy_timeout)?;
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
        path.display(),
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
