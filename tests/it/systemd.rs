//! The systemd units: `systemd-analyze verify` prints nothing (it only warns on unknown keys,
//! so silence is the check) — with its man page check on, as on a fresh install without
//! callsync's man page —, and `security --offline` scores 2.0 or less; the sysusers.d file
//! creates the user and group. Run where the tools are installed; elsewhere the test says so
//! and checks the units' text.

use std::path::{Path, PathBuf};
use std::process::Command;

const UNITS: [&str; 2] = ["callsync.service", "callsync-backfill@.service"];

/// The units with ExecStart pointing at the built binary (verify checks that it exists).
fn units_in(dir: &Path) -> Vec<PathBuf> {
    UNITS
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("systemd")
                    .join(name),
            )
            .expect("unit file");
            let text = text.replace("/usr/local/bin/callsync", env!("CARGO_BIN_EXE_callsync"));
            let path = dir.join(name);
            std::fs::write(&path, text).expect("unit written");
            path
        })
        .collect()
}

fn analyze_available() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn units_declare_what_the_operator_relies_on() {
    let daemon = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/callsync.service"),
    )
    .unwrap();
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "RestartPreventExitStatus=2\n",
        "Documentation=",
        "User=callsync",
        "Group=callsync",
        "StateDirectory=callsync",
        "ConfigurationDirectory=callsync",
        "UMask=0027",
        "LoadCredential=access_token:",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "LimitNOFILE=8192\n",
        "EnvironmentFile=-/etc/callsync/callsync.env\n",
        "SystemCallErrorNumber=EPERM\n",
        "ExecStartPre=-/usr/local/bin/callsync --config /etc/callsync/callsync.toml check\n",
        " run\n",
    ] {
        assert!(daemon.contains(line), "callsync.service lacks {line:?}");
    }
    assert!(
        !daemon.contains("DynamicUser"),
        "BI readers need a fixed group"
    );
    // verify runs man(1) for a man: link, and fails where the page is not installed.
    assert!(!daemon.contains("Documentation=man:"));
    let backfill = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/callsync-backfill@.service"),
    )
    .unwrap();
    for line in [
        "EnvironmentFile=-/etc/callsync/callsync.env\n",
        "SystemCallErrorNumber=EPERM\n",
        "User=callsync\n",
    ] {
        assert!(
            backfill.contains(line),
            "callsync-backfill@.service lacks {line:?}"
        );
    }
}

#[test]
fn sysusers_file_creates_the_user_and_group_the_units_run_as() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/callsync.sysusers");
    let text = std::fs::read_to_string(&file).unwrap();
    let entry: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("u "))
        .expect("a user line")
        .split_whitespace()
        .collect();
    assert_eq!(entry[..3], ["u", "callsync", "-"]);
    assert_eq!(
        entry[entry.len() - 2..],
        ["/var/lib/callsync", "/usr/sbin/nologin"]
    );
    let available = Command::new("systemd-sysusers")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        eprintln!("systemd-sysusers is not installed: its dry run skipped");
        return;
    }
    // A dry run into an empty root: parses the file and says what it would create.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("etc")).unwrap();
    for name in ["passwd", "group"] {
        std::fs::write(root.path().join("etc").join(name), "").unwrap();
    }
    let out = Command::new("systemd-sysusers")
        .arg("--dry-run")
        .arg(format!("--root={}", root.path().display()))
        .arg(&file)
        .output()
        .expect("systemd-sysusers runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("Creating group 'callsync'"), "{printed}");
    assert!(printed.contains("Creating user 'callsync'"), "{printed}");
}

#[test]
fn systemd_analyze_verify_is_silent_and_exposure_is_low() {
    if !analyze_available() {
        eprintln!("systemd-analyze is not installed: verify and security checks skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for unit in units_in(dir.path()) {
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .expect("systemd-analyze runs");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && printed.trim().is_empty(),
            "{}: {printed}",
            unit.display()
        );

        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=true"])
            .arg(&unit)
            .output()
            .expect("systemd-analyze runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let score: f64 = text
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no exposure score in:\n{text}"));
        assert!(score <= 2.0, "{}: exposure {score}", unit.display());
    }
}

/// Under `ProtectSystem=strict` the daemon may write only in its `StateDirectory` (and any
/// `ReadWritePaths`): the example's `[backup] dir` must be one of them, or every scheduled
/// backup of an operator who uncomments it fails.
#[test]
fn the_examples_backup_dir_is_writable_under_the_units_sandbox() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("systemd/callsync.service")).unwrap();
    let writable: Vec<String> = unit
        .lines()
        .filter_map(|line| {
            if let Some(state) = line.strip_prefix("StateDirectory=") {
                Some(format!("/var/lib/{state}/"))
            } else {
                line.strip_prefix("ReadWritePaths=")
                    .map(|p| format!("{}/", p.trim_end_matches('/')))
            }
        })
        .collect();
    assert!(unit.contains("ProtectSystem=strict\n"));
    let example = std::fs::read_to_string(root.join("config/callsync.example.toml")).unwrap();
    let backup = example
        .split("\n[backup]\n")
        .nth(1)
        .expect("a [backup] section");
    let dir = backup
        .lines()
        .find_map(|l| l.strip_prefix("# dir = \""))
        .and_then(|rest| rest.split('"').next())
        .expect("an example backup dir");
    assert!(
        writable.iter().any(|w| dir.starts_with(w.as_str())),
        "{dir} is outside {writable:?}"
    );
}
