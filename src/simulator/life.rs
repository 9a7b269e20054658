//! How a call is born and moves along: creation, dialling attempts, outcomes, notifications.
//! The timing rules (attempts in order, each within itself, cooldowns waited out) live here, so
//! the generator's histories and the dialer's changes follow the same ones.
//!
//! Shared by the create endpoints, the data generator and the dialer, so every call the
//! simulator shows follows the same rules (attempts_remaining = intervals + 1 on a new call,
//! phone numbers returned as digits, children shaped as the spec shows them).

use rand::seq::IndexedRandom;
use rand::{Rng, RngExt};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::service::{
    Attempt, AttemptVariable, CustomParameters, NewCall, Notification, OutboundCall,
    OutboundCallInfo, Outcome, Timestamp,
};

/// A random (version 4, RFC 4122 variant) uid drawn from `rng`. Every uid the simulator makes
/// comes from here: from the generator's seeded stream, the seeded data is the same on every
/// run; from the runtime stream (seeded by the OS), new resources never collide with it.
pub fn uid(rng: &mut impl Rng) -> Uuid {
    uuid::Builder::from_random_bytes(rng.random()).into_uuid()
}

/// A new call as the service stores it: pending, in queue, no attempts.
pub fn new_call(
    uid: Uuid,
    request: NewCall,
    retry_intervals: &[i64],
    now: Timestamp,
) -> OutboundCall {
    // Inserted one by one, in order, rather than collected: `collect` would sort a copy first.
    let mut custom_parameters = CustomParameters::new();
    for (name, value) in request.custom_parameters {
        custom_parameters.insert(name, Value::String(value));
    }
    let phone_number = match request.phone_number.strip_prefix('+') {
        Some(digits) => digits.to_owned(),
        None => request.phone_number,
    };
    OutboundCall {
        uid,
        external_id: request.external_id.clone(),
        status: "pending".into(),
        progress: Some("in_queue".into()),
        is_test_call: Some(false),
        cooldown_until: None,
        delay: Some(Value::Null),
        priority: Some(Value::Null),
        retry_intervals: Some(retry_intervals.to_vec()),
        attempts_remaining: Some(retry_intervals.len() as i64 + 1),
        created_at: now,
        updated_at: now,
        outbound_call_info: OutboundCallInfo {
            phone_number: Some(phone_number),
            full_name: request.full_name,
            first_name: request.first_name,
            last_name: request.last_name,
            phonetic_full_name: request.phonetic_full_name,
            phonetic_first_name: request.phonetic_first_name,
            phonetic_last_name: request.phonetic_last_name,
            email: request.email,
            event_date_time: None,
            external_id: request.external_id,
            custom_parameters,
            extra: Map::new(),
        },
        outbound_call_attempts: Some(Vec::new()),
        call_notifications: Some(Vec::new()),
        outbound_calls_notifications: None,
        extra: Map::new(),
    }
}

/// `None` when `phone` is `+` followed by 7 to 15 digits; else what is wrong.
pub fn phone_problem(phone: &str) -> Option<&'static str> {
    let ok = phone.strip_prefix('+').is_some_and(|digits| {
        (7..=15).contains(&digits.len()) && digits.chars().all(|c| c.is_ascii_digit())
    });
    (!ok).then_some("must be in international form: + followed by 7 to 15 digits, e.g. +15550100")
}

const OUTCOMES: [&str; 5] = [
    "interested",
    "not_interested",
    "callback_requested",
    "voicemail",
    "wrong_number",
];

/// How nominal seconds (ringing, talk, retry intervals) become instants: each lasts `scale`
/// real seconds, and instants are rounded up to the service's precision, so a span is never
/// shorter than asked and an instant is never before the one it follows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    pub scale: f64,
    pub unit_nanos: i128,
}

impl Pace {
    /// `nominal_secs` after `t`. A span is at most a century (a POSTed schedule may ask for
    /// any retry interval), so the result stays a valid instant, as far ahead as asked for any
    /// practical purpose.
    pub fn after(self, t: Timestamp, nominal_secs: u64) -> Timestamp {
        const CENTURY_NANOS: f64 = 100.0 * 365.25 * 86_400.0 * 1e9;
        let nanos = (nominal_secs as f64 * self.scale * 1e9)
            .round()
            .clamp(0.0, CENTURY_NANOS) as i128;
        let unit = self.unit_nanos.max(1);
        let at = t.unix_nanos() + nanos;
        Timestamp::from_unix_nanos(at + (unit - at.rem_euclid(unit)) % unit).unwrap_or(t)
    }
}

/// How one dialling attempt goes, decided when it starts; spans in nominal seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptPlan {
    pub status: &'static str,
    /// Until answered, or until the dialler gives up (no answer) or hears busy.
    pub ring_secs: u64,
    /// The connected call; 0 unless answered.
    pub talk_secs: u64,
    pub transferred: bool,
}

impl AttemptPlan {
    /// Half the attempts are answered (`hangup`: they end when someone hangs up), a quarter
    /// ring out (`no_answer`), a quarter are `busy`.
    pub fn draw(rng: &mut impl Rng) -> Self {
        let status = *["hangup", "hangup", "no_answer", "busy"]
            .choose(rng)
            .unwrap_or(&"hangup");
        let (ring_secs, talk_secs) = match status {
            "hangup" => (rng.random_range(2..=20), rng.random_range(5..=240)),
            "no_answer" => (rng.random_range(30..=45), 0),
            _ => (rng.random_range(1..=3), 0),
        };
        AttemptPlan {
            status,
            ring_secs,
            talk_secs,
            transferred: status == "hangup" && rng.random_bool(0.1),
        }
    }

    pub fn answered(&self) -> bool {
        self.status == "hangup"
    }

    /// From dialling to hanging up.
    pub fn length_secs(&self) -> u64 {
        self.ring_secs + self.talk_secs
    }
}

/// Records an attempt that started at `started` and went as `plan` says: the call gets the
/// attempt (with an outcome and a variable when answered, sometimes a notification), and its
/// status, progress, attempts_remaining and cooldown move on. Everything is stamped at
/// `recorded`, which must not be before the attempt's end (`pace.after(started,
/// plan.length_secs())`); the caller sets the call's `updated_at` to it.
///
/// After an unanswered attempt with attempts left, `cooldown_until` is the attempt's end plus
/// the next retry interval (seconds, at `pace`); the call must not be dialled before it.
pub fn record_attempt(
    call: &mut OutboundCall,
    plan: &AttemptPlan,
    started: Timestamp,
    pace: Pace,
    recorded: Timestamp,
    rng: &mut impl Rng,
) {
    if call.status == "completed" {
        return;
    }
    let answered_at = plan.answered().then(|| pace.after(started, plan.ring_secs));
    let ended = pace.after(started, plan.length_secs());
    let transfer = answered_at.filter(|_| plan.transferred).map(|answered| {
        // Half way through the talk, connected a few seconds later (before the end).
        let half = plan.talk_secs / 2;
        let connect = (plan.talk_secs - half).min(5);
        (
            pace.after(answered, half),
            pace.after(answered, half + connect),
        )
    });
    let mut attempt = Attempt {
        uid: uid(rng),
        status: plan.status.to_owned(),
        started_at: Some(started),
        answered_at,
        ended_at: Some(ended),
        duration: Some(plan.talk_secs as i64),
        created_at: Some(started),
        updated_at: Some(recorded),
        error_details: None,
        transfer_started_at: transfer.map(|t| t.0),
        transfer_answered_at: transfer.map(|t| t.1),
        transfer_destination: transfer.map(|_| "+15550199".to_owned()),
        call_outcomes: Some(Vec::new()),
        call_attempts_variables: Some(Vec::new()),
        extra: Map::new(),
    };
    if plan.answered() {
        add_outcome(&mut attempt, ended, rng);
        attempt.call_attempts_variables = Some(vec![AttemptVariable {
            uid: uid(rng),
            name: "preferred_time".into(),
            value: Some(Value::String(
                ["morning", "afternoon", "evening"]
                    .choose(rng)
                    .unwrap_or(&"morning")
                    .to_string(),
            )),
            status: Some("confirmed".into()),
            created_at: Some(ended),
            extra: Map::new(),
        }]);
    }
    let remaining = call
        .attempts_remaining
        .unwrap_or(1)
        .saturating_sub(1)
        .max(0);
    push_one(
        call.outbound_call_attempts.get_or_insert_with(Vec::new),
        attempt,
    );
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    let made = attempts.len();
    if plan.answered() || remaining == 0 {
        call.status = "completed".into();
        call.progress = Some(
            if plan.answered() {
                "answered"
            } else {
                "unanswered"
            }
            .into(),
        );
        call.attempts_remaining = Some(0);
        call.cooldown_until = None;
    } else {
        // The k-th retry waits retry_intervals[k - 1] (our reading: seconds).
        let wait = call
            .retry_intervals
            .as_ref()
            .and_then(|r| r.get(made - 1).copied())
            .unwrap_or(60);
        call.progress = Some("unanswered".into());
        call.attempts_remaining = Some(remaining);
        call.cooldown_until = Some(pace.after(ended, wait.max(0) as u64));
    }
    if plan.answered() && rng.random_bool(0.5) {
        add_notification(call, recorded, rng);
    }
}

/// True when the call may be dialled at `now`: pending, and out of its cooldown.
pub fn dialable(call: &OutboundCall, now: Timestamp) -> bool {
    call.status == "pending" && call.cooldown_until.is_none_or(|until| until <= now)
}

/// A change to a dialled call's children only (an outcome on its last attempt, or a delivered
/// notification): the kind of change that may not bump `updated_at`. A call never dialled has
/// nothing to change: `false`.
pub fn child_change(call: &mut OutboundCall, now: Timestamp, rng: &mut impl Rng) -> bool {
    let Some(attempt) = call
        .outbound_call_attempts
        .as_mut()
        .and_then(|a| a.last_mut())
    else {
        return false;
    };
    if rng.random_bool(0.5) {
        add_outcome(attempt, now, rng);
    } else {
        add_notification(call, now, rng);
    }
    true
}

/// Pushes with room for exactly one more: children come one at a time and are few, and the
/// generator keeps a million calls, where `push`'s room for four would add a gigabyte.
fn push_one<T>(items: &mut Vec<T>, item: T) {
    items.reserve_exact(1);
    items.push(item);
}

fn add_outcome(attempt: &mut Attempt, now: Timestamp, rng: &mut impl Rng) {
    let outcome = Outcome {
        uid: uid(rng),
        name: OUTCOMES.choose(rng).unwrap_or(&"interested").to_string(),
        created_at: Some(now),
        extra: Map::new(),
    };
    push_one(attempt.call_outcomes.get_or_insert_with(Vec::new), outcome);
}

fn add_notification(call: &mut OutboundCall, now: Timestamp, rng: &mut impl Rng) {
    let notification = Notification {
        uid: uid(rng),
        status: Some("delivered".into()),
        message_count: Some(1),
        delivered_at: Some(now),
        extra: Map::new(),
    };
    push_one(
        call.call_notifications.get_or_insert_with(Vec::new),
        notification,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_new_call_follows_the_spec() {
        let req = NewCall {
            phone_number: "+15550100".into(),
            ..NewCall::default()
        };
        let call = new_call(Uuid::nil(), req, &[60, 120, 300], Timestamp::EPOCH);
        assert_eq!(call.attempts_remaining, Some(4));
        assert_eq!(
            call.outbound_call_info.phone_number.as_deref(),
            Some("15550100")
        );
        assert_eq!(
            (call.status.as_str(), call.progress.as_deref()),
            ("pending", Some("in_queue"))
        );
    }

    #[test]
    fn phone_numbers_must_be_plus_digits() {
        assert_eq!(phone_problem("+15550100"), None);
        assert!(phone_problem("15550100").is_some());
        assert!(phone_problem("+1555x0100").is_some());
        assert!(phone_problem("+12").is_some());
    }

    /// callsync's check before sending refuses exactly the numbers the service refuses: a
    /// number it passes would have the service refuse its whole chunk.
    #[test]
    fn the_check_before_sending_refuses_exactly_what_the_service_refuses() {
        let checked = |phone: &str| {
            crate::service::new_call_problems(&NewCall {
                phone_number: phone.to_owned(),
                ..NewCall::default()
            })
            .is_empty()
        };
        for digits in 0..=25 {
            for phone in [
                format!("+{}", "4".repeat(digits)),
                "4".repeat(digits),
                format!("+{}x", "4".repeat(digits)),
            ] {
                assert_eq!(
                    checked(&phone),
                    phone_problem(&phone).is_none(),
                    "{phone:?}"
                );
            }
        }
    }

    #[test]
    fn dialling_ends_in_completed_and_waits_out_each_cooldown() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let req = NewCall {
            phone_number: "+15550100".into(),
            ..NewCall::default()
        };
        let pace = Pace {
            scale: 1.0,
            unit_nanos: 1_000,
        };
        let created = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let mut call = new_call(Uuid::nil(), req, &[60, 120], created);
        let busy = AttemptPlan {
            status: "busy",
            ring_secs: 2,
            talk_secs: 0,
            transferred: false,
        };
        let started = pace.after(created, 10);
        record_attempt(
            &mut call,
            &busy,
            started,
            pace,
            pace.after(started, 3),
            &mut rng,
        );
        assert_eq!(
            (call.status.as_str(), call.progress.as_deref()),
            ("pending", Some("unanswered"))
        );
        assert_eq!(call.attempts_remaining, Some(2));
        let ended = pace.after(started, 2);
        assert_eq!(call.cooldown_until, Some(pace.after(ended, 60)));
        assert!(!dialable(&call, pace.after(ended, 59)));
        assert!(dialable(&call, pace.after(ended, 60)));
        for wait in [60, 120] {
            let next = pace.after(call.cooldown_until.unwrap(), 1);
            record_attempt(&mut call, &busy, next, pace, pace.after(next, 2), &mut rng);
            let _ = wait;
        }
        assert_eq!(
            (call.status.as_str(), call.progress.as_deref()),
            ("completed", Some("unanswered"))
        );
        assert_eq!(
            (call.attempts_remaining, call.cooldown_until),
            (Some(0), None)
        );
        assert_eq!(call.outbound_call_attempts.as_ref().unwrap().len(), 3);
        assert!(!dialable(&call, pace.after(created, 86_400)));
    }

    #[test]
    fn an_answered_attempt_is_timed_within_itself() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let pace = Pace {
            scale: 0.001,
            unit_nanos: 1_000_000,
        };
        let started = Timestamp::parse("2026-01-01T00:00:00.001Z").unwrap();
        let plan = AttemptPlan {
            status: "hangup",
            ring_secs: 4,
            talk_secs: 100,
            transferred: true,
        };
        let mut call = new_call(Uuid::nil(), NewCall::default(), &[60], started);
        let end = pace.after(started, plan.length_secs());
        record_attempt(&mut call, &plan, started, pace, end, &mut rng);
        let a = &call.outbound_call_attempts.as_ref().unwrap()[0];
        assert_eq!(a.answered_at, Some(pace.after(started, 4)));
        assert_eq!(a.ended_at, Some(end));
        assert_eq!(a.duration, Some(100));
        let (ts, ta) = (
            a.transfer_started_at.unwrap(),
            a.transfer_answered_at.unwrap(),
        );
        assert!(a.answered_at.unwrap() <= ts && ts <= ta && ta <= end);
        assert_eq!(call.progress.as_deref(), Some("answered"));
        assert_eq!(
            call.outbound_call_attempts.as_ref().unwrap()[0]
                .uid
                .get_version_num(),
            4
        );
    }

    #[test]
    fn pace_rounds_up_to_the_precision() {
        let pace = Pace {
            scale: 0.0015,
            unit_nanos: 1_000_000,
        };
        let t = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(
            pace.after(t, 1),
            Timestamp::parse("2026-01-01T00:00:00.002Z").unwrap()
        );
        assert_eq!(pace.after(t, 0), t);
        // An absurd retry interval is a century away, not "now".
        let far = pace.after(t, u64::MAX);
        assert!(far > t.saturating_add(std::time::Duration::from_secs(99 * 365 * 86_400)));
        let nan = Pace {
            scale: f64::NAN,
            unit_nanos: 1_000,
        };
        assert_eq!(nan.after(t, 60), t);
    }
}
