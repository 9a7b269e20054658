//! How many requests may be in flight at once: a limit that adapts to the service's latency,
//! between 1 and `sync.concurrency`, and the passes it lets run.
//!
//! A service far away answers each request late but can answer many at once; one near its
//! capacity answers later the more it is sent. The limit follows that as Netflix's
//! concurrency-limits' Gradient2 does (TCP Vegas's idea, with a baseline that moves):
//!
//! - **Latency holds: it grows.** Each answer compares its latency (`short`) with the long-term
//!   average of latencies (`long`, [`LONG_WINDOW`] answers); the gradient `TOLERANCE × long ÷
//!   short`, capped at 1, scales the limit, and [`QUEUE`] more requests are let out to probe,
//!   smoothed by [`SMOOTHING`]: while latency stays within [`TOLERANCE`] of its average, each
//!   answer adds `SMOOTHING × QUEUE` (0.8) to the limit (of a round's answers, those sent with
//!   half the limit in flight or more), so it grows by about 40 % a round trip up to the
//!   maximum.
//! - **Latency rises: it shrinks**, by the gradient (at most halving, smoothed: 10 % an answer).
//!   A rise that lasts becomes the new average over [`LONG_WINDOW`] answers, so a service that
//!   is simply farther away (50 ms → 200 ms) is not mistaken for a congested one for long; a
//!   fall of the latency below half the average pulls the average down faster. The price: a
//!   queue at the service that lasts as long is learnt too, and the limit climbs again until
//!   the next rise cuts it (the tests show both).
//! - **A 429, a 5xx or a request unanswered cuts it** to [`DROP_DECREASE`] of itself, once per
//!   round: answers to requests sent before the last cut say nothing of the new limit (as the
//!   rate's cuts, `limiter.rs`).
//! - **Only a limit that is used grows**: an answer to a request sent while fewer than half the
//!   limit were in flight leaves it as it is, so an idle stretch does not leave a limit no
//!   latency ever justified — unless the limit was binding the passes: every pass slot taken
//!   and a pass waiting for one (see below); then it grows while latency holds, and never
//!   shrinks for it.
//!
//! The same limit bounds the passes running at once ([`PassSlots`]): a pass that waits for a
//! slot holds nothing but its place in a FIFO queue, and passes start as the limit lets
//! requests through, not a fixed number of them. A pass spends part of its time on the
//! warehouse, not in a request: with a warehouse a round trip away (PostgreSQL on another
//! machine) most of it, so the passes running had fewer than half the limit in flight, and the
//! limit, unused by that rule, never grew — nor, bound by it, did the passes: 16 at a time
//! whatever waited, and an idle pass of 10,000 schedules on a server 1 ms away was bound by it
//! (BENCHMARKS.md, "Idle pass at 10,000 schedules"). A request sent while
//! passes wait for slots all taken is counted as using the limit: the passes are what it
//! holds back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Where the limit starts: enough for a few schedules' detail fetches at once, and reached
/// back from in a few round trips either way.
pub const INITIAL: f64 = 16.0;

/// Latency may rise this far above its long-term average before the limit shrinks.
pub const TOLERANCE: f64 = 1.5;

/// Answers in the long-term average of latency (an exponential average over this many).
pub const LONG_WINDOW: f64 = 600.0;

/// The first answers are averaged plainly, so one early outlier does not set the baseline.
const WARMUP: u32 = 10;

/// Requests let out beyond what the gradient keeps, to find out whether more are answered as
/// fast.
pub const QUEUE: f64 = 4.0;

/// Each answer moves the limit this share of the way to what it suggests.
pub const SMOOTHING: f64 = 0.2;

/// A 429, a 5xx or a request unanswered leaves this share of the limit.
pub const DROP_DECREASE: f64 = 0.9;

/// A request in flight, as the limit needs it back when it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The round of the limit it was sent in (a cut starts a new one).
    round: u64,
    /// Requests in flight once it was sent, itself included.
    in_flight: usize,
    /// Whether, when it was sent, the limit held passes back ([`PassSlots::binding`]).
    passes_held: bool,
}

/// The limit and what is in flight under it.
#[derive(Debug)]
pub struct InFlight {
    limit: f64,
    max: f64,
    in_flight: usize,
    /// The long-term average latency, in seconds, and the answers averaged so far.
    long: Option<(f64, u32)>,
    round: u64,
}

impl InFlight {
    /// A limit between 1 and `max` (at least 1).
    pub fn new(max: usize) -> Self {
        let max = max.max(1) as f64;
        InFlight {
            limit: INITIAL.min(max),
            max,
            in_flight: 0,
            long: None,
            round: 0,
        }
    }

    /// Requests that may be in flight now.
    pub fn limit(&self) -> usize {
        // At least 1 and within `usize`: `limit` is kept between 1 and `max`.
        self.limit.floor().max(1.0) as usize
    }

    /// Whether one more request may go out.
    pub fn has_room(&self) -> bool {
        self.in_flight < self.limit()
    }

    /// Counts a request going out (whether or not there was room: the caller checks);
    /// `passes_held`: whether the limit holds passes back now ([`PassSlots::binding`]).
    pub fn send(&mut self, passes_held: bool) -> Sent {
        self.in_flight += 1;
        Sent {
            round: self.round,
            in_flight: self.in_flight,
            passes_held,
        }
    }

    /// The service answered `sent` (neither a 429 nor a 5xx) after `latency`. (Each request
    /// sent is [`released`](Self::release) once, whatever its answer.)
    pub fn answered(&mut self, sent: Sent, latency: Duration) {
        let short = latency.as_secs_f64().max(1e-6);
        let long = self.average(short);
        // Used: at least half the limit was in flight when it was sent.
        let used = sent.in_flight as f64 >= self.limit / 2.0;
        if !used && !sent.passes_held {
            return;
        }
        let gradient = (TOLERANCE * long / short).clamp(0.5, 1.0);
        let suggested = self.limit * gradient + QUEUE;
        let smoothed = self.limit * (1.0 - SMOOTHING) + suggested * SMOOTHING;
        // Passes held back, with few requests in flight, are evidence that more may run, never
        // that fewer should: the latency of so few requests says nothing of the load the limit
        // allows (a service at a fraction of a millisecond, its answers' jitter, cut it to a
        // tenth, and a service that then moved away was learnt a few seconds later).
        let smoothed = if used {
            smoothed
        } else {
            smoothed.max(self.limit)
        };
        self.limit = smoothed.clamp(1.0, self.max);
    }

    /// `sent` met a 429 or a 5xx, or no answer: the limit shrinks, once per round.
    pub fn dropped(&mut self, sent: Sent) {
        if sent.round != self.round {
            return;
        }
        self.round += 1;
        self.limit = (self.limit * DROP_DECREASE).max(1.0);
    }

    /// Requests sent and not yet out of flight.
    #[cfg(test)]
    pub fn requests(&self) -> usize {
        self.in_flight
    }

    /// A request sent is out of flight (answered or not).
    pub fn release(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Takes `short` into the long-term average; returns the average.
    fn average(&mut self, short: f64) -> f64 {
        let (long, n) = match self.long {
            None => (short, 1),
            Some((long, n)) if n < WARMUP => {
                ((long * f64::from(n) + short) / f64::from(n + 1), n + 1)
            }
            Some((long, n)) => (long + (short - long) * 2.0 / (LONG_WINDOW + 1.0), n),
        };
        // Latency fell well below the average (a congestion cleared, a nearer service): the
        // average follows faster than its window would.
        let long = if long / short > 2.0 {
            long * 0.95
        } else {
            long
        };
        self.long = Some((long, n));
        long
    }
}

/// Passes running at once, as many as the limit (a FIFO semaphore whose permits follow it).
#[derive(Debug)]
pub struct PassSlots {
    semaphore: Arc<Semaphore>,
    /// Permits that exist, held or not; above the limit until enough are returned to forget.
    issued: usize,
    /// Passes waiting for a slot.
    waiting: usize,
}

/// A running pass's slot, given back when dropped.
pub type PassSlot = OwnedSemaphorePermit;

impl PassSlots {
    pub fn new(limit: usize) -> Self {
        PassSlots {
            semaphore: Arc::new(Semaphore::new(limit)),
            issued: limit,
            waiting: 0,
        }
    }

    /// Whether the limit holds passes back: every slot is taken and a pass waits for one.
    pub fn binding(&self) -> bool {
        self.waiting > 0 && self.semaphore.available_permits() == 0
    }

    /// A pass begins waiting for a slot ([`Self::stop_waiting`] when it has one, or gives up).
    pub fn start_waiting(&mut self) {
        self.waiting += 1;
    }

    pub fn stop_waiting(&mut self) {
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// Makes the slots follow `limit`: new ones at once; fewer as running passes end.
    pub fn follow(&mut self, limit: usize) {
        if limit > self.issued {
            self.semaphore.add_permits(limit - self.issued);
            self.issued = limit;
        } else if limit < self.issued {
            self.issued -= self.semaphore.forget_permits(self.issued - limit);
        }
    }

    /// A slot just taken, kept when the limit has room for it; otherwise (the limit shrank
    /// while passes held more slots than it now allows) forgotten, and the taker waits again.
    pub fn admit(&mut self, slot: PassSlot, limit: usize) -> Option<PassSlot> {
        self.follow(limit);
        if self.issued > limit {
            slot.forget();
            self.issued -= 1;
            return None;
        }
        Some(slot)
    }

    /// The semaphore to wait on (outside any lock).
    pub fn semaphore(&self) -> Arc<Semaphore> {
        Arc::clone(&self.semaphore)
    }
}

#[cfg(test)]
mod tests;
