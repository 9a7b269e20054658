//! `Writer`: the threads that own the destination (the warehouse's connections); every write goes
//! through them.
//!
//! SQLite allows one writer at a time, so all schedules funnel their pages into one thread
//! instead of contending for the lock. A job is a closure over `&mut dyn Destination`; its result
//! comes back on a oneshot channel, so a pass can fetch its next page while the previous one
//! is being written. The tracing span of the submitter is carried into the job (for a round of
//! gathered requests, its one requester's, or a `group` span of several).
//!
//! A destination that writes from several connections at once (PostgreSQL) hands the writer
//! more handles on itself ([`Destination::fork`]): a job submitted while as many are outstanding
//! (queued or running) as there are threads starts another thread with another handle. A pass
//! has at most one job outstanding at a time (it waits for each before its next), so the
//! threads, and the connections they hold, grow to the passes in flight at their busiest and
//! no further, whatever sets that number.
//!
//! Requests that many passes make at about the same moment (their openings, their pages,
//! their ends) are [`Gathered`]: a job of a kind runs at a time (pages: two), and the
//! requests that come while it runs wait for its next round, all together, so a destination
//! may answer them in one statement, or write them in one transaction.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::Span;

use super::error::SyncError;
use crate::warehouse::Destination;

type Job = Box<dyn FnOnce(&mut dyn Destination) + Send>;

/// Jobs waiting for the writer; senders wait when it is full (bounded memory).
const QUEUE: usize = 16;

/// The most threads (each with its connection) a destination that writes from several gets:
/// a bound for a server's connections. PostgreSQL's `max_connections` is 100 by default, and
/// daemons share schedules: two daemons at 33 connections each, with room for the BI tools.
/// More writers than this gain little on one server (each page is a few round trips).
const MAX_THREADS: usize = 32;

/// How long [`Writer::close`] waits for the thread to finish its queue and close the destination.
/// The queue is a few jobs, and closing the SQLite warehouse empties its WAL: seconds at
/// most. Only a write stuck on a connection the network cut (a PostgreSQL writer whose
/// answers stopped coming: the kernel's keepalives end that within a minute, a proxy that
/// went silent never does) reaches it, and shutdown does not wait on it longer.
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(30);

pub struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    /// Ends when every thread has run its last job and dropped its destination.
    closed: Option<mpsc::Receiver<()>>,
    threads: Mutex<Threads>,
    /// Jobs submitted and not yet run: queued, or running.
    outstanding: Arc<AtomicUsize>,
}

/// A job's place among the outstanding ones, given up when the job is dropped: once run, or
/// never sent (its submitter cancelled), or left in the queue at the end.
struct Outstanding(Arc<AtomicUsize>);

impl Outstanding {
    /// Counts one more job; returns it with how many there are now.
    fn count(jobs: &Arc<AtomicUsize>) -> (Outstanding, usize) {
        let now = jobs.fetch_add(1, Ordering::SeqCst) + 1;
        (Outstanding(jobs.clone()), now)
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The writer's threads, and what starts another.
struct Threads {
    /// A handle on the destination for the next thread; `None` when the destination allows one writer.
    spare: Option<Box<dyn Destination>>,
    started: usize,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    /// Each thread holds a clone until it ends.
    alive: mpsc::Sender<()>,
}

/// The result of a submitted job, to be awaited later.
pub struct Pending<T> {
    answer: oneshot::Receiver<Result<T, SyncError>>,
    /// The answer, once [`Self::ready`] has seen it.
    result: Option<Result<T, SyncError>>,
}

impl<T> Pending<T> {
    fn new(answer: oneshot::Receiver<Result<T, SyncError>>) -> Self {
        Pending {
            answer,
            result: None,
        }
    }

    pub async fn wait(mut self) -> Result<T, SyncError> {
        self.ready().await;
        self.take()
    }

    /// Waits for the result and keeps it, for [`Self::take`]. Safe to drop before it ends:
    /// the result is neither lost nor taken.
    pub async fn ready(&mut self) {
        if self.result.is_none() {
            let answer = (&mut self.answer).await;
            self.result = Some(answer.unwrap_or(Err(SyncError::WriterGone)));
        }
    }

    /// The result [`Self::ready`] waited for (not yet in: the writer is taken to be gone).
    pub fn take(self) -> Result<T, SyncError> {
        self.result.unwrap_or(Err(SyncError::WriterGone))
    }
}

impl Threads {
    /// Starts a thread that owns `destination` and runs queued jobs until the queue closes.
    fn start(&mut self, mut sink: Box<dyn Destination>) -> std::io::Result<()> {
        let (queue, alive) = (self.queue.clone(), self.alive.clone());
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
                    job(sink.as_mut());
                }
                drop(sink);
                drop(alive);
            })?;
        self.started += 1;
        Ok(())
    }

    /// A thread for each of the `outstanding` jobs, as far as the destination can be written from
    /// more than one.
    fn grow_to(&mut self, outstanding: usize) {
        while self.started < outstanding.min(MAX_THREADS) {
            let Some(sink) = self.spare.as_ref().and_then(|spare| spare.fork()) else {
                return;
            };
            if let Err(err) = self.start(sink) {
                // The threads there are go on with the work.
                tracing::warn!(error = %err, "cannot start another writer thread");
                return;
            }
        }
    }
}

impl Writer {
    /// Starts the writer thread, which owns `destination` until [`Writer::close`]; more start as
    /// jobs wait, when the destination can be forked.
    pub fn start(sink: Box<dyn Destination>) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let (alive, closed) = mpsc::channel(1);
        let mut threads = Threads {
            spare: sink.fork(),
            started: 0,
            queue: Arc::new(Mutex::new(rx)),
            alive,
        };
        threads.start(sink)?;
        Ok(Writer {
            jobs: Some(tx),
            closed: Some(closed),
            threads: Mutex::new(threads),
            outstanding: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Queues `job`; the returned [`Pending`] resolves when it has run.
    pub async fn submit<T, E, F>(&self, job: F) -> Result<Pending<T>, SyncError>
    where
        E: Into<SyncError>,
        T: Send + 'static,
        F: FnOnce(&mut dyn Destination) -> Result<T, E> + Send + 'static,
    {
        let (boxed, result) = self.prepare(Span::current(), job);
        let jobs = self.jobs.as_ref().ok_or(SyncError::WriterGone)?;
        jobs.send(boxed).await.map_err(|_| SyncError::WriterGone)?;
        Ok(Pending::new(result))
    }

    /// `job` boxed to run on a writer thread under `span` (the caller's, for a job of its
    /// own), counted among the outstanding ones (a thread started for it if the destination
    /// allows), and the receiver of its result.
    fn prepare<T, E, F>(&self, span: Span, job: F) -> (Job, oneshot::Receiver<Result<T, SyncError>>)
    where
        E: Into<SyncError>,
        T: Send + 'static,
        F: FnOnce(&mut dyn Destination) -> Result<T, E> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let (counted, outstanding) = Outstanding::count(&self.outstanding);
        let boxed: Job = Box::new(move |sink| {
            let _entered = span.enter();
            let result = job(sink).map_err(Into::into);
            // Before the reply: the submitter's next job is not counted beside this one.
            drop(counted);
            // The submitter may have gone (cancelled); the write itself has still happened.
            let _ = reply.send(result);
        });
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .grow_to(outstanding);
        (boxed, result)
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

    /// Lets queued jobs finish, then stops the threads and closes the destination; returns after
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
        // `None` once every thread has dropped its destination (a panic ends one all the same).
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

/// Requests of one kind that the writer runs together, in one job ([`Writer::gather`]): while
/// a job for them is queued, requests that arrive join it instead of queuing jobs of their
/// own. At a tick every pass opens at once, and later ends at about the same time; one
/// statement for all of them costs a server a fraction of one each (issue 31: at 10,000
/// schedules the passes' bookkeeping was most of PostgreSQL's work). With no queue, a
/// request runs alone, as soon as a thread is free: nothing waits to be gathered.
pub struct Gathered<R, T> {
    waiting: Mutex<Gathering<R, T>>,
    run: Run<R, T>,
    /// The most jobs of the kind queued or running at once.
    most_jobs: usize,
    /// The most requests a job's round takes (the first ones waiting).
    most_per_round: usize,
}

/// Runs a group of requests, giving `answer` one result a request, in their order, each as
/// soon as it is known (a page written alone, as soon as it is committed).
pub type Run<R, T> = fn(&mut dyn Destination, Vec<R>, answer: &mut dyn FnMut(T));

struct Gathering<R, T> {
    /// Each request with where its answer goes and its requester's span.
    requests: Vec<(R, oneshot::Sender<T>, Span)>,
    /// Jobs that will take `requests`, queued or running.
    jobs: usize,
}

impl<R, T> Gathered<R, T> {
    /// Requests run by `run`; one job at a time.
    pub fn new(run: Run<R, T>) -> Arc<Gathered<R, T>> {
        Gathered::with_jobs(run, 1, usize::MAX)
    }

    /// [`Self::new`], with as many as `most_jobs` jobs at once (at least one), each round
    /// of a job taking the first `most_per_round` requests waiting (at least one): requests
    /// still wait for a round together once that many jobs run, a destination written from
    /// several connections writes on that many, and a round's memory is bounded.
    pub fn with_jobs(
        run: Run<R, T>,
        most_jobs: usize,
        most_per_round: usize,
    ) -> Arc<Gathered<R, T>> {
        Arc::new(Gathered {
            waiting: Mutex::new(Gathering {
                requests: Vec::new(),
                jobs: 0,
            }),
            run,
            most_jobs: most_jobs.max(1),
            most_per_round: most_per_round.max(1),
        })
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Gathering<R, T>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// On the writer thread: takes the requests waiting (up to a round's most), runs them and
    /// answers each; then those that came meanwhile, until none waits. A few jobs of a kind
    /// at most, so that requests that come while they run wait for a round, together,
    /// instead of each taking a thread of its own: the group grows with the load, as a group
    /// commit's does.
    fn run_waiting(&self, sink: &mut dyn Destination) {
        let _reset = ResetOnPanic(self);
        loop {
            let requests = {
                let mut waiting = self.waiting();
                if waiting.requests.is_empty() {
                    waiting.jobs -= 1;
                    return;
                }
                let taken = self.most_per_round.min(waiting.requests.len());
                let rest = waiting.requests.split_off(taken);
                std::mem::replace(&mut waiting.requests, rest)
            };
            let span = round_span(&requests);
            let _entered = span.enter();
            let (requests, replies): (Vec<R>, Vec<oneshot::Sender<T>>) = requests
                .into_iter()
                .map(|(request, reply, _)| (request, reply))
                .unzip();
            let mut replies = replies.into_iter();
            (self.run)(sink, requests, &mut |result| {
                // The requester may have gone (cancelled); what ran has still run.
                if let Some(reply) = replies.next() {
                    let _ = reply.send(result);
                }
            });
            // A request left unanswered (a bug) is dropped: its requester hears the writer
            // is gone, rather than waiting for good.
            debug_assert!(replies.next().is_none(), "one result a request");
        }
    }
}

/// What a round's log lines are said within: its one requester's span (its pass: schedule,
/// run), or, for several, a span of the group, so that no line of it is put down to one of
/// its passes.
fn round_span<R, T>(requests: &[(R, oneshot::Sender<T>, Span)]) -> Span {
    match requests {
        [(_, _, span)] => span.clone(),
        _ => tracing::error_span!(parent: None, "group", passes = requests.len()),
    }
}

/// Should a group's run panic, its job is no longer counted, and when it was the last the
/// requests waiting are dropped (each requester hears the writer is gone): the next request
/// queues a job again, instead of waiting for good on one that died.
struct ResetOnPanic<'g, R, T>(&'g Gathered<R, T>);

impl<R, T> Drop for ResetOnPanic<'_, R, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.job_lost();
        }
    }
}

impl<R, T> Gathered<R, T> {
    /// A job that will not run (its thread panicked, or it was never queued) is no longer
    /// counted; with no other job left, the requests waiting are dropped.
    fn job_lost(&self) {
        let mut waiting = self.waiting();
        waiting.jobs -= 1;
        if waiting.jobs == 0 {
            waiting.requests.clear();
        }
    }
}

impl Writer {
    /// Runs `request` with the others of its kind waiting ([`Gathered`]); its result.
    pub async fn gather<R, T>(
        &self,
        gathered: &Arc<Gathered<R, T>>,
        request: R,
    ) -> Result<T, SyncError>
    where
        R: Send + 'static,
        T: Send + 'static,
    {
        self.enqueue(gathered, request)
            .await
            .map_err(|_| SyncError::WriterGone)
    }

    /// [`Self::gather`], its result to be awaited later (as [`Self::submit`]'s).
    pub fn gather_pending<R, T>(
        &self,
        gathered: &Arc<Gathered<R, Result<T, SyncError>>>,
        request: R,
    ) -> Pending<T>
    where
        R: Send + 'static,
        T: Send + 'static,
    {
        Pending::new(self.enqueue(gathered, request))
    }

    /// Puts `request` among those waiting and, unless as many jobs for them as the kind
    /// allows are queued or running, queues one; the receiver of its answer.
    fn enqueue<R, T>(&self, gathered: &Arc<Gathered<R, T>>, request: R) -> oneshot::Receiver<T>
    where
        R: Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let queue_job = {
            let mut waiting = gathered.waiting();
            waiting.requests.push((request, reply, Span::current()));
            let another = waiting.jobs < gathered.most_jobs;
            waiting.jobs += usize::from(another);
            another
        };
        if queue_job {
            let run = gathered.clone();
            // Under no span of its own: each round enters its requests' (`round_span`).
            let (job, _) = self.prepare(Span::none(), move |sink| {
                run.run_waiting(sink);
                Ok::<(), SyncError>(())
            });
            // Queued from a task of its own: a requester cancelled while the queue is full
            // (shutdown) must not leave the others waiting for a job that was never queued.
            // A few jobs a kind at most, so the tasks are as few.
            let (jobs, abandoned) = (self.jobs.clone(), gathered.clone());
            tokio::spawn(async move {
                let queued = match jobs {
                    Some(jobs) => jobs.send(job).await.is_ok(),
                    None => false,
                };
                if !queued {
                    // Unless another job takes them, the requests waiting are dropped, and
                    // each requester hears the writer is gone.
                    abandoned.job_lost();
                }
            });
        }
        answer
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
    use crate::warehouse::DryRun;

    /// A round of one request runs in its requester's span (its pass's schedule and run on
    /// every line); a round of several in a span of the group, a child of none of them.
    #[test]
    fn a_round_runs_in_its_one_pass_span_or_in_a_group_span() {
        use tracing_subscriber::registry::{LookupSpan, Registry};
        tracing::subscriber::with_default(Registry::default(), || {
            let request = |span: Span| ((), oneshot::channel::<()>().0, span);
            let pass = tracing::error_span!("pass", schedule = 1);
            assert_eq!(round_span(&[request(pass.clone())]).id(), pass.id());
            // Made on the first requester's task, within its pass.
            let _first = pass.enter();
            let other = tracing::error_span!(parent: None, "pass", schedule = 2);
            let group = round_span(&[request(pass.clone()), request(other)]);
            assert_eq!(group.metadata().map(|m| m.name()), Some("group"));
            let id = group.id().expect("an enabled span");
            tracing::dispatcher::get_default(|dispatch| {
                let registry = dispatch.downcast_ref::<Registry>().expect("the registry");
                let data = registry.span(&id).expect("recorded");
                assert!(
                    data.parent().is_none(),
                    "the group's span is no pass's child"
                );
            });
        });
    }

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

    /// Otherwise `close` returns once the queue has run and the destination is closed (real time: a
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

    /// A request that records the groups it was run in: its number, and where the groups go.
    type Recorded = (u32, Arc<Mutex<Vec<Vec<u32>>>>);

    /// Runs a group: records its numbers, answers each number ten times over.
    fn record_group(_: &mut dyn Destination, requests: Vec<Recorded>, answer: &mut dyn FnMut(u32)) {
        let numbers: Vec<u32> = requests.iter().map(|(n, _)| *n).collect();
        if let Some((_, groups)) = requests.first() {
            groups.lock().unwrap().push(numbers.clone());
        }
        numbers.iter().for_each(|n| answer(n * 10));
    }

    /// Holds the writer's one thread (a destination that cannot fork) with a job that ends
    /// once the returned sender sends, or after a patience only a hang reaches.
    async fn hold_the_thread(writer: &Writer) -> std::sync::mpsc::Sender<()> {
        let (unblock, blocked) = std::sync::mpsc::channel::<()>();
        let (started, running) = oneshot::channel();
        let _busy = writer
            .submit(move |_| {
                let _ = started.send(());
                let _ = blocked.recv_timeout(HANG);
                Ok::<(), SyncError>(())
            })
            .await
            .unwrap();
        running.await.unwrap();
        unblock
    }

    /// Until `n` requests wait in `gathered` (a patience only a hang reaches).
    async fn until_waiting(gathered: &Gathered<Recorded, u32>, n: usize) {
        let waited = tokio::time::timeout(HANG, async {
            while gathered.waiting().requests.len() < n {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{n} requests never waited");
    }

    /// Requests made while the writer is busy wait in one group, run together once it is
    /// free, each answered its own result; with the writer free, a request runs alone.
    #[tokio::test]
    async fn requests_made_while_the_writer_is_busy_run_as_one_group() {
        let writer = Arc::new(Writer::start(Box::new(DryRun::over(None))).unwrap());
        let gathered = Gathered::new(record_group);
        let groups = Arc::new(Mutex::new(Vec::new()));
        // Alone first.
        let alone = writer.gather(&gathered, (7, groups.clone())).await.unwrap();
        assert_eq!(alone, 70);
        // Then behind a job that holds the one writer thread.
        let unblock = hold_the_thread(&writer).await;
        let asked: Vec<_> = (1..=3)
            .map(|n| {
                let (writer, gathered, groups) = (writer.clone(), gathered.clone(), groups.clone());
                tokio::spawn(async move { writer.gather(&gathered, (n, groups)).await })
            })
            .collect();
        until_waiting(&gathered, 3).await;
        unblock.send(()).unwrap();
        let mut answers = Vec::new();
        for request in asked {
            answers.push(request.await.unwrap().unwrap());
        }
        assert_eq!(answers, vec![10, 20, 30], "each request its own answer");
        let groups = groups.lock().unwrap().clone();
        assert_eq!(groups.len(), 2, "one group alone, one of three: {groups:?}");
        assert_eq!(groups[0], vec![7]);
        let mut second = groups[1].clone();
        second.sort_unstable();
        assert_eq!(second, vec![1, 2, 3]);
    }

    /// A requester cancelled while its group's job waits for room in a full queue (as at
    /// shutdown) does not strand those who came after it: the job is queued all the same,
    /// and runs their requests (and the cancelled one's, whose answer nobody hears).
    #[tokio::test]
    async fn a_requester_cancelled_before_its_job_is_queued_strands_no_one() {
        let writer = Arc::new(Writer::start(Box::new(DryRun::over(None))).unwrap());
        let gathered = Gathered::new(record_group);
        let groups = Arc::new(Mutex::new(Vec::new()));
        let unblock = hold_the_thread(&writer).await;
        // The queue full: the group's job must wait for room.
        let mut queued = Vec::new();
        for _ in 0..QUEUE {
            queued.push(writer.submit(|_| Ok::<(), SyncError>(())).await.unwrap());
        }
        let ask = |n: u32| {
            let (writer, gathered, groups) = (writer.clone(), gathered.clone(), groups.clone());
            tokio::spawn(async move { writer.gather(&gathered, (n, groups)).await })
        };
        let cancelled = ask(1);
        until_waiting(&gathered, 1).await;
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());
        let after = ask(2);
        until_waiting(&gathered, 2).await;
        unblock.send(()).unwrap();
        let answer = tokio::time::timeout(HANG, after).await;
        assert_eq!(answer.expect("answered").unwrap().unwrap(), 20);
        for job in queued {
            job.wait().await.unwrap();
        }
        assert_eq!(groups.lock().unwrap().clone(), vec![vec![1, 2]]);
    }

    /// A destination written from several threads at once (as PostgreSQL's): a dry run that
    /// counts its handles.
    struct Forking {
        handles: Arc<AtomicUsize>,
        inner: DryRun,
    }

    impl Forking {
        fn new(handles: &Arc<AtomicUsize>) -> Forking {
            handles.fetch_add(1, Ordering::SeqCst);
            Forking {
                handles: handles.clone(),
                inner: DryRun::over(None),
            }
        }
    }

    use crate::service::{Campaign, Schedule, Timestamp};
    use crate::warehouse::{
        Checkpoint, Claim, PageBatch, PageWrite, PassOpened, PassStart, Prepared, RunId, RunRecord,
        ScheduleStatus, WarehouseError, Watch,
    };
    use uuid::Uuid;

    impl Destination for Forking {
        fn name(&self) -> String {
            self.inner.name()
        }
        fn watch(&self) -> Arc<dyn Watch> {
            self.inner.watch()
        }
        fn claim(&self, schedule: Uuid) -> Result<Option<Claim>, WarehouseError> {
            self.inner.claim(schedule)
        }
        fn checkpoint(&self, schedule: Uuid) -> Result<Option<Checkpoint>, WarehouseError> {
            self.inner.checkpoint(schedule)
        }
        fn replace_checkpoint(
            &mut self,
            schedule: Uuid,
            cursor: Option<Timestamp>,
        ) -> Result<Option<Checkpoint>, WarehouseError> {
            self.inner.replace_checkpoint(schedule, cursor)
        }
        fn knows_schedule(&self, schedule: Uuid) -> Result<bool, WarehouseError> {
            self.inner.knows_schedule(schedule)
        }
        fn open_pass(&mut self, start: &PassStart<'_>) -> Result<PassOpened, WarehouseError> {
            self.inner.open_pass(start)
        }
        fn write_page(&mut self, page: &PageBatch) -> Result<PageWrite, WarehouseError> {
            self.inner.write_page(page)
        }
        fn count_changes(&mut self, page: &PageBatch) -> Result<u64, WarehouseError> {
            self.inner.count_changes(page)
        }
        fn finish_run(&mut self, run: RunId, record: &RunRecord) -> Result<(), WarehouseError> {
            self.inner.finish_run(run, record)
        }
        fn forget_runs_before(&mut self, cutoff: Timestamp) -> Result<u64, WarehouseError> {
            self.inner.forget_runs_before(cutoff)
        }
        fn prepare(&mut self, prepared: Prepared<'_>) -> Result<(), WarehouseError> {
            self.inner.prepare(prepared)
        }
        fn status_at(&self, now: Timestamp) -> Result<Vec<ScheduleStatus>, WarehouseError> {
            self.inner.status_at(now)
        }
        fn first_pass_at(&self) -> Result<Option<Timestamp>, WarehouseError> {
            self.inner.first_pass_at()
        }
        fn remember_campaign(&mut self, campaign: &Campaign) -> Result<(), WarehouseError> {
            self.inner.remember_campaign(campaign)
        }
        fn remember_schedule(
            &mut self,
            schedule: &Schedule,
            campaign: Option<Uuid>,
        ) -> Result<(), WarehouseError> {
            self.inner.remember_schedule(schedule, campaign)
        }
        fn fork(&self) -> Option<Box<dyn Destination>> {
            Some(Box::new(Forking::new(&self.handles)))
        }
    }

    /// Patience only a hang reaches: a job waiting for others that never run beside it.
    const HANG: Duration = Duration::from_secs(60);

    /// Submits `jobs` jobs at once, each of which returns only once every one has started
    /// (so they must all run at the same time; a job left waiting for the others longer than
    /// [`HANG`] fails); returns the threads they ran on.
    async fn all_at_once(writer: &Writer, jobs: usize) -> Vec<std::thread::ThreadId> {
        let started = Arc::new((Mutex::new(0), std::sync::Condvar::new()));
        let mut pending = Vec::new();
        for _ in 0..jobs {
            let started = started.clone();
            let job = writer.submit(move |_| {
                let (count, changed) = &*started;
                let mut count = count.lock().unwrap();
                *count += 1;
                changed.notify_all();
                let (count, waited) = changed
                    .wait_timeout_while(count, HANG, |count| *count < jobs)
                    .unwrap();
                if waited.timed_out() {
                    return Err(SyncError::WriterGone);
                }
                drop(count);
                Ok::<_, SyncError>(std::thread::current().id())
            });
            pending.push(job.await.unwrap());
        }
        let mut threads = Vec::new();
        for job in pending {
            let thread = job.wait().await;
            threads.push(thread.expect("the jobs ran at the same time"));
        }
        threads
    }

    /// A destination written from several connections gets a thread (and a handle) for each
    /// job in flight at the busiest, and no more: jobs one after the other reuse them.
    #[tokio::test]
    async fn a_forking_destination_gets_a_thread_per_job_in_flight_and_no_more() {
        let handles = Arc::new(AtomicUsize::new(0));
        let writer = Writer::start(Box::new(Forking::new(&handles))).unwrap();
        // The spare handle the writer keeps to fork from, beside the first thread's.
        assert_eq!(handles.load(Ordering::SeqCst), 2);
        let threads = all_at_once(&writer, 5).await;
        let distinct: std::collections::HashSet<_> = threads.iter().collect();
        assert_eq!(distinct.len(), 5, "five jobs in flight ran on five threads");
        assert_eq!(
            handles.load(Ordering::SeqCst),
            6,
            "one handle a thread, and the spare"
        );
        for _ in 0..20 {
            writer.call(|_| Ok::<(), SyncError>(())).await.unwrap();
        }
        assert_eq!(
            handles.load(Ordering::SeqCst),
            6,
            "jobs one at a time add no thread"
        );
        writer.close().await;
    }

    /// A destination written by one writer at a time (SQLite) keeps one thread, whatever the
    /// jobs queued at once.
    #[tokio::test]
    async fn a_destination_that_cannot_fork_is_written_by_one_thread() {
        let writer = Writer::start(Box::new(DryRun::over(None))).unwrap();
        let mut pending = Vec::new();
        for _ in 0..5 {
            let job = writer.submit(|_| Ok::<_, SyncError>(std::thread::current().id()));
            pending.push(job.await.unwrap());
        }
        let mut threads = std::collections::HashSet::new();
        for job in pending {
            threads.insert(job.wait().await.unwrap());
        }
        assert_eq!(threads.len(), 1);
        writer.close().await;
    }
}
