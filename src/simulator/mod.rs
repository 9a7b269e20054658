//! A faithful, stateful simulator of the Outbound Call Campaign Service, served on loopback.
//!
//! It stands in for the real service in every test, benchmark and the demo, so it follows
//! the spec rule by rule (`routes.rs`, `query.rs`) and adds knobs to make life hard for a
//! client: timestamp precision, a dialer that works the calls while a client pages
//! (`dialer.rs`), late commits, faults (`faults.rs`), short token lifetimes, summary lists,
//! and child changes that do not bump `updated_at`. Tests read its ground truth with
//! [`Simulator::truth`], and may set its clock ([`ManualClock`]) as well as its seed, so that
//! a failing run replays. It reuses `service`'s models; product code never imports it.

mod clock;
mod dialer;
mod faults;
mod hold;
mod life;
mod query;
mod reply;
mod routes;
mod seed;
mod state;
mod validate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::serve::ListenerExt as _;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use url::Url;
use uuid::Uuid;

use crate::service::{OutboundCall, Timestamp};

pub use clock::{ManualClock, SimClock};
pub use faults::{FaultPlan, RequestRecord};
pub use hold::RequestHold;
pub use state::Precision;

/// Mixed into the seed for the runtime stream (any constant that is not 0 will do).
const RUNTIME_STREAM: u64 = 0x7275_6e74_696d_6521;
/// Mixed into the seed for the dialer's stream.
const DIALER_STREAM: u64 = 0x6469_616c_6572_2121;

/// Every knob; `Default` is a small, well-behaved service on the system clock.

#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    pub precision: Precision,
    /// Everything random — the seeded data, and at runtime new uids, the dialer's choices and
    /// injected faults — follows from it: the same seed replays the same run.
    pub seed: u64,
    /// Where its "now" comes from; with a [`ManualClock`] and a seed, a run replays
    /// byte for byte.
    pub clock: SimClock,
    /// Schedules created (enabled) at start, each with `calls_per_schedule` calls.
    pub schedules: usize,
    pub calls_per_schedule: usize,
    /// What the seeded calls carry (children per call).
    pub shape: CallShape,
    /// List items' attempts omit `call_outcomes` and `call_attempts_variables`.
    pub summary_list: bool,
    /// Lifetime of tokens from the OAuth endpoint.
    pub token_lifetime: Duration,
    pub dialer: Option<DialerOptions>,
    /// A change becomes visible only this long after the instant it is stamped with.
    pub late_commit: Option<Duration>,
    pub faults: FaultPlan,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        SimulatorOptions {
            precision: Precision::Micros,
            seed: 1,
            clock: SimClock::System,
            schedules: 1,
            calls_per_schedule: 100,
            shape: CallShape::Varied,
            summary_list: false,
            token_lifetime: Duration::from_secs(3600),
            dialer: None,
            late_commit: None,
            faults: FaultPlan::default(),
        }
    }
}

/// What the seeded calls carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallShape {
    /// Two custom parameters; about a third of the calls have an attempt history (some
    /// attempts with an outcome and a variable): about 6 rows a call on average.
    #[default]
    Varied,
    /// Every call worked twice: 4 custom parameters, 2 attempts, each with 2 outcomes and 3
    /// variables, and 1 notification — 18 rows with the call, as calls with retries carry
    /// them in a calling campaign (the shape BENCHMARKS.md measures beside `Varied`).
    Eighteen,
}

/// The dialer (`dialer.rs`): every `tick` it finishes the attempts whose end has come, lets new
/// calls arrive now and then, and starts attempts on calls whose time has come.
///
/// Spans (ringing, talk, retry intervals, arrivals) are nominal seconds that last
/// `time_scale` seconds of the simulator's clock each (real seconds on the system clock). `Default` runs 1,000 times faster than real time
/// (`time_scale` 0.001: a 300 s retry interval passes in 0.3 s) and lets no new calls in, so
/// that tests and the demo see whole call histories in seconds and keep a known number of
/// calls; `callsync simulate --dialer` runs [`DialerOptions::endless`].
#[derive(Debug, Clone)]
pub struct DialerOptions {
    /// Ticks fall every `tick` of the simulator's clock (at least 1 ms).
    pub tick: Duration,
    /// At most this many attempts start per tick (the lines of the call centre).
    pub calls_per_tick: usize,
    /// Clock seconds per nominal second; 1.0 is real time.
    pub time_scale: f64,
    /// A batch of 1 to 10 new calls arrives this often (nominal time) on a random enabled
    /// schedule; `None`: no new calls.
    pub new_calls_every: Option<Duration>,
    /// Also make child-only changes (an outcome, a delivered notification) that do NOT bump
    /// the call's `updated_at`, as the service may.
    pub child_changes_without_bump: bool,
}

impl Default for DialerOptions {
    fn default() -> Self {
        DialerOptions {
            tick: Duration::from_millis(50),
            calls_per_tick: 5,
            time_scale: 0.001,
            new_calls_every: None,
            child_changes_without_bump: false,
        }
    }
}

impl DialerOptions {
    /// A dialer that never runs out of work, for `callsync simulate --dialer`: 1 to 10 new
    /// calls every 5 minutes besides the retries, at `time_scale` (1 is real time).
    pub fn endless(time_scale: f64) -> Self {
        DialerOptions {
            time_scale,
            new_calls_every: Some(Duration::from_secs(300)),
            ..DialerOptions::default()
        }
    }
}

/// Broken list responses for one schedule, for error-handling tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadBody {
    /// `200` with a body that is not JSON.
    InvalidJson,
    /// `200` with a call whose `attempts_remaining` is a string.
    WrongTypes,
    /// `200` with a call lacking `updated_at`.
    MissingRequiredField,
    /// `200` with an HTML error page (a misconfigured proxy).
    HtmlErrorPage,
}

impl BadBody {
    fn respond(self) -> Response {
        let json = |body: String| {
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        };
        match self {
            BadBody::InvalidJson => json("{\"data\": [{\"uid\": ".into()),
            BadBody::WrongTypes => json(
                r#"{"data":[{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","attempts_remaining":"four","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}],"pagination":null}"#.into(),
            ),
            BadBody::MissingRequiredField => json(
                r#"{"data":[{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","created_at":"2026-01-01T00:00:00Z"}],"pagination":null}"#.into(),
            ),
            BadBody::HtmlErrorPage => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/html")],
                "<html><body><h1>Service temporarily unavailable</h1></body></html>",
            )
                .into_response(),
        }
    }
}

/// What handlers share.
pub(crate) struct Shared {
    state: Mutex<state::State>,
    base_url: Url,
    client_id: String,
    client_secret: String,
    static_token: String,
    summary_list: bool,
    token_lifetime: Duration,
    late_commit: Option<Duration>,
    clock: SimClock,
    /// Issued tokens and when they expire.
    tokens: Mutex<HashMap<String, Timestamp>>,
    faults: Mutex<FaultPlan>,
    /// The quota's token bucket: requests left and when it was last filled.
    quota: Mutex<(f64, Timestamp)>,
    fault_counter: AtomicUsize,
    broken: Mutex<HashMap<Uuid, BadBody>>,
    requests: Mutex<Vec<RequestRecord>>,
    /// Writes held by `FaultPlan::delay_writes`, counted once their bodies are in: the request
    /// log has a request only once it is answered, and its client may be gone before that.
    delayed_writes: AtomicUsize,
    /// A test's holds on list requests and on writes (`hold.rs`), if it set them.
    list_hold: Mutex<Option<Arc<hold::Gate>>>,
    write_hold: Mutex<Option<Arc<hold::Gate>>>,
    rng: Mutex<StdRng>,
    /// Locked only with `state` held, after it.
    dialer: Option<Mutex<dialer::Dialer>>,
    dialer_running: AtomicBool,
}

/// Locks a mutex even if a panicking test thread poisoned it: the data stays usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// The service's truth, with the dialer's work up to the clock's "now" done first: every
    /// reader of the state sees what the dialer did by then, whenever its task last ran.
    fn state(&self) -> MutexGuard<'_, state::State> {
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

    fn rng(&self) -> MutexGuard<'_, StdRng> {
        lock(&self.rng)
    }

    fn faults(&self) -> FaultPlan {
        lock(&self.faults).clone()
    }

    fn next_fault_index(&self) -> usize {
        self.fault_counter.fetch_add(1, Ordering::Relaxed)
    }

    fn broken(&self, schedule: Uuid) -> Option<BadBody> {
        lock(&self.broken).get(&schedule).copied()
    }

    fn log_request(&self, record: RequestRecord) {
        lock(&self.requests).push(record);
    }

    fn issue_token(&self) -> (String, Duration) {
        let token = format!("sim-{}", Uuid::new_v4().simple());
        let expiry = self.clock.now().saturating_add(self.token_lifetime);
        lock(&self.tokens).insert(token.clone(), expiry);
        (token, self.token_lifetime)
    }

    /// `Ok` when the header carries the static token or an unexpired issued one.
    fn check_bearer(&self, header: Option<&HeaderValue>) -> Result<(), AuthProblem> {
        let value = header
            .map(|h| h.to_str().map_err(|_| AuthProblem::NotBearer))
            .transpose()?
            .ok_or(AuthProblem::Missing)?;
        let token = credentials(value, "Bearer").ok_or(AuthProblem::NotBearer)?;
        if token == self.static_token {
            return Ok(());
        }
        match lock(&self.tokens).get(token) {
            Some(expiry) if self.clock.now() < *expiry => Ok(()),
            Some(_) => Err(AuthProblem::Expired),
            None => Err(AuthProblem::Unknown),
        }
    }
}

/// The credentials of an `Authorization` header value of `scheme`: the scheme name is
/// case-insensitive and followed by one or more spaces (RFC 7235, section 2.1).
fn credentials<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (name, rest) = value.split_once(' ')?;
    let credentials = rest.trim();
    (name.eq_ignore_ascii_case(scheme) && !credentials.is_empty()).then_some(credentials)
}

/// Why a request to `/api/v1` is not authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthProblem {
    Missing,
    NotBearer,
    Expired,
    Unknown,
}

impl AuthProblem {
    pub(crate) fn detail(self) -> &'static str {
        match self {
            AuthProblem::Missing => "missing Authorization header",
            AuthProblem::NotBearer => "the Authorization header must be `Bearer <token>`",
            AuthProblem::Expired => "the access token has expired",
            AuthProblem::Unknown => "the access token is not valid",
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750, section 3): without bearer credentials no
    /// error code; with a token we do not accept, `invalid_token` and the reason.
    pub(crate) fn challenge(self) -> String {
        const REALM: &str = "Bearer realm=\"callsync-simulator\"";
        match self {
            AuthProblem::Missing | AuthProblem::NotBearer => REALM.to_owned(),
            AuthProblem::Expired | AuthProblem::Unknown => format!(
                "{REALM}, error=\"invalid_token\", error_description=\"{}\"",
                self.detail()
            ),
        }
    }
}

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
#[error("cannot listen on {addr}: {source}")]
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
            clock: options.clock.clone(),
            tokens: Mutex::new(HashMap::new()),
            faults: Mutex::new(options.faults.clone()),
            quota: Mutex::new((
                f64::from(options.faults.quota_per_second),
                options.clock.now(),
            )),
            fault_counter: AtomicUsize::new(0),
            broken: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            delayed_writes: AtomicUsize::new(0),
            list_hold: Mutex::new(None),
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
            tasks.push(tokio::spawn(dialer::keep_up(
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

    pub fn break_schedule(&self, schedule: Uuid, bad: Option<BadBody>) {
        let mut broken = lock(&self.shared.broken);
        match bad {
            Some(bad) => broken.insert(schedule, bad),
            None => broken.remove(&schedule),
        };
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
