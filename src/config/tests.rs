//! One test per rejected key, each asserting the key and the kind of the error, and that its
//! message is one line naming the key; a few pin the exact words users see (what failed, on
//! what, what to do). Overrides, secrets, defaults, and the example file.

use std::collections::BTreeMap;
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
    Env::with_vars(vars)
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

/// What a test matches: the key an error is with (if one) and its kind.
type Problem = (Option<String>, ConfigErrorKind);

fn problem(err: &ConfigError) -> Problem {
    (err.key().map(str::to_owned), err.kind())
}

/// The key and kind of the error `text` gives with `env`.
fn env_problem_of(text: &str, env: &Env) -> Problem {
    problem(&load_text(text, env).unwrap_err())
}

fn problem_of(text: &str) -> Problem {
    env_problem_of(text, &Env::default())
}

/// The key and kind of the error asking for the credentials of `text`'s configuration gives.
fn credentials_problem_of(text: &str) -> Problem {
    let config = load_text(text, &Env::default()).expect("the configuration loads");
    problem(&config.api.credentials().unwrap_err())
}

/// `(Some(key), kind)`, as [`problem`] gives it.
fn at(key: &str, kind: ConfigErrorKind) -> Problem {
    (Some(key.to_owned()), kind)
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
    assert_eq!(
        c.warehouse.destination.sqlite_path().unwrap(),
        PathBuf::from("callsync.db")
    );
    assert_eq!(c.sync.schedules, vec![Uuid::parse_str(SCHEDULE).unwrap()]);
    assert_eq!(
        (c.sync.page_size, c.sync.lookback),
        (100, Duration::from_secs(5))
    );
    assert_eq!(c.sync.cron.as_str(), "0 */5 * * * *");
    assert_eq!(c.sync.details, DetailsMode::Auto);
    assert_eq!(
        (c.sync.concurrency, c.sync.instance.as_deref()),
        (256, None)
    );
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
    use ConfigErrorKind::*;
    let cases: Vec<(String, &str, ConfigErrorKind)> = vec![
        (with("sync", "page_size = 0"), "sync.page_size", OutOfRange),
        (
            with("sync", "page_size = 101"),
            "sync.page_size",
            OutOfRange,
        ),
        (
            with("sync", "schedules = [\"not-a-uuid\"]"),
            "sync.schedules",
            NotAUuid,
        ),
        (
            with(
                "sync",
                &format!("schedules = [\"{SCHEDULE}\", \"{SCHEDULE}\"]"),
            ),
            "sync.schedules",
            Duplicate,
        ),
        (with("sync", "cron = \"*/5 * * * *\""), "sync.cron", BadCron),
        (
            with("sync", "cron = \"0 */5 * * * * * *\""),
            "sync.cron",
            BadCron,
        ),
        (
            with("sync", "reconcile_cron = \"every night\""),
            "sync.reconcile_cron",
            BadCron,
        ),
        (
            with("sync", "details = \"sometimes\""),
            "sync.details",
            NotOneOf,
        ),
        (
            with("sync", "reconcile_window = \"7 days\""),
            "sync.reconcile_window",
            NotADuration,
        ),
        (
            with("sync", "reconcile_window = \"213503982334601d\""),
            "sync.reconcile_window",
            OutOfRange,
        ),
        (
            with("sync", "concurrency = 0"),
            "sync.concurrency",
            OutOfRange,
        ),
        (
            with("sync", "concurrency = 1025"),
            "sync.concurrency",
            OutOfRange,
        ),
        (with("sync", "instance = \" \""), "sync.instance", BadName),
        (
            with("sync", "instance = \"a\\u001b[31mb\""),
            "sync.instance",
            BadName,
        ),
        (
            with("api", "base_url = \"calls.example.com\""),
            "api.base_url",
            BadUrl,
        ),
        (
            with("api", "base_url = \"ftp://calls.example.com\""),
            "api.base_url",
            BadUrl,
        ),
        (
            with("api", "base_url = \"https://calls.example.com/api/v1\""),
            "api.base_url",
            BadUrl,
        ),
        (
            with("api", "base_url = \"https://calls.example.com/?x=1\""),
            "api.base_url",
            BadUrl,
        ),
        (
            with("api", "detail_concurrency = 1025"),
            "api.detail_concurrency",
            OutOfRange,
        ),
        (
            with("api", "max_response_mib = 0"),
            "api.max_response_mib",
            OutOfRange,
        ),
        (
            with("api.retry", "multiplier = 0.5"),
            "api.retry.multiplier",
            OutOfRange,
        ),
        (
            with("api", "access_token_file = \"/nonexistent/token\""),
            "api.access_token",
            Conflict,
        ),
        (
            with("api", "access_token = \" \""),
            "api.access_token",
            Empty,
        ),
        (with("warehouse", "path = \"\""), "warehouse.path", Empty),
        (with("warehouse", "path = \"  \""), "warehouse.path", Empty),
        (with("warehouse", "url = \" \""), "warehouse.url", Empty),
        (with("log", "format = \"xml\""), "log.format", NotOneOf),
        (
            with("log", "level = \"info,=[\""),
            "log.level",
            BadLogFilter,
        ),
        (
            with("log", "level = \"warnings\""),
            "log.level",
            BadLogFilter,
        ),
        (
            with("metrics", "listen = \"localhost\""),
            "metrics.listen",
            NotASocketAddress,
        ),
        (
            with("sync.filter", "colour = \"red\""),
            "sync.filter.colour",
            UnknownKey,
        ),
        (with("sync", "pagesize = 10"), "sync.pagesize", UnknownKey),
        (
            "[api]\nbase_url = \"https://x.example\"\naccess_token = \"t\"\n[sink]\n".to_owned(),
            "sink",
            UnknownKey,
        ),
        (
            format!(
                "{}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret = \"s\"\n",
                minimal()
            ),
            "api",
            Conflict,
        ),
        (
            "[api]\n[sync]\nschedules = []\n".to_owned(),
            "api.base_url",
            Missing,
        ),
        (
            "[api]\nbase_url = \"https://x.example\"\n[api.oauth]\nclient_id = \"c\"\n".to_owned(),
            "api.oauth.token_url",
            Missing,
        ),
    ];
    for (text, key, kind) in cases {
        let err = load_text(&text, &Env::default()).unwrap_err();
        assert_eq!(problem(&err), at(key, kind), "for:\n{text}");
        let message = err.to_string();
        assert!(message.contains(key), "{key} not in {message:?}");
        assert_eq!(message.lines().count(), 1, "one line: {message:?}");
    }
}

/// The words of representative messages, as users read them: what failed, on what (the key,
/// its value), and what to do where there is something to say.
#[test]
fn the_words_say_what_failed_on_what_and_what_to_do() {
    let cases: Vec<(String, &str)> = vec![
        (
            with("sync", "page_size = 0"),
            "config: sync.page_size: 0 is outside 1..=100",
        ),
        (
            with("sync", "cron = \"*/5 * * * *\""),
            "config: sync.cron: \"*/5 * * * *\" is not a 6-field cron expression with seconds first (e.g. \"0 */5 * * * *\"): ",
        ),
        (
            with("sync", "reconcile_window = \"213503982334601d\""),
            "config: sync.reconcile_window: \"213503982334601d\" is longer than 3650d; to re-read more, use `callsync backfill`",
        ),
        (
            with("api", "base_url = \"https://calls.example.com/api/v1\""),
            "config: api.base_url: https://calls.example.com/api/v1 must not end with /api/v1 (callsync appends it)",
        ),
        (
            with("warehouse", "path = \"\""),
            "config: warehouse.path: is empty; name the SQLite file, e.g. \"/var/lib/callsync/callsync.db\"",
        ),
        (
            with("log", "level = \"warnings\""),
            "config: log.level: \"warnings\" is not a log level: \"warnings\" is not one of off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug)",
        ),
        (
            with("sync", "pagesize = 10"),
            "config: <file>: unknown key sync.pagesize; expected one of `schedules`, ",
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
            message.starts_with(expected),
            "expected {expected:?} to start {message:?}\nfor:\n{text}"
        );
    }
}

#[test]
fn scalar_keys_take_only_their_own_kind() {
    use ConfigErrorKind::*;
    let cases = [
        (with("sync", "page_size = 0.5"), "sync.page_size", WrongType),
        (
            with("sync", "page_size = true"),
            "sync.page_size",
            WrongType,
        ),
        (
            with("sync", "page_size = 100.9"),
            "sync.page_size",
            WrongType,
        ),
        (
            with("sync", "page_size = 50.0"),
            "sync.page_size",
            WrongType,
        ),
        (
            with("sync", "page_size = [50]"),
            "sync.page_size",
            WrongType,
        ),
        (
            with("sync", "page_size = \"fifty\""),
            "sync.page_size",
            WrongType,
        ),
        (
            with("sync", "concurrency = 2.7"),
            "sync.concurrency",
            WrongType,
        ),
        (
            with("sync", "lookback_secs = 1.5"),
            "sync.lookback_secs",
            WrongType,
        ),
        (
            with("api", "requests_per_second = 0.5"),
            "api.requests_per_second",
            WrongType,
        ),
        (
            with("api.retry", "max_attempts = false"),
            "api.retry.max_attempts",
            WrongType,
        ),
        (
            with("api.retry", "multiplier = true"),
            "api.retry.multiplier",
            WrongType,
        ),
        (
            with("sync.filter", "is_test_call = 0"),
            "sync.filter.is_test_call",
            WrongType,
        ),
        (
            with("api", "oauth = \"TOPSECRET-abc123\""),
            "api.oauth",
            WrongType,
        ),
        ("api = 5\n".to_owned(), "api", WrongType),
        (
            with("api", "access_token = { value = \"TOPSECRET-abc123\" }"),
            "api.access_token",
            WrongType,
        ),
        (with("sync", "schedules = 5"), "sync.schedules", WrongType),
        (
            with("warehouse", "busy_timeout_secs = -5"),
            "warehouse.busy_timeout_secs",
            OutOfRange,
        ),
        (
            with("api", "requests_per_second = 4294967296"),
            "api.requests_per_second",
            OutOfRange,
        ),
    ];
    for (text, key, kind) in cases {
        assert_eq!(problem_of(&text), at(key, kind), "for:\n{text}");
        let message = error_of(&text);
        assert!(!message.contains("TOPSECRET"), "{message}");
    }
    // The value as it was written, not as `config` would have converted it; a secret given
    // to a table's key is not quoted back.
    for (text, expected) in [
        (
            with("sync", "page_size = 50.0"),
            "config: sync.page_size: expected an integer, got 50.0",
        ),
        (
            with("sync", "page_size = \"fifty\""),
            "config: sync.page_size: expected an integer, got \"fifty\"",
        ),
        (
            with("api", "oauth = \"TOPSECRET-abc123\""),
            "config: api.oauth: expected a table, got a string",
        ),
    ] {
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

    assert_eq!(
        credentials_problem_of(&format!(
            "{base}access_token_file = \"/nonexistent/token\"\n"
        )),
        at("api.access_token_file", ConfigErrorKind::Unreadable)
    );
    std::fs::write(&token, "\n").unwrap();
    assert_eq!(
        credentials_problem_of(&format!(
            "{base}access_token_file = \"{}\"\n",
            token.display()
        )),
        at("api.access_token_file", ConfigErrorKind::Empty)
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
    let err = load_text(base, &env(&[("CALLSYNC_API__ACCESS_TOKEN", "<token>")])).unwrap_err();
    assert_eq!(
        problem(&err),
        at("api.access_token", ConfigErrorKind::Placeholder)
    );
    assert!(
        matches!(&err, ConfigError::Env { var, .. } if var == "CALLSYNC_API__ACCESS_TOKEN"),
        "{err:?}"
    );
    assert_eq!(
        problem_of(&format!(
            "{base}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret = \"...\"\n"
        )),
        at("api.oauth.client_secret", ConfigErrorKind::Placeholder)
    );
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "changeme\n").unwrap();
    let text = format!("{base}access_token_file = \"{}\"\n", token.display());
    assert_eq!(
        credentials_problem_of(&text),
        at("api.access_token_file", ConfigErrorKind::Placeholder)
    );
    assert_eq!(
        credentials_error_of(&text),
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
    let err = cron_at(
        "sync.cron",
        "0 0 0 30 2 *".into(),
        at("2026-11-24T18:00:00Z"),
    )
    .unwrap_err();
    assert_eq!(
        problem(&err),
        (
            Some("sync.cron".to_owned()),
            ConfigErrorKind::CronNeverFires
        )
    );
    assert_eq!(
        err.to_string(),
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
    assert_eq!(
        problem_of(&with("sync", "reconcile_cron = \"0 0 0 31 4 *\"")),
        (
            Some("sync.reconcile_cron".to_owned()),
            ConfigErrorKind::CronNeverFires
        )
    );
}

#[test]
fn credentials_are_optional_until_a_command_asks_for_them() {
    let base = "[api]\nbase_url = \"https://x.example\"\n";
    let c = load_text(base, &Env::default()).unwrap();
    assert!(c.api.auth.is_none());
    let err = c.api.credentials().unwrap_err();
    assert_eq!(problem(&err), at("api", ConfigErrorKind::Missing));
    assert_eq!(
        err.to_string(),
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
    let err = c.api.credentials().unwrap_err();
    assert_eq!(
        problem(&err),
        at("api.access_token", ConfigErrorKind::Empty)
    );
    assert_eq!(
        err.to_string(),
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
    let err = c.api.credentials().unwrap_err();
    assert_eq!(
        problem(&err),
        at("api.access_token_file", ConfigErrorKind::Unreadable)
    );
    assert_eq!(
        err.to_string(),
        "config: api.access_token_file: cannot read /nonexistent/token: No such file or directory (os error 2)"
    );
    assert_eq!(
        credentials_problem_of(&format!(
            "{base}[api.oauth]\ntoken_url = \"https://x.example/t\"\nclient_id = \"c\"\nclient_secret_file = \"/nonexistent/secret\"\n"
        )),
        at("api.oauth.client_secret_file", ConfigErrorKind::Unreadable)
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
    use ConfigErrorKind::*;
    let cases = [
        (("CALLSYNC_SYNC__BOGUS", "1"), "sync.bogus", UnknownKey),
        (
            ("CALLSYNC_SYNC__PAGESIZE", "50"),
            "sync.pagesize",
            UnknownKey,
        ),
        (("CALLSYNC_BOGUS", "1"), "bogus", UnknownKey),
        (
            ("CALLSYNC_SYNC__PAGE_SIZE", "500"),
            "sync.page_size",
            OutOfRange,
        ),
        (
            ("CALLSYNC_SYNC__PAGE_SIZE", "1e3"),
            "sync.page_size",
            WrongType,
        ),
        (
            ("CALLSYNC_SYNC__FILTER__IS_TEST_CALL", "yes"),
            "sync.filter.is_test_call",
            WrongType,
        ),
        (
            ("CALLSYNC_API__ACCESS_TOKEN", " "),
            "api.access_token",
            Empty,
        ),
        (
            ("CALLSYNC_API__OAUTH", "TOPSECRET-abc123"),
            "api.oauth",
            WrongType,
        ),
        (
            ("CALLSYNC_METRICS__LISTEN", "localhost"),
            "metrics.listen",
            NotASocketAddress,
        ),
    ];
    for ((var, value), key, kind) in cases {
        let err = load_text(&minimal(), &env(&[(var, value)])).unwrap_err();
        assert_eq!(problem(&err), at(key, kind), "{var}={value}");
        assert!(
            matches!(&err, ConfigError::Env { var: named, .. } if named == var),
            "{var}={value}: {err:?}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("config: {var}: ")),
            "{message}"
        );
        assert!(!message.contains("TOPSECRET"), "{message}");
    }
    let sync_keys = "`schedules`, `schedule`, `lookback_secs`, `cron`, `page_size`, `details`, `concurrency`, `reconcile_cron`, `reconcile_window`, `shutdown_timeout_secs`, `behind_after`, `max_clock_skew_secs`, `max_lag_secs`, `instance`, `filter`";
    assert_eq!(
        env_error_of(&minimal(), &env(&[("CALLSYNC_SYNC__PAGESIZE", "50")])),
        format!(
            "config: CALLSYNC_SYNC__PAGESIZE: unknown key sync.pagesize; expected one of {sync_keys}"
        )
    );
    assert_eq!(
        env_error_of(&minimal(), &env(&[("CALLSYNC_SYNC__PAGE_SIZE", "500")])),
        "config: CALLSYNC_SYNC__PAGE_SIZE: sync.page_size: 500 is outside 1..=100"
    );
    // The same problem in the file names the key, as before; a variable that fixes the
    // file's value wins.
    let file = with("sync", "page_size = 500");
    let err = load_text(&file, &Env::default()).unwrap_err();
    assert_eq!(
        problem(&err),
        at("sync.page_size", ConfigErrorKind::OutOfRange)
    );
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err:?}");
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
        assert_eq!(problem_of(text), (None, ConfigErrorKind::Syntax), "{text}");
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
    .unwrap_err();
    assert_eq!(problem(&err), (None, ConfigErrorKind::Unreadable));
    assert_eq!(
        err.to_string(),
        "config: cannot read /nonexistent/callsync.toml: no such file"
    );
    let dir = tempfile::tempdir().unwrap();
    let err = load_from(Some(dir.path()), &Env::default()).unwrap_err();
    assert_eq!(problem(&err), (None, ConfigErrorKind::Unreadable));
    assert_eq!(
        err.to_string(),
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
        "schema",
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
        "max_clock_skew_secs",
        "max_lag_secs",
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
    use ConfigErrorKind::*;
    let cases = [
        (
            with_named(&[(SCHEDULE, "Again")]),
            "sync.schedule[0].uid",
            Duplicate,
        ),
        (
            with_named(&[(NAMED, "A"), (NAMED, "B")]),
            "sync.schedule[1].uid",
            Duplicate,
        ),
        (
            with_named(&[(NAMED, " ")]),
            "sync.schedule[0].name",
            Missing,
        ),
        (
            format!("{}[[sync.schedule]]\nuid = \"{NAMED}\"\n", minimal()),
            "sync.schedule[0].name",
            Missing,
        ),
        (
            format!("{}[[sync.schedule]]\nname = \"N\"\n", minimal()),
            "sync.schedule[0]",
            Missing,
        ),
        (
            with_named(&[("week-1", "N")]),
            "sync.schedule[0].uid",
            NotAUuid,
        ),
    ];
    for (text, key, kind) in cases {
        assert_eq!(problem_of(&text), at(key, kind), "for:\n{text}");
    }
    // What to do, in each's words.
    assert_eq!(
        error_of(&with_named(&[(SCHEDULE, "Again")])),
        format!(
            "config: sync.schedule[0].uid: {SCHEDULE} is also in sync.schedules; list each schedule once (here, to name it)"
        )
    );
    assert_eq!(
        error_of(&with_named(&[(NAMED, " ")])),
        format!(
            "config: sync.schedule[0].name: {NAMED} has no name; give it one, or list the uid in sync.schedules"
        )
    );
    let unknown = format!(
        "{}[[sync.schedule]]\nuid = \"{NAMED}\"\nname = \"N\"\ncolour = \"red\"\n",
        minimal()
    );
    let (key, kind) = problem_of(&unknown);
    assert_eq!(kind, UnknownKey);
    assert!(key.is_some_and(|k| k.ends_with("colour")));
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
            problem(&zone(bad).unwrap_err()),
            at("warehouse.timezone", ConfigErrorKind::NotATimeZone),
            "{bad}"
        );
    }
    assert_eq!(
        zone("europe/berlin").unwrap_err().to_string(),
        "config: warehouse.timezone: \"europe/berlin\" is not an IANA time zone name (such as \"Europe/Berlin\" or \"UTC\"; `timedatectl list-timezones` lists them, spelled with their capitals)"
    );
}

#[test]
fn keep_runs_takes_a_duration_or_forever() {
    let keep = |value: &str| {
        load_text(
            &with("warehouse", &format!("keep_runs = \"{value}\"")),
            &Env::default(),
        )
        .map(|c| c.warehouse.keep_runs)
        .map_err(|e| problem(&e))
    };
    assert_eq!(keep("30d"), Ok(Some(Duration::from_secs(30 * 86_400))));
    assert_eq!(keep("12h"), Ok(Some(Duration::from_secs(12 * 3600))));
    assert_eq!(keep("forever"), Ok(None));
    assert_eq!(keep("0"), Ok(None));
    for bad in ["90", "0d", "soon", "3651d"] {
        assert_eq!(
            keep(bad),
            Err(at("warehouse.keep_runs", ConfigErrorKind::NotADuration)),
            "{bad}"
        );
    }
    assert_eq!(
        error_of(&with("warehouse", "keep_runs = \"3651d\"")),
        "config: warehouse.keep_runs: \"3651d\" is neither a duration from 1s to 3650d (such as 90d or 12h) nor \"forever\" (or 0) to keep every run"
    );
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
    let err = load_from(None, &env(&[("CALLSYNC_API__ACCESS_TOKEN", "tok")])).unwrap_err();
    assert_eq!(problem(&err), at("api.base_url", ConfigErrorKind::Missing));
    // Nothing at all: the search is named, and both ways out.
    let err = load_from(None, &Env::default()).unwrap_err();
    assert_eq!(problem(&err), (None, ConfigErrorKind::NoConfiguration));
    assert_eq!(
        err.to_string(),
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
    let err = load_from(
        None,
        &env(&[("CALLSYNC_CONFIG", missing.to_str().unwrap())]),
    )
    .unwrap_err();
    assert!(
        matches!(&err, ConfigError::Read { path, .. } if *path == missing),
        "{err:?}"
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
    for (backup, key, kind) in [
        ("dir = \"/b\"\n", "backup.cron", ConfigErrorKind::Missing),
        (
            "cron = \"0 15 2 * * *\"\n",
            "backup.dir",
            ConfigErrorKind::Missing,
        ),
        (
            "cron = \"0 15 2 * * *\"\ndir = \"\"\n",
            "backup.dir",
            ConfigErrorKind::Empty,
        ),
        (
            "cron = \"0 15 2 * * *\"\ndir = \"/b\"\nkeep = 0\n",
            "backup.keep",
            ConfigErrorKind::OutOfRange,
        ),
        (
            "cron = \"0 0 0 30 2 *\"\ndir = \"/b\"\n",
            "backup.cron",
            ConfigErrorKind::CronNeverFires,
        ),
        ("crn = \"x\"\n", "backup.crn", ConfigErrorKind::UnknownKey),
    ] {
        assert_eq!(
            problem(&with(backup).unwrap_err()),
            at(key, kind),
            "{backup}"
        );
    }
    assert_eq!(
        with("dir = \"/b\"\n").unwrap_err().to_string(),
        "config: backup.cron: is required with backup.dir (when to back up, e.g. \"0 15 2 * * *\" for 02:15 UTC daily)"
    );
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
    let DestinationConfig::Postgres(pg) = c.warehouse.destination else {
        panic!("a PostgreSQL warehouse");
    };
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
    assert!(matches!(
        c.warehouse.destination,
        DestinationConfig::Sqlite { .. }
    ));
    let err = load_text(
        &format!(
            "{}[warehouse]\npath = \"w.db\"\nurl = \"postgresql://db/cs\"\n",
            minimal()
        ),
        &Env::default(),
    )
    .unwrap_err();
    assert_eq!(problem(&err), at("warehouse", ConfigErrorKind::Conflict));
    let err = err.to_string();
    assert!(
        err.contains("warehouse.path") && err.contains("warehouse.url") && err.contains("not both"),
        "{err}"
    );
    let err = load_text(
        &format!("{}[warehouse]\npassword_file = \"/etc/pw\"\n", minimal()),
        &Env::default(),
    )
    .unwrap_err();
    assert_eq!(
        problem(&err),
        at("warehouse.password_file", ConfigErrorKind::Conflict)
    );
    let err = err.to_string();
    assert!(
        err.contains("warehouse.password_file") && err.contains("warehouse.url"),
        "{err}"
    );
}

/// `warehouse.schema`: `public` unless set; a plain lower-case identifier of at most 63 bytes,
/// not `pg_…`; only with `warehouse.url`. Each refusal names the key and says what is allowed.
#[test]
fn the_postgres_schema_is_a_plain_identifier_public_by_default() {
    let postgres = |lines: &str| {
        load_text(
            &format!(
                "{}[warehouse]\nurl = \"postgresql://db/cs\"\n{lines}",
                minimal()
            ),
            &Env::default(),
        )
    };
    let schema_of = |lines: &str| match postgres(lines).unwrap().warehouse.destination {
        DestinationConfig::Postgres(pg) => pg.schema,
        other => panic!("a PostgreSQL warehouse, not {other:?}"),
    };
    assert_eq!(schema_of(""), "public");
    assert_eq!(schema_of("schema = \"callsync\"\n"), "callsync");
    assert_eq!(schema_of("schema = \"_bi_2026\"\n"), "_bi_2026");
    let longest = "s".repeat(63);
    assert_eq!(schema_of(&format!("schema = \"{longest}\"\n")), longest);
    let allowed = "must be a plain identifier: a lower-case letter or _ first, then lower-case letters, digits or _, at most 63 bytes";
    for (bad, says) in [
        ("Sales", allowed),
        ("call-results", allowed),
        ("2026", allowed),
        ("a b", allowed),
        ("public;drop", allowed),
        ("caf\u{e9}", allowed),
        (&"s".repeat(64), allowed),
        ("pg_callsync", "may not begin with pg_"),
    ] {
        let err = postgres(&format!("schema = {bad:?}\n")).unwrap_err();
        assert_eq!(
            problem(&err),
            at("warehouse.schema", ConfigErrorKind::BadName),
            "{bad}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with("config: warehouse.schema: ") && text.contains(says),
            "{bad}: {text}"
        );
    }
    let err = postgres("schema = \"\"\n").unwrap_err();
    assert_eq!(
        problem(&err),
        at("warehouse.schema", ConfigErrorKind::Empty)
    );
    // An SQLite warehouse has no schema to set.
    let err = load_text(
        &format!("{}[warehouse]\nschema = \"callsync\"\n", minimal()),
        &Env::default(),
    )
    .unwrap_err();
    assert_eq!(
        problem(&err),
        at("warehouse.schema", ConfigErrorKind::Conflict)
    );
    assert!(err.to_string().contains("set warehouse.url too"), "{err}");
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
    let DestinationConfig::Postgres(pg) = c.warehouse.destination else {
        panic!("a PostgreSQL warehouse");
    };
    let password = pg.password.unwrap();
    assert_eq!(password.read().unwrap().expose(), "s3cret");
}

/// `CALLSYNC_SECTION__KEY=` (set to nothing) switches the file's key off: as if the file did
/// not set it, so the default applies, or nothing for a key without one; `config` says which
/// variable did it.
#[test]
fn an_empty_variable_switches_a_files_key_off() {
    let file = format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:29610\"\n[sync.filter]\nstatus = [\"pending\"]\n",
        minimal().replace("[sync]\n", "[sync]\ncron = \"0 */5 * * * *\"\n")
    );
    let on = load_text(&file, &Env::default()).unwrap();
    assert!(on.metrics.listen.is_some());
    assert_eq!(on.sync.cron.as_str(), "0 */5 * * * *");
    let env = Env::with_vars(&[
        ("CALLSYNC_METRICS__LISTEN", ""),
        ("CALLSYNC_SYNC__CRON", ""),
        ("CALLSYNC_SYNC__FILTER__STATUS", ""),
    ]);
    let off = load_text(&file, &env).unwrap();
    assert_eq!(off.metrics.listen, None);
    let default = load_text(&minimal(), &Env::default()).unwrap();
    assert_eq!(off.sync.cron.as_str(), default.sync.cron.as_str());
    assert_eq!(
        format!("{:?}", off.sync.filter),
        format!("{:?}", default.sync.filter)
    );
    let (shown, _path, _dir) = super::effective::of_text(&file, &env);
    let listen = (shown.entries.iter())
        .find(|e| e.key == "metrics.listen")
        .unwrap();
    assert_eq!(listen.value, serde_json::Value::Null);
    assert_eq!(
        listen.source,
        super::effective::Source::Environment("CALLSYNC_METRICS__LISTEN".into())
    );
}

#[test]
fn a_named_schedule_may_say_its_campaign() {
    let other = "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b12";
    let campaign = "c0ffee00-0000-4000-8000-000000000001";
    let text = format!(
        "[api]\nbase_url = \"https://calls.example.com\"\naccess_token = \"tok\"\n\
         [[sync.schedule]]\nuid = \"{SCHEDULE}\"\nname = \"Renewals\"\ncampaign = \"{campaign}\"\n\
         [[sync.schedule]]\nuid = \"{other}\"\nname = \"Winback\"\n"
    );
    let c = load_text(&text, &Env::default()).unwrap();
    assert_eq!(
        c.sync.schedule_campaigns,
        BTreeMap::from([(
            Uuid::parse_str(SCHEDULE).unwrap(),
            Uuid::parse_str(campaign).unwrap()
        )])
    );
    let err = load_text(&text.replace(campaign, "spring-2026"), &Env::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config: sync.schedule[0].campaign: \"spring-2026\" is not a campaign uid (a UUID)"
    );
}

/// Issue 53: a user name or password in a service URL is refused (reqwest would send it as
/// HTTP Basic credentials in place of the token), and no message repeats it: not the
/// refusal, nor another fault's message that echoes the URL, nor an unparsable URL's.
#[test]
fn user_info_in_a_service_url_is_refused_and_never_repeated() {
    let oauth = |token_url: &str| {
        format!(
            "[api]\nbase_url = \"https://x.example\"\n[api.oauth]\ntoken_url = \"{token_url}\"\nclient_id = \"c\"\nclient_secret = \"s\"\n[sync]\nschedules = [\"{SCHEDULE}\"]\n"
        )
    };
    let base_url = |url: &str| with("api", &format!("base_url = \"{url}\""));
    let cases = [
        (
            base_url("http://alice:Pa55word@calls.example.com/"),
            "api.base_url",
        ),
        (base_url("https://alice@calls.example.com"), "api.base_url"),
        (
            base_url("https://:Pa55word@calls.example.com"),
            "api.base_url",
        ),
        (
            base_url("http://alice:Pa55word@calls.example.com/?x=1"),
            "api.base_url",
        ),
        (
            base_url("ftp://alice:Pa55word@calls.example.com/"),
            "api.base_url",
        ),
        (
            base_url("http://alice:Pa55word@calls example.com/"),
            "api.base_url",
        ),
        (base_url("alice:Pa55word@calls.example.com"), "api.base_url"),
        (
            oauth("https://alice:Pa55word@auth.example.com/token"),
            "api.oauth.token_url",
        ),
    ];
    for (text, key) in cases {
        let err = load_text(&text, &Env::default()).unwrap_err();
        assert_eq!(problem(&err), at(key, ConfigErrorKind::BadUrl), "{text}");
        let message = err.to_string();
        assert!(
            !message.contains("alice") && !message.contains("Pa55word"),
            "{message}"
        );
    }
    assert_eq!(
        error_of(&base_url("http://alice:Pa55word@calls.example.com/")),
        "config: api.base_url: \"http://[redacted]@calls.example.com/\" has a user name or password in it, which callsync would send to the service in place of the token; remove it (the token goes in api.access_token, access_token_file or [api.oauth])"
    );
    assert_eq!(
        error_of(&base_url("http://alice:Pa55word@calls example.com/")),
        "config: api.base_url: \"http://[redacted]@calls example.com/\" is not a URL: invalid international domain name"
    );
}

/// Where a credential would cross the network unencrypted: plain http:// to any host but
/// this machine's loopback (127.0.0.0/8, ::1, localhost).
#[test]
fn credentials_in_clear_are_those_over_http_to_another_host() {
    let oauth = |base: &str, token: &str| {
        format!(
            "[api]\nbase_url = \"{base}\"\n[api.oauth]\ntoken_url = \"{token}\"\nclient_id = \"c\"\nclient_secret = \"s\"\n[sync]\nschedules = [\"{SCHEDULE}\"]\n"
        )
    };
    let base_url = |url: &str| with("api", &format!("base_url = \"{url}\""));
    let cases: Vec<(String, Vec<&str>)> = vec![
        (base_url("https://calls.example.com"), vec![]),
        (base_url("http://calls.example.com"), vec!["api.base_url"]),
        (base_url("http://10.0.0.7:8080"), vec!["api.base_url"]),
        (base_url("http://0.0.0.0:8080"), vec!["api.base_url"]),
        (base_url("http://[2001:db8::1]"), vec!["api.base_url"]),
        (
            base_url("http://localhost.example.com"),
            vec!["api.base_url"],
        ),
        (base_url("http://127.0.0.1:8080"), vec![]),
        (base_url("http://127.255.0.9"), vec![]),
        (base_url("http://LOCALHOST:9"), vec![]),
        (base_url("http://localhost.:9"), vec![]),
        (base_url("http://[::1]:9"), vec![]),
        (base_url("http://[::ffff:127.0.0.1]:9"), vec![]),
        (
            oauth("http://calls.example.com", "http://auth.example.com/t"),
            vec!["api.base_url", "api.oauth.token_url"],
        ),
        (
            oauth("https://calls.example.com", "http://auth.example.com/t"),
            vec!["api.oauth.token_url"],
        ),
        (
            oauth("http://127.0.0.1:9", "https://auth.example.com/t"),
            vec![],
        ),
        // No credentials configured: none to send.
        (
            format!(
                "[api]\nbase_url = \"http://calls.example.com\"\n[sync]\nschedules = [\"{SCHEDULE}\"]\n"
            ),
            vec![],
        ),
    ];
    for (text, keys) in cases {
        let config = load_text(&text, &Env::default()).unwrap();
        let found: Vec<&str> = config
            .api
            .credentials_in_clear()
            .iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(found, keys, "{text}");
    }
    let config = load_text(&base_url("http://calls.example.com"), &Env::default()).unwrap();
    assert_eq!(
        config.api.credentials_in_clear()[0].to_string(),
        "api.base_url is plain http:// to calls.example.com, which is not this machine (127.0.0.0/8, ::1 or localhost): the access token would cross the network unencrypted, readable on every network in between; use https://"
    );
}
