//! `RecentRows`: the rows a pass handed to the sink that its walk may list again.

use std::collections::HashMap;

use uuid::Uuid;

use crate::service::{OutboundCall, Timestamp};

/// Rows this pass has already handed to the sink that the walk may list again (those at
/// or after its position: keyset overlap and tie groups). A re-listed row whose list item is
/// identical needs neither a detail request nor a write. Pruned as the position advances,
/// so it holds a tie group or a quiet run (32 pages) at most, whatever the number of calls.
#[derive(Default)]
pub(super) struct RecentRows {
    rows: HashMap<Uuid, (Timestamp, u64)>,
}

impl RecentRows {
    /// Whether `call` was handed on identical already (so that its list item needs nothing).
    pub(super) fn handed_over(&self, call: &OutboundCall) -> bool {
        // Hashed only when the call is there at all: most of a walk's calls are not.
        self.rows.contains_key(&call.uid)
            && self.holds(call.uid, call.updated_at, call.content_hash())
    }

    /// Whether the call `uid` was handed on stamped `at` or later: a listing of it at `at`
    /// that does not fit adds nothing to what the pass wrote.
    pub(super) fn handed_over_since(&self, uid: Uuid, at: Timestamp) -> bool {
        self.rows
            .get(&uid)
            .is_some_and(|(stamped, _)| *stamped >= at)
    }

    /// Whether the call `uid` was handed on as stamped `at` with content `hash`.
    fn holds(&self, uid: Uuid, at: Timestamp, hash: u64) -> bool {
        self.rows.get(&uid) == Some(&(at, hash))
    }

    /// The calls not already handed on identical, with their content hashes.
    pub(super) fn keep_fresh(
        &mut self,
        calls: Vec<OutboundCall>,
        position: Timestamp,
    ) -> (Vec<OutboundCall>, Vec<u64>) {
        let hashes: Vec<u64> = calls.iter().map(OutboundCall::content_hash).collect();
        let fresh: Vec<bool> = calls
            .iter()
            .zip(&hashes)
            .map(|(call, hash)| !self.holds(call.uid, call.updated_at, *hash))
            .collect();
        // Only rows at or after the new position can be listed again.
        self.rows.retain(|_, (at, _)| *at >= position);
        for (call, hash) in calls.iter().zip(&hashes) {
            if call.updated_at >= position {
                self.rows.insert(call.uid, (call.updated_at, *hash));
            }
        }
        calls
            .into_iter()
            .zip(hashes)
            .zip(fresh)
            .filter_map(|(kept, fresh)| fresh.then_some(kept))
            .unzip()
    }
}
