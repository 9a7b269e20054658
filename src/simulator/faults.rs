//! The middleware every request passes: it applies the fault plan (`FaultPlan`, in
//! `fault_plan.rs`), answers 401 when `auth.rs` refuses the bearer token, sets `Date` from the
//! simulator's clock, and logs every request (`RequestRecord`).
//!
//! Faults hit `/api/v1` requests at the configured rates: 500/502/503 (a 502 as a proxy's
//! HTML page), 429 with `Retry-After`, slow responses, and a body cut off mid-way (the
//! connection closes before the response is complete). A 401 carries the `WWW-Authenticate`
//! challenge of RFC 6750. A test's holds on list requests, detail requests and writes
//! (`hold.rs`) are applied here too, after the token is checked.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rand::RngExt;

use super::fault_plan::RequestRecord;
use super::mutex::lock;
use super::reply::error;
use super::shared::Shared;

enum Fault {
    Status(u16),
    TooMany,
    Slow,
    Truncate,
}

pub async fn middleware(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let mut response = handle(&shared, request, next, &path).await;
    // The service's clock when it answered, from the simulator's clock (hyper would put the
    // machine's): callsync bounds each pass by it. Off by the plan's skew, if any.
    if let Some(date) = shared.clock.http_date(shared.faults().date_skew_secs) {
        response.headers_mut().insert(header::DATE, date);
    }
    shared.log_request(RequestRecord {
        method,
        path,
        query,
        status: response.status().as_u16(),
    });
    response
}

async fn handle(shared: &Shared, request: Request, next: Next, path: &str) -> Response {
    if !path.starts_with("/api/v1/") {
        return next.run(request).await;
    }
    if let Err(problem) = shared.check_bearer(request.headers().get(header::AUTHORIZATION)) {
        let mut response = error(StatusCode::UNAUTHORIZED, "Unauthorized", problem.detail());
        if let Ok(challenge) = problem.challenge().parse() {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
        }
        return response;
    }
    let is_write = request.method() != axum::http::Method::GET;
    if !is_write {
        hold_read(shared, path).await;
    }
    let write_gate = lock(&shared.write_hold).clone().filter(|_| is_write);
    let delay = shared.faults().delay_writes;
    if let Some(gate) = write_gate.as_ref().filter(|_| delay.is_zero()) {
        gate.pass(path).await;
    }
    let hold = shared.faults().hold_write_answers;
    if is_write && !hold.is_zero() {
        let response = next.run(request).await;
        tokio::time::sleep(hold).await;
        return response;
    }
    if is_write && !delay.is_zero() {
        // The whole request first, as a service reads it before it works on it.
        let (parts, body) = request.into_parts();
        let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
            return error(
                StatusCode::BAD_REQUEST,
                "Bad request",
                "the body was cut off",
            );
        };
        let request = Request::from_parts(parts, Body::from(body));
        shared
            .delayed_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Spawned, so that the work is done even when the client hangs up and this future is
        // dropped.
        let path = path.to_owned();
        let work = tokio::spawn(async move {
            if let Some(gate) = write_gate {
                gate.pass(&path).await;
            }
            tokio::time::sleep(delay).await;
            next.run(request).await
        });
        return work
            .await
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    if shared.over_quota() {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests",
            "rate limit exceeded",
        );
    }
    match shared.roll_fault() {
        Some(Fault::Status(502)) => (
            StatusCode::BAD_GATEWAY,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>",
        )
            .into_response(),
        Some(Fault::Status(code)) => error(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Server error",
            "the simulator injected this failure",
        ),
        Some(Fault::TooMany) => {
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many requests",
                "slow down",
            );
            let secs = shared.faults().retry_after_secs;
            if let Ok(value) = secs.to_string().parse() {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Some(Fault::Slow) => {
            tokio::time::sleep(shared.faults().slow_delay).await;
            next.run(request).await
        }
        Some(Fault::Truncate) => truncate(next.run(request).await).await,
        None => next.run(request).await,
    }
}

/// Waits while a test holds this list or detail request (`hold.rs`).
async fn hold_read(shared: &Shared, path: &str) {
    let is_list = path.starts_with("/api/v1/schedules/") && path.ends_with("/outbound_calls");
    let is_detail = path.starts_with("/api/v1/outbound_calls/");
    let hold = match (is_list, is_detail) {
        (true, _) => &shared.list_hold,
        (_, true) => &shared.detail_hold,
        _ => return,
    };
    let gate = lock(hold).clone();
    if let Some(gate) = gate {
        gate.pass(path).await;
    }
}

/// The same response, but its body stops half way and the connection is closed.
async fn truncate(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let half = Bytes::copy_from_slice(&bytes[..bytes.len() / 2]);
    parts.headers.remove(header::CONTENT_LENGTH);
    // The first half goes out with the headers; a moment later the stream fails and the
    // server drops the connection, so the client sees a status and then a broken body.
    let first: Result<Bytes, std::io::Error> = Ok(half);
    let broken = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "injected: connection closed mid-body",
        ))
    });
    let body = futures::stream::iter([first]).chain(broken);
    Response::from_parts(parts, Body::from_stream(body))
}

impl Shared {
    /// Takes one request from the quota's token bucket; `true` when it is empty.
    fn over_quota(&self) -> bool {
        let per_second = f64::from(self.faults().quota_per_second);
        if per_second == 0.0 {
            return false;
        }
        let mut quota = lock(&self.quota);
        let (left, filled) = *quota;
        let now = self.clock.now();
        let left = (left + now.secs_since(filled).max(0.0) * per_second).min(per_second);
        let over = left < 1.0;
        *quota = (if over { left } else { left - 1.0 }, now);
        over
    }

    fn roll_fault(&self) -> Option<Fault> {
        let plan = self.faults();
        let mut rng = self.rng();
        let mut roll = |rate: f64| rate > 0.0 && rng.random_bool(rate.min(1.0));
        if roll(plan.error_5xx_rate) {
            let code = [500, 502, 503][self.next_fault_index() % 3];
            return Some(Fault::Status(code));
        }
        if roll(plan.rate_429) {
            return Some(Fault::TooMany);
        }
        if roll(plan.truncate_rate) {
            return Some(Fault::Truncate);
        }
        if roll(plan.slow_rate) {
            return Some(Fault::Slow);
        }
        None
    }
}
