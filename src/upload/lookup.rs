//! Whether a chunk whose answer was lost was created: its rows' calls looked up by
//! external_id and by what changed since, a few requests whatever its size.

use futures::StreamExt;

use super::error::UploadError;
use super::plan::Found;
use super::rows::Chunk;
use super::sender::{LOOKUP_CONCURRENCY, Sender};
use crate::api::{ApiError, ListQuery};
use crate::service::{CallPage, ListFilter, MAX_PAGE_SIZE, OutboundCall, Timestamp};

/// Calls asked for by external_id after a chunk was sent: one more than expected shows a
/// duplicate.
const ONE_MORE_THAN_EXPECTED: u32 = 2;

impl Sender<'_> {
    /// Whether the service created the chunk, and its calls' uids: a few requests whatever
    /// its size. None of the chunk's external_ids was in the schedule before it was sent and
    /// the bulk endpoint is all or nothing, so its first row tells (one request); the calls
    /// of a created chunk were stamped when it was created, so the listing of what changed
    /// since then holds them (its first [`MAX_PAGE_SIZE`]-call pages, fetched at once). A row
    /// not in those pages (a busy schedule, a service that stamps otherwise) is asked for
    /// alone.
    pub(super) async fn look_up(&self, chunk: &Chunk) -> Result<Found, UploadError> {
        let first = chunk.calls[0].external_id.as_deref().unwrap_or_default();
        let probe = self
            .with_external_id(first, ONE_MORE_THAN_EXPECTED, Self::unconfirmed(chunk))
            .await?;
        let created_at = match probe.as_slice() {
            [] => return Ok(Found::Nothing),
            [call] => call.created_at,
            many => {
                return Err(self.partly_there(
                    chunk,
                    format!(
                        "external_id {first:?} (line {}) has {} calls in the schedule",
                        chunk.first_line(),
                        many.len()
                    ),
                ));
            }
        };
        let mut found = vec![Vec::new(); chunk.calls.len()];
        let rows: std::collections::HashMap<&str, usize> = chunk
            .calls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.external_id.as_deref().map(|id| (id, i)))
            .collect();
        let mut note = |calls: &[OutboundCall]| {
            for call in calls {
                let row = call.external_id.as_deref().and_then(|id| rows.get(id));
                if let Some(&i) = row
                    && !found[i].contains(&call.uid)
                {
                    found[i].push(call.uid);
                }
            }
        };
        let page_one = self.changed_since(chunk, created_at, 1).await?;
        note(&page_one.data);
        let wanted = (chunk.calls.len() as u64).div_ceil(u64::from(MAX_PAGE_SIZE)) + 1;
        let pages = page_one
            .pagination
            .as_ref()
            .map_or(wanted, |p| p.total_pages.min(wanted));
        let mut more = futures::stream::iter(2..=pages)
            .map(|page| self.changed_since(chunk, created_at, page as u32))
            .buffer_unordered(LOOKUP_CONCURRENCY);
        while let Some(page) = more.next().await {
            note(&page?.data);
        }
        drop(more);
        let missing: Vec<usize> = (0..found.len()).filter(|&i| found[i].is_empty()).collect();
        if !missing.is_empty() {
            tracing::debug!(
                missing = missing.len(),
                "rows not listed among the calls changed since the chunk was created: asked for one by one"
            );
        }
        let mut alone = futures::stream::iter(missing)
            .map(|i| async move {
                let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
                (
                    i,
                    self.with_external_id(id, ONE_MORE_THAN_EXPECTED, Self::unconfirmed(chunk))
                        .await,
                )
            })
            .buffer_unordered(LOOKUP_CONCURRENCY);
        while let Some((i, calls)) = alone.next().await {
            found[i] = calls?.iter().map(|c| c.uid).collect();
        }
        drop(alone);
        let mut uids = Vec::with_capacity(found.len());
        for (i, calls) in found.iter().enumerate() {
            let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
            let line = chunk.lines[i];
            match calls.as_slice() {
                [uid] => uids.push(*uid),
                [] => {
                    return Ok(Found::Partly(format!(
                        "external_id {id:?} (line {line}) is not in the schedule, though the chunk's first row (line {}) is",
                        chunk.first_line()
                    )));
                }
                many => {
                    return Err(self.partly_there(
                        chunk,
                        format!(
                            "external_id {id:?} (line {line}) has {} calls in the schedule",
                            many.len()
                        ),
                    ));
                }
            }
        }
        Ok(Found::All(uids))
    }

    /// A failed look-up of `chunk`, sent before: whether the service created it is unknown.
    pub(super) fn unconfirmed(chunk: &Chunk) -> impl FnOnce(ApiError) -> UploadError {
        move |err| UploadError::Unconfirmed {
            first_line: chunk.first_line(),
            last_line: chunk.last_line(),
            cause: Box::new(err),
        }
    }

    /// A page of the schedule's calls changed at or after `since`.
    pub(super) async fn changed_since(
        &self,
        chunk: &Chunk,
        since: Timestamp,
        page: u32,
    ) -> Result<CallPage, UploadError> {
        let filter = ListFilter::default();
        let query = ListQuery {
            updated_after: Some(since),
            page,
            page_size: MAX_PAGE_SIZE,
            filter: &filter,
        };
        self.list_page(&query, Self::unconfirmed(chunk)).await
    }

    pub(super) fn partly_there(&self, chunk: &Chunk, problem: String) -> UploadError {
        UploadError::PartlyThere {
            first_line: chunk.first_line(),
            last_line: chunk.last_line(),
            problem,
        }
    }
}
