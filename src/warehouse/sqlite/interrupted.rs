//! The SQLite warehouse's side of marking passes whose process ended
//! (`warehouse/interrupted.rs`): its unfinished rows, each schedule's claim taken through the
//! file's lock.

use rusqlite::params;

use super::error::{SqlContext, WarehouseError};
use super::file_lock::LockError;
use super::handle::Warehouse;
use super::locks::ScheduleLock;
use crate::warehouse::interrupted::{Unfinished, by_schedule, log_marked};
use crate::warehouse::records::PROCESS_ENDED;

impl Warehouse {
    /// Marks the unfinished passes whose process is certainly gone [`PROCESS_ENDED`];
    /// returns how many.
    pub(super) fn mark_interrupted_runs(&mut self) -> Result<u64, WarehouseError> {
        let rows = self.unfinished_runs()?;
        let mut marked = 0;
        for (schedule, ids) in by_schedule(rows) {
            // Held while the rows are marked: no pass of the schedule starts meanwhile.
            let _claim = match ScheduleLock::acquire(&self.path, schedule) {
                Ok(claim) => claim,
                Err(LockError::Busy) => continue,
                Err(LockError::Io(cause)) => {
                    return Err(WarehouseError::Io {
                        path: self.path.clone(),
                        step: "lock a schedule of",
                        cause,
                    });
                }
            };
            let mut statement = self
                .conn
                .prepare_cached(
                    "UPDATE sync_runs SET finished_at = started_at, outcome = 'interrupted',
                       error = ?2
                     WHERE id = ?1 AND finished_at IS NULL",
                )
                .sql(&self.path, "marking an interrupted pass")?;
            for id in &ids {
                marked += statement
                    .execute(params![id, PROCESS_ENDED])
                    .sql(&self.path, "marking an interrupted pass")?
                    as u64;
            }
            log_marked(schedule, &ids);
        }
        Ok(marked)
    }

    fn unfinished_runs(&self) -> Result<Vec<Unfinished>, WarehouseError> {
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT id, schedule_uid, host, pid FROM sync_runs WHERE finished_at IS NULL",
            )
            .sql(&self.path, "reading unfinished passes")?;
        let rows = statement
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .sql(&self.path, "reading unfinished passes")?;
        // A uid that is not one cannot be claimed: left as it is.
        Ok(rows
            .into_iter()
            .filter_map(|(id, schedule, host, pid)| {
                Some(Unfinished {
                    id,
                    schedule: schedule.parse().ok()?,
                    host,
                    pid,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::service::Timestamp;
    use crate::warehouse::records::host_name;
    use crate::warehouse::records::{ProcessIdentity, RunKind};
    use uuid::Uuid;

    /// A process id that certainly ended: a child's, waited for.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    fn outcome(w: &Warehouse, id: i64) -> (Option<String>, Option<String>, bool) {
        w.conn
            .query_row(
                "SELECT outcome, error, finished_at = started_at FROM sync_runs WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get::<_, Option<bool>>(2)?.unwrap_or(false),
                    ))
                },
            )
            .unwrap()
    }

    #[test]
    fn only_passes_whose_process_is_certainly_gone_are_marked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let mut w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        let here = host_name();
        let walker = |host: &str, pid: u32| ProcessIdentity {
            host: host.to_owned(),
            instance: host.to_owned(),
            pid,
        };
        let schedule = |n: u128| Uuid::from_u128(n);
        let mut start = |n: u128, by: ProcessIdentity| {
            w.start_run(schedule(n), RunKind::Incremental, Timestamp::now(), &by)
                .unwrap()
                .get()
        };
        // This machine, its process gone: marked.
        let dead_here = start(1, walker(&here, dead_pid()));
        // This machine, a live process of that id (init): left, whatever the claim says.
        let alive_here = start(2, walker(&here, 1));
        // Another machine, nothing holding the schedule: marked.
        let elsewhere = start(3, walker("other-host", 1));
        // Another machine, the schedule held (a pass running there): left.
        let held_elsewhere = start(4, walker("other-host", 1));
        drop(w);
        let held = ScheduleLock::acquire(&path, schedule(4)).unwrap();

        let w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        let marked = (
            Some("interrupted".to_owned()),
            Some(PROCESS_ENDED.to_owned()),
            true,
        );
        assert_eq!(outcome(&w, dead_here), marked);
        assert_eq!(outcome(&w, elsewhere), marked);
        assert_eq!(outcome(&w, alive_here), (None, None, false));
        assert_eq!(outcome(&w, held_elsewhere), (None, None, false));
        // Not a pass that walked, for daemons sharing the schedules.
        let since = Timestamp::parse("2000-01-01T00:00:00Z").unwrap();
        assert_eq!(
            w.walked_since(schedule(1), RunKind::Incremental, since)
                .unwrap(),
            None
        );
        drop(w);

        // Once the pass holding it has gone, its row is marked by the next writer.
        drop(held);
        let w = Warehouse::open(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(outcome(&w, held_elsewhere), marked);
        assert_eq!(outcome(&w, alive_here), (None, None, false));
    }
}
