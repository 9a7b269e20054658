//! Credentials never travel by accident (issue 53): a service URL with a user name or
//! password in it is refused with exit 2 without repeating it, and `check`, `config` and the
//! daemon's start-up warn when a token would cross the network in clear.

use std::process::Stdio;

use crate::cli::{callsync, callsync_with_env, stderr};
use crate::harness::{PATIENCE, wait_for};

const SCHEDULE: &str = "00000000-0000-4000-8000-000000000001";

/// A configuration of the service at `base_url` (`[api]` lines `api_extra` added), its
/// warehouse in `dir`; its path.
fn config(dir: &std::path::Path, base_url: &str, api_extra: &str) -> String {
    let path = dir.join("callsync.toml");
    std::fs::write(
        &path,
        format!(
            "[api]\nbase_url = \"{base_url}\"\n{api_extra}\n\
             [warehouse]\npath = {:?}\n\n\
             [sync]\nschedules = [\"{SCHEDULE}\"]\n\n[log]\nlevel = \"warn\"\n",
            dir.join("warehouse.db").display().to_string()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

const TOKEN: &str = "access_token = \"tok-5f1\"\n";

/// `base_url = "http://alice:Pa55word@…"` with a token configured: reqwest would have sent
/// `Authorization: Basic alice:…` in place of the token, and `config` printed the password.
/// Now every command that loads the configuration stops with exit 2, the user info in none
/// of its words; so does the same URL as `api.oauth.token_url` or from a variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_name_or_password_in_a_service_url_is_refused_with_exit_2_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let base = "error: config: api.base_url: \"http://[redacted]@127.0.0.1:9/\" has a user name or password in it, which callsync would send to the service in place of the token; remove it (the token goes in api.access_token, access_token_file or [api.oauth])\n";
    let with_password = config(dir.path(), "http://alice:Pa55word@127.0.0.1:9/", TOKEN);
    let user_only = dir.path().join("user-only.toml");
    let text = std::fs::read_to_string(&with_password).unwrap();
    std::fs::write(&user_only, text.replace("alice:Pa55word@", "alice@")).unwrap();
    let user_only = user_only.to_str().unwrap();
    for (c, command) in [
        (with_password.as_str(), "config"),
        (with_password.as_str(), "check"),
        (with_password.as_str(), "sync"),
        (with_password.as_str(), "run"),
        (user_only, "config"),
    ] {
        let out = callsync(&["--config", c, command]).await;
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        assert_eq!(stderr(&out), base, "{command}");
        assert!(out.stdout.is_empty(), "{command}");
    }

    let token_url = config(
        dir.path(),
        "https://calls.example.com",
        "[api.oauth]\ntoken_url = \"https://client:s3cr3t@auth.example.com/token\"\nclient_id = \"c\"\nclient_secret = \"s\"\n",
    );
    let out = callsync(&["--config", &token_url, "config"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "error: config: api.oauth.token_url: \"https://[redacted]@auth.example.com/token\" has a user name or password in it, which callsync would send to the token endpoint beside the client's credentials; remove it (the client's id and secret go in api.oauth.client_id and client_secret)\n"
    );

    // From a variable, and past other faults of the URL (a query) that its message echoes.
    let plain = config(dir.path(), "https://calls.example.com", TOKEN);
    let var = [(
        "CALLSYNC_API__BASE_URL",
        "http://alice:Pa55word@127.0.0.1:9/?x=1",
    )];
    let out = callsync_with_env(&["--config", &plain, "config"], &var).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("alice") && !stderr(&out).contains("Pa55word"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("api.base_url"), "{}", stderr(&out));
}

/// A token sent over plain `http://` to a host that is not this machine can be read on every
/// network between: `config` and `check` say so on stderr, and the daemon in a warning at
/// start-up; to 127.0.0.0/8, ::1 or localhost, or over https://, nothing is said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_over_plain_http_to_another_host_is_warned_of_and_loopback_is_not() {
    let dir = tempfile::tempdir().unwrap();
    // TEST-NET-1, which no one answers: one attempt, a second at most to connect.
    let fast =
        "connect_timeout_secs = 1\naccess_token = \"tok-5f1\"\n[api.retry]\nmax_attempts = 1\n";
    let c = config(dir.path(), "http://192.0.2.1:9/", fast);
    let warning = "warning: api.base_url is plain http:// to 192.0.2.1, which is not this machine (127.0.0.0/8, ::1 or localhost): the access token would cross the network unencrypted, readable on every network in between; use https://";

    let out = callsync(&["--config", &c, "config"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), format!("{warning}\n"));

    let out = callsync(&["--config", &c, "check"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing answers there: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).starts_with(&format!("{warning}\n")),
        "{}",
        stderr(&out)
    );

    let log_path = dir.path().join("run.log");
    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_callsync"))
        .args(["--config", &c, "run"])
        .env_remove("RUST_LOG")
        .env_remove("CREDENTIALS_DIRECTORY")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("callsync runs");
    let logged = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_for("the daemon's start-up warning", || {
        logged().contains("api.base_url is plain http://")
    })
    .await;
    let pid = daemon.id().expect("running").to_string();
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let status = tokio::time::timeout(PATIENCE, daemon.wait())
        .await
        .expect("exits")
        .expect("exit status");
    assert_eq!(status.code(), Some(0));
    let line = logged()
        .lines()
        .find(|l| l.contains("api.base_url is plain http://"))
        .map(str::to_owned)
        .unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert!(line.ends_with(&warning["warning: ".len()..]), "{line}");

    // With OAuth, the client secret too, on its way to a token endpoint over http://.
    let oauth = config(
        dir.path(),
        "https://calls.example.com",
        "[api.oauth]\ntoken_url = \"http://auth.example.com/token\"\nclient_id = \"c\"\nclient_secret = \"s\"\n",
    );
    let out = callsync(&["--config", &oauth, "config"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "warning: api.oauth.token_url is plain http:// to auth.example.com, which is not this machine (127.0.0.0/8, ::1 or localhost): the client secret and the tokens it is given would cross the network unencrypted, readable on every network in between; use https://\n"
    );

    for quiet in [
        "http://127.0.0.1:9/",
        "http://127.8.9.10:9/",
        "http://localhost:9/",
        "http://[::1]:9/",
        "https://calls.example.com/",
    ] {
        let c = config(dir.path(), quiet, TOKEN);
        let out = callsync(&["--config", &c, "config"]).await;
        assert_eq!(out.status.code(), Some(0), "{quiet}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{quiet}");
    }
}
