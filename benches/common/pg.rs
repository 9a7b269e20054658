//! A PostgreSQL server for the benchmarks: the URI of another database on it, a connection,
//! administrative SQL (`CALLSYNC_BENCH_POSTGRES` names the server: see benches/postgres.rs).

/// `url` with its database name replaced by `dbname` (the query, e.g. `?host=/socket`, kept).
pub fn with_dbname(url: &str, dbname: &str) -> String {
    let (before, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = before.rsplit_once('/').map_or(before, |(b, _)| b);
    match query {
        Some(q) => format!("{base}/{dbname}?{q}"),
        None => format!("{base}/{dbname}"),
    }
}

/// A connection to `url` (a bench's server on a Unix socket: no TLS), driven on the runtime.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("the server answers");
    tokio::spawn(connection);
    client
}

/// Runs `sql`'s statements one by one (`CREATE DATABASE` cannot run in a transaction).
pub async fn admin_sql(url: &str, sql: &str) {
    let client = connect(url).await;
    for statement in sql.split(';').filter(|s| !s.trim().is_empty()) {
        client.batch_execute(statement).await.expect("admin SQL");
    }
}
