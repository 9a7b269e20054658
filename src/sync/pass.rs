//! One pass of one schedule: fetch a page, complete it, hand it to the writer, repeat.
//!
//! The page walker decides what to ask for; this loop does the I/O around it. The next page
//! is fetched while the previous one is being written (at most one write in flight per
//! pass, so memory stays bounded by the pages in flight). Cancellation is honoured between
//! pages and during a fetch, never inside a write: a page is committed whole or not at all,
//! together with its checkpoint.

use std::collections::HashMap;
use std::time::Instant;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::cursor::{PageRequest, PageWalker, RowKey, WalkLimits};
use super::error::{SyncError, error_chain};
use super::lock::ScheduleLock;
use super::writer::Pending;
use super::{Engine, PassPlan, PassProgress, PassReport, PassResult};
use crate::api::{ApiClient, CallPage, Counters, ListQuery, OutboundCall, Timestamp};
use crate::config::DetailsMode;
use crate::warehouse::{INTERRUPTED, PageWrite, RunStats};

/// How the page loop ended.
enum WalkEnd {
    /// The walk reached the end of the data (or `until`).
    Finished,
    /// Shutdown was requested; every page handed to the writer was committed.
    Interrupted,
    Failed(SyncError),
}

/// Figures of a pass as it goes.
#[derive(Default)]
pub(super) struct Tally {
    pub pages: u64,
    pub calls_seen: u64,
    pub calls_written: u64,
    /// Calls read so far plus the service's `total_count` left at the latest request.
    pub total: Option<u64>,
}

fn outcome(end: WalkEnd) -> PassResult {
    match end {
        WalkEnd::Finished => PassResult::Completed,
        WalkEnd::Interrupted => PassResult::Interrupted,
        WalkEnd::Failed(err) => PassResult::Failed(error_chain(&err)),
    }
}

/// Waits for a page handed to the writer to commit (with its checkpoint).
async fn settle(
    write: Pending<PageWrite>,
    tally: &mut Tally,
    schedule: Uuid,
    progress: &dyn PassProgress,
) -> Result<(), SyncError> {
    tally.calls_written += write.wait().await?.calls_written;
    progress.committed(schedule);
    Ok(())
}

impl Engine {
    /// Runs one pass of `schedule` and records it in `sync_runs`; never panics, never
    /// returns an error: the outcome is in the report.
    pub async fn run_pass(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        cancel: &CancellationToken,
        progress: &dyn PassProgress,
    ) -> PassReport {
        // `instrument`, not `span.enter()`: a guard held across `.await` would leak the span
        // into whatever task the thread runs next, and log lines would name the wrong schedule.
        let span = tracing::info_span!("pass", schedule = %schedule, kind = plan.kind.as_str());
        self.run_pass_in_span(schedule, plan, cancel, progress)
            .instrument(span)
            .await
    }

    async fn run_pass_in_span(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        cancel: &CancellationToken,
        progress: &dyn PassProgress,
    ) -> PassReport {
        let started = Instant::now();
        let counters = Counters::default();
        let mut tally = Tally::default();
        let mut position = None;
        let result = if self.dry_run {
            let end = self
                .walk(
                    schedule,
                    plan,
                    cancel,
                    progress,
                    &counters,
                    &mut tally,
                    &mut position,
                )
                .await;
            outcome(end)
        } else {
            self.recorded_pass(
                schedule,
                plan,
                cancel,
                progress,
                &counters,
                &mut tally,
                &mut position,
            )
            .await
        };
        let stats = stats(&counters, &tally);
        let report = PassReport {
            schedule,
            kind: plan.kind,
            stats,
            statuses: counters.statuses(),
            result,
            position,
            duration: started.elapsed(),
        };
        report.log(self.dry_run);
        report
    }

    /// A pass under the schedule's lock, recorded in `sync_runs`.
    #[allow(clippy::too_many_arguments)]
    async fn recorded_pass(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        cancel: &CancellationToken,
        progress: &dyn PassProgress,
        counters: &Counters,
        tally: &mut Tally,
        position: &mut Option<Timestamp>,
    ) -> PassResult {
        let _lock = match ScheduleLock::acquire(self.warehouse_path(), schedule) {
            Ok(lock) => lock,
            Err(busy @ SyncError::Busy { .. }) => return PassResult::Skipped(busy.to_string()),
            Err(err) => return PassResult::Failed(error_chain(&err)),
        };
        let (kind, started_at) = (plan.kind, Timestamp::now());
        match self
            .writer
            .call(move |w| w.start_run(schedule, kind, started_at))
            .await
        {
            Ok(run) => {
                let end = self
                    .walk(schedule, plan, cancel, progress, counters, tally, position)
                    .await;
                self.close_run(run, end, counters, tally).await
            }
            Err(err) => PassResult::Failed(error_chain(&err)),
        }
    }

    /// Closes the `sync_runs` row with the outcome; a failure here is the pass's failure.
    async fn close_run(
        &self,
        run: crate::warehouse::RunId,
        end: WalkEnd,
        counters: &Counters,
        tally: &Tally,
    ) -> PassResult {
        let result = outcome(end);
        let error_text = match &result {
            PassResult::Completed => None,
            PassResult::Interrupted => Some(INTERRUPTED.to_owned()),
            PassResult::Skipped(text) | PassResult::Failed(text) => Some(text.clone()),
        };
        let stats = stats(counters, tally);
        let closed = self
            .writer
            .call(move |w| w.finish_run(run, &stats, Timestamp::now(), error_text.as_deref()))
            .await;
        match closed {
            Ok(()) => result,
            Err(err) => PassResult::Failed(error_chain(&err)),
        }
    }

    /// The page loop; `position` follows the walk (where the next pass would start).
    #[allow(clippy::too_many_arguments)]
    async fn walk(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        cancel: &CancellationToken,
        progress: &dyn PassProgress,
        counters: &Counters,
        tally: &mut Tally,
        position: &mut Option<Timestamp>,
    ) -> WalkEnd {
        let stored = match self.writer.call(move |w| w.checkpoint(schedule)).await {
            Ok(checkpoint) => checkpoint.map(|c| c.cursor),
            Err(err) => return WalkEnd::Failed(err),
        };
        let start = plan.start(stored, self.settings.lookback);
        // A pass may move the checkpoint only if it read everything from the checkpoint on.
        let moves_checkpoint = match stored {
            Some(cursor) => start <= cursor,
            None => start == Timestamp::EPOCH,
        };
        tracing::debug!(%start, ?stored, moves_checkpoint, "pass starts");
        let mut walker = PageWalker::new(start, self.settings.page_size, WalkLimits::default());
        let mut recent = RecentRows::default();
        let mut in_flight: Option<Pending<PageWrite>> = None;
        let mut end = WalkEnd::Finished;
        while let Some(request) = walker.next_request() {
            if plan.until.is_some_and(|until| walker.position() > until) {
                break;
            }
            let page = tokio::select! {
                biased;
                () = cancel.cancelled() => { end = WalkEnd::Interrupted; break; }
                page = self.fetch_page(schedule, &request, counters) => page,
            };
            let step = match page {
                Ok(page) => {
                    self.prepare(
                        schedule,
                        plan,
                        &request,
                        page,
                        &mut walker,
                        &mut recent,
                        counters,
                        tally,
                    )
                    .await
                }
                Err(err) => Err(err),
            };
            let (calls, checkpoint) = match step {
                Ok((calls, checkpoint)) => (calls, moves_checkpoint.then_some(checkpoint)),
                Err(err) => {
                    end = WalkEnd::Failed(err);
                    break;
                }
            };
            if let Some(previous) = in_flight.take()
                && let Err(err) = settle(previous, tally, schedule, progress).await
            {
                end = WalkEnd::Failed(err);
                break;
            }
            // The checkpoint is written in the same transaction as the page it follows from:
            // it can never be ahead of the data.
            let now = Timestamp::now();
            let dry_run = self.dry_run;
            match self
                .writer
                .submit(move |w| {
                    if dry_run {
                        w.count_changes(schedule, &calls).map(|n| PageWrite {
                            calls_written: n,
                            calls_unchanged: calls.len() as u64 - n,
                        })
                    } else {
                        w.write_page(schedule, &calls, checkpoint, now)
                    }
                })
                .await
            {
                Ok(pending) => in_flight = Some(pending),
                Err(err) => {
                    end = WalkEnd::Failed(err);
                    break;
                }
            }
            *position = Some(walker.position());
            progress.page(tally.pages, tally.calls_seen, tally.total);
            if cancel.is_cancelled() {
                end = WalkEnd::Interrupted;
                break;
            }
        }
        // The last page handed over is always committed (or its failure reported).
        if let Some(last) = in_flight.take()
            && let Err(err) = settle(last, tally, schedule, progress).await
            && !matches!(end, WalkEnd::Failed(_))
        {
            end = WalkEnd::Failed(err);
        }
        end
    }

    /// Checks a fetched page against the walk and completes its calls: the calls to write
    /// and the checkpoint that may go with them.
    #[allow(clippy::too_many_arguments)]
    async fn prepare(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        request: &PageRequest,
        page: CallPage,
        walker: &mut PageWalker,
        recent: &mut RecentRows,
        counters: &Counters,
        tally: &mut Tally,
    ) -> Result<(Vec<OutboundCall>, Timestamp), SyncError> {
        if let Some(p) = &page.pagination {
            // What was read before this request, plus what the service says is left.
            tally.total = Some(tally.calls_seen + p.total_count);
        }
        tally.pages += 1;
        tally.calls_seen += page.data.len() as u64;
        let keys: Vec<RowKey> = page.data.iter().map(row_key).collect();
        let accepted = walker.accept(&keys).map_err(|source| {
            let request = describe(schedule, request);
            tracing::error!(%request, error = %source, "the service's page cannot be trusted");
            SyncError::Walk { request, source }
        })?;
        let fresh = recent.keep_fresh(page.data, walker.position());
        let calls = self.complete(fresh, plan.details, counters).await?;
        Ok((calls, accepted.checkpoint))
    }

    async fn fetch_page(
        &self,
        schedule: Uuid,
        request: &PageRequest,
        counters: &Counters,
    ) -> Result<CallPage, SyncError> {
        let query = ListQuery {
            updated_after: Some(request.updated_after),
            page: request.page,
            page_size: request.page_size,
            filter: &self.settings.filter,
        };
        Ok(self.client.list_calls(schedule, &query, counters).await?)
    }

    /// Replaces list items that lack attempt children (or all, in `always` mode) by the
    /// detail endpoint's version, a bounded number at a time, keeping the page's order.
    async fn complete(
        &self,
        calls: Vec<OutboundCall>,
        mode: DetailsMode,
        counters: &Counters,
    ) -> Result<Vec<OutboundCall>, SyncError> {
        let client: &ApiClient = &self.client;
        futures::stream::iter(calls)
            .map(|call| async move {
                if !needs_detail(&call, mode) {
                    return Ok(call);
                }
                match client.get_call(call.uid, counters).await {
                    Ok(detail) => Ok(detail),
                    // Gone between the list and the detail request: keep what the list said.
                    Err(err) if err.status() == Some(reqwest::StatusCode::NOT_FOUND) => {
                        tracing::warn!(call = %call.uid, "call listed but its detail is gone; keeping the list item");
                        Ok(call)
                    }
                    Err(err) => Err(SyncError::from(err)),
                }
            })
            .buffered(self.detail_concurrency)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}

fn needs_detail(call: &OutboundCall, mode: DetailsMode) -> bool {
    match mode {
        DetailsMode::Always => true,
        DetailsMode::Never => false,
        DetailsMode::Auto => call.lacks_attempt_children() || call.notifications().is_none(),
    }
}

fn row_key(call: &OutboundCall) -> RowKey {
    RowKey {
        uid: call.uid,
        updated_at: call.updated_at,
    }
}

fn stats(counters: &Counters, tally: &Tally) -> RunStats {
    RunStats {
        pages: tally.pages,
        calls_seen: tally.calls_seen,
        calls_written: tally.calls_written,
        requests: counters.requests(),
        retries: counters.retries(),
    }
}

fn describe(schedule: Uuid, request: &PageRequest) -> String {
    format!(
        "GET /api/v1/schedules/{schedule}/outbound_calls?updated_after={}&page={}&page_size={}",
        request.updated_after, request.page, request.page_size
    )
}

/// Rows this pass has already handed to the writer that the walk may list again (those at
/// or after its position: keyset overlap and tie groups). A re-listed row whose list item is
/// identical needs neither a detail request nor a write. Pruned as the position advances,
/// so it holds a tie group at most, whatever the number of calls.
#[derive(Default)]
struct RecentRows {
    rows: HashMap<Uuid, (Timestamp, u64)>,
}

impl RecentRows {
    fn keep_fresh(&mut self, calls: Vec<OutboundCall>, position: Timestamp) -> Vec<OutboundCall> {
        let keyed: Vec<(OutboundCall, u64)> = calls
            .into_iter()
            .map(|call| {
                let hash = call.content_hash();
                (call, hash)
            })
            .collect();
        let fresh: Vec<bool> = keyed
            .iter()
            .map(|(call, hash)| self.rows.get(&call.uid) != Some(&(call.updated_at, *hash)))
            .collect();
        // Only rows at or after the new position can be listed again.
        self.rows.retain(|_, (at, _)| *at >= position);
        for (call, hash) in &keyed {
            if call.updated_at >= position {
                self.rows.insert(call.uid, (call.updated_at, *hash));
            }
        }
        keyed
            .into_iter()
            .zip(fresh)
            .filter_map(|((call, _), fresh)| fresh.then_some(call))
            .collect()
    }
}
