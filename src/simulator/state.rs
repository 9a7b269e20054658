//! The service's truth: campaigns, schedules, calls with their children, and the clock.
//!
//! Calls are stored as the detail endpoint returns them. Each schedule keeps its calls'
//! `(updated_at, uid)` keys in a sorted vector, so a list request with `updated_after` is a
//! binary search, whatever the number of calls. Late commits wait in `pending` until their
//! time comes; until then the list and detail endpoints show the previous version. Each
//! schedule also keeps the dialer's queue of pending calls, by when they may be dialled.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::Rng;
use uuid::Uuid;

use super::clock::SimClock;
use super::life;
use crate::service::{CallFlow, Campaign, NewCall, OutboundCall, Schedule, Timestamp};

/// The precision of the service's timestamps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Precision {
    Seconds,
    Millis,
    #[default]
    Micros,
}

impl Precision {
    pub fn unit_nanos(self) -> i128 {
        match self {
            Precision::Seconds => 1_000_000_000,
            Precision::Millis => 1_000_000,
            Precision::Micros => 1_000,
        }
    }
}

pub struct ScheduleState {
    pub schedule: Schedule,
    /// `(updated_at, uid)` of the visible version of every call, sorted.
    index: Vec<(Timestamp, Uuid)>,
    /// The dialer's queue: `(when it may be dialled, uid)` of every pending call that is not
    /// being dialled (its `created_at`, then its `cooldown_until`), earliest first.
    queue: BTreeSet<(Timestamp, Uuid)>,
}

/// Why calls cannot be created on a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoSuchSchedule,
    /// Enabled, and `force=true` was not sent (spec, rule of call creation).
    Enabled,
}

pub struct CallState {
    pub call: OutboundCall,
    pub schedule: Uuid,
    /// How the call was created (`api` or `quick_call_api`), for the `source` filter.
    pub source: &'static str,
}

/// A change stamped in the past that is not visible yet (a late commit).
struct Pending {
    visible_at: Timestamp,
    call: OutboundCall,
}

#[derive(Default)]
pub struct State {
    pub precision: Precision,
    pub clock: SimClock,
    pub campaigns: HashMap<Uuid, Campaign>,
    pub call_flows: HashMap<Uuid, CallFlow>,
    pub schedules: HashMap<Uuid, ScheduleState>,
    /// Schedule uids in creation order.
    pub schedule_order: Vec<Uuid>,
    /// Boxed: a call is large, and a million of them are moved into the map when seeding.
    calls: HashMap<Uuid, Box<CallState>>,
    /// Every call uid, for picking one at random.
    pub all_calls: Vec<Uuid>,
    pending: Vec<Pending>,
    /// Custom parameter name → the numeric id the single-create response uses.
    pub parameter_ids: BTreeMap<String, u32>,
}

impl State {
    pub fn new(precision: Precision, clock: SimClock) -> Self {
        State {
            precision,
            clock,
            ..State::default()
        }
    }

    /// The service's clock, at its precision.
    pub fn now(&self) -> Timestamp {
        self.clock.now().truncated(self.precision.unit_nanos())
    }

    pub fn add_schedule(&mut self, schedule: Schedule) {
        self.schedule_order.push(schedule.uid);
        self.schedules.insert(
            schedule.uid,
            ScheduleState {
                schedule,
                index: Vec::new(),
                queue: BTreeSet::new(),
            },
        );
    }

    /// The schedule's retry intervals, when calls may be created on it: it exists, and it is
    /// not enabled unless `force`.
    pub fn creatable(&self, schedule: Uuid, force: bool) -> Result<Vec<i64>, Refusal> {
        let s = self
            .schedules
            .get(&schedule)
            .ok_or(Refusal::NoSuchSchedule)?;
        if s.schedule.is_enabled && !force {
            return Err(Refusal::Enabled);
        }
        Ok(s.schedule.retry_intervals.clone())
    }

    /// Creates calls as the create endpoints do: pending and in queue, all stamped with `now`
    /// (one request, one `updated_at`), in order. The endpoints, `bulk_create_now` and the
    /// dialer's arrivals all come here, so a new call is the same wherever it comes from.
    pub fn create_calls(
        &mut self,
        schedule: Uuid,
        entries: Vec<NewCall>,
        force: bool,
        now: Timestamp,
        rng: &mut impl Rng,
    ) -> Result<Vec<Uuid>, Refusal> {
        let intervals = self.creatable(schedule, force)?;
        Ok(entries
            .into_iter()
            .map(|entry| {
                let call = life::new_call(life::uid(rng), entry, &intervals, now);
                let uid = call.uid;
                self.insert_call(schedule, call, "api");
                uid
            })
            .collect())
    }

    /// A call as the detail endpoint shows it now, with its schedule and source.
    pub fn call(&self, uid: &Uuid) -> Option<&CallState> {
        self.calls.get(uid).map(|c| &**c)
    }

    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// Adds a new call (visible at once); a pending one joins the dialer's queue.
    pub fn insert_call(&mut self, schedule: Uuid, call: OutboundCall, source: &'static str) {
        if let Some(s) = self.schedules.get_mut(&schedule) {
            index_insert(&mut s.index, (call.updated_at, call.uid));
            if let Some(key) = queue_key(&call) {
                s.queue.insert(key);
            }
        }
        self.all_calls.push(call.uid);
        self.calls.insert(
            call.uid,
            Box::new(CallState {
                call,
                schedule,
                source,
            }),
        );
    }

    /// Adds the generator's `n` calls of one schedule: the same result as
    /// [`Self::insert_call`] one by one, but faster for a million calls. Storing a call is
    /// mostly cache misses in a big table, so a second thread stores the calls while this one
    /// makes the next ones; it allocates nothing (everything is reserved first), so it does
    /// not grow a malloc arena of its own, which would cost a system call per page. The index
    /// and the queue are sorted once at the end and built in bulk.
    pub fn insert_generated(
        &mut self,
        schedule: Uuid,
        n: usize,
        calls: impl Iterator<Item = Box<CallState>>,
    ) {
        const BATCH: usize = 4096;
        let Some(s) = self.schedules.get_mut(&schedule) else {
            return;
        };
        let mut keys = std::mem::take(&mut s.index);
        let mut queued = Vec::with_capacity(n);
        keys.reserve(n);
        self.all_calls.reserve(n);
        self.calls.reserve(n);
        let (map, all) = (&mut self.calls, &mut self.all_calls);
        let (mut keys, queued) = std::thread::scope(|scope| {
            let (batches, received) = std::sync::mpsc::sync_channel::<Vec<Box<CallState>>>(8);
            let store = scope.spawn(move || {
                for batch in received {
                    for call in batch {
                        let uid = call.call.uid;
                        keys.push((call.call.updated_at, uid));
                        queued.extend(queue_key(&call.call));
                        all.push(uid);
                        map.insert(uid, call);
                    }
                }
                (keys, queued)
            });
            let mut batch = Vec::with_capacity(BATCH);
            for call in calls {
                batch.push(call);
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    // Only fails if the storing thread is gone, i.e. panicked: see below.
                    if batches.send(full).is_err() {
                        break;
                    }
                }
            }
            let _ = batches.send(batch);
            drop(batches);
            // A panic here is a bug in this function: let it surface as it would without
            // the thread.
            store
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e))
        });
        keys.sort_unstable();
        let mut queued = queued;
        queued.sort_unstable();
        let Some(s) = self.schedules.get_mut(&schedule) else {
            return;
        };
        s.index = keys;
        if s.queue.is_empty() {
            s.queue = queued.into_iter().collect();
        } else {
            s.queue.extend(queued);
        }
    }

    /// Gives calls of `schedule` a new `updated_at` (`(uid, instant)` pairs: the seed's tie
    /// groups, [`super::seed::tie_stamps`]) and sorts its index once.
    pub fn restamp(&mut self, schedule: Uuid, stamps: Vec<(Uuid, Timestamp)>) {
        let Some(s) = self.schedules.get_mut(&schedule) else {
            return;
        };
        for &(uid, at) in &stamps {
            if let Some(state) = self.calls.get_mut(&uid) {
                state.call.updated_at = at;
            }
        }
        // The index holds the visible version of every call: read each key again from it.
        for key in &mut s.index {
            if let Some(state) = self.calls.get(&key.1) {
                key.0 = state.call.updated_at;
            }
        }
        s.index.sort_unstable();
    }

    /// Takes up to `n` calls out of the dialer's queue whose time has come, from enabled
    /// schedules whose window (`starts_at` to `ends_at`) holds `now`, a schedule at a time in
    /// turn, each schedule's earliest first. The dialer puts them back with [`Self::requeue`]
    /// if they stay pending.
    pub fn take_due(&mut self, now: Timestamp, n: usize) -> Vec<Uuid> {
        let open: Vec<Uuid> = self
            .schedule_order
            .iter()
            .filter(|uid| {
                self.schedules.get(uid).is_some_and(|s| {
                    let sc = &s.schedule;
                    sc.is_enabled && sc.starts_at <= now && now <= sc.ends_at
                })
            })
            .copied()
            .collect();
        let mut taken = Vec::new();
        while taken.len() < n {
            let before = taken.len();
            for uid in &open {
                let Some(s) = self.schedules.get_mut(uid) else {
                    continue;
                };
                if taken.len() == n {
                    break;
                }
                if s.queue.first().is_some_and(|(due, _)| *due <= now)
                    && let Some((_, call)) = s.queue.pop_first()
                {
                    taken.push(call);
                }
            }
            if taken.len() == before {
                break;
            }
        }
        taken
    }

    /// Puts a call the dialer took back in its schedule's queue, if it is still pending.
    pub fn requeue(&mut self, call: &OutboundCall) {
        let Some(schedule) = self.call(&call.uid).map(|c| c.schedule) else {
            return;
        };
        if let (Some(s), Some(key)) = (self.schedules.get_mut(&schedule), queue_key(call)) {
            s.queue.insert(key);
        }
    }

    /// Replaces a call's visible version now, or at `visible_at` when set (a late commit).
    pub fn update_call(&mut self, call: OutboundCall, visible_at: Option<Timestamp>) {
        match visible_at {
            Some(visible_at) => self.pending.push(Pending { visible_at, call }),
            None => self.make_visible(call),
        }
    }

    /// The newest version of a call, pending or visible: what the next change builds on.
    pub fn latest(&self, uid: Uuid) -> Option<&OutboundCall> {
        self.pending
            .iter()
            .rev()
            .find(|p| p.call.uid == uid)
            .map(|p| &p.call)
            .or_else(|| self.call(&uid).map(|c| &c.call))
    }

    /// Makes late commits whose time has come visible.
    pub fn apply_due(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let now = self.clock.now();
        let (due, waiting): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.visible_at <= now);
        self.pending = waiting;
        for p in due {
            self.make_visible(p.call);
        }
    }

    /// The time at which every pending change will be visible.
    pub fn settled_at(&self) -> Option<Timestamp> {
        self.pending.iter().map(|p| p.visible_at).max()
    }

    fn make_visible(&mut self, call: OutboundCall) {
        let Some(state) = self.calls.get_mut(&call.uid) else {
            return;
        };
        let old_key = (state.call.updated_at, state.call.uid);
        let new_key = (call.updated_at, call.uid);
        let schedule = state.schedule;
        state.call = call;
        if old_key != new_key
            && let Some(s) = self.schedules.get_mut(&schedule)
        {
            if let Ok(at) = s.index.binary_search(&old_key) {
                s.index.remove(at);
            }
            index_insert(&mut s.index, new_key);
        }
    }

    /// Uids of the schedule's calls with `updated_at >= after`, in (updated_at, uid) order.
    pub fn keys_from(&self, schedule: Uuid, after: Timestamp) -> &[(Timestamp, Uuid)] {
        match self.schedules.get(&schedule) {
            Some(s) => {
                let start = s.index.partition_point(|(t, _)| *t < after);
                &s.index[start..]
            }
            None => &[],
        }
    }

    /// Every call of the schedule, as the detail endpoint shows it, in index order.
    pub fn calls_of(&self, schedule: Uuid) -> Vec<OutboundCall> {
        self.keys_from(schedule, Timestamp::EPOCH)
            .iter()
            .filter_map(|(_, uid)| self.call(uid).map(|c| c.call.clone()))
            .collect()
    }

    /// The numeric id of a custom parameter name, assigned on first use.
    pub fn parameter_id(&mut self, name: &str) -> u32 {
        let next = self.parameter_ids.len() as u32 + 1001;
        *self.parameter_ids.entry(name.to_owned()).or_insert(next)
    }
}

/// A pending call's place in the dialer's queue: it may be dialled once created, and after an
/// unanswered attempt once its cooldown is over.
fn queue_key(call: &OutboundCall) -> Option<(Timestamp, Uuid)> {
    (call.status == "pending").then(|| (call.cooldown_until.unwrap_or(call.created_at), call.uid))
}

fn index_insert(index: &mut Vec<(Timestamp, Uuid)>, key: (Timestamp, Uuid)) {
    // New keys are usually the newest: appending is the common, cheap case.
    if index.last().is_none_or(|last| *last < key) {
        index.push(key);
    } else if let Err(at) = index.binary_search(&key) {
        index.insert(at, key);
    }
}
