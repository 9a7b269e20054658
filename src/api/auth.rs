//! `TokenSource`: the bearer token for every request — static, or OAuth 2.0 client credentials.
//!
//! An OAuth token is cached until shortly before it expires and fetched by one task at a time
//! (the others wait for it). The client asks for it as a request goes out, after its wait in
//! the limiter (`exchange.rs`), so the margin before expiry is all a request needs. A 401
//! makes the client call [`TokenSource::invalidate`] and retry once with a fresh token. Tokens are `Secret`s: they never reach a log line or an error, and
//! neither does what a server echoes of them: error bodies pass through [`redact`] (the token
//! endpoint's keep only `error` and `error_description`).

use std::time::Duration;

// tokio's clock, which is the machine's except under a test's `tokio::time::pause`: the tests
// move it past a token's refresh instant instead of waiting for it.
use tokio::time::Instant;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;

use super::error::{ApiError, hint_for};
use super::redact::{FIELD_CHARS, excerpt, safe};
use super::retry::{Attempt, Counters, RetryPolicy};
use crate::config::{AuthConfig, OAuthConfig, Secret};
use crate::service::models::{ErrorBody, TokenResponse};

/// Refresh this long before expiry at most (a quarter of the lifetime for short-lived tokens).
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(30);

/// The longest a token is used before fetching another. `expires_in` comes from outside:
/// a huge value must neither overflow an `Instant` nor pin one token for ever, and a token
/// whose lifetime is not stated (or is zero or negative) is still replaced daily; a 401
/// replaces any token sooner.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

pub struct TokenSource {
    kind: Kind,
}

enum Kind {
    Static(Secret),
    OAuth {
        config: Box<OAuthConfig>,
        cached: Mutex<Option<CachedToken>>,
    },
}

struct CachedToken {
    token: Secret,
    /// When to fetch a new one (sooner if a 401 says so).
    refresh_at: Instant,
}

impl TokenSource {
    pub fn new(auth: &AuthConfig) -> Self {
        let kind = match auth {
            AuthConfig::Static(token) => Kind::Static(token.clone()),
            AuthConfig::OAuth(config) => Kind::OAuth {
                config: Box::new(config.clone()),
                cached: Mutex::new(None),
            },
        };
        TokenSource { kind }
    }

    /// True when a 401 may be cured by fetching a new token.
    pub fn can_refresh(&self) -> bool {
        matches!(self.kind, Kind::OAuth { .. })
    }

    /// The token to send now, fetching one when none is cached or it is about to expire.
    pub async fn bearer(
        &self,
        http: &reqwest::Client,
        retry: &RetryPolicy,
        counters: &Counters,
    ) -> Result<Secret, ApiError> {
        let (config, cached) = match &self.kind {
            Kind::Static(token) => return Ok(token.clone()),
            Kind::OAuth { config, cached } => (config, cached),
        };
        let mut slot = cached.lock().await;
        if let Some(current) = slot.as_ref()
            && Instant::now() < current.refresh_at
        {
            return Ok(current.token.clone());
        }
        let fresh = retry
            .run(&token_request_name(config), |attempt| {
                fetch_token(http, config, counters, attempt)
            })
            .await?;
        let token = fresh.token.clone();
        *slot = Some(fresh);
        Ok(token)
    }

    /// Forgets `used` if it is still the cached token, so the next `bearer` fetches a new one.
    pub async fn invalidate(&self, used: &Secret) {
        if let Kind::OAuth { cached, .. } = &self.kind {
            let mut slot = cached.lock().await;
            if slot.as_ref().is_some_and(|c| &c.token == used) {
                *slot = None;
            }
        }
    }
}

/// A token response is a few hundred bytes; anything near this is not one.
const TOKEN_RESPONSE_LIMIT: u64 = 1024 * 1024;

fn token_request_name(config: &OAuthConfig) -> String {
    format!("POST {} (OAuth token)", config.token_url)
}

async fn fetch_token(
    http: &reqwest::Client,
    config: &OAuthConfig,
    counters: &Counters,
    attempt: Attempt,
) -> Result<CachedToken, ApiError> {
    let request = token_request_name(config);
    let mut form = vec![
        ("grant_type", "client_credentials"),
        ("client_id", config.client_id.as_str()),
        ("client_secret", config.client_secret.expose()),
    ];
    if let Some(scope) = &config.scope {
        form.push(("scope", scope.as_str()));
    }
    let started = Instant::now();
    counters.sent(attempt);
    let response = http
        .post(config.token_url.clone())
        .header(ACCEPT, "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|source| ApiError::transport(&request, "request failed", source))?;
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_owned();
    let framed = super::body::framed(&response);
    let body = super::body::read_capped(response, TOKEN_RESPONSE_LIMIT, &request).await?;
    if !status.is_success() {
        // A server that echoes the form it was sent would put the client secret into the
        // error, and so into the log: only the error fields are kept, without the secret.
        let secrets = [config.client_secret.expose()];
        let said = oauth_error(&body, &secrets);
        return Err(ApiError::Status {
            request,
            status,
            raw_excerpt: said.is_none().then(|| excerpt(&body, &secrets)),
            body: said.map(Box::new),
            retry_after: None,
            hint: if status.as_u16() == 400 || status.as_u16() == 401 {
                "; check api.oauth.client_id, client_secret and scope"
            } else {
                hint_for(status, "POST")
            },
        });
    }
    let parsed: TokenResponse =
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode {
            request,
            content_type,
            framed,
            cause: source,
        })?;
    let lifetime = lifetime(parsed.expires_in.as_ref());
    // Cannot overflow with a lifetime of a day at most; were it to, refresh at once.
    let refresh_at = started
        .checked_add(refresh_after(lifetime))
        .unwrap_or(started);
    Ok(CachedToken {
        token: Secret::new(parsed.access_token),
        refresh_at,
    })
}

/// How long a token may be used, from the token endpoint's `expires_in`: its seconds (a
/// number, or a numeric string), at most [`MAX_TOKEN_LIFETIME`]; that too when it is
/// missing, zero, negative or not a number, since it then says nothing usable.
fn lifetime(expires_in: Option<&Value>) -> Duration {
    let secs = match expires_in {
        None | Some(Value::Null) => return MAX_TOKEN_LIFETIME,
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match secs.filter(|s| s.is_finite() && *s > 0.0) {
        Some(secs) => Duration::try_from_secs_f64(secs)
            .unwrap_or(MAX_TOKEN_LIFETIME)
            .min(MAX_TOKEN_LIFETIME),
        None => {
            tracing::warn!(
                expires_in = %expires_in.map(|v| v.to_string()).unwrap_or_default(),
                "the token endpoint's expires_in is not a positive number of seconds; the token is used until a 401 or for a day"
            );
            MAX_TOKEN_LIFETIME
        }
    }
}

/// When to fetch the next token: shortly before `lifetime` ends, so that no request goes out
/// with a token about to expire.
fn refresh_after(lifetime: Duration) -> Duration {
    lifetime - (lifetime / 4).min(MAX_REFRESH_MARGIN)
}

/// An OAuth error response (RFC 6749 §5.2), or one in the service's shape.
#[derive(Deserialize)]
struct OAuthError {
    error: Option<String>,
    error_description: Option<String>,
    title: Option<String>,
    detail: Option<String>,
}

/// The error and its description from a token endpoint's JSON error body, `secrets` removed;
/// `None` when the body says neither.
fn oauth_error(body: &[u8], secrets: &[&str]) -> Option<ErrorBody> {
    let parsed: OAuthError = serde_json::from_slice(body).ok()?;
    let title = parsed.error.or(parsed.title);
    let detail = parsed.error_description.or(parsed.detail);
    if title.is_none() && detail.is_none() {
        return None;
    }
    Some(ErrorBody {
        title: title.map(|t| safe(&t, secrets, FIELD_CHARS)),
        detail: detail.map(|d| safe(&d, secrets, FIELD_CHARS)),
        errors: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    use url::Url;

    use super::*;

    /// Characters that form and JSON encoding both change: the echo differs from the value.
    const SECRET: &str = "s3cr3t+/ value\"x";

    /// A token endpoint answering every request with `reply(the form it was sent)`.
    async fn token_endpoint(reply: fn(String) -> (StatusCode, String)) -> Url {
        let app = Router::new().route(
            "/token",
            post(move |form: String| async move { reply(form) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/token").parse().unwrap()
    }

    /// The error a token request to an endpoint answering with `reply` ends in.
    async fn token_error(reply: fn(String) -> (StatusCode, String)) -> (String, Url) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let token_url = token_endpoint(reply).await;
        let config = OAuthConfig {
            token_url: token_url.clone(),
            client_id: "callsync".into(),
            client_secret: Secret::new(SECRET),
            scope: None,
        };
        let http = reqwest::Client::builder().build().unwrap();
        let counters = Counters::default();
        match fetch_token(&http, &config, &counters, Attempt::First).await {
            Ok(_) => panic!("the token endpoint refused, yet a token came back"),
            Err(err) => (err.to_string(), token_url),
        }
    }

    const FORM_SENT: &str =
        "grant_type=client_credentials&client_id=callsync&client_secret=[redacted]";

    #[tokio::test]
    async fn an_echoed_form_never_puts_the_client_secret_into_the_error() {
        let (message, url) = token_error(|form| (StatusCode::UNAUTHORIZED, form)).await;
        assert_eq!(
            message,
            format!(
                "POST {url} (OAuth token): HTTP 401 Unauthorized: unexpected body: {FORM_SENT}; check api.oauth.client_id, client_secret and scope"
            )
        );
    }

    #[tokio::test]
    async fn a_json_error_keeps_only_error_and_description_without_the_secret() {
        let (message, url) = token_error(|form| {
            let body = serde_json::json!({
                "error": "invalid_client",
                "error_description": format!("client_secret {SECRET} is wrong"),
                "received": form,
            });
            (StatusCode::UNAUTHORIZED, body.to_string())
        })
        .await;
        assert_eq!(
            message,
            format!(
                "POST {url} (OAuth token): HTTP 401 Unauthorized: invalid_client: client_secret [redacted] is wrong; check api.oauth.client_id, client_secret and scope"
            )
        );
    }

    #[tokio::test]
    async fn json_of_another_shape_is_excerpted_without_the_secret() {
        let (message, url) = token_error(|form| {
            let body = serde_json::json!({ "received": form, "secret": SECRET });
            (StatusCode::INTERNAL_SERVER_ERROR, body.to_string())
        })
        .await;
        assert_eq!(
            message,
            format!(
                "POST {url} (OAuth token): HTTP 500 Internal Server Error: unexpected body: {{\"received\":\"{FORM_SENT}\",\"secret\":\"[redacted]\"}}"
            )
        );
    }
}

/// Token lifetimes and refreshes against a fake service.
#[cfg(test)]
mod token_tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::api::fake::{CALL_UID, CLIENT_SECRET, FakeService, Reply, call_json};
    use crate::api::{ApiClient, Counters};
    use crate::error_chain;

    const REJECTED: &str = r#"{"title":"Unauthorized","detail":"the access token is not valid"}"#;

    /// A service whose token endpoint issues `tok-1`, `tok-2`, … with `expires_in`, and whose
    /// API accepts the tokens `accepts` says yes to.
    async fn service(
        expires_in: Option<&'static str>,
        accepts: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> (FakeService, ApiClient) {
        let fake = FakeService::start(
            move |n, _| Reply::token(&format!("tok-{}", n + 1), expires_in),
            move |_, request| match request.bearer.as_deref() {
                Some(token) if accepts(token) => Reply::ok(call_json()),
                _ => Reply::status(401, REJECTED),
            },
        )
        .await;
        let client = ApiClient::new(&fake.config(fake.oauth()), &fake.oauth()).unwrap();
        (fake, client)
    }

    fn bearers(fake: &FakeService) -> Vec<String> {
        fake.api_requests()
            .into_iter()
            .map(|r| r.bearer.unwrap_or_default())
            .collect()
    }

    #[test]
    fn lifetimes_are_capped_and_refreshed_shortly_before_they_end() {
        let day = MAX_TOKEN_LIFETIME;
        let margin = MAX_REFRESH_MARGIN;
        let cases = [
            (Some(json!(3600)), Duration::from_secs(3600) - margin),
            // A quarter of a short lifetime.
            (Some(json!(8)), Duration::from_secs(6)),
            (Some(json!(1)), Duration::from_millis(750)),
            (Some(json!("3600")), Duration::from_secs(3600) - margin),
            (Some(json!(90.5)), Duration::from_millis(67_875)),
            // Outside input beyond sense: a day at most, never an overflow.
            (Some(json!(u64::MAX)), day - margin),
            (Some(json!(1e308)), day - margin),
            (Some(json!(i64::MIN)), day - margin),
            // Saying nothing usable: a day, or until a 401.
            (Some(json!(0)), day - margin),
            (Some(json!(-5)), day - margin),
            (Some(json!("soon")), day - margin),
            (Some(json!([1])), day - margin),
            (Some(json!(null)), day - margin),
            (None, day - margin),
        ];
        for (expires_in, refresh) in cases {
            assert_eq!(
                refresh_after(lifetime(expires_in.as_ref())),
                refresh,
                "{expires_in:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_token_is_reused_until_shortly_before_it_expires() {
        let (fake, client) = service(Some("3600"), |_| true).await;
        for _ in 0..3 {
            client
                .get_call(CALL_UID, &Counters::default())
                .await
                .unwrap();
        }
        assert_eq!(fake.token_requests().len(), 1);
        assert_eq!(bearers(&fake), ["tok-1", "tok-1", "tok-1"]);

        // An hour's token is refreshed 30 s before its end, at 3570 s: tokio's clock is moved
        // there (virtual time; paused only while it moves, so no request meets a paused timer).
        let advance = |by: Duration| async move {
            tokio::time::pause();
            tokio::time::advance(by).await;
            tokio::time::resume();
        };
        // Patience: the real time since the token came may be up to a minute.
        advance(Duration::from_secs(3570 - 60)).await;
        client
            .get_call(CALL_UID, &Counters::default())
            .await
            .unwrap();
        assert_eq!(bearers(&fake), ["tok-1", "tok-1", "tok-1", "tok-1"]);
        advance(Duration::from_secs(60)).await;
        client
            .get_call(CALL_UID, &Counters::default())
            .await
            .unwrap();
        assert_eq!(fake.token_requests().len(), 2);
        assert_eq!(
            bearers(&fake),
            ["tok-1", "tok-1", "tok-1", "tok-1", "tok-2"]
        );
    }

    #[tokio::test]
    async fn a_huge_zero_negative_or_missing_expires_in_is_used_and_cached() {
        for expires_in in [
            Some("18446744073709551615"),
            Some("1e308"),
            Some("0"),
            Some("-5"),
            Some(r#""3600""#),
            Some("null"),
            None,
        ] {
            let (fake, client) = service(expires_in, |_| true).await;
            for _ in 0..2 {
                client
                    .get_call(CALL_UID, &Counters::default())
                    .await
                    .unwrap();
            }
            assert_eq!(fake.token_requests().len(), 1, "{expires_in:?}");
            assert_eq!(bearers(&fake), ["tok-1", "tok-1"], "{expires_in:?}");
        }
    }

    #[tokio::test]
    async fn a_401_fetches_one_new_token_and_the_request_is_sent_again() {
        let (fake, client) = service(Some("3600"), |token| token == "tok-2").await;
        let counters = Counters::default();
        let call = client.get_call(CALL_UID, &counters).await.unwrap();
        assert_eq!(call.uid, CALL_UID);
        assert_eq!(fake.token_requests().len(), 2);
        assert_eq!(bearers(&fake), ["tok-1", "tok-2"]);
        // The token requests, the rejected request and the one sent again.
        assert_eq!((counters.requests(), counters.retries()), (4, 0));
    }

    #[tokio::test]
    async fn a_fresh_token_rejected_too_is_a_clear_error_not_a_loop() {
        let (fake, client) = service(Some("3600"), |_| false).await;
        let err = client
            .get_call(CALL_UID, &Counters::default())
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "GET /api/v1/outbound_calls/{CALL_UID}: HTTP 401 Unauthorized: Unauthorized: the access token is not valid; \
                 a token fetched just now from api.oauth.token_url was rejected too: check api.oauth.scope and that this client may read the schedule"
            )
        );
        assert_eq!(fake.token_requests().len(), 2);
        assert_eq!(bearers(&fake), ["tok-1", "tok-2"]);
    }

    #[tokio::test]
    async fn token_endpoint_errors_name_the_endpoint_and_never_the_secret() {
        let encoded: String =
            url::form_urlencoded::byte_serialize(CLIENT_SECRET.as_bytes()).collect();
        // Endpoints that echo what they were sent, form-encoded or decoded, in the service's
        // error shape or another; a 4xx fails at once, a 5xx after its retries.
        // (status, the body made from the request's form, what the error must say)
        type Echo = (u16, fn(&str) -> String, &'static str);
        let echoes: [Echo; 4] = [
            (
                401,
                |form| format!(r#"{{"error":"invalid_client","request":"{form}"}}"#),
                "check api.oauth.client_id, client_secret and scope",
            ),
            (
                400,
                |_| {
                    format!(
                        r#"{{"title":"Bad request","detail":"unknown client secret {CLIENT_SECRET}"}}"#
                    )
                },
                "check api.oauth.client_id, client_secret and scope",
            ),
            (403, |form| form.to_owned(), "not allowed"),
            (
                503,
                |form| format!("<html>busy: {form}</html>"),
                "gave up after 3 attempts",
            ),
        ];
        for (status, echo, says) in echoes {
            let fake = FakeService::start(
                move |_, request| Reply::status(status, echo(&request.body)),
                |_, _| Reply::ok(call_json()),
            )
            .await;
            let client = ApiClient::new(&fake.config(fake.oauth()), &fake.oauth()).unwrap();
            let err = client
                .get_call(CALL_UID, &Counters::default())
                .await
                .unwrap_err();
            assert!(
                fake.token_requests()[0].body.contains(&encoded),
                "the secret was sent, so an echo could leak it"
            );
            let text = format!("{} | {err:?}", error_chain(&err));
            assert!(
                !text.contains(CLIENT_SECRET) && !text.contains(&encoded),
                "{status}: {text}"
            );
            let token_url = fake.base_url.join("/oauth/token").unwrap();
            assert!(
                text.starts_with(&format!("POST {token_url} (OAuth token): ")),
                "{status}: {text}"
            );
            assert!(
                text.contains(&format!("HTTP {status}")) && text.contains(says),
                "{status}: {text}"
            );
            assert!(fake.api_requests().is_empty());
        }
    }
}
