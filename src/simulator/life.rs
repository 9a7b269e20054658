//! How a call is born and moves along: creation, dialling attempts, outcomes, notifications.
//!
//! Shared by the create endpoints, the data generator and the dialer, so every call the
//! simulator shows follows the same rules (attempts_remaining = intervals + 1 on a new call,
//! phone numbers returned as digits, children shaped as the spec shows them).

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{
    Attempt, AttemptVariable, NewCall, Notification, OutboundCall, OutboundCallInfo, Outcome,
    Timestamp,
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
    request: &NewCall,
    retry_intervals: &[i64],
    now: Timestamp,
) -> OutboundCall {
    let custom_parameters = request
        .custom_parameters
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
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
            phone_number: Some(request.phone_number.trim_start_matches('+').to_owned()),
            full_name: request.full_name.clone(),
            first_name: request.first_name.clone(),
            last_name: request.last_name.clone(),
            phonetic_full_name: request.phonetic_full_name.clone(),
            phonetic_first_name: request.phonetic_first_name.clone(),
            phonetic_last_name: request.phonetic_last_name.clone(),
            email: request.email.clone(),
            event_date_time: None,
            external_id: request.external_id.clone(),
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

/// One dialling attempt at `now`: the call gets an attempt (hangup, no_answer or busy) and
/// its status, progress, attempts_remaining and cooldown move on. The caller stamps it.
pub fn dial(call: &mut OutboundCall, now: Timestamp, rng: &mut impl Rng) {
    if call.status == "completed" {
        return;
    }
    let status = *["hangup", "hangup", "no_answer", "busy"]
        .choose(rng)
        .unwrap_or(&"hangup");
    let answered = status == "hangup";
    let started = now
        .saturating_sub(std::time::Duration::from_secs(rng.random_range(30..300)))
        .max(call.created_at);
    let duration = if answered {
        rng.random_range(5..240)
    } else {
        0
    };
    let answered_at = answered.then(|| started.saturating_add(std::time::Duration::from_secs(4)));
    let transferred = answered && rng.random_bool(0.1);
    let mut attempt = Attempt {
        uid: uid(rng),
        status: status.to_owned(),
        started_at: Some(started),
        answered_at,
        ended_at: Some(started.saturating_add(std::time::Duration::from_secs(duration as u64 + 5))),
        duration: Some(duration),
        created_at: Some(started),
        updated_at: Some(now),
        error_details: None,
        transfer_started_at: transferred.then_some(now),
        transfer_answered_at: transferred.then_some(now),
        transfer_destination: transferred.then(|| "+15550199".to_owned()),
        call_outcomes: Some(Vec::new()),
        call_attempts_variables: Some(Vec::new()),
        extra: Map::new(),
    };
    if answered {
        add_outcome(&mut attempt, now, rng);
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
            created_at: Some(now),
            extra: Map::new(),
        }]);
    }
    let remaining = call
        .attempts_remaining
        .unwrap_or(1)
        .saturating_sub(1)
        .max(0);
    call.outbound_call_attempts
        .get_or_insert_with(Vec::new)
        .push(attempt);
    if answered || remaining == 0 {
        call.status = "completed".into();
        call.progress = Some(if answered { "answered" } else { "unanswered" }.into());
        call.attempts_remaining = Some(0);
        call.cooldown_until = None;
    } else {
        let attempts = call.outbound_call_attempts.as_ref().map_or(0, Vec::len);
        let wait = call
            .retry_intervals
            .as_ref()
            .and_then(|r| r.get(attempts - 1).copied())
            .unwrap_or(60);
        call.progress = Some("unanswered".into());
        call.attempts_remaining = Some(remaining);
        call.cooldown_until =
            Some(now.saturating_add(std::time::Duration::from_secs(wait.max(0) as u64)));
    }
    if answered && rng.random_bool(0.5) {
        add_notification(call, now, rng);
    }
}

/// A change to a call's children only (an outcome on its last attempt, or a delivered
/// notification): the kind of change that may not bump `updated_at`.
pub fn child_change(call: &mut OutboundCall, now: Timestamp, rng: &mut impl Rng) -> bool {
    let last = call
        .outbound_call_attempts
        .as_mut()
        .and_then(|a| a.last_mut());
    match last {
        Some(attempt) if rng.random_bool(0.5) => {
            add_outcome(attempt, now, rng);
            true
        }
        _ => {
            add_notification(call, now, rng);
            true
        }
    }
}

fn add_outcome(attempt: &mut Attempt, now: Timestamp, rng: &mut impl Rng) {
    attempt
        .call_outcomes
        .get_or_insert_with(Vec::new)
        .push(Outcome {
            uid: uid(rng),
            name: OUTCOMES.choose(rng).unwrap_or(&"interested").to_string(),
            created_at: Some(now),
            extra: Map::new(),
        });
}

fn add_notification(call: &mut OutboundCall, now: Timestamp, rng: &mut impl Rng) {
    call.call_notifications
        .get_or_insert_with(Vec::new)
        .push(Notification {
            uid: uid(rng),
            status: Some("delivered".into()),
            message_count: Some(1),
            delivered_at: Some(now),
            extra: Map::new(),
        });
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
        let call = new_call(Uuid::nil(), &req, &[60, 120, 300], Timestamp::EPOCH);
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

    #[test]
    fn dialling_ends_in_completed() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let req = NewCall {
            phone_number: "+15550100".into(),
            ..NewCall::default()
        };
        let mut call = new_call(Uuid::nil(), &req, &[60, 60], Timestamp::EPOCH);
        for _ in 0..3 {
            dial(&mut call, Timestamp::now(), &mut rng);
        }
        assert_eq!(call.status, "completed");
        assert_eq!(call.attempts_remaining, Some(0));
        assert!(!call.outbound_call_attempts.unwrap().is_empty());
    }
}
