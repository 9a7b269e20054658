//! A faithful, stateful simulator of the Outbound Call Campaign Service, served on loopback.
//!
//! It stands in for the real service in every test, benchmark and the demo, so it follows
//! the spec rule by rule (`routes.rs`, `query.rs`) and adds knobs to make life hard for a
//! client: timestamp precision, a dialer that works the calls while a client pages
//! (`dialer.rs`), late commits, faults (`faults.rs`; lone surrogates in the served text,
//! `lone_surrogate.rs`), short token lifetimes, summary lists, and child changes that do not
//! bump `updated_at`. Tests read its ground truth with
//! [`Simulator::truth`], and may set its clock ([`ManualClock`]) as well as its seed, so that
//! a failing run replays. It reuses `service`'s models; product code never imports it.

mod auth;
mod bad_body;
mod clock;
mod dialer;
mod fault_plan;
mod faults;
mod hold;
mod lies;
mod life;
mod lone_surrogate;
mod mutex;
mod options;
mod query;
mod reply;
mod routes;
mod seed;
mod shared;
mod state;
mod tie_order;
mod validate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::serve::ListenerExt as _;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use url::Url;
use uuid::Uuid;

use crate::service::{OutboundCall, Timestamp};
use mutex::lock;
use shared::Shared;

pub use bad_body::BadBody;
pub use clock::{ManualClock, SimClock};
pub use fault_plan::{FaultPlan, RequestRecord};
pub use hold::RequestHold;
pub use lies::Lie;
pub use lone_surrogate::LoneSurrogate;
pub use options::{CallShape, DialerOptions, SimulatorOptions};
pub use state::Precision;
pub use tie_order::TieOrder;

/// Mixed into the seed for the runtime stream (any constant that is not 0 will do).
const RUNTIME_STREAM: u64 = 0x7275_6e74_696d_6521;
/// Mixed into the seed for the dialer's stream.
const DIALER_STREAM: u64 = 0x6469_616c_6572_2121;

/// A running simulator; dropping it does not stop it, [`Simulator::shutdown`] does.
pub struct Simulator {
    shared: Arc<Shared>,
    campaign: Uuid,
    call_flow: Uuid,
    schedules: Vec<Uuid>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}")]
pub struct SimulatorError {
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

impl Simulator {
    pub async fn start(
        listen: SocketAddr,
        options: SimulatorOptions,
    ) -> Result<Simulator, SimulatorError> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| SimulatorError {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimulatorError {
            addr: listen,
            source,
        })?;
        let base_url = Url::parse(&format!("http://{addr}"))
            .unwrap_or_else(|_| unreachable!("a socket address makes a valid URL"));
        let mut state = state::State::new(options.precision, options.clock.clone());
        let seeded = seed::populate(
            &mut state,
            options.seed,
            options.schedules,
            options.calls_per_schedule,
            options.shape,
            options.tie_group,
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            base_url,
            client_id: "callsync-test-client".into(),
            client_secret: seeded.client_secret,
            static_token: seeded.static_token,
            summary_list: options.summary_list,
            token_lifetime: options.token_lifetime,
            late_commit: options.late_commit,
            tie_order: options.tie_order,
            lists: AtomicU64::new(options.seed.wrapping_mul(0x2545_F491_4F6C_DD1D)),
            clock: options.clock.clone(),
            tokens: Mutex::new(HashMap::new()),
            faults: Mutex::new(options.faults.clone()),
            quota: Mutex::new((
                f64::from(options.faults.quota_per_second),
                options.clock.now(),
            )),
            fault_counter: AtomicUsize::new(0),
            broken: Mutex::new(HashMap::new()),
            lies: Mutex::new(HashMap::new()),
            frozen_details: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            delayed_writes: AtomicUsize::new(0),
            list_hold: Mutex::new(None),
            detail_hold: Mutex::new(None),
            write_hold: Mutex::new(None),
            // Not the generator's stream: what happens at runtime (uids of new resources,
            // the dialer's choices, faults) must not repeat what the seed made, yet must come
            // from the seed too, so that a failing test replays: a second stream of it.
            rng: Mutex::new(StdRng::seed_from_u64(options.seed ^ RUNTIME_STREAM)),
            dialer: options.dialer.clone().map(|dialer| {
                Mutex::new(dialer::Dialer::new(
                    dialer,
                    options.clock.now(),
                    StdRng::seed_from_u64(options.seed ^ DIALER_STREAM),
                ))
            }),
            dialer_running: AtomicBool::new(options.dialer.is_some()),
        });
        let stop = CancellationToken::new();
        let app = routes::router(shared.clone());
        let server_stop = stop.clone();
        // TCP_NODELAY, as real HTTP servers set it: without it a response written in two parts
        // waits for the client's delayed ACK, and every request costs 40 ms more on loopback.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(server_stop.cancelled_owned())
                .await;
        })];
        if let Some(dialer) = options.dialer {
            tasks.push(tokio::spawn(shared::keep_up(
                shared.clone(),
                dialer.tick,
                stop.clone(),
            )));
        }
        Ok(Simulator {
            shared,
            campaign: seeded.campaign,
            call_flow: seeded.call_flow,
            schedules: seeded.schedules,
            stop,
            tasks,
        })
    }

    /// The spec's `{base_url}`, e.g. `http://127.0.0.1:41234`.
    pub fn base_url(&self) -> &Url {
        &self.shared.base_url
    }

    pub fn token_url(&self) -> Url {
        let mut url = self.shared.base_url.clone();
        url.set_path("/oauth/token");
        url
    }

    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }

    pub fn client_secret(&self) -> &str {
        &self.shared.client_secret
    }

    /// A static bearer token that never expires (what `api.access_token` would hold).
    pub fn access_token(&self) -> String {
        self.shared.static_token.clone()
    }

    /// The seeded schedules, in creation order.
    pub fn schedule_uids(&self) -> Vec<Uuid> {
        self.schedules.clone()
    }

    /// The seeded campaign, which holds the seeded schedules.
    pub fn campaign_uid(&self) -> Uuid {
        self.campaign
    }

    /// The seeded call flow: `GET /api/v1/call_flows/{uid}` leads to [`Self::campaign_uid`].
    pub fn call_flow_uid(&self) -> Uuid {
        self.call_flow
    }

    /// Every visible call of `schedule` exactly as `GET /outbound_calls/{uid}` returns it.
    pub fn truth(&self, schedule: Uuid) -> Vec<OutboundCall> {
        let mut state = self.shared.state();
        state.apply_due();
        state.calls_of(schedule)
    }

    /// The simulator's clock now (what its next `Date` header says, to the nanosecond).
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Waits until every late commit made so far is visible; on a manual clock, moves the
    /// clock to that instant instead (the dialer works meanwhile as it would have).
    pub async fn settle(&self) {
        let until = self.shared.state().settled_at();
        let Some(until) = until else { return };
        match &self.shared.clock {
            SimClock::System => {
                let wait = until.since(self.now());
                tokio::time::sleep(wait + Duration::from_millis(5)).await;
            }
            SimClock::Manual(clock) => clock.advance_to(until),
        }
    }

    pub fn set_faults(&self, plan: FaultPlan) {
        *lock(&self.shared.faults) = plan;
    }

    /// Stops or restarts the dialer: the ticks due until now run under the old setting, and
    /// ticks that fall while it is stopped pass without work.
    pub fn set_dialer_running(&self, on: bool) {
        // Under the state's lock, which the ticks need: none is half way when we return.
        let _state = self.shared.state();
        self.shared.dialer_running.store(on, Ordering::SeqCst);
    }

    /// From now on, every list page of `schedule` tells `lie` about one of its calls (`None`:
    /// the truth again).
    pub fn lie_about(&self, schedule: Uuid, lie: Option<Lie>) {
        let mut lies = lock(&self.shared.lies);
        match lie {
            Some(lie) => lies.insert(schedule, lie),
            None => lies.remove(&schedule),
        };
    }

    pub fn break_schedule(&self, schedule: Uuid, bad: Option<BadBody>) {
        let mut broken = lock(&self.shared.broken);
        match bad {
            Some(bad) => broken.insert(schedule, bad),
            None => broken.remove(&schedule),
        };
    }

    /// From now on, the detail endpoint answers the call `uid` as it is now, however it
    /// changes (a replica lagging the list's), until [`Simulator::thaw_details`].
    pub fn freeze_detail(&self, uid: Uuid) {
        let call = self.shared.state().call(&uid).map(|c| c.call.clone());
        if let Some(call) = call {
            lock(&self.shared.frozen_details).insert(uid, call);
        }
    }

    /// Every detail answered as the call is now again.
    pub fn thaw_details(&self) {
        lock(&self.shared.frozen_details).clear();
    }

    /// `n` new calls sharing one `updated_at`: a bulk upload with `force=true`, without HTTP.
    /// None on a schedule the simulator does not have.
    pub fn bulk_create_now(&self, schedule: Uuid, n: usize) -> Vec<Uuid> {
        let mut state = self.shared.state();
        let mut rng = self.shared.rng();
        let first = state.call_count();
        let entries: Vec<_> = (first..first + n)
            .map(|i| seed::contact(&mut *rng, i))
            .collect();
        let now = state.now();
        state
            .create_calls(schedule, entries, true, now, &mut *rng)
            .unwrap_or_default()
    }

    /// Bumps the calls' `updated_at` to now (a concurrent update).
    pub fn touch_calls(&self, uids: &[Uuid]) {
        let mut state = self.shared.state();
        let now = state.now();
        for uid in uids {
            if let Some(mut call) = state.latest(*uid).cloned() {
                call.updated_at = now;
                state.update_call(call, None);
            }
        }
    }

    /// Stamps a call as a node whose clock runs ahead (or behind) would: its `updated_at`
    /// becomes `at`, whatever the service's clock says.
    pub fn stamp_call(&self, uid: Uuid, at: Timestamp) {
        let mut state = self.shared.state();
        if let Some(mut call) = state.latest(uid).cloned() {
            call.updated_at = at;
            state.update_call(call, None);
        }
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }

    /// Holds list requests from the `from`-th (counted from 1, from now on) until the test
    /// lets them through ([`RequestHold`]); replaces the hold set before. For tests: a point
    /// inside a pass chosen by construction.
    pub fn hold_list_requests(&self, from: usize) -> RequestHold {
        let (hold, gate) = RequestHold::new(from, usize::MAX);
        *lock(&self.shared.list_hold) = Some(gate);
        hold
    }

    /// Holds detail requests (`GET /api/v1/outbound_calls/{uid}`) from the `from`-th (counted
    /// from 1, from now on) until the test lets them through, after their token was checked;
    /// replaces the hold set before. With one request in flight at a time, the client's other
    /// requests then wait in its limiter for as long as the test needs.
    pub fn hold_detail_requests(&self, from: usize) -> RequestHold {
        let (hold, gate) = RequestHold::new(from, usize::MAX);
        *lock(&self.shared.detail_hold) = Some(gate);
        hold
    }

    /// The tokens `/oauth/token` issued that the service still accepts at its clock's "now":
    /// 0 once every token issued so far has expired.
    pub fn live_tokens(&self) -> usize {
        self.shared.live_tokens()
    }

    /// Holds the writes (POST, PATCH) numbered `from` to `to` (counted from 1, from now on),
    /// before the service acts on them, until the test lets them through; replaces the hold
    /// set before. A write held under `FaultPlan::delay_writes` is acted on once released even
    /// if its client has gone.
    pub fn hold_writes(&self, from: usize, to: usize) -> RequestHold {
        let (hold, gate) = RequestHold::new(from, to);
        *lock(&self.shared.write_hold) = Some(gate);
        hold
    }

    /// Writes received in full and held by `FaultPlan::delay_writes` so far, acted on or not.
    pub fn delayed_writes(&self) -> usize {
        self.shared.delayed_writes.load(Ordering::Relaxed)
    }

    /// What `callsync simulate` prints: where it listens and how to reach it.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "simulator listening on {}\n  base_url      = \"{}\"\n  access_token  = \"{}\"\n  token_url     = \"{}\"\n  client_id     = \"{}\"\n  client_secret = \"{}\"\n  call_flow     = \"{}\"\n  campaign      = \"{}\"\n  schedules     = [",
            self.base_url(),
            self.base_url(),
            self.access_token(),
            self.token_url(),
            self.client_id(),
            self.client_secret(),
            self.call_flow,
            self.campaign,
        );
        let uids: Vec<String> = self.schedules.iter().map(|u| format!("\"{u}\"")).collect();
        out.push_str(&uids.join(", "));
        out.push(']');
        out
    }

    /// Stops serving and the dialer.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_in_use_is_named_once_and_its_cause_once() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let Err(err) = Simulator::start(addr, SimulatorOptions::default()).await else {
            panic!("the simulator listened on {addr}, which is taken");
        };
        crate::assert_each_cause_once(&err);
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert_eq!(
            crate::error_chain(&err),
            format!("cannot listen on {addr}: {cause}")
        );
    }
}
