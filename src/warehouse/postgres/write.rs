//! A page and its checkpoint in one PostgreSQL transaction, each table written by ONE
//! statement: the page's rows go as arrays (`unnest($1::text[], …)`, binary protocol), upserted
//! with `ON CONFLICT`, so a page costs a dozen round trips whatever its size.
//!
//! The rule is every destination's (`warehouse/write_plan.rs`): which calls are written, in
//! which round, how their children mirror the service and whether their summary is known.
//! One statement cannot touch a row twice, where row-by-row writes let the last one win: so a
//! call listed twice in a page goes into a second round of statements (the plan's rounds), and a child
//! uid repeated within a call keeps its last row (and an attempt's last sent list of outcomes
//! or variables), which is what the row-by-row writes leave.
//!
//! A page is written only under its schedule's claim, and its transaction begins with the
//! claim's fence (`claim.rs`): a process that lost its claim, even without knowing it, never
//! commits a page after another process claimed the schedule.

use std::collections::HashMap;

use uuid::Uuid;

use super::PgWarehouse;
use super::batch::{
    ATTEMPTS, Batch, CALLS, NOTIFICATIONS, OUTCOMES, PARAMETERS, V, VARIABLES, t, upsert_sql,
};
use super::claim::READ_FENCE;
use super::runs::ADVANCE_CHECKPOINT;
use super::session::{PgContext, RowColumn, micros, wait};
use crate::service::{OutboundCall, Timestamp};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::rows::{self, AttemptRow, CallRow};
use crate::warehouse::write_plan::{
    Fingerprint, PageWrite, plan, repeats_a_child_uid, rows_of, sends_every_child_list,
};

/// A call of the round being written, with what its write needs.
struct Pending<'p> {
    call: &'p OutboundCall,
    row: &'p CallRow<'p>,
    attempts: Vec<AttemptRow>,
    /// Children the service no longer shows are deleted.
    mirror: bool,
    /// The summary computed from the children sent is the stored one.
    summary_known: bool,
}

impl PgWarehouse {
    /// Writes `calls` of `schedule` and, when given, moves its checkpoint forward — all or
    /// nothing (see the SQLite warehouse's `write_hashed_page`).
    pub fn write_hashed_page(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        content_hashes: &[u64],
        checkpoint: Option<Timestamp>,
        synced_at: Timestamp,
    ) -> Result<PageWrite, WarehouseError> {
        self.reconnect_if_closed()?;
        let generation = self.locks.fence(schedule)?;
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        wait(self.client().batch_execute("BEGIN"))
            .pg(&self.target, "starting a page transaction")?;
        let result = (|| {
            self.check_fence(schedule, generation)?;
            let stored = self.stored_fingerprints(calls)?;
            let plan = plan(calls, &call_rows, stored, schedule);
            let (written, rounds) = (plan.counts, plan.rounds());
            let synced_at = synced_at.to_sqlite();
            for round in rounds {
                self.write_round(calls, &call_rows, &round, &synced_at)?;
            }
            if let Some(cursor) = checkpoint {
                let statement = self.statement(ADVANCE_CHECKPOINT, "saving a checkpoint")?;
                wait(self.client().execute(
                    &statement,
                    &[&schedule, &micros(cursor), &micros(Timestamp::now())],
                ))
                .pg(&self.target, "saving a checkpoint")?;
            }
            Ok(written)
        })();
        self.end_transaction(result, "committing a page")
    }

    /// The page's fence (`claim.rs`), first in its transaction: `schedule`'s fencing token is
    /// still `generation`, the one this process's claim took, and stays so until the page
    /// commits (the row is locked `FOR SHARE`: another process's claim waits for the commit).
    /// Else another process has claimed the schedule since, and the page is refused.
    fn check_fence(&self, schedule: Uuid, generation: i64) -> Result<(), WarehouseError> {
        let step = "checking the schedule's fence";
        let statement = self.statement(READ_FENCE, step)?;
        let current: Option<i64> = wait(self.client().query_opt(&statement, &[&schedule]))
            .pg(&self.target, step)?
            .map(|row| row.column(0, &self.target, step))
            .transpose()?;
        if current == Some(generation) {
            return Ok(());
        }
        tracing::warn!(
            %schedule,
            held = generation,
            now = ?current,
            "another process claimed the schedule since this one did; the page is not written"
        );
        Err(self.locks.taken_over(schedule))
    }

    /// How many of `calls` `write_hashed_page` would write; writes nothing.
    pub fn count_changes(
        &mut self,
        schedule: Uuid,
        calls: &[OutboundCall],
        content_hashes: &[u64],
    ) -> Result<u64, WarehouseError> {
        self.reconnect_if_closed()?;
        let schedule_uid = schedule.to_string();
        let call_rows = rows_of(&schedule_uid, calls, content_hashes);
        let stored = self.stored_fingerprints(calls)?;
        Ok(plan(calls, &call_rows, stored, schedule)
            .counts
            .calls_written)
    }

    /// `uid → (content_hash, schedule_uid)` of the page's stored calls: one query.
    fn stored_fingerprints(
        &mut self,
        calls: &[OutboundCall],
    ) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
        let uids: Vec<Uuid> = calls.iter().map(|c| c.uid).collect();
        let statement = self.statement(
            "SELECT uid, content_hash, schedule_uid FROM calls WHERE uid = ANY($1)",
            "reading the page's stored calls",
        )?;
        let found = wait(self.client().query(&statement, &[&uids]))
            .pg(&self.target, "reading the page's stored calls")?;
        found
            .iter()
            .map(|r| {
                let fingerprint = Fingerprint {
                    content_hash: r.try_get(1)?,
                    schedule: r.try_get(2)?,
                };
                Ok((r.try_get(0)?, fingerprint))
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .pg(&self.target, "reading the page's stored calls")
    }

    /// Writes the calls `round` names (indexes into `calls`, each with whether it was stored):
    /// no uid twice.
    fn write_round(
        &mut self,
        calls: &[OutboundCall],
        call_rows: &[CallRow<'_>],
        round: &[(usize, bool)],
        synced_at: &str,
    ) -> Result<(), WarehouseError> {
        let pending: Vec<Pending<'_>> = round
            .iter()
            .map(|&(i, was_stored)| {
                let call = &calls[i];
                let repeats = repeats_a_child_uid(call);
                Pending {
                    call,
                    row: &call_rows[i],
                    attempts: call
                        .outbound_call_attempts
                        .iter()
                        .flatten()
                        .enumerate()
                        .map(|(position, a)| rows::attempt(position, a))
                        .collect(),
                    mirror: was_stored || repeats,
                    summary_known: !repeats && (!was_stored || sends_every_child_list(call)),
                }
            })
            .collect();
        let ids = self.upsert_calls(&pending, synced_at)?;
        let id_of = |p: &Pending<'_>| ids.get(&p.call.uid).copied().unwrap_or_default();
        let mirrored: Vec<i64> = pending.iter().filter(|p| p.mirror).map(id_of).collect();

        // Custom parameters: always sent (a map), replaced whole when mirrored.
        self.delete_of_calls("call_custom_parameters", &mirrored)?;
        let mut parameters = Batch::new(&PARAMETERS);
        for p in &pending {
            for (name, value) in rows::custom_parameters(p.call) {
                parameters.push(vec![
                    V::I(Some(id_of(p))),
                    t(Some(&p.row.uid)),
                    t(Some(name)),
                    V::T(value),
                ]);
            }
        }
        self.run(&parameters, "", "writing custom parameters")?;

        // Attempts: those sent, upserted (so an attempt keeps its id); a mirrored call's
        // others deleted with their outcomes and variables.
        let sending: Vec<&Pending<'_>> = pending
            .iter()
            .filter(|p| p.call.outbound_call_attempts.is_some())
            .collect();
        let (mut keep_calls, mut keep_ids, mut keep_uids) = (Vec::new(), Vec::new(), Vec::new());
        let mut attempts = Batch::new(&ATTEMPTS);
        for p in &sending {
            let call_id = id_of(p);
            if p.mirror {
                keep_calls.push(call_id);
                for a in &p.attempts {
                    keep_ids.push(call_id);
                    keep_uids.push(a.uid.clone());
                }
            }
            for a in last_of_each(&p.attempts, |a| a.uid.as_str()) {
                attempts.push(vec![
                    t(Some(&a.uid)),
                    V::I(Some(call_id)),
                    t(Some(&p.row.uid)),
                    V::I(Some(a.position)),
                    t(Some(&a.status)),
                    V::T(a.started_at.clone()),
                    V::T(a.answered_at.clone()),
                    V::T(a.ended_at.clone()),
                    V::I(a.duration),
                    V::T(a.created_at.clone()),
                    V::T(a.updated_at.clone()),
                    V::T(a.error_details.clone()),
                    V::T(a.transfer_started_at.clone()),
                    V::T(a.transfer_answered_at.clone()),
                    V::T(a.transfer_destination.clone()),
                    V::T(a.extra.clone()),
                ]);
            }
        }
        if !keep_calls.is_empty() {
            let statement = self.statement(
                "WITH gone AS (
                   DELETE FROM call_attempts WHERE call_id = ANY($1)
                     AND (call_id, uid) NOT IN
                       (SELECT k.c, k.u::uuid FROM unnest($2::int8[], $3::text[]) AS k(c, u))
                   RETURNING call_id, id),
                 outcomes AS (
                   DELETE FROM attempt_outcomes AS x USING gone
                   WHERE x.call_id = gone.call_id AND x.attempt_id = gone.id)
                 DELETE FROM attempt_variables AS x USING gone
                 WHERE x.call_id = gone.call_id AND x.attempt_id = gone.id",
                "deleting attempts the service no longer shows",
            )?;
            wait(
                self.client()
                    .execute(&statement, &[&keep_calls, &keep_ids, &keep_uids]),
            )
            .pg(
                &self.target,
                "deleting attempts the service no longer shows",
            )?;
        }
        let attempt_ids: HashMap<(i64, Uuid), i64> = self
            .run(&attempts, "RETURNING call_id, uid, id", "writing attempts")?
            .iter()
            .map(|r| Ok(((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?)))
            .collect::<Result<_, tokio_postgres::Error>>()
            .pg(&self.target, "writing attempts")?;

        // Outcomes and variables of each attempt whose list was sent: two lists written
        // alike, each row led by the call, the attempt and the item's uid, then the item's
        // own columns.
        let mut children = [
            (Batch::new(&OUTCOMES), Vec::new(), "writing outcomes"),
            (Batch::new(&VARIABLES), Vec::new(), "writing variables"),
        ];
        for p in &sending {
            let call_id = id_of(p);
            let sent = p.call.outbound_call_attempts.as_deref().unwrap_or_default();
            for (index, a) in last_of_each(&p.attempts, |a| a.uid.as_str())
                .into_iter()
                .map(|a| (a.position, a))
            {
                let uid = sent
                    .get(usize::try_from(index).unwrap_or(usize::MAX))
                    .map(|s| s.uid);
                let Some(attempt_id) = uid.and_then(|u| attempt_ids.get(&(call_id, u)).copied())
                else {
                    continue;
                };
                // The last occurrence of the uid that sent each list: (item uid, the item's
                // other columns) per item.
                let same = sent.iter().filter(|s| Some(s.uid) == uid);
                let outcomes = same
                    .clone()
                    .filter_map(|s| s.call_outcomes.as_ref())
                    .next_back()
                    .map(|list| {
                        last_of_each(list, |o| o.uid)
                            .into_iter()
                            .map(|o| {
                                let (uid, name, created_at, extra) = rows::outcome(o);
                                (uid, vec![V::T(Some(name)), V::T(created_at), V::T(extra)])
                            })
                            .collect::<Vec<_>>()
                    });
                let variables = same
                    .filter_map(|s| s.call_attempts_variables.as_ref())
                    .next_back()
                    .map(|list| {
                        last_of_each(list, |v| v.uid)
                            .into_iter()
                            .map(|v| {
                                let (uid, name, value, status, created_at, extra) =
                                    rows::variable(v);
                                (
                                    uid,
                                    vec![
                                        V::T(Some(name)),
                                        V::T(value),
                                        V::T(status),
                                        V::T(created_at),
                                        V::T(extra),
                                    ],
                                )
                            })
                            .collect()
                    });
                for ((batch, replaced, _), items) in children.iter_mut().zip([outcomes, variables])
                {
                    let Some(items) = items else {
                        continue;
                    };
                    if p.mirror {
                        replaced.push((call_id, attempt_id));
                    }
                    for (uid, own) in items {
                        let mut row = vec![
                            V::I(Some(call_id)),
                            V::I(Some(attempt_id)),
                            V::T(Some(uid)),
                            t(Some(&a.uid)),
                            t(Some(&p.row.uid)),
                        ];
                        row.extend(own);
                        batch.push(row);
                    }
                }
            }
        }
        for (batch, replaced, step) in &children {
            self.delete_of_attempts(batch.table.name, replaced)?;
            self.run(batch, "", step)?;
        }

        // Notifications, when sent.
        let mut notifications = Batch::new(&NOTIFICATIONS);
        let mut replaced = Vec::new();
        for p in &pending {
            let Some(sent) = p.call.notifications() else {
                continue;
            };
            if p.mirror {
                replaced.push(id_of(p));
            }
            for n in last_of_each(sent, |n| n.uid) {
                let (uid, status, count, delivered, extra) = rows::notification(n);
                notifications.push(vec![
                    V::I(Some(id_of(p))),
                    V::T(Some(uid)),
                    t(Some(&p.row.uid)),
                    V::T(status),
                    V::I(count),
                    V::T(delivered),
                    V::T(extra),
                ]);
            }
        }
        self.delete_of_calls("call_notifications", &replaced)?;
        self.run(&notifications, "", "writing notifications")?;

        let unknown: Vec<i64> = pending
            .iter()
            .filter(|p| !p.summary_known)
            .map(id_of)
            .collect();
        self.summarize(&unknown)
    }

    /// Upserts the calls' rows with their summaries; returns their ids by uid.
    fn upsert_calls(
        &mut self,
        pending: &[Pending<'_>],
        synced_at: &str,
    ) -> Result<HashMap<Uuid, i64>, WarehouseError> {
        let mut batch = Batch::new(&CALLS);
        for p in pending {
            let r = p.row;
            let notification_count = p.call.notifications().map_or(0, <[_]>::len);
            let s = rows::summary(
                p.call,
                &p.attempts,
                i64::try_from(notification_count).unwrap_or(i64::MAX),
            );
            batch.push(vec![
                t(Some(&r.uid)),
                t(Some(r.schedule_uid)),
                t(r.external_id),
                t(Some(r.status)),
                t(r.progress),
                V::B(r.is_test_call),
                V::T(r.cooldown_until.clone()),
                V::T(r.delay.clone()),
                V::T(r.priority.clone()),
                V::I(r.attempts_remaining),
                V::T(r.retry_intervals.clone()),
                V::T(Some(r.created_at.clone())),
                V::T(Some(r.updated_at.clone())),
                t(r.phone_number),
                V::T(r.phone_e164.clone()),
                t(r.full_name),
                t(r.first_name),
                t(r.last_name),
                t(r.phonetic_full_name),
                t(r.phonetic_first_name),
                t(r.phonetic_last_name),
                t(r.email),
                V::T(r.event_date_time.clone()),
                V::T(r.extra.clone()),
                V::I(Some(r.content_hash)),
                t(Some(synced_at)),
                V::I(Some(s.attempt_count)),
                V::T(s.last_attempt_uid),
                V::T(s.last_attempt_status),
                V::T(s.last_attempt_started_at),
                V::T(s.last_attempt_answered_at),
                V::T(s.last_attempt_ended_at),
                V::I(s.last_attempt_duration),
                V::T(s.outcome_names),
                V::B(Some(s.answered)),
                V::B(Some(s.transferred)),
                V::I(Some(s.notification_count)),
            ]);
        }
        self.run(&batch, "RETURNING uid, id", "writing calls")?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, tokio_postgres::Error>>()
            .pg(&self.target, "writing calls")
    }

    /// Runs `batch`'s upsert (nothing for an empty batch), returning what `returning` asks.
    fn run(
        &mut self,
        batch: &Batch,
        returning: &str,
        step: &'static str,
    ) -> Result<Vec<tokio_postgres::Row>, WarehouseError> {
        if batch.len == 0 {
            return Ok(Vec::new());
        }
        let statement = self.statement(&upsert_sql(batch.table, returning), step)?;
        wait(self.client().query(&statement, &batch.params())).pg(&self.target, step)
    }

    /// Deletes `table`'s rows of the calls `ids` (compile-time table names only).
    fn delete_of_calls(&mut self, table: &'static str, ids: &[i64]) -> Result<(), WarehouseError> {
        if ids.is_empty() {
            return Ok(());
        }
        let statement = self.statement(
            &format!("DELETE FROM {table} WHERE call_id = ANY($1)"),
            "deleting children the service no longer shows",
        )?;
        wait(self.client().execute(&statement, &[&ids])).pg(
            &self.target,
            "deleting children the service no longer shows",
        )?;
        Ok(())
    }

    /// Deletes `table`'s rows of the attempts `(call_id, attempt_id)`.
    fn delete_of_attempts(
        &mut self,
        table: &'static str,
        attempts: &[(i64, i64)],
    ) -> Result<(), WarehouseError> {
        if attempts.is_empty() {
            return Ok(());
        }
        let (calls, ids): (Vec<i64>, Vec<i64>) = attempts.iter().copied().unzip();
        let statement = self.statement(
            &format!(
                "DELETE FROM {table} WHERE (call_id, attempt_id) IN
                   (SELECT * FROM unnest($1::int8[], $2::int8[]))"
            ),
            "deleting children the service no longer shows",
        )?;
        wait(self.client().execute(&statement, &[&calls, &ids])).pg(
            &self.target,
            "deleting children the service no longer shows",
        )?;
        Ok(())
    }

    /// Recomputes the summary columns of the calls `ids` from their child rows: the SQLite
    /// warehouse's `summarize`, with its orderings spelt out (NULLs as SQLite sorts them,
    /// names byte by byte).
    fn summarize(&mut self, ids: &[i64]) -> Result<(), WarehouseError> {
        if ids.is_empty() {
            return Ok(());
        }
        for (sql, step) in [
            (
                "UPDATE calls SET
                   attempt_count = (SELECT count(*) FROM call_attempts WHERE call_id = calls.id),
                   last_attempt_uid = (SELECT uid FROM call_attempts WHERE call_id = calls.id
                       ORDER BY coalesce(started_at, created_at) DESC NULLS LAST, position DESC
                       LIMIT 1),
                   answered = EXISTS (SELECT 1 FROM call_attempts
                       WHERE call_id = calls.id AND answered_at IS NOT NULL),
                   transferred = EXISTS (SELECT 1 FROM call_attempts
                       WHERE call_id = calls.id AND transfer_started_at IS NOT NULL),
                   notification_count =
                       (SELECT count(*) FROM call_notifications WHERE call_id = calls.id),
                   outcome_names = (SELECT string_agg(name, ', '
                           ORDER BY first_position, first_at NULLS FIRST, name COLLATE \"C\")
                       FROM (SELECT o.name AS name, min(a.position) AS first_position,
                               min(o.created_at) AS first_at
                             FROM attempt_outcomes AS o
                             JOIN call_attempts AS a ON a.id = o.attempt_id
                             WHERE o.call_id = calls.id
                             GROUP BY o.name) AS g)
                 WHERE id = ANY($1)",
                "summarising calls' attempts",
            ),
            (
                "UPDATE calls SET
                   (last_attempt_status, last_attempt_started_at, last_attempt_answered_at,
                    last_attempt_ended_at, last_attempt_duration) =
                   (SELECT status, started_at, answered_at, ended_at, duration
                    FROM call_attempts WHERE call_id = calls.id AND uid = calls.last_attempt_uid)
                 WHERE id = ANY($1)",
                "summarising calls' last attempts",
            ),
        ] {
            let statement = self.statement(sql, step)?;
            wait(self.client().execute(&statement, &[&ids])).pg(&self.target, step)?;
        }
        Ok(())
    }
}

/// The items whose key appears last among those with that key, in their order.
fn last_of_each<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    let mut last: HashMap<K, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    items
        .iter()
        .enumerate()
        .filter(|(i, item)| last.get(&key(item)) == Some(i))
        .map(|(_, item)| item)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_of_each_key_keeps_its_place() {
        let items = [(1, 'a'), (2, 'b'), (1, 'c'), (3, 'd')];
        let got: Vec<char> = last_of_each(&items, |i| i.0).iter().map(|i| i.1).collect();
        assert_eq!(got, ['b', 'c', 'd']);
    }
}
