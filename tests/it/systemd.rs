//! The systemd units: `systemd-analyze verify` prints nothing (it only warns on unknown keys,
//! so silence is the check) — with its man page check on, after `callsync man --out` has
//! installed the pages the units' `Documentation=` names, as README's steps do —, and
//! `security --offline` scores 2.0 or less; the sysusers.d file creates the user and group.
//! Run where the tools are installed; elsewhere the test says so and checks the units' text.

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
    // `systemctl help` shows man: links only (a file: link is "Can't show").
    let documentation = |unit: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix("Documentation="))
            .flat_map(|l| l.split_whitespace().map(str::to_owned))
            .collect()
    };
    assert!(
        documentation(&daemon).contains(&"man:callsync(1)".to_owned()),
        "{daemon}"
    );
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
    for unit in [&daemon, &backfill] {
        let links = documentation(unit);
        assert!(!links.is_empty(), "{unit}");
        for link in links {
            assert!(
                link.starts_with("man:"),
                "{link}: systemctl help cannot show it"
            );
        }
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
    // The pages the units name, installed as README's steps install them: verify runs
    // `man` for each man: link and fails on a page man cannot find.
    let man_path = dir.path().join("man");
    let installed = Command::new(env!("CARGO_BIN_EXE_callsync"))
        .arg("man")
        .arg("--out")
        .arg(man_path.join("man1"))
        .output()
        .expect("callsync man runs");
    assert!(installed.status.success(), "{installed:?}");
    let man_available = Command::new("man")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !man_available {
        eprintln!("man is not installed: verify's check of the Documentation= pages skipped");
    }
    for unit in units_in(dir.path()) {
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!(
                "--man={}",
                if man_available { "yes" } else { "no" }
            ))
            .arg(&unit)
            .env("MANPATH", &man_path)
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

/// Where the example configuration's scheduled backups and README's warehouse go, callsync may
/// write under the daemon's unit: `ProtectSystem=strict` leaves it its `StateDirectory=` and
/// `ReadWritePaths=` alone. And the unit says what it writes into.
#[test]
fn the_documented_paths_are_writable_under_the_unit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let daemon = std::fs::read_to_string(root.join("systemd/callsync.service")).unwrap();
    assert!(daemon.contains("ProtectSystem=strict\n"));
    let setting = |name: &str| -> Vec<String> {
        daemon
            .lines()
            .filter_map(|l| l.strip_prefix(name))
            .flat_map(|v| v.split_whitespace().map(str::to_owned))
            .collect()
    };
    let writable: Vec<String> = setting("StateDirectory=")
        .iter()
        .map(|d| format!("/var/lib/{d}/"))
        .chain(setting("ReadWritePaths=").iter().map(|d| format!("{d}/")))
        .collect();
    let value_of = |text: &str, key: &str| -> String {
        text.lines()
            .map(|l| l.trim_start_matches(['#', ' ']))
            .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
            .and_then(|v| v.split('"').next())
            .unwrap_or_else(|| panic!("no {key}"))
            .to_owned()
    };
    let example = std::fs::read_to_string(root.join("config/callsync.example.toml")).unwrap();
    let backup = example
        .split("\n[backup]\n")
        .nth(1)
        .expect("a [backup] section");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for (what, path) in [
        ("the example's [backup] dir", value_of(backup, "dir")),
        ("README's warehouse.path", value_of(&readme, "path")),
    ] {
        assert!(
            writable.iter().any(|w| path.starts_with(w.as_str())),
            "{what} {path} is read-only under callsync.service (writable: {writable:?})"
        );
    }
    let description = daemon
        .lines()
        .find_map(|l| l.strip_prefix("Description="))
        .expect("a Description=");
    assert!(
        description.contains("SQLite or PostgreSQL"),
        "{description}"
    );
}
