//! The connections of the metrics server: HTTP/1 served by hyper under limits a hostile or
//! broken client cannot exhaust. A request's head must arrive within the header timeout,
//! which also closes a kept-alive connection idle that long; at most `max_connections` are
//! open, and one more closes the oldest that is not answering a request (a half-sent
//! request, an idle keep-alive), so `/healthz` answers while a flood of half-open
//! connections holds the rest. What it refuses or cannot accept is logged once a minute at
//! most, with a count. Knows nothing of what is served: `endpoint.rs` hands it the router.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What a client may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more closes the oldest one not answering a request.
    pub max_connections: usize,
    /// A request's head must arrive within this from the connection's start or the end of the
    /// previous answer: both a half-sent request and an idle kept-alive connection are closed.
    pub header_timeout: Duration,
    /// No connection lives longer (a request body sent a byte a minute, say); it is closed
    /// after its current answer.
    pub max_lifetime: Duration,
}

impl Limits {
    /// Prometheus scrapes over one kept-alive connection, a health check or two more: 128 is
    /// far beyond honest use and far below the unit's `LimitNOFILE=`. A scrape's request
    /// arrives in milliseconds; 10 seconds idle between scrapes costs a reconnect at most.
    pub const DEFAULT: Limits = Limits {
        max_connections: 128,
        header_timeout: Duration::from_secs(10),
        max_lifetime: Duration::from_secs(300),
    };
}

/// How often a repeated problem (connections closed to make room, failed accepts) is logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The pause after a failed accept (out of file descriptors, mostly): the same call would
/// fail again at once.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a stopping server lets a connection finish the answer it is writing.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` within `limits` until `stop`.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) {
    let open = Open::default();
    let mut evictions = Hushed::new(LOG_EVERY);
    let mut failures = Hushed::new(LOG_EVERY);
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                if let Some(times) = failures.note(Instant::now()) {
                    tracing::warn!(
                        error = %err, times,
                        "the metrics server cannot accept connections (if it says too many open files, raise LimitNOFILE= in the unit)"
                    );
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        // TCP_NODELAY: a response written in two parts must not wait for the scraper's ACK.
        let _ = stream.set_nodelay(true);
        let Some(connection) = open.admit(limits.max_connections) else {
            // Every connection is answering a request: this one waits for none of them.
            drop(stream);
            note_eviction(&mut evictions, limits);
            continue;
        };
        if connection.evicted_another {
            note_eviction(&mut evictions, limits);
        }
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            limits,
            connection,
            open.clone(),
            stop.clone(),
        ));
    }
}

fn note_eviction(evictions: &mut Hushed, limits: Limits) {
    if let Some(times) = evictions.note(Instant::now()) {
        tracing::warn!(
            times,
            max_connections = limits.max_connections,
            "the metrics server closed connections to make room: more were open than it allows (a scraper that leaks connections, or a flood)"
        );
    }
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    connection: Admitted,
    open: Open,
    stop: CancellationToken,
) {
    let busy = connection.busy.clone();
    let tower = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let answering = Answering::start(&busy);
        let answer = hyper::service::Service::call(&tower, request);
        async move {
            let answer = answer.await;
            drop(answering);
            answer
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let let_it_finish = tokio::select! {
        // Ended by the client, by the header timeout, or by an error: nothing to report.
        _ = conn.as_mut() => false,
        // Closed to make room: dropped at once, so the socket closes.
        () = connection.close.cancelled() => false,
        () = stop.cancelled() => true,
        () = tokio::time::sleep(limits.max_lifetime) => true,
    };
    if let_it_finish {
        // The answer being written is finished, then the connection closes.
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(CLOSE_GRACE, conn.as_mut()).await;
    }
    open.forget(connection.id);
}

/// Counts a request being answered on a connection for as long as it lives.
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn start(busy: &Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::SeqCst);
        Answering(busy.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The open connections, oldest first.
#[derive(Clone, Default)]
struct Open(Arc<Mutex<OpenInner>>);

#[derive(Default)]
struct OpenInner {
    next_id: u64,
    connections: BTreeMap<u64, Tracked>,
}

struct Tracked {
    close: CancellationToken,
    busy: Arc<AtomicUsize>,
}

/// A connection let in.
struct Admitted {
    id: u64,
    close: CancellationToken,
    busy: Arc<AtomicUsize>,
    /// The oldest idle connection was closed to make room for this one.
    evicted_another: bool,
}

impl Open {
    fn lock(&self) -> MutexGuard<'_, OpenInner> {
        // A panic while holding it leaves nothing half-done: a map insert or remove.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lets a new connection in: within `max`, or by closing the oldest one not answering a
    /// request; `None` when every connection is answering one.
    fn admit(&self, max: usize) -> Option<Admitted> {
        let mut inner = self.lock();
        let mut evicted_another = false;
        if inner.connections.len() >= max {
            let idle = inner
                .connections
                .iter()
                .find(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id)?;
            if let Some(old) = inner.connections.remove(&idle) {
                old.close.cancel();
            }
            evicted_another = true;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let tracked = Tracked {
            close: CancellationToken::new(),
            busy: Arc::new(AtomicUsize::new(0)),
        };
        let admitted = Admitted {
            id,
            close: tracked.close.clone(),
            busy: tracked.busy.clone(),
            evicted_another,
        };
        inner.connections.insert(id, tracked);
        Some(admitted)
    }

    fn forget(&self, id: u64) {
        self.lock().connections.remove(&id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().connections.len()
    }
}

/// A problem logged at most once per `every`, with how many times it happened since.
struct Hushed {
    every: Duration,
    last: Option<Instant>,
    since: u64,
}

impl Hushed {
    fn new(every: Duration) -> Self {
        Hushed {
            every,
            last: None,
            since: 0,
        }
    }

    /// The problem happened at `now`: `Some(times)` when it is to be logged.
    fn note(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        match self.last {
            Some(last) if now.duration_since(last) < self.every => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.since))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Patience for an event only a hang would miss.
    const PATIENCE: Duration = Duration::from_secs(60);

    async fn start(limits: Limits) -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, app, limits, stop.clone()));
        (addr, stop)
    }

    /// A connection that sent half a request's head and waits.
    async fn half_open(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        stream
    }

    /// `GET /healthz` on a new connection: the whole answer.
    async fn healthz(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(PATIENCE, stream.read_to_string(&mut answer))
            .await
            .expect("an answer")
            .unwrap();
        answer
    }

    /// Waits until the server closes `stream`: the read ends (EOF or reset).
    async fn closed_by_the_server(stream: &mut TcpStream) {
        let mut buf = [0u8; 256];
        tokio::time::timeout(PATIENCE, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("the server closes the connection");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn healthz_answers_while_300_half_open_connections_are_held() {
        let limits = Limits {
            // Long enough that no half-open connection times out during the test.
            header_timeout: Duration::from_secs(3600),
            ..Limits::DEFAULT
        };
        let (addr, _stop) = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..300 {
            held.push(half_open(addr).await);
        }
        let answer = healthz(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
        // The oldest were closed to make room: never more than the limit open.
        for stream in &mut held[..300 - limits.max_connections] {
            closed_by_the_server(stream).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_sent_request_and_an_idle_connection_are_closed_after_the_header_timeout() {
        let (addr, _stop) = start(Limits {
            header_timeout: Duration::from_millis(200),
            ..Limits::DEFAULT
        })
        .await;
        let mut half = half_open(addr).await;
        closed_by_the_server(&mut half).await;

        let mut silent = TcpStream::connect(addr).await.unwrap();
        closed_by_the_server(&mut silent).await;

        // Kept alive after an answer, then idle: closed too.
        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = kept.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
        closed_by_the_server(&mut kept).await;

        assert!(healthz(addr).await.ends_with("ok\n"));
    }

    #[test]
    fn the_oldest_idle_connection_makes_room_and_busy_ones_are_kept() {
        let open = Open::default();
        let a = open.admit(2).unwrap();
        let b = open.admit(2).unwrap();
        assert!(!a.evicted_another && !b.evicted_another);
        let answering = Answering::start(&a.busy);
        let c = open.admit(2).unwrap();
        assert!(c.evicted_another);
        assert!(b.close.is_cancelled() && !a.close.is_cancelled());
        assert_eq!(open.len(), 2);
        let _also = Answering::start(&c.busy);
        assert!(open.admit(2).is_none(), "every connection is answering");
        drop(answering);
        assert!(open.admit(2).is_some());
        assert!(a.close.is_cancelled());
    }

    #[test]
    fn a_repeated_problem_is_logged_once_a_minute_with_its_count() {
        let mut hushed = Hushed::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(hushed.note(t0), Some(1));
        for s in 1..60 {
            assert_eq!(hushed.note(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(hushed.note(t0 + Duration::from_secs(60)), Some(60));
        assert_eq!(hushed.note(t0 + Duration::from_secs(61)), None);
    }
}
