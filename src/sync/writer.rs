//! `Writer`: the one thread that owns the warehouse connection; every write goes through it.
//!
//! SQLite allows one writer at a time, so all schedules funnel their pages into one thread
//! instead of contending for the lock. A job is a closure over `&mut Warehouse`; its result
//! comes back on a oneshot channel, so a pass can fetch its next page while the previous one
//! is being written. The tracing span of the submitter is carried into the job.

use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};
use tracing::Span;

use super::error::SyncError;
use crate::warehouse::{Warehouse, WarehouseError};

type Job = Box<dyn FnOnce(&mut Warehouse) + Send>;

/// Jobs waiting for the writer; senders wait when it is full (bounded memory).
const QUEUE: usize = 16;

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// The result of a submitted job, to be awaited later.
pub struct Pending<T>(oneshot::Receiver<Result<T, WarehouseError>>);

impl<T> Pending<T> {
    pub async fn wait(self) -> Result<T, SyncError> {
        self.0
            .await
            .map_err(|_| SyncError::WriterGone)?
            .map_err(SyncError::from)
    }
}

impl Writer {
    /// Starts the writer thread, which owns `warehouse` until [`Writer::close`].
    pub fn start(mut warehouse: Warehouse) -> std::io::Result<Writer> {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("callsync-writer".into())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    job(&mut warehouse);
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
        F: FnOnce(&mut Warehouse) -> Result<T, WarehouseError> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let span = Span::current();
        let boxed: Job = Box::new(move |warehouse| {
            let _entered = span.enter();
            // The submitter may have gone (cancelled); the write itself has still happened.
            let _ = reply.send(job(warehouse));
        });
        let jobs = self.jobs.as_ref().ok_or(SyncError::WriterGone)?;
        jobs.send(boxed).await.map_err(|_| SyncError::WriterGone)?;
        Ok(Pending(result))
    }

    /// Runs `job` and waits for its result.
    pub async fn call<T, F>(&self, job: F) -> Result<T, SyncError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Warehouse) -> Result<T, WarehouseError> + Send + 'static,
    {
        self.submit(job).await?.wait().await
    }

    /// Lets queued jobs finish, then stops the thread and closes the warehouse.
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
