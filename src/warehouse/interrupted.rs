//! Passes cut short by their process's end (`kill -9`, a crash, a lost machine) leave their
//! `sync_runs` row unfinished for ever; the next process that opens the warehouse for
//! writing marks them `interrupted` ([`super::records::PROCESS_ENDED`]) once it is certain their process is
//! gone.
//!
//! Several daemons may share a warehouse, so an unfinished row is as likely a pass running
//! now in another process. Certainty comes from the schedule's claim: a pass takes it before
//! its row is written and lets it go after its row is finished, and the operating system (the
//! SQLite file's OFD lock) or the server (PostgreSQL's advisory lock) frees it when its
//! process dies. So a schedule's unfinished rows are marked only while this process holds the
//! schedule's claim itself, taken without waiting, and nothing else when it cannot be taken.
//! On this machine a row whose process id is still alive (and is not this process) is left
//! alone as well: a second, cheaper certainty, and one that holds even where a claim could
//! be lost (a PostgreSQL session cut off).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::records::host_name;

/// An unfinished `sync_runs` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unfinished {
    pub id: i64,
    pub schedule: Uuid,
    pub host: Option<String>,
    pub pid: Option<i64>,
}

/// `rows` grouped by schedule, without those whose process may still run here.
pub(crate) fn by_schedule(rows: Vec<Unfinished>) -> BTreeMap<Uuid, Vec<i64>> {
    let here = host_name();
    let mut schedules: BTreeMap<Uuid, Vec<i64>> = BTreeMap::new();
    for row in rows {
        if !may_still_run(&row, &here) {
            schedules.entry(row.schedule).or_default().push(row.id);
        }
    }
    schedules
}

/// On this machine (`here`), a process of the row's id that is alive and not this one:
/// perhaps the pass's, so it is left alone. Elsewhere only the claim can tell.
fn may_still_run(row: &Unfinished, here: &str) -> bool {
    let Some(pid) = row
        .pid
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0)
    else {
        return false;
    };
    row.host.as_deref() == Some(here) && pid != std::process::id() as i32 && alive(pid)
}

/// Whether a process `pid` exists (one of another user's too: `EPERM`).
fn alive(pid: i32) -> bool {
    // `from_raw` takes no negative pid (it would name a process group).
    let Some(pid) = (pid > 0)
        .then(|| rustix::process::Pid::from_raw(pid))
        .flatten()
    else {
        return false;
    };
    // Signal 0 sends nothing; it only checks that the process exists.
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(errno) => errno == rustix::io::Errno::PERM,
    }
}

/// Logs each row marked, once.
pub(crate) fn log_marked(schedule: Uuid, ids: &[i64]) {
    for id in ids {
        tracing::info!(
            run = id,
            %schedule,
            "a pass whose process ended mid-pass (killed or crashed) marked interrupted"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::alive;

    #[test]
    fn a_process_is_alive_until_it_has_been_reaped() {
        assert!(alive(std::process::id() as i32), "this process");
        // Another user's process (init, when not root) answers EPERM: still alive.
        assert!(alive(1), "pid 1");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!alive(pid), "a child that exited and was reaped");
        assert!(!alive(0) && !alive(-1), "no pid");
    }
}
