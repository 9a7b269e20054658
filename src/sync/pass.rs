//! One pass of one schedule: fetch a page, complete it, hand it to the sink, repeat — until
//! the walk has read what had changed when the pass began.
//!
//! A [`Pass`] holds everything one pass needs (its plan, the walker, the service's clock, its
//! figures); the page walker decides what to ask for; [`CheckpointRule`] is the one place
//! that decides the checkpoint saved with a page. The next pages are fetched while the
//! previous ones are written: one write in flight, the pages read meanwhile waiting to go as
//! one ([`Writes`]). Cancellation is honoured between pages and during a fetch, never inside
//! a write: a write is committed whole or not at all, with its checkpoint; the pages waiting
//! when shutdown is asked are left to the next pass.
//!
//! **Every pass ends.** The service's clock at the pass's first response (its `Date` header,
//! rounded up to the next second, as the header holds whole seconds) is the pass's
//! *horizon*: once the walk reaches it, everything that had changed when the pass began has
//! been read, and the pass stops; calls changed since are the next pass's. The service's
//! clock, not ours, so that skew between the two never becomes lag. Without a `Date` header,
//! or with one too far from callsync's own clock to be trusted, `service_clock.rs` says which
//! clock stands in; a walk held by that clock below the calls it reads ends with an error.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::ahead::Ahead;
use super::bookkeeping::{EndRequest, OpenRequest, Opening};
use super::checkpoint_rule::CheckpointRule;
use super::cursor::{HeldGroup, PageFacts, PageRequest, PageWalker, Purpose, RowKey, WalkLimits};
use super::details::{DetailPlan, Details, Fetched, needs_detail};
use super::error::SyncError;
use super::misfits;
use super::service_clock::{Reading, ServiceClock};
use super::walk_writes::Writes;
use super::{Engine, PassPlan, PassProgress, PassReport, PassResult, Skip};
use crate::api::{ApiClient, ApiError, Counters, ListQuery, Listed};
use crate::service::filter::ListFilter;
use crate::service::{OutboundCall, Timestamp};
use crate::warehouse::{Claim, PageBatch};
use crate::warehouse::{RunId, RunOutcome, RunRecord, RunStats, SetAside};

/// Why the page loop stopped, when no failure stopped it (a failure is the page step's
/// error). Not the pass's end: that is the [`PassResult`] decided from it once the last
/// write settled (at the horizon, `Completed` or `Behind` by the lag then).
enum Stop {
    /// The walk reached the end of the data, or the user's `until`.
    Finished,
    /// The walk passed the horizon; the service lists changes made after it.
    AtHorizon,
    /// Shutdown was requested; every page handed to the sink was committed.
    Interrupted,
}

/// The page loop's state between two page steps.
struct Walk<'e> {
    walker: PageWalker,
    rule: CheckpointRule,
    /// Which items need a detail, the rows handed over that the walk may list again, and the
    /// walk's detail permits: shared with its page fetches.
    details: DetailPlan,
    /// The write in flight and the pages waiting behind it.
    writes: Writes<'e>,
    /// The checkpoint of the page handed to the sink (or waiting for it) last; `None`
    /// before the first.
    submitted: Option<Option<Timestamp>>,
    /// Requests asked ahead: the next, and the rest of a quiet run's pages, in flight while
    /// the pages before them are completed and written.
    ahead: Ahead<'e>,
    /// The next request; `None` once the walk has read to the end of the data.
    next: Option<PageRequest>,
}

/// Figures of a pass as it goes.
#[derive(Default)]
struct Tally {
    pages: u64,
    calls_seen: u64,
    calls_written: u64,
    detail_requests: u64,
    future_rows: u64,
    /// Calls read so far plus the service's `total_count` left at the latest request.
    total: Option<u64>,
}

/// One pass of one schedule, from its first request to its `sync_runs` row.
struct Pass<'e> {
    engine: &'e Engine,
    schedule: Uuid,
    plan: &'e PassPlan,
    cancel: &'e CancellationToken,
    progress: &'e dyn PassProgress,
    /// Shared with the requests asked ahead of the walk.
    counters: Arc<Counters>,
    tally: Tally,
    clock: ServiceClock,
    /// Where the walk got to, capped by the service's clock.
    position: Option<Timestamp>,
    /// Its `sync_runs` row, once started.
    run: Option<RunId>,
    /// Whether the walk found the service's tie order unstable.
    unstable_tie_order: bool,
    /// The tie groups the walk held (read past, the checkpoint held at them).
    held_groups: Vec<HeldGroup>,
    /// The schedule's calls set aside, as the pass's last write that counted them saw.
    set_aside: Option<u64>,
}

impl Engine {
    /// Runs one pass of `schedule` and records it; never panics, never returns an error:
    /// the outcome is in the report.
    pub async fn run_pass(
        &self,
        schedule: Uuid,
        plan: &PassPlan,
        cancel: &CancellationToken,
        progress: &dyn PassProgress,
    ) -> PassReport {
        // `instrument`, not `span.enter()`: a guard held across `.await` would leak the span
        // into whatever task the thread runs next, and log lines would name the wrong schedule.
        // At ERROR, so that its fields are on every line of the pass whatever the level (an
        // INFO span is off under `-q`, and an error line would lose its schedule); the
        // configuration's name beside the uid; `run` (`sync_runs.id`) once the row exists.
        let span = tracing::error_span!(
            "pass",
            schedule = %schedule,
            schedule_name = self.settings.schedule_names.get(&schedule).map(String::as_str),
            kind = plan.kind.as_str(),
            run = tracing::field::Empty,
        );
        let pass = Pass {
            engine: self,
            schedule,
            plan,
            cancel,
            progress,
            counters: Arc::new(Counters::for_lane(schedule)),
            tally: Tally::default(),
            clock: ServiceClock::new(self.settings.max_clock_skew, None),
            position: None,
            run: None,
            unstable_tie_order: false,
            held_groups: Vec::new(),
            set_aside: None,
        };
        pass.run().instrument(span).await
    }
}

impl<'e> Pass<'e> {
    async fn run(mut self) -> PassReport {
        let started = Instant::now();
        let result = match self.open().await {
            Ok(Opening::Started { claim, run, stored }) => self.recorded(claim, run, stored).await,
            Ok(Opening::Busy) => PassResult::Skipped(Skip::Busy {
                schedule: self.schedule,
                destination: self.engine.name.clone(),
            }),
            Ok(Opening::WalkedBy(walker)) => PassResult::Skipped(Skip::WalkedSince {
                schedule: self.schedule,
                walker,
            }),
            Err(err) => PassResult::failed(&err),
        };
        let report = PassReport {
            schedule: self.schedule,
            kind: self.plan.kind,
            stats: self.stats(),
            statuses: self.counters.statuses(),
            result,
            position: self.position,
            horizon: self.clock.horizon,
            lag_secs: self.lag_secs(),
            clock: self.clock.taken(),
            date_skew_secs: self.clock.distrust().map(|(_, skew)| skew),
            duration: started.elapsed(),
            run: self.run.map(RunId::get),
            unstable_tie_order: self.unstable_tie_order,
            held_groups: std::mem::take(&mut self.held_groups),
            set_aside: self.set_aside,
        };
        report.log(
            self.engine.counts_only,
            self.plan.unless_walked_since.is_some(),
        );
        report
    }

    /// Claims the schedule, records the pass's start and reads the checkpoint, in one job of
    /// the writer gathered with the other passes opening meanwhile (`bookkeeping.rs`): an
    /// idle pass is a request and three writer jobs (this, its page, [`Self::finish`]), and
    /// at 10,000 schedules every job, and every statement, counts.
    async fn open(&mut self) -> Result<Opening, SyncError> {
        let request = OpenRequest {
            schedule: self.schedule,
            kind: self.plan.kind,
            walked_since: self.plan.unless_walked_since,
            walker: self.engine.walker.clone(),
        };
        let opening = self
            .engine
            .writer
            .gather(&self.engine.openings, request)
            .await??;
        if let Opening::Started { run: Some(run), .. } = &opening {
            tracing::Span::current().record("run", run.get());
            self.run = Some(*run);
        }
        Ok(opening)
    }

    /// The walk from `stored` (the checkpoint, or why it could not be read), between its
    /// `sync_runs` row's start and end.
    async fn recorded(
        &mut self,
        claim: Claim,
        run: Option<RunId>,
        stored: Result<Option<Timestamp>, SyncError>,
    ) -> PassResult {
        let walked = match stored {
            Ok(stored) => self.walk(stored).await,
            Err(err) => Err(err),
        };
        let result = self.result(walked);
        match self.finish(claim, run, &result).await {
            Ok(()) => result,
            Err(err) => PassResult::failed(&err),
        }
    }

    /// The pass's result from how its walk stopped.
    fn result(&self, walked: Result<Stop, SyncError>) -> PassResult {
        match walked {
            Ok(Stop::Finished) => PassResult::Completed,
            Ok(Stop::AtHorizon) => {
                let behind = self.engine.settings.behind_after.as_secs_f64();
                if self.lag_secs().is_some_and(|lag| lag >= behind) {
                    PassResult::Behind
                } else {
                    PassResult::Completed
                }
            }
            Ok(Stop::Interrupted) => PassResult::Interrupted,
            Err(err) if err.lost_claim() => PassResult::ClaimLost(crate::error_chain(&err)),
            Err(err) => PassResult::failed(&err),
        }
    }

    /// Closes the `sync_runs` row, if the pass has one (a failure there is the pass's
    /// failure), then lets the claim go, in one job of the writer gathered with the other
    /// passes ending meanwhile (`bookkeeping.rs`). When the writer is gone, the request and
    /// the claim in it are dropped here.
    async fn finish(
        &self,
        claim: Claim,
        run: Option<RunId>,
        result: &PassResult,
    ) -> Result<(), SyncError> {
        let record = run.map(|run| (run, self.record(result)));
        let finished = self
            .engine
            .writer
            .gather(&self.engine.endings, EndRequest { claim, record })
            .await;
        match (finished, run) {
            // Nothing to record: the claim is let go, whether or not the writer still runs.
            (Err(_), None) => Ok(()),
            (Ok(finished), _) => finished,
            (Err(err), Some(_)) => Err(err),
        }
    }

    /// How the pass ended, as its `sync_runs` row keeps it.
    fn record(&self, result: &PassResult) -> RunRecord {
        RunRecord {
            outcome: result.outcome().unwrap_or(RunOutcome::Failed),
            stats: self.stats(),
            finished_at: Timestamp::now(),
            horizon: self.clock.horizon,
            lag_secs: self.lag_secs(),
            // A pass that held a tie group says so where `callsync status` reads it.
            error: result.stored_error().or_else(|| self.held_text()),
            error_kind: match &result {
                PassResult::Failed { kind, .. } => Some(*kind),
                _ => None,
            },
        }
    }

    /// The tie groups the walk held, in words; `None` when it held none.
    fn held_text(&self) -> Option<String> {
        let held: Vec<String> = self.held_groups.iter().map(ToString::to_string).collect();
        (!held.is_empty()).then(|| held.join("; "))
    }

    /// The page loop: page steps until one stops the walk, then the last write settled.
    async fn walk(&mut self, stored: Option<Timestamp>) -> Result<Stop, SyncError> {
        let settings = &self.engine.settings;
        let start = self.plan.start(stored, settings.lookback);
        let rule = CheckpointRule::new(stored, start);
        tracing::debug!(%start, ?stored, moves_checkpoint = rule.moves, "pass starts");
        self.position = stored;
        self.clock = ServiceClock::new(settings.max_clock_skew, stored);
        let walker = PageWalker::new(
            start,
            settings.page_size,
            WalkLimits::default(),
            settings.lookback,
        );
        let mut walk = Walk {
            next: walker.next_request(),
            walker,
            rule,
            details: DetailPlan::new(self.plan.details, self.engine.detail_concurrency),
            writes: Writes::new(self.engine, self.schedule, self.progress, stored.is_some()),
            submitted: None,
            ahead: Ahead::new(),
        };
        let stopped = loop {
            match self.page_step(&mut walk).await {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(stop)) => break Ok(stop),
                Err(err) => break Err(err),
            }
        };
        // The pages read are written (unless shutdown was asked), and the last write is
        // always waited for (its failure reported, unless the walk failed first).
        let settled = walk.writes.finish(!self.cancel.is_cancelled()).await;
        self.tally.calls_written = walk.writes.calls_written;
        // Where a conflict held the checkpoint (`warehouse/set_aside.rs`), the next pass starts.
        if let Some(held) = walk.writes.hold_at() {
            self.position = self.position.map(|p| p.min(held));
        }
        self.set_aside = walk.writes.set_aside_now();
        let stop = stopped?;
        settled?;
        let walked = match stop {
            Stop::AtHorizon => Some(walk.walker.position()),
            Stop::Finished => walk.walker.unread_future(),
            _ => None,
        };
        if let Some(walked) = walked {
            self.held_by_the_clock(walked)?;
        }
        Ok(stop)
    }

    /// A walk that stopped at its horizon, or ended before a page full of calls stamped
    /// after the service's clock, `walked` further past that clock than
    /// `sync.max_clock_skew_secs` (calls stamped there), cannot read past them: pass after
    /// pass it would read the same pages and stop. Said, not left silent.
    fn held_by_the_clock(&self, walked: Timestamp) -> Result<(), SyncError> {
        let (Some(now), Some(taken)) = (self.clock.now(), self.clock.taken()) else {
            return Ok(());
        };
        if walked <= now.saturating_add(self.clock.max_skew()) {
            return Ok(());
        }
        Err(SyncError::ClockBehindCalls {
            schedule: self.schedule,
            clock: now,
            taken,
            stamped: walked,
            ahead_secs: walked.secs_since(now),
        })
    }

    /// One page: fetched (or taken as prefetched), accepted, completed by its details while
    /// the next page is fetched, and handed to the sink once the page before it committed.
    async fn page_step(&mut self, walk: &mut Walk<'e>) -> Result<ControlFlow<Stop>, SyncError> {
        let Some(request) = walk.next.take() else {
            return Ok(ControlFlow::Break(Stop::Finished));
        };
        if let Some(stop) = self.stop_before(&walk.walker) {
            return Ok(ControlFlow::Break(stop));
        }
        let fetched = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Ok(ControlFlow::Break(Stop::Interrupted)),
            fetched = self.answer(&mut walk.ahead, &walk.details, request) => fetched,
            err = walk.writes.keep_writing() => return Err(err),
        };
        let Fetched { listed, details } = fetched?;
        let accepted = self.accept(&request, listed, walk)?;
        // The next request is known as soon as this page is accepted, and within a quiet
        // run the pages after it too: they go out while this page's details are fetched and
        // the page before it is written, so a latency-bound pass keeps the service busy.
        walk.next = walk.walker.next_request();
        let wanted: Vec<PageRequest> = match self.stop_before(&walk.walker) {
            Some(_) => Vec::new(),
            None => walk
                .next
                .into_iter()
                .chain(walk.walker.requests_ahead())
                .collect(),
        };
        walk.ahead.want(&wanted, self.fetcher(&walk.details));
        let calls = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Ok(ControlFlow::Break(Stop::Interrupted)),
            calls = self.complete(accepted.calls, accepted.content_hashes, details, &walk.details) => calls,
            () = walk.ahead.drive() => unreachable!("driving the requests ahead never ends"),
            err = walk.writes.keep_writing() => return Err(err),
        };
        let (calls, content_hashes) = calls?;
        let checkpoint = walk
            .rule
            .checkpoint(accepted.checkpoint, accepted.service_now);
        // A page of rows this pass handed over already (a tie group read again, the row at
        // the cursor) that leaves the checkpoint where the last page put it would be an
        // empty transaction: it is not written, and the walk goes on while the page before
        // it commits, instead of waiting for that write to hand over nothing.
        let set_aside = accepted.set_aside;
        if calls.is_empty() && set_aside.is_empty() && walk.submitted == Some(checkpoint) {
            return self.page_done();
        }
        let batch = PageBatch {
            schedule: self.schedule,
            calls,
            content_hashes,
            checkpoint,
            synced_at: Timestamp::now(),
            set_aside,
            run: self.run.map(RunId::get),
        };
        walk.submitted = Some(checkpoint);
        tokio::select! {
            pushed = walk.writes.push(batch) => pushed?,
            () = walk.ahead.drive() => unreachable!("driving the requests ahead never ends"),
        }
        self.page_done()
    }

    /// A page step's end: progress shown, and whether to go on.
    fn page_done(&self) -> Result<ControlFlow<Stop>, SyncError> {
        let t = &self.tally;
        self.progress.page(t.pages, t.calls_seen, t.total);
        if self.cancel.is_cancelled() {
            return Ok(ControlFlow::Break(Stop::Interrupted));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Ends the walk once it is past the user's `until` or the pass's horizon.
    fn stop_before(&self, walker: &PageWalker) -> Option<Stop> {
        // The user's bound on what the walk read (a page past it is read once); the horizon
        // on what it proved, so that a pass that reads everything changed before it began
        // leaves the checkpoint past all of it (the answer that proves the last page is
        // asked for).
        if self
            .plan
            .until
            .is_some_and(|until| walker.reached() > until)
        {
            return Some(Stop::Finished);
        }
        if (self.clock.horizon).is_some_and(|horizon| walker.position() >= horizon) {
            return Some(Stop::AtHorizon);
        }
        None
    }

    /// Checks a fetched page against the walk: its fresh calls (still to be completed by
    /// detail requests), and where the checkpoint may go with them.
    fn accept(
        &mut self,
        request: &PageRequest,
        listed: Listed,
        walk: &mut Walk<'e>,
    ) -> Result<AcceptedPage, SyncError> {
        let walker = &mut walk.walker;
        let Listed {
            page, served_at, ..
        } = listed;
        let stamps: Vec<Timestamp> = page.data.iter().map(|c| c.updated_at).collect();
        let reading = self.clock.observe(served_at, Timestamp::now(), &stamps);
        let service_now = reading.now;
        let total_count = page.pagination.as_ref().map(|p| p.total_count);
        let keys: Vec<RowKey> = misfits::listed_keys(&page);
        // A quiet check's row (if any) is not the walk's yet: the walk reads it in its turn.
        let (data, set_aside) = match request.purpose {
            Purpose::Walk => {
                let run = self.run.map(RunId::get);
                // A misfit of a call this pass wrote as it fits, as stamped or later (the row
                // at the cursor listed again), adds nothing.
                let recent = walk.details.recent();
                let misfits = (page.misfits.into_iter())
                    .filter(|m| !recent.handed_over_since(m.uid, m.updated_at))
                    .collect();
                drop(recent);
                (page.data, misfits::set_aside(misfits, self.schedule, run))
            }
            Purpose::QuietCheck => (Vec::new(), Vec::new()),
        };
        if let Some(total_count) = total_count.filter(|_| request.purpose == Purpose::Walk) {
            // What was read before this request, plus what the service says is left from
            // this page on (the query's count less the pages of it before this one).
            let before = u64::from(request.page - 1) * u64::from(request.page_size);
            self.tally.total = Some(self.tally.calls_seen + total_count.saturating_sub(before));
        }
        self.tally.pages += 1;
        self.tally.calls_seen += (data.len() + set_aside.len()) as u64;
        self.note_future_rows(&data, reading);
        // The walk's quiet runs count on the service's clock: a `Date` not trusted is none.
        let facts = PageFacts {
            total_count,
            served_at: reading.date,
            future: Some(reading.future),
        };
        let accepted = walker.accept(&keys, facts).map_err(|source| {
            let request = self.describe(request);
            tracing::error!(%request, error = %source, "the service's page cannot be trusted");
            SyncError::Walk { request, source }
        })?;
        if let Some(listed) = accepted.listed_twice {
            misfits::warn_listed_twice(listed, &keys, self.schedule);
        }
        self.position = Some(walker.position().min(service_now));
        self.unstable_tie_order |= walker.tie_order_unstable();
        if walker.held_groups().len() != self.held_groups.len() {
            self.held_groups = walker.held_groups().to_vec();
        }
        let (calls, content_hashes) = walk.details.recent().keep_fresh(data, walker.position());
        Ok(AcceptedPage {
            calls,
            content_hashes,
            checkpoint: accepted.checkpoint,
            service_now,
            set_aside,
        })
    }

    /// Counts and reports calls stamped later than the service's own clock.
    fn note_future_rows(&mut self, calls: &[OutboundCall], clock: Reading) {
        let (service_now, from) = (clock.now, clock.future);
        let future: Vec<&OutboundCall> = calls.iter().filter(|c| c.updated_at >= from).collect();
        if let Some(first) = future.first() {
            self.tally.future_rows += future.len() as u64;
            tracing::warn!(
                calls = future.len(),
                first = %first.uid,
                updated_at = %first.updated_at,
                ahead_secs = first.updated_at.secs_since(service_now),
                "calls stamped later than the service's clock: stored, and read again until its clock catches up"
            );
        }
    }

    /// The answer to `request`: asked ahead, or asked now.
    async fn answer(
        &self,
        ahead: &mut Ahead<'e>,
        details: &DetailPlan,
        request: PageRequest,
    ) -> Result<Fetched, SyncError> {
        loop {
            if let Some(listed) = ahead.answer(&request).await {
                if listed.is_ok() {
                    self.progress.answered(self.schedule);
                }
                return listed;
            }
            // Not asked ahead (the first request of the walk): the walk wants it alone.
            ahead.want(&[request], self.fetcher(details));
        }
    }

    /// How a request goes out: a future owning what it needs, so that it can stay in flight
    /// while the pass does other work. A walk's page brings its details
    /// ([`DetailPlan::fetch`]); a quiet check's rows are not the walk's.
    fn fetcher(
        &self,
        details: &DetailPlan,
    ) -> impl Fn(PageRequest) -> BoxFuture<'e, Result<Fetched, SyncError>> + use<'e> {
        let (engine, schedule, counters) = (self.engine, self.schedule, self.counters.clone());
        let details = details.clone();
        move |request| {
            let (counters, details) = (counters.clone(), details.clone());
            Box::pin(async move {
                let query = list_query(&engine.settings.filter, &request);
                let listed = engine
                    .client
                    .list_calls(schedule, &query, &counters)
                    .await?;
                Ok(match request.purpose {
                    Purpose::Walk => details.fetch(&engine.client, &counters, listed).await,
                    Purpose::QuietCheck => Fetched::listed_only(listed),
                })
            })
        }
    }

    fn query(&self, request: &PageRequest) -> ListQuery<'_> {
        list_query(&self.engine.settings.filter, request)
    }

    fn describe(&self, request: &PageRequest) -> String {
        ApiClient::describe_list(self.schedule, &self.query(request))
    }

    /// Replaces the list items that lack attempt children (or all, in `always` mode) by the
    /// detail endpoint's version, keeping the page's order: the details fetched with the
    /// page, and any the fetch did not ask for, asked now. `hashes` are the calls' content
    /// hashes, recomputed for the calls replaced (each call is hashed once a pass).
    async fn complete(
        &mut self,
        mut calls: Vec<OutboundCall>,
        mut hashes: Vec<u64>,
        mut fetched: Details,
        plan: &DetailPlan,
    ) -> Result<(Vec<OutboundCall>, Vec<u64>), SyncError> {
        let mode = self.plan.details;
        let client: &ApiClient = &self.engine.client;
        let counters = &self.counters;
        self.tally.detail_requests += fetched.len() as u64;
        let mut answered = Vec::new();
        let mut missing = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if needs_detail(call, mode) {
                match fetched.take(call.uid) {
                    Some(detail) => answered.push((i, call.uid, detail)),
                    None => missing.push((i, call.uid)),
                }
            }
        }
        // All asked at once, as the fetch asks them: the walk's permits bound them. Each is
        // counted once answered, as the fetch's are: not while it waits for its turn.
        let asked_now: FuturesUnordered<_> = missing
            .into_iter()
            .map(|(i, uid)| async move {
                let detail = plan.ask(client, counters, uid).await;
                (i, uid, detail.map(|(call, _)| call))
            })
            .collect();
        let asked_now = asked_now.inspect(|_| self.tally.detail_requests += 1);
        let mut details = futures::stream::iter(answered).chain(asked_now);
        while let Some((i, uid, detail)) = details.next().await {
            if detail.is_ok() || detail.as_ref().is_err_and(ApiError::is_not_found) {
                self.progress.answered(self.schedule);
            }
            match detail {
                // Not promised by the spec, so checked: the checkpoint will pass the list
                // item's instant, so an older version written for it would stay. At the
                // detail's own precision, which the spec does not promise is the list's.
                Ok(detail)
                    if detail
                        .updated_at
                        .before_at_own_precision(calls[i].updated_at) =>
                {
                    return Err(SyncError::DetailBehindList {
                        call: uid,
                        listed: calls[i].updated_at,
                        detail: detail.updated_at,
                    });
                }
                Ok(detail) => {
                    hashes[i] = detail.content_hash();
                    calls[i] = detail;
                }
                // Gone between the list and the detail request: keep what the list said.
                Err(err) if err.is_not_found() => {
                    tracing::warn!(call = %uid, "call listed but its detail is gone; keeping the list item");
                }
                Err(err) => return Err(SyncError::from(err)),
            }
        }
        Ok((calls, hashes))
    }

    fn stats(&self) -> RunStats {
        let t = &self.tally;
        RunStats {
            pages: t.pages,
            calls_seen: t.calls_seen,
            calls_written: t.calls_written,
            requests: self.counters.requests(),
            retries: self.counters.retries(),
            detail_requests: t.detail_requests,
            rate_limited: self.counters.rate_limited(),
            throttled_ms: u64::try_from(self.counters.throttled().as_millis()).unwrap_or(u64::MAX),
            future_rows: t.future_rows,
        }
    }

    /// The service's clock now minus where the walk got to.
    fn lag_secs(&self) -> Option<f64> {
        Some(self.clock.now()?.secs_since(self.position?))
    }
}

/// A page the walk accepted, before its details are fetched.
struct AcceptedPage {
    calls: Vec<OutboundCall>,
    /// `calls`' content hashes, in order: computed once, here, and handed to the writer.
    content_hashes: Vec<u64>,
    /// Where the walk may put the checkpoint once these calls are written (before the cap
    /// at the service's clock).
    checkpoint: Timestamp,
    service_now: Timestamp,
    /// The page's calls that did not fit, to be set aside with it.
    set_aside: Vec<SetAside>,
}

fn list_query<'f>(filter: &'f ListFilter, request: &PageRequest) -> ListQuery<'f> {
    ListQuery {
        updated_after: Some(request.updated_after),
        page: request.page,
        page_size: request.page_size,
        filter,
    }
}
