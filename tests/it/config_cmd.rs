//! `callsync config` on the binary: every key with its source, secrets never printed, and a
//! configuration error as `check` reports it.

use serde_json::{Value, json};

use crate::cli::{callsync, callsync_with_env, stderr};

/// The `keys` entry of `key` in `config --json`'s output.
fn entry<'a>(shown: &'a Value, key: &str) -> &'a Value {
    shown["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["key"] == key)
        .unwrap_or_else(|| panic!("{key} in {shown}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_shows_each_source_and_never_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("pg-password");
    std::fs::write(&secret_file, "pg-secret-in-a-file-5e1\n").unwrap();
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:9\"\n\n\
             [warehouse]\nurl = \"postgresql://callsync@127.0.0.1/warehouse\"\npassword_file = {:?}\n\n\
             [sync]\nschedules = [\"00000000-0000-4000-8000-000000000001\"]\n\n\
             [[sync.schedule]]\nuid = \"00000000-0000-4000-8000-000000000002\"\nname = \"Renewals\"\n",
            secret_file.display().to_string()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let file = config.display().to_string();
    let vars = [
        ("CALLSYNC_API__ACCESS_TOKEN", "tok-in-the-environment-9f3"),
        ("CALLSYNC_SYNC__PAGE_SIZE", "50"),
    ];
    let secrets = ["tok-in-the-environment-9f3", "pg-secret-in-a-file-5e1"];

    let out = callsync_with_env(&["--config", c, "config", "--json"], &vars).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for secret in secrets {
        assert!(
            !text.contains(secret) && !stderr(&out).contains(secret),
            "{text}"
        );
    }
    let shown: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(shown["file"], json!(file));
    assert_eq!(
        entry(&shown, "api.access_token"),
        &json!({"key": "api.access_token", "value": null, "redacted": true,
                "source": "environment", "origin": "CALLSYNC_API__ACCESS_TOKEN"})
    );
    assert_eq!(
        entry(&shown, "warehouse.password_file"),
        &json!({"key": "warehouse.password_file", "value": secret_file.display().to_string(),
                "redacted": false, "source": "file", "origin": file})
    );
    assert_eq!(
        entry(&shown, "sync.page_size"),
        &json!({"key": "sync.page_size", "value": 50, "redacted": false,
                "source": "environment", "origin": "CALLSYNC_SYNC__PAGE_SIZE"})
    );
    assert_eq!(
        entry(&shown, "sync.schedule"),
        &json!({"key": "sync.schedule",
                "value": [{"uid": "00000000-0000-4000-8000-000000000002", "name": "Renewals"}],
                "redacted": false, "source": "file", "origin": file})
    );
    assert_eq!(
        entry(&shown, "sync.cron"),
        &json!({"key": "sync.cron", "value": "0 */5 * * * *", "redacted": false,
                "source": "default", "origin": null})
    );
    assert!(
        shown["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["key"] != "warehouse.path"),
        "unused with warehouse.url"
    );

    let out = callsync_with_env(&["config", "--config", c], &vars).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for secret in secrets {
        assert!(
            !text.contains(secret) && !stderr(&out).contains(secret),
            "{text}"
        );
    }
    let line = |key: &str| {
        text.lines()
            .find(|l| {
                l.trim_start_matches("# ").starts_with(&format!("{key} = "))
                    || l.starts_with(&format!("# {key} is not set"))
            })
            .unwrap_or_else(|| panic!("{key} in {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        text.lines().next(),
        Some(format!("# configuration file: {file}").as_str())
    );
    assert_eq!(
        line("api.access_token"),
        "# api.access_token = (redacted: give it again) # environment CALLSYNC_API__ACCESS_TOKEN"
    );
    assert_eq!(
        line("sync.schedules"),
        format!("sync.schedules = [\"00000000-0000-4000-8000-000000000001\"] # file {file}")
    );
    assert_eq!(
        line("metrics.listen"),
        "# metrics.listen is not set # default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_error_ends_config_as_it_ends_check() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        "[api]\nbase_url = \"http://127.0.0.1:9\"\naccess_token = \"tok-3c1\"\n[sync]\npage_size = 500\n",
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let check = callsync(&["--config", c, "check"]).await;
    for args in [vec!["config"], vec!["config", "--json"]] {
        let mut all = vec!["--config", c];
        all.extend(args);
        let out = callsync(&all).await;
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(out.stdout.is_empty(), "{all:?}");
        assert_eq!(stderr(&out), stderr(&check), "{all:?}");
    }
    assert_eq!(
        stderr(&check),
        "error: config: sync.page_size: 500 is outside 1..=100\n"
    );
}

/// A password in `warehouse.url`, in any form libpq or tokio-postgres would read (after a
/// `/`, percent-encoded, a `password` parameter, a `key=value` string), in a URL otherwise
/// valid or not: `config` shows the URL without it, as text and JSON; every command that
/// would use it refuses it with exit 2, naming the key and where the password goes instead,
/// without showing it; nothing is connected to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_warehouse_url_is_never_shown_and_refused_with_exit_2() {
    const SECRET: &str = "hun/ter2";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("callsync.toml");
    let refusal = "config: warehouse.url: holds a password; remove it, and give the password in warehouse.password_file (or the systemd credential warehouse_password), in libpq's password file (passfile= in the URL, $PGPASSFILE, or ~/.pgpass), or in $PGPASSWORD\n";
    for (url, shown) in [
        (
            "postgresql://callsync:hun/ter2@127.0.0.1:1/warehouse",
            "postgresql://callsync:[redacted]@127.0.0.1:1/warehouse",
        ),
        (
            "postgresql://callsync:hun%2Fter2@127.0.0.1:1/warehouse",
            "postgresql://callsync:[redacted]@127.0.0.1:1/warehouse",
        ),
        // Invalid besides (a port that is no number, an `@` in the password).
        (
            "postgresql://callsync:hun/ter2@x@127.0.0.1:port/warehouse",
            "postgresql://callsync:[redacted]@127.0.0.1:port/warehouse",
        ),
        (
            "postgresql://127.0.0.1:1/warehouse?user=callsync&pass%77ord=hun/ter2",
            "postgresql://127.0.0.1:1/warehouse?user=callsync&pass%77ord=[redacted]",
        ),
        (
            "host=127.0.0.1 port=1 password='hun/ter2' dbname=warehouse",
            "host=127.0.0.1 port=1 password=[redacted] dbname=warehouse",
        ),
    ] {
        std::fs::write(
            &config,
            format!(
                "[api]\nbase_url = \"http://127.0.0.1:9\"\naccess_token = \"t\"\n[warehouse]\nurl = \"{url}\"\n[sync]\nschedules = [\"00000000-0000-4000-8000-000000000001\"]\n"
            ),
        )
        .unwrap();
        let c = config.to_str().unwrap();
        let out = callsync(&["--config", c, "config", "--json"]).await;
        assert_eq!(out.status.code(), Some(0), "{url}: {}", stderr(&out));
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(entry(&json, "warehouse.url")["value"], shown, "{url}");
        let out = callsync(&["--config", c, "config"]).await;
        assert_eq!(out.status.code(), Some(0), "{url}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("warehouse.url = \"{shown}\"")),
            "{url}: {text}"
        );
        assert!(!text.contains(SECRET) && !text.contains("ter2"), "{text}");
        for command in [
            &["sync"][..],
            &["status"],
            &["migrate"],
            &["run"],
            &["checkpoint", "show"],
        ] {
            let mut args = vec!["--config", c];
            args.extend(command);
            let out = callsync(&args).await;
            assert_eq!(
                out.status.code(),
                Some(2),
                "{url} {command:?}: {}",
                stderr(&out)
            );
            let err = stderr(&out);
            assert!(err.ends_with(refusal), "{url} {command:?}: {err}");
            assert!(!err.contains("ter2"), "{err}");
        }
    }
}
