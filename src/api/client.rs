//! `ApiClient`: the two read endpoints the sync needs, over reqwest with rustls.
//!
//! One method per endpoint. Every request goes through the shared rate limiter, the token
//! source (one refresh on a 401) and the retry policy; responses become typed models or an
//! [`ApiError`] naming the request. Only the spec's query parameters are ever sent, URL-encoded
//! by reqwest (a `+` in a timestamp reaches the server as `%2B`). No sync logic lives here.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, DATE, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::{DeserializeOwned, DeserializeSeed};
use url::Url;
use uuid::Uuid;

use super::auth::{TokenSource, excerpt, safe_error_body};
use super::error::{ApiError, hint_for};
use super::limiter::Limiter;
use super::observe::RequestObserver;
use super::retry::{Counters, RetryPolicy};
use crate::config::ApiConfig;
use crate::service::MAX_PAGE_SIZE;
use crate::service::filter::ListFilter;
use crate::service::models::{BoundedPage, CallPage, ErrorBody, OutboundCall, SingleObject};
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
    limiter: Limiter,
    max_response_bytes: u64,
    /// Told of every answer as it arrives (the daemon's metrics); set at most once.
    observer: std::sync::OnceLock<Arc<dyn RequestObserver>>,
}

impl ApiClient {
    /// Fails without credentials ([`ApiConfig::credentials`]): every request needs them.
    pub fn new(config: &ApiConfig) -> Result<Self, ApiError> {
        let tokens = TokenSource::new(&config.credentials()?);
        // reqwest is built without a default crypto provider (no OpenSSL, no C toolchain beyond
        // a C compiler): install ring once per process. An error means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("callsync/", env!("CARGO_PKG_VERSION")))
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|source| ApiError::ClientSetup { cause: source })?;
        let limiter = Limiter::new(config.requests_per_second.and_then(NonZeroU32::new));
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
        };
        let (page, served_at) = self.get_json_dated(url, &pairs, counters, bounded).await?;
        Ok(Listed { page, served_at })
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
        let url = self.endpoint(&["outbound_calls", &uid.to_string()]);
        let call: SingleObject<OutboundCall> = self.get_json(url, &[], counters).await?;
        Ok(call.into_inner())
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

    pub(super) async fn get_json<T: DeserializeOwned + Send + 'static>(
        &self,
        url: Url,
        query: &[(&'static str, String)],
        counters: &Counters,
    ) -> Result<T, ApiError> {
        let whole = std::marker::PhantomData::<T>;
        Ok(self.get_json_dated(url, query, counters, whole).await?.0)
    }

    /// The body decoded by `seed`, and the response's `Date`.
    async fn get_json_dated<T, S>(
        &self,
        url: Url,
        query: &[(&'static str, String)],
        counters: &Counters,
        seed: S,
    ) -> Result<(T, Option<Timestamp>), ApiError>
    where
        S: for<'de> DeserializeSeed<'de, Value = T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        let request = Request {
            method: Method::GET,
            url,
            query,
            json: None,
        };
        self.exchange_seeded(&request, ApiError::is_transient, counters, seed)
            .await
    }

    /// Sends `request` (retried while `worth_retrying` says so) and decodes the answer.
    pub(super) async fn exchange<T: DeserializeOwned + Send + 'static>(
        &self,
        request: &Request<'_>,
        worth_retrying: fn(&ApiError) -> bool,
        counters: &Counters,
    ) -> Result<(T, Option<Timestamp>), ApiError> {
        let whole = std::marker::PhantomData::<T>;
        self.exchange_seeded(request, worth_retrying, counters, whole)
            .await
    }

    /// [`Self::exchange`], decoding the answer with `seed` (see `decode`).
    async fn exchange_seeded<T, S>(
        &self,
        request: &Request<'_>,
        worth_retrying: fn(&ApiError) -> bool,
        counters: &Counters,
        seed: S,
    ) -> Result<(T, Option<Timestamp>), ApiError>
    where
        S: for<'de> DeserializeSeed<'de, Value = T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        let name = request.name();
        let limit = self.inner.max_response_bytes;
        let deadline = self.inner.retry.deadline();
        self.inner
            .retry
            .run_when(&name, counters, worth_retrying, || async {
                let answer = self
                    .send_authorized(&name, request, deadline, counters)
                    .await?;
                let date = answer.date;
                Ok((decode(&name, answer, limit, seed.clone()).await?, date))
            })
            .await
    }

    /// One attempt: waits for the rate limiter, sends with the current token, and on a 401
    /// fetches a fresh token and sends once more (a 401 means nothing was done, so this is
    /// safe for a create too).
    async fn send_authorized(
        &self,
        name: &str,
        request: &Request<'_>,
        deadline: tokio::time::Instant,
        counters: &Counters,
    ) -> Result<Answer, ApiError> {
        let inner = &self.inner;
        let token = inner
            .tokens
            .bearer(&inner.http, &inner.retry, counters)
            .await?;
        match self
            .send_once(name, request, token.expose(), deadline, counters)
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
                // Once only: a token fetched this instant that is rejected too will not be
                // cured by another (and a 401 is permanent, so no retry loops on it either).
                self.send_once(name, request, fresh.expose(), deadline, counters)
                    .await
                    .map_err(fresh_token_rejected)
            }
            other => other,
        }
    }

    async fn send_once(
        &self,
        name: &str,
        request: &Request<'_>,
        token: &str,
        deadline: tokio::time::Instant,
        counters: &Counters,
    ) -> Result<Answer, ApiError> {
        let inner = &self.inner;
        let grant = inner
            .limiter
            .acquire(counters.lane(), deadline)
            .await
            .map_err(|paused| ApiError::PausedBeyondBudget {
                request: name.to_owned(),
                pause_left: paused.pause_left,
                left: paused.left,
            })?;
        counters.add_throttled(grant.waited);
        let transport =
            |problem: &'static str| move |source| ApiError::transport(name, problem, source);
        let mut builder = inner
            .http
            .request(request.method.clone(), request.url.clone())
            .query(request.query)
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(ACCEPT, "application/json");
        if let Some(json) = &request.json {
            builder = builder
                .header(CONTENT_TYPE, "application/json")
                .body(json.clone());
        }
        let sent = std::time::Instant::now();
        let response = builder.send().await;
        let observer = inner.observer.get();
        let response = match response {
            Ok(response) => response,
            Err(source) => {
                if let Some(observer) = observer {
                    observer.unanswered(sent.elapsed());
                }
                return Err(transport("request failed (connection, timeout or TLS)")(
                    source,
                ));
            }
        };
        let status = response.status();
        if let Some(observer) = observer {
            observer.answered(status.as_u16(), sent.elapsed());
        }
        counters.record_status(status.as_u16());
        let headers = response.headers().clone();
        if status == StatusCode::TOO_MANY_REQUESTS {
            inner.limiter.rate_limited(&grant, retry_after(&headers));
        } else {
            inner.limiter.succeeded(&grant);
        }
        if status.is_success() {
            return Ok(Answer {
                content_type: content_type(&headers),
                date: date(&headers),
                response,
            });
        }
        let bytes = read_capped(response, inner.max_response_bytes, name).await?;
        Err(status_error(name, status, &headers, &bytes, token))
    }
}

/// One request, as each attempt sends it again.
pub(super) struct Request<'a> {
    pub method: Method,
    pub url: Url,
    pub query: &'a [(&'static str, String)],
    /// A JSON body, serialized once.
    pub json: Option<bytes::Bytes>,
}

impl Request<'_> {
    /// How errors and logs name it: method, path and query, never the body (personal data).
    fn name(&self) -> String {
        format!(
            "{} {}{}",
            self.method,
            self.url.path(),
            describe_query(self.query)
        )
    }
}

/// The body, read whole as it arrives (for error bodies and tokens, which are small).
pub(super) async fn read_capped(
    response: reqwest::Response,
    limit: u64,
    request: &str,
) -> Result<bytes::Bytes, ApiError> {
    let mut chunks = CappedBody::new(response, limit, request)?;
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await? {
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A body's chunks as they arrive, refused as soon as they exceed `limit` bytes (or the
/// response announces more): an endless or enormous body fails its request instead of
/// filling memory.
struct CappedBody<'a> {
    response: reqwest::Response,
    limit: u64,
    read: u64,
    request: &'a str,
}

impl<'a> CappedBody<'a> {
    fn new(response: reqwest::Response, limit: u64, request: &'a str) -> Result<Self, ApiError> {
        let body = CappedBody {
            response,
            limit,
            read: 0,
            request,
        };
        if body
            .response
            .content_length()
            .is_some_and(|announced| announced > limit)
        {
            return Err(body.too_large());
        }
        Ok(body)
    }

    async fn next(&mut self) -> Result<Option<bytes::Bytes>, ApiError> {
        let chunk = self.response.chunk().await.map_err(|source| {
            ApiError::transport(self.request, "reading the response body failed", source)
        })?;
        if let Some(chunk) = &chunk {
            self.read += chunk.len() as u64;
            if self.read > self.limit {
                return Err(self.too_large());
            }
        }
        Ok(chunk)
    }

    fn too_large(&self) -> ApiError {
        ApiError::TooLarge {
            request: self.request.to_owned(),
            limit: self.limit,
        }
    }
}

/// Bodies up to this size are read whole and decoded in place: serde_json reads a slice
/// several times faster than a reader, and a page of 100 calls is well under 1 MiB. A body
/// that grows beyond it is decoded as it arrives (`decode_streaming`), so a decoder that
/// refuses it early (a list page at its first row beyond `page_size`) stops the reading
/// there, and no more than this is ever held before decoding starts.
const DECODE_IN_PLACE_BYTES: usize = 4 << 20;

/// Chunks of a body that may wait for the streaming decoder.
const CHUNKS_AHEAD: usize = 8;

/// Decodes a successful body with `seed`: in place when it ends within
/// `DECODE_IN_PLACE_BYTES`, as it arrives otherwise.
async fn decode<T, S>(name: &str, answer: Answer, limit: u64, seed: S) -> Result<T, ApiError>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Send + 'static,
    T: Send + 'static,
{
    let Answer {
        content_type,
        response,
        ..
    } = answer;
    let mut body = CappedBody::new(response, limit, name)?;
    let mut buffered = bytes::BytesMut::new();
    while buffered.len() <= DECODE_IN_PLACE_BYTES {
        match body.next().await? {
            Some(chunk) => buffered.extend_from_slice(&chunk),
            None => {
                let decoded = decode_slice(seed, &buffered);
                return decoded_value(name, &content_type, Ok(decoded));
            }
        }
    }
    decode_streaming(name, &content_type, buffered.freeze(), body, seed).await
}

fn decode_slice<T, S>(seed: S, body: &[u8]) -> serde_json::Result<T>
where
    S: for<'de> DeserializeSeed<'de, Value = T>,
{
    decode_whole(seed, serde_json::Deserializer::from_slice(body))
}

/// One JSON value and nothing after it.
fn decode_whole<'de, R, T, S>(
    seed: S,
    mut json: serde_json::Deserializer<R>,
) -> serde_json::Result<T>
where
    R: serde_json::de::Read<'de>,
    S: DeserializeSeed<'de, Value = T>,
{
    let value = seed.deserialize(&mut json)?;
    json.end()?;
    Ok(value)
}

/// Decodes the rest of a large body as it arrives, `received` first: serde_json reads it on
/// a blocking thread while this task receives it, and whatever the decoder refuses stops
/// the reading.
async fn decode_streaming<T, S>(
    name: &str,
    content_type: &str,
    received: bytes::Bytes,
    mut body: CappedBody<'_>,
    seed: S,
) -> Result<T, ApiError>
where
    S: for<'de> DeserializeSeed<'de, Value = T> + Send + 'static,
    T: Send + 'static,
{
    let (chunks, receiver) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    let mut decoding = tokio::task::spawn_blocking(move || {
        let received = std::io::BufReader::new(ReceivedChunks {
            receiver,
            current: received,
        });
        decode_whole(seed, serde_json::Deserializer::from_reader(received))
    });
    let reading = async move {
        while let Some(chunk) = body.next().await? {
            if chunks.send(chunk).await.is_err() {
                break; // the decoder has stopped: its result says why
            }
        }
        Ok(())
    };
    let read: Result<(), ApiError> = tokio::select! {
        read = reading => read,
        decoded = &mut decoding => return decoded_value(name, content_type, decoded),
    };
    // A transport failure or a body beyond the cap: what the decoder made of the cut-off
    // body does not matter.
    read?;
    decoded_value(name, content_type, decoding.await)
}

fn decoded_value<T>(
    name: &str,
    content_type: &str,
    decoded: Result<serde_json::Result<T>, tokio::task::JoinError>,
) -> Result<T, ApiError> {
    let cause = match decoded {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(cause)) => cause,
        Err(join) => match join.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Only a runtime shutting down cancels a blocking task.
            Err(_) => serde_json::Error::io(std::io::Error::other(
                "decoding stopped: the runtime is shutting down",
            )),
        },
    };
    Err(ApiError::Decode {
        request: name.to_owned(),
        content_type: content_type.to_owned(),
        cause,
    })
}

/// The chunks a response's task receives, as a blocking reader for serde_json; the end of
/// the channel is the end of the body.
struct ReceivedChunks {
    receiver: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl std::io::Read for ReceivedChunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// The answer to the request retried with a fresh token: a second 401 says so, since
/// "check the token" would mislead when the token is new.
fn fresh_token_rejected(mut err: ApiError) -> ApiError {
    if let ApiError::Status {
        status: StatusCode::UNAUTHORIZED,
        hint,
        ..
    } = &mut err
    {
        *hint = "; a token fetched just now from api.oauth.token_url was rejected too: check api.oauth.scope and that this client may read the schedule";
    }
    err
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

/// A successful response whose body has not been read yet.
struct Answer {
    content_type: String,
    date: Option<Timestamp>,
    response: reqwest::Response,
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
        .map(|b| safe_error_body(b, &secrets));
    if status.is_client_error() {
        // The error itself carries the title, detail and every pointer, and is logged or
        // printed once by whoever ends with it; this is for debugging the exchange.
        tracing::debug!(
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
        hint: hint_for(status, name),
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

/// The `Date` header (RFC 9110's IMF-fixdate, whole seconds); `None` when absent or unparseable.
fn date(headers: &HeaderMap) -> Option<Timestamp> {
    let text = headers.get(DATE)?.to_str().ok()?;
    let at = httpdate::parse_http_date(text.trim()).ok()?;
    let nanos = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Timestamp::from_unix_nanos(i128::try_from(nanos).ok()?)
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
    use super::fake::{CALL_UID, FakeService, Reply, call_json};
    use super::*;
    use crate::config::{AuthConfig, Secret};

    #[test]
    fn date_reads_the_http_date() {
        let mut h = HeaderMap::new();
        assert_eq!(date(&h), None);
        h.insert(DATE, "Tue, 24 Nov 2026 10:15:07 GMT".parse().unwrap());
        assert_eq!(
            date(&h),
            Some(Timestamp::parse("2026-11-24T10:15:07Z").unwrap())
        );
        h.insert(DATE, "yesterday".parse().unwrap());
        assert_eq!(date(&h), None);
    }

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
        let client = ApiClient::new(&config).unwrap();
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
    async fn endless_body_server(
        announced: Option<u64>,
        start: String,
        filler: &'static str,
    ) -> u16 {
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
            let client = ApiClient::new(&config).unwrap();
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
            "{}: malformed response (application/json): more than the 100 rows asked for (page_size) at line 1 column ",
            ApiClient::describe_list(schedule, &query)
        );
        let expected_end = "; if it persists, the service sends data callsync cannot read: report the response to its operators";

        // A whole page of 101 rows.
        let mut config = fake.config(AuthConfig::Static(Secret::new("t")));
        let client = ApiClient::new(&config).unwrap();
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
        let client = ApiClient::new(&config).unwrap();
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
        let client = ApiClient::new(&fake.config(AuthConfig::Static(Secret::new("t")))).unwrap();
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
            let client = ApiClient::new(&config).unwrap();
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
}

#[cfg(test)]
pub(crate) mod fake {
    //! A stand-in for the service and its OAuth token endpoint on 127.0.0.1:0, for the
    //! client's own tests: each route answers from a script, given how many requests it has
    //! had and what the request carried.

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::Router;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use url::Url;
    use uuid::Uuid;

    use crate::config::{ApiConfig, AuthConfig, OAuthConfig, RetryConfig, Secret};

    /// The OAuth client secret; characters that form encoding changes, to test redaction.
    pub const CLIENT_SECRET: &str = "s3cr3t+value/with&chars";
    pub const CALL_UID: Uuid = Uuid::from_u128(0x6f1c_1d9e_3a43_4c0b_9f39_0d3c_5a3f_2b11);

    /// A call as the detail endpoint returns it (the least the model requires).
    pub fn call_json() -> String {
        format!(
            r#"{{"uid":"{CALL_UID}","status":"pending","created_at":"2026-01-31T09:00:00Z","updated_at":"2026-01-31T09:00:00Z"}}"#
        )
    }

    /// One scripted answer.
    pub struct Reply {
        status: u16,
        body: String,
        delay: Duration,
    }

    impl Reply {
        pub fn ok(body: impl Into<String>) -> Self {
            Reply::status(200, body)
        }

        pub fn status(status: u16, body: impl Into<String>) -> Self {
            Reply {
                status,
                body: body.into(),
                delay: Duration::ZERO,
            }
        }

        /// A token response; `expires_in` is JSON text, or `None` to leave the key out.
        pub fn token(token: &str, expires_in: Option<&str>) -> Self {
            let lifetime = expires_in.map_or(String::new(), |e| format!(r#","expires_in":{e}"#));
            Reply::ok(format!(
                r#"{{"access_token":"{token}","token_type":"Bearer"{lifetime}}}"#
            ))
        }

        /// The same answer, sent only after `delay`.
        pub fn after(self, delay: Duration) -> Self {
            Reply { delay, ..self }
        }
    }

    /// What a request carried.
    #[derive(Debug, Clone)]
    pub struct Request {
        /// The bearer token, without `Bearer `.
        pub bearer: Option<String>,
        pub body: String,
    }

    type Script = Box<dyn Fn(usize, &Request) -> Reply + Send + Sync>;

    struct Route {
        script: Script,
        seen: Mutex<Vec<Request>>,
    }

    struct Shared {
        token: Route,
        api: Route,
    }

    pub struct FakeService {
        shared: Arc<Shared>,
        pub base_url: Url,
        task: tokio::task::JoinHandle<()>,
    }

    impl FakeService {
        /// `token` answers `POST /oauth/token`, `api` every `GET` and `POST /api/v1/…`.
        pub async fn start(
            token: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
            api: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
        ) -> Self {
            let route = |script: Script| Route {
                script,
                seen: Mutex::new(Vec::new()),
            };
            let shared = Arc::new(Shared {
                token: route(Box::new(token)),
                api: route(Box::new(api)),
            });
            let app = Router::new()
                .route(
                    "/oauth/token",
                    post(
                        |State(s): State<Arc<Shared>>, h: HeaderMap, body: String| async move {
                            answer(&s.token, &h, body).await
                        },
                    ),
                )
                .route(
                    "/api/v1/{*rest}",
                    get(|State(s): State<Arc<Shared>>, h: HeaderMap| async move {
                        answer(&s.api, &h, String::new()).await
                    })
                    .post(
                        |State(s): State<Arc<Shared>>, h: HeaderMap, body: String| async move {
                            answer(&s.api, &h, body).await
                        },
                    ),
                )
                .with_state(shared.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base_url =
                Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            FakeService {
                shared,
                base_url,
                task,
            }
        }

        pub fn token_requests(&self) -> Vec<Request> {
            self.shared.token.seen.lock().unwrap().clone()
        }

        pub fn api_requests(&self) -> Vec<Request> {
            self.shared.api.seen.lock().unwrap().clone()
        }

        pub fn oauth(&self) -> AuthConfig {
            AuthConfig::OAuth(OAuthConfig {
                token_url: self.base_url.join("/oauth/token").unwrap(),
                client_id: "callsync-test".into(),
                client_secret: Secret::new(CLIENT_SECRET),
                scope: None,
            })
        }

        /// A client configuration for this service: quick retries, three attempts.
        pub fn config(&self, auth: AuthConfig) -> ApiConfig {
            ApiConfig {
                base_url: self.base_url.clone(),
                auth: Some(auth.into()),
                request_timeout: Duration::from_secs(5),
                connect_timeout: Duration::from_secs(2),
                requests_per_second: None,
                detail_concurrency: 1,
                max_response_bytes: 32 * 1024 * 1024,
                create_settle: Duration::from_secs(60),
                retry: RetryConfig {
                    max_attempts: 3,
                    max_elapsed: Duration::from_secs(10),
                    initial_interval: Duration::from_millis(1),
                    max_interval: Duration::from_millis(5),
                    multiplier: 2.0,
                },
            }
        }
    }

    impl Drop for FakeService {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn answer(route: &Route, headers: &HeaderMap, body: String) -> Response {
        let request = Request {
            bearer: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned),
            body,
        };
        let reply = {
            let mut seen = route.seen.lock().unwrap();
            let reply = (route.script)(seen.len(), &request);
            seen.push(request);
            reply
        };
        tokio::time::sleep(reply.delay).await;
        let status = StatusCode::from_u16(reply.status).unwrap();
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            reply.body,
        )
            .into_response()
    }
}
