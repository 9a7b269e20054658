//! The per-call write rule every destination follows, as pure functions: which of a page's
//! calls are written (a call whose content hash and schedule are stored is skipped — content,
//! not `updated_at`, because at second precision a call can change twice within one second),
//! in which round (a call listed twice in a page is written twice, in order, and compared with
//! what the page just wrote), and how its children are written: a stored call (or one that
//! repeats a child uid) mirrors the service — children it no longer shows are deleted — while
//! a key the service did not send leaves the stored rows alone; the summary columns come from
//! the children sent, or are recomputed from the stored children where those are partly
//! unknown.
//!
//! A back end gathers the page's stored fingerprints (one query) and runs the plan; only how
//! it sends the rows is its own (`sqlite/upsert.rs` row by row, `postgres/write.rs` a
//! statement a table a round).

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::rows::{self, CallRow};
use crate::service::OutboundCall;

/// What a page write did (or, in a dry run, would do).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageWrite {
    pub calls_written: u64,
    pub calls_unchanged: u64,
    /// Calls set aside (`set_aside_calls`): misfits and conflicts.
    pub set_aside: u64,
    /// The instant the page's conflicts hold its schedule's checkpoint at: later pages of the
    /// pass may not move it past (`set_aside.rs`).
    pub hold_at: Option<crate::service::Timestamp>,
    /// The calls of the page's schedule in `set_aside_calls` once the page committed, when
    /// the write counted them (what `/metrics` shows).
    pub set_aside_now: Option<u64>,
}

/// What decides whether a stored call is rewritten: its content and its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub content_hash: i64,
    pub schedule: Uuid,
}

/// One call the page writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallWrite {
    /// Its index in the page.
    pub index: usize,
    /// The call has rows from an earlier write (or from earlier in this page).
    pub was_stored: bool,
    /// 0 for a uid's first write in the page, 1 for its second …: a back end that writes a
    /// table in one statement cannot touch a row twice in one.
    pub round: usize,
}

/// A call of the page whose uid a call of another schedule has: not written (a call never
/// moves between schedules), set aside (`set_aside.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// Its index in the page.
    pub index: usize,
    /// The schedule the stored call belongs to.
    pub stored: Uuid,
}

/// The page's write: its counts, the calls written, in page order, and the calls that
/// conflict with another schedule's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePlan {
    pub counts: PageWrite,
    pub calls: Vec<CallWrite>,
    pub conflicts: Vec<Conflict>,
}

impl WritePlan {
    /// The calls grouped by round, each round `(index, was_stored)` in page order.
    pub fn rounds(&self) -> Vec<Vec<(usize, bool)>> {
        let mut rounds: Vec<Vec<(usize, bool)>> = Vec::new();
        for call in &self.calls {
            if rounds.len() <= call.round {
                rounds.resize_with(call.round + 1, Vec::new);
            }
            rounds[call.round].push((call.index, call.was_stored));
        }
        rounds
    }
}

/// The write of the `page` of `schedule` (`call_rows` its rows, in order), given the page's
/// stored fingerprints by call uid.
pub fn plan(
    page: &[OutboundCall],
    call_rows: &[CallRow<'_>],
    mut stored: HashMap<Uuid, Fingerprint>,
    schedule: Uuid,
) -> WritePlan {
    let mut counts = PageWrite::default();
    let mut calls: Vec<CallWrite> = Vec::new();
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut times: HashMap<Uuid, usize> = HashMap::new();
    for (index, (call, row)) in page.iter().zip(call_rows).enumerate() {
        let fingerprint = Fingerprint {
            content_hash: row.content_hash,
            schedule,
        };
        let before = stored.get(&call.uid);
        // A stored schedule uid that did not parse (nil; no callsync writes one) is no
        // schedule's: the call is rewritten.
        if let Some(other) = before
            .map(|b| b.schedule)
            .filter(|s| *s != schedule && !s.is_nil())
        {
            conflicts.push(Conflict {
                index,
                stored: other,
            });
            counts.set_aside += 1;
            continue;
        }
        if before == Some(&fingerprint) {
            counts.calls_unchanged += 1;
            continue;
        }
        let round = times.entry(call.uid).or_insert(0);
        calls.push(CallWrite {
            index,
            was_stored: before.is_some(),
            round: *round,
        });
        *round += 1;
        stored.insert(call.uid, fingerprint);
        counts.calls_written += 1;
    }
    WritePlan {
        counts,
        calls,
        conflicts,
    }
}

/// How a written call's children are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildRule {
    /// Children the service no longer shows are deleted (the call was stored, or repeats a
    /// child uid, whose later rows overwrite earlier ones).
    pub mirror: bool,
    /// The summary computed from the children sent is the stored one; otherwise it is
    /// recomputed from the stored children.
    pub summary_known: bool,
}

impl ChildRule {
    pub fn of(call: &OutboundCall, was_stored: bool) -> ChildRule {
        // A repeated child uid makes later rows overwrite (and delete) earlier ones of the
        // same call: only the child tables then know the outcome, and the old rows matter.
        let repeats = repeats_a_child_uid(call);
        ChildRule {
            mirror: was_stored || repeats,
            summary_known: !repeats && (!was_stored || sends_every_child_list(call)),
        }
    }
}

/// The rows of `calls`, whose content hashes are `hashes` (in order).
pub fn rows_of<'a>(
    schedule_uid: &'a str,
    calls: &'a [OutboundCall],
    hashes: &[u64],
) -> Vec<CallRow<'a>> {
    debug_assert_eq!(calls.len(), hashes.len());
    calls
        .iter()
        .zip(hashes)
        .map(|(c, hash)| rows::call(schedule_uid, c, *hash))
        .collect()
}

/// True when the call sends its attempts, notifications and every attempt's outcomes: the
/// stored children the summary reads are then exactly the ones sent.
pub fn sends_every_child_list(call: &OutboundCall) -> bool {
    call.notifications().is_some()
        && call
            .outbound_call_attempts
            .as_deref()
            .is_some_and(|attempts| attempts.iter().all(|a| a.call_outcomes.is_some()))
}

/// True when an attempt, outcome or notification uid appears twice in the call.
pub fn repeats_a_child_uid(call: &OutboundCall) -> bool {
    let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
    let outcomes = attempts
        .iter()
        .flat_map(|a| a.call_outcomes.as_deref().unwrap_or_default());
    let notifications = call.notifications().unwrap_or_default();
    has_repeat(attempts.iter().map(|a| a.uid))
        || has_repeat(outcomes.map(|o| o.uid))
        || has_repeat(notifications.iter().map(|n| n.uid))
}

fn has_repeat(mut uids: impl Iterator<Item = Uuid>) -> bool {
    let mut seen = HashSet::new();
    uids.any(|uid| !seen.insert(uid))
}
