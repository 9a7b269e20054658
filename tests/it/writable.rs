//! A warehouse callsync cannot write: `run`, `sync` and `backfill` refuse to start with one line
//! naming the file or directory; `status` warns that passes may have failed unrecorded; a
//! restore run as root leaves the warehouse to its user.
//!
//! "Cannot write" is made for the child process as the test's user allows: as root (who may
//! write anything) the child runs as `nobody` on root's files; otherwise the test takes the
//! write permission away.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use callsync::simulator::SimulatorOptions;

use crate::harness::TestEnv;

const NOBODY: u32 = 65534;

pub(crate) fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub(crate) fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// `callsync args`, as `nobody` when the test runs as root.
pub(crate) async fn callsync_as_nobody_if_root(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"));
    command.args(args).env_remove("RUST_LOG").kill_on_drop(true);
    if running_as_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("callsync exits by itself")
        .expect("callsync runs")
}

/// A synced warehouse and a config that `nobody` may read.
async fn synced() -> (TestEnv, String) {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    env.pass_ok(&env.schedules()).await;
    let config = env.write_config("");
    chmod(env.dir.path(), 0o755);
    chmod(&config, 0o644);
    (env, config.to_str().unwrap().to_owned())
}

pub(crate) fn not_writable(db: &Path, what: &str, path: &Path) -> String {
    format!(
        "cannot write the warehouse {}: {what} {} is not writable (Permission denied (os error 13)); give the user callsync runs as write permission on it, or choose a writable warehouse.path",
        db.display(),
        path.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_sync_refuse_a_read_only_warehouse_file_naming_it() {
    let (env, c) = synced().await;
    let db = env.warehouse_path();
    if !running_as_root() {
        chmod(&db, 0o444);
    }
    let expected = not_writable(&db, "the file", &db);
    let out = callsync_as_nobody_if_root(&["--config", &c, "sync"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("error: {expected}\n")
    );
    let out = callsync_as_nobody_if_root(&["--config", &c, "run"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("error: the daemon could not start: {expected}\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_refuses_a_warehouse_in_a_read_only_directory_naming_it() {
    let (env, c) = synced().await;
    let db = env.warehouse_path();
    // SQLite must create these beside the file: the directory needs write permission.
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(format!("{}{suffix}", db.display())).expect("rm");
    }
    if running_as_root() {
        chmod(&db, 0o666);
    } else {
        chmod(env.dir.path(), 0o555);
    }
    let out = callsync_as_nobody_if_root(&["--config", &c, "sync"]).await;
    chmod(env.dir.path(), 0o755);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: {}\n",
            not_writable(&db, "the directory", env.dir.path())
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_warns_that_passes_may_have_failed_unrecorded_on_a_read_only_warehouse() {
    let (env, c) = synced().await;
    let db = env.warehouse_path();
    chmod(&db, 0o444);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", &c, "status"])
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("callsync runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "warning: {} has no write permission for its owner (mode 444): callsync cannot record its passes there, so passes since then may have failed unrecorded and those below be out of date; make it writable again and see the daemon's log (journalctl -u callsync)\n",
            db.display()
        )
    );
    let table = String::from_utf8_lossy(&out.stdout);
    // The table itself is unchanged: the warning goes to stderr.
    assert!(
        table.contains(": ok; 1 pages, 20 calls seen, 20 written"),
        "{table}"
    );
}

/// `sudo callsync restore`: the restored warehouse and its WAL files belong to the service
/// user, as the old one did. Only root can give files away, so only root can check it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_run_as_root_keeps_the_warehouse_owned_by_its_user() {
    use std::os::unix::fs::MetadataExt;
    if !running_as_root() {
        return;
    }
    let (env, c) = synced().await;
    let db = env.warehouse_path();
    let copy = env.dir.path().join("copy.db");
    let wal_files = [
        format!("{}-wal", db.display()),
        format!("{}-shm", db.display()),
    ];
    for file in [db.display().to_string()].iter().chain(&wal_files) {
        std::os::unix::fs::chown(file, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", &c, "backup", copy.to_str().unwrap()])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", &c, "restore", copy.to_str().unwrap()])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for file in [db.display().to_string()].iter().chain(&wal_files) {
        let meta = std::fs::metadata(file).expect("exists");
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "{file}");
    }
    // And the service user can sync into it.
    let out = callsync_as_nobody_if_root(&["--config", &c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `sudo callsync migrate` (or `backfill`) creating the warehouse in the service user's
/// directory leaves it, and its `-wal` and `-shm`, to that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_created_by_root_belongs_to_its_directorys_owner() {
    use std::os::unix::fs::MetadataExt;
    if !running_as_root() {
        return;
    }
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let state = env.dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(env.dir.path(), 0o755);
    let config = std::fs::read_to_string(env.write_config("")).unwrap();
    let db = env.warehouse_path();
    let moved = state.join("callsync.db");
    let text = config.replace(&db.display().to_string(), &moved.display().to_string());
    let c = env.dir.path().join("state.toml");
    std::fs::write(&c, text).unwrap();
    chmod(&c, 0o644);
    let c = c.to_str().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", c, "migrate"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", moved.display());
        let meta = std::fs::metadata(&file).expect("exists");
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "{file}");
    }
    let out = callsync_as_nobody_if_root(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
