//! `Writer`: the one thread that owns the destination (the warehouse connection); every write goes
//! through it.
//!
//! SQLite allows one writer at a time, so all schedules funnel their pages into one thread
//! instead of contending for the lock. A job is a closure over `&mut dyn Destination`; its result
//! comes back on a oneshot channel, so a pass can fetch its next page while the previous one
//! is being written. The tracing span of the submitter is carried into the job.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::Span;

use super::error::SyncError;
use crate::warehouse::Destination;

type Job = Box<dyn FnOnce(&mut dyn Destination) + Send>;

/// Jobs waiting for the writer; senders wait when it is full (bounded memory).
const QUEUE: usize = 16;

/// How long [`Writer::close`] waits for the thread to finish its queue and close the sink.
/// The queue is a few jobs, and closing the SQLite warehouse empties its WAL: seconds at
/// most. Only a write stuck on a connection the network cut (a PostgreSQL writer whose
/// answers stopped coming: the kernel's keepalives end that within a minute, a proxy that
/// went silent never does) reaches it, and shutdown does not wait on it longer.
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(30);

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    /// Told when the thread has run its last job and dropped the sink.
    closed: Option<oneshot::Receiver<()>>,
}

/// The result of a submitted job, to be awaited later.
pub struct Pending<T>(oneshot::Receiver<Result<T, SyncError>>);

impl<T> Pending<T> {
    pub async fn wait(self) -> Result<T, SyncError> {
        self.0.await.map_err(|_| SyncError::WriterGone)?
    }
}

impl Writer {
    /// Starts the writer thread, which owns `sink` until [`Writer::close`].
    pub fn start(mut sink: Box<dyn Destination>) -> std::io::Result<Writer> {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
        let (closing, closed) = oneshot::channel();
        // Not joined: `close` waits for `closed` instead, within a bound.
        std::thread::Builder::new()
            .name("callsync-writer".into())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    job(sink.as_mut());
                }
                drop(sink);
                let _ = closing.send(());
            })?;
        Ok(Writer {
            jobs: Some(tx),
            closed: Some(closed),
        })
    }

    /// Queues `job`; the returned [`Pending`] resolves when it has run.
    pub async fn submit<T, E, F>(&self, job: F) -> Result<Pending<T>, SyncError>
    where
        E: Into<SyncError>,
        T: Send + 'static,
        F: FnOnce(&mut dyn Destination) -> Result<T, E> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let span = Span::current();
        let boxed: Job = Box::new(move |sink| {
            let _entered = span.enter();
            // The submitter may have gone (cancelled); the write itself has still happened.
            let _ = reply.send(job(sink).map_err(Into::into));
        });
        let jobs = self.jobs.as_ref().ok_or(SyncError::WriterGone)?;
        jobs.send(boxed).await.map_err(|_| SyncError::WriterGone)?;
        Ok(Pending(result))
    }

    /// Runs `job` and waits for its result.
    pub async fn call<T, E, F>(&self, job: F) -> Result<T, SyncError>
    where
        E: Into<SyncError>,
        T: Send + 'static,
        F: FnOnce(&mut dyn Destination) -> Result<T, E> + Send + 'static,
    {
        self.submit(job).await?.wait().await
    }

    /// Lets queued jobs finish, then stops the thread and closes the sink; returns after
    /// [`CLOSE_PATIENCE`] even if the thread is stuck in a write (it is left to the process's
    /// exit, and a transaction it had open is rolled back by the server, checkpoint and all).
    pub async fn close(mut self) {
        self.jobs.take();
        let Some(closed) = self.closed.take() else {
            return;
        };
        // An error is a thread that ended without saying so (a panic): closed all the same.
        if tokio::time::timeout(CLOSE_PATIENCE, closed).await.is_err() {
            tracing::warn!(
                "the warehouse writer is still busy after {} s (a write waiting on a connection that stopped answering); exiting without it",
                CLOSE_PATIENCE.as_secs()
            );
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread once its queue is empty; not joined here, as
        // drop may run on an async worker.
        self.jobs.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::DryRun;

    /// A write stuck for good (a connection that stopped answering) does not hold `close`
    /// past [`CLOSE_PATIENCE`] (virtual time: the runtime's clock jumps to it).
    #[tokio::test(start_paused = true)]
    async fn close_gives_up_on_a_stuck_write_after_its_patience() {
        let writer = Writer::start(Box::new(DryRun::over(None))).unwrap();
        let (unstick, stuck) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let _stuck = writer
            .submit(move |_| {
                let _ = started.send(());
                let _ = stuck.recv();
                Ok::<(), SyncError>(())
            })
            .await
            .unwrap();
        running.await.unwrap();
        let before = tokio::time::Instant::now();
        writer.close().await;
        assert_eq!(before.elapsed(), CLOSE_PATIENCE);
        unstick.send(()).unwrap();
    }

    /// Otherwise `close` returns once the queue has run and the sink is closed (real time: a
    /// paused clock would jump past the patience while the job runs).
    #[tokio::test]
    async fn close_waits_for_the_queued_jobs() {
        let writer = Writer::start(Box::new(DryRun::over(None))).unwrap();
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let _job = writer
            .submit(move |_| {
                // Injected delay: the job is still running when `close` is called; the
                // assertion holds however long it takes.
                std::thread::sleep(std::time::Duration::from_millis(20));
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<(), SyncError>(())
            })
            .await
            .unwrap();
        writer.close().await;
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
