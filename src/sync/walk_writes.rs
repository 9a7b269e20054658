//! A walk's pages on their way to the destination: at most one write in flight, and the
//! pages read meanwhile waiting behind it, handed over as one write as soon as it has
//! committed.
//!
//! **Why pages wait.** A walk reads ahead of its writes. When its destination writes more
//! slowly than the service answers, the pages read during a write would otherwise each
//! become a transaction of their own, one after another, each paying a commit and its round
//! trips; gathered, they pay once. A walk whose destination keeps up hands each page over
//! alone, as before: nothing waits behind a write that has already committed.
//!
//! **What stays true.** The pages of one write are the walk's, in order, with the later
//! checkpoint ([`PageBatch::append`]): committed whole or not at all, they change what
//! committing them one by one would, so the checkpoint is never ahead of the data. A write
//! that fails is the walk's last: the pages waiting behind it are dropped, never written past
//! the calls it lost. Once [`MOST_CALLS_WAITING`] calls wait (so a page's fewer than that
//! more at most: the memory they hold, and what a crash makes the next pass read again), the
//! walk waits for the write.
//!
//! **Never waiting on nothing.** A write that commits while the walk waits for a page (a
//! service far away, a request held or retried) hands the pages waiting over at once:
//! [`Writes::keep_writing`] runs beside every wait of the walk, and is safe to drop at any
//! await.

use std::future::pending;

use uuid::Uuid;

use super::error::SyncError;
use super::writer::Pending;
use super::{Engine, PassProgress};
use crate::service::Timestamp;
use crate::warehouse::{PageBatch, PageWrite, QuietRead};

/// The calls waiting behind a walk's write in flight from which the walk waits for it (the
/// page that reached them is among them, so a batch may pass this by less than a page).
pub(super) const MOST_CALLS_WAITING: usize = 1_000;

/// A write handed to the writer, until it commits.
enum InFlight {
    Written(Pending<PageWrite>),
    /// The pages of a pass that has changed nothing yet ([`Writes::quiet`]).
    Quiet(Pending<QuietRead>),
}

/// The writes of one walk.
pub(super) struct Writes<'e> {
    engine: &'e Engine,
    schedule: Uuid,
    progress: &'e dyn PassProgress,
    in_flight: Option<InFlight>,
    /// The pages read while the write in flight is written, as one batch.
    waiting: Option<PageBatch>,
    /// The pass opened with a checkpoint and no write of it has changed anything yet: its
    /// pages go to the writer gathered with other such passes' (`write_quiet_pages`), which
    /// PostgreSQL answers with one read for all when they change nothing (an idle pass).
    quiet: bool,
    /// Calls the committed writes wrote.
    pub(super) calls_written: u64,
    /// The instant a committed write's conflicts hold the checkpoint at: no later batch of
    /// the walk moves it past (`warehouse/set_aside.rs`).
    hold_at: Option<Timestamp>,
    /// The schedule's calls set aside, as the latest write that counted them saw.
    set_aside_now: Option<u64>,
}

impl<'e> Writes<'e> {
    pub(super) fn new(
        engine: &'e Engine,
        schedule: Uuid,
        progress: &'e dyn PassProgress,
        quiet: bool,
    ) -> Self {
        Writes {
            engine,
            schedule,
            progress,
            in_flight: None,
            waiting: None,
            quiet,
            calls_written: 0,
            hold_at: None,
            set_aside_now: None,
        }
    }

    /// Adds `page` to the pages waiting, which go to the writer now unless a write is in
    /// flight; then waits for that write only if [`MOST_CALLS_WAITING`] calls or more wait.
    pub(super) async fn push(&mut self, page: PageBatch) -> Result<(), SyncError> {
        match &mut self.waiting {
            Some(waiting) => waiting.append(page),
            None => self.waiting = Some(page),
        }
        let waiting = self.waiting.as_ref().map_or(0, |batch| batch.calls.len());
        if self.in_flight.is_none() || waiting >= MOST_CALLS_WAITING {
            self.hand_over().await?;
        }
        Ok(())
    }

    /// Hands the pages waiting over each time the write before them commits; returns only
    /// with a write's error. Safe to drop at any await: to run beside the walk's waits.
    pub(super) async fn keep_writing(&mut self) -> SyncError {
        loop {
            if self.waiting.is_none() {
                pending::<()>().await;
            }
            if let Err(err) = self.hand_over().await {
                return err;
            }
        }
    }

    /// The walk's end: the pages waiting are handed over (unless `hand_over_waiting` is
    /// false: shutdown, they are the next pass's to read) and the last write is waited for.
    pub(super) async fn finish(&mut self, hand_over_waiting: bool) -> Result<(), SyncError> {
        if !hand_over_waiting {
            self.waiting = None;
        }
        self.hand_over().await?;
        self.committed().await
    }

    /// The schedule's calls set aside, as the latest write that counted them saw.
    pub(super) fn set_aside_now(&self) -> Option<u64> {
        self.set_aside_now
    }

    /// The instant committed writes' conflicts hold the checkpoint at, if any.
    pub(super) fn hold_at(&self) -> Option<Timestamp> {
        self.hold_at
    }

    /// Waits for the write in flight to commit, then hands the pages waiting over.
    async fn hand_over(&mut self) -> Result<(), SyncError> {
        self.committed().await?;
        if let Some(mut batch) = self.waiting.take() {
            batch.checkpoint = crate::warehouse::held(batch.checkpoint, self.hold_at);
            self.in_flight = Some(self.submit(batch));
        }
        Ok(())
    }

    /// Waits for the write in flight to commit (a failure drops the pages waiting).
    async fn committed(&mut self) -> Result<(), SyncError> {
        while let Some(in_flight) = &mut self.in_flight {
            match in_flight {
                InFlight::Written(write) => write.ready().await,
                InFlight::Quiet(look) => look.ready().await,
            }
            if let Err(err) = self.settle() {
                self.waiting = None;
                return Err(err);
            }
        }
        Ok(())
    }

    /// Takes the result of the write in flight, ready. A quiet write that changes something
    /// is handed back, and goes to the writer as other pages do: in flight again.
    fn settle(&mut self) -> Result<(), SyncError> {
        let written = match self.in_flight.take() {
            None => return Ok(()),
            Some(InFlight::Written(write)) => {
                self.quiet = false;
                write.take()?
            }
            Some(InFlight::Quiet(look)) => match look.take()? {
                QuietRead::Written(written) => {
                    self.quiet &= written.calls_written == 0;
                    written
                }
                QuietRead::ToWrite(batch) => {
                    self.quiet = false;
                    self.in_flight = Some(self.submit(batch));
                    return Ok(());
                }
            },
        };
        self.calls_written += written.calls_written;
        self.set_aside_now = written.set_aside_now.or(self.set_aside_now);
        if let Some(at) = written.hold_at {
            self.hold_at = Some(self.hold_at.map_or(at, |held| held.min(at)));
        }
        self.progress.committed(self.schedule);
        Ok(())
    }

    fn submit(&self, batch: PageBatch) -> InFlight {
        let (writer, engine) = (&self.engine.writer, self.engine);
        if self.quiet {
            InFlight::Quiet(writer.gather_pending(&engine.quiet_pages, batch))
        } else {
            InFlight::Written(writer.gather_pending(&engine.pages, batch))
        }
    }
}
