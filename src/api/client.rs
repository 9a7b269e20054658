//! `ApiClient`: the two read endpoints the sync needs, over reqwest with rustls.
//!
//! One method per endpoint. Every request goes through the shared rate limiter, the token
//! source (one refresh on a 401) and the retry policy; responses become typed models or an
//! [`ApiError`] naming the request. Only the spec's query parameters are ever sent, URL-encoded
//! by reqwest (a `+` in a timestamp reaches the server as `%2B`). No sync logic lives here.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use url::Url;
use uuid::Uuid;

use super::auth::{TokenSource, excerpt, redact_error_body};
use super::error::{ApiError, hint_for};
use super::filter::ListFilter;
use super::models::{CallPage, ErrorBody, OutboundCall, SingleObject};
use super::retry::{Counters, RetryPolicy};
use super::timestamp::Timestamp;
use crate::config::ApiConfig;

/// The service's maximum page size.
pub const MAX_PAGE_SIZE: u32 = 100;

/// One list request: the paging parameters and the configured filters.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    pub updated_after: Option<Timestamp>,
    pub page: u32,
    pub page_size: u32,
    pub filter: &'a ListFilter,
}

/// Cheap to clone; clones share the connection pool, the token cache and the rate limiter.
#[derive(Clone)]
pub struct ApiClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base_url: Url,
    tokens: TokenSource,
    retry: RetryPolicy,
    limiter: Option<DefaultDirectRateLimiter>,
}

impl ApiClient {
    /// Fails without credentials ([`ApiConfig::credentials`]): every request needs them.
    pub fn new(config: &ApiConfig) -> Result<Self, ApiError> {
        let tokens = TokenSource::new(config.credentials()?);
        // reqwest is built without a default crypto provider (no OpenSSL, no C toolchain beyond
        // a C compiler): install ring once per process. An error means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("callsync/", env!("CARGO_PKG_VERSION")))
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|source| ApiError::ClientSetup { source })?;
        let limiter = config
            .requests_per_second
            .and_then(NonZeroU32::new)
            .map(|rps| RateLimiter::direct(Quota::per_second(rps)));
        Ok(ApiClient {
            inner: Arc::new(Inner {
                http,
                base_url: config.base_url.clone(),
                tokens,
                retry: RetryPolicy::new(config.retry.clone()),
                limiter,
            }),
        })
    }

    /// `GET /api/v1/schedules/{uid}/outbound_calls`.
    pub async fn list_calls(
        &self,
        schedule: Uuid,
        query: &ListQuery<'_>,
        counters: &Counters,
    ) -> Result<CallPage, ApiError> {
        let url = self.endpoint(&["schedules", &schedule.to_string(), "outbound_calls"]);
        let mut pairs = query.filter.to_query();
        if let Some(after) = query.updated_after {
            pairs.push(("updated_after", after.to_rfc3339()));
        }
        pairs.push(("page", query.page.max(1).to_string()));
        pairs.push((
            "page_size",
            query.page_size.clamp(1, MAX_PAGE_SIZE).to_string(),
        ));
        self.get_json(url, &pairs, counters).await
    }

    /// `GET /api/v1/outbound_calls/{uid}`: the call with every attempt's children.
    pub async fn get_call(&self, uid: Uuid, counters: &Counters) -> Result<OutboundCall, ApiError> {
        let url = self.endpoint(&["outbound_calls", &uid.to_string()]);
        let call: SingleObject<OutboundCall> = self.get_json(url, &[], counters).await?;
        Ok(call.into_inner())
    }

    fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.inner.base_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        url: Url,
        query: &[(&'static str, String)],
        counters: &Counters,
    ) -> Result<T, ApiError> {
        let name = format!("GET {}{}", url.path(), describe_query(query));
        let inner = &self.inner;
        inner
            .retry
            .run(&name, counters, || async {
                let body = self.send_authorized(&name, &url, query, counters).await?;
                decode(&name, &body)
            })
            .await
    }

    /// One attempt: waits for the rate limiter, sends with the current token, and on a 401
    /// fetches a fresh token and sends once more.
    async fn send_authorized(
        &self,
        name: &str,
        url: &Url,
        query: &[(&'static str, String)],
        counters: &Counters,
    ) -> Result<Body, ApiError> {
        let inner = &self.inner;
        let token = inner
            .tokens
            .bearer(&inner.http, &inner.retry, counters)
            .await?;
        match self
            .send_once(name, url, query, token.expose(), counters)
            .await
        {
            Err(err) if err.is_unauthorized() && inner.tokens.can_refresh() => {
                tracing::info!(request = name, "token rejected; fetching a new one");
                inner.tokens.invalidate(&token).await;
                let fresh = inner
                    .tokens
                    .bearer(&inner.http, &inner.retry, counters)
                    .await?;
                counters
                    .requests
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.send_once(name, url, query, fresh.expose(), counters)
                    .await
            }
            other => other,
        }
    }

    async fn send_once(
        &self,
        name: &str,
        url: &Url,
        query: &[(&'static str, String)],
        token: &str,
        counters: &Counters,
    ) -> Result<Body, ApiError> {
        let inner = &self.inner;
        if let Some(limiter) = &inner.limiter {
            limiter.until_ready().await;
        }
        let transport = |problem: &'static str| {
            move |source| ApiError::Transport {
                request: name.to_owned(),
                problem,
                source,
            }
        };
        let response = inner
            .http
            .request(Method::GET, url.clone())
            .query(query)
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(transport("request failed (connection, timeout or TLS)"))?;
        let status = response.status();
        counters.record_status(status.as_u16());
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(transport("reading the response body failed"))?;
        if status.is_success() {
            return Ok(Body {
                content_type: content_type(&headers),
                bytes,
            });
        }
        Err(status_error(name, status, &headers, &bytes, token))
    }
}

/// A successful response body, not yet decoded.
struct Body {
    content_type: String,
    bytes: bytes::Bytes,
}

fn decode<T: DeserializeOwned>(name: &str, body: &Body) -> Result<T, ApiError> {
    serde_json::from_slice(&body.bytes).map_err(|source| ApiError::Decode {
        request: name.to_owned(),
        content_type: body.content_type.clone(),
        source,
    })
}

/// The error for a non-2xx response; `token` (the one sent) is removed from what the body
/// says, in case the service echoes the request.
fn status_error(
    name: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    token: &str,
) -> ApiError {
    let secrets = [token];
    let parsed = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .filter(|b| b.title.is_some() || b.detail.is_some() || !b.errors.is_empty())
        .map(|b| redact_error_body(b, &secrets));
    if status.is_client_error() {
        // A 4xx is our fault or our credentials': log everything the service said about it.
        tracing::error!(
            request = name,
            status = status.as_u16(),
            title = parsed.as_ref().and_then(|b| b.title.as_deref()),
            detail = parsed.as_ref().and_then(|b| b.detail.as_deref()),
            errors = %parsed.as_ref().map(|b| b.to_string()).unwrap_or_default(),
            "the service rejected a request"
        );
    }
    ApiError::Status {
        request: name.to_owned(),
        status,
        raw_excerpt: parsed
            .is_none()
            .then(|| excerpt(body, &secrets))
            .filter(|e| !e.is_empty()),
        body: parsed.map(Box::new),
        retry_after: retry_after(headers),
        hint: hint_for(status),
    }
}

/// `Retry-After` in seconds (the form the service uses); an HTTP date is ignored.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_owned()
}

/// `?updated_after=…&page=…` for error messages and logs (values are not secrets).
fn describe_query(query: &[(&'static str, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("?{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_only() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
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
}
