//! Who is told of every request as it is answered: the daemon's metrics, without `api`
//! knowing them (dependencies point down only).

use std::time::Duration;

/// Told of every request the client sends, when its answer's status line and headers have
/// arrived (or it got none). Called on the request's task: keep it cheap and non-blocking.
pub trait RequestObserver: Send + Sync + 'static {
    /// The service answered `status` after `latency` (sent to headers received).
    fn answered(&self, status: u16, latency: Duration);
    /// No answer: the connection, TLS or the request timeout failed after `latency`.
    fn unanswered(&self, latency: Duration);
}
