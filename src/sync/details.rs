//! A page's details fetched with it: once a list request has answered, the detail request of
//! each of its items that needs one (`sync.details`) goes out at once, still in the page's
//! fetch, so that the details of the pages asked ahead of the walk ([`super::ahead`]) are in
//! flight together instead of one page's after another's.
//!
//! The details fetched are a cache, never the judge of what is written: the walk decides
//! which calls of a page it keeps (`RecentRows::keep_fresh`, once the page is accepted in
//! its turn), and completes those from the cache, asking then for any detail the fetch did
//! not (an item it took for one handed over already). A detail is always asked after its
//! list item was served, as when it was asked in turn; one older than its item all the same
//! (the spec promises nothing about the two endpoints' consistency) fails the pass when it
//! is completed (`Pass::complete`, `SyncError::DetailBehindList`).
//!
//! Bounded twice: a walk's detail requests in flight share `api.detail_concurrency` permits
//! (the earliest pages' first: the semaphore is fair), and every request waits its turn in
//! the adaptive limit of requests in flight (`sync.concurrency`) shared by all schedules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;
use uuid::Uuid;

use super::recent::RecentRows;
use crate::api::{ApiClient, ApiError, Counters, Listed};
use crate::config::DetailsMode;
use crate::service::OutboundCall;

/// What a detail is taken to weigh when its response did not say (`Content-Length`): a call
/// with its attempts, outcomes and notifications is a few KiB in JSON.
const DETAIL_BYTES: u64 = 8 * 1024;

/// A list request's answer, with the details fetched for its items.
pub(super) struct Fetched {
    pub(super) listed: Listed,
    pub(super) details: Details,
}

impl Fetched {
    /// An answer without details (a quiet check's, or one of a walk that needs none).
    pub(super) fn listed_only(listed: Listed) -> Self {
        Fetched {
            listed,
            details: Details::default(),
        }
    }

    /// The bytes of its details (as their responses said, or as taken to weigh).
    pub(super) fn detail_bytes(&self) -> u64 {
        self.details.bytes
    }
}

/// Detail answers by call, as fetched with a page.
#[derive(Default)]
pub(super) struct Details {
    answers: HashMap<Uuid, Result<OutboundCall, ApiError>>,
    bytes: u64,
}

impl Details {
    /// Detail requests answered (or failed) for the page.
    pub(super) fn len(&self) -> usize {
        self.answers.len()
    }

    /// The answer fetched for `uid`, if its detail was asked with the page.
    pub(super) fn take(&mut self, uid: Uuid) -> Option<Result<OutboundCall, ApiError>> {
        self.answers.remove(&uid)
    }
}

/// What a walk's page fetches share: which items need a detail, the rows the walk handed
/// over already (whose details are not asked again), and the walk's detail permits.
#[derive(Clone)]
pub(super) struct DetailPlan {
    pub(super) mode: DetailsMode,
    pub(super) recent: Arc<Mutex<RecentRows>>,
    pub(super) permits: Arc<Semaphore>,
}

impl DetailPlan {
    pub(super) fn new(mode: DetailsMode, concurrency: usize) -> Self {
        DetailPlan {
            mode,
            recent: Arc::default(),
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    /// The walk's handed-over rows, for the walk to keep up to date.
    pub(super) fn recent(&self) -> std::sync::MutexGuard<'_, RecentRows> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls of `listed` whose detail is wanted: those that need one and that the walk
    /// has not handed over identical already, as far as it knows when the page answers.
    fn wanted(&self, listed: &Listed) -> Vec<Uuid> {
        let recent = self.recent();
        listed
            .page
            .data
            .iter()
            .filter(|call| needs_detail(call, self.mode) && !recent.handed_over(call))
            .map(|call| call.uid)
            .collect()
    }

    /// The details of `listed`'s items that want one, all asked at once (each waiting for a
    /// permit, then for its turn in the limiter), their answers kept by call. A failure is
    /// kept too: it fails the pass only if the walk keeps that call.
    pub(super) async fn fetch(
        &self,
        client: &ApiClient,
        counters: &Counters,
        listed: Listed,
    ) -> Fetched {
        let wanted = self.wanted(&listed);
        let mut asked: FuturesUnordered<_> = wanted
            .into_iter()
            .map(|uid| async move { (uid, self.ask(client, counters, uid).await) })
            .collect();
        let mut details = Details::default();
        while let Some((uid, answer)) = asked.next().await {
            let answer = answer.map(|(call, bytes)| {
                details.bytes = details.bytes.saturating_add(bytes.unwrap_or(DETAIL_BYTES));
                call
            });
            details.answers.insert(uid, answer);
        }
        Fetched { listed, details }
    }

    /// One detail request, under one of the walk's permits (every detail of a walk takes
    /// one, those asked with a page and those the walk asks later alike).
    pub(super) async fn ask(
        &self,
        client: &ApiClient,
        counters: &Counters,
        uid: Uuid,
    ) -> Result<(OutboundCall, Option<u64>), ApiError> {
        // Never closed: a permit always comes.
        let _permit = self.permits.acquire().await;
        client.get_call_sized(uid, counters).await
    }
}

/// Whether a list item is completed by the detail endpoint's version.
pub(super) fn needs_detail(call: &OutboundCall, mode: DetailsMode) -> bool {
    match mode {
        DetailsMode::Always => true,
        DetailsMode::Never => false,
        DetailsMode::Auto => call.lacks_attempt_children() || call.notifications().is_none(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::service::{CallPage, Timestamp};

    /// A list item: `full` with its attempt's children and notifications, else a summary.
    fn item(n: u128, full: bool) -> Value {
        let mut call = json!({
            "uid": Uuid::from_u128(n).to_string(), "status": "pending", "progress": "in_queue",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
            "outbound_call_info": {"phone_number": "15550100"}
        });
        if full {
            call["outbound_call_attempts"] = json!([{
                "uid": Uuid::from_u128(n * 100).to_string(), "status": "hangup",
                "started_at": "2026-01-01T00:00:00Z", "call_outcomes": [],
                "call_attempts_variables": []
            }]);
            call["call_notifications"] = json!([]);
        }
        call
    }

    fn listed(items: &[Value]) -> Listed {
        let page: CallPage = serde_json::from_value(json!({ "data": items })).unwrap();
        Listed {
            page,
            served_at: None,
            bytes: None,
        }
    }

    #[test]
    fn details_are_wanted_for_items_that_need_one_and_were_not_handed_over() {
        let plan = DetailPlan::new(DetailsMode::Auto, 4);
        let page = listed(&[item(1, false), item(2, true), item(3, false)]);
        assert!(needs_detail(&page.page.data[0], DetailsMode::Auto));
        assert!(!needs_detail(&page.page.data[1], DetailsMode::Auto));
        // The walk handed call 3 over as listed: its detail is not asked again.
        let at = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let handed = plan
            .recent()
            .keep_fresh(vec![page.page.data[2].clone()], at);
        assert_eq!(handed.0.len(), 1);
        assert_eq!(plan.wanted(&page), [Uuid::from_u128(1)]);
        // Once it changes, it is fresh again.
        let mut changed = item(3, false);
        changed["status"] = json!("completed");
        assert_eq!(plan.wanted(&listed(&[changed])), [Uuid::from_u128(3)]);
        // `always` wants every item; `never` none.
        let always = DetailPlan::new(DetailsMode::Always, 4);
        assert_eq!(always.wanted(&page).len(), 3);
        let never = DetailPlan::new(DetailsMode::Never, 4);
        assert!(never.wanted(&page).is_empty());
    }
}
