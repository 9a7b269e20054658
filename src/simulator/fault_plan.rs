//! What faults to inject (`faults.rs` injects them), and what the request log records.

use std::time::Duration;

/// Faults injected into `/api/v1` requests; every rate is a probability per request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    /// 500, 502 (an HTML page) or 503, in turn.
    pub error_5xx_rate: f64,
    /// 429 Too Many Requests with `Retry-After: retry_after_secs`.
    pub rate_429: f64,
    pub retry_after_secs: u64,
    /// Answer correctly, but only after `slow_delay`.
    pub slow_rate: f64,
    pub slow_delay: Duration,
    /// Close the connection half way through the body.
    pub truncate_rate: f64,
    /// Hold the answer of every write (POST, PATCH) this long after acting on it: a client
    /// killed or timed out meanwhile never learns that its calls were created.
    pub hold_write_answers: Duration,
    /// Act on every write (POST, PATCH) only this long after it arrives, and finish acting
    /// even if the client has gone meanwhile: a slow service whose work outlives the client's
    /// timeout, or the client itself.
    pub delay_writes: Duration,
    /// A rate limit as a real service has one: requests beyond this many a second (a
    /// second's worth of burst) are answered 429 without `Retry-After`; 0 for none.
    pub quota_per_second: u32,
    /// The `Date` header runs this many seconds off the clock that stamps the calls
    /// (negative: behind it), as a front whose clock is wrong sends it; 0 for none.
    pub date_skew_secs: i64,
    /// A share of the calls, the same on every request, served with half a surrogate pair
    /// in their text (`lone_surrogate.rs`: which calls, and where); 0 for none.
    pub lone_surrogate_rate: f64,
}

/// One request as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    /// The raw (still encoded) query string.
    pub query: String,
    pub status: u16,
}
