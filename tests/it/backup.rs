//! `callsync backup` and `callsync restore` on the binary: a restored warehouse is intact and
//! its next passes catch up with the service exactly.

use callsync::simulator::SimulatorOptions;

use crate::harness::{TestEnv, integrity_and_calls};

async fn callsync(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("callsync runs")
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restored_after_more_syncs_is_intact_and_catches_up_with_the_truth() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 2,
        calls_per_schedule: 150,
        ..SimulatorOptions::default()
    })
    .await;
    let schedules = env.schedules();
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let db = env.warehouse_path();
    env.pass_ok(&schedules).await;

    let copy = env.dir.path().join("backup.db");
    let out = callsync(&["--config", c, "backup", copy.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bytes = std::fs::metadata(&copy).unwrap().len();
    assert_eq!(
        stdout(&out),
        format!(
            "backed up {} to {}: {bytes} bytes, schema version {}, 2 schedules, 300 calls\n",
            db.display(),
            copy.display(),
            callsync::warehouse::sqlite::latest_version()
        )
    );

    // The service moves on, and so does the warehouse.
    env.sim.bulk_create_now(schedules[0], 40);
    let touched: Vec<_> = env.sim.truth(schedules[1])[..25]
        .iter()
        .map(|c| c.uid)
        .collect();
    env.sim.touch_calls(&touched);
    env.pass_ok(&schedules).await;
    assert_eq!(integrity_and_calls(&db), ("ok".to_owned(), 340));

    let out = callsync(&["--config", c, "restore", copy.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bytes = std::fs::metadata(&db).unwrap().len();
    assert_eq!(
        stdout(&out),
        format!(
            "restored {} into {}: {bytes} bytes, schema version {}, 2 schedules, 300 calls; removed the old {}-wal and {}-shm\n",
            copy.display(),
            db.display(),
            callsync::warehouse::sqlite::latest_version(),
            db.display(),
            db.display()
        )
    );
    assert_eq!(integrity_and_calls(&db), ("ok".to_owned(), 300));

    env.pass_ok(&schedules).await;
    assert_eq!(integrity_and_calls(&db), ("ok".to_owned(), 340));
    env.assert_matches_truth(&schedules);
}

/// `--json` on `migrate`, `backup` and `restore`: one object on stdout, what the text says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_backup_and_restore_print_one_json_object() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    let db = env.warehouse_path();
    let json = |out: &std::process::Output| -> serde_json::Value {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(stdout(out).lines().count(), 1, "{}", stdout(out));
        serde_json::from_str(&stdout(out)).expect("one JSON object")
    };
    let migrated = json(&callsync(&["--config", c, "migrate", "--json"]).await);
    let latest = callsync::warehouse::sqlite::latest_version();
    assert_eq!(
        migrated,
        serde_json::json!({"warehouse": db.display().to_string(), "from": 0, "to": latest})
    );
    env.pass_ok(&env.schedules()).await;

    let copy = env.dir.path().join("backup.db");
    let backed_up =
        json(&callsync(&["--config", c, "backup", copy.to_str().unwrap(), "--json"]).await);
    let bytes = std::fs::metadata(&copy).unwrap().len();
    assert_eq!(
        backed_up,
        serde_json::json!({
            "schema_version": latest, "schedules": 1, "calls": 20,
            "warehouse": db.display().to_string(), "path": copy.display().to_string(), "bytes": bytes,
        })
    );
    let restored =
        json(&callsync(&["--config", c, "restore", copy.to_str().unwrap(), "--json"]).await);
    assert_eq!(restored["backup"], copy.display().to_string());
    assert_eq!(restored["warehouse"], db.display().to_string());
    assert_eq!(restored["calls"], 20);
    assert!(restored["removed"].is_array(), "{restored}");
}

/// `restore DIR`: a directory is named as one, with the file to pass (the newest backup in
/// it, when there is one); exit 2, and the warehouse is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_a_directory_says_so_and_which_file_to_pass() {
    let env = TestEnv::start(SimulatorOptions {
        schedules: 1,
        calls_per_schedule: 20,
        ..SimulatorOptions::default()
    })
    .await;
    let config = env.write_config("");
    let c = config.to_str().unwrap();
    env.pass_ok(&env.schedules()).await;
    let backups = env.dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    let dir = backups.to_str().unwrap();

    let out = callsync(&["--config", c, "restore", dir]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: cannot restore {dir}: it is a directory, not a backup file; it holds no backup (*.db): pass the backup file itself, as `callsync backup PATH` or the daemon (backup.dir, callsync-YYYYMMDDTHHMMSSZ.db) wrote it\n"
        )
    );
    for name in [
        "callsync-20251125T213000Z.db",
        "callsync-20251126T003000Z.db",
    ] {
        let out = callsync(&["--config", c, "backup", &format!("{dir}/{name}")]).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let out = callsync(&["--config", c, "restore", dir]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: cannot restore {dir}: it is a directory, not a backup file; pass one backup file in it, e.g. the newest: callsync restore {dir}/callsync-20251126T003000Z.db\n"
        )
    );
    assert_eq!(
        integrity_and_calls(&env.warehouse_path()),
        ("ok".to_owned(), 20)
    );
}
