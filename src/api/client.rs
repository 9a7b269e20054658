//! `ApiClient`: the two read endpoints the sync needs (and `authenticate`, for `check`), over
//! reqwest with rustls; the write endpoints are `write.rs`'s.
//!
//! One method per endpoint. Every request goes through the shared rate limiter, the token
//! source (one refresh on a 401) and the retry policy (`exchange.rs`); responses become typed models or an
//! [`ApiError`] naming the request. Only the spec's query parameters are ever sent, URL-encoded
//! by reqwest (a `+` in a timestamp reaches the server as `%2B`). No sync logic lives here.

use std::num::NonZeroU32;
use std::sync::Arc;

use url::Url;
use uuid::Uuid;

use super::auth::TokenSource;
use super::error::ApiError;
use super::limiter::{Limiter, PassSlot};
use super::observe::RequestObserver;
use super::retry::{Counters, RetryPolicy};
use crate::config::{ApiConfig, AuthConfig, DEFAULT_CONCURRENCY};
use crate::service::BoundedPage;
use crate::service::MAX_PAGE_SIZE;
use crate::service::filter::ListFilter;
use crate::service::models::{CallPage, OutboundCall, SingleObject};
use crate::service::timestamp::Timestamp;

/// One list request: the paging parameters and the configured filters.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    pub updated_after: Option<Timestamp>,
    pub page: u32,
    pub page_size: u32,
    pub filter: &'a ListFilter,
}

/// A page of calls and the service's clock when it answered (its `Date` header), which is
/// what bounds a pass and caps a checkpoint: the service's own "now", never ours.
#[derive(Debug, Clone)]
pub struct Listed {
    pub page: CallPage,
    /// `None` when the response had no parseable `Date` header.
    pub served_at: Option<Timestamp>,
    /// The body's size, when the response said it (`Content-Length`).
    pub bytes: Option<u64>,
}

/// Cheap to clone; clones share the connection pool, the token cache and the rate limiter.
#[derive(Clone)]
pub struct ApiClient {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) http: reqwest::Client,
    pub(super) base_url: Url,
    pub(super) tokens: TokenSource,
    pub(super) retry: RetryPolicy,
    pub(super) limiter: Limiter,
    pub(super) max_response_bytes: u64,
    /// Told of every answer as it arrives (the daemon's metrics); set at most once.
    pub(super) observer: std::sync::OnceLock<Arc<dyn RequestObserver>>,
}

impl ApiClient {
    /// A client for `config` that authenticates with `credentials`, resolved by the caller
    /// ([`ApiConfig::credentials`], which reads the secret files) before the client exists.
    /// At most the default `sync.concurrency` requests in flight: see [`Self::with_concurrency`].
    pub fn new(config: &ApiConfig, credentials: &AuthConfig) -> Result<Self, ApiError> {
        Self::with_concurrency(config, credentials, DEFAULT_CONCURRENCY)
    }

    /// [`Self::new`], with at most `max_in_flight` requests in flight at once (the limit adapts
    /// below it: `limiter.rs`), and as many passes running.
    pub fn with_concurrency(
        config: &ApiConfig,
        credentials: &AuthConfig,
        max_in_flight: usize,
    ) -> Result<Self, ApiError> {
        let tokens = TokenSource::new(credentials);
        // reqwest is built without a default crypto provider (no OpenSSL, no C toolchain beyond
        // a C compiler): install ring once per process. An error means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("callsync/", env!("CARGO_PKG_VERSION")))
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|source| ApiError::ClientSetup { cause: source })?;
        let limiter = Limiter::new(
            config.requests_per_second.and_then(NonZeroU32::new),
            max_in_flight,
        );
        Ok(ApiClient {
            inner: Arc::new(Inner {
                http,
                base_url: config.base_url.clone(),
                tokens,
                retry: RetryPolicy::new(config.retry.clone()),
                limiter,
                max_response_bytes: config.max_response_bytes,
                observer: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Tells `observer` of every request this client (and its clones) sends from now on.
    /// Only the first observer set is kept.
    pub fn observe_requests(&self, observer: Arc<dyn RequestObserver>) {
        let _ = self.inner.observer.set(observer);
    }

    /// Waits until one more pass may run: as many run at once as requests may be in flight
    /// (the limit that adapts to the service); a waiter holds only its place in the queue.
    /// `None` never comes (the slots are never closed), but callers need not trust that.
    pub async fn pass_slot(&self) -> Option<PassSlot> {
        self.inner.limiter.pass_slot().await
    }

    /// `GET /api/v1/schedules/{uid}/outbound_calls`.
    pub async fn list_calls(
        &self,
        schedule: Uuid,
        query: &ListQuery<'_>,
        counters: &Counters,
    ) -> Result<Listed, ApiError> {
        let url = self.endpoint(&["schedules", &schedule.to_string(), "outbound_calls"]);
        let pairs = list_pairs(query);
        // A page with more rows than asked is refused at the first one too many, as it
        // arrives (the walker checks the count again, distrusting any page).
        let bounded = BoundedPage {
            max_rows: page_size_sent(query) as usize,
            lenient: false,
        };
        let answer = self.get_json_dated(url, &pairs, counters, bounded).await?;
        Ok(Listed {
            page: answer.value,
            served_at: answer.date,
            bytes: answer.bytes,
        })
    }

    /// Gets the token the next request will send: fetches one from `api.oauth.token_url`
    /// when none is cached (retried like any request); nothing to do for a static token.
    /// For `check`, which tells a refused client secret from a refused token.
    pub async fn authenticate(&self, counters: &Counters) -> Result<(), ApiError> {
        let inner = &self.inner;
        inner
            .tokens
            .bearer(&inner.http, &inner.retry, counters)
            .await
            .map(drop)
    }

    /// `GET /api/v1/outbound_calls/{uid}`: the call with every attempt's children.
    pub async fn get_call(&self, uid: Uuid, counters: &Counters) -> Result<OutboundCall, ApiError> {
        Ok(self.get_call_sized(uid, counters).await?.0)
    }

    /// [`Self::get_call`], with the body's size when the response said it (`Content-Length`):
    /// what a detail fetched ahead of the walk weighs while it waits.
    pub async fn get_call_sized(
        &self,
        uid: Uuid,
        counters: &Counters,
    ) -> Result<(OutboundCall, Option<u64>), ApiError> {
        let url = self.endpoint(&["outbound_calls", &uid.to_string()]);
        let whole = std::marker::PhantomData::<SingleObject<OutboundCall>>;
        let answer = self.get_json_dated(url, &[], counters, whole).await?;
        Ok((answer.value.into_inner(), answer.bytes))
    }

    /// How errors and logs name a list request: `GET /api/v1/schedules/…?updated_after=…`.
    pub fn describe_list(schedule: Uuid, query: &ListQuery<'_>) -> String {
        format!(
            "GET /api/v1/schedules/{schedule}/outbound_calls{}",
            describe_query(&list_pairs(query))
        )
    }

    pub(super) fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.inner.base_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }
}

/// The query of a list request: the configured filters, then the paging parameters.
fn list_pairs(query: &ListQuery<'_>) -> Vec<(&'static str, String)> {
    let mut pairs = query.filter.to_query();
    if let Some(after) = query.updated_after {
        pairs.push(("updated_after", after.to_rfc3339()));
    }
    pairs.push(("page", query.page.max(1).to_string()));
    pairs.push(("page_size", page_size_sent(query).to_string()));
    pairs
}

/// The `page_size` a list request asks for: within what the service allows.
fn page_size_sent(query: &ListQuery<'_>) -> u32 {
    query.page_size.clamp(1, MAX_PAGE_SIZE)
}

/// `?updated_after=…&page=…` for error messages and logs (values are not secrets).
pub(super) fn describe_query(query: &[(&'static str, String)]) -> String {
    if query.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("?{}", parts.join("&"))
}
