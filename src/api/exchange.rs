//! The request exchange: every request through the rate limiter, the token source (one
//! refresh on a 401) and the retry policy, and its answer turned into a value or an
//! [`ApiError`] naming the request.
//!
//! Invariants: a request's token is taken once it may go — after its backoff, its turn in
//! the limiter and any `Retry-After` pause — so no wait can age it; a request is counted as
//! it goes out ([`Counters::sent`]), never while it waits; a 401's one resend carries a token
//! newer than the one refused, so only a fresh token's refusal blames the scope.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::{DeserializeOwned, DeserializeSeed};
use url::Url;

use super::body::{Answer, decode, read_capped};
use super::client::{ApiClient, describe_query};
use super::error::{ApiError, hint_for};
use super::http_date::date;
use super::limiter::Grant;
use super::redact::{excerpt, safe_error_body};
use super::retry::{Attempt, Counters};
use crate::config::Secret;
use crate::service::models::ErrorBody;
use crate::service::timestamp::Timestamp;

/// A decoded answer, and what its headers said beside it.
pub(super) struct Decoded<T> {
    pub(super) value: T,
    /// The response's `Date`, when it had a parseable one.
    pub(super) date: Option<Timestamp>,
    /// Its `Content-Length`, when it had one.
    pub(super) bytes: Option<u64>,
}

impl ApiClient {
    pub(super) async fn get_json<T: DeserializeOwned + Send + 'static>(
        &self,
        url: Url,
        query: &[(&'static str, String)],
        counters: &Counters,
    ) -> Result<T, ApiError> {
        let whole = std::marker::PhantomData::<T>;
        Ok(self
            .get_json_dated(url, query, counters, whole)
            .await?
            .value)
    }

    /// The body decoded by `seed`, and the response's `Date`.
    pub(super) async fn get_json_dated<T, S>(
        &self,
        url: Url,
        query: &[(&'static str, String)],
        counters: &Counters,
        seed: S,
    ) -> Result<Decoded<T>, ApiError>
    where
        S: for<'de> DeserializeSeed<'de, Value = T>
            + super::body::Forgiving
            + Clone
            + Send
            + 'static,
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
    ) -> Result<Decoded<T>, ApiError> {
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
    ) -> Result<Decoded<T>, ApiError>
    where
        S: for<'de> DeserializeSeed<'de, Value = T>
            + super::body::Forgiving
            + Clone
            + Send
            + 'static,
        T: Send + 'static,
    {
        let name = request.name();
        let limit = self.inner.max_response_bytes;
        let deadline = self.inner.retry.deadline();
        let name = name.as_str();
        self.inner
            .retry
            .run_when(name, worth_retrying, |attempt| {
                let seed = seed.clone();
                async move {
                    let answer = self
                        .send_authorized(name, request, deadline, counters, attempt)
                        .await?;
                    let (date, bytes) = (answer.date, answer.response.content_length());
                    let value = decode(name, answer, limit, seed).await?;
                    Ok(Decoded { value, date, bytes })
                }
            })
            .await
    }

    /// One attempt: sent with the token current when it goes out, and on a 401 sent once
    /// more with a fresh token (a 401 means nothing was done, so this is safe for a create
    /// too).
    async fn send_authorized(
        &self,
        name: &str,
        request: &Request<'_>,
        deadline: tokio::time::Instant,
        counters: &Counters,
        attempt: Attempt,
    ) -> Result<Answer, ApiError> {
        let inner = &self.inner;
        let first = self
            .send_once(name, request, deadline, counters, attempt)
            .await?;
        match first.answer {
            Err(err) if err.is_unauthorized() && inner.tokens.can_refresh() => {
                tracing::info!(request = name, "token rejected; fetching a new one");
                inner.tokens.invalidate(&first.token).await;
                // Once only: the token sent again is taken as it goes out, after its own wait,
                // and is newer than the one refused; rejected too, another will not cure it
                // (and a 401 is permanent, so no retry loops on it either).
                let resend = Attempt::FreshToken;
                let again = self
                    .send_once(name, request, deadline, counters, resend)
                    .await?;
                again.answer.map_err(fresh_token_rejected)
            }
            answer => answer,
        }
    }

    /// Waits for the limiter's turn, then takes the token — only then: a token taken before
    /// the wait (in the limiter, or a pause all lanes keep for a `Retry-After`) may expire
    /// during it, and a retry's backoff is waited before this is called — and sends. `Err`:
    /// it never went out (a pause beyond its budget, no token to be had).
    async fn send_once(
        &self,
        name: &str,
        request: &Request<'_>,
        deadline: tokio::time::Instant,
        counters: &Counters,
        attempt: Attempt,
    ) -> Result<Sent, ApiError> {
        let inner = &self.inner;
        let mut grant = inner
            .limiter
            .acquire(counters.lane(), deadline)
            .await
            .map_err(|paused| ApiError::PausedBeyondBudget {
                request: name.to_owned(),
                pause_left: paused.pause_left,
                left: paused.left,
            })?;
        counters.add_throttled(grant.waited);
        let token = inner
            .tokens
            .bearer(&inner.http, &inner.retry, counters)
            .await?;
        // A token fetched in turn is no part of the service's latency.
        grant.going_out();
        let sending = Sending {
            name,
            request,
            token: token.expose(),
            counters,
            attempt,
        };
        Ok(Sent {
            answer: self.send_granted(sending, grant).await,
            token,
        })
    }

    /// Sends `sending` under `grant`, and tells the limiter what came of it.
    async fn send_granted(
        &self,
        sending: Sending<'_>,
        grant: Grant<'_>,
    ) -> Result<Answer, ApiError> {
        let Sending {
            name,
            request,
            token,
            counters,
            attempt,
        } = sending;
        let inner = &self.inner;
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
        // Counted as it goes out, not when it was asked for: a pass cut while this request
        // waited for the limiter sent nothing, and counts nothing.
        counters.sent(attempt);
        let sent = std::time::Instant::now();
        let response = builder.send().await;
        let observer = inner.observer.get();
        let response = match response {
            Ok(response) => response,
            Err(source) => {
                if let Some(observer) = observer {
                    observer.unanswered(sent.elapsed());
                }
                // No answer (a timeout, a connection refused or reset): as much a sign of a
                // service past its capacity as a 5xx.
                inner.limiter.overloaded(&grant);
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
            inner
                .limiter
                .rate_limited(&grant, retry_after(&headers, SystemTime::now()));
        } else if status.is_server_error() {
            inner.limiter.overloaded(&grant);
        } else {
            inner.limiter.succeeded(&grant);
        }
        // Out of flight once the head is in: the body is read at the pace of this process.
        drop(grant);
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

/// One request going out, with the token it carries and what it counts as.
struct Sending<'a> {
    name: &'a str,
    request: &'a Request<'a>,
    token: &'a str,
    counters: &'a Counters,
    attempt: Attempt,
}

/// What a request that went out came to, and the token it carried.
struct Sent {
    answer: Result<Answer, ApiError>,
    token: Secret,
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

/// The error for a non-2xx response; `token` (the one sent) is removed from what the body
/// says, in case the service echoes the request.
pub(super) fn status_error(
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
        retry_after: retry_after(headers, SystemTime::now()),
        hint: hint_for(status, name),
    }
}

/// `Retry-After` (RFC 9110, 10.2.3): seconds (the form the service uses), or an HTTP date.
/// A date's wait runs from the answer's `Date`, the service's own clock, so a clock of this
/// machine's that is off does not stretch or cut it; without a `Date`, from `now`. A date
/// already past asks no wait; anything else is no `Retry-After`.
pub(super) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    let answered = date(headers)
        .and_then(|at| u64::try_from(at.unix_nanos()).ok())
        .map_or(now, |nanos| UNIX_EPOCH + Duration::from_nanos(nanos));
    Some(at.duration_since(answered).unwrap_or(Duration::ZERO))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_owned()
}
