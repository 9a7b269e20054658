//! A PostgreSQL server a round trip away, for a daemon on this machine: a TCP port that passes
//! every connection through to a bench's server on a Unix socket, each byte late.

/// A TCP port on 127.0.0.1 that passes every connection through to the server `url` names
/// (`host=` a Unix socket directory, the default port), each byte `one_way` late in each
/// direction: a server a round trip of twice `one_way` away, for a daemon on this machine.
/// Runs on the current runtime until the process ends.
pub async fn distant(url: &str, one_way: std::time::Duration) -> u16 {
    let socket = url
        .split(['?', '&'])
        .find_map(|part| part.strip_prefix("host="))
        .map(|dir| format!("{dir}/.s.PGSQL.5432"))
        .expect("CALLSYNC_BENCH_POSTGRES names a Unix socket directory (host=…)");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let _ = client.set_nodelay(true);
            let Ok(server) = tokio::net::UnixStream::connect(&socket).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(late(client_read, server_write, one_way));
            tokio::spawn(late(server_read, client_write, one_way));
        }
    });
    port
}

/// Copies `from` into `to`, each chunk written `one_way` after it was read, in order.
async fn late(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    one_way: std::time::Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks, mut arriving) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = arriving.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0
            || chunks
                .send((tokio::time::Instant::now() + one_way, buffer[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
}
