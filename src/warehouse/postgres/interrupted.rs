//! Passes cut short by their process's end, marked `interrupted` on PostgreSQL when the
//! warehouse is opened for writing: the SQLite warehouse's rule (`warehouse/interrupted.rs`),
//! the schedule's claim being its advisory lock. Taken here as a transaction-level lock
//! (`pg_try_advisory_xact_lock`, the same keys as the claims' session-level locks, and in
//! conflict with them): held until the rows are marked and committed, released by the
//! commit, never left behind.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::PgWarehouse;
use super::claim::lock_key;
use super::session::{PgContext, RowColumn, wait};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::interrupted::{Unfinished, by_schedule, log_marked};
use crate::warehouse::records::PROCESS_ENDED;

const STEP: &str = "marking interrupted passes";

impl PgWarehouse {
    /// Marks the unfinished passes whose process is certainly gone; returns how many.
    pub(super) fn mark_interrupted_runs(&self) -> Result<u64, WarehouseError> {
        let rows = wait(self.client()?.query(
            "SELECT id, schedule_uid, host, pid FROM sync_runs WHERE finished_at IS NULL",
            &[],
        ))
        .pg(&self.target, STEP)?;
        let rows = rows
            .iter()
            .map(|r| {
                Ok(Unfinished {
                    id: r.column(0, &self.target, STEP)?,
                    schedule: r.column(1, &self.target, STEP)?,
                    host: r.column(2, &self.target, STEP)?,
                    pid: r.column(3, &self.target, STEP)?,
                })
            })
            .collect::<Result<Vec<_>, WarehouseError>>()?;
        let schedules = by_schedule(rows);
        if schedules.is_empty() {
            return Ok(0);
        }
        wait(self.client()?.batch_execute("BEGIN")).pg(&self.target, STEP)?;
        let marked = self.mark_unclaimed(&schedules);
        let marked = self.end_transaction(marked, STEP)?;
        for (schedule, ids) in &marked {
            log_marked(*schedule, ids);
        }
        Ok(marked.values().map(|ids| ids.len() as u64).sum())
    }

    /// Inside a transaction: the rows of each schedule whose claim no session holds, marked;
    /// returns them.
    fn mark_unclaimed(
        &self,
        schedules: &BTreeMap<Uuid, Vec<i64>>,
    ) -> Result<BTreeMap<Uuid, Vec<i64>>, WarehouseError> {
        let mut marked = BTreeMap::new();
        for (schedule, ids) in schedules {
            let free: bool = wait(self.client()?.query_one(
                "SELECT pg_try_advisory_xact_lock($1)",
                &[&lock_key(*schedule, self.target.schema())],
            ))
            .pg(&self.target, STEP)?
            .column(0, &self.target, STEP)?;
            if !free {
                continue;
            }
            let done = wait(self.client()?.query(
                "UPDATE sync_runs SET finished_at = started_at, outcome = 'interrupted',
                   error = $2
                 WHERE id = ANY($1) AND finished_at IS NULL RETURNING id",
                &[ids, &PROCESS_ENDED],
            ))
            .pg(&self.target, STEP)?;
            let done: Vec<i64> = done
                .iter()
                .map(|r| r.column(0, &self.target, STEP))
                .collect::<Result<_, _>>()?;
            marked.insert(*schedule, done);
        }
        Ok(marked)
    }
}
