//! The client against servers on 127.0.0.1: answers, failures, caps, TLS.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};
use url::Url;
use uuid::Uuid;

use super::fake::{CALL_UID, FakeService, Reply, call_json};
use crate::api::client::{ApiClient, ListQuery};
use crate::api::error::ApiError;
use crate::api::exchange::{retry_after, status_error};
use crate::api::retry::Counters;
use crate::config::{AuthConfig, Secret};
use crate::service::filter::ListFilter;

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:27:00 GMT").unwrap();
    let mut h = HeaderMap::new();
    assert_eq!(retry_after(&h, now), None);
    h.insert(RETRY_AFTER, "7".parse().unwrap());
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
    // An HTTP date, without a Date header: counted from this machine's clock.
    h.insert(
        RETRY_AFTER,
        "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
    );
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(60)));
    // With the answer's Date: counted from the service's clock, whatever this machine's
    // says (here it runs 10 minutes behind the service's).
    h.insert(DATE, "Wed, 21 Oct 2015 07:27:30 GMT".parse().unwrap());
    let behind = now - Duration::from_secs(600);
    assert_eq!(retry_after(&h, behind), Some(Duration::from_secs(30)));
    // The obsolete forms RFC 9110 asks a recipient to accept (RFC 850, asctime).
    for date in [
        "Wednesday, 21-Oct-15 07:28:00 GMT",
        "Wed Oct 21 07:28:00 2015",
    ] {
        h.insert(RETRY_AFTER, date.parse().unwrap());
        assert_eq!(
            retry_after(&h, now),
            Some(Duration::from_secs(30)),
            "{date}"
        );
    }
    // A date already past: retry now.
    h.insert(
        RETRY_AFTER,
        "Wed, 21 Oct 2015 07:00:00 GMT".parse().unwrap(),
    );
    assert_eq!(retry_after(&h, now), Some(Duration::ZERO));
    // Neither form: no Retry-After.
    for bad in ["soon", "-5", "1.5", "Wed, 21 Oct 2015"] {
        h.insert(RETRY_AFTER, bad.parse().unwrap());
        assert_eq!(retry_after(&h, now), None, "{bad}");
    }
}

#[test]
fn an_echoed_token_never_reaches_the_error() {
    let json = status_error(
        "GET /x",
        StatusCode::UNAUTHORIZED,
        &HeaderMap::new(),
        br#"{"title": "Unauthorized", "detail": "token tok-123 expired", "errors": [{"detail": "Bearer tok-123"}]}"#,
        "tok-123",
    );
    assert_eq!(
        json.to_string(),
        "GET /x: HTTP 401 Unauthorized: Unauthorized: token [redacted] expired; [-] Bearer [redacted]; \
         check api.access_token or the [api.oauth] credentials (is the token expired or revoked?)"
    );
    let text = status_error(
        "GET /x",
        StatusCode::BAD_REQUEST,
        &HeaderMap::new(),
        b"Authorization: Bearer tok-123",
        "tok-123",
    );
    assert_eq!(
        text.to_string(),
        "GET /x: HTTP 400 Bad Request: unexpected body: Authorization: Bearer [redacted]"
    );
}

#[test]
fn non_json_error_pages_keep_an_excerpt() {
    let err = status_error(
        "GET /x",
        StatusCode::BAD_GATEWAY,
        &HeaderMap::new(),
        b"<html><body>502 Bad Gateway</body></html>\n<p>nginx</p>",
        "tok",
    );
    assert_eq!(
        err.to_string(),
        "GET /x: HTTP 502 Bad Gateway: unexpected body: <html><body>502 Bad Gateway</body></html>"
    );
    assert!(err.is_transient());
}

#[tokio::test]
async fn a_server_slower_than_the_timeout_is_retried_then_named() {
    let fake = FakeService::start(
        |_, _| Reply::status(500, ""),
        |_, _| Reply::ok(call_json()).after(Duration::from_secs(5)),
    )
    .await;
    let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
    config.request_timeout = Duration::from_millis(200);
    config.retry.max_attempts = 2;
    let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
    let counters = Counters::default();
    let err = client.get_call(CALL_UID, &counters).await.unwrap_err();
    let ApiError::RetriesExhausted { attempts, last, .. } = &err else {
        panic!("expected retries, got {err}");
    };
    assert_eq!(*attempts, 2);
    assert!(matches!(**last, ApiError::Timeout { .. }), "{last}");
    assert_eq!(
        last.to_string(),
        format!(
            "GET /api/v1/outbound_calls/{CALL_UID}: no complete response within the request timeout; the service is slow or unreachable (raise api.request_timeout_secs if it is only slow)"
        )
    );
    assert_eq!(fake.api_requests().len(), 2);
    assert_eq!((counters.requests(), counters.retries()), (2, 1));
}

/// A throwaway self-signed certificate for 127.0.0.1, trusted by nobody: a TLS server
/// whose certificate this machine does not trust.
const UNTRUSTED_CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBnDCCAUGgAwIBAgIUZe2s1dEjhFK7a0/41hVJvdoY/XMwCgYIKoZIzj0EAwIw\nFDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyMzAxMDE1OFoYDzIxMjYxMDMw\nMDEwMTU4WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO\nPQMBBwNCAARthPqR8+YmTQtV4//P97sBW3/Pu36M1lvMBJeMZ4OeWM4DNoz7x0lw\nXzHjbyAv68tmDKiUIWQPPrHpFrpJ5KdHo28wbTAdBgNVHQ4EFgQUawX2JtrNBR9K\nrwkTPLp76Lv0o9cwHwYDVR0jBBgwFoAUawX2JtrNBR9KrwkTPLp76Lv0o9cwDwYD\nVR0TAQH/BAUwAwEB/zAaBgNVHREEEzARhwR/AAABgglsb2NhbGhvc3QwCgYIKoZI\nzj0EAwIDSQAwRgIhAMndA2Kng/MTFWWRnHO4qVz+uP+4wtMDwJOBWhiDDLk5AiEA\ngBCuor+/DfREijJPj4p51A9LtAyimAnYtLrcKpVZWEo=\n-----END CERTIFICATE-----";
const UNTRUSTED_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgTdqeghf5XjA1NyPg\nwBbnEPm0sRGOUFydMaPPo54D+JuhRANCAARthPqR8+YmTQtV4//P97sBW3/Pu36M\n1lvMBJeMZ4OeWM4DNoz7x0lwXzHjbyAv68tmDKiUIWQPPrHpFrpJ5KdH\n-----END PRIVATE KEY-----";

/// A TLS server on 127.0.0.1:0 with [`UNTRUSTED_CERT`]; counts connections.
fn untrusted_tls_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = vec![CertificateDer::from_pem_slice(UNTRUSTED_CERT.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(UNTRUSTED_KEY.as_bytes()).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            // Drives the handshake; the client gives up on the certificate.
            let _ = std::io::Read::read(&mut tls, &mut [0u8; 64]);
        }
    });
    (port, connections)
}

/// A plain TCP server on 127.0.0.1:0 that answers anything with plain HTTP; counts
/// connections.
async fn plain_http_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    (port, connections)
}

/// A server answering 200 with a body that never ends: `start`, then `filler` over and
/// over (chunked, about 64 KiB at a time) until the client hangs up, so a decoder reading
/// as it arrives keeps reading; or, with `announced`, a head announcing that many bytes.
async fn endless_body_server(announced: Option<u64>, start: String, filler: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let start = start.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let head = match announced {
                    Some(n) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n"
                    ),
                    None => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_owned(),
                };
                let head = format!("{head}{:x}\r\n{start}\r\n", start.len());
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let fill = filler.repeat((0x10000 / filler.len()).max(1));
                let chunk = format!("{:x}\r\n{fill}\r\n", fill.len());
                while stream.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    port
}

#[tokio::test]
async fn a_response_beyond_the_cap_fails_without_being_read_whole() {
    let fake = FakeService::start(|_, _| Reply::status(500, ""), |_, _| Reply::ok("")).await;
    for announced in [None, Some(5 * 1024 * 1024 * 1024)] {
        let port = endless_body_server(announced, "{\"data\": ".into(), " ").await;
        let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
        config.base_url = Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        config.max_response_bytes = 1024 * 1024;
        let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
        let counters = Counters::default();
        let err = client.get_call(CALL_UID, &counters).await.unwrap_err();
        assert!(
            matches!(err, ApiError::TooLarge { .. }),
            "{announced:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "GET /api/v1/outbound_calls/{CALL_UID}: response larger than 1048576 bytes (api.max_response_mib); the service or a proxy sent far more than a page: report it, or raise the limit if such responses are expected"
            )
        );
        // The same request would bring the same body: not retried.
        assert_eq!(counters.requests(), 1);
    }
}

/// A list page of `rows` calls (uids 1, 2, …) as JSON text, without its closing `]}`.
fn open_page(rows: u128) -> String {
    let calls: Vec<String> = (1..=rows)
        .map(|n| {
            format!(
                r#"{{"uid":"{}","status":"pending","created_at":"2026-01-31T09:00:00Z","updated_at":"2026-01-31T09:00:00Z"}}"#,
                Uuid::from_u128(n)
            )
        })
        .collect();
    format!(r#"{{"pagination":null,"data":[{}"#, calls.join(","))
}

#[tokio::test]
async fn a_page_with_more_rows_than_asked_is_refused_at_the_first_one_too_many() {
    let fake = FakeService::start(
        |_, _| Reply::status(500, ""),
        |_, _| Reply::ok(format!("{}]}}", open_page(101))),
    )
    .await;
    let filter = ListFilter::default();
    let query = ListQuery {
        updated_after: None,
        page: 1,
        page_size: 100,
        filter: &filter,
    };
    let schedule = Uuid::from_u128(7);
    let expected_start = format!(
        "{}: unreadable response (bad_response; application/json): more than the 100 rows asked for (page_size) at line 1 column ",
        ApiClient::describe_list(schedule, &query)
    );
    let expected_end = "; the service sent what callsync cannot read, and asking again brings the same: report the response to the service's operators";

    // A whole page of 101 rows.
    let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
    let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
    let counters = Counters::default();
    let Err(err) = client.list_calls(schedule, &query, &counters).await else {
        panic!("a page of more rows than asked was accepted");
    };
    assert!(matches!(err, ApiError::Decode { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with(&expected_start) && message.ends_with(expected_end),
        "{message}"
    );
    // The same request would bring the same page: not retried.
    assert_eq!(counters.requests(), 1);
    // A page_size beyond the service's 100 asks for 100.
    let asked_101 = ListQuery {
        page_size: 101,
        ..query
    };
    let Err(err) = client.list_calls(schedule, &asked_101, &counters).await else {
        panic!("a page of more rows than asked was accepted");
    };
    assert!(err.to_string().starts_with(&expected_start), "{err}");

    // A page whose body never ends: refused at row 101 all the same, once the body has
    // outgrown what is decoded in place, so the client did not need the rest (reading it
    // whole would end at the size cap or the request timeout instead).
    config.base_url = Url::parse(&format!(
        "http://127.0.0.1:{}",
        // The 100 rows asked for, then rows without end.
        endless_body_server(
            None,
            open_page(100),
            r#",{"uid":"00000000-0000-4000-8000-000000000000","status":"pending","created_at":"2026-01-31T09:00:00Z","updated_at":"2026-01-31T09:00:00Z"}"#,
        )
        .await
    ))
    .unwrap();
    // A regression fails at the timeout, not never.
    config.request_timeout = Duration::from_secs(10);
    config.retry.max_attempts = 1;
    let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
    let err = client
        .list_calls(schedule, &query, &Counters::default())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(&expected_start) && message.ends_with(expected_end),
        "{message}"
    );
}

#[tokio::test]
async fn a_page_of_as_many_rows_as_asked_is_read() {
    let fake = FakeService::start(
        |_, _| Reply::status(500, ""),
        |_, _| Reply::ok(format!(r#"{}],"next_cursor":"x"}}"#, open_page(100))),
    )
    .await;
    let client = ApiClient::new(
        &fake.config(AuthConfig::Static(Secret::new("t"))),
        &AuthConfig::Static(Secret::new("t")),
    )
    .unwrap();
    let filter = ListFilter::default();
    let query = ListQuery {
        updated_after: None,
        page: 1,
        page_size: 100,
        filter: &filter,
    };
    let listed = client
        .list_calls(Uuid::from_u128(7), &query, &Counters::default())
        .await
        .unwrap();
    assert_eq!(listed.page.data.len(), 100);
    assert_eq!(listed.page.data[99].uid, Uuid::from_u128(100));
    assert_eq!(listed.page.pagination, None);
    assert_eq!(
        listed.page.extra.get("next_cursor"),
        Some(&serde_json::json!("x"))
    );
}

#[tokio::test]
async fn tls_failures_are_permanent_and_not_retried() {
    let (untrusted, untrusted_connections) = untrusted_tls_server();
    let (plain, plain_connections) = plain_http_server().await;
    let fake = FakeService::start(|_, _| Reply::status(500, ""), |_, _| Reply::ok("")).await;
    for (port, connections, what) in [
        (untrusted, untrusted_connections, "certificate"),
        (plain, plain_connections, "corrupt message"),
    ] {
        let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
        config.base_url = Url::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        config.retry.max_attempts = 5;
        let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
        let counters = Counters::default();
        let err = client.get_call(CALL_UID, &counters).await.unwrap_err();
        let ApiError::Tls { detail, .. } = &err else {
            panic!("a TLS failure, not {err:?}");
        };
        assert!(detail.contains(what), "{what}: {err}");
        assert!(!err.is_transient());
        assert!(
            err.to_string().starts_with(&format!(
                "GET /api/v1/outbound_calls/{CALL_UID}: TLS failed ("
            )) && err.to_string().ends_with(
                "; check api.base_url (https:// to a port that speaks TLS) and that this machine trusts the service's certificate (the ca-certificates package, or your CA)"
            ),
            "{err}"
        );
        assert_eq!(
            connections.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{what}: one attempt, no retries"
        );
        assert_eq!((counters.requests(), counters.retries()), (1, 0));
    }
}

/// A server answering every request with `response` (head and body, as bytes), then
/// closing the connection; counts the requests.
async fn fixed_response_server(
    response: &'static [u8],
) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let _ = stream.write_all(response).await;
            let _ = stream.shutdown().await;
        }
    });
    (port, requests)
}

#[tokio::test]
async fn json_that_ends_early_is_retried_only_when_nothing_said_where_the_body_ends() {
    let fake = FakeService::start(|_, _| Reply::status(500, ""), |_, _| Reply::ok("")).await;
    let cases: [(&'static [u8], usize); 3] = [
        // Its length announced, and all of it sent: the service's own JSON ends early.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{\"data\": [",
            1,
        ),
        // Chunked, the last chunk sent: the same.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\na\r\n{\"data\": [\r\n0\r\n\r\n",
            1,
        ),
        // Ended by closing the connection, as a cut connection ends it too: retried.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"data\": [",
            3,
        ),
    ];
    for (response, attempts) in cases {
        let (port, requests) = fixed_response_server(response).await;
        let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
        config.base_url = Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        config.retry.max_attempts = 3;
        config.retry.initial_interval = Duration::from_millis(1);
        let client = ApiClient::new(&config, &config.credentials().unwrap()).unwrap();
        let err = client
            .get_call(CALL_UID, &Counters::default())
            .await
            .unwrap_err();
        let head = String::from_utf8_lossy(&response[..40]);
        assert_eq!(err.kind(), crate::ErrorKind::BadResponse, "{head}: {err}");
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            attempts,
            "{head}: {err}"
        );
    }
}
