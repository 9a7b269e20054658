//! `callsync upload`: a contact list (CSV) to calls, checked whole before anything is sent,
//! sent in chunks of at most [`MAX_BULK`] rows, and resumable without duplicates.
//!
//! Two passes over the file, each streamed, so memory stays flat whatever its size:
//! 1. [`check`]: every row is mapped to a call and validated (as many fields as the header,
//!    phone number, datetime parameters with a zone, required fields, `external_id`s unique
//!    in the file — tracked in a temporary SQLite table, not in memory); the file's bytes and
//!    the mapping are hashed into the upload's fingerprint, and each chunk's rows into a
//!    digest.
//! 2. [`send`]: chunk by chunk, the chunk's digest is compared with the check's (a file
//!    changed since is never sent), then the warehouse's upload ledger records the chunk as
//!    `sent` before its request goes out and as `created` with the service's uids after. A
//!    chunk the ledger has as `created` is skipped; any other is looked up by its rows'
//!    `external_id`s before it is sent — the bulk endpoint is all or nothing, so its first
//!    row tells whether the chunk exists.
//!
//! A create whose answer is lost (a timeout, a dropped connection, a 5xx) may still be done by
//! the service, later: such a chunk is never sent again until a lookup has failed to find it
//! for the whole settle window after it was sent (`api.create_settle_secs`), in this run or,
//! from the ledger's `sent_at`, in the next one.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::api::{
    ApiClient, ApiError, Counters, ListFilter, ListQuery, MAX_BULK, NewCall, Timestamp,
    new_call_problems,
};
use crate::warehouse::file_lock::{FileLock, LockByte, LockError, LockMode};
use crate::warehouse::{ChunkKey, ChunkState, Warehouse, WarehouseError};

/// Sends of one chunk that the service neither answered nor acted on, before giving up.
const MAX_CHUNK_TRIES: u32 = 3;

/// Problems listed in full before the rest are only counted.
const MAX_LISTED_PROBLEMS: usize = 1_000;

/// The first and the longest pause between lookups of a chunk whose answer was lost.
const FIRST_POLL: Duration = Duration::from_millis(250);
const LONGEST_POLL: Duration = Duration::from_secs(5);

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
        "{} changed after it was checked (from line {first_line} on it is not what was checked); nothing from line {first_line} on was sent: run the upload again, which checks the file anew and finds the chunks already created",
        .path.display()
    )]
    FileChanged { path: PathBuf, first_line: u64 },
    #[error("schedule {schedule} not found on the service (HTTP 404); check the uid (`callsync schedule create` prints it) and api.base_url; {}",
        if *.sent_before { "the chunks sent before were created and stay" } else { "nothing was sent" })]
    ScheduleNotFound { schedule: Uuid, sent_before: bool },
    /// The first request, a one-row list of the schedule, failed (the CLI names the upload).
    #[error("nothing was sent: {cause}")]
    Unreachable { cause: ApiError },
    #[error("the service refused the chunk of lines {first_line}–{last_line}: {}", describe_refusal(.problems, .cause))]
    Refused {
        first_line: u64,
        last_line: u64,
        /// The service's pointers mapped back to CSV lines and columns.
        problems: Vec<RowProblem>,
        cause: Box<ApiError>,
    },
    #[error(
        "whether the chunk of lines {first_line}–{last_line} was created is not known ({cause}); run the same upload again later: it looks the chunk up before sending anything again"
    )]
    Unconfirmed {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "the service did not create the chunk of lines {first_line}–{last_line} in {MAX_CHUNK_TRIES} tries, each looked for during the settle window after it (the last failure: {cause}); run the same upload again later"
    )]
    GaveUp {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "whether the chunk of lines {first_line}–{last_line} was created is not known ({cause}), and its rows have no external_id to look it up by: check the schedule's calls before running the upload again, which would send it again"
    )]
    Unknowable {
        first_line: u64,
        last_line: u64,
        cause: Box<ApiError>,
    },
    #[error(
        "the chunk of lines {first_line}–{last_line} is partly in the service already: {problem}; these external_ids were created by something else — remove those rows or use another schedule"
    )]
    PartlyThere {
        first_line: u64,
        last_line: u64,
        problem: String,
    },
    #[error(
        "another callsync process is running this upload (schedule {schedule}, a file with fingerprint {}…); wait for it to end, and run it again only if it failed",
        &.fingerprint[..12.min(.fingerprint.len())]
    )]
    Busy { schedule: Uuid, fingerprint: String },
    #[error("cannot lock the upload in the warehouse {}", .path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Warehouse(#[from] WarehouseError),
    #[error("the temporary table for duplicate external_ids failed: {0}")]
    Scratch(#[from] rusqlite::Error),
}

fn describe_refusal(problems: &[RowProblem], cause: &ApiError) -> String {
    if problems.is_empty() {
        return cause.to_string();
    }
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    each.join("; ")
}

/// One problem with one row, where an operator finds it in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    /// CSV line (the header is line 1).
    pub line: u64,
    /// The CSV column, as its header names it; `None` for a problem of the whole row.
    pub column: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for RowProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.column {
            // The column's name is the CSV file's text.
            Some(column) => write!(
                f,
                "line {}, column {}: {}",
                self.line,
                crate::untrusted::untrusted_text(column, 200),
                self.reason
            ),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
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
    /// How long after a chunk was sent without an answer its calls are looked for before it
    /// counts as not created ([`crate::config::ApiConfig::create_settle_window`]).
    pub settle: Duration,
}

/// The result of [`check`].
#[derive(Debug, Clone)]
pub struct Checked {
    pub fingerprint: String,
    pub rows: u64,
    /// At most [`MAX_LISTED_PROBLEMS`]; `problem_count` has them all.
    pub problems: Vec<RowProblem>,
    pub problem_count: u64,
    /// Each chunk's rows as checked, in file order: what [`send`] may send.
    chunk_digests: Vec<[u8; 32]>,
}

/// What [`send`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadSummary {
    pub rows: u64,
    pub calls_created: u64,
    pub chunks_sent: u64,
    /// Chunks the ledger or the service showed created by an earlier run.
    pub chunks_already_created: u64,
    /// Rows of the chunks the service refused (all or nothing: a chunk with one bad row is
    /// refused whole); the other chunks were sent.
    pub rows_refused: u64,
    /// The service's reasons, at most [`MAX_LISTED_PROBLEMS`].
    pub refusals: Vec<RowProblem>,
}

/// Told about each chunk as the upload goes.
pub trait UploadProgress {
    fn chunk_done(&self, rows_done: u64, rows: u64);
    /// What the upload is waiting for, when it waits for more than an answer; `None` when it
    /// no longer does.
    fn waiting(&self, what: Option<&str>);
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

    /// The row as a call; empty cells are not sent. `Err` with the index of a column whose
    /// value is not UTF-8 text.
    fn call(&self, record: &csv::ByteRecord) -> Result<NewCall, usize> {
        let mut call = NewCall::default();
        for (i, (target, value)) in self.targets.iter().zip(record.iter()).enumerate() {
            if *target == Target::Dropped {
                continue;
            }
            let value = std::str::from_utf8(value).map_err(|_| i)?.trim();
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
        Ok(call)
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

/// One row of the file.
enum Row {
    Call {
        line: u64,
        call: Box<NewCall>,
    },
    /// More or fewer fields than the header has.
    Ragged {
        line: u64,
        fields: usize,
    },
    /// A value that is not UTF-8 text, in this column.
    NotText {
        line: u64,
        column: String,
    },
}

impl Row {
    fn line(&self) -> u64 {
        match self {
            Row::Call { line, .. } | Row::Ragged { line, .. } | Row::NotText { line, .. } => *line,
        }
    }
}

/// The file's rows with their CSV lines, hashing the bytes as they are read (the upload's
/// fingerprint) and the rows of the current chunk (its digest).
struct Rows {
    path: PathBuf,
    reader: csv::Reader<Hashing<File>>,
    columns: Columns,
    record: csv::ByteRecord,
    chunk: Sha256,
}

impl Rows {
    fn open(options: &UploadOptions) -> Result<Self, UploadError> {
        let path = options.path.clone();
        let file = File::open(&path).map_err(|source| UploadError::Read {
            path: path.clone(),
            source,
        })?;
        // Flexible: a row with a wrong number of fields is a problem of that row, reported
        // with the others, not the end of the reading.
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_reader(Hashing {
                inner: file,
                hasher: Sha256::new(),
            });
        let header = reader
            .headers()
            .map_err(|err| csv_error(&path, &err))?
            .clone();
        let columns = Columns::from_header(&path, &header, &options.renames)?;
        let mut rows = Rows {
            path,
            reader,
            columns,
            record: csv::ByteRecord::new(),
            chunk: Sha256::new(),
        };
        // The header decides what each value becomes: part of the first chunk's digest.
        digest_record(&mut rows.chunk, 1, header.as_byte_record());
        Ok(rows)
    }

    fn next(&mut self) -> Result<Option<Row>, UploadError> {
        let more = self
            .reader
            .read_byte_record(&mut self.record)
            .map_err(|err| csv_error(&self.path, &err))?;
        if !more {
            return Ok(None);
        }
        let line = self.record.position().map_or(0, csv::Position::line);
        digest_record(&mut self.chunk, line, &self.record);
        let fields = self.record.len();
        if fields != self.columns.headers.len() {
            return Ok(Some(Row::Ragged { line, fields }));
        }
        Ok(Some(match self.columns.call(&self.record) {
            Ok(call) => Row::Call {
                line,
                call: Box::new(call),
            },
            Err(index) => Row::NotText {
                line,
                column: self.columns.headers[index].clone(),
            },
        }))
    }

    /// The digest of the rows read since the last call.
    fn chunk_digest(&mut self) -> [u8; 32] {
        std::mem::take(&mut self.chunk).finalize().into()
    }

    /// The next chunk of at most [`MAX_BULK`] rows; a row that is not a call means the file
    /// is no longer the one checked.
    fn next_chunk(&mut self) -> Result<Option<Chunk>, UploadError> {
        let mut chunk = Chunk {
            lines: Vec::with_capacity(MAX_BULK),
            calls: Vec::with_capacity(MAX_BULK),
            digest: [0; 32],
        };
        while chunk.calls.len() < MAX_BULK {
            match self.next()? {
                Some(Row::Call { line, call }) => {
                    chunk.lines.push(line);
                    chunk.calls.push(*call);
                }
                Some(other) => {
                    return Err(UploadError::FileChanged {
                        path: self.path.clone(),
                        first_line: chunk.lines.first().copied().unwrap_or(other.line()),
                    });
                }
                None => break,
            }
        }
        if chunk.calls.is_empty() {
            return Ok(None);
        }
        chunk.digest = self.chunk_digest();
        Ok(Some(chunk))
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

/// Adds a record to a chunk's digest, lengths first, so that no two different rows hash alike.
fn digest_record(digest: &mut Sha256, line: u64, record: &csv::ByteRecord) {
    digest.update(line.to_le_bytes());
    digest.update((record.len() as u64).to_le_bytes());
    for field in record {
        digest.update((field.len() as u64).to_le_bytes());
        digest.update(field);
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
    let mut duplicates = DuplicateIds::new()?;
    let mut checked = Checked {
        fingerprint: String::new(),
        rows: 0,
        problems: Vec::new(),
        problem_count: 0,
        chunk_digests: Vec::new(),
    };
    let columns = rows.columns.clone();
    let mut in_chunk = 0;
    while let Some(row) = rows.next()? {
        checked.rows += 1;
        for problem in row_problems(&row, &columns, &mut duplicates, options)? {
            checked.problem_count += 1;
            if checked.problems.len() < MAX_LISTED_PROBLEMS {
                checked.problems.push(problem);
            }
        }
        in_chunk += 1;
        if in_chunk == MAX_BULK {
            checked.chunk_digests.push(rows.chunk_digest());
            in_chunk = 0;
        }
    }
    if in_chunk > 0 {
        checked.chunk_digests.push(rows.chunk_digest());
    }
    duplicates.finish()?;
    checked.fingerprint = rows.fingerprint(options);
    Ok(checked)
}

/// The external_ids seen so far, on disk (SQLite's temporary database), not in memory.
struct DuplicateIds {
    scratch: rusqlite::Connection,
}

impl DuplicateIds {
    fn new() -> Result<Self, rusqlite::Error> {
        let scratch = rusqlite::Connection::open("")?;
        scratch.execute_batch(
            "CREATE TABLE seen (external_id TEXT PRIMARY KEY, line INTEGER NOT NULL) WITHOUT ROWID;
             BEGIN",
        )?;
        Ok(DuplicateIds { scratch })
    }

    /// The line `id` was first seen on, if not this one.
    fn first_seen(&mut self, id: &str, line: u64) -> Result<Option<u64>, rusqlite::Error> {
        let inserted = self
            .scratch
            .prepare_cached("INSERT OR IGNORE INTO seen VALUES (?1, ?2)")?
            .execute(rusqlite::params![id, line as i64])?;
        if inserted == 1 {
            return Ok(None);
        }
        let first: i64 = self
            .scratch
            .prepare_cached("SELECT line FROM seen WHERE external_id = ?1")?
            .query_row([id], |r| r.get(0))?;
        Ok(Some(first as u64))
    }

    fn finish(self) -> Result<(), rusqlite::Error> {
        self.scratch.execute_batch("COMMIT")
    }
}

/// Everything wrong with one row.
fn row_problems(
    row: &Row,
    columns: &Columns,
    duplicates: &mut DuplicateIds,
    options: &UploadOptions,
) -> Result<Vec<RowProblem>, UploadError> {
    let (line, call) = match row {
        Row::Call { line, call } => (*line, call),
        Row::Ragged { line, fields } => {
            return Ok(vec![RowProblem {
                line: *line,
                column: None,
                reason: format!(
                    "{fields} fields where the header has {}: a comma too many or too few, or a value with a comma not in double quotes",
                    columns.headers.len()
                ),
            }]);
        }
        Row::NotText { line, column } => {
            return Ok(vec![RowProblem {
                line: *line,
                column: Some(column.clone()),
                reason: "not UTF-8 text: save the file as UTF-8".into(),
            }]);
        }
    };
    let problem = |field: &str, reason: String| RowProblem {
        line,
        column: Some(columns.column_of(field)),
        reason,
    };
    let mut problems = Vec::new();
    if call.phone_number.is_empty() {
        problems.push(problem(
            "phone_number",
            "missing: every call needs a phone number".into(),
        ));
    }
    for p in new_call_problems(call) {
        if !call.phone_number.is_empty() || p.field != "phone_number" {
            problems.push(problem(&p.field, p.reason));
        }
    }
    match &call.external_id {
        Some(id) => {
            if let Some(first) = duplicates.first_seen(id, line)? {
                problems.push(problem(
                    "external_id",
                    format!("{id:?} is also on line {first}: each row needs its own external_id"),
                ));
            }
        }
        None if !options.allow_missing_external_id => problems.push(problem(
            "external_id",
            "missing: it is what lets a re-run find calls already created (or pass --allow-missing-external-id)".into(),
        )),
        None => {}
    }
    Ok(problems)
}

/// A chunk of rows: their CSV lines and calls, and the digest of their fields.
struct Chunk {
    lines: Vec<u64>,
    calls: Vec<NewCall>,
    digest: [u8; 32],
}

impl Chunk {
    fn first_line(&self) -> u64 {
        self.lines.first().copied().unwrap_or(0)
    }

    fn last_line(&self) -> u64 {
        self.lines.last().copied().unwrap_or(0)
    }

    fn has_external_ids(&self) -> bool {
        self.calls.iter().all(|c| c.external_id.is_some())
    }
}

/// One upload at a time: an exclusive lock on a byte of the warehouse file chosen by the
/// schedule and the file's fingerprint, held while the upload sends (see
/// `warehouse::file_lock`: no lock file, released when the process dies).
#[derive(Debug)]
pub struct UploadLock {
    _lock: FileLock,
}

impl UploadLock {
    /// Takes the lock of uploading `checked`'s file to `schedule`, without waiting.
    pub fn acquire(
        warehouse: &Path,
        schedule: Uuid,
        checked: &Checked,
    ) -> Result<UploadLock, UploadError> {
        let mut hasher = Sha256::new();
        hasher.update(schedule.as_bytes());
        hasher.update(checked.fingerprint.as_bytes());
        let digest = hasher.finalize();
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        let byte = LockByte::Upload(u64::from_le_bytes(first));
        match FileLock::try_lock(warehouse, byte, LockMode::Exclusive) {
            Ok(lock) => Ok(UploadLock { _lock: lock }),
            Err(LockError::Busy) => Err(UploadError::Busy {
                schedule,
                fingerprint: checked.fingerprint.clone(),
            }),
            Err(LockError::Io(source)) => Err(UploadError::Lock {
                path: warehouse.to_owned(),
                source,
            }),
        }
    }
}

/// Sends a checked file, chunk by chunk, skipping what an earlier run created. A chunk the
/// service refuses for its rows (a 400 pointing at them) is counted and reported in the
/// summary, and the next chunks are sent; any other failure stops the upload.
pub async fn send(
    client: &ApiClient,
    warehouse: &mut Warehouse,
    options: &UploadOptions,
    checked: &Checked,
    progress: &dyn UploadProgress,
) -> Result<UploadSummary, UploadError> {
    let mut rows = Rows::open(options)?;
    let sender = Sender {
        client,
        options,
        columns: rows.columns.clone(),
        counters: Counters::for_lane(options.schedule),
        progress,
    };
    sender.check_schedule().await?;
    let mut as_checked = checked.chunk_digests.iter();
    let mut summary = UploadSummary::default();
    let mut next_line = 2;
    while let Some(chunk) = rows.next_chunk()? {
        if as_checked.next() != Some(&chunk.digest) {
            return Err(UploadError::FileChanged {
                path: options.path.clone(),
                first_line: chunk.first_line(),
            });
        }
        let key = ChunkKey {
            schedule: options.schedule,
            fingerprint: checked.fingerprint.clone(),
            first_line: chunk.first_line(),
        };
        let n = chunk.calls.len() as u64;
        let sent = sender.send_chunk(warehouse, &key, &chunk).await;
        match sent {
            Ok(Sent::Now) => {
                summary.chunks_sent += 1;
                summary.calls_created += n;
            }
            Ok(Sent::Before) => summary.chunks_already_created += 1,
            Ok(Sent::Refused(problems)) => {
                summary.rows_refused += n;
                let room = MAX_LISTED_PROBLEMS.saturating_sub(summary.refusals.len());
                summary.refusals.extend(problems.into_iter().take(room));
            }
            Err(UploadError::ScheduleNotFound { schedule, .. }) => {
                return Err(UploadError::ScheduleNotFound {
                    schedule,
                    sent_before: summary.chunks_sent + summary.chunks_already_created > 0,
                });
            }
            Err(err) => return Err(err),
        }
        summary.rows += n;
        next_line = chunk.last_line() + 1;
        progress.chunk_done(summary.rows, checked.rows);
    }
    if as_checked.next().is_some() {
        // Shorter than it was: the rows left out were never sent.
        return Err(UploadError::FileChanged {
            path: options.path.clone(),
            first_line: next_line,
        });
    }
    Ok(summary)
}

enum Sent {
    /// Created by this run.
    Now,
    /// Found created, by an earlier run or another file with the same rows.
    Before,
    /// Refused by the service for these rows; nothing of the chunk was created.
    Refused(Vec<RowProblem>),
}

/// What a lookup by external_id found of a chunk.
enum Found {
    Nothing,
    /// Every row, with its call's uid, in row order.
    All(Vec<Uuid>),
    /// The first rows but not all (a service still creating them, or rows made elsewhere).
    Partly(String),
}

/// What sending a chunk needs, for the whole upload.
struct Sender<'a> {
    client: &'a ApiClient,
    options: &'a UploadOptions,
    columns: Columns,
    counters: Counters,
    progress: &'a dyn UploadProgress,
}

impl Sender<'_> {
    /// A 404 before anything is sent is a wrong uid, said plainly.
    async fn check_schedule(&self) -> Result<(), UploadError> {
        let filter = ListFilter::default();
        let query = ListQuery {
            updated_after: None,
            page: 1,
            page_size: 1,
            filter: &filter,
        };
        let schedule = self.options.schedule;
        match self
            .client
            .list_calls(schedule, &query, &self.counters)
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if err.is_not_found() => Err(UploadError::ScheduleNotFound {
                schedule,
                sent_before: false,
            }),
            Err(cause) => Err(UploadError::Unreachable { cause }),
        }
    }

    async fn send_chunk(
        &self,
        warehouse: &mut Warehouse,
        key: &ChunkKey,
        chunk: &Chunk,
    ) -> Result<Sent, UploadError> {
        let (first_line, last_line) = (chunk.first_line(), chunk.last_line());
        match warehouse.chunk_state(key)? {
            Some(ChunkState::Created(_)) => return Ok(Sent::Before),
            // Sent by a run that never saw the answer: the service may still be at it.
            Some(ChunkState::Sent { at }) => {
                if let Some(uids) = self.settle(chunk, at).await? {
                    warehouse.chunk_created(key, &uids)?;
                    tracing::info!(first_line, last_line, "chunk found created already");
                    return Ok(Sent::Before);
                }
            }
            // Not in the ledger (another file with the same contacts, a ledger lost with its
            // warehouse): one lookup tells.
            None => match self.look_up(chunk).await? {
                Found::All(uids) => {
                    warehouse.chunk_sent(key, last_line, chunk.calls.len())?;
                    warehouse.chunk_created(key, &uids)?;
                    tracing::info!(first_line, last_line, "chunk found created already");
                    return Ok(Sent::Before);
                }
                Found::Partly(problem) => return Err(self.partly_there(chunk, problem)),
                Found::Nothing => {}
            },
        }
        for tries in 1..=MAX_CHUNK_TRIES {
            let sent_at = warehouse.chunk_sent(key, last_line, chunk.calls.len())?;
            let sent = self
                .client
                .create_calls(
                    self.options.schedule,
                    chunk.calls.clone(),
                    self.options.force,
                    &self.counters,
                )
                .await;
            let err = match sent {
                Ok(uids) => {
                    warehouse.chunk_created(key, &uids)?;
                    return Ok(Sent::Now);
                }
                Err(err) => err,
            };
            // An answer saying no: all or nothing, so nothing was created.
            if err.status().is_some_and(|s| s.is_client_error()) {
                warehouse.chunk_not_created(key)?;
                return self.refused(chunk, err);
            }
            // No answer, or a 5xx: the service may have created the chunk, or may still.
            if !chunk.has_external_ids() {
                return Err(UploadError::Unknowable {
                    first_line,
                    last_line,
                    cause: Box::new(err),
                });
            }
            if let Some(uids) = self.settle(chunk, sent_at).await? {
                warehouse.chunk_created(key, &uids)?;
                return Ok(Sent::Now);
            }
            if tries == MAX_CHUNK_TRIES {
                return Err(UploadError::GaveUp {
                    first_line,
                    last_line,
                    cause: Box::new(err),
                });
            }
            tracing::warn!(
                first_line,
                last_line,
                error = %err,
                "the chunk did not show in the service within the settle window; sending it again"
            );
        }
        unreachable!("the last try returns")
    }

    /// A refusal: of rows (a 400 pointing into the chunk), reported and passed over; of the
    /// request itself (an enabled schedule, a wrong uid, a 400 about no row), the end.
    fn refused(&self, chunk: &Chunk, err: ApiError) -> Result<Sent, UploadError> {
        if err.is_not_found() {
            return Err(UploadError::ScheduleNotFound {
                schedule: self.options.schedule,
                sent_before: false,
            });
        }
        let (problems, about_rows) = refused_rows(&err, chunk, &self.columns);
        if err.status() == Some(reqwest::StatusCode::BAD_REQUEST) && about_rows {
            tracing::warn!(
                first_line = chunk.first_line(),
                last_line = chunk.last_line(),
                problems = problems.len(),
                "the service refused the chunk for its rows; going on with the next"
            );
            return Ok(Sent::Refused(problems));
        }
        Err(UploadError::Refused {
            first_line: chunk.first_line(),
            last_line: chunk.last_line(),
            problems,
            cause: Box::new(err),
        })
    }

    /// The uids of a chunk sent at `sent_at` without an answer: looked for until it shows or
    /// the settle window after `sent_at` has passed (`None`: not created, safe to send).
    async fn settle(
        &self,
        chunk: &Chunk,
        sent_at: Timestamp,
    ) -> Result<Option<Vec<Uuid>>, UploadError> {
        if !chunk.has_external_ids() {
            tracing::warn!(
                first_line = chunk.first_line(),
                "rows without external_id cannot be looked up: sending the chunk again may duplicate it"
            );
            return Ok(None);
        }
        let deadline = sent_at.saturating_add(self.options.settle);
        let mut pause = FIRST_POLL;
        let mut told = false;
        let result = loop {
            let found = self.look_up(chunk).await?;
            let left = deadline.since(Timestamp::now());
            match found {
                Found::All(uids) => break Ok(Some(uids)),
                Found::Nothing if left.is_zero() => break Ok(None),
                Found::Partly(problem) if left.is_zero() => {
                    break Err(self.partly_there(chunk, problem));
                }
                Found::Nothing | Found::Partly(_) => {}
            }
            if !told {
                told = true;
                let what = format!(
                    "the answer for lines {}–{} was lost: looking for its calls for up to {} s before sending it again",
                    chunk.first_line(),
                    chunk.last_line(),
                    left.as_secs().max(1)
                );
                tracing::info!("{what}");
                self.progress.waiting(Some(&what));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(LONGEST_POLL);
        };
        if told {
            self.progress.waiting(None);
        }
        result
    }

    /// Looks the chunk's rows up by external_id (all of them have one).
    async fn look_up(&self, chunk: &Chunk) -> Result<Found, UploadError> {
        let mut uids = Vec::with_capacity(chunk.calls.len());
        for (i, call) in chunk.calls.iter().enumerate() {
            let external_id = call.external_id.as_deref().unwrap_or_default();
            let found = self.find_by_external_id(external_id).await.map_err(|err| {
                if err.is_not_found() {
                    UploadError::ScheduleNotFound {
                        schedule: self.options.schedule,
                        sent_before: false,
                    }
                } else {
                    UploadError::Unconfirmed {
                        first_line: chunk.first_line(),
                        last_line: chunk.last_line(),
                        cause: Box::new(err),
                    }
                }
            })?;
            let line = chunk.lines[i];
            match (i, found.as_slice()) {
                // All or nothing: the first row absent means the chunk is not there (yet).
                (0, []) => return Ok(Found::Nothing),
                (_, [uid]) => uids.push(*uid),
                (_, []) => {
                    return Ok(Found::Partly(format!(
                        "external_id {external_id:?} (line {line}) is not in the schedule, though the chunk's first row (line {}) is",
                        chunk.first_line()
                    )));
                }
                (_, found) => {
                    return Err(self.partly_there(
                        chunk,
                        format!(
                            "external_id {external_id:?} (line {line}) has {} calls in the schedule",
                            found.len()
                        ),
                    ));
                }
            }
        }
        Ok(Found::All(uids))
    }

    async fn find_by_external_id(&self, external_id: &str) -> Result<Vec<Uuid>, ApiError> {
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
        let listed = self
            .client
            .list_calls(self.options.schedule, &query, &self.counters)
            .await?;
        Ok(listed.page.data.iter().map(|c| c.uid).collect())
    }

    fn partly_there(&self, chunk: &Chunk, problem: String) -> UploadError {
        UploadError::PartlyThere {
            first_line: chunk.first_line(),
            last_line: chunk.last_line(),
            problem,
        }
    }
}

/// The service's pointers (`/outbound_calls/<index>/<field>[/<parameter>]`) as CSV lines and
/// columns; problems without a pointer into the chunk name its first line and no column.
/// `true` when any problem points at a row.
fn refused_rows(err: &ApiError, chunk: &Chunk, columns: &Columns) -> (Vec<RowProblem>, bool) {
    let ApiError::Status {
        body: Some(body), ..
    } = err
    else {
        return (Vec::new(), false);
    };
    let mut about_rows = false;
    let problems = body
        .errors
        .iter()
        .map(|item| {
            let reason = match (&item.title, &item.detail) {
                (Some(t), Some(d)) => format!("{t}: {d}"),
                (Some(t), None) | (None, Some(t)) => t.clone(),
                (None, None) => "refused".to_owned(),
            };
            let pointer = item.source.as_ref().and_then(|s| s.pointer.as_deref());
            match pointer.and_then(|p| locate(p, &chunk.lines, columns)) {
                Some((line, column)) => {
                    about_rows = true;
                    RowProblem {
                        line,
                        column,
                        reason,
                    }
                }
                None => RowProblem {
                    line: chunk.first_line(),
                    column: None,
                    reason: match pointer {
                        Some(p) => format!("{reason} (at {p:?})"),
                        None => reason,
                    },
                },
            }
        })
        .collect();
    (problems, about_rows)
}

/// The CSV line and column a bulk entry's JSON pointer (RFC 6901: `~1` is `/`, `~0` is `~`)
/// points at (no column for the entry as a whole); `None` when it points at no entry of the
/// chunk.
fn locate(pointer: &str, lines: &[u64], columns: &Columns) -> Option<(u64, Option<String>)> {
    let mut tokens = pointer
        .strip_prefix("/outbound_calls/")?
        .split('/')
        .map(|token| token.replace("~1", "/").replace("~0", "~"));
    let index: usize = tokens.next()?.parse().ok()?;
    let line = *lines.get(index)?;
    let column = match (tokens.next().as_deref(), tokens.next()) {
        (Some("custom_parameters"), Some(name)) => Some(columns.column_of(&name)),
        (Some(field), _) => Some(columns.column_of(field)),
        (None, _) => None,
    };
    Some((line, column))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(path: &Path, renames: &[(&str, &str)]) -> UploadOptions {
        UploadOptions {
            schedule: Uuid::nil(),
            path: path.to_owned(),
            renames: renames
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect(),
            force: false,
            allow_missing_external_id: false,
            settle: Duration::from_secs(1),
        }
    }

    fn check_text(text: &[u8]) -> Checked {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("contacts.csv");
        std::fs::write(&path, text).unwrap();
        check(&options(&path, &[])).unwrap()
    }

    #[test]
    fn rows_with_too_few_or_too_many_fields_are_each_reported_and_reading_goes_on() {
        let checked = check_text(
            b"phone_number,external_id,plan\n\
              +15550001,a,gold\n\
              +15550002,b\n\
              +15550003,c,gold\n\
              +15550004,d,gold,extra\n\
              555,e,gold\n\
              +15550006,f,\xff\xfe\n",
        );
        let problems: Vec<String> = checked.problems.iter().map(ToString::to_string).collect();
        assert_eq!(checked.rows, 6);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems[0].starts_with("line 3: 2 fields where the header has 3"),
            "{problems:#?}"
        );
        assert!(
            problems[1].starts_with("line 5: 4 fields where the header has 3"),
            "{problems:#?}"
        );
        assert!(
            problems[2].starts_with("line 6, column phone_number: "),
            "{problems:#?}"
        );
        assert_eq!(
            problems[3],
            "line 7, column plan: not UTF-8 text: save the file as UTF-8"
        );
    }

    #[test]
    fn each_chunk_of_rows_has_its_digest() {
        let mut text = String::from("phone_number,external_id\n");
        for n in 0..2_500 {
            text.push_str(&format!("+1555{n:07},ext-{n}\n"));
        }
        let first = check_text(text.as_bytes());
        assert_eq!(first.chunk_digests.len(), 3);
        // One value changed in the second chunk changes its digest alone.
        let changed = check_text(text.replace("ext-1500\n", "ext-X\n").as_bytes());
        assert_eq!(changed.chunk_digests[0], first.chunk_digests[0]);
        assert_ne!(changed.chunk_digests[1], first.chunk_digests[1]);
        assert_eq!(changed.chunk_digests[2], first.chunk_digests[2]);
        assert_ne!(changed.fingerprint, first.fingerprint);
    }

    #[test]
    fn pointers_are_decoded_before_they_name_a_column() {
        let header = csv::StringRecord::from(vec!["Phone", "a/b", "c~d", "external_id"]);
        let columns = Columns::from_header(
            Path::new("x.csv"),
            &header,
            &[("Phone".into(), "phone_number".into())],
        )
        .unwrap();
        let lines = [2, 3, 5];
        let at = |pointer: &str| locate(pointer, &lines, &columns);
        assert_eq!(
            at("/outbound_calls/1/custom_parameters/a~1b"),
            Some((3, Some("a/b".into())))
        );
        assert_eq!(
            at("/outbound_calls/2/custom_parameters/c~0d"),
            Some((5, Some("c~d".into())))
        );
        assert_eq!(
            at("/outbound_calls/0/phone_number"),
            Some((2, Some("Phone".into())))
        );
        // `~01` is `~1`, not `/`: `~1` is decoded first.
        assert_eq!(
            at("/outbound_calls/0/custom_parameters/x~01"),
            Some((2, Some("x~1".into())))
        );
        assert_eq!(at("/outbound_calls/2"), Some((5, None)));
        assert_eq!(at("/outbound_calls/3/phone_number"), None);
        assert_eq!(at(""), None);
    }

    #[test]
    fn a_problem_shows_its_column_name_escaped() {
        let problem = RowProblem {
            line: 2,
            column: Some("phone\r\n\u{1b}[2J".into()),
            reason: "refused".into(),
        };
        assert_eq!(
            problem.to_string(),
            "line 2, column phone\\u{d}\\u{a}\\u{1b}[2J: refused"
        );
    }
}
