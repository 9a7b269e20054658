//! `Writer`: the one thread that owns the sink (the warehouse connection); every write goes
//! through it.
//!
//! SQLite allows one writer at a time, so all schedules funnel their pages into one thread
//! instead of contending for the lock. A job is a closure over `&mut dyn Sink`; its result
//! comes back on a oneshot channel, so a pass can fetch its next page while the previous one
//! is being written. The tracing span of the submitter is carried into the job.

use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};
use tracing::Span;

use super::error::SyncError;
use super::sink::Sink;

type Job = Box<dyn FnOnce(&mut dyn Sink) + Send>;

/// Jobs waiting for the writer; senders wait when it is full (bounded memory).
const QUEUE: usize = 16;

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
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
    pub fn start(mut sink: Box<dyn Sink>) -> std::io::Result<Writer> {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("callsync-writer".into())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    job(sink.as_mut());
                }
            })?;
        Ok(Writer {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `job`; the returned [`Pending`] resolves when it has run.
    pub async fn submit<T, F>(&self, job: F) -> Result<Pending<T>, SyncError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Sink) -> Result<T, SyncError> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let span = Span::current();
        let boxed: Job = Box::new(move |sink| {
            let _entered = span.enter();
            // The submitter may have gone (cancelled); the write itself has still happened.
            let _ = reply.send(job(sink));
        });
        let jobs = self.jobs.as_ref().ok_or(SyncError::WriterGone)?;
        jobs.send(boxed).await.map_err(|_| SyncError::WriterGone)?;
        Ok(Pending(result))
    }

    /// Runs `job` and waits for its result.
    pub async fn call<T, F>(&self, job: F) -> Result<T, SyncError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Sink) -> Result<T, SyncError> + Send + 'static,
    {
        self.submit(job).await?.wait().await
    }

    /// Lets queued jobs finish, then stops the thread and closes the sink.
    pub async fn close(mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
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
