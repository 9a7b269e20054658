//! `callsync upload`: a contact list (CSV) to calls, checked whole before anything is sent,
//! sent in chunks of at most [`MAX_BULK`] rows, and resumable without duplicates.
//!
//! Two passes over the file, each streamed, so memory stays flat whatever its size:
//! 1. [`check`]: every row is mapped to a call and validated (phone number, datetime
//!    parameters with a zone, required fields, `external_id`s unique in the file — tracked in
//!    a temporary SQLite table, not in memory); the file's bytes and the mapping are hashed
//!    into the upload's fingerprint.
//! 2. [`send`]: chunk by chunk, the warehouse's upload ledger records the chunk as `sent`
//!    before its request goes out and as `created` with the service's uids after. A chunk the
//!    ledger has as `created` is skipped; any other (left `sent` by a run killed while
//!    waiting, or unknown to the ledger) is looked up by its rows' `external_id`s before it
//!    is sent — the bulk endpoint is all-or-nothing, so its first row tells whether the chunk
//!    exists.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::api::{
    ApiClient, ApiError, Counters, ListFilter, ListQuery, MAX_BULK, NewCall, new_call_problems,
};
use crate::warehouse::{ChunkKey, ChunkState, Warehouse, WarehouseError};

/// Sends of one chunk that the service neither answered nor acted on, before giving up.
const MAX_CHUNK_TRIES: u32 = 3;

/// Problems listed in full before the rest are only counted.
const MAX_LISTED_PROBLEMS: usize = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {problem}", .path.display())]
    Csv { path: PathBuf, problem: String },
    #[error("{}: {problem}", .path.display())]
    Header { path: PathBuf, problem: String },
    #[error(
        "{} changed while it was uploaded (its fingerprint differs from the check's); run the upload again: chunks already created are skipped",
        .path.display()
    )]
    FileChanged { path: PathBuf },
    #[error("the service refused the chunk of lines {first_line}–{last_line}: {}", describe_refusal(.problems, .source))]
    Refused {
        first_line: u64,
        last_line: u64,
        /// The service's pointers mapped back to CSV lines and columns.
        problems: Vec<RowProblem>,
        source: Box<ApiError>,
    },
    #[error(
        "the chunk of lines {first_line}–{last_line} was not confirmed created ({source}); run the same upload again: it asks the service before sending anything again"
    )]
    Unconfirmed {
        first_line: u64,
        last_line: u64,
        source: Box<ApiError>,
    },
    #[error(
        "the chunk of lines {first_line}–{last_line} is partly in the service already: {problem}; these external_ids were created by something else — remove those rows or use another schedule"
    )]
    PartlyThere {
        first_line: u64,
        last_line: u64,
        problem: String,
    },
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
    #[error("the temporary table for duplicate external_ids failed: {0}")]
    Scratch(#[from] rusqlite::Error),
}

fn describe_refusal(problems: &[RowProblem], source: &ApiError) -> String {
    if problems.is_empty() {
        return source.to_string();
    }
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    each.join("; ")
}

/// One problem with one row, where an operator finds it in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    /// CSV line (the header is line 1).
    pub line: u64,
    /// The CSV column, as its header names it.
    pub column: String,
    pub reason: String,
}

impl std::fmt::Display for RowProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.reason
        )
    }
}

/// What to upload, where, and how.
#[derive(Debug, Clone)]
pub struct UploadOptions {
    pub schedule: Uuid,
    pub path: PathBuf,
    /// `--map column=field`: a column renamed (to a call field or a parameter name); an empty
    /// field drops the column.
    pub renames: Vec<(String, String)>,
    /// Send `force=true`: create calls on an enabled schedule.
    pub force: bool,
    /// Accept rows without `external_id`; such chunks cannot be looked up, so exactly-once
    /// is lost for them.
    pub allow_missing_external_id: bool,
}

/// The result of [`check`].
#[derive(Debug, Clone)]
pub struct Checked {
    pub fingerprint: String,
    pub rows: u64,
    /// At most [`MAX_LISTED_PROBLEMS`]; `problem_count` has them all.
    pub problems: Vec<RowProblem>,
    pub problem_count: u64,
}

/// What [`send`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadSummary {
    pub rows: u64,
    pub calls_created: u64,
    pub chunks_sent: u64,
    /// Chunks the ledger or the service showed created by an earlier run.
    pub chunks_already_created: u64,
}

/// Told about each chunk as the upload goes.
pub trait UploadProgress {
    fn chunk_done(&self, rows_done: u64, rows: u64);
}

/// The call fields a column can fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    PhoneNumber,
    FullName,
    FirstName,
    LastName,
    PhoneticFullName,
    PhoneticFirstName,
    PhoneticLastName,
    Email,
    ExternalId,
}

const FIELDS: [(&str, Field); 9] = [
    ("phone_number", Field::PhoneNumber),
    ("full_name", Field::FullName),
    ("first_name", Field::FirstName),
    ("last_name", Field::LastName),
    ("phonetic_full_name", Field::PhoneticFullName),
    ("phonetic_first_name", Field::PhoneticFirstName),
    ("phonetic_last_name", Field::PhoneticLastName),
    ("email", Field::Email),
    ("external_id", Field::ExternalId),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Field(Field),
    Parameter(String),
    Dropped,
}

/// What each column of the file becomes.
#[derive(Debug, Clone)]
struct Columns {
    headers: Vec<String>,
    targets: Vec<Target>,
}

impl Columns {
    fn from_header(
        path: &Path,
        header: &csv::StringRecord,
        renames: &[(String, String)],
    ) -> Result<Self, UploadError> {
        let bad = |problem: String| UploadError::Header {
            path: path.to_owned(),
            problem,
        };
        let headers: Vec<String> = header.iter().map(|h| h.trim().to_owned()).collect();
        for (from, _) in renames {
            if !headers.iter().any(|h| h == from) {
                return Err(bad(format!(
                    "--map {from}=…: the header has no column {from:?} (columns: {})",
                    headers.join(", ")
                )));
            }
        }
        let targets: Vec<Target> = headers
            .iter()
            .map(|h| {
                let name = renames
                    .iter()
                    .find(|(from, _)| from == h)
                    .map_or(h.as_str(), |(_, to)| to.as_str());
                if name.is_empty() {
                    return Target::Dropped;
                }
                FIELDS
                    .iter()
                    .find(|(field, _)| field.eq_ignore_ascii_case(name))
                    .map_or_else(
                        || Target::Parameter(name.to_owned()),
                        |(_, f)| Target::Field(*f),
                    )
            })
            .collect();
        let mut seen = BTreeMap::new();
        for (header, target) in headers.iter().zip(&targets) {
            if *target == Target::Dropped {
                continue;
            }
            if let Some(first) = seen.insert(format!("{target:?}"), header) {
                return Err(bad(format!(
                    "columns {first:?} and {header:?} both fill the same field; drop one with --map {header}="
                )));
            }
        }
        if !targets.contains(&Target::Field(Field::PhoneNumber)) {
            return Err(bad(format!(
                "no phone_number column (columns: {}); name one phone_number or use --map COLUMN=phone_number",
                headers.join(", ")
            )));
        }
        Ok(Columns { headers, targets })
    }

    /// The row as a call; empty cells are not sent.
    fn call(&self, record: &csv::StringRecord) -> NewCall {
        let mut call = NewCall::default();
        for (target, value) in self.targets.iter().zip(record.iter()) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            let text = Some(value.to_owned());
            match target {
                Target::Field(Field::PhoneNumber) => call.phone_number = value.to_owned(),
                Target::Field(Field::FullName) => call.full_name = text,
                Target::Field(Field::FirstName) => call.first_name = text,
                Target::Field(Field::LastName) => call.last_name = text,
                Target::Field(Field::PhoneticFullName) => call.phonetic_full_name = text,
                Target::Field(Field::PhoneticFirstName) => call.phonetic_first_name = text,
                Target::Field(Field::PhoneticLastName) => call.phonetic_last_name = text,
                Target::Field(Field::Email) => call.email = text,
                Target::Field(Field::ExternalId) => call.external_id = text,
                Target::Parameter(name) => {
                    call.custom_parameters
                        .insert(name.clone(), value.to_owned());
                }
                Target::Dropped => {}
            }
        }
        call
    }

    /// The column a call field (as the API names it) or a parameter came from.
    fn column_of(&self, field: &str) -> String {
        let wanted = FIELDS.iter().find(|(name, _)| *name == field).map_or_else(
            || Target::Parameter(field.to_owned()),
            |(_, f)| Target::Field(*f),
        );
        self.targets
            .iter()
            .position(|t| *t == wanted)
            .map_or_else(|| field.to_owned(), |i| self.headers[i].clone())
    }
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// The file's rows as calls, with their CSV lines, hashing the bytes as they are read.
struct Rows {
    path: PathBuf,
    reader: csv::Reader<Hashing<File>>,
    columns: Columns,
    record: csv::StringRecord,
}

impl Rows {
    fn open(options: &UploadOptions) -> Result<Self, UploadError> {
        let path = options.path.clone();
        let file = File::open(&path).map_err(|source| UploadError::Read {
            path: path.clone(),
            source,
        })?;
        let mut reader = csv::ReaderBuilder::new()
            .flexible(false)
            .from_reader(Hashing {
                inner: file,
                hasher: Sha256::new(),
            });
        let header = reader
            .headers()
            .map_err(|err| csv_error(&path, &err))?
            .clone();
        let columns = Columns::from_header(&path, &header, &options.renames)?;
        Ok(Rows {
            path,
            reader,
            columns,
            record: csv::StringRecord::new(),
        })
    }

    /// The next row: its CSV line and call.
    fn next(&mut self) -> Result<Option<(u64, NewCall)>, UploadError> {
        match self.reader.read_record(&mut self.record) {
            Ok(false) => Ok(None),
            Ok(true) => {
                let line = self.record.position().map_or(0, csv::Position::line);
                Ok(Some((line, self.columns.call(&self.record))))
            }
            Err(err) => Err(csv_error(&self.path, &err)),
        }
    }

    /// The upload's fingerprint, once every row was read: the file's bytes and the mapping.
    fn fingerprint(mut self, options: &UploadOptions) -> String {
        // Whatever the CSV reader left unread (nothing, at the end) is part of the file too.
        let mut rest = Vec::new();
        let _ = self.reader.get_mut().read_to_end(&mut rest);
        let mut hasher = self.reader.into_inner().hasher;
        for (from, to) in &options.renames {
            hasher.update(format!("\n--map {from}={to}").as_bytes());
        }
        hex(&hasher.finalize())
    }
}

fn csv_error(path: &Path, err: &csv::Error) -> UploadError {
    let problem = match err.position() {
        Some(p) => format!("line {}: {err}", p.line()),
        None => err.to_string(),
    };
    UploadError::Csv {
        path: path.to_owned(),
        problem,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the whole file and reports every bad row; sends nothing.
pub fn check(options: &UploadOptions) -> Result<Checked, UploadError> {
    let mut rows = Rows::open(options)?;
    // external_ids seen so far, on disk (SQLite's temporary database), not in memory.
    let scratch = rusqlite::Connection::open("")?;
    scratch.execute_batch(
        "CREATE TABLE seen (external_id TEXT PRIMARY KEY, line INTEGER NOT NULL) WITHOUT ROWID",
    )?;
    let mut insert = scratch.prepare("INSERT OR IGNORE INTO seen VALUES (?1, ?2)")?;
    let mut first_seen = scratch.prepare("SELECT line FROM seen WHERE external_id = ?1")?;
    let mut checked = Checked {
        fingerprint: String::new(),
        rows: 0,
        problems: Vec::new(),
        problem_count: 0,
    };
    let mut report = |problem: RowProblem| {
        checked.problem_count += 1;
        if checked.problems.len() < MAX_LISTED_PROBLEMS {
            checked.problems.push(problem);
        }
    };
    let columns = rows.columns.clone();
    scratch.execute_batch("BEGIN")?;
    let mut count = 0;
    while let Some((line, call)) = rows.next()? {
        count += 1;
        let problem = |field: &str, reason: String| RowProblem {
            line,
            column: columns.column_of(field),
            reason,
        };
        if call.phone_number.is_empty() {
            report(problem(
                "phone_number",
                "missing: every call needs a phone number".into(),
            ));
        }
        for p in new_call_problems(&call) {
            if !call.phone_number.is_empty() || p.field != "phone_number" {
                report(problem(&p.field, p.reason));
            }
        }
        match &call.external_id {
            // A row already there for this id: the id is a duplicate.
            Some(id) if insert.execute(rusqlite::params![id, line as i64])? == 0 => {
                let first: i64 = first_seen.query_row([id], |r| r.get(0))?;
                report(problem(
                    "external_id",
                    format!("{id:?} is also on line {first}: each row needs its own external_id"),
                ));
            }
            Some(_) => {}
            None if !options.allow_missing_external_id => report(problem(
                "external_id",
                "missing: it is what lets a re-run find calls already created (or pass --allow-missing-external-id)".into(),
            )),
            None => {}
        }
    }
    drop((insert, first_seen));
    scratch.execute_batch("COMMIT")?;
    checked.rows = count;
    checked.fingerprint = rows.fingerprint(options);
    Ok(checked)
}

/// A chunk of rows: their CSV lines and calls.
struct Chunk {
    lines: Vec<u64>,
    calls: Vec<NewCall>,
}

impl Chunk {
    fn first_line(&self) -> u64 {
        self.lines.first().copied().unwrap_or(0)
    }

    fn last_line(&self) -> u64 {
        self.lines.last().copied().unwrap_or(0)
    }
}

/// Sends a checked file, chunk by chunk, skipping what an earlier run created.
pub async fn send(
    client: &ApiClient,
    warehouse: &mut Warehouse,
    options: &UploadOptions,
    checked: &Checked,
    progress: &dyn UploadProgress,
) -> Result<UploadSummary, UploadError> {
    let mut rows = Rows::open(options)?;
    let columns = rows.columns.clone();
    let counters = Counters::for_lane(options.schedule);
    let mut summary = UploadSummary::default();
    loop {
        let mut chunk = Chunk {
            lines: Vec::with_capacity(MAX_BULK),
            calls: Vec::with_capacity(MAX_BULK),
        };
        while chunk.calls.len() < MAX_BULK {
            match rows.next()? {
                Some((line, call)) => {
                    chunk.lines.push(line);
                    chunk.calls.push(call);
                }
                None => break,
            }
        }
        if chunk.calls.is_empty() {
            break;
        }
        let key = ChunkKey {
            schedule: options.schedule,
            fingerprint: checked.fingerprint.clone(),
            first_line: chunk.first_line(),
        };
        let n = chunk.calls.len() as u64;
        match send_chunk(client, warehouse, options, &columns, &key, chunk, &counters).await? {
            Sent::Now => {
                summary.chunks_sent += 1;
                summary.calls_created += n;
            }
            Sent::Before => summary.chunks_already_created += 1,
        }
        summary.rows += n;
        progress.chunk_done(summary.rows, checked.rows);
    }
    if rows.fingerprint(options) != checked.fingerprint {
        return Err(UploadError::FileChanged {
            path: options.path.clone(),
        });
    }
    Ok(summary)
}

enum Sent {
    Now,
    Before,
}

async fn send_chunk(
    client: &ApiClient,
    warehouse: &mut Warehouse,
    options: &UploadOptions,
    columns: &Columns,
    key: &ChunkKey,
    chunk: Chunk,
    counters: &Counters,
) -> Result<Sent, UploadError> {
    let (first_line, last_line) = (chunk.first_line(), chunk.last_line());
    if let Some(ChunkState::Created(_)) = warehouse.chunk_state(key)? {
        return Ok(Sent::Before);
    }
    // Sent by a run that never saw the answer, or not in the ledger at all (another file
    // with the same contacts, a ledger lost with its warehouse): the service knows. One
    // request for a chunk that does not exist, as the first row tells.
    if let Some(uids) = already_created(client, options.schedule, &chunk, counters).await? {
        warehouse.chunk_sent(key, last_line, chunk.calls.len())?;
        warehouse.chunk_created(key, &uids)?;
        tracing::info!(first_line, last_line, "chunk found created already");
        return Ok(Sent::Before);
    }
    let mut tries = 0;
    loop {
        tries += 1;
        warehouse.chunk_sent(key, last_line, chunk.calls.len())?;
        let sent = client
            .create_calls(
                options.schedule,
                chunk.calls.clone(),
                options.force,
                counters,
            )
            .await;
        let err = match sent {
            Ok(uids) => {
                warehouse.chunk_created(key, &uids)?;
                return Ok(Sent::Now);
            }
            Err(err) => err,
        };
        // The service answered with a refusal: all or nothing, so nothing was created.
        if err.status().is_some_and(|s| s.is_client_error()) {
            warehouse.chunk_not_created(key)?;
            return Err(UploadError::Refused {
                first_line,
                last_line,
                problems: refused_rows(&err, &chunk, columns),
                source: Box::new(err),
            });
        }
        // No answer, or a 5xx: created or not, only the service knows. Ask it.
        let unconfirmed = |source| UploadError::Unconfirmed {
            first_line,
            last_line,
            source: Box::new(source),
        };
        if !has_external_ids(&chunk) {
            return Err(unconfirmed(err));
        }
        match already_created(client, options.schedule, &chunk, counters).await? {
            Some(uids) => {
                warehouse.chunk_created(key, &uids)?;
                return Ok(Sent::Now);
            }
            None if tries < MAX_CHUNK_TRIES => {
                tracing::warn!(first_line, last_line, error = %err, "the chunk was not created; sending it again");
            }
            None => {
                warehouse.chunk_not_created(key)?;
                return Err(unconfirmed(err));
            }
        }
    }
}

fn has_external_ids(chunk: &Chunk) -> bool {
    chunk.calls.iter().all(|c| c.external_id.is_some())
}

/// The uids of the chunk's calls if the service has them, `None` if it has none of them.
/// Without external_ids nothing can be looked up: `None`, and the chunk is sent again.
async fn already_created(
    client: &ApiClient,
    schedule: Uuid,
    chunk: &Chunk,
    counters: &Counters,
) -> Result<Option<Vec<Uuid>>, UploadError> {
    if !has_external_ids(chunk) {
        tracing::warn!(
            first_line = chunk.first_line(),
            "rows without external_id cannot be looked up: sending the chunk again may duplicate it"
        );
        return Ok(None);
    }
    let mut uids = Vec::with_capacity(chunk.calls.len());
    for (i, call) in chunk.calls.iter().enumerate() {
        let external_id = call.external_id.clone().unwrap_or_default();
        let found = find_by_external_id(client, schedule, &external_id, counters)
            .await
            .map_err(|source| UploadError::Unconfirmed {
                first_line: chunk.first_line(),
                last_line: chunk.last_line(),
                source: Box::new(source),
            })?;
        match (i, found.as_slice()) {
            // All or nothing: the first row absent means the chunk was not created.
            (0, []) => return Ok(None),
            (_, [uid]) => uids.push(*uid),
            (_, found) => {
                return Err(UploadError::PartlyThere {
                    first_line: chunk.first_line(),
                    last_line: chunk.last_line(),
                    problem: format!(
                        "external_id {external_id:?} (line {}) has {} calls in the schedule",
                        chunk.lines[i],
                        found.len()
                    ),
                });
            }
        }
    }
    Ok(Some(uids))
}

async fn find_by_external_id(
    client: &ApiClient,
    schedule: Uuid,
    external_id: &str,
    counters: &Counters,
) -> Result<Vec<Uuid>, ApiError> {
    let filter = ListFilter {
        external_id: Some(external_id.to_owned()),
        ..ListFilter::default()
    };
    let query = ListQuery {
        updated_after: None,
        page: 1,
        page_size: 2,
        filter: &filter,
    };
    let listed = client.list_calls(schedule, &query, counters).await?;
    Ok(listed.page.data.iter().map(|c| c.uid).collect())
}

/// The service's pointers (`/outbound_calls/<index>/<field>[/<parameter>]`) as CSV lines and
/// columns; problems without a pointer into the chunk name its first line.
fn refused_rows(err: &ApiError, chunk: &Chunk, columns: &Columns) -> Vec<RowProblem> {
    let ApiError::Status {
        body: Some(body), ..
    } = err
    else {
        return Vec::new();
    };
    body.errors
        .iter()
        .map(|item| {
            let reason = match (&item.title, &item.detail) {
                (Some(t), Some(d)) => format!("{t}: {d}"),
                (Some(t), None) | (None, Some(t)) => t.clone(),
                (None, None) => "refused".to_owned(),
            };
            let pointer = item.source.as_ref().and_then(|s| s.pointer.as_deref());
            let (line, column) = pointer
                .and_then(|p| locate(p, chunk, columns))
                .unwrap_or_else(|| (chunk.first_line(), pointer.unwrap_or("?").to_owned()));
            RowProblem {
                line,
                column,
                reason,
            }
        })
        .collect()
}

fn locate(pointer: &str, chunk: &Chunk, columns: &Columns) -> Option<(u64, String)> {
    let mut parts = pointer.strip_prefix("/outbound_calls/")?.split('/');
    let index: usize = parts.next()?.parse().ok()?;
    let line = *chunk.lines.get(index)?;
    let column = match (parts.next(), parts.next()) {
        (Some("custom_parameters"), Some(name)) => columns.column_of(name),
        (Some(field), _) => columns.column_of(field),
        (None, _) => "?".to_owned(),
    };
    Some((line, column))
}
