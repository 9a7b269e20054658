//! Calls set aside rather than written (`set_aside_calls`), as every destination keeps them:
//! a listed call that does not fit the spec's types (`service::Misfit`), or a call whose uid
//! another schedule's call has (a *conflict*: a call never moves between schedules). Pure:
//! which rows a page sets aside, and how far its checkpoint may go with them.
//!
//! Invariants: a call set aside is never lost (its raw JSON is kept, and a later read of it
//! that fits writes it and takes its row out); a malformed call moves nothing (its position
//! was read, so the checkpoint moves past it); a conflict holds its listing schedule's
//! checkpoint at the call's instant: the call the listing hid behind that uid may be any.

use uuid::Uuid;

use super::write_plan::WritePlan;
use crate::service::{Misfit, OutboundCall, Timestamp};

/// Why a call is set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetAsideKind {
    /// A field that does not fit its type.
    Malformed,
    /// A uid another schedule's call has.
    Conflict,
}

impl SetAsideKind {
    /// As the `kind` column spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SetAsideKind::Malformed => "malformed",
            SetAsideKind::Conflict => "conflict",
        }
    }
}

/// One row of `set_aside_calls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub call_uid: Uuid,
    pub kind: SetAsideKind,
    pub updated_at: Timestamp,
    pub reason: String,
    pub raw_json: String,
    /// The pass (`sync_runs.id`) that set it aside.
    pub run: Option<i64>,
}

impl SetAside {
    /// A listed call that did not fit, of the pass `run`.
    pub fn malformed(misfit: Misfit, run: Option<i64>) -> SetAside {
        SetAside {
            call_uid: misfit.uid,
            kind: SetAsideKind::Malformed,
            updated_at: misfit.updated_at,
            reason: misfit.reason,
            raw_json: misfit.raw,
            run,
        }
    }
}

/// What a page sets aside beyond its misfits: its conflicts, and the instant its
/// checkpoint may not pass.
#[derive(Debug, Default)]
pub struct Conflicts {
    pub rows: Vec<SetAside>,
    pub hold_at: Option<Timestamp>,
}

/// The conflicts `plan` found in the page `calls` of `schedule` (read by the pass `run`):
/// each logged at WARN, naming the call and both schedules.
pub fn conflicts(
    schedule: Uuid,
    calls: &[OutboundCall],
    run: Option<i64>,
    plan: &WritePlan,
) -> Conflicts {
    let mut found = Conflicts::default();
    for conflict in &plan.conflicts {
        let call = &calls[conflict.index];
        tracing::warn!(
            uid = %call.uid,
            listed_under = %schedule,
            stored_under = %conflict.stored,
            updated_at = %call.updated_at,
            "a call of one schedule listed under another: the stored call stays with its schedule, the listing is set aside (set_aside_calls), and this schedule's checkpoint stays before it"
        );
        found.hold_at = Some(
            found
                .hold_at
                .map_or(call.updated_at, |at| at.min(call.updated_at)),
        );
        found
            .rows
            .push(conflict_row(call, schedule, conflict.stored, run));
    }
    found
}

fn conflict_row(call: &OutboundCall, listed: Uuid, stored: Uuid, run: Option<i64>) -> SetAside {
    SetAside {
        call_uid: call.uid,
        kind: SetAsideKind::Conflict,
        updated_at: call.updated_at,
        reason: format!(
            "listed under schedule {listed}, but a call of schedule {stored} has this uid; the stored call stays with {stored}"
        ),
        // A call read from JSON serializes back to JSON.
        raw_json: serde_json::to_string(call).unwrap_or_default(),
        run,
    }
}

/// The checkpoint a page saves: at most `hold_at`.
pub fn held(checkpoint: Option<Timestamp>, hold_at: Option<Timestamp>) -> Option<Timestamp> {
    match (checkpoint, hold_at) {
        (Some(checkpoint), Some(hold)) => Some(checkpoint.min(hold)),
        (checkpoint, _) => checkpoint,
    }
}

/// The uids of the page's calls that the write took as they are (written or unchanged):
/// their rows in `set_aside_calls`, if any, go.
pub fn fitting(calls: &[OutboundCall], plan: &WritePlan) -> Vec<Uuid> {
    let conflicting: std::collections::HashSet<usize> =
        plan.conflicts.iter().map(|c| c.index).collect();
    (calls.iter().enumerate())
        .filter(|(index, _)| !conflicting.contains(index))
        .map(|(_, call)| call.uid)
        .collect()
}
