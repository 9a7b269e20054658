//! A TCP proxy on 127.0.0.1 (port 0) in front of the test PostgreSQL server's Unix socket, that
//! goes silent on the connections a test chooses: it stops forwarding in both directions and
//! closes nothing, as a network partition, a NAT's timeout or a failover leave a connection —
//! the client's socket stays open and nothing ever comes back. The kernel still acknowledges
//! what the client sends (the proxy's socket is alive), so neither TCP keepalives nor
//! `TCP_USER_TIMEOUT` notice: only the client's own patience does.
//!
//! The proxy runs on a runtime of its own (a thread), so that a test may call the synchronous
//! PostgreSQL warehouse through it from any thread. A connection is chosen by what its client
//! sent first: the startup message, which names the `application_name` (callsync's lock session
//! calls itself `callsync claims`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::watch;

use crate::pg::{Database, Server};

/// How much of what a client sends first is kept to choose its connection by.
const STARTUP_BYTES: usize = 1024;

pub struct Proxy {
    pub port: u16,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// One client's connection through the proxy.
struct Link {
    /// The first bytes the client sent (its startup message).
    startup: Mutex<Vec<u8>>,
    silent: watch::Sender<bool>,
    /// A side closed it.
    closed: AtomicBool,
}

impl Proxy {
    /// A proxy to `server`'s Unix socket, listening on 127.0.0.1 on a port of its own.
    pub fn start(server: &Server) -> Proxy {
        // The server listens on the default port's socket file.
        let socket = server.socket_dir.join(".s.PGSQL.5432");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        // Bound here, taken over by the runtime there: a test may start it from async code,
        // where blocking on another runtime is refused.
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("the proxy listens on 127.0.0.1");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("its address").port();
        let links: Arc<Mutex<Vec<Arc<Link>>>> = Arc::default();
        let accepting = links.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("the proxy's listener");
            accept(listener, socket, accepting).await;
        });
        Proxy {
            port,
            links,
            runtime: Some(runtime),
        }
    }

    /// `db`'s URL through the proxy (TCP, no TLS: the server behind is a Unix socket).
    pub fn url(&self, db: &Database) -> String {
        let server = crate::pg::server();
        format!(
            "postgresql://{}@127.0.0.1:{}/{}?sslmode=disable",
            server.superuser, self.port, db.name
        )
    }

    /// Silences every connection open now whose client's first bytes hold `marker`; returns
    /// how many. Connections made later go through.
    pub fn silence(&self, marker: &str) -> usize {
        let links = self.links.lock().expect("links");
        let chosen: Vec<&Arc<Link>> = links
            .iter()
            .filter(|link| !link.closed.load(Ordering::SeqCst))
            .filter(|link| {
                let startup = link.startup.lock().expect("startup");
                startup
                    .windows(marker.len())
                    .any(|w| w == marker.as_bytes())
            })
            .collect();
        for link in &chosen {
            link.silent.send_replace(true);
        }
        chosen.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Not waiting: dropping a runtime inside an async test would block the test's own.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept(listener: TcpListener, socket: PathBuf, links: Arc<Mutex<Vec<Arc<Link>>>>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = UnixStream::connect(&socket).await else {
            continue;
        };
        let link = Arc::new(Link {
            startup: Mutex::default(),
            silent: watch::Sender::new(false),
            closed: AtomicBool::new(false),
        });
        links.lock().expect("links").push(link.clone());
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        tokio::spawn(pump(client_read, server_write, link.clone(), true));
        tokio::spawn(pump(server_read, client_write, link, false));
    }
}

/// Forwards `from` to `to` until either closes, or, once the link is silenced, forwards
/// nothing more and keeps both open for ever. `record`: keep the first bytes in `startup`.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    link: Arc<Link>,
    record: bool,
) {
    let mut silent = link.silent.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = silent.wait_for(|s| *s) => 0,
        };
        if *silent.borrow() {
            // Both halves stay open: the peer hears nothing, not even a close.
            std::future::pending::<()>().await;
        }
        if record {
            let mut startup = link.startup.lock().expect("startup");
            let room = STARTUP_BYTES.saturating_sub(startup.len());
            startup.extend_from_slice(&buf[..n.min(room)]);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    link.closed.store(true, Ordering::SeqCst);
    let _ = to.shutdown().await;
}
