//! Request-level retries: exponential backoff with jitter, every limit explicit.
//!
//! The only module that knows the `backoff` crate (unmaintained, RUSTSEC-2025-0012, and by
//! default gives up after 15 minutes): swapping it touches nothing else. Which errors are
//! worth retrying is the error's own decision ([`ApiError::is_transient`]); this module only
//! decides when and how often.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use backoff::ExponentialBackoff;

use super::error::ApiError;
use crate::config::RetryConfig;

/// A server's `Retry-After` is honoured, but never below the first backoff interval (a
/// `Retry-After: 0` must not become a retry storm), never above this (the limiter's pause of
/// every lane has the same cap, and logs it), and never beyond what is left of
/// `api.retry.max_elapsed_secs`: then the request fails at once, naming both.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Which sending of a request an attempt is, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The request's first.
    First,
    /// A repeat after a failure: a request and a retry.
    Retry,
    /// The same attempt sent again with a fresh token after a 401: a request, no retry.
    FreshToken,
}

/// Request and retry counts of one pass, shared by the tasks working for it. A request is
/// counted when it is handed to the connection ([`Counters::sent`]), never while it waits
/// for the limiter, a token or a backoff: a pass cut before it sent anything counts nothing.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    /// Responses by HTTP status.
    statuses: std::sync::Mutex<std::collections::BTreeMap<u16, u64>>,
    /// Time spent waiting for the shared limiter, in nanoseconds.
    throttled_nanos: AtomicU64,
    /// The limiter's lane: requests of one schedule's pass take turns with other schedules'.
    lane: Option<uuid::Uuid>,
}

impl Counters {
    /// Counters of a pass over `schedule`, whose requests share the limiter fairly with
    /// other schedules' passes.
    pub fn for_lane(schedule: uuid::Uuid) -> Self {
        Counters {
            lane: Some(schedule),
            ..Counters::default()
        }
    }

    pub(crate) fn lane(&self) -> Option<uuid::Uuid> {
        self.lane
    }

    /// One request handed to the connection now, as `attempt`.
    pub(crate) fn sent(&self, attempt: Attempt) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if attempt == Attempt::Retry {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_throttled(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.throttled_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Time the pass's requests spent waiting for the shared limiter.
    pub fn throttled(&self) -> Duration {
        Duration::from_nanos(self.throttled_nanos.load(Ordering::Relaxed))
    }

    /// Responses that were 429 Too Many Requests.
    pub fn rate_limited(&self) -> u64 {
        self.statuses().get(&429).copied().unwrap_or(0)
    }

    pub fn record_status(&self, status: u16) {
        let mut statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        *statuses.entry(status).or_default() += 1;
    }

    pub fn statuses(&self) -> std::collections::BTreeMap<u16, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    config: RetryConfig,
}

impl RetryPolicy {
    pub fn new(config: RetryConfig) -> Self {
        RetryPolicy { config }
    }

    /// When a request starting now must be done by: its `api.retry.max_elapsed_secs`.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.config.max_elapsed
    }

    /// Runs `attempt` until it succeeds, fails permanently, or a limit is reached. Each call
    /// is told whether it is the first or a retry, and counts its request when it sends it
    /// ([`Counters::sent`]). `request` names it in errors and logs.
    pub async fn run<T, F, Fut>(&self, request: &str, attempt: F) -> Result<T, ApiError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        self.run_when(request, ApiError::is_transient, attempt)
            .await
    }

    /// [`run`](Self::run), retrying only the errors `worth_retrying` accepts (a create is
    /// repeated only when the service certainly did not receive it).
    pub async fn run_when<T, F, Fut>(
        &self,
        request: &str,
        worth_retrying: fn(&ApiError) -> bool,
        mut attempt: F,
    ) -> Result<T, ApiError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let started = Instant::now();
        let budget = self.config.max_elapsed;
        let mut attempts: u32 = 0;
        let max_attempts = self.config.max_attempts.max(1);
        let floor = self.config.initial_interval;
        let op = || {
            attempts = attempts.saturating_add(1);
            let last_allowed = attempts >= max_attempts;
            let fut = attempt(if attempts > 1 {
                Attempt::Retry
            } else {
                Attempt::First
            });
            async move {
                fut.await.map_err(|err| {
                    if !worth_retrying(&err) || last_allowed {
                        return backoff::Error::Permanent(err);
                    }
                    let Some(asked) = err.retry_after() else {
                        return backoff::Error::transient(err);
                    };
                    // Not `clamp`: it panics when the floor is above the ceiling.
                    let wait = asked.min(MAX_RETRY_AFTER).max(floor);
                    let left = budget.saturating_sub(started.elapsed());
                    if wait > left {
                        return backoff::Error::Permanent(ApiError::RetryAfterBeyondBudget {
                            request: request.to_owned(),
                            retry_after: asked,
                            left,
                            last: Box::new(err),
                        });
                    }
                    backoff::Error::Transient {
                        err,
                        retry_after: Some(wait),
                    }
                })
            }
        };
        let notify = |err: ApiError, wait: Duration| {
            // INFO: a retry that works needs nobody (the pass line counts them, `retries=`);
            // one that does not fails the pass, which logs the error.
            tracing::info!(request, error = %err, retry_in = ?wait, "request failed; retrying");
        };
        let result = backoff::future::retry_notify(self.backoff(), op, notify).await;
        result.map_err(|last| {
            if attempts > 1 && worth_retrying(&last) {
                ApiError::RetriesExhausted {
                    request: request.to_owned(),
                    attempts,
                    elapsed: started.elapsed(),
                    last: Box::new(last),
                }
            } else {
                last
            }
        })
    }

    fn backoff(&self) -> ExponentialBackoff {
        ExponentialBackoff {
            current_interval: self.config.initial_interval,
            initial_interval: self.config.initial_interval,
            randomization_factor: 0.5,
            multiplier: self.config.multiplier,
            max_interval: self.config.max_interval,
            max_elapsed_time: Some(self.config.max_elapsed),
            ..ExponentialBackoff::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    fn fast(max_attempts: u32) -> RetryPolicy {
        RetryPolicy::new(RetryConfig {
            max_attempts,
            max_elapsed: Duration::from_secs(10),
            initial_interval: Duration::from_millis(1),
            max_interval: Duration::from_millis(5),
            multiplier: 2.0,
        })
    }

    fn status(code: u16, retry_after: Option<Duration>) -> ApiError {
        ApiError::Status {
            request: "GET /x".into(),
            status: StatusCode::from_u16(code).unwrap(),
            body: None,
            raw_excerpt: None,
            retry_after,
            hint: "",
        }
    }

    /// Runs a scripted sequence of outcomes (status code, or 200 for success).
    async fn script(policy: &RetryPolicy, codes: &[u16]) -> (Result<u16, ApiError>, Counters) {
        let counters = Counters::default();
        let mut next = codes.iter().copied();
        let result = policy
            .run("GET /x", |attempt| {
                counters.sent(attempt);
                let code = next.next().unwrap_or(200);
                async move {
                    match code {
                        200 => Ok(code),
                        c => Err(status(c, None)),
                    }
                }
            })
            .await;
        (result, counters)
    }

    #[tokio::test]
    async fn retries_transient_until_success() {
        let (result, counters) = script(&fast(10), &[503, 429, 502, 500]).await;
        assert_eq!(result.unwrap(), 200);
        assert_eq!((counters.requests(), counters.retries()), (5, 4));
    }

    #[tokio::test]
    async fn does_not_retry_permanent() {
        let (result, counters) = script(&fast(10), &[404]).await;
        assert_eq!(result.unwrap_err().status(), Some(StatusCode::NOT_FOUND));
        assert_eq!((counters.requests(), counters.retries()), (1, 0));
    }

    #[tokio::test]
    async fn stops_at_max_attempts_and_says_so() {
        let (result, counters) = script(&fast(3), &[500, 500, 500, 500]).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ApiError::RetriesExhausted { attempts: 3, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("GET /x: gave up after 3 attempts")
        );
        assert_eq!(counters.requests(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn honours_retry_after_with_a_floor() {
        let policy = RetryPolicy::new(RetryConfig {
            initial_interval: Duration::from_millis(400),
            ..RetryConfig::default()
        });
        let counters = Counters::default();
        let mut calls = 0;
        let started = tokio::time::Instant::now();
        let result = policy
            .run("GET /x", |attempt| {
                counters.sent(attempt);
                calls += 1;
                let first = calls == 1;
                let second = calls == 2;
                async move {
                    if first {
                        Err(status(429, Some(Duration::from_secs(7))))
                    } else if second {
                        Err(status(429, Some(Duration::ZERO)))
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
        assert!(result.is_ok());
        // 7 s as asked, then the 400 ms floor instead of an instant retry.
        assert_eq!(started.elapsed(), Duration::from_millis(7_400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_floor_above_the_retry_after_ceiling_waits_the_floor() {
        // Not reachable through the configuration (it caps the first interval at a minute),
        // but a policy built in code must not panic on it either.
        let policy = RetryPolicy::new(RetryConfig {
            initial_interval: Duration::from_secs(600),
            max_elapsed: Duration::from_secs(3600),
            ..RetryConfig::default()
        });
        let counters = Counters::default();
        let mut calls = 0;
        let started = tokio::time::Instant::now();
        let result = policy
            .run("GET /x", |attempt| {
                counters.sent(attempt);
                calls += 1;
                let first = calls == 1;
                async move {
                    if first {
                        Err(status(429, Some(Duration::from_secs(7))))
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
        assert!(result.is_ok());
        assert_eq!(started.elapsed(), Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_budget_fails_at_once_naming_both() {
        let policy = RetryPolicy::new(RetryConfig {
            max_elapsed: Duration::from_secs(5),
            ..RetryConfig::default()
        });
        let counters = Counters::default();
        let started = tokio::time::Instant::now();
        let result: Result<(), _> = policy
            .run("GET /x", |attempt| {
                counters.sent(attempt);
                async { Err(status(429, Some(Duration::from_secs(20)))) }
            })
            .await;
        let err = result.unwrap_err();
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(counters.requests(), 1);
        assert!(
            err.to_string().starts_with(
                "GET /x: the service asked to retry after 20 s, beyond the 5 s left of api.retry.max_elapsed_secs; raise it"
            ),
            "{err}"
        );
        assert_eq!(err.status(), Some(StatusCode::TOO_MANY_REQUESTS));
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_left_shrinks_as_retries_go_on() {
        // 4 s of backoff spent, then a Retry-After of 3 s: 1 s of the 5 s budget is left.
        let policy = RetryPolicy::new(RetryConfig {
            max_elapsed: Duration::from_secs(5),
            initial_interval: Duration::from_secs(4),
            ..RetryConfig::default()
        });
        let counters = Counters::default();
        let mut calls = 0;
        let started = tokio::time::Instant::now();
        let result: Result<(), _> = policy
            .run("GET /x", |attempt| {
                counters.sent(attempt);
                calls += 1;
                let first = calls == 1;
                async move {
                    if first {
                        Err(status(429, Some(Duration::from_secs(4))))
                    } else {
                        Err(status(429, Some(Duration::from_secs(3))))
                    }
                }
            })
            .await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ApiError::RetryAfterBeyondBudget { .. }),
            "{err}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(4));
        assert!(
            err.to_string().contains("after 3 s, beyond the 1 s left"),
            "{err}"
        );
    }
}
