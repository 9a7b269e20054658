//! `WarehouseError`: what can go wrong with any destination, naming the file or the database
//! and the step. A back end turns its driver's errors into these (`sqlite/error.rs`,
//! `postgres/session.rs`), so no driver type crosses the contract.
//!
//! Each message holds its cause, on one line with what to do, so no variant also returns it
//! as `source()` (ARCHITECTURE.md, "Errors").

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WarehouseError {
    #[error(
        "there is no warehouse at {} yet: run `callsync sync` or start the daemon to create it (or check warehouse.path)",
        path.display()
    )]
    Missing { path: PathBuf },
    /// `problem`: the database's words on one line, and what to do.
    #[error("cannot open the warehouse {}: {problem}", path.display())]
    Open { path: PathBuf, problem: String },
    #[error("cannot migrate the warehouse {}: {problem}", path.display())]
    Migrate { path: PathBuf, problem: String },
    /// Its schema version could not be read (a read-only command never migrates).
    #[error("cannot read the warehouse {}: {problem}", path.display())]
    Unreadable { path: PathBuf, problem: String },
    #[error(
        "{} is an SQLite database of another program, not a callsync warehouse (it holds tables, not callsync's); point warehouse.path at a new file or at a callsync warehouse",
        path.display()
    )]
    NotAWarehouse { path: PathBuf },
    /// Tables of another program where callsync would create its own, in a database server's
    /// schema: the configuration names the wrong database. `kind` names the server,
    /// `advice` says what to point the configuration at instead.
    #[error(
        "{target} is a {kind} database of another program, not a callsync warehouse (its schema {schema} holds tables, not callsync's: {tables}); {advice}"
    )]
    ForeignSchema {
        kind: &'static str,
        target: String,
        schema: String,
        /// The first few, for the message.
        tables: String,
        advice: &'static str,
    },
    #[error(
        "the warehouse {} has schema version {found}, newer than this callsync knows ({supported}); upgrade callsync",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: usize,
        supported: usize,
    },
    #[error(
        "the warehouse {} has schema version {found}, this callsync needs {supported}; run `callsync migrate` as the warehouse's owner",
        path.display()
    )]
    TooOld {
        path: PathBuf,
        found: usize,
        supported: usize,
    },
    #[error(
        "the warehouse {} is being restored by `callsync restore`; run this again when it has finished",
        path.display()
    )]
    Restoring { path: PathBuf },
    #[error(
        "the warehouse {} was deleted while callsync had it open: what it wrote since is lost; restart callsync (systemctl restart callsync) to create a new one, or restore a backup with `callsync restore`",
        path.display()
    )]
    Deleted { path: PathBuf },
    #[error(
        "the warehouse {} was replaced by another file while callsync had it open; restart callsync (systemctl restart callsync) to use the new file (`callsync restore` does this safely)",
        path.display()
    )]
    Replaced { path: PathBuf },
    #[error(
        "the warehouse {} has {names} names (hard links to one file): SQLite keeps a -wal and -shm per name, so callsync writing through two of them would corrupt it; remove the other names (`find / -xdev -samefile {}` lists them) and use a symlink where a second path is needed",
        path.display(), path.display()
    )]
    HardLinked { path: PathBuf, names: u64 },
    #[error(
        "{} has {names} names (hard links to one file): overwriting it would replace this name only and leave the others' old copy; remove it first or choose another path",
        path.display()
    )]
    BackupTargetHardLinked { path: PathBuf, names: u64 },
    #[error(
        "the warehouse {} changed while it was copied (a writer opened it meanwhile), so the copy was discarded; run `callsync backup` again",
        path.display()
    )]
    ChangedWhileCopying { path: PathBuf },
    #[error(
        "{} already exists; choose another path, or pass --force to overwrite it",
        path.display()
    )]
    BackupExists { path: PathBuf },
    #[error(
        "{} is the warehouse itself; back up to another path (to put a backup back, use `callsync restore`)",
        path.display()
    )]
    BackupOverWarehouse { path: PathBuf },
    #[error("cannot restore {}: {problem}; choose an intact callsync backup", path.display())]
    BadBackup { path: PathBuf, problem: String },
    #[error(
        "the warehouse {} is in use by another callsync process (the daemon, sync, backfill or checkpoint); stop it (systemctl stop callsync) and run restore again",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error(
        "cannot write the warehouse {}: {what} {} is not writable ({cause}); give the user callsync runs as write permission on it, or choose a writable warehouse.path",
        warehouse.display(), path.display()
    )]
    NotWritable {
        warehouse: PathBuf,
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot {step} {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        step: &'static str,
        cause: std::io::Error,
    },
    #[error("warehouse {}: {step}: {problem}", path.display())]
    Sql {
        path: PathBuf,
        step: &'static str,
        problem: String,
    },
    /// The database server did not answer (or not over TLS as configured); trying again may.
    #[error("cannot connect to the warehouse {target}: {cause}; {advice}")]
    Connect {
        target: String,
        cause: String,
        advice: &'static str,
    },
    /// The server would not let callsync in as configured (credentials, a database that does
    /// not exist): a configuration error, which trying again does not cure.
    #[error("cannot connect to the warehouse {target}: {cause}; {advice}")]
    Refused {
        target: String,
        cause: String,
        advice: &'static str,
    },
    /// A database server refused or failed a statement.
    #[error("warehouse {target}: {step}: {cause}")]
    Server {
        target: String,
        step: &'static str,
        cause: String,
    },
    /// A uid or instant callsync formed for a row is not one (only a bug in callsync can
    /// form one): the page was not sent.
    #[error(
        "warehouse {target}: {step}: callsync formed `{}` where a uid or timestamp belongs; nothing of the page was written. This is a bug in callsync: report it with this message",
        crate::untrusted::untrusted_text(.value, 100)
    )]
    Unsendable {
        target: String,
        step: &'static str,
        value: String,
    },
    /// A destination answered fewer of a group of passes' openings or ends than it was
    /// asked (`Destination::open_passes`, `Destination::finish_runs`): only a bug in
    /// callsync does that. The passes without an answer fail; nothing else is lost.
    #[error(
        "the warehouse answered no result for a pass's {step}; the pass fails and the next one starts from its checkpoint. This is a bug in callsync: report it with this message"
    )]
    Unanswered { step: &'static str },
    /// The server refused a statement this connection prepared before (0A000: "cached plan
    /// must not change result type", after someone changed a column's type under a running
    /// callsync). Nothing it asked was done; the warehouse prepares its statements anew and
    /// asks once more (`postgres/mod.rs`, `replanning`), so this is seen only when that fails
    /// too.
    #[error("warehouse {target}: {step}: {cause}")]
    PlanChanged {
        target: String,
        step: &'static str,
        cause: String,
    },
    /// This process's claim on a schedule no longer holds on the server: its lock connection
    /// closed (`taken: false`), or another process claimed the schedule since, which a page's
    /// fence under this claim showed, this page's or one before it (`taken: true`;
    /// `postgres/claim.rs`). The page was not written.
    #[error("{}", claim_lost(*schedule, target, *taken))]
    ClaimLost {
        schedule: uuid::Uuid,
        target: String,
        taken: bool,
    },
    /// Another process holds `schedule`'s claim on the destination `name`.
    #[error(
        "schedule {schedule} is being synced by another callsync process (it holds the schedule's lock on {name}); wait for it to finish, or stop it"
    )]
    Busy { schedule: uuid::Uuid, name: String },
    #[error("cannot lock a schedule on the warehouse {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The destination does not offer `capability` (a PostgreSQL warehouse has no file to
    /// back up); `reason` says what to use instead.
    #[error("{reason}")]
    Declined {
        capability: Capability,
        reason: String,
    },
    #[error(
        "warehouse {}: {what} holds `{}`, which is not a callsync timestamp",
        path.display(), crate::untrusted::untrusted_text(.value, 100)
    )]
    BadTimestamp {
        path: PathBuf,
        what: &'static str,
        value: String,
    },
    #[error(
        "warehouse {}: {what} holds `{}`, which is not a schedule uid; restore a backup, or delete that schedule's rows",
        path.display(), crate::untrusted::untrusted_text(.value, 100)
    )]
    BadUid {
        path: PathBuf,
        what: &'static str,
        value: String,
    },
}

impl WarehouseError {
    /// The configuration names the wrong thing: another program's database, a PostgreSQL
    /// server that refuses the configured user or database. Exit code 2: running again, or a
    /// restart by systemd, changes nothing until the configuration does.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            WarehouseError::NotAWarehouse { .. }
                | WarehouseError::ForeignSchema { .. }
                | WarehouseError::Refused { .. }
                | WarehouseError::Declined { .. }
        )
    }
}

/// What a destination may offer beyond the contract every one fulfils
/// ([`crate::warehouse::Destination`]); one that does not declines with
/// [`WarehouseError::Declined`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `callsync backup` and the daemon's `[backup]`: a consistent copy into a file.
    Backup,
    /// `callsync restore`: a backup file put in the warehouse's place.
    Restore,
    /// `callsync upload`'s ledger of sent chunks, kept beside the warehouse.
    UploadLedger,
    /// Records written by commands (a dry run writes none).
    Writing,
    /// The demo's overview of the calls, read from the BI views.
    Overview,
}

fn claim_lost(schedule: uuid::Uuid, target: &str, taken: bool) -> String {
    let what = if taken {
        "was claimed by another callsync process after this one's lock on it was lost (its lock connection was cut or closed)"
    } else {
        "lost this process's lock with its lock connection"
    };
    format!(
        "schedule {schedule} {what} on the warehouse {target}; the page was not written, and nothing is lost: the pages committed before stand, and the schedule's next pass goes on from its checkpoint"
    )
}
