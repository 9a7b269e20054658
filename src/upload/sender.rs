//! What sending and looking up need for the whole upload: its methods are the steps of
//! `send.rs`, the search of `existing.rs` and the lookups of `lookup.rs`.

use super::columns::Columns;
use super::error::UploadError;
use super::job::UploadOptions;
use super::job::UploadProgress;
use crate::api::{ApiClient, ApiError, Counters, ListQuery};
use crate::service::{CallPage, ListFilter, OutboundCall};

/// Lookups of one chunk in flight at once; the client's limiter paces them.
pub(super) const LOOKUP_CONCURRENCY: usize = 8;

/// What sending a chunk needs, for the whole upload.
pub(super) struct Sender<'a> {
    pub(super) client: &'a ApiClient,
    pub(super) options: &'a UploadOptions,
    pub(super) columns: Columns,
    pub(super) counters: Counters,
    pub(super) progress: &'a dyn UploadProgress,
}

impl Sender<'_> {
    /// A page of the schedule's calls: the one list request of both look-ups, before sending
    /// (`existing.rs`) and after (`lookup.rs`). A 404 is a wrong schedule uid, said plainly;
    /// any other failure is what `failed` makes of it, which knows what was sent.
    pub(super) async fn list_page(
        &self,
        query: &ListQuery<'_>,
        failed: impl FnOnce(ApiError) -> UploadError,
    ) -> Result<CallPage, UploadError> {
        let schedule = self.options.schedule;
        match self
            .client
            .list_calls(schedule, query, &self.counters)
            .await
        {
            Ok(listed) => Ok(listed.page),
            Err(err) if err.is_not_found() => Err(UploadError::ScheduleNotFound {
                schedule,
                sent_before: false,
            }),
            Err(err) => Err(failed(err)),
        }
    }

    /// The schedule's calls with this external_id, at most `page_size` of them.
    pub(super) async fn with_external_id(
        &self,
        external_id: &str,
        page_size: u32,
        failed: impl FnOnce(ApiError) -> UploadError,
    ) -> Result<Vec<OutboundCall>, UploadError> {
        let filter = ListFilter {
            external_id: Some(external_id.to_owned()),
            ..ListFilter::default()
        };
        let query = ListQuery {
            updated_after: None,
            page: 1,
            page_size,
            filter: &filter,
        };
        self.list_page(&query, failed).await.map(|page| page.data)
    }
}
