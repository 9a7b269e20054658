//! What the schedule has already: the external_ids found before anything is sent, and the
//! refusal of a file whose rows are there outside the chunks the ledger knows.

use futures::StreamExt;
use uuid::Uuid;

use super::error::UploadError;
use super::job::{Checked, MAX_LISTED_PROBLEMS, UploadOptions};
use super::problem::RowProblem;
use super::rows::{Chunk, Rows};
use super::scratch::CallsByExternalId;
use super::sender::{LOOKUP_CONCURRENCY, Sender};
use crate::api::{ApiClient, ListQuery};
use crate::service::{ListFilter, MAX_PAGE_SIZE, OutboundCall, Timestamp};
use crate::sync::cursor::{PageFacts, PageWalker, RowKey, WalkLimits};
use crate::warehouse::{ChunkKey, ChunkState, UploadLedger};

/// Refuses the upload, before anything is sent, when a row outside the chunks the ledger
/// knows has an external_id the schedule already has (a chunk whose every row is there, once
/// each, is not refused: it is found created, by another file or a lost ledger).
pub(super) fn refuse_rows_already_there(
    warehouse: &dyn UploadLedger,
    options: &UploadOptions,
    checked: &Checked,
    known: &InSchedule,
) -> Result<(), UploadError> {
    let mut chunks = ChunksAsChecked::open(options, checked)?;
    let column = chunks.rows.columns.column_of("external_id");
    let mut problems = Vec::new();
    let mut count = 0;
    while let Some((key, chunk)) = chunks.next()? {
        if warehouse.chunk_state(&key)?.is_some() {
            continue;
        }
        let present = known.of_chunk(&chunk)?;
        if whole_chunk(&present).is_some() {
            continue;
        }
        for (i, uids) in present.iter().enumerate() {
            let Some(uid) = uids.first() else { continue };
            count += 1;
            if problems.len() < MAX_LISTED_PROBLEMS {
                let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
                let others = match uids.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                };
                problems.push(RowProblem {
                    line: chunk.lines[i],
                    column: Some(column.clone()),
                    reason: format!(
                        "{id:?} is already in the schedule (call {uid}{others}): sending it would call this contact twice"
                    ),
                });
            }
        }
    }
    if count > 0 {
        return Err(UploadError::AlreadyInSchedule {
            schedule: options.schedule,
            problems,
            count,
        });
    }
    Ok(())
}

/// The uids of a chunk whose every row is in the schedule, once: `None` otherwise.
pub(super) fn whole_chunk(present: &[Vec<Uuid>]) -> Option<Vec<Uuid>> {
    present
        .iter()
        .map(|uids| match uids.as_slice() {
            [uid] => Some(*uid),
            _ => None,
        })
        .collect()
}

/// Requests of the walk of a schedule per [`MAX_PAGE_SIZE`] calls, as measured against the
/// simulator: a bulk create stamps its up to 1,000 calls with one `updated_at`, and the walker
/// reads such a tie group twice (upwards, then downwards, which is what keeps a call that
/// changes meanwhile from hiding an unchanged one); a schedule filled by uploads costs 2.04
/// requests per 100 calls (51 for 2,500), one whose calls were dialled about 1.
pub(super) const WALK_REQUESTS_PER_PAGE: u64 = 2;

/// Whether asking for each of `rows` external_ids (one request each) is cheaper than walking
/// the schedule's `calls` calls, whose first page is read already.
pub(super) fn ask_each_row(rows: u64, calls: u64) -> bool {
    let walk = calls.div_ceil(u64::from(MAX_PAGE_SIZE)) * WALK_REQUESTS_PER_PAGE;
    rows < walk.saturating_sub(1)
}

/// The file's chunks with their ledger keys, each checked against the digest [`check`] took:
/// a file changed since is never sent.
pub(super) struct ChunksAsChecked<'a> {
    pub(super) rows: Rows,
    pub(super) options: &'a UploadOptions,
    pub(super) checked: &'a Checked,
    pub(super) index: usize,
}

impl<'a> ChunksAsChecked<'a> {
    pub(super) fn open(
        options: &'a UploadOptions,
        checked: &'a Checked,
    ) -> Result<Self, UploadError> {
        Ok(ChunksAsChecked {
            rows: Rows::open(options)?,
            options,
            checked,
            index: 0,
        })
    }

    pub(super) fn next(&mut self) -> Result<Option<(ChunkKey, Chunk)>, UploadError> {
        let Some(chunk) = self.rows.next_chunk()? else {
            return Ok(None);
        };
        if self.checked.chunk_digests.get(self.index) != Some(&chunk.digest) {
            return Err(UploadError::FileChanged {
                path: self.options.path.clone(),
                first_line: chunk.first_line(),
            });
        }
        self.index += 1;
        let key = ChunkKey {
            schedule: self.options.schedule,
            fingerprint: self.checked.fingerprint.clone(),
            first_line: chunk.first_line(),
        };
        Ok(Some((key, chunk)))
    }
}

/// The schedule's calls by external_id, as listed when the upload starts: on disk (SQLite's
/// temporary database, [`CallsByExternalId`]), not in memory, however many calls the schedule
/// has.
pub(super) struct InSchedule {
    pub(super) scratch: CallsByExternalId,
    /// Calls listed, with an external_id or not.
    pub(super) calls: u64,
}

impl InSchedule {
    pub(super) fn new() -> Result<Self, UploadError> {
        Ok(InSchedule {
            scratch: CallsByExternalId::new()?,
            calls: 0,
        })
    }

    pub(super) fn add(&mut self, call: &OutboundCall) -> Result<(), UploadError> {
        self.scratch.add(call)
    }

    /// For each row of the chunk, the calls the schedule has with its external_id (none for
    /// a row without one).
    pub(super) fn of_chunk(&self, chunk: &Chunk) -> Result<Vec<Vec<Uuid>>, UploadError> {
        chunk
            .calls
            .iter()
            .map(|call| match &call.external_id {
                Some(id) if self.calls > 0 => self.scratch.uids(id),
                _ => Ok(Vec::new()),
            })
            .collect()
    }
}

impl Sender<'_> {
    /// The calls of the schedule whose external_id a row still to send may have, for
    /// [`InSchedule`]. Nothing is asked when the ledger has every chunk of the file as created
    /// (a re-run of a finished upload). Otherwise the first page of the schedule's calls tells
    /// how many it has, and the cheaper of two ways, by those counts, finds them:
    /// - the walk of every call (`updated_after` paging from the beginning, as the sync reads,
    ///   so a call changing meanwhile is read, not skipped), [`MAX_PAGE_SIZE`] a request;
    /// - one request per row still to send, with the list's `external_id` filter,
    ///   [`LOOKUP_CONCURRENCY`] at once under the limiter ([`ask_each_row`]).
    ///
    /// A 404 is a wrong uid, said plainly; nothing has been sent yet.
    pub(super) async fn calls_in_schedule(
        &self,
        warehouse: &dyn UploadLedger,
        checked: &Checked,
    ) -> Result<InSchedule, UploadError> {
        let mut known = InSchedule::new()?;
        let mut rows_to_check = 0;
        for (key, rows) in checked.chunks(self.options.schedule) {
            if !matches!(warehouse.chunk_state(&key)?, Some(ChunkState::Created(_))) {
                rows_to_check += rows;
            }
        }
        if rows_to_check == 0 {
            tracing::info!(
                "the ledger has every chunk of the file as created: the schedule is not listed"
            );
            return Ok(known);
        }
        let schedule = self.options.schedule;
        // Without quiet runs (no late-commit window, no facts given): a bulk upload is a tie
        // group, and a call missed here is a person called twice, so every group this walk
        // meets is read with the two scans, whatever the service says of its clock.
        let mut walker = PageWalker::new(
            Timestamp::EPOCH,
            MAX_PAGE_SIZE,
            WalkLimits::default(),
            std::time::Duration::ZERO,
        );
        let filter = ListFilter::default();
        let mut told = false;
        while let Some(request) = walker.next_request() {
            let query = ListQuery {
                updated_after: Some(request.updated_after),
                page: request.page,
                page_size: request.page_size,
                filter: &filter,
            };
            let page = (self.list_page(&query, |cause| UploadError::Unreachable { cause })).await?;
            let keys: Vec<RowKey> = page
                .data
                .iter()
                .map(|c| RowKey {
                    uid: c.uid,
                    updated_at: c.updated_at,
                })
                .collect();
            walker
                .accept(&keys, PageFacts::default())
                .map_err(|source| UploadError::Untrusted {
                    request: ApiClient::describe_list(schedule, &query),
                    source,
                })?;
            for call in &page.data {
                known.add(call)?;
            }
            let first_page = known.calls == 0;
            known.calls += keys.len() as u64;
            if first_page
                && let Some(total) = page.pagination.as_ref().map(|p| p.total_count)
                && ask_each_row(rows_to_check, total)
            {
                known.calls = known.calls.max(total);
                self.ask_for_each_row(warehouse, checked, rows_to_check, &mut known)
                    .await?;
                told = true;
                break;
            }
            if known.calls > 0 {
                told = true;
                self.progress.waiting(Some(&format!(
                    "listing the schedule's calls for external_ids already there: {} read",
                    known.calls
                )));
            }
        }
        if told {
            self.progress.waiting(None);
        }
        tracing::info!(
            calls = known.calls,
            "the schedule's calls looked at: a row whose external_id is among them is not sent"
        );
        Ok(known)
    }

    /// Asks the schedule for the external_id of every row of the chunks the ledger does not
    /// have as created, into `known`.
    pub(super) async fn ask_for_each_row(
        &self,
        warehouse: &dyn UploadLedger,
        checked: &Checked,
        rows_to_check: u64,
        known: &mut InSchedule,
    ) -> Result<(), UploadError> {
        let mut chunks = ChunksAsChecked::open(self.options, checked)?;
        let mut asked = 0;
        while let Some((key, chunk)) = chunks.next()? {
            if matches!(warehouse.chunk_state(&key)?, Some(ChunkState::Created(_))) {
                continue;
            }
            let ids = chunk.calls.iter().filter_map(|c| c.external_id.as_deref());
            let mut answers = futures::stream::iter(ids)
                .map(|id| {
                    self.with_external_id(id, MAX_PAGE_SIZE, |cause| UploadError::Unreachable {
                        cause,
                    })
                })
                .buffer_unordered(LOOKUP_CONCURRENCY);
            while let Some(calls) = answers.next().await {
                for call in calls? {
                    known.add(&call)?;
                }
            }
            asked += chunk.calls.len() as u64;
            self.progress.waiting(Some(&format!(
                "looking up the rows' external_ids in the schedule ({} calls): {asked} of {rows_to_check} rows",
                known.calls
            )));
        }
        Ok(())
    }
}
