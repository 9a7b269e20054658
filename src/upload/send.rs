//! The second pass: the checked file sent chunk by chunk, each recorded in the ledger before
//! and after its request, a chunk whose answer was lost looked up until it settles.

use std::time::Duration;

use super::columns::Columns;
use super::error::UploadError;
use super::existing::{InSchedule, refuse_rows_already_there, whole_chunk};
use super::job::{Checked, MAX_LISTED_PROBLEMS, UploadOptions, UploadProgress, UploadSummary};
use super::plan::{self, Answer, InWindow, Ledger, Listed, Lookup, Refusal, Step, Stop};
use super::problem::RowProblem;
use super::rows::{Chunk, Rows};
use super::sender::Sender;
use crate::api::{ApiClient, ApiError, Counters};
use crate::service::Timestamp;
use crate::warehouse::{ChunkKey, ChunkState, UploadLedger};

/// Sends a checked file, chunk by chunk, skipping what an earlier run created. First the
/// external_ids the schedule has are found ([`Sender::calls_in_schedule`]): a row whose
/// external_id the schedule already has is never sent — with any such row outside the chunks the ledger knows, nothing
/// is sent ([`UploadError::AlreadyInSchedule`]) unless `skip_existing`, which sends the
/// others. A chunk the service refuses for its rows (a 400 pointing at them) is counted and
/// reported in the summary, and the next chunks are sent; any other failure stops the upload.
pub async fn send(
    client: &ApiClient,
    warehouse: &mut dyn UploadLedger,
    options: &UploadOptions,
    checked: &Checked,
    progress: &dyn UploadProgress,
) -> Result<UploadSummary, UploadError> {
    let sender = Sender {
        client,
        options,
        columns: Rows::open(options)?.columns,
        counters: Counters::for_lane(options.schedule),
        progress,
    };
    let known = sender.calls_in_schedule(warehouse, checked).await?;
    if !options.skip_existing && known.calls > 0 {
        refuse_rows_already_there(warehouse, options, checked, &known)?;
    }
    let mut rows = Rows::open(options)?;
    let mut as_checked = checked.chunk_digests.iter();
    let mut summary = UploadSummary::default();
    let mut next_line = 2;
    while let Some(chunk) = rows.next_chunk()? {
        if as_checked.next() != Some(&chunk.digest) {
            return Err(UploadError::FileChanged {
                path: options.path.clone(),
                first_line: chunk.first_line(),
            });
        }
        let key = ChunkKey {
            schedule: options.schedule,
            fingerprint: checked.fingerprint.clone(),
            first_line: chunk.first_line(),
        };
        let n = chunk.calls.len() as u64;
        let sent = sender.send_chunk(warehouse, &key, &chunk, &known).await;
        match sent {
            Ok(outcome) => summary.add(outcome),
            Err(UploadError::ScheduleNotFound { schedule, .. }) => {
                return Err(UploadError::ScheduleNotFound {
                    schedule,
                    sent_before: summary.chunks_created + summary.chunks_found > 0,
                });
            }
            Err(err) => return Err(err),
        }
        summary.rows += n;
        next_line = chunk.last_line() + 1;
        progress.chunk_done(summary.rows, checked.rows);
    }
    if as_checked.next().is_some() {
        // Shorter than it was: the rows left out were never sent.
        return Err(UploadError::FileChanged {
            path: options.path.clone(),
            first_line: next_line,
        });
    }
    Ok(summary)
}

/// The first and the longest pause between lookups of a chunk whose answer was lost.
const FIRST_POLL: Duration = Duration::from_millis(250);
const LONGEST_POLL: Duration = Duration::from_secs(5);

/// What became of one chunk of the file.
#[derive(Debug, Default)]
pub(super) struct ChunkOutcome {
    /// Rows this run created (in one chunk sent).
    pub(super) created: u64,
    /// Rows found created already (by an earlier run, or another file with the same rows).
    pub(super) found: u64,
    /// Rows passed over because their external_id is in the schedule (`--skip-existing`).
    pub(super) skipped: u64,
    /// Rows of a chunk the service refused, and its reasons.
    pub(super) refused: u64,
    pub(super) problems: Vec<RowProblem>,
}

impl UploadSummary {
    pub(super) fn add(&mut self, outcome: ChunkOutcome) {
        self.calls_created += outcome.created;
        self.chunks_created += u64::from(outcome.created > 0);
        self.rows_found += outcome.found;
        self.chunks_found += u64::from(outcome.found > 0);
        self.rows_skipped += outcome.skipped;
        self.rows_refused += outcome.refused;
        self.chunks_refused += u64::from(outcome.refused > 0);
        let room = MAX_LISTED_PROBLEMS.saturating_sub(self.refusals.len());
        self.refusals
            .extend(outcome.problems.into_iter().take(room));
    }
}

impl Sender<'_> {
    /// One chunk, step by step as the plan decides ([`plan`]): here the ledger is written,
    /// the requests sent and the lookups waited for, each bringing the plan its next event.
    pub(super) async fn send_chunk(
        &self,
        warehouse: &mut dyn UploadLedger,
        key: &ChunkKey,
        chunk: &Chunk,
        known: &InSchedule,
    ) -> Result<ChunkOutcome, UploadError> {
        let n = chunk.calls.len() as u64;
        let present = known.of_chunk(chunk)?;
        // The rows whose external_id the schedule did not have when the upload started: the
        // only rows ever sent, so finding one of them later proves the chunk was created.
        let new = chunk.only(|i| present[i].is_empty());
        let skipped = n - new.calls.len() as u64;
        let found = |calls: u64| ChunkOutcome {
            found: calls,
            skipped: n - calls,
            ..ChunkOutcome::default()
        };
        let ledger = match warehouse.chunk_state(key)? {
            Some(ChunkState::Created(uids)) => Ledger::Created {
                calls: (uids.len() as u64).min(n),
            },
            Some(ChunkState::Sent { at }) => Ledger::Sent { at },
            None => Ledger::Unknown,
        };
        let listed = Listed {
            every_row: whole_chunk(&present),
            rows_to_send: !new.calls.is_empty(),
            lookable: new.has_external_ids(),
        };
        let mut step = plan::on_arrival(ledger, listed);
        loop {
            step = match step {
                Step::CountFound { calls } => return Ok(found(calls)),
                Step::RecordFound { uids, record_sent } => {
                    if record_sent {
                        warehouse.chunk_sent(key, chunk.last_line(), chunk.calls.len())?;
                    }
                    warehouse.chunk_created(key, &uids)?;
                    tracing::info!(
                        first_line = chunk.first_line(),
                        last_line = chunk.last_line(),
                        "chunk found created already"
                    );
                    return Ok(found(uids.len() as u64));
                }
                Step::Skip => {
                    return Ok(ChunkOutcome {
                        skipped,
                        ..ChunkOutcome::default()
                    });
                }
                Step::Send { attempt } => {
                    Self::say_skipped(chunk, skipped);
                    self.send_try(warehouse, key, chunk.last_line(), &new, attempt)
                        .await?
                }
                Step::SendUnconfirmed => {
                    tracing::warn!(
                        first_line = new.first_line(),
                        "rows without external_id cannot be looked up: sending the chunk again may duplicate it"
                    );
                    Self::say_skipped(chunk, skipped);
                    self.send_try(warehouse, key, chunk.last_line(), &new, 1)
                        .await?
                }
                Step::SendAgain { attempt, lost } => {
                    tracing::warn!(
                        first_line = new.first_line(),
                        last_line = new.last_line(),
                        error = %lost,
                        "the chunk did not show in the service within the settle window; sending it again"
                    );
                    self.send_try(warehouse, key, chunk.last_line(), &new, attempt)
                        .await?
                }
                Step::Settle { sent_by, since } => {
                    plan::on_lookup(sent_by, self.settle(&new, since).await?)
                }
                Step::RecordCreated { uids } => {
                    warehouse.chunk_created(key, &uids)?;
                    return Ok(ChunkOutcome {
                        created: uids.len() as u64,
                        skipped,
                        ..ChunkOutcome::default()
                    });
                }
                Step::RecordRefused(refusal, err) => {
                    warehouse.chunk_not_created(key)?;
                    return Ok(ChunkOutcome {
                        refused: new.calls.len() as u64,
                        problems: self.refused(&new, refusal, err)?,
                        skipped,
                        ..ChunkOutcome::default()
                    });
                }
                Step::Stop(stop) => return Err(self.stopped(chunk, &new, stop)),
            };
        }
    }

    /// Rows left out of the chunk sent, their external_id in the schedule already.
    fn say_skipped(chunk: &Chunk, skipped: u64) {
        if skipped > 0 {
            tracing::info!(
                first_line = chunk.first_line(),
                last_line = chunk.last_line(),
                skipped,
                "rows whose external_id is in the schedule already are not sent"
            );
        }
    }

    /// Try `attempt` at sending the chunk's `new` rows (the ledger's `last_line` is the file
    /// chunk's): recorded in the ledger as sent before the request goes out; the answer is
    /// the plan's next event.
    async fn send_try(
        &self,
        warehouse: &mut dyn UploadLedger,
        key: &ChunkKey,
        last_line: u64,
        new: &Chunk,
        attempt: u32,
    ) -> Result<Step<ApiError>, UploadError> {
        let sent_at = warehouse.chunk_sent(key, last_line, new.calls.len())?;
        let sent = self
            .client
            .create_calls(
                self.options.schedule,
                new.calls.clone(),
                self.options.force,
                &self.counters,
            )
            .await;
        let answer = match sent {
            Ok(uids) => Answer::Created(uids),
            // An answer saying no: all or nothing, so nothing was created.
            Err(err) if err.status().is_some_and(|s| s.is_client_error()) => {
                Answer::Refused(self.refusal(new, &err), err)
            }
            // No answer, or a 5xx: the service may have created the chunk, or may still.
            Err(err) => Answer::Lost(err),
        };
        Ok(plan::on_answer(
            attempt,
            sent_at,
            answer,
            new.has_external_ids(),
        ))
    }

    /// What a 4xx refused: rows (a 400 pointing into the chunk), the schedule (a 404), or
    /// the request itself (an enabled schedule, a 400 about no row).
    fn refusal(&self, chunk: &Chunk, err: &ApiError) -> Refusal {
        if err.is_not_found() {
            return Refusal::ScheduleNotFound;
        }
        let (_, about_rows) = refused_rows(err, chunk, &self.columns);
        if err.is_bad_request() && about_rows {
            Refusal::ForItsRows
        } else {
            Refusal::TheRequest
        }
    }

    /// A refusal of rows, reported and passed over; of the schedule or the request, the end.
    fn refused(
        &self,
        chunk: &Chunk,
        refusal: Refusal,
        err: ApiError,
    ) -> Result<Vec<RowProblem>, UploadError> {
        let (problems, _) = refused_rows(&err, chunk, &self.columns);
        match refusal {
            Refusal::ForItsRows => {
                tracing::warn!(
                    first_line = chunk.first_line(),
                    last_line = chunk.last_line(),
                    problems = problems.len(),
                    "the service refused the chunk for its rows; going on with the next"
                );
                Ok(problems)
            }
            Refusal::ScheduleNotFound => Err(UploadError::ScheduleNotFound {
                schedule: self.options.schedule,
                sent_before: false,
            }),
            Refusal::TheRequest => Err(UploadError::Refused {
                first_line: chunk.first_line(),
                last_line: chunk.last_line(),
                problems,
                cause: Box::new(err),
            }),
        }
    }

    /// The error that stops the upload at `chunk`, whose `new` rows were to be sent.
    fn stopped(&self, chunk: &Chunk, new: &Chunk, stop: Stop<ApiError>) -> UploadError {
        let (first_line, last_line) = (new.first_line(), new.last_line());
        match stop {
            Stop::PartlyThere(problem) => self.partly_there(chunk, problem),
            Stop::Unknowable(err) => UploadError::Unknowable {
                first_line,
                last_line,
                cause: Box::new(err),
            },
            Stop::GaveUp(err) => UploadError::GaveUp {
                first_line,
                last_line,
                cause: Box::new(err),
            },
        }
    }

    /// The rows of `chunk`, sent at `sent_at` without an answer, looked for until they show
    /// or the settle window after `sent_at` has passed.
    pub(super) async fn settle(
        &self,
        chunk: &Chunk,
        sent_at: Timestamp,
    ) -> Result<Lookup, UploadError> {
        let deadline = sent_at.saturating_add(self.options.settle);
        let mut pause = FIRST_POLL;
        let mut told = false;
        let result = loop {
            let found = self.look_up(chunk).await?;
            let left = deadline.since(Timestamp::now());
            match plan::in_window(found, left.is_zero()) {
                InWindow::Done(lookup) => break Ok(lookup),
                InWindow::PartlyThere(problem) => break Err(self.partly_there(chunk, problem)),
                InWindow::LookAgain => {}
            }
            if !told {
                told = true;
                let what = format!(
                    "confirming lines {}–{} ({} calls sent, answer lost): looking them up by external_id until {} before sending them again",
                    chunk.first_line(),
                    chunk.last_line(),
                    chunk.calls.len(),
                    deadline.truncated(1_000_000_000).to_rfc3339()
                );
                tracing::info!("{what}");
                self.progress.waiting(Some(&what));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(LONGEST_POLL);
        };
        if told {
            self.progress.waiting(None);
        }
        result
    }
}

/// The service's pointers (`/outbound_calls/<index>/<field>[/<parameter>]`) as CSV lines and
/// columns; problems without a pointer into the chunk name its first line and no column.
/// `true` when any problem points at a row.
pub(super) fn refused_rows(
    err: &ApiError,
    chunk: &Chunk,
    columns: &Columns,
) -> (Vec<RowProblem>, bool) {
    let ApiError::Status {
        body: Some(body), ..
    } = err
    else {
        return (Vec::new(), false);
    };
    let mut about_rows = false;
    let problems = body
        .errors
        .iter()
        .map(|item| {
            let reason = match (&item.title, &item.detail) {
                (Some(t), Some(d)) => format!("{t}: {d}"),
                (Some(t), None) | (None, Some(t)) => t.clone(),
                (None, None) => "refused".to_owned(),
            };
            let pointer = item.source.as_ref().and_then(|s| s.pointer.as_deref());
            match pointer.and_then(|p| locate(p, &chunk.lines, columns)) {
                Some((line, column)) => {
                    about_rows = true;
                    RowProblem {
                        line,
                        column,
                        reason,
                    }
                }
                None => RowProblem {
                    line: chunk.first_line(),
                    column: None,
                    reason: match pointer {
                        Some(p) => format!("{reason} (at {p:?})"),
                        None => reason,
                    },
                },
            }
        })
        .collect();
    (problems, about_rows)
}

/// The CSV line and column a bulk entry's JSON pointer (RFC 6901: `~1` is `/`, `~0` is `~`)
/// points at (no column for the entry as a whole); `None` when it points at no entry of the
/// chunk.
pub(super) fn locate(
    pointer: &str,
    lines: &[u64],
    columns: &Columns,
) -> Option<(u64, Option<String>)> {
    let mut tokens = pointer
        .strip_prefix("/outbound_calls/")?
        .split('/')
        .map(|token| token.replace("~1", "/").replace("~0", "~"));
    let index: usize = tokens.next()?.parse().ok()?;
    let line = *lines.get(index)?;
    let column = match (tokens.next().as_deref(), tokens.next()) {
        (Some("custom_parameters"), Some(name)) => Some(columns.column_of(&name)),
        (Some(field), _) => Some(columns.column_of(field)),
        (None, _) => None,
    };
    Some((line, column))
}
