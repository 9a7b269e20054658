//! The limit in flight after scripted latencies, through the limiter as requests use it, in
//! tokio's virtual time: each round sends as many requests as the limit allows at once, and
//! they are answered after the round's latency, in the order sent. Every figure is exact (the
//! arithmetic of the module doc, checked against a model of it written apart).

use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::super::Limiter;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One round: as many requests as the limit lets out at once, each answered after
/// `latency` (`Some(429 with that Retry-After)` instead for the ones `refused` picks).
async fn round(limiter: &Limiter, latency: Duration, refused: impl Fn(usize) -> bool) -> usize {
    let far = Instant::now() + Duration::from_secs(3600);
    let mut grants = Vec::new();
    for _ in 0..limiter.in_flight_limit() {
        grants.push(limiter.acquire(None, far).await.expect("no pause"));
    }
    tokio::time::sleep(latency).await;
    for (i, grant) in grants.iter().enumerate() {
        if refused(i) {
            limiter.rate_limited(grant, None);
        } else {
            limiter.succeeded(grant);
        }
    }
    drop(grants);
    limiter.in_flight_limit()
}

/// The limit after each of `rounds` rounds at `latency`.
async fn rounds(limiter: &Limiter, latency: Duration, rounds: usize) -> Vec<usize> {
    let mut limits = Vec::new();
    for _ in 0..rounds {
        limits.push(round(limiter, latency, |_| false).await);
    }
    limits
}

#[tokio::test(start_paused = true)]
async fn latency_that_holds_grows_the_limit_to_the_maximum() {
    let limiter = Limiter::new(None, 256);
    assert_eq!(limiter.in_flight_limit(), 16);
    // Half of each round's answers count (the first half were sent with fewer than half the
    // limit in flight), each adding 0.8: about ×1.4 a round trip.
    assert_eq!(
        rounds(&limiter, ms(50), 10).await,
        [23, 32, 45, 64, 89, 125, 176, 246, 256, 256]
    );
}

#[tokio::test(start_paused = true)]
async fn latency_that_rises_shrinks_it_and_a_farther_service_is_learnt() {
    let limiter = Limiter::new(None, 256);
    rounds(&limiter, ms(50), 12).await;
    assert_eq!(limiter.in_flight_limit(), 256);
    // The service answers four times later (congested, or moved): the gradient halves what
    // each answer suggests, smoothed to a tenth off each answer that counts; within the
    // round the long-term average has moved most of the way (256 of its 600 answers), and
    // a service that stays that far is learnt: the limit grows back.
    assert_eq!(
        rounds(&limiter, ms(200), 6).await,
        [81, 114, 159, 223, 256, 256]
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_or_a_5xx_cuts_it_once_a_round() {
    let limiter = Limiter::new(NonZeroU32::new(1000), 256);
    rounds(&limiter, ms(50), 3).await;
    assert_eq!(limiter.in_flight_limit(), 45);
    // Three 429s first in one round: one cut (the requests were all sent before it), to
    // 40.5; the round's successes grow it again.
    let after = round(&limiter, ms(50), |i| i < 3).await;
    assert_eq!(after, 61);
    // A 5xx and an unanswered request in the next round.
    let far = Instant::now() + Duration::from_secs(3600);
    let a = limiter.acquire(None, far).await.unwrap();
    let b = limiter.acquire(None, far).await.unwrap();
    limiter.overloaded(&a);
    limiter.overloaded(&b);
    assert_eq!(limiter.in_flight_limit(), 54);
}

#[tokio::test(start_paused = true)]
async fn a_limit_not_used_does_not_grow() {
    let limiter = Limiter::new(None, 256);
    let far = Instant::now() + Duration::from_secs(3600);
    // One request at a time, a thousand times: never half the limit in flight.
    for _ in 0..1000 {
        let grant = limiter.acquire(None, far).await.unwrap();
        tokio::time::sleep(ms(50)).await;
        limiter.succeeded(&grant);
    }
    assert_eq!(limiter.in_flight_limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn requests_beyond_the_limit_wait_for_room() {
    let limiter = std::sync::Arc::new(Limiter::new(None, 256));
    let far = Instant::now() + Duration::from_secs(3600);
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(limiter.acquire(None, far).await.unwrap());
    }
    let waiting = tokio::spawn({
        let limiter = std::sync::Arc::clone(&limiter);
        async move { limiter.acquire(None, far).await.map(|grant| grant.waited) }
    });
    tokio::time::sleep(ms(30)).await;
    assert!(!waiting.is_finished());
    // One answer makes room for one more.
    limiter.succeeded(&held[0]);
    held.remove(0);
    assert_eq!(waiting.await.unwrap(), Ok(ms(30)));
}

#[tokio::test(start_paused = true)]
async fn passes_run_as_many_at_once_as_the_limit_in_flight() {
    let limiter = Limiter::new(None, 256);
    let mut slots = Vec::new();
    for _ in 0..16 {
        slots.push(limiter.pass_slot().await.expect("a slot"));
    }
    // A 17th waits…
    let seventeenth = tokio::time::timeout(ms(10), limiter.pass_slot()).await;
    assert!(seventeenth.is_err());
    // … until the limit grows (latency holds): 23 after one round.
    assert_eq!(round(&limiter, ms(50), |_| false).await, 23);
    for _ in 16..23 {
        slots.push(limiter.pass_slot().await.expect("a slot"));
    }
    assert!(
        tokio::time::timeout(ms(10), limiter.pass_slot())
            .await
            .is_err()
    );
    // A round of 429s: one cut, to 20 (23.2 × 0.9): three passes must end before another
    // starts.
    assert_eq!(round(&limiter, ms(50), |_| true).await, 20);
    slots.truncate(20);
    assert!(
        tokio::time::timeout(ms(10), limiter.pass_slot())
            .await
            .is_err()
    );
    slots.pop();
    assert!(limiter.pass_slot().await.is_some());
}
