//! A test's hold on requests, so that a test acts at a point it chose by construction, not at
//! an instant. [`Simulator::hold_list_requests`](super::Simulator::hold_list_requests) counts
//! the list requests (`GET /api/v1/schedules/{uid}/outbound_calls`) that arrive from then on,
//! and the `from`-th and every one after it waits, before the service reads its page, until the
//! test lets it through: a client cannot finish a pass while one of its list requests is held,
//! so a test that kills it then knows the kill landed inside the pass, on a machine of any
//! speed. [`Simulator::hold_detail_requests`](super::Simulator::hold_detail_requests) does the
//! same for detail requests (`GET /api/v1/outbound_calls/{uid}`).
//! [`Simulator::hold_writes`](super::Simulator::hold_writes) does the same for writes (POST,
//! PATCH) numbered `from` to `to`, before the service acts on them: an upload stays inside its
//! chunk for as long as the test needs. Every hold applies after the request's token was
//! checked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

/// The test's handle; dropping it lets every request through.
#[derive(Debug)]
pub struct RequestHold(Arc<Gate>);

#[derive(Debug)]
pub(super) struct Gate {
    /// The first and the last request (counted from 1) that wait.
    from: usize,
    to: usize,
    count: AtomicUsize,
    /// The latest request that arrived.
    arrived: watch::Sender<usize>,
    /// Requests up to this one may go on.
    released: watch::Sender<usize>,
    /// Each request's path, in the order they arrived: whose request is held.
    paths: std::sync::Mutex<Vec<String>>,
}

impl RequestHold {
    pub(super) fn new(from: usize, to: usize) -> (RequestHold, Arc<Gate>) {
        let gate = Arc::new(Gate {
            from,
            to,
            count: AtomicUsize::new(0),
            arrived: watch::Sender::new(0),
            released: watch::Sender::new(0),
            paths: std::sync::Mutex::default(),
        });
        (RequestHold(gate.clone()), gate)
    }

    /// Returns once the `n`-th request since the hold was set has arrived (if it is one of
    /// those held, the service has not acted on it yet).
    pub async fn arrived(&self, n: usize) {
        let mut arrived = self.0.arrived.subscribe();
        // The sender lives as long as `self`: waiting cannot fail.
        let _ = arrived.wait_for(|latest| *latest >= n).await;
    }

    /// The path of the `n`-th request since the hold was set (a list request's names its
    /// schedule), once it has arrived.
    pub fn path(&self, n: usize) -> Option<String> {
        let paths = self.0.paths.lock().unwrap_or_else(|p| p.into_inner());
        paths.get(n.checked_sub(1)?).cloned()
    }

    /// Lets the requests up to the `n`-th go on; those after it are still held.
    pub fn release(&self, n: usize) {
        self.0
            .released
            .send_modify(|up_to| *up_to = (*up_to).max(n));
    }
}

impl Drop for RequestHold {
    fn drop(&mut self) {
        self.release(usize::MAX);
    }
}

impl Gate {
    /// Counts one request (to `path`) and waits while the test holds it.
    pub(super) async fn pass(&self, path: &str) {
        let n = {
            // Numbered and recorded under one lock, so the n-th path is the n-th request's.
            let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
            paths.push(path.to_owned());
            self.count.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.arrived
            .send_modify(|latest| *latest = (*latest).max(n));
        if (self.from..=self.to).contains(&n) {
            let mut released = self.released.subscribe();
            let _ = released.wait_for(|up_to| *up_to >= n).await;
        }
    }
}
