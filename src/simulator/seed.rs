//! The data generator: campaigns, schedules and calls with realistic contacts, custom
//! parameters and attempt histories, deterministic for a seed (see [`populate`]).
//!
//! Fast enough for benchmarks (a million calls in seconds): calls are built directly as
//! models, spread over the past week with occasional ties, stored as they are made, and
//! indexed once. With a tie group size, runs of consecutive calls then share one `updated_at`
//! ([`tie_stamps`]).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, RngExt, SeedableRng};
use serde_json::Map;
use uuid::Uuid;

use super::life::{self, AttemptPlan, Pace};
use super::options::CallShape;
use super::state::{CallState, State};
use crate::service::{
    Attempt, AttemptVariable, CallFlow, Campaign, NewCall, Notification, OutboundCall, Outcome,
    Schedule, Timestamp,
};

const FIRST: [&str; 12] = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis",
    "Radia", "Tim",
];
const LAST: [&str; 12] = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Knuth",
    "Allen",
    "Thompson",
    "Hamilton",
    "Ritchie",
    "Perlman",
    "Berners-Lee",
];
const PLANS: [&str; 3] = ["basic", "plus", "gold"];
const REGIONS: [&str; 4] = ["north", "south", "east", "west"];

/// What the generator made: the uids a user of the simulator needs, and its credentials.
pub struct Seeded {
    pub campaign: Uuid,
    pub call_flow: Uuid,
    /// In creation order.
    pub schedules: Vec<Uuid>,
    pub client_secret: String,
    pub static_token: String,
}

/// A new campaign with one call flow and `schedules` schedules of `calls` calls each.
/// Schedules are created enabled, so the dialer works them. With `tie_group` > 0, each run
/// of that many consecutive calls of a schedule, in list order, shares one `updated_at`
/// ([`tie_stamps`]).
///
/// Deterministic: everything comes from one RNG stream seeded with `seed`, uids included, and
/// every timestamp is the start instant (the simulator's clock) truncated to whole seconds minus
/// an offset drawn from that stream. Two runs with one seed therefore differ only in their
/// timestamps, all shifted by the same whole number of seconds (none at all within the same
/// second, so none with a manual clock started at the same instant).
pub fn populate(
    state: &mut State,
    seed: u64,
    schedules: usize,
    calls: usize,
    shape: CallShape,
    tie_group: usize,
) -> Seeded {
    let mut rng = StdRng::seed_from_u64(seed);
    let client_secret = format!("secret-{}", rng.random::<u64>());
    let static_token = format!("static-{}", rng.random::<u64>());
    let now = state.clock.now().truncated(1_000_000_000);
    let week_ago = now.saturating_sub(Duration::from_secs(7 * 86_400));
    let campaign = campaign(&mut rng, now);
    let flow = life::uid(&mut rng);
    let mut flow_extra = Map::new();
    flow_extra.insert("uid".into(), flow.to_string().into());
    flow_extra.insert("name".into(), "Appointment reminders".into());
    state.call_flows.insert(
        flow,
        CallFlow {
            campaign_uid: campaign.uid,
            extra: flow_extra,
        },
    );
    let campaign_uid = campaign.uid;
    state.campaigns.insert(campaign_uid, campaign);
    let schedules = (0..schedules)
        .map(|i| {
            let schedule = schedule(&mut rng, i, week_ago, true);
            let uid = schedule.uid;
            state.add_schedule(schedule);
            seed_calls(state, &mut rng, uid, calls, (week_ago, now), shape);
            if tie_group > 0 {
                let stamps = tie_stamps(state.keys_from(uid, Timestamp::EPOCH), tie_group, now);
                state.restamp(uid, stamps);
            }
            uid
        })
        .collect();
    Seeded {
        campaign: campaign_uid,
        call_flow: flow,
        schedules,
        client_secret,
        static_token,
    }
}

pub fn campaign(rng: &mut impl Rng, now: Timestamp) -> Campaign {
    Campaign {
        uid: life::uid(rng),
        name: "Spring outreach".into(),
        is_enabled: false,
        kind: "scheduled_call".into(),
        direction: "outbound".into(),
        created_at: now,
        updated_at: now,
        extra: Map::new(),
    }
}

pub fn schedule(rng: &mut impl Rng, i: usize, starts: Timestamp, enabled: bool) -> Schedule {
    Schedule {
        uid: life::uid(rng),
        name: format!("Schedule {}", i + 1),
        starts_at: starts,
        ends_at: starts.saturating_add(Duration::from_secs(30 * 86_400)),
        retry_type: "consistent".into(),
        retry_intervals: vec![300, 900, 3600],
        is_enabled: enabled,
        is_auto: false,
        created_at: starts,
        updated_at: starts,
        extra: Map::new(),
    }
}

/// A plausible contact for call `n`.
pub fn contact(rng: &mut impl Rng, n: usize) -> NewCall {
    let first = *FIRST.choose(rng).unwrap_or(&"Ada");
    let last = *LAST.choose(rng).unwrap_or(&"Lovelace");
    let mut custom_parameters = std::collections::BTreeMap::new();
    custom_parameters.insert(
        "plan".into(),
        PLANS.choose(rng).unwrap_or(&"basic").to_string(),
    );
    custom_parameters.insert(
        "region".into(),
        REGIONS.choose(rng).unwrap_or(&"north").to_string(),
    );
    NewCall {
        phone_number: format!("+1555{:07}", n % 10_000_000),
        full_name: Some(format!("{first} {last}")),
        first_name: Some(first.into()),
        last_name: Some(last.into()),
        phonetic_full_name: Some(String::new()),
        phonetic_first_name: Some(String::new()),
        phonetic_last_name: Some(String::new()),
        email: Some(format!("{}.{}{n}@example.com", Lower(first), Lower(last))),
        custom_parameters,
        external_id: Some(format!("crm-{n}")),
    }
}

/// Writes a name in lower case without building a lowercase copy first (one allocation less
/// per seeded call).
struct Lower<'a>(&'a str);

impl std::fmt::Display for Lower<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        self.0
            .chars()
            .flat_map(char::to_lowercase)
            .try_for_each(|c| f.write_char(c))
    }
}

fn seed_calls(
    state: &mut State,
    rng: &mut StdRng,
    schedule: Uuid,
    n: usize,
    (from, to): (Timestamp, Timestamp),
    shape: CallShape,
) {
    let unit = state.precision.unit_nanos();
    let pace = Pace {
        scale: 1.0,
        unit_nanos: unit,
    };
    let intervals = state
        .schedules
        .get(&schedule)
        .map(|s| s.schedule.retry_intervals.clone())
        .unwrap_or_default();
    let span = to.unix_nanos() - from.unix_nanos();
    // Made on this thread only, on purpose: making calls is mostly allocating and touching
    // fresh memory, and glibc's arena for another thread grows by one mprotect call per page,
    // each blocking this thread's page faults; making them on two threads was slower than on
    // one. (Storing them, which allocates nothing, happens beside: `insert_generated`.)
    let calls = (0..n).map(|i| {
        let offset = rng.random_range(0..span.max(1));
        let at = Timestamp::from_unix_nanos(from.unix_nanos() + offset)
            .unwrap_or(from)
            .truncated(unit);
        let uid = life::uid(rng);
        let mut call = life::new_call(uid, contact(rng, i), &intervals, at);
        call.is_test_call = Some(rng.random_bool(0.02));
        match shape {
            // About a third of the calls have been worked already; the rest wait in the queue.
            CallShape::Varied => {
                if rng.random_bool(0.35) {
                    history(&mut call, pace, to, rng);
                }
            }
            CallShape::Eighteen => eighteen_rows(&mut call, pace, to, rng),
        }
        let source = if rng.random_bool(0.1) {
            "quick_call_api"
        } else {
            "api"
        };
        Box::new(CallState {
            call,
            schedule,
            source,
        })
    });
    state.insert_generated(schedule, n, calls);
}

/// The `updated_at` of each call when every run of `size` consecutive calls in list order
/// (`keys`: `(updated_at, uid)`, sorted) is stamped at once, as a service that stamps a bulk
/// upload or a batch job would: one instant at a whole second, the run's latest `updated_at`
/// rounded up, so that no call's `updated_at` falls before its own or its children's times.
/// A run's stamp is at least a second after the previous run's, so that runs do not merge
/// into one group, and never after `clock` (a whole second: the service's "now" when seeded),
/// since nothing is stamped in the future — only calls denser than a run a second near the
/// clock would make two runs share its second. The runs keep their order; within a run,
/// the list orders calls by uid.
pub fn tie_stamps(
    keys: &[(Timestamp, Uuid)],
    size: usize,
    clock: Timestamp,
) -> Vec<(Uuid, Timestamp)> {
    const SECOND: Duration = Duration::from_secs(1);
    let mut previous: Option<Timestamp> = None;
    let mut stamps = Vec::with_capacity(keys.len());
    for run in keys.chunks(size.max(1)) {
        let latest = run.iter().map(|(at, _)| *at).max().unwrap_or(clock);
        let second = latest.truncated(1_000_000_000);
        let rounded_up = if second == latest {
            latest
        } else {
            second.saturating_add(SECOND)
        };
        let apart = previous.map_or(rounded_up, |p| rounded_up.max(p.saturating_add(SECOND)));
        let stamp = apart.min(clock).max(latest);
        previous = Some(stamp);
        stamps.extend(run.iter().map(|(_, uid)| (*uid, stamp)));
    }
    stamps
}

/// The attempts a call had before `until`, by the dialer's rules: the first minutes to an hour
/// after creation, each retry some minutes after its cooldown ended, until the call completes
/// or the next attempt would not have ended yet. Each is stamped when it ended.
fn history(call: &mut OutboundCall, pace: Pace, until: Timestamp, rng: &mut impl Rng) {
    let mut start = pace.after(call.created_at, rng.random_range(60..3600));
    while call.status == "pending" {
        let plan = AttemptPlan::draw(rng);
        let ended = pace.after(start, plan.length_secs());
        if ended > until {
            return;
        }
        life::record_attempt(call, &plan, start, pace, ended, rng);
        call.updated_at = ended;
        let Some(cooldown) = call.cooldown_until else {
            return;
        };
        start = pace.after(cooldown, rng.random_range(0..600));
    }
}

/// Makes `call` an 18-row call ([`CallShape::Eighteen`]): 2 more custom parameters (4), two
/// attempts a few minutes apart after its creation, the first unanswered and the second
/// answered, each with 2 outcomes and 3 variables, and one delivered notification, all
/// before `until`. Every child uid random (v4), as the service's.
fn eighteen_rows(call: &mut OutboundCall, pace: Pace, until: Timestamp, rng: &mut impl Rng) {
    // Both attempts end within 2 hours of the creation: a call created later than that
    // before `until` is moved back, so no change is stamped after the service's clock.
    let latest = until.saturating_sub(Duration::from_secs(2 * 3600));
    if call.created_at > latest {
        call.created_at = latest;
        call.updated_at = latest;
    }
    let params = &mut call.outbound_call_info.custom_parameters;
    params.insert(
        "segment".into(),
        format!("s{}", rng.random_range(0..50)).into(),
    );
    params.insert(
        "source".into(),
        ["crm", "web", "import"]
            .choose(rng)
            .unwrap_or(&"crm")
            .to_string()
            .into(),
    );
    let mut at = pace.after(call.created_at, rng.random_range(60..3600));
    let mut attempts = Vec::with_capacity(2);
    for (i, status) in ["no_answer", "completed"].into_iter().enumerate() {
        let answered = i == 1;
        let talk = if answered {
            rng.random_range(20..300)
        } else {
            0
        };
        let ended = pace.after(at, 30 + talk);
        let outcomes = ["no_answer", "voicemail", "interested", "callback_requested"]
            [i * 2..i * 2 + 2]
            .iter()
            .map(|name| Outcome {
                uid: super::life::uid(rng),
                name: (*name).into(),
                created_at: Some(ended),
                extra: Map::new(),
            })
            .collect();
        let variables = ["preferred_time", "language", "consent"]
            .iter()
            .map(|name| AttemptVariable {
                uid: super::life::uid(rng),
                name: (*name).into(),
                value: Some(format!("{name}-{}", rng.random_range(0..5)).into()),
                status: Some("confirmed".into()),
                created_at: Some(ended),
                extra: Map::new(),
            })
            .collect();
        attempts.push(Attempt {
            uid: super::life::uid(rng),
            status: status.into(),
            started_at: Some(at),
            answered_at: answered.then(|| pace.after(at, 30)),
            ended_at: Some(ended),
            duration: Some(talk as i64),
            created_at: Some(at),
            updated_at: Some(ended),
            error_details: None,
            transfer_started_at: None,
            transfer_answered_at: None,
            transfer_destination: None,
            call_outcomes: Some(outcomes),
            call_attempts_variables: Some(variables),
            extra: Map::new(),
        });
        call.updated_at = ended;
        at = pace.after(ended, rng.random_range(300..900));
    }
    call.outbound_call_attempts = Some(attempts);
    call.call_notifications = Some(vec![Notification {
        uid: super::life::uid(rng),
        status: Some("delivered".into()),
        message_count: Some(1),
        delivered_at: Some(call.updated_at),
        extra: Map::new(),
    }]);
    call.status = "completed".into();
    call.progress = Some("completed".into());
    call.attempts_remaining = Some(0);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::simulator::clock::ManualClock;
    use crate::simulator::state::Precision;

    /// A clock that does not start on a whole second, as the system clock rarely does.
    fn clock() -> Timestamp {
        Timestamp::parse("2026-11-20T10:00:00.123456Z").unwrap()
    }

    /// The list keys of the one schedule of `calls` calls seeded with `seed` and `tie_group`.
    fn seeded(shape: CallShape, calls: usize, tie_group: usize) -> (State, Uuid) {
        let mut state = State::new(Precision::Micros, ManualClock::new(clock()).into());
        let seeded = populate(&mut state, 7, 1, calls, shape, tie_group);
        (state, seeded.schedules[0])
    }

    fn keys(state: &State, schedule: Uuid) -> Vec<(Timestamp, Uuid)> {
        state.keys_from(schedule, Timestamp::EPOCH).to_vec()
    }

    /// Every instant a call carries: its own and its children's.
    fn times_of(call: &OutboundCall) -> Vec<Timestamp> {
        let mut times = vec![call.created_at];
        for attempt in call.outbound_call_attempts.iter().flatten() {
            times.extend(
                [
                    attempt.started_at,
                    attempt.answered_at,
                    attempt.ended_at,
                    attempt.created_at,
                    attempt.updated_at,
                ]
                .into_iter()
                .flatten(),
            );
            times.extend(
                attempt
                    .call_outcomes
                    .iter()
                    .flatten()
                    .filter_map(|o| o.created_at),
            );
            times.extend(
                attempt
                    .call_attempts_variables
                    .iter()
                    .flatten()
                    .filter_map(|v| v.created_at),
            );
        }
        times.extend(
            call.call_notifications
                .iter()
                .flatten()
                .filter_map(|n| n.delivered_at),
        );
        times
    }

    #[test]
    fn tie_groups_are_runs_of_the_list_of_exactly_their_size_at_whole_seconds() {
        for shape in [CallShape::Eighteen, CallShape::Varied] {
            let (spread, schedule) = seeded(shape, 1000, 0);
            let (tied, tied_schedule) = seeded(shape, 1000, 300);
            let before = keys(&spread, schedule);
            let after = keys(&tied, tied_schedule);
            // Without ties the seeded instants are all different: the groups are the option's.
            let instants: BTreeSet<Timestamp> = before.iter().map(|(at, _)| *at).collect();
            assert_eq!(instants.len(), 1000, "{shape:?}");
            let mut groups: Vec<(Timestamp, usize)> = Vec::new();
            for (at, _) in &after {
                match groups.last_mut() {
                    Some((last, n)) if last == at => *n += 1,
                    _ => groups.push((*at, 1)),
                }
            }
            let sizes: Vec<usize> = groups.iter().map(|(_, n)| *n).collect();
            assert_eq!(sizes, [300, 300, 300, 100], "{shape:?}");
            let second = Timestamp::parse("2026-11-20T10:00:00Z").unwrap();
            for (at, _) in &groups {
                assert_eq!(at.truncated(1_000_000_000), *at, "{shape:?}: {at}");
                assert!(*at <= second, "{shape:?}: {at} is after the clock's second");
            }
            // The same calls in the same runs of the list: only the order within a run
            // (by uid, as the service lists ties) differs.
            for (run, group) in before.chunks(300).zip(after.chunks(300)) {
                let run: BTreeSet<Uuid> = run.iter().map(|(_, uid)| *uid).collect();
                let group: BTreeSet<Uuid> = group.iter().map(|(_, uid)| *uid).collect();
                assert_eq!(run, group, "{shape:?}");
            }
            // Each call stays consistent: stamped at or after its own and its children's
            // times, as the service would show it (the detail endpoint too).
            for (at, uid) in &after {
                let call = &tied.call(uid).unwrap().call;
                assert_eq!(call.updated_at, *at);
                let latest = times_of(call).into_iter().max().unwrap();
                assert!(
                    latest <= *at,
                    "{shape:?}: {uid} has a time {latest} after {at}"
                );
                let untied = &spread.call(uid).unwrap().call;
                assert!(
                    untied.updated_at <= *at,
                    "{shape:?}: {uid} went back in time"
                );
            }
        }
    }

    #[test]
    fn tie_stamps_keep_runs_apart_and_never_pass_the_clock() {
        let at = |text: &str| Timestamp::parse(text).unwrap();
        let uid = |n: u128| Uuid::from_u128(n);
        // Two runs within one second: the second moves a second on.
        let keys = [
            (at("2026-11-20T09:00:00.1Z"), uid(1)),
            (at("2026-11-20T09:00:00.2Z"), uid(2)),
            (at("2026-11-20T09:00:00.3Z"), uid(3)),
            (at("2026-11-20T09:00:00.4Z"), uid(4)),
            (at("2026-11-20T09:00:02Z"), uid(5)),
        ];
        let clock = at("2026-11-20T10:00:00Z");
        assert_eq!(
            tie_stamps(&keys, 2, clock),
            [
                (uid(1), at("2026-11-20T09:00:01Z")),
                (uid(2), at("2026-11-20T09:00:01Z")),
                (uid(3), at("2026-11-20T09:00:02Z")),
                (uid(4), at("2026-11-20T09:00:02Z")),
                // Already on a whole second, but that is the previous run's: one more.
                (uid(5), at("2026-11-20T09:00:03Z")),
            ]
        );
        // Runs denser than a second at the clock share its second rather than go past it.
        let near = [
            (at("2026-11-20T09:59:59.5Z"), uid(1)),
            (at("2026-11-20T09:59:59.6Z"), uid(2)),
        ];
        assert_eq!(
            tie_stamps(&near, 1, clock),
            [(uid(1), clock), (uid(2), clock)]
        );
    }
}
