//! One test per rejected key, each asserting the exact one-line message; overrides, secrets,
//! defaults, and the example file.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use uuid::Uuid;

use super::values::cron_at;
use super::*;
use crate::service::ListFilter;

const SCHEDULE: &str = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11";

fn minimal() -> String {
    format!(
        "[api]\nbase_url = \"https://calls.example.com\"\naccess_token = \"tok\"\n[sync]\nschedules = [\"{SCHEDULE}\"]\n"
    )
}

fn env(vars: &[(&str, &str)]) -> Env {
    Env {
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        credentials_dir: None,
    }
}

fn load_text(text: &str, env: &Env) -> Result<Config, ConfigError> {
    load_text_at(text, env).0
}

/// Loads `text` from a temporary file; the file's path comes back for messages naming it.
fn load_text_at(text: &str, env: &Env) -> (Result<Config, ConfigError>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callsync.toml");
    std::fs::write(&path, text).unwrap();
    (load_from(Some(&path), env), path.display().to_string())
}

/// The error `text` gives with `env`, the temporary file's path written as `<file>`.
fn env_error_of(text: &str, env: &Env) -> String {
    let (result, path) = load_text_at(text, env);
    result.unwrap_err().to_string().replace(&path, "<file>")
}

/// The error asking for the credentials of `text`'s configuration gives (files are read then).
fn credentials_error_of(text: &str) -> String {
    let config = load_text(text, &Env::default()).expect("the configuration loads");
    config.api.credentials().unwrap_err().to_string()
}

fn error_of(text: &str) -> String {
    env_error_of(text, &Env::default())
}

/// `minimal()` with `line` added to `[section]` (or replacing a line that starts the same).
fn with(section: &str, line: &str) -> String {
    let key = line.split('=').next().unwrap().trim();
    let base: String = minimal()
        .lines()
        .filter(|l| !l.starts_with(&format!("{key} ")))
        .map(|l| format!("{l}\n"))
        .collect();
    if base.contains(&format!("[{section}]\n")) {
        base.replace(&format!("[{section}]\n"), &format!("[{section}]\n{line}\n"))
    } else {
        format!("{base}[{section}]\n{line}\n")
    }
}

#[test]
fn defaults_fill_everything_not_given() {
    let c = load_text(&minimal(), &Env::default()).unwrap();
    assert_eq!(c.api.base_url.as_str(), "https://calls.example.com/");
    assert!(matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "tok"));
    assert_eq!(c.api.request_timeout, Duration::from_secs(30));
    assert_eq!(c.api.requests_per_second, None);
    assert_eq!(c.api.max_response_bytes, 32 * 1024 * 1024);
    assert_eq!(c.api.create_settle_window(), Duration::from_secs(60));
    assert_eq!(c.api.retry, RetryConfig::default());
    assert_eq!(c.warehouse.path, PathBuf::from("callsync.db"));
    assert_eq!(c.sync.schedules, vec![Uuid::parse_str(SCHEDULE).unwrap()]);
    assert_eq!(
        (c.sync.page_size, c.sync.lookback),
        (100, Duration::from_secs(5))
    );
    assert_eq!(c.sync.cron.as_str(), "0 */5 * * * *");
    assert_eq!(c.sync.details, DetailsMode::Auto);
    assert_eq!((c.sync.concurrency, c.sync.instance.as_deref()), (16, None));
    assert_eq!(c.sync.reconcile_window, Duration::from_secs(7 * 86_400));
    assert_eq!(
        (c.log.level.as_str(), c.log.format),
        ("info", LogFormat::Text)
    );
    assert_eq!(c.metrics.listen, None);
    assert_eq!(
        c.warehouse.keep_runs,
        Some(Duration::from_secs(90 * 86_400))
    );
    assert!(c.sync.schedule_names.is_empty());
}

#[test]
fn every_invalid_value_is_one_line_naming_its_key() {
    let cases: Vec<(String, &str)> = vec![
        (
            with("sync", "page_size = 0"),
            "config: sync.page_size: 0 is outside 1..=100",
        ),
        (
            with("sync", "page_size = 101"),
            "config: sync.page_size: 101 is outside 1..=100",
        ),
        (
            with("sync", "schedules = [\"not-a-uuid\"]"),
            "config: sync.schedules: \"not-a-uuid\" is not a schedule uid (a UUID)",
        ),
        (
            with(
                "sync",
                &format!("schedules = [\"{SCHEDULE}\", \"{SCHEDULE}\"]"),
            ),
            "config: sync.schedules: 0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11 is listed twice",
        ),
        (
            with("sync", "cron = \"*/5 * * * *\""),
            "config: sync.cron: \"*/5 * * * *\" is not a 6-field cron expression with seconds first (e.g. \"0 */5 * * * *\")",
        ),
        (
            with("sync", "cron = \"0 */5 * * * * * *\""),
            "config: sync.cron: \"0 */5 * * * * * *\" is not a 6-field cron expression",
        ),
        (
            with("sync", "reconcile_cron = \"every night\""),
            "config: sync.reconcile_cron: \"every night\" is not a 6-field cron expression",
        ),
        (
            with("sync", "details = \"sometimes\""),
            "config: sync.details: \"sometimes\" is not one of \"auto\", \"always\", \"never\"",
        ),
        (
            with("sync", "reconcile_window = \"7 days\""),
            "config: sync.reconcile_window: \"7 days\" is not a duration such as 90s, 15m, 12h or 7d",
        ),
        (
            with("sync", "reconcile_window = \"213503982334601d\""),
            "config: sync.reconcile_window: \"213503982334601d\" is longer than 3650d; to re-read more, use `callsync backfill`",
        ),
        (
            with("sync", "concurrency = 0"),
            "config: sync.concurrency: 0 is outside 1..=64",
        ),
        (
            with("sync", "instance = \" \""),
            "config: sync.instance: must be 1 to 64 printable characters",
        ),
        (
            with("sync", "instance = \"a\\u001b[31mb\""),
            "config: sync.instance: must be 1 to 64 printable characters",
        ),
        (
            with("api", "base_url = \"calls.example.com\""),
            "config: api.base_url: \"calls.example.com\" is not a URL",
        ),
        (
            with("api", "base_url = \"ftp://calls.example.com\""),
            "config: api.base_url: \"ftp://calls.example.com\" must be an http:// or https:// URL with a host",
        ),
        (
            with("api", "base_url = \"https://calls.example.com/api/v1\""),
            "config: api.base_url: https://calls.example.com/api/v1 must not end with /api/v1 (callsync appends it)",
        ),
        (
            with("api", "detail_concurrency = 65"),
            "config: api.detail_concurrency: 65 is outside 1..=64",
        ),
        (
            with("api", "max_response_mib = 0"),
            "config: api.max_response_mib: 0 is outside 1..=4096",
        ),
        (
            with("api", "access_token_file = \"/nonexistent/token\""),
            "config: api.access_token: set either api.access_token or api.access_token_file, not both",
        ),
        (
            with("warehouse", "path = \"\""),
            "config: warehouse.path: is empty; name the SQLite file, e.g. \"/var/lib/callsync/callsync.db\"",
        ),
        (
            with("warehouse", "path = \"  \""),
            "config: warehouse.path: is empty",
        ),
        (
            with("log", "format = \"xml\""),
            "config: log.format: \"xml\" is not one of \"text\", \"json\"",
        ),
        (
            with("log", "level = \"info,=[\""),
            "config: log.level: \"info,=[\" is not a valid filter (e.g. info, debug, callsync=debug): ",
        ),
        (
            with("log", "level = \"warnings\""),
            "config: log.level: \"warnings\" is not a log level: \"warnings\" is not one of off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug)",
        ),
        (
            with("metrics", "listen = \"localhost\""),
            "config: metrics.listen: \"localhost\" is not a socket address",
        ),
        (
            with("sync.filter", "colour = \"red\""),
            "config: <file>: unknown key sync.filter.colour; expected one of `status`, ",
        ),
        (
            with("sync", "pagesize = 10"),
            "config: <file>: unknown key sync.pagesize; expected one of `schedules`, ",
        ),
        (
            "[api]\nbase_url = \"https://x.example\"\naccess_token = \"t\"\n[sink]\n".to_owned(),
            "config: <file>: unknown key sink; expected one of `api`, `warehouse`, `sync`, `log`, `metrics`, `backup`",
        ),
        (
            format!(
                "{}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret = \"s\"\n",
                minimal()
            ),
            "config: api: configure either api.access_token (or access_token_file) or [api.oauth], not both",
        ),
    ];
    for (text, expected) in cases {
        let message = error_of(&text);
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}\nfor:\n{text}"
        );
        assert_eq!(message.lines().count(), 1, "one line: {message:?}");
    }
}

#[test]
fn scalar_keys_take_only_their_own_kind() {
    let cases = [
        (
            with("sync", "page_size = 0.5"),
            "config: sync.page_size: expected an integer, got 0.5",
        ),
        (
            with("sync", "page_size = true"),
            "config: sync.page_size: expected an integer, got true",
        ),
        (
            with("sync", "page_size = 100.9"),
            "config: sync.page_size: expected an integer, got 100.9",
        ),
        (
            with("sync", "page_size = 50.0"),
            "config: sync.page_size: expected an integer, got 50.0",
        ),
        (
            with("sync", "page_size = [50]"),
            "config: sync.page_size: expected an integer, got a list",
        ),
        (
            with("sync", "page_size = \"fifty\""),
            "config: sync.page_size: expected an integer, got \"fifty\"",
        ),
        (
            with("sync", "concurrency = 2.7"),
            "config: sync.concurrency: expected an integer, got 2.7",
        ),
        (
            with("sync", "lookback_secs = 1.5"),
            "config: sync.lookback_secs: expected an integer, got 1.5",
        ),
        (
            with("api", "requests_per_second = 0.5"),
            "config: api.requests_per_second: expected an integer, got 0.5",
        ),
        (
            with("api.retry", "max_attempts = false"),
            "config: api.retry.max_attempts: expected an integer, got false",
        ),
        (
            with("api.retry", "multiplier = true"),
            "config: api.retry.multiplier: expected a number, got true",
        ),
        (
            with("sync.filter", "is_test_call = 0"),
            "config: sync.filter.is_test_call: expected true or false, got 0",
        ),
        (
            with("api", "oauth = \"TOPSECRET-abc123\""),
            "config: api.oauth: expected a table, got a string",
        ),
        (
            "api = 5\n".to_owned(),
            "config: api: expected a table, got integer `5`",
        ),
        (
            with("api", "access_token = { value = \"TOPSECRET-abc123\" }"),
            "config: api.access_token: expected a string, got map",
        ),
        (
            with("sync", "schedules = 5"),
            "config: sync.schedules: expected a list of strings or one comma-separated string, got integer `5`",
        ),
        (
            with("warehouse", "busy_timeout_secs = -5"),
            "config: warehouse.busy_timeout_secs: -5 is outside 1..=3600",
        ),
        (
            with("api", "requests_per_second = 4294967296"),
            "config: api.requests_per_second: 4294967296 is outside 0..=4294967295",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error_of(&text), expected, "for:\n{text}");
    }
    // An integer is a number; an integer string (what the environment gives) is an integer.
    let c = load_text(
        &with("api.retry", "multiplier = 3\nmax_attempts = \"7\""),
        &Env::default(),
    )
    .unwrap();
    assert_eq!((c.api.retry.multiplier, c.api.retry.max_attempts), (3.0, 7));
}

#[test]
fn secrets_from_files_and_systemd_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "from-file\n").unwrap();
    let base = "[api]\nbase_url = \"https://x.example\"\n";
    let c = load_text(
        &format!("{base}access_token_file = \"{}\"\n", token.display()),
        &Env::default(),
    )
    .unwrap();
    assert!(matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "from-file"));

    let missing = credentials_error_of(&format!(
        "{base}access_token_file = \"/nonexistent/token\"\n"
    ));
    assert!(
        missing.starts_with("config: api.access_token_file: cannot read /nonexistent/token"),
        "{missing}"
    );
    std::fs::write(&token, "\n").unwrap();
    let empty = credentials_error_of(&format!(
        "{base}access_token_file = \"{}\"\n",
        token.display()
    ));
    assert_eq!(
        empty,
        format!(
            "config: api.access_token_file: {} is empty",
            token.display()
        )
    );

    // systemd's LoadCredential=: $CREDENTIALS_DIRECTORY/access_token, then client_secret.
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("access_token"), "from-credential").unwrap();
    std::fs::write(creds.path().join("client_secret"), "oauth-secret").unwrap();
    let env = Env {
        credentials_dir: Some(creds.path().to_owned()),
        ..Env::default()
    };
    let c = load_text(base, &env).unwrap();
    assert!(
        matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "from-credential")
    );
    let oauth =
        format!("{base}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\n");
    let c = load_text(&oauth, &env).unwrap();
    assert!(
        matches!(c.api.credentials(), Ok(AuthConfig::OAuth(o)) if o.client_secret.expose() == "oauth-secret")
    );
}

#[test]
fn a_placeholder_secret_is_a_configuration_error() {
    let base = "[api]\nbase_url = \"https://x.example\"\n";
    assert_eq!(
        error_of(&format!("{base}access_token = \"replace-me\"\n")),
        "config: api.access_token: is a placeholder, not a secret: set the real one, or delete api.access_token to use api.access_token_file or the systemd credential"
    );
    assert_eq!(
        env_error_of(base, &env(&[("CALLSYNC_API__ACCESS_TOKEN", "<token>")])),
        "config: CALLSYNC_API__ACCESS_TOKEN: api.access_token: is a placeholder, not a secret: set the real one, or delete api.access_token to use api.access_token_file or the systemd credential"
    );
    assert!(
        error_of(&format!(
            "{base}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret = \"...\"\n"
        ))
        .starts_with("config: api.oauth.client_secret: is a placeholder, not a secret")
    );
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "changeme\n").unwrap();
    assert_eq!(
        credentials_error_of(&format!(
            "{base}access_token_file = \"{}\"\n",
            token.display()
        )),
        format!(
            "config: api.access_token_file: {} holds a placeholder, not a secret; write the real one there",
            token.display()
        )
    );
}

#[test]
fn a_cron_that_does_not_fire_within_a_year_is_refused() {
    let at = |text: &str| text.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    // The search is bounded (a year): it ends, a search without an end would hang the suite.
    assert_eq!(
        cron_at(
            "sync.cron",
            "0 0 0 30 2 *".into(),
            at("2026-11-24T18:00:00Z")
        )
        .unwrap_err()
        .to_string(),
        "config: sync.cron: \"0 0 0 30 2 *\" does not fire within a year of now (2026-11-24 18:00:00 UTC); check its day and month fields"
    );
    // The 29th of February: more than a year away in 2026, not in 2027.
    let leap = "0 0 0 29 2 *";
    assert!(cron_at("sync.cron", leap.into(), at("2026-03-01T00:00:00Z")).is_err());
    assert!(cron_at("sync.cron", leap.into(), at("2027-03-01T00:00:00Z")).is_ok());
    assert!(
        cron_at(
            "sync.cron",
            "0 */5 * * * *".into(),
            at("2026-11-24T18:00:00Z")
        )
        .is_ok()
    );
    assert!(
        error_of(&with("sync", "reconcile_cron = \"0 0 0 31 4 *\"")).starts_with(
            "config: sync.reconcile_cron: \"0 0 0 31 4 *\" does not fire within a year of now ("
        )
    );
}

#[test]
fn credentials_are_optional_until_a_command_asks_for_them() {
    let base = "[api]\nbase_url = \"https://x.example\"\n";
    let c = load_text(base, &Env::default()).unwrap();
    assert!(c.api.auth.is_none());
    assert_eq!(
        c.api.credentials().unwrap_err().to_string(),
        "config: api: no credentials: set api.access_token, api.access_token_file, the systemd credential access_token, or an [api.oauth] table"
    );
    let c = load_text(&minimal(), &Env::default()).unwrap();
    assert!(matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "tok"));

    // A secret file is read only when a command asks for the credentials: one that is
    // missing or empty stops that command, not the loading of the configuration.
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("access_token"), " \n").unwrap();
    let env = Env {
        credentials_dir: Some(creds.path().to_owned()),
        ..Env::default()
    };
    let c = load_text(base, &env).unwrap();
    assert_eq!(
        c.api.credentials().unwrap_err().to_string(),
        format!(
            "config: api.access_token: {} is empty",
            creds.path().join("access_token").display()
        )
    );
    let c = load_text(
        &format!("{base}access_token_file = \"/nonexistent/token\"\n"),
        &Env::default(),
    )
    .unwrap();
    assert_eq!(
        c.api.credentials().unwrap_err().to_string(),
        "config: api.access_token_file: cannot read /nonexistent/token: No such file or directory (os error 2)"
    );
    let c = load_text(
        &format!("{base}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret_file = \"/nonexistent/secret\"\n"),
        &Env::default(),
    )
    .unwrap();
    assert_eq!(
        c.api.credentials().unwrap_err().to_string(),
        "config: api.oauth.client_secret_file: cannot read /nonexistent/secret: No such file or directory (os error 2)"
    );
}

#[test]
fn secrets_never_reach_debug_output() {
    let c = load_text(
        &with("api", "access_token = \"hunter2-token\""),
        &Env::default(),
    )
    .unwrap();
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2-token"), "{debug}");
    assert!(debug.contains("[redacted]"));
    let oauth = "[api]\nbase_url = \"https://x.example\"\n[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret = \"s3cr3t-value\"\n";
    let debug = format!("{:?}", load_text(oauth, &Env::default()).unwrap());
    assert!(!debug.contains("s3cr3t-value"), "{debug}");
}

#[test]
fn environment_overrides_nested_keys_lists_and_numbers() {
    let e = env(&[
        ("CALLSYNC_API__ACCESS_TOKEN", "env-token"),
        ("CALLSYNC_SYNC__PAGE_SIZE", "50"),
        ("CALLSYNC_API__RETRY__MAX_ATTEMPTS", "3"),
        ("CALLSYNC_API__RETRY__MULTIPLIER", "1.5"),
        (
            "CALLSYNC_SYNC__SCHEDULES",
            "0b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11,0b2e7a55-2222-4c0b-9f39-0d3c5a3f2b11",
        ),
        ("CALLSYNC_SYNC__FILTER__STATUS", "pending,completed"),
        ("CALLSYNC_SYNC__FILTER__PROGRESS", "answered"),
        ("CALLSYNC_SYNC__FILTER__IS_TEST_CALL", "false"),
    ]);
    let c = load_text(&minimal(), &e).unwrap();
    assert!(matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "env-token"));
    assert_eq!(c.sync.page_size, 50);
    assert_eq!(c.api.retry.max_attempts, 3);
    assert_eq!(c.api.retry.multiplier, 1.5);
    assert_eq!(
        c.sync.schedules,
        vec![
            Uuid::parse_str("0b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11").unwrap(),
            Uuid::parse_str("0b2e7a55-2222-4c0b-9f39-0d3c5a3f2b11").unwrap(),
        ]
    );
    assert_eq!(c.sync.filter.status, vec!["pending", "completed"]);
    assert_eq!(c.sync.filter.progress, vec!["answered"]);
    assert_eq!(c.sync.filter.is_test_call, Some(false));
}

#[test]
fn environment_values_reach_string_keys_verbatim() {
    // Strings that look like numbers or booleans: none may be rewritten (007 is not 7).
    let e = env(&[
        ("CALLSYNC_API__ACCESS_TOKEN", "007"),
        ("CALLSYNC_SYNC__FILTER__EXTERNAL_ID", "007"),
        ("CALLSYNC_SYNC__FILTER__OUTCOME", "1e3"),
        ("CALLSYNC_SYNC__FILTER__FULL_NAME", "+123"),
        ("CALLSYNC_SYNC__FILTER__EMAIL", "TRUE"),
        ("CALLSYNC_SYNC__FILTER__SOURCE", "0x10"),
    ]);
    let c = load_text(&minimal(), &e).unwrap();
    assert!(matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == "007"));
    let f = &c.sync.filter;
    assert_eq!(f.external_id.as_deref(), Some("007"));
    assert_eq!(f.outcome.as_deref(), Some("1e3"));
    assert_eq!(f.full_name.as_deref(), Some("+123"));
    assert_eq!(f.email.as_deref(), Some("TRUE"));
    assert_eq!(f.source, vec!["0x10"]);

    for token in ["1e3", "+123", " 42 "] {
        let e = env(&[("CALLSYNC_API__ACCESS_TOKEN", token)]);
        let c = load_text(&minimal(), &e).unwrap();
        // A secret is trimmed like one read from a file, and otherwise untouched.
        assert!(
            matches!(c.api.credentials(), Ok(AuthConfig::Static(t)) if t.expose() == token.trim()),
            "{token}"
        );
    }

    let oauth = "[api]\nbase_url = \"https://x.example\"\n[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_secret = \"s\"\n";
    let c = load_text(oauth, &env(&[("CALLSYNC_API__OAUTH__CLIENT_ID", "000123")])).unwrap();
    assert!(matches!(&c.api.auth, Some(AuthConfig::OAuth(o)) if o.client_id == "000123"));
}

#[test]
fn errors_from_the_environment_name_the_variable() {
    let sync_keys = "`schedules`, `schedule`, `lookback_secs`, `cron`, `page_size`, `details`, `concurrency`, `reconcile_cron`, `reconcile_window`, `shutdown_timeout_secs`, `behind_after`, `instance`, `filter`";
    let cases = [
        (
            ("CALLSYNC_SYNC__BOGUS", "1"),
            format!(
                "config: CALLSYNC_SYNC__BOGUS: unknown key sync.bogus; expected one of {sync_keys}"
            ),
        ),
        (
            ("CALLSYNC_SYNC__PAGESIZE", "50"),
            format!(
                "config: CALLSYNC_SYNC__PAGESIZE: unknown key sync.pagesize; expected one of {sync_keys}"
            ),
        ),
        (
            ("CALLSYNC_BOGUS", "1"),
            "config: CALLSYNC_BOGUS: unknown key bogus; expected one of `api`, `warehouse`, `sync`, `log`, `metrics`, `backup`".to_owned(),
        ),
        (
            ("CALLSYNC_SYNC__PAGE_SIZE", "500"),
            "config: CALLSYNC_SYNC__PAGE_SIZE: sync.page_size: 500 is outside 1..=100".to_owned(),
        ),
        (
            ("CALLSYNC_SYNC__PAGE_SIZE", "1e3"),
            "config: CALLSYNC_SYNC__PAGE_SIZE: sync.page_size: expected an integer, got \"1e3\""
                .to_owned(),
        ),
        (
            ("CALLSYNC_SYNC__FILTER__IS_TEST_CALL", "yes"),
            "config: CALLSYNC_SYNC__FILTER__IS_TEST_CALL: sync.filter.is_test_call: expected true or false, got \"yes\"".to_owned(),
        ),
        (
            ("CALLSYNC_API__ACCESS_TOKEN", " "),
            "config: CALLSYNC_API__ACCESS_TOKEN: api.access_token: is empty".to_owned(),
        ),
        (
            ("CALLSYNC_API__OAUTH", "TOPSECRET-abc123"),
            "config: CALLSYNC_API__OAUTH: api.oauth: expected a table, got a string".to_owned(),
        ),
        (
            ("CALLSYNC_METRICS__LISTEN", "localhost"),
            "config: CALLSYNC_METRICS__LISTEN: metrics.listen: \"localhost\" is not a socket address such as \"127.0.0.1:29610\"".to_owned(),
        ),
    ];
    for ((var, value), expected) in cases {
        let message = env_error_of(&minimal(), &env(&[(var, value)]));
        assert_eq!(message, expected, "{var}={value}");
    }
    // The same problem in the file names the key, as before; a variable that fixes the
    // file's value wins.
    let file = with("sync", "page_size = 500");
    assert_eq!(
        error_of(&file),
        "config: sync.page_size: 500 is outside 1..=100"
    );
    let c = load_text(&file, &env(&[("CALLSYNC_SYNC__PAGE_SIZE", "50")])).unwrap();
    assert_eq!(c.sync.page_size, 50);
}

#[test]
fn filters_take_arrays_or_comma_strings() {
    let c = load_text(
        &with(
            "sync.filter",
            "status = \"pending, completed\"\nprogress = [\"answered\"]\nfull_name = \"ada\"",
        ),
        &Env::default(),
    )
    .unwrap();
    assert_eq!(c.sync.filter.status, vec!["pending", "completed"]);
    assert_eq!(c.sync.filter.progress, vec!["answered"]);
    assert_eq!(c.sync.filter.full_name.as_deref(), Some("ada"));
}

#[test]
fn a_toml_syntax_error_is_one_line_with_its_place_and_never_the_text() {
    let cases = [
        (
            "[api]\naccess_token = \"TOPSECRET-abc123\n",
            "config: <file>: not valid TOML at line 2, column 33: invalid basic string, expected `\"`",
        ),
        (
            "[api]\naccess_token = 'TOPSECRET-abc123\n",
            "config: <file>: not valid TOML at line 2, column 33: invalid literal string, expected `'`",
        ),
        (
            "[api]\naccess_token = TOPSECRET-abc123\n",
            "config: <file>: not valid TOML at line 2, column 16: invalid boolean, expected `true`",
        ),
        (
            "[api]\naccess_token = \"\"\"TOPSECRET-abc123\n",
            "config: <file>: not valid TOML at line 3, column 1: invalid multi-line basic string, expected `\"`",
        ),
        (
            "# é\n[api]\naccess_token = \"a\"\naccess_token = \"TOPSECRET-abc123\"\n",
            "config: <file>: not valid TOML at line 4, column 1: duplicate key",
        ),
        (
            "[sync]\npage_size = 99999999999999999999\n",
            "config: <file>: not valid TOML at line 2, column 13: sync.page_size: number too large to fit in target type (integers go from -9223372036854775808 to 9223372036854775807)",
        ),
        (
            "[api]\naccess_token = \"TOPSECRET\"\n[[sync.schedule]]\nuid = \"x\"\n[[sync.schedule]]\nn = [1, 0x1, -99999999999999999999]\n",
            "config: <file>: not valid TOML at line 6, column 14: sync.schedule[1].n[2]: number too small to fit in target type (integers go from -9223372036854775808 to 9223372036854775807)",
        ),
        (
            "[sync]\nlookback_secs = 1e400\n",
            "config: <file>: not valid TOML at line 2, column 17: sync.lookback_secs: floating-point number overflowed (a float must be finite)",
        ),
    ];
    for (text, expected) in cases {
        let message = error_of(text);
        assert_eq!(message, expected, "for:\n{text}");
        assert!(!message.contains("TOPSECRET"), "{message}");
        assert_eq!(message.lines().count(), 1, "{message}");
    }
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let err = load_from(
        Some(Path::new("/nonexistent/callsync.toml")),
        &Env::default(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "config: cannot read /nonexistent/callsync.toml: no such file"
    );
    let dir = tempfile::tempdir().unwrap();
    let err = load_from(Some(dir.path()), &Env::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "config: {}: is a directory; pass the configuration file itself (e.g. --config {})",
            dir.path().display(),
            dir.path().join("callsync.toml").display()
        )
    );
}

#[test]
fn the_example_file_loads_and_documents_every_key() {
    let example = include_str!("../../config/callsync.example.toml");
    let c = load_text(example, &Env::default()).unwrap();
    assert_eq!(c.sync.page_size, 100);
    // No active secret: one copied from the example would win over the systemd credential.
    assert!(c.api.auth.is_none());
    // Every key the loader accepts appears in the example (commented or not).
    let keys = [
        "base_url",
        "access_token",
        "access_token_file",
        "request_timeout_secs",
        "connect_timeout_secs",
        "requests_per_second",
        "detail_concurrency",
        "max_response_mib",
        "create_settle_secs",
        "max_attempts",
        "max_elapsed_secs",
        "initial_interval_ms",
        "max_interval_secs",
        "multiplier",
        "token_url",
        "client_id",
        "client_secret",
        "client_secret_file",
        "scope",
        "path",
        "url",
        "password_file",
        "busy_timeout_secs",
        "keep_runs",
        "timezone",
        "schedules",
        "uid",
        "name",
        "lookback_secs",
        "cron",
        "page_size",
        "details",
        "concurrency",
        "reconcile_cron",
        "reconcile_window",
        "shutdown_timeout_secs",
        "behind_after",
        "instance",
        "level",
        "format",
        "listen",
        "dir",
        "keep",
    ];
    for key in keys.iter().chain(ListFilter::NAMES.iter()) {
        assert!(
            example.lines().any(|l| l
                .trim_start_matches(['#', ' '])
                .starts_with(&format!("{key} ="))),
            "config/callsync.example.toml does not document `{key}`"
        );
    }
}

const NAMED: &str = "1c0ffee0-0000-4000-8000-000000000001";
const OTHER_NAMED: &str = "1c0ffee0-0000-4000-8000-000000000002";

/// `[[sync.schedule]]` tables after `minimal()`, one per `(uid, name)`.
fn with_named(entries: &[(&str, &str)]) -> String {
    let mut text = minimal();
    for (uid, name) in entries {
        text.push_str(&format!(
            "[[sync.schedule]]\nuid = \"{uid}\"\nname = \"{name}\"\n"
        ));
    }
    text
}

#[test]
fn named_schedules_are_synced_after_the_listed_ones_and_keep_their_names() {
    let c = load_text(
        &with_named(&[(NAMED, "  Spring renewals "), (OTHER_NAMED, "Week 2")]),
        &Env::default(),
    )
    .unwrap();
    let uid = |s: &str| Uuid::parse_str(s).unwrap();
    assert_eq!(
        c.sync.schedules,
        vec![uid(SCHEDULE), uid(NAMED), uid(OTHER_NAMED)]
    );
    assert_eq!(
        c.sync.schedule_names,
        BTreeMap::from([
            (uid(NAMED), "Spring renewals".to_owned()),
            (uid(OTHER_NAMED), "Week 2".to_owned())
        ])
    );
    // Without the plain list.
    let only_named = format!(
        "[api]\nbase_url = \"https://calls.example.com\"\n[[sync.schedule]]\nuid = \"{NAMED}\"\nname = \"N\"\n"
    );
    let c = load_text(&only_named, &Env::default()).unwrap();
    assert_eq!(c.sync.schedules, vec![uid(NAMED)]);
}

#[test]
fn a_named_schedule_listed_twice_or_without_a_name_is_refused_naming_it() {
    let cases = [
        (
            with_named(&[(SCHEDULE, "Again")]),
            format!(
                "config: sync.schedule[0].uid: {SCHEDULE} is also in sync.schedules; list each schedule once (here, to name it)"
            ),
        ),
        (
            with_named(&[(NAMED, "A"), (NAMED, "B")]),
            format!(
                "config: sync.schedule[1].uid: {NAMED} is listed twice in [[sync.schedule]]; list each schedule once"
            ),
        ),
        (
            with_named(&[(NAMED, " ")]),
            format!(
                "config: sync.schedule[0].name: {NAMED} has no name; give it one, or list the uid in sync.schedules"
            ),
        ),
        (
            format!("{}[[sync.schedule]]\nuid = \"{NAMED}\"\n", minimal()),
            format!(
                "config: sync.schedule[0].name: {NAMED} has no name; give it one, or list the uid in sync.schedules"
            ),
        ),
        (
            format!("{}[[sync.schedule]]\nname = \"N\"\n", minimal()),
            "config: sync.schedule[0]: has no uid; give the schedule's uid and its name".to_owned(),
        ),
        (
            with_named(&[("week-1", "N")]),
            "config: sync.schedule[0].uid: \"week-1\" is not a schedule uid (a UUID)".to_owned(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(error_of(&text), expected, "for:\n{text}");
    }
    let unknown = format!(
        "{}[[sync.schedule]]\nuid = \"{NAMED}\"\nname = \"N\"\ncolour = \"red\"\n",
        minimal()
    );
    let message = error_of(&unknown);
    assert!(
        message.contains("unknown key") && message.contains("colour"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[test]
fn timezone_takes_an_iana_name_and_defaults_to_utc() {
    let e = env(&[]);
    assert_eq!(
        load_text(&minimal(), &e).unwrap().warehouse.timezone,
        chrono_tz::UTC
    );
    let zone = |value: &str| {
        load_text(&with("warehouse", &format!("timezone = \"{value}\"")), &e)
            .map(|c| c.warehouse.timezone)
    };
    assert_eq!(zone("Europe/Berlin").unwrap(), chrono_tz::Europe::Berlin);
    assert_eq!(
        zone("America/New_York").unwrap(),
        chrono_tz::America::New_York
    );
    for bad in ["Europe/Berlinn", "CET+1", "", "europe/berlin"] {
        assert_eq!(
            zone(bad).unwrap_err().to_string(),
            format!(
                "config: warehouse.timezone: {bad:?} is not an IANA time zone name (such as \"Europe/Berlin\" or \"UTC\"; `timedatectl list-timezones` lists them, spelled with their capitals)"
            )
        );
    }
}

#[test]
fn keep_runs_takes_a_duration_or_forever() {
    let keep = |value: &str| {
        load_text(
            &with("warehouse", &format!("keep_runs = \"{value}\"")),
            &Env::default(),
        )
        .map(|c| c.warehouse.keep_runs)
        .map_err(|e| e.to_string())
    };
    assert_eq!(keep("30d"), Ok(Some(Duration::from_secs(30 * 86_400))));
    assert_eq!(keep("12h"), Ok(Some(Duration::from_secs(12 * 3600))));
    assert_eq!(keep("forever"), Ok(None));
    assert_eq!(keep("0"), Ok(None));
    for bad in ["90", "0d", "soon", "3651d"] {
        assert_eq!(
            keep(bad),
            Err(format!(
                "config: warehouse.keep_runs: \"{bad}\" is neither a duration from 1s to 3650d (such as 90d or 12h) nor \"forever\" (or 0) to keep every run"
            ))
        );
    }
    let e = env(&[("CALLSYNC_WAREHOUSE__KEEP_RUNS", "forever")]);
    assert_eq!(load_text(&minimal(), &e).unwrap().warehouse.keep_runs, None);
}

/// The variables that make a whole configuration without a file.
fn whole_env() -> Env {
    env(&[
        ("CALLSYNC_API__BASE_URL", "https://calls.example.com"),
        ("CALLSYNC_API__ACCESS_TOKEN", "tok"),
        ("CALLSYNC_SYNC__SCHEDULES", SCHEDULE),
    ])
}

/// The default paths are relative to the working directory (the crate's, in tests) and
/// `/etc`: a machine with one of them installed cannot run the file-less cases.
fn no_default_file() -> bool {
    let none = !DEFAULT_PATHS.iter().any(|p| Path::new(p).is_file());
    if !none {
        eprintln!("a default configuration file exists here: file-less cases skipped");
    }
    none
}

#[test]
fn the_environment_alone_is_a_configuration() {
    if !no_default_file() {
        return;
    }
    let c = load_from(None, &whole_env()).unwrap();
    assert_eq!(c.api.base_url.as_str(), "https://calls.example.com/");
    assert_eq!(c.sync.schedules, vec![Uuid::parse_str(SCHEDULE).unwrap()]);
    assert_eq!(c.source, None);
    // A required key missing is named, not "no configuration file found".
    let err = load_from(None, &env(&[("CALLSYNC_API__ACCESS_TOKEN", "tok")]))
        .unwrap_err()
        .to_string();
    assert!(!err.contains("no configuration file"), "{err}");
    assert!(err.contains("base_url"), "{err}");
    // Nothing at all: the search is named, and both ways out.
    assert_eq!(
        load_from(None, &Env::default()).unwrap_err().to_string(),
        "config: no configuration file found (looked for config/callsync.toml, /etc/callsync/callsync.toml) and no CALLSYNC_* variables set; pass --config PATH or set CALLSYNC_CONFIG"
    );
}

#[test]
fn callsync_config_names_the_file_and_is_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("named.toml");
    std::fs::write(&named, with("sync", "page_size = 7")).unwrap();
    let given = dir.path().join("given.toml");
    std::fs::write(&given, with("sync", "page_size = 9")).unwrap();
    let vars = env(&[("CALLSYNC_CONFIG", named.to_str().unwrap())]);
    // Read as the file, not as a key `config` (which the file format does not have).
    let c = load_from(None, &vars).unwrap();
    assert_eq!((c.sync.page_size, c.source), (7, Some(named.clone())));
    // --config wins over it.
    let c = load_from(Some(&given), &vars).unwrap();
    assert_eq!((c.sync.page_size, c.source), (9, Some(given)));
    // A file it names that is missing is an error, never a fall-back to the defaults.
    let missing = dir.path().join("missing.toml");
    assert_eq!(
        load_from(
            None,
            &env(&[("CALLSYNC_CONFIG", missing.to_str().unwrap())])
        )
        .unwrap_err()
        .to_string(),
        format!("config: cannot read {}: no such file", missing.display())
    );
}

#[test]
fn backup_needs_cron_and_dir_together_and_keeps_7_by_default() {
    let with = |backup: &str| {
        load_text(
            &format!("{}\n[backup]\n{backup}", minimal()),
            &Env::default(),
        )
    };
    assert_eq!(load_text(&minimal(), &Env::default()).unwrap().backup, None);
    let c = with("cron = \"0 15 2 * * *\"\ndir = \"/var/backups/callsync\"\n").unwrap();
    assert_eq!(
        c.backup,
        Some(BackupConfig {
            cron: CronSchedule::parse("0 15 2 * * *").unwrap(),
            dir: "/var/backups/callsync".into(),
            keep: 7,
        })
    );
    for (backup, message) in [
        (
            "dir = \"/b\"\n",
            "config: backup.cron: is required with backup.dir (when to back up, e.g. \"0 15 2 * * *\" for 02:15 UTC daily)",
        ),
        (
            "cron = \"0 15 2 * * *\"\n",
            "config: backup.dir: is required with backup.cron (the directory the backups go into)",
        ),
        (
            "cron = \"0 15 2 * * *\"\ndir = \"/b\"\nkeep = 0\n",
            "config: backup.keep: 0 is outside 1..=10000",
        ),
        (
            "cron = \"0 0 0 30 2 *\"\ndir = \"/b\"\n",
            "does not fire within a year",
        ),
        ("crn = \"x\"\n", "crn"),
    ] {
        let err = with(backup).unwrap_err().to_string();
        assert!(err.contains(message), "{backup}: {err}");
    }
}

#[test]
fn a_postgres_url_replaces_the_path_and_both_are_refused_naming_the_keys() {
    let c = load_text(
        &format!(
            "{}[warehouse]\nurl = \"postgresql://callsync@db/cs\"\npassword_file = \"/etc/pw\"\n",
            minimal()
        ),
        &Env::default(),
    )
    .unwrap();
    let pg = c.warehouse.postgres.expect("a PostgreSQL warehouse");
    assert_eq!(pg.url, "postgresql://callsync@db/cs");
    assert_eq!(
        pg.password,
        Some(SecretSource::File {
            key: "warehouse.password_file".into(),
            path: "/etc/pw".into()
        })
    );
    // SQLite stays the default.
    let c = load_text(&minimal(), &Env::default()).unwrap();
    assert!(c.warehouse.postgres.is_none());
    let err = load_text(
        &format!(
            "{}[warehouse]\npath = \"w.db\"\nurl = \"postgresql://db/cs\"\n",
            minimal()
        ),
        &Env::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("warehouse.path") && err.contains("warehouse.url") && err.contains("not both"),
        "{err}"
    );
    let err = load_text(
        &format!("{}[warehouse]\npassword_file = \"/etc/pw\"\n", minimal()),
        &Env::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("warehouse.password_file") && err.contains("warehouse.url"),
        "{err}"
    );
}

#[test]
fn the_postgres_password_comes_from_the_systemd_credential() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("warehouse_password"), "s3cret\n").unwrap();
    let env = Env {
        credentials_dir: Some(dir.path().to_owned()),
        ..Env::default()
    };
    let c = load_text(
        &format!("{}[warehouse]\nurl = \"postgresql://db/cs\"\n", minimal()),
        &env,
    )
    .unwrap();
    let password = c.warehouse.postgres.unwrap().password.unwrap();
    assert_eq!(password.read().unwrap().expose(), "s3cret");
}
