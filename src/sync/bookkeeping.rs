//! A pass's opening and end on the writer, gathered across passes ([`Gathered`]): at a tick
//! every pass opens at once and most end within a few latencies of each other, and a
//! destination that can (PostgreSQL) records each group in one statement
//! (`Destination::open_passes`, `Destination::finish_runs`) instead of one a pass. Each
//! request still gets its own answer: a pass never sees another's. So do the passes' pages:
//! PostgreSQL writes a group of them in one transaction (`Destination::write_pages`), and
//! reads the stored calls of the pages of passes that have changed nothing yet (an idle
//! pass's) for all of them at once (`Destination::write_quiet_pages`).

use std::sync::Arc;

use uuid::Uuid;

use super::error::SyncError;
use super::writer::Gathered;
use crate::service::Timestamp;
use crate::warehouse::{Claim, Destination, PassOpened, PassStart, RunId, RunKind, RunRecord};
use crate::warehouse::{PageBatch, PageWrite, ProcessIdentity, QuietRead, WarehouseError};

/// A pass asking to open ([`Openings`]).
pub(super) struct OpenRequest {
    pub schedule: Uuid,
    pub kind: RunKind,
    /// `PassPlan::unless_walked_since`.
    pub walked_since: Option<Timestamp>,
    pub walker: ProcessIdentity,
}

/// What the opening of a pass found.
pub(super) enum Opening {
    /// Another process holds the schedule's claim.
    Busy,
    /// Another process walked the schedule since the daemon's tick (`PassPlan::
    /// unless_walked_since`): with several daemons sharing the schedules, the first to claim
    /// it on a tick walks it, and the others, claiming it after that pass ended, leave it
    /// for the next tick. The claim was let go.
    WalkedBy(ProcessIdentity),
    /// The schedule is claimed and the pass's start recorded (`run`: its `sync_runs` row;
    /// `None` from a destination that keeps none); `stored`: the checkpoint, or why it
    /// could not be read (the pass's failure, recorded in its row).
    Started {
        claim: Claim,
        run: Option<RunId>,
        stored: Result<Option<Timestamp>, SyncError>,
    },
}

/// A pass asking to end ([`Endings`]): its row closed with `record`, if it has one, then its
/// claim let go.
pub(super) struct EndRequest {
    pub claim: Claim,
    pub record: Option<(RunId, RunRecord)>,
}

pub(super) type Openings = Gathered<OpenRequest, Result<Opening, SyncError>>;
pub(super) type Endings = Gathered<EndRequest, Result<(), SyncError>>;
/// Pages of passes that opened with a checkpoint and have changed nothing yet
/// (`Destination::write_quiet_pages`).
pub(super) type QuietPages = Gathered<PageBatch, Result<QuietRead, SyncError>>;

/// The openings of an engine's passes, gathered.
pub(super) fn openings() -> Arc<Openings> {
    Gathered::new(|sink, requests, answer| {
        open_all(sink, requests).into_iter().for_each(answer);
    })
}

/// The ends of an engine's passes, gathered.
pub(super) fn endings() -> Arc<Endings> {
    Gathered::new(|sink, requests, answer| {
        end_all(sink, requests).into_iter().for_each(answer);
    })
}

/// Pages to write (`Destination::write_pages`).
pub(super) type Pages = Gathered<PageBatch, Result<PageWrite, SyncError>>;

/// How many groups of pages are written at once, each on a connection of its own where the
/// destination has several. On PostgreSQL a page's rows cost the server a fraction as much
/// in a group (one statement a table and one commit for the group, where each page had ten
/// statements and a commit of its own), and two groups at once keep the server and the
/// writer busy together: two were the fastest of one, two and four (BENCHMARKS.md, "First
/// sync, PostgreSQL").
const PAGE_JOBS: usize = 2;

/// The most pages a group takes: enough that a page's share of the group's statements is
/// small (it is 1/32), few enough that the group's rows, gathered before they are sent,
/// stay a small part of the daemon's memory: unbounded groups (up to every pass in flight)
/// took the same time in more memory (BENCHMARKS.md, "First sync, PostgreSQL").
const PAGES_PER_GROUP: usize = 32;

/// The pages of an engine's passes, gathered.
pub(super) fn pages() -> Arc<Pages> {
    Gathered::with_jobs(
        |sink, pages, answer| {
            sink.write_pages(pages, &mut |written| {
                answer(written.map_err(SyncError::from))
            });
        },
        PAGE_JOBS,
        PAGES_PER_GROUP,
    )
}

/// The quiet pages of an engine's passes, gathered.
pub(super) fn quiet_pages() -> Arc<QuietPages> {
    Gathered::new(|sink, pages, answer| {
        let looked = sink.write_quiet_pages(pages);
        looked
            .into_iter()
            .for_each(|l| answer(l.map_err(SyncError::from)));
    })
}

/// On the writer thread: claims each schedule, then opens the passes whose claim it took,
/// together (`Destination::open_passes`: whether another walked the schedule since
/// `walked_since`, else its `sync_runs` row and the checkpoint). A claim left (walked
/// elsewhere, or a failure after it) is dropped here, on the thread that took it.
fn open_all(
    sink: &mut dyn Destination,
    requests: Vec<OpenRequest>,
) -> Vec<Result<Opening, SyncError>> {
    let schedules: Vec<Uuid> = requests.iter().map(|request| request.schedule).collect();
    let claims = sink.claims(&schedules);
    // Once the claims are held, not when the requests were made: passes of one schedule by
    // two processes never overlap in `sync_runs` (a request may wait its turn while the
    // claim's previous holder finishes).
    let started_at = Timestamp::now();
    let starts: Vec<PassStart<'_>> = requests
        .iter()
        .zip(&claims)
        .filter(|(_, claim)| matches!(claim, Ok(Some(_))))
        .map(|(request, _)| PassStart {
            schedule: request.schedule,
            kind: request.kind,
            started_at,
            walker: &request.walker,
            unless_walked_since: request.walked_since,
        })
        .collect();
    let mut opened = sink.open_passes(&starts).into_iter();
    claims
        .into_iter()
        .map(|claim| match claim {
            Err(err) => Err(err.into()),
            Ok(None) => Ok(Opening::Busy),
            Ok(Some(claim)) => match opened.next().unwrap_or_else(|| Err(unanswered("opening"))) {
                Ok(PassOpened::WalkedBy(walker)) => Ok(Opening::WalkedBy(walker)),
                Ok(PassOpened::Started { run, checkpoint }) => Ok(Opening::Started {
                    claim,
                    run,
                    stored: checkpoint
                        .map(|checkpoint| checkpoint.map(|c| c.cursor))
                        .map_err(SyncError::from),
                }),
                Err(err) => Err(err.into()),
            },
        })
        .collect()
}

/// On the writer thread: closes the rows of the passes that have one, together
/// (`Destination::finish_runs`; a failure there is that pass's failure), then lets every
/// claim go, where it was taken. A release asks the lock session (PostgreSQL), a wait an
/// async worker must not make.
fn end_all(sink: &mut dyn Destination, requests: Vec<EndRequest>) -> Vec<Result<(), SyncError>> {
    let records: Vec<(RunId, &RunRecord)> = requests
        .iter()
        .filter_map(|request| request.record.as_ref().map(|(run, record)| (*run, record)))
        .collect();
    let mut finished = sink.finish_runs(&records).into_iter();
    let results = requests
        .iter()
        .map(|request| match request.record {
            Some(_) => finished
                .next()
                .unwrap_or_else(|| Err(unanswered("end")))
                .map_err(SyncError::from),
            None => Ok(()),
        })
        .collect();
    drop(records);
    // The claims let go once their passes' rows are closed.
    sink.release(requests.into_iter().map(|request| request.claim).collect());
    results
}

/// A destination that answered fewer results than it was asked for: a bug in it, said
/// rather than hidden.
fn unanswered(step: &'static str) -> WarehouseError {
    WarehouseError::Unanswered { step }
}
