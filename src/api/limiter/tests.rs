//! The limiter against a model of the service, in tokio's virtual time: every figure is
//! exact and repeatable, and a minute of traffic takes milliseconds.

use std::sync::{Arc, Mutex};

use super::*;

/// The service's side: a token bucket of `per_second` requests a second (a second's worth of
/// burst), answering each request after `latency`.
struct Service {
    per_second: f64,
    latency: Duration,
    /// This share of requests, drawn at random (a seeded generator), gets a 429 with
    /// `Retry-After: 1` whatever the rate: a service's hiccups, not its quota.
    random_429: Option<(f64, Mutex<rand::rngs::StdRng>)>,
    bucket: Mutex<(f64, Instant)>,
    /// Until this instant every request gets a 429 with `Retry-After` (a maintenance window).
    closed_until: Mutex<Option<Instant>>,
    log: Mutex<Vec<(Instant, Lane, bool)>>,
}

impl Service {
    fn new(per_second: f64) -> Arc<Self> {
        Arc::new(Service {
            per_second,
            latency: Duration::from_millis(10),
            random_429: None,
            bucket: Mutex::new((per_second, Instant::now())),
            closed_until: Mutex::new(None),
            log: Mutex::new(Vec::new()),
        })
    }

    /// `Err(retry_after)` for a 429.
    async fn call(&self, lane: Lane) -> Result<(), Option<Duration>> {
        let now = Instant::now();
        let answer = self.decide(now);
        self.log.lock().unwrap().push((now, lane, answer.is_ok()));
        tokio::time::sleep(self.latency).await;
        answer
    }

    /// A service allowing `per_second`, answering after `latency`.
    fn far(per_second: f64, latency: Duration) -> Arc<Self> {
        let mut service = Arc::into_inner(Service::new(per_second)).expect("only one");
        service.latency = latency;
        Arc::new(service)
    }

    /// A service without a quota that answers `share` of requests 429 with `Retry-After: 1`,
    /// drawn from a generator seeded with `seed`.
    fn hiccups(share: f64, seed: u64) -> Arc<Self> {
        use rand::SeedableRng;
        let mut service = Arc::into_inner(Service::new(1_000_000.0)).expect("only one");
        service.random_429 = Some((share, Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))));
        Arc::new(service)
    }

    fn decide(&self, now: Instant) -> Result<(), Option<Duration>> {
        if let Some((share, rng)) = &self.random_429
            && rand::RngExt::random_bool(&mut *rng.lock().unwrap(), *share)
        {
            return Err(Some(Duration::from_secs(1)));
        }
        if let Some(until) = *self.closed_until.lock().unwrap()
            && now < until
        {
            return Err(Some(until - now));
        }
        let mut bucket = self.bucket.lock().unwrap();
        let (tokens, at) = *bucket;
        let tokens =
            (tokens + now.duration_since(at).as_secs_f64() * self.per_second).min(self.per_second);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            Ok(())
        } else {
            *bucket = (tokens, now);
            Err(None)
        }
    }

    /// Requests that reached the service in `[from, to)`: (all, 429s).
    fn served_between(&self, from: Instant, to: Instant) -> (usize, usize) {
        let log = self.log.lock().unwrap();
        let window: Vec<_> = log.iter().filter(|(t, ..)| *t >= from && *t < to).collect();
        let refused = window.iter().filter(|(.., ok)| !ok).count();
        (window.len(), refused)
    }

    fn by_lane(&self, lane: Lane) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(_, l, _)| *l == lane).count()
    }
}

/// `workers` tasks of `lane`, each sending one request after another until `until`.
fn spawn_workers(
    limiter: &Arc<Limiter>,
    service: &Arc<Service>,
    lane: Lane,
    workers: usize,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|_| {
            let (limiter, service) = (Arc::clone(limiter), Arc::clone(service));
            tokio::spawn(async move {
                while Instant::now() < until {
                    let grant = take(&limiter, lane).await;
                    match service.call(lane).await {
                        Ok(()) => limiter.succeeded(&grant),
                        Err(retry_after) => limiter.rate_limited(&grant, retry_after),
                    }
                }
            })
        })
        .collect()
}

/// Between `from` and `to` the requests reached the service at 75–110 % of what it allows,
/// fewer than 3 % of them answered 429.
fn assert_settled(service: &Service, from: Instant, to: Instant) {
    let allowed = service.per_second;
    let (sent, refused) = service.served_between(from, to);
    let rate = sent as f64 / (to - from).as_secs_f64();
    assert!(
        rate >= 0.75 * allowed && rate <= 1.1 * allowed,
        "{allowed}/s allowed: settled at {rate:.1}/s"
    );
    assert!(
        (refused as f64) < 0.03 * sent as f64,
        "{allowed}/s: {refused} 429s of {sent} once settled"
    );
}

async fn run(handles: Vec<tokio::task::JoinHandle<()>>) {
    for handle in handles {
        handle.await.unwrap();
    }
}

/// A retry budget longer than any pause these tests ask for (an hour of virtual time).
fn patient() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A request's turn, with a retry budget longer than any pause.
async fn take(limiter: &Limiter, lane: Lane) -> Grant<'_> {
    limiter
        .acquire(lane, patient())
        .await
        .expect("no pause lasts an hour")
}

/// Requests in flight at most in these tests: more than any of them sends.
const MAX: usize = 256;

fn lane(n: u128) -> Lane {
    Some(Uuid::from_u128(n))
}

#[tokio::test(start_paused = true)]
async fn without_a_ceiling_it_converges_near_what_the_service_allows() {
    for allowed in [5.0, 20.0, 200.0] {
        let service = Service::new(allowed);
        let limiter = Arc::new(Limiter::new(None, MAX));
        let start = Instant::now();
        let end = start + Duration::from_secs(120);
        // Eight requests in flight at 10 ms each could send 800 a second: far above any of these.
        run(spawn_workers(&limiter, &service, lane(1), 8, end)).await;

        assert_settled(&service, start + Duration::from_secs(60), end);
        // Finding the rate costs the requests in flight when the first 429 came, and a few
        // cuts after: bounded by the concurrency, not by time.
        let (_, startup_refused) = service.served_between(start, start + Duration::from_secs(10));
        assert!(
            startup_refused <= 2 * 8,
            "{allowed}/s: {startup_refused} 429s while finding the rate"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_ceiling_is_never_exceeded_and_no_429_means_no_slowdown() {
    let service = Service::new(1_000.0);
    let limiter = Arc::new(Limiter::new(NonZeroU32::new(25), MAX));
    let start = Instant::now();
    let end = start + Duration::from_secs(20);
    run(spawn_workers(&limiter, &service, lane(1), 8, end)).await;
    for second in 0..19 {
        let from = start + Duration::from_secs(second);
        let (sent, refused) = service.served_between(from, from + Duration::from_secs(1));
        assert_eq!(refused, 0);
        assert!(
            (24..=26).contains(&sent),
            "second {second}: {sent} requests"
        );
    }
    assert_eq!(limiter.current_rate(), Some(25.0));
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_429s_with_retry_after_pauses_every_lane() {
    let service = Service::new(1_000.0);
    let limiter = Arc::new(Limiter::new(NonZeroU32::new(50), MAX));
    let start = Instant::now();
    let closed_at = start + Duration::from_secs(2);
    let reopens = closed_at + Duration::from_secs(5);
    let end = start + Duration::from_secs(10);
    let closing = Arc::clone(&service);
    tokio::spawn(async move {
        tokio::time::sleep_until(closed_at).await;
        *closing.closed_until.lock().unwrap() = Some(reopens);
    });
    let mut handles = spawn_workers(&limiter, &service, lane(1), 4, end);
    handles.extend(spawn_workers(&limiter, &service, lane(2), 4, end));
    run(handles).await;

    // The first 429 stops every lane: only requests already in flight or granted in the same
    // instant meet the closed service; nothing more is sent until it reopens.
    let (during, refused) = service.served_between(closed_at, reopens);
    assert_eq!(during, refused);
    assert!(
        refused <= 8,
        "{refused} requests sent into the closed window"
    );
    let (after, refused_after) = service.served_between(reopens, end);
    assert_eq!(refused_after, 0);
    assert!(
        after > 3 * 25,
        "only {after} requests in the 3 s after reopening"
    );
}

#[tokio::test(start_paused = true)]
async fn lanes_share_the_rate_fairly() {
    let service = Service::new(1_000.0);
    let limiter = Arc::new(Limiter::new(NonZeroU32::new(10), MAX));
    let end = Instant::now() + Duration::from_secs(30);
    // One schedule with eight detail fetches in flight against one with a single request.
    let mut handles = spawn_workers(&limiter, &service, lane(1), 8, end);
    handles.extend(spawn_workers(&limiter, &service, lane(2), 1, end));
    run(handles).await;
    let (busy, quiet) = (service.by_lane(lane(1)), service.by_lane(lane(2)));
    // First come, first served would give the quiet lane one request in nine.
    assert!(
        quiet * 10 >= (busy + quiet) * 4,
        "busy lane {busy} requests, quiet lane {quiet}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue() {
    let limiter = Arc::new(Limiter::new(NonZeroU32::new(1), MAX));
    take(&limiter, lane(1)).await;
    // Lane 1's next request waits a second for its slot, then is cancelled.
    let waiting = tokio::time::timeout(Duration::from_millis(100), take(&limiter, lane(1))).await;
    assert!(waiting.is_err());
    // Lane 2 is not stuck behind it: it gets the slot when it opens.
    let started = Instant::now();
    let grant = take(&limiter, lane(2)).await;
    assert_eq!(started.elapsed(), Duration::from_millis(900));
    assert_eq!(grant.waited, Duration::from_millis(900));
}

#[tokio::test(start_paused = true)]
async fn a_place_freed_goes_to_the_next_waiter_before_its_task_runs() {
    // One place in flight; lanes 2 and 3 wait for it, in that order.
    let limiter = Limiter::new(None, 1);
    let deadline = patient();
    let first = take(&limiter, lane(1)).await;
    let mut second = std::pin::pin!(limiter.acquire(lane(2), deadline));
    let mut third = std::pin::pin!(limiter.acquire(lane(3), deadline));
    assert!(futures::poll!(second.as_mut()).is_pending());
    assert!(futures::poll!(third.as_mut()).is_pending());
    // The answer frees the place, and it is lane 2's at once, though lane 2 has not run: a
    // place is never left empty while its waiter's task is busy elsewhere.
    drop(first);
    assert_eq!(limiter.requests_in_flight(), 1);
    let std::task::Poll::Ready(Ok(second)) = futures::poll!(second.as_mut()) else {
        panic!("lane 2 was given the place");
    };
    assert!(futures::poll!(third.as_mut()).is_pending());
    drop(second);
    let std::task::Poll::Ready(Ok(third)) = futures::poll!(third.as_mut()) else {
        panic!("lane 3 was given the place");
    };
    drop(third);
    assert_eq!(limiter.requests_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_place_given_to_a_wait_cancelled_before_it_took_it_goes_to_the_next() {
    let limiter = Limiter::new(None, 1);
    let deadline = patient();
    let first = take(&limiter, lane(1)).await;
    let mut second = Box::pin(limiter.acquire(lane(2), deadline));
    let mut third = std::pin::pin!(limiter.acquire(lane(3), deadline));
    assert!(futures::poll!(second.as_mut()).is_pending());
    assert!(futures::poll!(third.as_mut()).is_pending());
    drop(first);
    // Lane 2's wait was given the place, and is dropped before it ran (its pass cancelled):
    // the place is not lost, lane 3 has it.
    drop(second);
    assert_eq!(limiter.requests_in_flight(), 1);
    let std::task::Poll::Ready(Ok(third)) = futures::poll!(third.as_mut()) else {
        panic!("lane 3 was given the place");
    };
    drop(third);
    assert_eq!(limiter.requests_in_flight(), 0);
    // And the limit's one place is free for whoever comes next.
    assert!(take(&limiter, lane(4)).await.waited.is_zero());
}

/// Lane 2 waits behind lane 1's two requests in two places. The first is answered, and lane 2
/// is given its place at once; then, before lane 2 ran, the second is answered 429 with
/// `retry_after`, and lane 2's place, its request not sent yet, is taken back. Lane 2's turn
/// once it comes.
async fn handed_then_refused(limiter: &Limiter, retry_after: Option<Duration>) -> Grant<'_> {
    let deadline = patient();
    let answered = take(limiter, lane(1)).await;
    let refused = take(limiter, lane(1)).await;
    let mut next = std::pin::pin!(limiter.acquire(lane(2), deadline));
    assert!(futures::poll!(next.as_mut()).is_pending());
    limiter.succeeded(&answered);
    drop(answered);
    assert_eq!(
        limiter.requests_in_flight(),
        2,
        "lane 2 was given the place"
    );
    limiter.rate_limited(&refused, retry_after);
    drop(refused);
    assert_eq!(
        limiter.requests_in_flight(),
        0,
        "lane 2's place was taken back"
    );
    next.await.expect("within its budget")
}

#[tokio::test(start_paused = true)]
async fn a_place_handed_before_a_429_cut_the_rate_is_taken_back_for_the_new_rate() {
    let limiter = Limiter::new(None, 2);
    // The cut: 3 sent in the last second, × 0.7. Lane 2 waits for its slot, 1 ÷ 2.1 s after
    // the last grant (to the timer's millisecond).
    let waited = handed_then_refused(&limiter, None).await.waited;
    let slot = Duration::from_secs_f64(1.0 / 2.1);
    assert!(
        waited >= slot && waited <= slot + Duration::from_millis(1),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_place_handed_before_a_retry_after_is_taken_back_for_the_pause() {
    let limiter = Limiter::new(None, 2);
    // `Retry-After: 2`: lane 2's request waits out the pause, as every lane's.
    let grant = handed_then_refused(&limiter, Some(Duration::from_secs(2))).await;
    assert_eq!(grant.waited, Duration::from_secs(2));
    assert_eq!(limiter.current_rate(), None, "a pause, not a cut");
}

#[tokio::test(start_paused = true)]
async fn without_a_ceiling_or_a_429_nothing_waits() {
    let limiter = Limiter::new(None, MAX);
    let started = Instant::now();
    for _ in 0..10_000 {
        assert!(take(&limiter, lane(1)).await.waited.is_zero());
    }
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(limiter.current_rate(), None);
}

#[tokio::test(start_paused = true)]
async fn a_429_to_a_request_of_an_earlier_round_does_not_cut_again() {
    let limiter = Limiter::new(NonZeroU32::new(100), MAX);
    let early = take(&limiter, lane(1)).await;
    let early_too = take(&limiter, lane(1)).await;
    let rate = || {
        limiter
            .current_rate()
            .map(|r| (r * 1000.0).round() / 1000.0)
    };
    limiter.rate_limited(&early, None);
    assert_eq!(rate(), Some(70.0));
    limiter.rate_limited(&early_too, None);
    assert_eq!(rate(), Some(70.0));
    let later = take(&limiter, lane(1)).await;
    limiter.rate_limited(&later, None);
    assert_eq!(rate(), Some(49.0));
}

#[tokio::test(start_paused = true)]
async fn a_pause_beyond_a_requests_budget_fails_it_at_once_and_no_pause_exceeds_the_cap() {
    let secs = Duration::from_secs;
    let limiter = Arc::new(Limiter::new(None, MAX));
    let refused = take(&limiter, lane(1)).await;
    limiter.rate_limited(&refused, Some(secs(200)));
    let start = Instant::now();

    // The service asked every client to wait 200 s: a request with 120 s of its retry budget
    // left gives up at once, saying both.
    assert_eq!(
        limiter
            .acquire(lane(2), start + secs(120))
            .await
            .map(|grant| grant.waited),
        Err(PausedBeyondDeadline {
            pause_left: secs(200),
            left: secs(120),
        })
    );
    assert_eq!(Instant::now(), start);

    // One whose budget covers the pause waits it out — unless a later 429 extends the pause
    // beyond its budget while it waits: then it gives up at that moment.
    let patient = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move {
            let grant = limiter.acquire(lane(2), start + secs(250)).await;
            grant.map(|grant| grant.waited)
        }
    });
    let extended = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move {
            let grant = limiter.acquire(lane(3), start + secs(250)).await;
            grant.map(|grant| grant.waited)
        }
    });
    tokio::time::sleep(secs(10)).await;
    // Both waiters look again when the pause changes.
    limiter.rate_limited(&refused, Some(secs(260)));
    let gave_up = Err(PausedBeyondDeadline {
        pause_left: secs(260),
        left: secs(240),
    });
    assert_eq!(patient.await.unwrap(), gave_up);
    assert_eq!(extended.await.unwrap(), gave_up);
    assert_eq!(Instant::now(), start + secs(10));

    // A budget that covers it waits the whole pause.
    let now = Instant::now();
    let grant = limiter.acquire(lane(2), now + secs(300)).await.unwrap();
    assert_eq!(grant.waited, secs(260));

    // An hour's Retry-After pauses every lane for the cap (logged), not the hour.
    limiter.rate_limited(&grant, Some(secs(3600)));
    let now = Instant::now();
    assert_eq!(
        limiter
            .acquire(lane(1), now + secs(200))
            .await
            .map(|grant| grant.waited),
        Err(PausedBeyondDeadline {
            pause_left: MAX_RETRY_AFTER,
            left: secs(200),
        })
    );
    let grant = limiter.acquire(lane(1), now + secs(3600)).await.unwrap();
    assert_eq!(grant.waited, MAX_RETRY_AFTER);
}

#[tokio::test(start_paused = true)]
async fn a_429_to_the_first_requests_is_climbed_back_from_within_seconds() {
    // Another client spent the quota: the bucket is empty when callsync starts, so its first
    // request meets a 429 and the rate it measured is 1 a second.
    let allowed = 20.0;
    let service = Service::new(allowed);
    *service.bucket.lock().unwrap() = (0.0, Instant::now());
    let limiter = Arc::new(Limiter::new(None, MAX));
    let start = Instant::now();
    let end = start + Duration::from_secs(30);
    run(spawn_workers(&limiter, &service, lane(1), 8, end)).await;

    // Slow start: near the allowed rate within seconds (3 % a second from 1 would take 100 s).
    assert_settled(&service, start + Duration::from_secs(10), end);
}

#[tokio::test(start_paused = true)]
async fn random_429s_with_retry_after_pause_but_do_not_wear_the_rate_down() {
    // The operator's case: 3 % of requests answered 429 with `Retry-After: 1`, at random,
    // under a ceiling of 10 a second. Each 429 cut by 30 % against 3 % a second of climb
    // took the rate from 9.8 to 1.6 a second within three minutes.
    let service = Service::hiccups(0.03, 7);
    let limiter = Arc::new(Limiter::new(NonZeroU32::new(10), MAX));
    let start = Instant::now();
    let end = start + Duration::from_secs(180);
    run(spawn_workers(&limiter, &service, lane(1), 4, end)).await;

    // The rate is not cut at all: the pauses are the answer.
    assert_eq!(limiter.current_rate(), Some(10.0));
    // What reaches the service in the third minute is the ceiling less the pauses asked for:
    // each 429 stops every lane for a second, about one in 3.3 s of sending at 10 a second.
    let (sent, refused) = service.served_between(start + Duration::from_secs(120), end);
    let per_second = sent as f64 / 60.0;
    assert_eq!((sent, refused), (447, 16));
    assert!(per_second > 7.0, "{per_second:.1} requests/s");
}

#[tokio::test(start_paused = true)]
async fn a_quota_is_used_to_nine_tenths_with_under_two_per_cent_429s() {
    // `simulate --rate-limit 50`: a token bucket of 50 a second, a second's burst, 429s
    // without `Retry-After`; 50 ms away, 64 requests wanting to go at once, no ceiling.
    let service = Service::far(50.0, Duration::from_millis(50));
    let limiter = Arc::new(Limiter::new(None, MAX));
    let start = Instant::now();
    let end = start + Duration::from_secs(60);
    let mut handles = Vec::new();
    for n in 0..16 {
        handles.extend(spawn_workers(&limiter, &service, lane(n), 4, end));
    }
    run(handles).await;

    let (sent, refused) = service.served_between(start, end);
    let answered = (sent - refused) as f64 / 60.0;
    let share = refused as f64 / sent as f64;
    assert!(answered >= 45.0, "{answered:.1} answered a second");
    assert!(share <= 0.02, "{refused} of {sent} answered 429");
    // Exactly, for this model (3,051 requests, 32 answered 429: 50.3 a second answered,
    // 1.0 % refused), so that a change to either limit shows here. Most of the 429s are the
    // first second's, before the first of them is answered: the model answers a round's
    // requests at one instant, and the places its successes free are taken at that instant,
    // some before the 429s answered beside them cut the rate (those not yet taken are taken
    // back: 59 answered 429 without that; 22 when a waiter took its place only when its task
    // ran, after those cuts).
    assert_eq!((sent, refused), (3051, 32));
}
