//! The files callsync makes and opens, on the binary: one name per warehouse, modes never wider
//! than 0640 whatever the umask, no file made or changed beside the warehouse by a read-only
//! command, and nothing left behind by a backup that fails.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use callsync::simulator::SimulatorOptions;

use crate::harness::{TestEnv, integrity_and_calls};
use crate::writable::{chmod, running_as_root};

const NOBODY: u32 = 65534;

/// How the child runs: its umask, a limit on the size of the files it writes, and as
/// `nobody` when the test runs as root (so that permissions bind it).
#[derive(Clone, Copy)]
struct Child {
    umask: u32,
    file_size_limit: Option<u64>,
    as_nobody_if_root: bool,
}

const PLAIN: Child = Child {
    umask: 0o022,
    file_size_limit: None,
    as_nobody_if_root: false,
};

async fn callsync(child: Child, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_callsync"));
    command.args(args).env_remove("RUST_LOG");
    if child.as_nobody_if_root && running_as_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    let Child {
        umask,
        file_size_limit,
        ..
    } = child;
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (umask, setrlimit, signal) and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            if let Some(bytes) = file_size_limit {
                let limit = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A write past the limit fails with EFBIG instead of killing the process.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("callsync exits by itself")
        .expect("callsync runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o7777
}

fn beside(db: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", db.display()))
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

async fn one_schedule(calls: usize) -> TestEnv {
    TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: calls,
        ..SimulatorOptions::default()
    })
    .await
}

/// The configuration `write_config` writes, with the warehouse at `path`, as `name`.
fn config_with_warehouse(env: &TestEnv, name: &str, path: &Path) -> String {
    let text = std::fs::read_to_string(env.write_config("")).unwrap();
    let from = format!("path = \"{}\"", env.warehouse_path().display());
    assert!(text.contains(&from));
    let config = env.dir.path().join(name);
    std::fs::write(
        &config,
        text.replace(&from, &format!("path = \"{}\"", path.display())),
    )
    .unwrap();
    config.to_str().unwrap().to_owned()
}

fn two_names(path: &Path) -> String {
    format!(
        "the warehouse {} has 2 names (hard links to one file): SQLite keeps a -wal and -shm per name, so callsync writing through two of them would corrupt it; remove the other names (`find / -xdev -samefile {}` lists them) and use a symlink where a second path is needed",
        path.display(),
        path.display()
    )
}

/// SQLite names a warehouse's `-wal` and `-shm` after the path it opened: two names of one
/// file would get two WALs, and two writers through them corrupted the file in the probe.
/// Every command refuses such a warehouse through either name, naming the problem; the
/// probe's two backfills at once cannot start, and the file stays intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_with_two_names_is_refused_through_either_name() {
    let env = one_schedule(30).await;
    let schedule = env.schedules()[0].to_string();
    env.pass_ok(&env.schedules()).await;
    let db = env.warehouse_path();
    let backup = env.dir.path().join("backup.db");
    let c = config_with_warehouse(&env, "callsync.toml", &db);
    let out = callsync(PLAIN, &["--config", &c, "backup", backup.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let elsewhere = env.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let hard = elsewhere.join("hard.db");
    std::fs::hard_link(&db, &hard).unwrap();
    let c_hard = config_with_warehouse(&env, "hard.toml", &hard);
    let bytes_before = std::fs::read(&db).unwrap();
    let copy = env.dir.path().join("copy.db");

    for (config, path) in [(&c, &db), (&c_hard, &hard)] {
        for args in [
            vec!["sync"],
            vec!["backfill", "--schedule", &schedule],
            vec!["migrate"],
            vec!["checkpoint", "reset", "--schedule", &schedule],
            vec!["status"],
            vec!["checkpoint", "show"],
            vec!["backup", copy.to_str().unwrap()],
            vec!["restore", backup.to_str().unwrap()],
        ] {
            let out = callsync(PLAIN, &[&["--config", config.as_str()], &args[..]].concat()).await;
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
            assert_eq!(
                stderr(&out),
                format!("error: {}\n", two_names(path)),
                "{args:?}"
            );
        }
        let out = callsync(PLAIN, &["--config", config, "check"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        // A failed check is on stderr.
        let failed = stderr(&out);
        assert!(
            failed.ends_with(&format!("FAILED warehouse: {}\n", two_names(path))),
            "{failed}"
        );
    }
    // The probe: a backfill through each name at once.
    let through_db = ["--config", &c, "backfill", "--schedule", &schedule];
    let through_hard = ["--config", &c_hard, "backfill", "--schedule", &schedule];
    let (a, b) = tokio::join!(callsync(PLAIN, &through_db), callsync(PLAIN, &through_hard));
    assert_eq!((a.status.code(), b.status.code()), (Some(1), Some(1)));
    assert!(!copy.exists());
    assert_eq!(std::fs::read(&db).unwrap(), bytes_before, "nothing written");
    assert!(!beside(&hard, "-wal").exists() && !beside(&hard, "-shm").exists());
    assert_eq!(integrity_and_calls(&db), ("ok".to_owned(), 30));

    // A backup target with two names: overwriting would replace one of them only.
    std::fs::remove_file(&hard).unwrap();
    std::fs::hard_link(&backup, &copy).unwrap();
    let out = callsync(
        PLAIN,
        &["--config", &c, "backup", copy.to_str().unwrap(), "--force"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "error: cannot back up the warehouse {}: {} has 2 names (hard links to one file): overwriting it would replace this name only and leave the others' old copy; remove it first or choose another path\n",
            db.display(),
            copy.display()
        )
    );
    // One name again: everything works.
    let out = callsync(PLAIN, &["--config", &c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Every file holding calls that callsync creates — the warehouse, its `-wal` and `-shm`, a
/// backup, a restored warehouse — is 0640 at most (0600 for a backup of a warehouse its group
/// may not read), whatever the umask: the modes are given when the file is created, before
/// any byte is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_holding_calls_are_never_wider_than_0640_whatever_the_umask() {
    for umask in [0o000, 0o022] {
        let env = one_schedule(20).await;
        let db = env.warehouse_path();
        let c = config_with_warehouse(&env, "callsync.toml", &db);
        let child = Child { umask, ..PLAIN };
        let out = callsync(child, &["--config", &c, "sync"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        for file in [db.clone(), beside(&db, "-wal"), beside(&db, "-shm")] {
            assert_eq!(mode(&file), 0o640, "umask {umask:o}: {}", file.display());
        }

        for (warehouse, backup) in [
            (0o600, 0o600),
            (0o640, 0o640),
            (0o644, 0o640),
            (0o666, 0o640),
        ] {
            chmod(&db, warehouse);
            let copy = env.dir.path().join(format!("copy-{warehouse:o}.db"));
            let out = callsync(child, &["--config", &c, "backup", copy.to_str().unwrap()]).await;
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            assert_eq!(
                mode(&copy),
                backup,
                "umask {umask:o}, warehouse {warehouse:o}"
            );
        }

        // A restore keeps the old warehouse's mode, and the WAL files it opens take it.
        chmod(&db, 0o600);
        for suffix in ["-wal", "-shm"] {
            std::fs::remove_file(beside(&db, suffix)).unwrap();
        }
        let copy = env.dir.path().join("copy-644.db");
        let out = callsync(child, &["--config", &c, "restore", copy.to_str().unwrap()]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        for file in [db.clone(), beside(&db, "-wal"), beside(&db, "-shm")] {
            assert_eq!(mode(&file), 0o600, "umask {umask:o}: {}", file.display());
        }
        // Without one, a new warehouse's.
        for file in [db.clone(), beside(&db, "-wal"), beside(&db, "-shm")] {
            std::fs::remove_file(file).unwrap();
        }
        let out = callsync(child, &["--config", &c, "restore", copy.to_str().unwrap()]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        for file in [db.clone(), beside(&db, "-wal"), beside(&db, "-shm")] {
            assert_eq!(mode(&file), 0o640, "umask {umask:o}: {}", file.display());
        }
    }
}

/// A backup whose writes fail midway (here the file size limit, as a full disk would) leaves
/// no partial copy, journal or WAL file in the target's directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_that_fails_midway_leaves_nothing_behind() {
    let env = one_schedule(300).await;
    env.pass_ok(&env.schedules()).await;
    let db = env.warehouse_path();
    // Larger than SQLite's page cache (2 MiB), so the copy writes pages before it commits:
    // 8 MiB of padding in a table of the test's own.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE test_padding (b BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8)
             INSERT INTO test_padding SELECT zeroblob(1 << 20) FROM n;",
        )
        .unwrap();
    let c = config_with_warehouse(&env, "callsync.toml", &db);
    let backups = env.dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let copy = backups.join("copy.db");
    let size = std::fs::metadata(&db).unwrap().len();
    let child = Child {
        file_size_limit: Some(size / 2),
        ..PLAIN
    };
    let out = callsync(child, &["--config", &c, "backup", copy.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!(
            "error: cannot back up the warehouse {}: ",
            db.display()
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(listing(&backups), Vec::<String>::new());
    // Without the limit the same backup is made, and is whole.
    let out = callsync(PLAIN, &["--config", &c, "backup", copy.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(listing(&backups), vec!["copy.db".to_owned()]);
    assert_eq!(integrity_and_calls(&copy), ("ok".to_owned(), 300));
}

/// Read-only commands neither create the `-wal`/`-shm` nor change their mode: SQLite would
/// create them with the file's mode (0444 here) or give an empty one that mode, and `run`
/// could not write them once the file is writable again. As the probe did: a warehouse made
/// 0444 without its WAL files, then with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_create_no_wal_files_and_change_none() {
    let env = one_schedule(20).await;
    env.pass_ok(&env.schedules()).await;
    let db = env.warehouse_path();
    let c = config_with_warehouse(&env, "callsync.toml", &db);
    let copy = env.dir.path().join("copy.db");
    let (wal, shm) = (beside(&db, "-wal"), beside(&db, "-shm"));
    // The files belong to the user the commands run as (SQLite changes the mode of its own).
    chmod(&PathBuf::from(&c), 0o644);
    if running_as_root() {
        for file in [env.dir.path(), &db, &wal, &shm] {
            std::os::unix::fs::chown(file, Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }
    let nobody = Child {
        as_nobody_if_root: true,
        ..PLAIN
    };
    let read_only: [(&[&str], i32); 4] = [
        (&["status"], 0),
        (&["checkpoint", "show"], 0),
        (&["backup", copy.to_str().unwrap(), "--force"], 0),
        // Fails (the file is not writable), having read it.
        (&["check"], 1),
    ];

    std::fs::remove_file(&wal).unwrap();
    std::fs::remove_file(&shm).unwrap();
    chmod(&db, 0o444);
    for (args, code) in read_only {
        let out = callsync(nobody, &[&["--config", c.as_str()], args].concat()).await;
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(!wal.exists() && !shm.exists(), "{args:?} made WAL files");
    }
    assert_eq!(integrity_and_calls(&copy), ("ok".to_owned(), 20));
    chmod(&db, 0o644);
    let out = callsync(nobody, &["--config", &c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((mode(&wal), mode(&shm)), (0o644, 0o644));
    assert_eq!(
        std::fs::metadata(&wal).unwrap().len(),
        0,
        "emptied on close"
    );

    chmod(&db, 0o444);
    for (args, code) in read_only {
        let out = callsync(nobody, &[&["--config", c.as_str()], args].concat()).await;
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert_eq!((mode(&wal), mode(&shm)), (0o644, 0o644), "{args:?}");
    }
    chmod(&db, 0o644);
    let out = callsync(nobody, &["--config", &c, "sync"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
