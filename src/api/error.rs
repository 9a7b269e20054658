//! `ApiError`: what can go wrong talking to the service, and whether it is worth retrying.
//!
//! Each variant names the request it was about (method and path, never the token). The retry
//! loop asks [`ApiError::is_transient`]; nobody parses messages.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::error::Category;

use crate::ErrorKind;
use crate::service::models::ErrorBody;
use crate::untrusted::untrusted_text;

/// The most characters of a third-party cause (reqwest's, serde_json's, rustls's) an error
/// shows: they may quote what the service sent. A response's own text is capped field by
/// field where it is read (`redact::safe`).
const CAUSE_CHARS: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(
        "cannot set up the HTTPS client: {cause}; check that the machine has a CA certificate store (e.g. the ca-certificates package)"
    )]
    ClientSetup { cause: reqwest::Error },

    /// The cause's chain is made safe to show like a response's text: it may quote what a
    /// server sent.
    #[error("{request}: {problem}: {}", untrusted_text(&crate::error_chain(.cause), CAUSE_CHARS))]
    Transport {
        request: String,
        problem: &'static str,
        cause: reqwest::Error,
    },

    /// No complete response within `api.request_timeout_secs` (or no connection within
    /// `api.connect_timeout_secs`): the service is slow or unreachable. Worth retrying.
    #[error(
        "{request}: {problem}; the service is slow or unreachable (raise {setting} if it is only slow)"
    )]
    Timeout {
        request: String,
        problem: &'static str,
        setting: &'static str,
        #[source]
        source: reqwest::Error,
    },

    /// TLS failed: an untrusted or mismatched certificate, or a port that does not speak
    /// TLS. Retrying cures none of these, so it is permanent and fails fast.
    #[error(
        "{request}: TLS failed ({detail}); check api.base_url (https:// to a port that speaks TLS) and that this machine trusts the service's certificate (the ca-certificates package, or your CA)"
    )]
    Tls {
        request: String,
        detail: String,
        #[source]
        source: reqwest::Error,
    },

    #[error("{request}: HTTP {status}: {}{hint}", describe_body(.body, .raw_excerpt))]
    Status {
        request: String,
        status: StatusCode,
        body: Option<Box<ErrorBody>>,
        /// A short excerpt of a body that was not the service's error shape (e.g. a proxy's page).
        raw_excerpt: Option<String>,
        retry_after: Option<Duration>,
        hint: &'static str,
    },

    /// serde_json's message quotes what the service sent (an unknown value, a bad uid or
    /// timestamp), so it is made safe to show; so is the content type, a header's text. The
    /// kind's name is in the text: `sync_runs.error`, which `status` shows, keeps no other.
    #[error(
        "{request}: unreadable response (bad_response; {}): {}; the service sent what callsync cannot read, and asking again brings the same: report the response to the service's operators",
        untrusted_text(.content_type, 100), untrusted_text(&.cause.to_string(), CAUSE_CHARS)
    )]
    Decode {
        request: String,
        content_type: String,
        /// The response's framing vouched that the body arrived whole (`body::framed`).
        framed: bool,
        cause: serde_json::Error,
    },

    /// A body beyond `api.max_response_mib`: a misbehaving service or proxy. Not retried: the
    /// same request would bring the same body.
    #[error(
        "{request}: response larger than {limit} bytes (api.max_response_mib); the service or a proxy sent far more than a page: report it, or raise the limit if such responses are expected"
    )]
    TooLarge { request: String, limit: u64 },

    /// A request body that cannot be written as JSON (a bug, never the user's data: every
    /// field is a string, a number or a list of them).
    #[error("{request}: cannot encode the request body: {cause}")]
    Encode {
        request: String,
        cause: serde_json::Error,
    },

    #[error("{request}: the service broke the protocol: {problem}")]
    Protocol { request: String, problem: String },

    /// The service asked to be retried later than the retry budget allows: the limits the
    /// operator set win, and the error says both figures.
    #[error(
        "{request}: the service asked to retry after {}, beyond the {} left of api.retry.max_elapsed_secs; raise it to wait that long, or run again later: {last}",
        secs(*.retry_after), secs(*.left)
    )]
    RetryAfterBeyondBudget {
        request: String,
        retry_after: Duration,
        left: Duration,
        last: Box<ApiError>,
    },

    /// Every lane is paused by a `Retry-After` that ends after this request's retry budget:
    /// the request gives up at once rather than wait in vain, naming both figures.
    #[error(
        "{request}: the service asked every client to wait {} more (Retry-After), beyond the {} left of api.retry.max_elapsed_secs; raise it to wait that long, or run again later",
        secs(*.pause_left), secs(*.left)
    )]
    PausedBeyondBudget {
        request: String,
        pause_left: Duration,
        left: Duration,
    },

    #[error("{request}: gave up after {attempts} attempts in {elapsed:.1?}: {last}")]
    RetriesExhausted {
        request: String,
        attempts: u32,
        elapsed: Duration,
        last: Box<ApiError>,
    },
}

impl ApiError {
    /// A failed exchange, classified: a TLS failure (permanent), a timeout, or another
    /// transport problem (connection refused or reset, a body cut short).
    pub(crate) fn transport(request: &str, problem: &'static str, source: reqwest::Error) -> Self {
        let request = request.to_owned();
        if let Some(tls) = tls_failure(&source) {
            // It may name what the server's certificate says.
            let detail = untrusted_text(&tls.to_string(), CAUSE_CHARS);
            return ApiError::Tls {
                request,
                detail,
                source,
            };
        }
        if source.is_timeout() {
            let (problem, setting) = if source.is_connect() {
                (
                    "no connection within the connect timeout",
                    "api.connect_timeout_secs",
                )
            } else {
                (
                    "no complete response within the request timeout",
                    "api.request_timeout_secs",
                )
            };
            return ApiError::Timeout {
                request,
                problem,
                setting,
                source,
            };
        }
        ApiError::Transport {
            request,
            problem,
            cause: source,
        }
    }

    /// What kind of failure this is, for scripts and alerts (`error_kind` on pass lines):
    /// `config` (callsync's own settings), `network` (no answer: connection, TLS,
    /// timeout), `auth` (401, 403: a credential refused), `not_found` (404: a schedule or
    /// call the service does not know), `rate_limited` (429, or a `Retry-After` beyond the
    /// retry budget), `service` (5xx, 408), `bad_response` (a body callsync cannot read),
    /// `protocol` (another answer callsync cannot use, or a request the service refused as
    /// malformed). Retries exhausted are the last failure's.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ApiError::ClientSetup { .. } => ErrorKind::Config,
            ApiError::Transport { .. } | ApiError::Timeout { .. } | ApiError::Tls { .. } => {
                ErrorKind::Network
            }
            ApiError::Status { status, .. } => match *status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ErrorKind::Auth,
                StatusCode::NOT_FOUND => ErrorKind::NotFound,
                StatusCode::TOO_MANY_REQUESTS => ErrorKind::RateLimited,
                StatusCode::REQUEST_TIMEOUT => ErrorKind::Service,
                s if s.is_server_error() => ErrorKind::Service,
                _ => ErrorKind::Protocol,
            },
            ApiError::Decode { .. } => ErrorKind::BadResponse,
            ApiError::Protocol { .. } | ApiError::TooLarge { .. } | ApiError::Encode { .. } => {
                ErrorKind::Protocol
            }
            ApiError::PausedBeyondBudget { .. } => ErrorKind::RateLimited,
            ApiError::RetryAfterBeyondBudget { .. } => ErrorKind::RateLimited,
            ApiError::RetriesExhausted { last, .. } => last.kind(),
        }
    }

    /// Worth another attempt: connection problems, timeouts, bodies that may have been cut
    /// short, 408, 429 and 5xx. Other 4xx, TLS failures and bodies that arrived whole but
    /// cannot be read are permanent: the same request brings the same body.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport { .. } | ApiError::Timeout { .. } => true,
            ApiError::Status { status, .. } => {
                status.is_server_error()
                    || *status == StatusCode::TOO_MANY_REQUESTS
                    || *status == StatusCode::REQUEST_TIMEOUT
            }
            ApiError::Decode { cause, framed, .. } => match cause.classify() {
                // Bytes as they were sent (a cut connection garbles none), or values that
                // are wrong: the service's doing.
                Category::Syntax | Category::Data => false,
                // JSON that ends early: a cut connection's doing only when nothing said
                // where the body ends.
                Category::Eof => !framed,
                Category::Io => true,
            },
            ApiError::ClientSetup { .. }
            | ApiError::Tls { .. }
            | ApiError::Protocol { .. }
            | ApiError::TooLarge { .. }
            | ApiError::Encode { .. }
            | ApiError::RetriesExhausted { .. }
            | ApiError::RetryAfterBeyondBudget { .. }
            | ApiError::PausedBeyondBudget { .. } => false,
        }
    }

    /// Worth another attempt even for a request that must not happen twice (a create): the
    /// service certainly did not act on it — it refused it with 429, or no connection was made.
    /// A timeout or a 5xx may come after the work was done, so neither qualifies.
    pub fn never_reached_the_service(&self) -> bool {
        match self {
            ApiError::Status { status, .. } => *status == StatusCode::TOO_MANY_REQUESTS,
            ApiError::Transport { cause: source, .. } => source.is_connect(),
            _ => false,
        }
    }

    /// The server's requested wait (429 / 503 `Retry-After`), if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            ApiError::RetriesExhausted { last, .. }
            | ApiError::RetryAfterBeyondBudget { last, .. } => last.status(),
            _ => None,
        }
    }

    pub fn is_unauthorized(&self) -> bool {
        self.status() == Some(StatusCode::UNAUTHORIZED)
    }

    /// The resource is not there (404): a call deleted between its listing and its detail.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(StatusCode::NOT_FOUND)
    }

    /// The service refused the request as it was (HTTP 400): sending it again changes
    /// nothing, what it carried must.
    pub fn is_bad_request(&self) -> bool {
        self.status() == Some(StatusCode::BAD_REQUEST)
    }
}

/// The TLS error somewhere in a transport error's causes. `io::Error::source` skips the
/// error it wraps (where rustls puts its own), so wrapped errors are looked into as well.
fn tls_failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// What an operator can do about a status, appended to the message.
/// What to do about an error status of `request` (method, path and query).
pub(crate) fn hint_for(status: StatusCode, request: &str) -> &'static str {
    let walking_a_schedule = request.starts_with("GET /api/v1/schedules/");
    match status {
        StatusCode::UNAUTHORIZED => {
            "; check api.access_token or the [api.oauth] credentials (is the token expired or revoked?)"
        }
        StatusCode::FORBIDDEN => "; the credentials are valid but not allowed to do this",
        StatusCode::NOT_FOUND if walking_a_schedule => {
            "; check the schedule uid in sync.schedules and api.base_url (it must not include /api/v1)"
        }
        StatusCode::NOT_FOUND => "; check the uid, and api.base_url (it must not include /api/v1)",
        StatusCode::CONFLICT if request.contains("/outbound_calls") => {
            "; the schedule is enabled: calls are added to a disabled schedule, or with --force"
        }
        StatusCode::TOO_MANY_REQUESTS => {
            "; the service is rate-limiting callsync, which slows down by itself; if this persists, another client shares the quota: set api.requests_per_second below it"
        }
        _ => "",
    }
}

/// A wait as an operator reads it: tenths of a second, without a trailing `.0`.
fn secs(wait: Duration) -> String {
    let tenths = format!("{:.1}", wait.as_secs_f64());
    format!("{} s", tenths.strip_suffix(".0").unwrap_or(&tenths))
}

fn describe_body(body: &Option<Box<ErrorBody>>, raw: &Option<String>) -> String {
    match (body, raw) {
        (Some(body), _) => body.to_string(),
        (None, Some(raw)) => format!("unexpected body: {raw}"),
        (None, None) => "(empty body)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> ApiError {
        ApiError::Status {
            request: "GET /x".into(),
            status: StatusCode::from_u16(code).unwrap(),
            body: None,
            raw_excerpt: None,
            retry_after: None,
            hint: "",
        }
    }

    fn decode(text: &[u8], framed: bool) -> ApiError {
        ApiError::Decode {
            request: "GET /x".into(),
            content_type: "application/json".into(),
            framed,
            cause: serde_json::from_slice::<crate::service::CallPage>(text).unwrap_err(),
        }
    }

    #[test]
    fn classifies_transient_and_permanent() {
        let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases = [
            (status(500), true),
            (status(502), true),
            (status(503), true),
            (status(429), true),
            (status(408), true),
            (status(400), false),
            (status(401), false),
            (status(404), false),
            // Ends early: cut short, unless the framing said it had all arrived.
            (decode(b"{\"data\": [", false), true),
            (decode(b"{\"data\": [", true), false),
            // Arrived as sent, and unreadable: the same again on every attempt.
            (decode(b"<html>", false), false),
            (decode(b"{\"data\": [], \"x\": \"\xff\"}", false), false),
            (decode(nested.as_bytes(), false), false),
            (decode(b"{\"data\": 5}", false), false),
        ];
        for (err, transient) in cases {
            assert_eq!(err.is_transient(), transient, "{err}");
            if let ApiError::Decode { .. } = err {
                assert_eq!(err.kind(), ErrorKind::BadResponse, "{err}");
            }
        }
    }

    #[test]
    fn status_message_names_request_body_and_hint() {
        let err = ApiError::Status {
            request: "GET /api/v1/schedules/abc/outbound_calls".into(),
            status: StatusCode::NOT_FOUND,
            body: Some(Box::new(ErrorBody::new("Not found", "no schedule abc"))),
            raw_excerpt: None,
            retry_after: None,
            hint: hint_for(
                StatusCode::NOT_FOUND,
                "GET /api/v1/schedules/abc/outbound_calls",
            ),
        };
        assert_eq!(
            err.to_string(),
            "GET /api/v1/schedules/abc/outbound_calls: HTTP 404 Not Found: Not found: no schedule abc; \
             check the schedule uid in sync.schedules and api.base_url (it must not include /api/v1)"
        );
    }

    #[test]
    fn a_pause_beyond_the_budget_names_both_and_is_permanent() {
        let err = ApiError::PausedBeyondBudget {
            request: "GET /api/v1/outbound_calls/abc".into(),
            pause_left: Duration::from_secs(200),
            left: Duration::from_millis(119_500),
        };
        assert_eq!(
            err.to_string(),
            "GET /api/v1/outbound_calls/abc: the service asked every client to wait 200 s more (Retry-After), beyond the 119.5 s left of api.retry.max_elapsed_secs; raise it to wait that long, or run again later"
        );
        assert!(!err.is_transient());
    }
}
