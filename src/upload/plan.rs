//! The chunk plan: what to do next with one chunk, from what the ledger holds of it and what
//! just happened to it. Pure: no I/O, no clock; `send.rs` runs the steps (the ledger's
//! writes, the requests, the waits) and brings back the next event.
//!
//! A chunk comes up ([`on_arrival`]) with the ledger's word on it and what the listing of the
//! schedule before sending found of its rows; a send brings an answer ([`on_answer`]); the
//! lookups after a lost answer bring what they found ([`on_lookup`]), and while the settle
//! window lasts each lookup decides whether to look again ([`in_window`]). `E` is what a
//! failed request says (`ApiError`), carried to the step that reports it.

use uuid::Uuid;

use crate::service::Timestamp;

/// Sends of one chunk that the service neither answered nor acted on, before giving up.
pub(super) const MAX_CHUNK_TRIES: u32 = 3;

/// What the ledger holds of a chunk when it comes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ledger {
    /// Nothing: never sent from this warehouse (or a ledger lost with its warehouse).
    Unknown,
    /// Sent at `at` by a run that never saw the answer: the service may have created it,
    /// or still may.
    Sent { at: Timestamp },
    /// Created, with this many calls.
    Created { calls: u64 },
}

/// What the listing of the schedule before sending found of a chunk's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Listed {
    /// Every row's external_id is in the schedule, each with one call: those calls, in row
    /// order.
    pub(super) every_row: Option<Vec<Uuid>>,
    /// Some rows' external_ids are not in the schedule: those rows are the ones to send.
    pub(super) rows_to_send: bool,
    /// The rows to send have external_ids to look them up by after a lost answer.
    pub(super) lookable: bool,
}

/// What the service answered to a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer<E> {
    /// Created: the calls' uids, in row order.
    Created(Vec<Uuid>),
    /// A 4xx: all or nothing, so nothing was created.
    Refused(Refusal, E),
    /// No answer (a timeout, a dropped connection) or a 5xx: the service may have created
    /// the chunk, or may still.
    Lost(E),
}

/// Why the service refused a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A 400 pointing at rows of the chunk: those rows are reported, the next chunk sent.
    ForItsRows,
    /// A 404: the schedule is not there.
    ScheduleNotFound,
    /// Anything else (an enabled schedule without force, a 400 about no row): the end.
    TheRequest,
}

/// Who sent the rows being looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SentBy<E> {
    /// A run that never saw the answer (the ledger has the chunk as sent).
    AnEarlierRun,
    /// This run, in try `attempt`, whose answer was lost as `lost` says.
    ThisRun { attempt: u32, lost: E },
}

/// What one lookup of the rows sent found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    Nothing,
    /// Every row, with its call's uid, in row order.
    All(Vec<Uuid>),
    /// The first rows but not all (a service still creating them, or rows made elsewhere).
    Partly(String),
}

/// What the lookups found once they ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lookup {
    /// Every row sent, with its call's uid, in row order.
    Found(Vec<Uuid>),
    /// None of them until the settle window was over: not created, safe to send.
    NotFound,
}

/// The next step with a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step<E> {
    /// The ledger has it created: its calls count as found.
    CountFound { calls: u64 },
    /// Its rows are in the schedule already, sent by an earlier run or another file: record
    /// the chunk as created with these calls (as sent first, when the ledger did not have
    /// it), counted as found.
    RecordFound { uids: Vec<Uuid>, record_sent: bool },
    /// No row to send (each external_id in the schedule already): the rows count as skipped.
    Skip,
    /// Send the rows to send: try `attempt` of [`MAX_CHUNK_TRIES`].
    Send { attempt: u32 },
    /// Send them again, try `attempt`: the last try's answer was lost (`lost`) and the rows
    /// did not show within the settle window.
    SendAgain { attempt: u32, lost: E },
    /// Send again what an earlier run sent without an answer, though the rows have no
    /// external_id to look them up by: a duplicate is possible (said in the log).
    SendUnconfirmed,
    /// Look the rows sent up until they show or the settle window after `since` is over.
    Settle {
        sent_by: SentBy<E>,
        since: Timestamp,
    },
    /// Record the chunk as created by this run with these calls.
    RecordCreated { uids: Vec<Uuid> },
    /// Record the chunk as not created, then act on the refusal.
    RecordRefused(Refusal, E),
    /// Stop the upload.
    Stop(Stop<E>),
}

/// Why an upload stops at a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stop<E> {
    /// An earlier run sent it, and every row's external_id is in the schedule, some more
    /// than once: something else made calls with them.
    PartlyThere(String),
    /// The answer was lost and the rows have no external_id to look them up by.
    Unknowable(E),
    /// [`MAX_CHUNK_TRIES`] sends, none answered and none showing in the settle window; the
    /// last one's failure.
    GaveUp(E),
}

/// A chunk comes up: the ledger's word, then the listing's.
pub(super) fn on_arrival<E>(ledger: Ledger, listed: Listed) -> Step<E> {
    let Listed {
        every_row,
        rows_to_send,
        lookable,
    } = listed;
    match (ledger, every_row) {
        (Ledger::Created { calls }, _) => Step::CountFound { calls },
        (Ledger::Sent { .. }, Some(uids)) => Step::RecordFound {
            uids,
            record_sent: false,
        },
        (Ledger::Sent { .. }, None) if !rows_to_send => Step::Stop(Stop::PartlyThere(
            "every row's external_id is in the schedule, some more than once".into(),
        )),
        (Ledger::Sent { .. }, None) if !lookable => Step::SendUnconfirmed,
        (Ledger::Sent { at }, None) => Step::Settle {
            sent_by: SentBy::AnEarlierRun,
            since: at,
        },
        (Ledger::Unknown, Some(uids)) => Step::RecordFound {
            uids,
            record_sent: true,
        },
        (Ledger::Unknown, None) if !rows_to_send => Step::Skip,
        (Ledger::Unknown, None) => Step::Send { attempt: 1 },
    }
}

/// The service's answer to try `attempt`, sent at `sent_at`; `lookable`: the rows sent have
/// external_ids.
pub(super) fn on_answer<E>(
    attempt: u32,
    sent_at: Timestamp,
    answer: Answer<E>,
    lookable: bool,
) -> Step<E> {
    match answer {
        Answer::Created(uids) => Step::RecordCreated { uids },
        Answer::Refused(refusal, err) => Step::RecordRefused(refusal, err),
        Answer::Lost(err) if !lookable => Step::Stop(Stop::Unknowable(err)),
        Answer::Lost(lost) => Step::Settle {
            sent_by: SentBy::ThisRun { attempt, lost },
            since: sent_at,
        },
    }
}

/// What the lookups of the rows `sent_by` sent found.
pub(super) fn on_lookup<E>(sent_by: SentBy<E>, lookup: Lookup) -> Step<E> {
    match (sent_by, lookup) {
        (SentBy::AnEarlierRun, Lookup::Found(uids)) => Step::RecordFound {
            uids,
            record_sent: false,
        },
        (SentBy::ThisRun { .. }, Lookup::Found(uids)) => Step::RecordCreated { uids },
        (SentBy::AnEarlierRun, Lookup::NotFound) => Step::Send { attempt: 1 },
        (SentBy::ThisRun { attempt, lost }, Lookup::NotFound) if attempt >= MAX_CHUNK_TRIES => {
            Step::Stop(Stop::GaveUp(lost))
        }
        (SentBy::ThisRun { attempt, lost }, Lookup::NotFound) => Step::SendAgain {
            attempt: attempt + 1,
            lost,
        },
    }
}

/// What one lookup's finding means while the settle window lasts (`over`: it has passed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum InWindow {
    /// The lookups are over: their result.
    Done(Lookup),
    /// Look again after a pause.
    LookAgain,
    /// Part of the chunk is there after the whole window: the upload stops.
    PartlyThere(String),
}

pub(super) fn in_window(found: Found, over: bool) -> InWindow {
    match (found, over) {
        (Found::All(uids), _) => InWindow::Done(Lookup::Found(uids)),
        (Found::Nothing, true) => InWindow::Done(Lookup::NotFound),
        (Found::Partly(problem), true) => InWindow::PartlyThere(problem),
        (Found::Nothing | Found::Partly(_), false) => InWindow::LookAgain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a failed request said, in these tables.
    type E = &'static str;

    fn uids() -> Vec<Uuid> {
        vec![Uuid::from_u128(1), Uuid::from_u128(2)]
    }

    fn at() -> Timestamp {
        Timestamp::parse("2026-01-01T00:00:00Z").unwrap()
    }

    fn listed(every_row: bool, rows_to_send: bool, lookable: bool) -> Listed {
        Listed {
            every_row: every_row.then(uids),
            rows_to_send,
            lookable,
        }
    }

    #[test]
    fn a_chunk_coming_up_is_decided_by_the_ledger_then_the_listing() {
        let created = Ledger::Created { calls: 2 };
        let sent = Ledger::Sent { at: at() };
        let unknown = Ledger::Unknown;
        let found = |record_sent| Step::RecordFound {
            uids: uids(),
            record_sent,
        };
        let settle = Step::Settle {
            sent_by: SentBy::AnEarlierRun,
            since: at(),
        };
        let partly = Step::Stop(Stop::PartlyThere(
            "every row's external_id is in the schedule, some more than once".into(),
        ));
        // ledger, (every row listed, rows to send, lookable) → step
        let table: [(Ledger, Listed, Step<E>); 11] = [
            (
                created,
                listed(true, false, true),
                Step::CountFound { calls: 2 },
            ),
            (
                created,
                listed(false, true, true),
                Step::CountFound { calls: 2 },
            ),
            (
                created,
                listed(false, false, false),
                Step::CountFound { calls: 2 },
            ),
            (sent, listed(true, false, true), found(false)),
            (sent, listed(false, false, true), partly),
            (sent, listed(false, true, false), Step::SendUnconfirmed),
            (sent, listed(false, true, true), settle),
            (unknown, listed(true, false, true), found(true)),
            (unknown, listed(false, false, true), Step::Skip),
            (
                unknown,
                listed(false, true, false),
                Step::Send { attempt: 1 },
            ),
            (
                unknown,
                listed(false, true, true),
                Step::Send { attempt: 1 },
            ),
        ];
        for (ledger, listed, step) in table {
            let context = format!("{ledger:?} {listed:?}");
            assert_eq!(on_arrival(ledger, listed), step, "{context}");
        }
    }

    #[test]
    fn an_answer_is_recorded_or_a_lost_one_settled() {
        use Refusal::*;
        let settle = |attempt| Step::Settle {
            sent_by: SentBy::ThisRun {
                attempt,
                lost: "timeout",
            },
            since: at(),
        };
        // try, answer, lookable → step
        let table: [(u32, Answer<E>, bool, Step<E>); 9] = [
            (
                1,
                Answer::Created(uids()),
                true,
                Step::RecordCreated { uids: uids() },
            ),
            (
                3,
                Answer::Created(uids()),
                false,
                Step::RecordCreated { uids: uids() },
            ),
            (
                1,
                Answer::Refused(ForItsRows, "400"),
                true,
                Step::RecordRefused(ForItsRows, "400"),
            ),
            (
                2,
                Answer::Refused(ScheduleNotFound, "404"),
                true,
                Step::RecordRefused(ScheduleNotFound, "404"),
            ),
            (
                1,
                Answer::Refused(TheRequest, "409"),
                false,
                Step::RecordRefused(TheRequest, "409"),
            ),
            (1, Answer::Lost("timeout"), true, settle(1)),
            (3, Answer::Lost("timeout"), true, settle(3)),
            (
                1,
                Answer::Lost("503"),
                false,
                Step::Stop(Stop::Unknowable("503")),
            ),
            (
                2,
                Answer::Lost("503"),
                false,
                Step::Stop(Stop::Unknowable("503")),
            ),
        ];
        for (attempt, answer, lookable, step) in table {
            let context = format!("try {attempt} {answer:?} lookable {lookable}");
            assert_eq!(
                on_answer(attempt, at(), answer, lookable),
                step,
                "{context}"
            );
        }
    }

    #[test]
    fn a_settled_lookup_records_the_chunk_or_sends_it_again_until_the_last_try() {
        let this_run = |attempt| SentBy::ThisRun {
            attempt,
            lost: "timeout",
        };
        let again = |attempt| Step::SendAgain {
            attempt,
            lost: "timeout",
        };
        let found = Lookup::Found(uids());
        // sent by, lookup → step
        let table: [(SentBy<E>, Lookup, Step<E>); 8] = [
            (
                SentBy::AnEarlierRun,
                found.clone(),
                Step::RecordFound {
                    uids: uids(),
                    record_sent: false,
                },
            ),
            (
                this_run(1),
                found.clone(),
                Step::RecordCreated { uids: uids() },
            ),
            (
                this_run(MAX_CHUNK_TRIES),
                found,
                Step::RecordCreated { uids: uids() },
            ),
            (
                SentBy::AnEarlierRun,
                Lookup::NotFound,
                Step::Send { attempt: 1 },
            ),
            (this_run(1), Lookup::NotFound, again(2)),
            (this_run(2), Lookup::NotFound, again(3)),
            (
                this_run(MAX_CHUNK_TRIES),
                Lookup::NotFound,
                Step::Stop(Stop::GaveUp("timeout")),
            ),
            (
                this_run(MAX_CHUNK_TRIES + 1),
                Lookup::NotFound,
                Step::Stop(Stop::GaveUp("timeout")),
            ),
        ];
        for (sent_by, lookup, step) in table {
            let context = format!("{sent_by:?} {lookup:?}");
            assert_eq!(on_lookup(sent_by, lookup), step, "{context}");
        }
    }

    #[test]
    fn within_the_settle_window_only_every_row_ends_the_lookups_early() {
        let partly = || Found::Partly("line 3 is not there".into());
        // found, window over → what now
        let table = [
            (
                Found::All(uids()),
                false,
                InWindow::Done(Lookup::Found(uids())),
            ),
            (
                Found::All(uids()),
                true,
                InWindow::Done(Lookup::Found(uids())),
            ),
            (Found::Nothing, false, InWindow::LookAgain),
            (Found::Nothing, true, InWindow::Done(Lookup::NotFound)),
            (partly(), false, InWindow::LookAgain),
            (
                partly(),
                true,
                InWindow::PartlyThere("line 3 is not there".into()),
            ),
        ];
        for (found, over, then) in table {
            let context = format!("{found:?} over {over}");
            assert_eq!(in_window(found, over), then, "{context}");
        }
    }

    #[test]
    fn a_chunk_whose_every_answer_is_lost_and_never_shows_is_sent_max_tries_then_given_up() {
        let mut step: Step<E> = on_arrival(Ledger::Unknown, listed(false, true, true));
        let mut sends = 0;
        let given_up = loop {
            step = match step {
                Step::Send { attempt } | Step::SendAgain { attempt, .. } => {
                    sends += 1;
                    on_answer(attempt, at(), Answer::Lost("timeout"), true)
                }
                Step::Settle { sent_by, .. } => on_lookup(sent_by, Lookup::NotFound),
                other => break other,
            };
        };
        assert_eq!(given_up, Step::Stop(Stop::GaveUp("timeout")));
        assert_eq!(sends, MAX_CHUNK_TRIES);
    }
}
