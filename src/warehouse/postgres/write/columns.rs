//! A round's rows as column batches (`batch.rs`), gathered before any of its statements is
//! sent. A round whose calls are all new is inserted with the ids its page reserved, as COPY
//! writes rows; any other is upserted (`ON CONFLICT`), a child row finding its call's and
//! attempt's ids on the server by the uids it carries.

use std::collections::HashMap;

use uuid::Uuid;

use crate::service::{Attempt, OutboundCall};
use crate::warehouse::postgres::batch::{
    ATTEMPTS, Batch, CALLS, Cell, NOTIFICATIONS, OUTCOMES, PARAMETERS, VARIABLES, Write, text,
};
use crate::warehouse::rows::{self, AttemptRow, CallRow};
use crate::warehouse::write_plan::ChildRule;

/// Ids reserved for pages' calls and attempts (`RESERVE_IDS`), each list ascending.
pub(super) struct Reserved {
    pub(super) calls: Vec<i64>,
    pub(super) attempts: Vec<i64>,
}

impl Reserved {
    /// The first `calls` and `attempts` ids (fewer when there are not as many), taken off.
    pub(super) fn take_front(&mut self, [calls, attempts]: [usize; 2]) -> Reserved {
        let front = |ids: &mut Vec<i64>, n: usize| {
            let rest = ids.split_off(n.min(ids.len()));
            std::mem::replace(ids, rest)
        };
        Reserved {
            calls: front(&mut self.calls, calls),
            attempts: front(&mut self.attempts, attempts),
        }
    }
}

/// How many ids `calls` may take: one each, and one for each of their attempts.
pub(super) fn ids_wanted(calls: &[OutboundCall]) -> [usize; 2] {
    let attempts = (calls.iter())
        .map(|c| c.outbound_call_attempts.as_ref().map_or(0, Vec::len))
        .sum();
    [calls.len(), attempts]
}

/// A call of the round being written, with what its write needs.
struct Pending<'p> {
    call: &'p OutboundCall,
    row: &'p CallRow<'p>,
    /// Its id and its written attempts' (in `written`'s order), when its round is inserted
    /// with reserved ids.
    ids: Option<(i64, Vec<i64>)>,
    attempts: Vec<AttemptRow>,
    /// The attempts written, as indices into `attempts`: a uid repeated, its last row.
    written: Vec<usize>,
    /// Children the service no longer shows are deleted.
    mirror: bool,
    /// The summary computed from the children sent is the stored one.
    summary_known: bool,
}

/// A round's rows, gathered before any of its statements is sent: they are the statements'
/// parameters, which live until the page's answers are in. Calls are named by uid.
pub(super) struct RoundRows {
    /// `Insert` when every call of the round is new to the warehouse (not stored before the
    /// page, nor earlier in it), and the page reserved ids enough: then no stored row shares a
    /// key with its rows (each key holds the new call's id, and a round holds a child's key
    /// once), and they are inserted with their ids as COPY would, with no index probe before
    /// each row and no join. A call another transaction stored meanwhile (a call moved between
    /// two schedules written at once) makes the insert fail: the page is rolled back and
    /// written again at once, upserted (`PageEnd::StoredMeanwhile`). Else `Upsert`.
    pub(super) write: Write,
    pub(super) calls: Batch,
    /// The mirrored calls, whose custom parameters are replaced whole.
    pub(super) mirrored: Vec<String>,
    pub(super) parameters: Batch,
    pub(super) kept: Kept,
    pub(super) attempts: Batch,
    /// The mirrored calls whose notifications were sent, replacing the stored ones.
    pub(super) notified: Vec<String>,
    pub(super) notifications: Batch,
    /// The outcomes, then the variables, each with the attempts whose lists they replace.
    pub(super) lists: [(Batch, Replaced); 2],
    /// The calls whose summary the children sent do not tell.
    pub(super) unknown: Vec<String>,
}

impl RoundRows {
    /// The rows of two pages' rounds, as one round: inserted when both are, else upserted
    /// (an upsert does not send the ids an insert's rows carry). The pages name no call in
    /// common (`PgWarehouse::may_write_together`), so no row is written twice.
    pub(super) fn merge(mut self, round: RoundRows) -> RoundRows {
        if round.write == Write::Upsert {
            self.write = Write::Upsert;
        }
        self.calls.append(round.calls);
        self.mirrored.extend(round.mirrored);
        self.parameters.append(round.parameters);
        self.kept.calls.extend(round.kept.calls);
        self.kept.of_calls.extend(round.kept.of_calls);
        self.kept.uids.extend(round.kept.uids);
        self.attempts.append(round.attempts);
        self.notified.extend(round.notified);
        self.notifications.append(round.notifications);
        for ((batch, replaced), (more, also)) in self.lists.iter_mut().zip(round.lists) {
            batch.append(more);
            replaced.calls.extend(also.calls);
            replaced.attempts.extend(also.attempts);
        }
        self.unknown.extend(round.unknown);
        self
    }
}

/// The attempts a mirrored call keeps (every other of its attempts goes), by call uid and
/// uid, and the calls they are of.
#[derive(Default)]
pub(super) struct Kept {
    pub(super) calls: Vec<String>,
    pub(super) of_calls: Vec<String>,
    pub(super) uids: Vec<String>,
}

/// The attempts whose list of outcomes (or variables) is replaced whole, by call uid and uid.
#[derive(Default)]
pub(super) struct Replaced {
    pub(super) calls: Vec<String>,
    pub(super) attempts: Vec<String>,
}

/// The calls `round` names, with what their write needs; with ids from `reserved` when the
/// round is inserted (`None` when it is not, or `reserved` runs short).
fn pending_of<'p>(
    calls: &'p [OutboundCall],
    call_rows: &'p [CallRow<'p>],
    round: &[(usize, bool)],
    reserved: Option<&Reserved>,
) -> (Vec<Pending<'p>>, Write) {
    let mut pending: Vec<Pending<'p>> = round
        .iter()
        .map(|&(i, was_stored)| {
            let call = &calls[i];
            let ChildRule {
                mirror,
                summary_known,
            } = ChildRule::of(call, was_stored);
            let attempts: Vec<AttemptRow> = (call.outbound_call_attempts.iter().flatten())
                .enumerate()
                .map(|(position, a)| rows::attempt(position, a))
                .collect();
            Pending {
                call,
                row: &call_rows[i],
                ids: None,
                written: last_indices(&attempts, |a| a.uid.as_str()),
                attempts,
                mirror,
                summary_known,
            }
        })
        .collect();
    let fresh = round.iter().all(|&(_, was_stored)| !was_stored);
    let write = match reserved {
        Some(reserved) if fresh && give_ids(&mut pending, reserved) => Write::Insert,
        _ => Write::Upsert,
    };
    (pending, write)
}

/// Gives each call of `pending` and each of its written attempts the next of the `reserved`
/// ids, in page order, as the sequence would have; false (and no ids given) when there are not
/// enough.
fn give_ids(pending: &mut [Pending<'_>], reserved: &Reserved) -> bool {
    let attempts_wanted: usize = pending.iter().map(|p| p.written.len()).sum();
    if reserved.calls.len() < pending.len() || reserved.attempts.len() < attempts_wanted {
        return false;
    }
    let mut attempt_ids = reserved.attempts.iter().copied();
    for (p, &id) in pending.iter_mut().zip(&reserved.calls) {
        let ids = attempt_ids.by_ref().take(p.written.len()).collect();
        p.ids = Some((id, ids));
    }
    true
}

impl Pending<'_> {
    fn id(&self) -> Cell {
        Cell::Int(self.ids.as_ref().map(|(id, _)| *id))
    }

    /// The attempts written, each with its id (`None` unless reserved).
    fn written_attempts(&self) -> impl Iterator<Item = (Option<i64>, &AttemptRow)> {
        let ids = self.ids.as_ref().map(|(_, ids)| ids);
        (self.written.iter().enumerate())
            .map(move |(n, &i)| (ids.and_then(|ids| ids.get(n).copied()), &self.attempts[i]))
    }
}

/// The rows of the calls `round` names.
pub(super) fn round_rows(
    calls: &[OutboundCall],
    call_rows: &[CallRow<'_>],
    round: &[(usize, bool)],
    reserved: Option<&Reserved>,
    synced_at: &str,
) -> RoundRows {
    let (pending, write) = pending_of(calls, call_rows, round, reserved);
    let uids = |keep: &dyn Fn(&Pending<'_>) -> bool| -> Vec<String> {
        pending
            .iter()
            .filter(|p| keep(p))
            .map(|p| p.row.uid.clone())
            .collect()
    };
    let mut call_batch = Batch::new(&CALLS);
    for p in &pending {
        call_batch.push(call_values(p, synced_at));
    }
    let (attempts, kept) = attempts_batch(&pending);
    let (notifications, notified) = notifications_batch(&pending);
    RoundRows {
        write,
        calls: call_batch,
        mirrored: uids(&|p| p.mirror),
        parameters: parameters_batch(&pending),
        kept,
        attempts,
        notified,
        notifications,
        lists: attempt_children(&pending),
        unknown: uids(&|p| !p.summary_known),
    }
}

/// A call's row of `calls`, with its summary.
fn call_values(p: &Pending<'_>, synced_at: &str) -> Vec<Cell> {
    let r = p.row;
    let notification_count = p.call.notifications().map_or(0, <[_]>::len);
    let s = rows::summary(
        p.call,
        &p.attempts,
        i64::try_from(notification_count).unwrap_or(i64::MAX),
    );
    vec![
        p.id(),
        text(Some(&r.uid)),
        text(Some(r.schedule_uid)),
        text(r.external_id),
        text(Some(r.status)),
        text(r.progress),
        Cell::Flag(r.is_test_call),
        Cell::Text(r.cooldown_until.clone()),
        Cell::Text(r.delay.clone()),
        Cell::Text(r.priority.clone()),
        Cell::Int(r.attempts_remaining),
        Cell::Text(r.retry_intervals.clone()),
        Cell::Text(Some(r.created_at.clone())),
        Cell::Text(Some(r.updated_at.clone())),
        text(r.phone_number),
        Cell::Text(r.phone_e164.clone()),
        text(r.full_name),
        text(r.first_name),
        text(r.last_name),
        text(r.phonetic_full_name),
        text(r.phonetic_first_name),
        text(r.phonetic_last_name),
        text(r.email),
        Cell::Text(r.event_date_time.clone()),
        Cell::Text(r.extra.clone()),
        Cell::Int(Some(r.content_hash)),
        text(Some(synced_at)),
        Cell::Int(Some(s.attempt_count)),
        Cell::Text(s.last_attempt_uid),
        Cell::Text(s.last_attempt_status),
        Cell::Text(s.last_attempt_started_at),
        Cell::Text(s.last_attempt_answered_at),
        Cell::Text(s.last_attempt_ended_at),
        Cell::Int(s.last_attempt_duration),
        Cell::Text(s.outcome_names),
        Cell::Flag(Some(s.answered)),
        Cell::Flag(Some(s.transferred)),
        Cell::Int(Some(s.notification_count)),
    ]
}

/// The calls' custom parameters.
fn parameters_batch(pending: &[Pending<'_>]) -> Batch {
    let mut parameters = Batch::new(&PARAMETERS);
    for p in pending {
        for (name, value) in rows::custom_parameters(p.call) {
            parameters.push(vec![
                p.id(),
                text(Some(&p.row.uid)),
                text(Some(name)),
                Cell::Text(value),
            ]);
        }
    }
    parameters
}

/// The attempts of the calls that sent their list (a uid repeated: its last row), and what
/// each mirrored call keeps.
fn attempts_batch(pending: &[Pending<'_>]) -> (Batch, Kept) {
    let mut kept = Kept::default();
    let mut attempts = Batch::new(&ATTEMPTS);
    for p in pending
        .iter()
        .filter(|p| p.call.outbound_call_attempts.is_some())
    {
        if p.mirror {
            kept.calls.push(p.row.uid.clone());
            for a in &p.attempts {
                kept.of_calls.push(p.row.uid.clone());
                kept.uids.push(a.uid.clone());
            }
        }
        for (id, a) in p.written_attempts() {
            attempts.push(vec![
                Cell::Int(id),
                text(Some(&a.uid)),
                p.id(),
                text(Some(&p.row.uid)),
                Cell::Int(Some(a.position)),
                text(Some(&a.status)),
                Cell::Text(a.started_at.clone()),
                Cell::Text(a.answered_at.clone()),
                Cell::Text(a.ended_at.clone()),
                Cell::Int(a.duration),
                Cell::Text(a.created_at.clone()),
                Cell::Text(a.updated_at.clone()),
                Cell::Text(a.error_details.clone()),
                Cell::Text(a.transfer_started_at.clone()),
                Cell::Text(a.transfer_answered_at.clone()),
                Cell::Text(a.transfer_destination.clone()),
                Cell::Text(a.extra.clone()),
            ]);
        }
    }
    (attempts, kept)
}

/// The calls' notifications, when sent (a uid repeated: its last row), and the mirrored
/// calls whose stored ones they replace.
fn notifications_batch(pending: &[Pending<'_>]) -> (Batch, Vec<String>) {
    let mut notifications = Batch::new(&NOTIFICATIONS);
    let mut replaced = Vec::new();
    for p in pending {
        let Some(sent) = p.call.notifications() else {
            continue;
        };
        if p.mirror {
            replaced.push(p.row.uid.clone());
        }
        for n in last_of_each(sent, |n| n.uid) {
            let (uid, status, count, delivered, extra) = rows::notification(n);
            notifications.push(vec![
                p.id(),
                Cell::Text(Some(uid)),
                text(Some(&p.row.uid)),
                Cell::Text(status),
                Cell::Int(count),
                Cell::Text(delivered),
                Cell::Text(extra),
            ]);
        }
    }
    (notifications, replaced)
}

/// An attempt's list of children (outcomes or variables) as rows: the item's uid, then its
/// own columns.
type Items = Vec<(String, Vec<Cell>)>;

/// The outcomes and variables of each attempt whose list was sent, two lists written alike,
/// each row led by the item's uid, its attempt's and its call's, then the item's own columns;
/// with the mirrored calls' attempts whose lists they replace.
fn attempt_children(pending: &[Pending<'_>]) -> [(Batch, Replaced); 2] {
    let mut children = [
        (Batch::new(&OUTCOMES), Replaced::default()),
        (Batch::new(&VARIABLES), Replaced::default()),
    ];
    for p in pending {
        let Some(sent) = p.call.outbound_call_attempts.as_deref() else {
            continue;
        };
        for (attempt_id, a) in p.written_attempts() {
            let Some(uid) = sent
                .get(usize::try_from(a.position).unwrap_or(usize::MAX))
                .map(|s| s.uid)
            else {
                continue;
            };
            for ((batch, replaced), items) in children.iter_mut().zip(sent_lists(sent, uid)) {
                let Some(items) = items else {
                    continue;
                };
                if p.mirror {
                    replaced.calls.push(p.row.uid.clone());
                    replaced.attempts.push(a.uid.clone());
                }
                for (item, own) in items {
                    let mut row = vec![
                        p.id(),
                        Cell::Int(attempt_id),
                        Cell::Text(Some(item)),
                        text(Some(&a.uid)),
                        text(Some(&p.row.uid)),
                    ];
                    row.extend(own);
                    batch.push(row);
                }
            }
        }
    }
    children
}

/// The outcomes and the variables of the attempt `uid`, each as the last occurrence of the
/// uid that sent its list has it (a uid repeated within a list: its last item); `None` for a
/// list not sent.
fn sent_lists(sent: &[Attempt], uid: Uuid) -> [Option<Items>; 2] {
    let same = sent.iter().filter(|s| s.uid == uid);
    let outcomes = same
        .clone()
        .filter_map(|s| s.call_outcomes.as_ref())
        .next_back()
        .map(|list| {
            last_of_each(list, |o| o.uid)
                .into_iter()
                .map(|o| {
                    let (uid, name, created_at, extra) = rows::outcome(o);
                    (
                        uid,
                        vec![
                            Cell::Text(Some(name)),
                            Cell::Text(created_at),
                            Cell::Text(extra),
                        ],
                    )
                })
                .collect()
        });
    let variables = same
        .filter_map(|s| s.call_attempts_variables.as_ref())
        .next_back()
        .map(|list| {
            last_of_each(list, |v| v.uid)
                .into_iter()
                .map(|v| {
                    let (uid, name, value, status, created_at, extra) = rows::variable(v);
                    let own = vec![
                        Cell::Text(Some(name)),
                        Cell::Text(value),
                        Cell::Text(status),
                        Cell::Text(created_at),
                        Cell::Text(extra),
                    ];
                    (uid, own)
                })
                .collect()
        });
    [outcomes, variables]
}

/// The items whose key appears last among those with that key, in their order.
fn last_of_each<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    (last_indices(items, key).into_iter())
        .map(|i| &items[i])
        .collect()
}

/// [`last_of_each`], as indices into `items`.
fn last_indices<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<usize> {
    let mut last: HashMap<K, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    (items.iter().enumerate())
        .filter(|(i, item)| last.get(&key(item)) == Some(i))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::write_plan::rows_of;
    use serde_json::json;

    const CALL: &str = "6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11";
    const FIRST: &str = "9b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11";
    const SECOND: &str = "9b2e7a55-2222-4c0b-9f39-0d3c5a3f2b11";

    /// A call with two attempts: the first sends its outcomes and variables, the second only
    /// its (empty) outcomes.
    fn call() -> OutboundCall {
        serde_json::from_value(json!({
            "uid": CALL, "status": "completed", "is_test_call": false,
            "created_at": "2026-01-31T09:00:00Z", "updated_at": "2026-01-31T09:05:00Z",
            "outbound_call_info": {"phone_number": "15550100", "custom_parameters": {"plan": "gold"}},
            "outbound_call_attempts": [
                {"uid": FIRST, "status": "hangup",
                 "call_outcomes": [{"uid": "0b2e7a55-3333-4c0b-9f39-0d3c5a3f2b11", "name": "sale"}],
                 "call_attempts_variables": [
                     {"uid": "0b2e7a55-4444-4c0b-9f39-0d3c5a3f2b11", "name": "callback", "value": true}]},
                {"uid": SECOND, "status": "busy", "call_outcomes": []}
            ],
            "call_notifications": [{"uid": "0b2e7a55-5555-4c0b-9f39-0d3c5a3f2b11", "status": "sent"}]
        }))
        .unwrap()
    }

    /// The rows of `call()` written alone, stored before (`was_stored`) or not, with the
    /// ids `reserved` (if any).
    fn rows_with(was_stored: bool, reserved: Option<&Reserved>) -> RoundRows {
        let calls = [call()];
        let schedule = Uuid::nil().to_string();
        let call_rows = rows_of(&schedule, &calls, &[7]);
        round_rows(
            &calls,
            &call_rows,
            &[(0, was_stored)],
            reserved,
            "2026-01-31T10:00:00.000000Z",
        )
    }

    fn rows(was_stored: bool) -> RoundRows {
        rows_with(was_stored, None)
    }

    fn reserved(calls: usize, attempts: usize) -> Reserved {
        Reserved {
            calls: (10..).take(calls).collect(),
            attempts: (20..).take(attempts).collect(),
        }
    }

    #[test]
    fn a_new_call_is_inserted_with_the_ids_reserved_in_order() {
        let round = rows_with(false, Some(&reserved(1, 2)));
        assert!(round.write == Write::Insert);
        assert_eq!(round.calls.ints("id"), [Some(10)]);
        assert_eq!(round.parameters.ints("call_id"), [Some(10)]);
        assert_eq!(round.attempts.ints("id"), [Some(20), Some(21)]);
        assert_eq!(round.attempts.ints("call_id"), [Some(10), Some(10)]);
        assert_eq!(round.notifications.ints("call_id"), [Some(10)]);
        let [(outcomes, _), (variables, _)] = &round.lists;
        for list in [outcomes, variables] {
            assert_eq!(list.ints("call_id"), [Some(10)], "{}", list.table.name);
            assert_eq!(list.ints("attempt_id"), [Some(20)], "{}", list.table.name);
        }
    }

    #[test]
    fn a_stored_call_or_too_few_ids_is_upserted_with_ids_found_by_the_server() {
        for round in [
            rows_with(true, Some(&reserved(1, 2))),
            rows_with(false, Some(&reserved(1, 1))),
            rows_with(false, Some(&reserved(0, 2))),
            rows(false),
        ] {
            assert!(round.write == Write::Upsert);
            assert_eq!(round.calls.ints("id"), [None]);
            assert_eq!(round.attempts.ints("id"), [None, None]);
            assert_eq!(round.attempts.ints("call_id"), [None, None]);
        }
    }

    #[test]
    fn a_stored_call_names_by_uid_what_its_write_replaces_and_keeps() {
        let round = rows(true);
        let lens = |b: &Batch| b.len;
        assert_eq!(
            [
                &round.calls,
                &round.parameters,
                &round.attempts,
                &round.notifications
            ]
            .map(lens),
            [1, 1, 2, 1]
        );
        assert_eq!(round.mirrored, [CALL]);
        assert_eq!(round.kept.calls, [CALL]);
        assert_eq!(round.kept.of_calls, [CALL, CALL]);
        assert_eq!(round.kept.uids, [FIRST, SECOND]);
        assert_eq!(round.notified, [CALL]);
        let [(outcomes, outcome_lists), (variables, variable_lists)] = &round.lists;
        assert_eq!((outcomes.len, variables.len), (1, 1));
        // Both attempts sent their outcomes (the second an empty list, which empties it); only
        // the first sent its variables, so the second's stored ones stay.
        assert_eq!(outcome_lists.calls, [CALL, CALL]);
        assert_eq!(outcome_lists.attempts, [FIRST, SECOND]);
        assert_eq!(variable_lists.calls, [CALL]);
        assert_eq!(variable_lists.attempts, [FIRST]);
        // The summary reads the attempts, their outcomes and the notifications, all sent.
        assert!(round.unknown.is_empty());
    }

    #[test]
    fn a_new_call_replaces_nothing() {
        let round = rows(false);
        assert!(round.mirrored.is_empty() && round.notified.is_empty());
        assert!(round.kept.calls.is_empty() && round.kept.uids.is_empty());
        for (batch, replaced) in &round.lists {
            assert_eq!(batch.len, 1, "{}", batch.table.name);
            assert!(replaced.calls.is_empty() && replaced.attempts.is_empty());
        }
        assert!(
            round.unknown.is_empty(),
            "a new call's summary is the one sent"
        );
    }

    #[test]
    fn the_last_of_each_key_keeps_its_place() {
        let items = [(1, 'a'), (2, 'b'), (1, 'c'), (3, 'd')];
        let got: Vec<char> = last_of_each(&items, |i| i.0).iter().map(|i| i.1).collect();
        assert_eq!(got, ['b', 'c', 'd']);
    }
}
