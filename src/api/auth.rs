//! `TokenSource`: the bearer token for every request — static, or OAuth 2.0 client credentials.
//!
//! An OAuth token is cached until shortly before it expires and fetched by one task at a time
//! (the others wait for it). A 401 makes the client call [`TokenSource::invalidate`] and retry
//! once with a fresh token. Tokens are `Secret`s: they never reach a log line or an error.

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE};
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
        // An OAuth error body ({"error": "invalid_client"}) is not the service's error shape;
        // show its text, which never contains our secret.
        return Err(ApiError::Status {
            request,
            status,
            body: serde_json::from_slice::<ErrorBody>(&body)
                .ok()
                .filter(|b| b.title.is_some())
                .map(Box::new),
            raw_excerpt: Some(excerpt(&body)),
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

/// The first line of a body, at most 200 characters, for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.trim().lines().next().unwrap_or("").trim();
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    out
}
