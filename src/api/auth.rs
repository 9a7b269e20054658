//! `TokenSource`: the bearer token for every request — static, or OAuth 2.0 client credentials.
//!
//! An OAuth token is cached until shortly before it expires and fetched by one task at a time
//! (the others wait for it). A 401 makes the client call [`TokenSource::invalidate`] and retry
//! once with a fresh token. Tokens are `Secret`s: they never reach a log line or an error, and
//! neither does what a server echoes of them: error bodies pass through [`redact`] (the token
//! endpoint's keep only `error` and `error_description`).

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use tokio::sync::Mutex;

use super::error::{ApiError, hint_for};
use super::models::{ErrorBody, TokenResponse};
use super::retry::{Counters, RetryPolicy};
use crate::config::{AuthConfig, OAuthConfig, Secret};

/// Refresh this long before expiry at most (a quarter of the lifetime for short-lived tokens).
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(30);

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
    /// When to fetch a new one; `None` = until a 401 says otherwise.
    refresh_at: Option<Instant>,
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
            && current.refresh_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(current.token.clone());
        }
        let fresh = retry
            .run(&token_request_name(config), counters, || {
                fetch_token(http, config)
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

fn token_request_name(config: &OAuthConfig) -> String {
    format!("POST {} (OAuth token)", config.token_url)
}

async fn fetch_token(
    http: &reqwest::Client,
    config: &OAuthConfig,
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
    let response = http
        .post(config.token_url.clone())
        .header(ACCEPT, "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|source| ApiError::Transport {
            request: request.clone(),
            problem: "request failed",
            source,
        })?;
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_owned();
    let body = response
        .bytes()
        .await
        .map_err(|source| ApiError::Transport {
            request: request.clone(),
            problem: "reading the response failed",
            source,
        })?;
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
                hint_for(status)
            },
        });
    }
    let parsed: TokenResponse =
        serde_json::from_slice(&body).map_err(|source| ApiError::Decode {
            request,
            content_type,
            source,
        })?;
    let refresh_at = parsed.expires_in.map(|secs| {
        let lifetime = Duration::from_secs(secs);
        started + lifetime - (lifetime / 4).min(MAX_REFRESH_MARGIN)
    });
    Ok(CachedToken {
        token: Secret::new(parsed.access_token),
        refresh_at,
    })
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
        title: title.map(|t| redact(&t, secrets)),
        detail: detail.map(|d| redact(&d, secrets)),
        errors: Vec::new(),
    })
}

/// `body`'s strings with `secrets` removed: a service that echoes the request (its
/// Authorization header) must not put our token into an error or a log line.
pub(crate) fn redact_error_body(mut body: ErrorBody, secrets: &[&str]) -> ErrorBody {
    let clean = |text: &mut Option<String>| {
        if let Some(t) = text.as_mut() {
            *t = redact(t, secrets);
        }
    };
    clean(&mut body.title);
    clean(&mut body.detail);
    for e in &mut body.errors {
        clean(&mut e.title);
        clean(&mut e.detail);
        if let Some(source) = e.source.as_mut() {
            clean(&mut source.pointer);
        }
    }
    body
}

/// `text` with every spelling of each secret a server could echo — as sent in a form, as
/// written inside a JSON string, or plain — replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let form: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        let json = serde_json::to_string(secret).unwrap_or_default();
        let json = json.trim_matches('"');
        for spelling in [form.as_str(), json, secret] {
            if !spelling.is_empty() {
                out = out.replace(spelling, "[redacted]");
            }
        }
    }
    out
}

/// The first line of a body, at most 200 characters, `secrets` removed, for error messages.
pub(crate) fn excerpt(body: &[u8], secrets: &[&str]) -> String {
    // Redacted before it is cut, so no prefix of a secret survives at the cut.
    let text = redact(&String::from_utf8_lossy(body), secrets);
    let line = text.trim().lines().next().unwrap_or("").trim();
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    out
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
        match fetch_token(&http, &config).await {
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

    #[test]
    fn redaction_covers_every_spelling_and_keeps_the_rest() {
        let form: String = url::form_urlencoded::byte_serialize(SECRET.as_bytes()).collect();
        let text = format!("a {SECRET} b {form} c {}", serde_json::json!(SECRET));
        assert_eq!(
            redact(&text, &[SECRET]),
            "a [redacted] b [redacted] c \"[redacted]\""
        );
        assert_eq!(redact("nothing here", &[SECRET, ""]), "nothing here");
    }
}
