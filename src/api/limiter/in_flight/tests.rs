//! The limit in flight after scripted latencies, through the limiter as requests use it, in
//! tokio's virtual time: each round sends as many requests as the limit allows at once, and
//! they are answered after the round's latency, in the order sent. Every figure is exact (the
//! arithmetic of the module doc, checked against a model of it written apart).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// One request, alone, answered after `latency`.
async fn one_answered_after(limiter: &Limiter, latency: Duration) {
    let far = Instant::now() + Duration::from_secs(3600);
    let grant = limiter.acquire(None, far).await.expect("no pause");
    tokio::time::sleep(latency).await;
    limiter.succeeded(&grant);
}

/// `n` passes that each wait for a slot and, once they have one, hold it (as a pass busy on
/// the warehouse does); `running` counts those that have one.
fn passes_holding_slots(
    limiter: &Arc<Limiter>,
    n: usize,
    running: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (limiter, running) = (Arc::clone(limiter), Arc::clone(running));
            tokio::spawn(async move {
                let _slot = limiter.pass_slot().await.expect("a slot");
                running.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            })
        })
        .collect()
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

/// `workers` tasks sending one request after another for `secs` seconds to a service that
/// answers after `base` while at most `capacity` requests are in flight at it, and later the
/// more there are (a queue: `base × in flight ÷ capacity`); the limit at each second.
async fn congested(
    limiter: &Arc<Limiter>,
    base: Duration,
    capacity: usize,
    secs: u64,
) -> Vec<usize> {
    let at_service = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let far = end + Duration::from_secs(3600);
    let workers: Vec<_> = (0..200)
        .map(|_| {
            let (limiter, at_service) = (Arc::clone(limiter), Arc::clone(&at_service));
            tokio::spawn(async move {
                while Instant::now() < end {
                    let grant = limiter.acquire(None, far).await.expect("no pause");
                    let queued = at_service.fetch_add(1, Ordering::SeqCst) + 1;
                    let wait = base.mul_f64((queued as f64 / capacity as f64).max(1.0));
                    tokio::time::sleep(wait).await;
                    at_service.fetch_sub(1, Ordering::SeqCst);
                    limiter.succeeded(&grant);
                }
            })
        })
        .collect();
    let mut limits = Vec::new();
    for _ in 0..secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        limits.push(limiter.in_flight_limit());
    }
    for worker in workers {
        worker.await.unwrap();
    }
    limits
}

#[tokio::test(start_paused = true)]
async fn a_service_that_slows_with_load_shrinks_it_until_the_slowness_lasts() {
    // 200 requests want to go at once; the service answers in 50 ms up to 40 at once, and
    // later beyond (each request past 40 adds its share to everyone's wait). The limit grows
    // while the latency holds and shrinks as it rises past 1.5× its average, several times a
    // second (each second's end catches it somewhere in that cycle: 34, 52, 170); then, as
    // the queue lasts, its latency becomes the average, as a farther service's would, and
    // the limit grows back to what the 200 fill: the price of a baseline that moves
    // (Gradient2's), which a service that slows down for good needs.
    let limiter = Arc::new(Limiter::new(None, 256));
    let limits = congested(&limiter, ms(50), 40, 10).await;
    assert_eq!(limits, [34, 52, 170, 256, 256, 256, 256, 256, 256, 256]);
}

#[tokio::test(start_paused = true)]
async fn a_service_that_moved_farther_shrinks_it_then_is_learnt() {
    let limiter = Limiter::new(None, 256);
    rounds(&limiter, ms(50), 12).await;
    assert_eq!(limiter.in_flight_limit(), 256);
    // Four times farther: the gradient halves what each answer suggests, smoothed to a tenth
    // off each answer that counts; within the round the average has moved some of the way
    // (256 of its 600 answers), and a service that stays that far is learnt: the limit grows
    // back.
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
    // One request at a time, a thousand times: never half the limit in flight.
    for _ in 0..1000 {
        one_answered_after(&limiter, ms(50)).await;
    }
    assert_eq!(limiter.in_flight_limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn requests_beyond_the_limit_wait_for_room() {
    let limiter = Arc::new(Limiter::new(None, 256));
    let far = Instant::now() + Duration::from_secs(3600);
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(limiter.acquire(None, far).await.unwrap());
    }
    let waiting = tokio::spawn({
        let limiter = Arc::clone(&limiter);
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

/// Passes that spend their time on the warehouse send few requests at once, fewer than half
/// the limit; while passes wait for slots all taken, those requests count as using the limit,
/// which grows (0.8 an answer) until no pass waits, and then stops.
#[tokio::test(start_paused = true)]
async fn a_limit_that_holds_passes_back_grows_until_none_waits() {
    let limiter = Arc::new(Limiter::new(None, 256));
    let running = Arc::new(AtomicUsize::new(0));
    let passes = passes_holding_slots(&limiter, 56, &running);
    tokio::task::yield_now().await;
    assert_eq!(running.load(Ordering::SeqCst), 16);
    // One request at a time, never half the limit in flight.
    for _ in 0..200 {
        one_answered_after(&limiter, ms(50)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(running.load(Ordering::SeqCst), 56, "every pass runs");
    assert_eq!(
        limiter.in_flight_limit(),
        56,
        "and the limit grew no further"
    );
    for pass in passes {
        pass.abort();
    }
}

/// With passes held back and few requests in flight, a latency that rises (the jitter of a
/// service answering in a fraction of a millisecond, or one that moved away) leaves the
/// limit as it is: so few requests say nothing of the load the limit allows.
#[tokio::test(start_paused = true)]
async fn few_requests_while_passes_are_held_never_shrink_the_limit() {
    let limiter = Arc::new(Limiter::new(None, 256));
    // 16 passes run, 100 more wait for slots all taken (as at a tick of 10,000 schedules).
    let running = Arc::new(AtomicUsize::new(0));
    let passes = passes_holding_slots(&limiter, 116, &running);
    tokio::task::yield_now().await;
    assert_eq!(running.load(Ordering::SeqCst), 16);
    // Ten answers at 1 ms: the average is learnt (the first ten are averaged plainly), and
    // each adds 0.8; the eight passes let in take the new slots, and the rest still wait.
    for _ in 0..10 {
        one_answered_after(&limiter, ms(1)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(limiter.in_flight_limit(), 24);
    assert_eq!(running.load(Ordering::SeqCst), 24);
    // The latency rises 50-fold: no cut, and no growth either (the gradient is below 1).
    for _ in 0..20 {
        one_answered_after(&limiter, ms(50)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(limiter.in_flight_limit(), 24, "neither cut nor grown");
    for pass in passes {
        pass.abort();
    }
}
