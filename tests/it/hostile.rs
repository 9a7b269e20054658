//! A hostile service: its error texts carry escape sequences, CR and LF, bidi overrides. None
//! of it reaches the terminal, a log line, `sync_runs.error` or `callsync status` as itself:
//! each shows escaped (`\u{1b}`), so nothing retitles or clears the operator's terminal and no
//! log line is forged.

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use uuid::Uuid;

use crate::cli::{callsync, stderr};

/// Answered 400 with an escape sequence, CR and LF in the title, detail and pointer.
const REFUSED: Uuid = Uuid::from_u128(0x4000_0000);
/// Answered 502 with an HTML page full of escape sequences.
const BROKEN: Uuid = Uuid::from_u128(0x5000_0000);

/// What a terminal or a log would act on.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{2028}'..='\u{202e}').contains(c))
        .collect()
}

async fn list(Path(schedule): Path<Uuid>) -> Response {
    if schedule == REFUSED {
        let body = serde_json::json!({
            "title": "Bad\u{1b}]0;owned\u{7} request",
            "detail": "no\r\n2026-01-01T00:00:00Z ERROR forged line\u{1b}[2J\u{1b}[H",
            "errors": [{
                "title": "Invalid\u{9b}31m value",
                "detail": "x\u{202e}gnp.exe",
                "source": {"pointer": "/page\u{1b}[1A\u{1b}[K\n"}
            }]
        });
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    (
        StatusCode::BAD_GATEWAY,
        [(header::CONTENT_TYPE, "text/html")],
        "<html>\u{1b}]2;pwned\u{7}\u{1b}[31m 502 \r forged\u{1b}c</html>\n<p>\u{1b}[2J</p>",
    )
        .into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_service_reach_no_terminal_log_or_warehouse() {
    let app = Router::new().route("/api/v1/schedules/{uid}/outbound_calls", get(list));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("callsync.db");
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"http://{addr}\"\naccess_token = \"tok\"\n\n\
             [api.retry]\nmax_attempts = 2\ninitial_interval_ms = 5\nmax_interval_secs = 1\n\n\
             [warehouse]\npath = \"{}\"\n\n[sync]\nschedules = [\"{REFUSED}\", \"{BROKEN}\"]\n\n\
             [log]\nlevel = \"info\"\n",
            db.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();

    let out = callsync(&["--config", c, "sync"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    // Every line is one of callsync's: no forged one, no raw control character in any.
    assert_eq!(raw_controls(&err), Vec::<char>::new(), "{err}");
    assert!(!err.lines().any(|l| l.starts_with("2026-01-01")), "{err}");
    assert!(
        err.contains(
            "HTTP 400 Bad Request: Bad\\u{1b}]0;owned\\u{7} request: no\\u{d}\\u{a}2026-01-01T00:00:00Z ERROR forged line\\u{1b}[2J\\u{1b}[H; [/page\\u{1b}[1A\\u{1b}[K\\u{a}] Invalid\\u{9b}31m value: x\\u{202e}gnp.exe"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "HTTP 502 Bad Gateway: unexpected body: <html>\\u{1b}]2;pwned\\u{7}\\u{1b}[31m 502 \\u{d} forged\\u{1b}c</html>"
        ),
        "{err}"
    );

    // The warehouse holds what was shown, escaped.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let errors: Vec<String> = conn
        .prepare("SELECT error FROM sync_runs ORDER BY schedule_uid")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(errors.len(), 2);
    for error in &errors {
        assert_eq!(raw_controls(error), Vec::<char>::new(), "{error}");
        assert!(!error.contains('\n'), "{error}");
        assert!(error.contains("\\u{1b}"), "{error}");
    }

    for json in [false, true] {
        let args: &[&str] = if json {
            &["--config", c, "status", "--json"]
        } else {
            &["--config", c, "status"]
        };
        let out = callsync(args).await;
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert_eq!(raw_controls(&shown), Vec::<char>::new(), "{shown}");
        assert!(shown.contains("u{1b}]0;owned"), "{shown}");
        assert_eq!(raw_controls(&stderr(&out)), Vec::<char>::new());
    }
}

/// A warehouse written by an older callsync holds the service's words as they came: `status`
/// shows them escaped all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_escapes_an_error_stored_raw() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("callsync.db");
    let config = dir.path().join("callsync.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nbase_url = \"http://127.0.0.1:1\"\n\n[warehouse]\npath = \"{}\"\n\n\
             [sync]\nschedules = [\"{REFUSED}\"]\n",
            db.display()
        ),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let out = callsync(&["--config", c, "migrate"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "INSERT INTO sync_runs (schedule_uid, kind, started_at, finished_at, error, outcome)
         VALUES (?1, 'incremental', '2026-01-01 00:00:00', '2026-01-01 00:00:01', ?2, 'failed')",
        [
            REFUSED.to_string(),
            "HTTP 400: \u{1b}]0;owned\u{7}\r\nforged\u{202e}".to_owned(),
        ],
    )
    .unwrap();
    drop(conn);
    let escaped = "HTTP 400: \\u{1b}]0;owned\\u{7}\\u{d}\\u{a}forged\\u{202e}";
    let out = callsync(&["--config", c, "status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(raw_controls(&shown), Vec::<char>::new(), "{shown}");
    assert!(shown.contains(&format!("FAILED: {escaped}")), "{shown}");

    let out = callsync(&["--config", c, "status", "--json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(raw_controls(&shown), Vec::<char>::new(), "{shown}");
    let rows: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(rows[0]["last_run"]["error"], escaped, "{shown}");
}
