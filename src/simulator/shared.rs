//! What the handlers, the middleware and the dialer's task share: the state behind its lock,
//! the credentials, the fault plan, the request log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use tokio_util::sync::CancellationToken;
use url::Url;
use uuid::Uuid;

use super::bad_body::BadBody;
use super::clock::SimClock;
use super::dialer::{self, MIN_TICK};
use super::fault_plan::{FaultPlan, RequestRecord};
use super::hold;
use super::mutex::lock;
use super::state;
use super::tie_order::TieOrder;
use crate::service::Timestamp;

/// What handlers share.
pub(crate) struct Shared {
    pub(super) state: Mutex<state::State>,
    pub(super) base_url: Url,
    pub(super) client_id: String,
    pub(super) client_secret: String,
    pub(super) static_token: String,
    pub(super) summary_list: bool,
    pub(super) token_lifetime: Duration,
    pub(super) late_commit: Option<Duration>,
    pub(super) tie_order: TieOrder,
    /// List requests answered: a shuffled tie order's seed.
    pub(super) lists: AtomicU64,
    pub(super) clock: SimClock,
    /// Issued tokens and when they expire.
    pub(super) tokens: Mutex<HashMap<String, Timestamp>>,
    pub(super) faults: Mutex<FaultPlan>,
    /// The quota's token bucket: requests left and when it was last filled.
    pub(super) quota: Mutex<(f64, Timestamp)>,
    pub(super) fault_counter: AtomicUsize,
    pub(super) broken: Mutex<HashMap<Uuid, BadBody>>,
    /// What each schedule's list pages lie about (`lies.rs`).
    pub(super) lies: Mutex<HashMap<Uuid, super::lies::Lie>>,
    /// Calls whose detail is answered as it was when a test froze it, however they change
    /// since: a detail endpoint served by a replica that lags the list's.
    pub(super) frozen_details: Mutex<HashMap<Uuid, crate::service::OutboundCall>>,
    pub(super) requests: Mutex<Vec<RequestRecord>>,
    /// Writes held by `FaultPlan::delay_writes`, counted once their bodies are in: the request
    /// log has a request only once it is answered, and its client may be gone before that.
    pub(super) delayed_writes: AtomicUsize,
    /// A test's holds on list requests, detail requests and writes (`hold.rs`), if it set
    /// them.
    pub(super) list_hold: Mutex<Option<Arc<hold::Gate>>>,
    pub(super) detail_hold: Mutex<Option<Arc<hold::Gate>>>,
    pub(super) write_hold: Mutex<Option<Arc<hold::Gate>>>,
    pub(super) rng: Mutex<StdRng>,
    /// Locked only with `state` held, after it.
    pub(super) dialer: Option<Mutex<dialer::Dialer>>,
    pub(super) dialer_running: AtomicBool,
}

impl Shared {
    /// The service's truth, with the dialer's work up to the clock's "now" done first: every
    /// reader of the state sees what the dialer did by then, whenever its task last ran.
    pub(super) fn state(&self) -> MutexGuard<'_, state::State> {
        let mut state = lock(&self.state);
        if let Some(dialer) = &self.dialer {
            lock(dialer).catch_up(
                &mut state,
                self.clock.now(),
                self.dialer_running.load(Ordering::SeqCst),
                self.late_commit,
            );
        }
        state
    }

    pub(super) fn rng(&self) -> MutexGuard<'_, StdRng> {
        lock(&self.rng)
    }

    pub(super) fn faults(&self) -> FaultPlan {
        lock(&self.faults).clone()
    }

    pub(super) fn next_fault_index(&self) -> usize {
        self.fault_counter.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn broken(&self, schedule: Uuid) -> Option<BadBody> {
        lock(&self.broken).get(&schedule).copied()
    }

    pub(super) fn lie(&self, schedule: Uuid) -> Option<super::lies::Lie> {
        lock(&self.lies).get(&schedule).cloned()
    }

    pub(super) fn log_request(&self, record: RequestRecord) {
        lock(&self.requests).push(record);
    }
}

/// Brings the dialer up to the clock every tick even when no request comes, so a request
/// never waits for a long backlog of ticks to run.
pub async fn keep_up(shared: Arc<Shared>, tick: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(tick.max(MIN_TICK));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => drop(shared.state()),
        }
    }
}
