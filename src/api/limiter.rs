//! The shared request limiter: adapts to the service, and shares what it allows fairly.
//!
//! The service's rate limits are "not shown" in its spec, so callsync learns them from its
//! answers instead of guessing a fixed number (AIMD, as TCP does with a network's capacity).
//! Two limits, each learnt from the answers, hold every request:
//!
//! - **Requests in flight** (`in_flight.rs`): between 1 and `sync.concurrency`, growing while
//!   the latency holds and shrinking when it rises or the service answers 429 or 5xx (a
//!   gradient limit, as Netflix's concurrency-limits' Gradient2). A service far away is kept
//!   busy with many requests at once; one near its capacity gets fewer. The passes running
//!   at once follow the same limit ([`Limiter::pass_slot`]).
//! - **Requests a second**, under `api.requests_per_second`:
//!   - **No limit until the service asks for one.** Without a configured ceiling
//!     (`api.requests_per_second = 0`, the default), requests go out as fast as the limit in
//!     flight lets them.
//!   - **A 429 without `Retry-After` cuts the rate** to [`DECREASE`] of what was being sent
//!     (the current rate, or the rate measured over the last second when there was none): the
//!     service said "too many" and not what to do, which is how a quota answers. One cut per
//!     round: a 429 to a request sent before the last cut says nothing about the new rate, so
//!     a burst of 429s to requests already in flight costs one cut, not a collapse.
//!   - **A 429 with `Retry-After` pauses every lane, and does not cut the rate**: the service
//!     said when it will listen again, and asking before then only earns more 429s. The pause
//!     is the answer; cutting the rate as well would answer it twice, and a few per cent of
//!     random 429s, each cut by 30 % against 3 % a second of climb, would wear the rate down
//!     to a trickle (an operator saw 9.8 requests/s become 1.6 in three minutes). The pause is
//!     capped at [`MAX_RETRY_AFTER`] (logged when applied), and a request whose retry budget
//!     ends before the pause does gives up at once, naming both, rather than wait in vain.
//!     `Retry-After: 0` asks for no pause and counts as none.
//!   - **Successes let it climb back**: each success of a request the rate held back adds
//!     [`increase_per_second`] spread over a second's requests, up to the configured ceiling
//!     (after the first cut, made from a rate measured rather than known, it doubles each
//!     second until the next 429: slow start);
//!     without a ceiling, a rate that climbs past [`UNLIMITED_ABOVE`] lifts the limit.
//! - **Lanes share both fairly**: while requests wait, permits go round-robin to the lanes (one
//!   lane per schedule's pass), so one busy schedule and its detail fetches (or the pages of
//!   its walk asked ahead) cannot starve the others.
//!
//! Time is tokio's, so waiting is a cancellable sleep and the tests run in virtual time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::retry::MAX_RETRY_AFTER;
use in_flight::{InFlight, PassSlots, Sent};

pub use in_flight::PassSlot;

mod in_flight;

/// A 429 leaves this share of the rate (TCP CUBIC's 0.7: gentler than halving, so the
/// average stays nearer what the service allows).
const DECREASE: f64 = 0.7;

/// The rate never drops below this; a service that allows less says so with `Retry-After`.
const MIN_RATE: f64 = 1.0;

/// Without a ceiling, a rate climbed back this high is no limit at all.
const UNLIMITED_ABOVE: f64 = 10_000.0;

/// How much the rate climbs per second of successful, rate-limited requests: 3 % of itself.
/// Proportional, so the time from a cut back to the rate that was cut (12 s) and the share of
/// requests that meet a 429 are the same at 5 requests a second and at 5,000.
fn increase_per_second(rate: f64) -> f64 {
    rate * 0.03
}

/// Who a request is for: requests of one lane queue behind each other, lanes take turns.
/// `None` is the lane of requests made outside a schedule's pass.
pub type Lane = Option<Uuid>;

/// The permission to send one request, and what the limiter needs back about its answer; its
/// place in flight is given back when it is dropped.
#[derive(Debug)]
pub struct Grant<'a> {
    limiter: &'a Limiter,
    /// The round of the rate this request was sent in.
    epoch: u64,
    /// Whether the limit held this request back (so its success is evidence the rate can rise).
    limited: bool,
    /// How long the request waited for its turn.
    pub waited: Duration,
    /// When it went out, and its place among the requests in flight.
    sent_at: Instant,
    sent: Sent,
    /// Its answer was taken into the limits already (a request answers once).
    settled: AtomicBool,
}

impl Grant<'_> {
    /// The request goes out now: its latency is counted from here, not from its turn (which
    /// may have been spent fetching a token).
    pub fn going_out(&mut self) {
        self.sent_at = Instant::now();
    }

    /// Marks the answer taken; `false` when it was already.
    fn settle(&self) -> bool {
        !self.settled.swap(true, Ordering::Relaxed)
    }
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        self.limiter.lock().give_back(Instant::now());
    }
}

/// A pass waiting for its slot, counted as long as it waits (`PassSlots::binding`).
struct WaitingForSlot<'a>(&'a Limiter);

impl Drop for WaitingForSlot<'_> {
    fn drop(&mut self) {
        self.0.lock().passes.stop_waiting();
    }
}

/// Every lane is paused by a `Retry-After` beyond the deadline of the request that waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PausedBeyondDeadline {
    /// How long the pause still lasts.
    pub pause_left: Duration,
    /// How long the request had left.
    pub left: Duration,
}

#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
    /// Wakes every waiter when a `Retry-After` pauses every lane (which may end a wait beyond
    /// its deadline). Room in flight is given to the waiters it lets go, each woken with its
    /// turn taken (`State::hand_over`); a waiter whose slot of the rate is still to come is
    /// woken alone to wait for it (`Queue::wake_next`): waking all of them, each to find it
    /// is not its turn, cost the detail fetches much of the process's CPU with a thousand
    /// waiting (BENCHMARKS.md, "Far away").
    paused: Notify,
    ceiling: Option<f64>,
}

#[derive(Debug)]
struct State {
    /// Requests per second; `None` sends at once.
    rate: Option<f64>,
    last_grant: Option<Instant>,
    paused_until: Option<Instant>,
    epoch: u64,
    /// Grants of the last second: the rate actually sent when there was no limit.
    recent: VecDeque<Instant>,
    /// Climbing back by doubling each second, until the next 429 (see `rate_limited`).
    slow_start: bool,
    queue: Queue,
    /// Turns given to waiters that have not taken them yet, by waiter (in arrival order).
    handed: BTreeMap<u64, Handed>,
    /// Requests in flight, under a limit that follows the latency.
    in_flight: InFlight,
    /// Passes running at once, as many as that limit.
    passes: PassSlots,
}

impl Limiter {
    /// `ceiling`: the configured `api.requests_per_second`, never exceeded; `None` for none.
    /// `max_in_flight`: the most requests in flight at once (`sync.concurrency`).
    pub fn new(ceiling: Option<NonZeroU32>, max_in_flight: usize) -> Self {
        let ceiling = ceiling.map(|c| f64::from(c.get()));
        let in_flight = InFlight::new(max_in_flight);
        let passes = PassSlots::new(in_flight.limit());
        Limiter {
            state: Mutex::new(State {
                rate: ceiling,
                last_grant: None,
                paused_until: None,
                epoch: 0,
                recent: VecDeque::new(),
                slow_start: false,
                queue: Queue::default(),
                handed: BTreeMap::new(),
                in_flight,
                passes,
            }),
            paused: Notify::new(),
            ceiling,
        }
    }

    /// The rate requests are held to now, in requests a second; `None` when there is no limit.
    #[cfg(test)]
    pub fn current_rate(&self) -> Option<f64> {
        self.lock().rate
    }

    /// Requests that may be in flight now.
    #[cfg(test)]
    pub fn in_flight_limit(&self) -> usize {
        self.lock().in_flight.limit()
    }

    /// Requests in flight now, those given to waiters that have not run yet included.
    #[cfg(test)]
    pub fn requests_in_flight(&self) -> usize {
        self.lock().in_flight.requests()
    }

    /// Waits until one more pass may run: passes run as many at once as requests may be in
    /// flight. A waiter holds only its place in the queue (first come, first served).
    /// `None` never happens (the slots are never closed), but a caller need not trust that.
    pub async fn pass_slot(&self) -> Option<PassSlot> {
        let slots = {
            let mut state = self.lock();
            state.passes.start_waiting();
            state.passes.semaphore()
        };
        // Counted out when it has its slot or its wait is dropped (cancel-safe).
        let _waiting = WaitingForSlot(self);
        loop {
            let slot = Arc::clone(&slots).acquire_owned().await.ok()?;
            let mut state = self.lock();
            let limit = state.in_flight.limit();
            if let Some(slot) = state.passes.admit(slot, limit) {
                return Some(slot);
            }
        }
    }

    /// Waits for this lane's turn and a free slot, and takes it; fails at once when a
    /// `Retry-After` pauses every lane beyond `deadline` (the request's retry budget), now or
    /// while it waits. Cancel-safe: a dropped wait leaves the queue.
    pub async fn acquire(
        &self,
        lane: Lane,
        deadline: Instant,
    ) -> Result<Grant<'_>, PausedBeyondDeadline> {
        let arrived = Instant::now();
        // Whether this request waited for its slot of the rate: only then is its success
        // evidence that the rate can rise (not when it waited for room in flight).
        let mut held_by_rate = false;
        let (id, wake) = self.lock().queue.push(lane);
        let mut ticket = Ticket {
            limiter: self,
            id,
            queued: true,
        };
        loop {
            let paused = self.paused.notified();
            tokio::pin!(paused);
            paused.as_mut().enable();
            // `notify_one` keeps a permit for a waiter not yet waiting: no wake-up is lost
            // between the look at the turn and the wait.
            let woken = wake.notified();
            let changed = async {
                tokio::select! {
                    () = paused => {}
                    () = woken => {}
                }
            };
            let now = Instant::now();
            let next = self.lock().turn(ticket.id, now, deadline);
            match next {
                Turn::Granted(granted) => {
                    ticket.queued = false;
                    return Ok(Grant {
                        limiter: self,
                        epoch: granted.epoch,
                        limited: granted.rated && held_by_rate,
                        waited: now.duration_since(arrived),
                        sent_at: now,
                        sent: granted.sent,
                        settled: AtomicBool::new(false),
                    });
                }
                // The ticket leaves the queue as it drops.
                Turn::PausedBeyond(paused) => return Err(paused),
                Turn::At(at) => {
                    held_by_rate = true;
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                Turn::NotYours | Turn::Full => changed.await,
            }
        }
    }

    /// The service answered the request without a 429 or a 5xx: the rate may climb, and the
    /// requests in flight may grow while the latency holds.
    pub fn succeeded(&self, grant: &Grant) {
        if !grant.settle() {
            return;
        }
        let mut state = self.lock();
        state
            .in_flight
            .answered(grant.sent, grant.sent_at.elapsed());
        // A limit grown: the waiters it makes room for are served now (a rate climbed below
        // serves them when the next slot of the rate comes).
        state.hand_over(Instant::now());
        if !grant.limited || grant.epoch != state.epoch {
            return;
        }
        if let Some(rate) = state.rate {
            // Each success adds its share of a second's climb: 3 % of the rate, or the whole
            // rate (doubling each second) in slow start.
            let step = if state.slow_start {
                1.0
            } else {
                increase_per_second(rate) / rate
            };
            let climbed = rate + step;
            state.rate = match self.ceiling {
                Some(ceiling) => Some(climbed.min(ceiling)),
                None if climbed > UNLIMITED_ABOVE => None,
                None => Some(climbed),
            };
        }
    }

    /// The service answered 5xx, or not at all: fewer requests in flight (once per round).
    pub fn overloaded(&self, grant: &Grant) {
        if grant.settle() {
            self.lock().in_flight.dropped(grant.sent);
        }
    }

    /// The service answered 429: honour its `Retry-After` for every lane, or, without one,
    /// cut the rate (once per round); fewer requests in flight either way.
    pub fn rate_limited(&self, grant: &Grant, retry_after: Option<Duration>) {
        let now = Instant::now();
        let mut state = self.lock();
        if grant.settle() {
            state.in_flight.dropped(grant.sent);
        }
        // A pause of every lane is what the service asked for; a cut on top of it would
        // answer one 429 twice, and random 429s (a few per cent, each with `Retry-After`)
        // would wear the rate down to nothing, cut after cut. `Retry-After: 0` asks nothing.
        let pause = retry_after.filter(|asked| !asked.is_zero());
        if let Some(asked) = pause {
            if asked > MAX_RETRY_AFTER {
                // The request's own retry budget decides whether this fails the pass.
                tracing::info!(
                    retry_after_secs = asked.as_secs(),
                    paused_secs = MAX_RETRY_AFTER.as_secs(),
                    "the service asked callsync to wait longer than it ever pauses; pausing every schedule for the longest it does"
                );
            }
            let until = now + asked.min(MAX_RETRY_AFTER);
            state.paused_until = Some(state.paused_until.map_or(until, |p| p.max(until)));
            state.take_back();
        }
        if pause.is_none() && grant.epoch == state.epoch {
            // Without a limit yet, what was sent in the last second is a guess at the rate:
            // a 429 to a process's first requests (a quota another client spent) makes it 1
            // a second. From such a cut the rate climbs back doubling each second until the
            // next 429, as TCP's slow start does, instead of the 3 % a second that would take
            // minutes; from a cut of a known rate, AIMD as usual.
            state.slow_start = state.rate.is_none();
            let sending = state.rate.unwrap_or_else(|| state.sent_per_second(now));
            let cut = (sending * DECREASE).max(MIN_RATE);
            state.rate = Some(self.ceiling.map_or(cut, |c| cut.min(c)));
            state.epoch += 1;
            state.take_back();
            tracing::info!(
                requests_per_second = format_args!("{cut:.1}"),
                "the service rate-limits callsync (429); slowing down"
            );
        }
        drop(state);
        self.paused.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent at every await-free step, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A turn given to a waiter that has not taken it yet, and where the waiter goes back should
/// the turn be taken back ([`State::take_back`]).
#[derive(Debug)]
struct Handed {
    lane: Lane,
    waiter: Waiter,
    granted: Granted,
}

/// A turn given, before its waiter makes it a [`Grant`].
#[derive(Debug)]
struct Granted {
    epoch: u64,
    /// A rate held requests to their slots.
    rated: bool,
    sent: Sent,
}

enum Turn {
    Granted(Granted),
    PausedBeyond(PausedBeyondDeadline),
    /// This waiter is next; its slot opens at this instant.
    At(Instant),
    NotYours,
    /// This waiter is next, but as many requests as may be are in flight.
    Full,
}

impl State {
    /// Where waiter `id` stands: served already (by [`State::hand_over`], or now, if it is
    /// next and may go), paused beyond its `deadline`, or waiting for something.
    fn turn(&mut self, id: u64, now: Instant, deadline: Instant) -> Turn {
        if let Some(handed) = self.handed.remove(&id) {
            return Turn::Granted(handed.granted);
        }
        if let Some(until) = self.paused_until
            && until > deadline.max(now)
        {
            return Turn::PausedBeyond(PausedBeyondDeadline {
                pause_left: until - now,
                left: deadline.saturating_duration_since(now),
            });
        }
        if self.queue.next() != Some(id) {
            return Turn::NotYours;
        }
        let slot = self.next_slot(now);
        if slot > now {
            return Turn::At(slot);
        }
        self.hand_over(now);
        match self.handed.remove(&id) {
            Some(handed) => Turn::Granted(handed.granted),
            None => Turn::Full,
        }
    }

    /// When the next request may go as far as the rate and a pause say (`now` or earlier:
    /// at once).
    fn next_slot(&self, now: Instant) -> Instant {
        let slot = match (self.spacing(), self.last_grant) {
            (Some(spacing), Some(last)) => last + spacing,
            _ => now,
        };
        self.paused_until.map_or(slot, |p| slot.max(p))
    }

    fn spacing(&self) -> Option<Duration> {
        self.rate.map(|rate| Duration::from_secs_f64(1.0 / rate))
    }

    /// Serves the waiters in their turns while there is room in flight and the rate lets
    /// them go now: each is given its turn here and woken to take it. A waiter that had to
    /// take its turn itself would leave the room unused until its task ran, and the next
    /// waiter's wait on that: with a thousand requests waiting, the places freed by a burst
    /// of answers were taken one task's poll after another, and many sat empty (BENCHMARKS.md,
    /// "Far away"). A waiter whose slot is still to come is woken to wait for it.
    fn hand_over(&mut self, now: Instant) {
        while self.in_flight.has_room() {
            if self.next_slot(now) > now {
                self.queue.wake_next();
                return;
            }
            let Some((lane, waiter)) = self.queue.pop_next() else {
                return;
            };
            let granted = self.grant(now);
            waiter.wake.notify_one();
            self.handed.insert(
                waiter.id,
                Handed {
                    lane,
                    waiter,
                    granted,
                },
            );
        }
    }

    /// A pause or a cut of the rate came after these turns were given and before their
    /// waiters took them: their requests are not sent yet, so they wait for it as the
    /// requests behind them do, first in line. (A round's successes answered just before
    /// its first 429 would otherwise send their places' requests past the cut.)
    fn take_back(&mut self) {
        let handed = std::mem::take(&mut self.handed);
        for (_, Handed { lane, waiter, .. }) in handed.into_iter().rev() {
            self.in_flight.release();
            self.queue.push_front(lane, waiter);
        }
    }

    /// Counts a request going out now.
    fn grant(&mut self, now: Instant) -> Granted {
        self.last_grant = Some(now);
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(1))
        {
            self.recent.pop_front();
        }
        Granted {
            epoch: self.epoch,
            rated: self.spacing().is_some(),
            sent: self.in_flight.send(self.passes.binding()),
        }
    }

    /// A request's place in flight is free again: the passes follow the limit, and the next
    /// waiter is served.
    fn give_back(&mut self, now: Instant) {
        self.in_flight.release();
        let limit = self.in_flight.limit();
        self.passes.follow(limit);
        self.hand_over(now);
    }

    /// Requests granted over the last second.
    fn sent_per_second(&self, now: Instant) -> f64 {
        let window = Duration::from_secs(1);
        self.recent
            .iter()
            .filter(|t| now.duration_since(**t) <= window)
            .count() as f64
    }
}

/// Waiters by lane; lanes with waiters take turns, each lane's waiters go in order.
#[derive(Debug, Default)]
struct Queue {
    lanes: HashMap<Lane, VecDeque<Waiter>>,
    /// Lanes with waiters, the one whose turn it is first.
    order: VecDeque<Lane>,
    next_id: u64,
}

/// A request waiting for its turn, and how to wake it when its turn may have come.
#[derive(Debug)]
struct Waiter {
    id: u64,
    wake: Arc<Notify>,
}

impl Queue {
    /// A new waiter at the back of `lane`: its id, and what wakes it.
    fn push(&mut self, lane: Lane) -> (u64, Arc<Notify>) {
        let id = self.next_id;
        self.next_id += 1;
        let waiters = self.lanes.entry(lane).or_default();
        if waiters.is_empty() {
            self.order.push_back(lane);
        }
        let wake = Arc::new(Notify::new());
        waiters.push_back(Waiter {
            id,
            wake: Arc::clone(&wake),
        });
        (id, wake)
    }

    fn head(&self) -> Option<&Waiter> {
        let lane = self.order.front()?;
        self.lanes.get(lane)?.front()
    }

    /// The waiter whose turn it is.
    fn next(&self) -> Option<u64> {
        self.head().map(|waiter| waiter.id)
    }

    /// Wakes the waiter whose turn it is to look again (room in flight, a rate that rose, or
    /// the turn itself came to it).
    fn wake_next(&self) {
        if let Some(waiter) = self.head() {
            waiter.wake.notify_one();
        }
    }

    /// Takes the waiter whose turn it is out of the queue, with its lane; the lane goes to
    /// the back of the line.
    fn pop_next(&mut self) -> Option<(Lane, Waiter)> {
        let lane = self.order.pop_front()?;
        let waiters = self.lanes.get_mut(&lane)?;
        let waiter = waiters.pop_front();
        if waiters.is_empty() {
            self.lanes.remove(&lane);
        } else {
            self.order.push_back(lane);
        }
        Some((lane, waiter?))
    }

    /// Puts a waiter served too early back first in line: its lane's next, the lane's turn
    /// next.
    fn push_front(&mut self, lane: Lane, waiter: Waiter) {
        self.lanes.entry(lane).or_default().push_front(waiter);
        self.order.retain(|l| *l != lane);
        self.order.push_front(lane);
    }

    /// A waiter gave up (its pass was cancelled).
    fn remove(&mut self, id: u64) {
        let Some(lane) = self
            .lanes
            .iter()
            .find(|(_, waiters)| waiters.iter().any(|w| w.id == id))
            .map(|(lane, _)| *lane)
        else {
            return;
        };
        if let Some(waiters) = self.lanes.get_mut(&lane) {
            waiters.retain(|w| w.id != id);
            if waiters.is_empty() {
                self.lanes.remove(&lane);
                self.order.retain(|l| *l != lane);
            }
        }
    }
}

/// A place in the queue, given up if the wait is dropped.
struct Ticket<'a> {
    limiter: &'a Limiter,
    id: u64,
    queued: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.queued {
            let mut state = self.limiter.lock();
            if state.handed.remove(&self.id).is_some() {
                // Served, but gone before it took its turn: the place goes to the next.
                state.give_back(Instant::now());
            } else {
                state.queue.remove(self.id);
                // It may have been the waiter whose turn it was.
                state.queue.wake_next();
            }
        }
    }
}

#[cfg(test)]
mod tests;
