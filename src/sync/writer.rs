//! `Writer`: the threads that own the sink (the warehouse's connections); every write goes
//! through them.
//!
//! SQLite allows one writer at a time, so all schedules funnel their pages into one thread
//! instead of contending for the lock. A job is a closure over `&mut dyn Sink`; its result
//! comes back on a oneshot channel, so a pass can fetch its next page while the previous one
//! is being written. The tracing span of the submitter is carried into the job.
//!
//! A destination that writes from several connections at once (PostgreSQL) hands the writer
//! more handles on itself ([`Sink::fork`]): a job queued while every thread is busy starts
//! another thread with another handle. A pass has at most one job in the queue at a time (it
//! waits for each before its next), so the threads, and the connections they hold, grow to
//! the passes in flight at their busiest and no further, whatever sets that number.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::Span;

use super::error::SyncError;
use super::sink::Sink;

type Job = Box<dyn FnOnce(&mut dyn Sink) + Send>;

/// Jobs waiting for the writer; senders wait when it is full (bounded memory).
const QUEUE: usize = 16;

/// The most threads (each with its connection) a destination that writes from several gets:
/// a bound for a server's connections (PostgreSQL's `max_connections` is 100 by default),
/// far above the passes a daemon runs at once.
const MAX_THREADS: usize = 64;

/// How long [`Writer::close`] waits for the thread to finish its queue and close the sink.
/// The queue is a few jobs, and closing the SQLite warehouse empties its WAL: seconds at
/// most. Only a write stuck on a connection the network cut (a PostgreSQL writer whose
/// answers stopped coming: the kernel's keepalives end that within a minute, a proxy that
/// went silent never does) reaches it, and shutdown does not wait on it longer.
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(30);

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    /// Ends when every thread has run its last job and dropped its sink.
    closed: Option<mpsc::Receiver<()>>,
    threads: Mutex<Threads>,
}

/// The writer's threads, and what starts another.
struct Threads {
    /// A handle on the sink for the next thread; `None` when the sink allows one writer.
    spare: Option<Box<dyn Sink>>,
    started: usize,
    /// Threads running a job now.
    busy: Arc<AtomicUsize>,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    /// Each thread holds a clone until it ends.
    alive: mpsc::Sender<()>,
}

/// The result of a submitted job, to be awaited later.
pub struct Pending<T>(oneshot::Receiver<Result<T, SyncError>>);

impl<T> Pending<T> {
    pub async fn wait(self) -> Result<T, SyncError> {
        self.0.await.map_err(|_| SyncError::WriterGone)?
    }
}

impl Threads {
    /// Starts a thread that owns `sink` and runs queued jobs until the queue closes.
    fn start(&mut self, mut sink: Box<dyn Sink>) -> std::io::Result<()> {
        let (queue, busy, alive) = (self.queue.clone(), self.busy.clone(), self.alive.clone());
        // Not joined: `close` waits for every thread's `alive` to drop instead, within a bound.
        std::thread::Builder::new()
            .name("callsync-writer".into())
            .spawn(move || {
                loop {
                    // One thread waits on the queue at a time; the others wait for it here.
                    let job = queue
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .blocking_recv();
                    let Some(job) = job else { break };
                    busy.fetch_add(1, Ordering::SeqCst);
                    job(sink.as_mut());
                    busy.fetch_sub(1, Ordering::SeqCst);
                }
                drop(sink);
                drop(alive);
            })?;
        self.started += 1;
        Ok(())
    }

    /// Another thread, when every one is busy and the sink can be written from one more.
    fn grow_if_busy(&mut self) {
        if self.busy.load(Ordering::SeqCst) < self.started || self.started >= MAX_THREADS {
            return;
        }
        let Some(sink) = self.spare.as_ref().and_then(|spare| spare.fork()) else {
            return;
        };
        if let Err(err) = self.start(sink) {
            // The threads there are go on with the work.
            tracing::warn!(error = %err, "cannot start another writer thread");
        }
    }
}

impl Writer {
    /// Starts the writer thread, which owns `sink` until [`Writer::close`]; more start as
    /// jobs wait, when the sink can be forked.
    pub fn start(sink: Box<dyn Sink>) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let (alive, closed) = mpsc::channel(1);
        let mut threads = Threads {
            spare: sink.fork(),
            started: 0,
            busy: Arc::new(AtomicUsize::new(0)),
            queue: Arc::new(Mutex::new(rx)),
            alive,
        };
        threads.start(sink)?;
        Ok(Writer {
            jobs: Some(tx),
            closed: Some(closed),
            threads: Mutex::new(threads),
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
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .grow_if_busy();
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

    /// Lets queued jobs finish, then stops the threads and closes the sink; returns after
    /// [`CLOSE_PATIENCE`] even if a thread is stuck in a write (it is left to the process's
    /// exit, and a transaction it had open is rolled back by the server, checkpoint and all).
    pub async fn close(mut self) {
        self.jobs.take();
        {
            let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
            threads.spare.take();
            // Only the threads' clones keep the channel open now.
            let (ended, _) = mpsc::channel(1);
            threads.alive = ended;
        }
        let Some(mut closed) = self.closed.take() else {
            return;
        };
        // `None` once every thread has dropped its sink (a panic ends one all the same).
        if tokio::time::timeout(CLOSE_PATIENCE, closed.recv())
            .await
            .is_err()
        {
            tracing::warn!(
                "the warehouse writer is still busy after {} s (a write waiting on a connection that stopped answering); exiting without it",
                CLOSE_PATIENCE.as_secs()
            );
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the threads once the queue is empty; not joined here, as
        // drop may run on an async worker.
        self.jobs.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::sink::DryRunSink;

    /// A write stuck for good (a connection that stopped answering) does not hold `close`
    /// past [`CLOSE_PATIENCE`] (virtual time: the runtime's clock jumps to it).
    #[tokio::test(start_paused = true)]
    async fn close_gives_up_on_a_stuck_write_after_its_patience() {
        let writer = Writer::start(Box::new(DryRunSink(None))).unwrap();
        let (unstick, stuck) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let _stuck = writer
            .submit(move |_| {
                let _ = started.send(());
                let _ = stuck.recv();
                Ok(())
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
        let writer = Writer::start(Box::new(DryRunSink(None))).unwrap();
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let _job = writer
            .submit(move |_| {
                // Injected delay: the job is still running when `close` is called; the
                // assertion holds however long it takes.
                std::thread::sleep(std::time::Duration::from_millis(20));
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
        writer.close().await;
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
