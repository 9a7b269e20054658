//! An idle pass's pages, read rather than written. Such a page changes nothing: its calls are
//! stored as they are, its checkpoint stays. So a pass that opened with a checkpoint reads its
//! pages first outside a transaction (the stored fingerprints, one statement, against the
//! cursor it opened with), and writes nothing for one that changes nothing: nothing is
//! written, so there is nothing to fence or commit. Its first page that changes something is
//! written as any other, and so are its pages after it (a round trip more for that one page,
//! where an idle page saves one and four statements).

use std::collections::HashMap;
use std::sync::PoisonError;

use uuid::Uuid;

use crate::service::{OutboundCall, Timestamp};
use crate::warehouse::error::WarehouseError;
use crate::warehouse::postgres::PgWarehouse;
use crate::warehouse::postgres::session::{PgContext, micros, wait};
use crate::warehouse::rows::CallRow;
use crate::warehouse::write_plan::{Fingerprint, PageWrite, plan};

pub(super) const READ_FINGERPRINTS: &str =
    "SELECT uid, content_hash, schedule_uid FROM calls WHERE uid = ANY($1)";

impl PgWarehouse {
    /// Notes the cursor of the checkpoint `schedule`'s pass opened with, if any: then its
    /// pages are read first, as long as they change nothing ([`Self::unchanged_given`]).
    pub(in crate::warehouse::postgres) fn expect_quiet(
        &self,
        schedule: Uuid,
        opened_at: Option<Timestamp>,
    ) {
        let mut expected = self.quiet.lock().unwrap_or_else(PoisonError::into_inner);
        match opened_at {
            Some(cursor) => expected.insert(schedule, cursor),
            None => expected.remove(&schedule),
        };
    }

    /// The cursor `schedule`'s pass opened with, while its pages have changed nothing.
    pub(in crate::warehouse::postgres) fn quiet_expected(
        &self,
        schedule: Uuid,
    ) -> Option<Timestamp> {
        let expected = self.quiet.lock().unwrap_or_else(PoisonError::into_inner);
        expected.get(&schedule).copied()
    }

    /// Given the page's stored fingerprints (read in one statement outside a transaction,
    /// for it alone or with a group's pages): the page's counts when no call of it changed
    /// and its checkpoint would not move `opened_at`, the cursor the pass opened with (the
    /// write would change nothing); else `None`, and the schedule's pages are written in a
    /// transaction from now on.
    ///
    /// `opened_at` stands for the stored cursor, not read again: a page that changes nothing
    /// leaves it as it was, the claim keeps every other process's pass and `checkpoint`
    /// command from moving it meanwhile, and this process's `replace_checkpoint` forgets it.
    /// A claim lost unknowingly changes nothing: then no write of this process commits (the
    /// fence refuses it), and an unchanged page writes nothing either.
    pub(in crate::warehouse::postgres) fn unchanged_given(
        &self,
        schedule: Uuid,
        calls: &[OutboundCall],
        call_rows: &[CallRow<'_>],
        checkpoint: Option<Timestamp>,
        opened_at: Timestamp,
        stored: HashMap<Uuid, Fingerprint>,
    ) -> Option<PageWrite> {
        let plan = plan(calls, call_rows, stored, schedule);
        // `ADVANCE_CHECKPOINT` moves it only forward, compared to the microsecond.
        let stays = checkpoint.is_none_or(|c| micros(opened_at) >= micros(c));
        if plan.calls.is_empty() && plan.conflicts.is_empty() && stays {
            return Some(plan.counts);
        }
        self.expect_quiet(schedule, None);
        None
    }

    /// The stored fingerprints of `calls`: one statement.
    pub(in crate::warehouse::postgres) fn stored_calls(
        &self,
        calls: &[OutboundCall],
    ) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
        let uids: Vec<Uuid> = calls.iter().map(|c| c.uid).collect();
        self.stored_of(&uids)
    }

    /// The stored fingerprints of the calls `uids`: one statement.
    pub(in crate::warehouse::postgres) fn stored_of(
        &self,
        uids: &[Uuid],
    ) -> Result<HashMap<Uuid, Fingerprint>, WarehouseError> {
        let step = "reading the page's stored calls";
        let statement = self.statement(READ_FINGERPRINTS, step)?;
        let rows = wait(self.client()?.query(&statement, &[&uids])).pg(&self.target, step)?;
        stored_fingerprints(&rows).pg(&self.target, step)
    }
}

/// The stored fingerprints of `calls`, among those of a group's pages.
pub(in crate::warehouse::postgres) fn stored_among(
    stored: &HashMap<Uuid, Fingerprint>,
    calls: &[OutboundCall],
) -> HashMap<Uuid, Fingerprint> {
    (calls.iter())
        .filter_map(|c| stored.get(&c.uid).map(|f| (c.uid, *f)))
        .collect()
}

/// `uid → (content_hash, schedule_uid)` of the page's stored calls, from their rows.
pub(super) fn stored_fingerprints(
    rows: &[tokio_postgres::Row],
) -> Result<HashMap<Uuid, Fingerprint>, tokio_postgres::Error> {
    rows.iter()
        .map(|r| {
            let fingerprint = Fingerprint {
                content_hash: r.try_get(1)?,
                schedule: r.try_get(2)?,
            };
            Ok((r.try_get(0)?, fingerprint))
        })
        .collect()
}
