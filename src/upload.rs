//! `callsync upload`: a contact list (CSV) to calls, checked whole before anything is sent,
//! sent in chunks of at most [`MAX_BULK`] rows, and resumable without duplicates.
//!
//! Two passes over the file, each streamed, so memory stays flat whatever its size:
//! 1. [`check`]: every row is mapped to a call and validated (as many fields as the header,
//!    phone number, datetime parameters with a zone, required fields, `external_id`s unique
//!    in the file — tracked in a temporary SQLite table, not in memory); the file's bytes and
//!    the mapping are hashed into the upload's fingerprint, and each chunk's rows into a
//!    digest.
//! 2. [`send`]: first the external_ids the schedule already has are found, into a temporary
//!    table: by listing its calls (`updated_after` paging from the beginning, 100 a request),
//!    or, when the rows still to send are fewer than that listing's requests, by asking for
//!    each row's external_id (the list's `external_id` filter, a few at once); nothing is
//!    asked when the ledger has every chunk as created already. A row whose
//!    external_id is there is never sent: outside the chunks the ledger knows, any such row
//!    stops the upload before anything is sent, or with `--skip-existing` is left out of its
//!    chunk and counted. Then chunk by chunk, the chunk's digest is compared with the check's
//!    (a file changed since is never sent), and the warehouse's upload ledger records the
//!    chunk as `sent` before its request goes out and as `created` with the service's uids
//!    after. A chunk the ledger has as `created`, or whose every row the schedule has, is
//!    not sent.
//!
//! A create whose answer is lost (a timeout, a dropped connection, a 5xx) may still be done by
//! the service, later: such a chunk is never sent again until a lookup has failed to find it
//! for the whole settle window after it was sent (`api.create_settle_secs`), in this run or,
//! from the ledger's `sent_at`, in the next one. A lookup costs a few requests whatever the
//! chunk's size: none of the rows sent was in the schedule before and the bulk endpoint is
//! all or nothing, so the first row's external_id tells whether the chunk was created; the
//! uids of a created chunk come from the listing of what changed since that call was created
//! (its pages fetched at once), any row missing from it asked for alone.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::api::{ApiClient, ApiError, Counters, ListQuery};
use crate::service::{
    CallPage, ListFilter, MAX_BULK, MAX_PAGE_SIZE, NewCall, OutboundCall, Timestamp,
    new_call_problems,
};
use crate::sync::cursor::{PageWalker, RowKey, WalkError, WalkLimits};
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
    /// Listing the schedule's calls, the first thing an upload does, failed (the CLI names
    /// the upload).
    #[error("nothing was sent: {cause}")]
    Unreachable { cause: ApiError },
    #[error(
        "nothing was sent: the service's list of the schedule's calls cannot be trusted ({request}): {source}"
    )]
    Untrusted {
        request: String,
        #[source]
        source: WalkError,
    },
    #[error(
        "{count} rows have an external_id schedule {schedule} already has (the first {} above); nothing was sent: remove those rows, or pass --skip-existing to send only the others",
        .problems.len()
    )]
    AlreadyInSchedule {
        schedule: Uuid,
        /// At most [`MAX_LISTED_PROBLEMS`]; `count` has them all.
        problems: Vec<RowProblem>,
        count: u64,
    },
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
        "another callsync process is uploading into schedule {schedule} (one upload into a schedule at a time, whatever the file: each looks for the contacts already there before sending, so two at once could both send one contact); wait for it to end, then run this upload: it skips what is there already"
    )]
    Busy { schedule: Uuid },
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
    /// Send only the rows whose external_id the schedule does not have yet, counting the
    /// others as skipped (without it, any such row stops the upload before anything is sent).
    pub skip_existing: bool,
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
    /// Each chunk's first CSV line, in file order (its key in the ledger).
    chunk_first_lines: Vec<u64>,
}

impl Checked {
    /// Each chunk's key in the ledger, with its number of rows.
    fn chunks(&self, schedule: Uuid) -> impl Iterator<Item = (ChunkKey, u64)> + '_ {
        let bulk = MAX_BULK as u64;
        self.chunk_first_lines
            .iter()
            .enumerate()
            .map(move |(i, &first_line)| {
                let key = ChunkKey {
                    schedule,
                    fingerprint: self.fingerprint.clone(),
                    first_line,
                };
                (key, (self.rows - i as u64 * bulk).min(bulk))
            })
    }
}

/// What [`send`] did with every row: `rows` = `calls_created` + `rows_found` +
/// `rows_skipped` + `rows_refused`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadSummary {
    pub rows: u64,
    /// Calls this run created, and the chunks sent that created them.
    pub calls_created: u64,
    pub chunks_created: u64,
    /// Rows of the chunks the ledger or the service showed created already (by an earlier
    /// run, or another file with the same rows), and those chunks.
    pub rows_found: u64,
    pub chunks_found: u64,
    /// Rows not sent because their external_id is in the schedule already
    /// (`--skip-existing`).
    pub rows_skipped: u64,
    /// Rows of the chunks the service refused (all or nothing: a chunk with one bad row is
    /// refused whole), and those chunks; the other chunks were sent.
    pub rows_refused: u64,
    pub chunks_refused: u64,
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
        if let Some(problem) = unnamed_column(&headers) {
            return Err(bad(problem));
        }
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

/// A column whose header is empty: its values would go nowhere (a parameter needs a name), so
/// the file is refused rather than a column dropped unseen. Named by its position and its
/// neighbours, as a spreadsheet shows it.
fn unnamed_column(headers: &[String]) -> Option<String> {
    let i = headers.iter().position(String::is_empty)?;
    let letter = spreadsheet_column(i);
    let before = i
        .checked_sub(1)
        .map(|b| format!(" after {:?}", headers[b]))
        .unwrap_or_default();
    Some(format!(
        "line 1: column {} ({letter}){before} has an empty header: name it (any name but a call field's is a custom parameter), or delete the column",
        i + 1
    ))
}

/// `A`, `B`, … `Z`, `AA`, … for the zero-based column `i`.
fn spreadsheet_column(mut i: usize) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(b'A' + (i % 26) as u8);
        if i < 26 {
            break;
        }
        i = i / 26 - 1;
    }
    letters.reverse();
    String::from_utf8(letters).unwrap_or_default()
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
        chunk_first_lines: Vec::new(),
    };
    let columns = rows.columns.clone();
    let mut in_chunk = 0;
    while let Some(row) = rows.next()? {
        checked.rows += 1;
        if in_chunk == 0 {
            checked.chunk_first_lines.push(row.line());
        }
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

    /// The rows whose index passes `keep` (the same digest: it is the file's chunk's).
    fn only(&self, keep: impl Fn(usize) -> bool) -> Chunk {
        let (lines, calls) = self
            .lines
            .iter()
            .zip(&self.calls)
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, (line, call))| (*line, call.clone()))
            .unzip();
        Chunk {
            lines,
            calls,
            digest: self.digest,
        }
    }
}

/// One upload into a schedule at a time, whatever the file: an exclusive lock on a byte of
/// the warehouse file chosen by the schedule, held from before the upload looks for the
/// external_ids already in the schedule until it ends (see `warehouse::file_lock`: no lock
/// file, released when the process dies). Two files sent into one schedule at once would
/// each look before the other sent, and could both send one contact.
///
/// A second upload fails at once rather than waiting: the first may take hours (a big file,
/// a settle window), a cron job or a terminal is better told than left hanging, and the
/// second run, started again later, looks at the schedule as the first left it. The sync's
/// lock of the schedule (`sync::lock`) is another byte: a pass and an upload go on together.
#[derive(Debug)]
pub struct UploadLock {
    _lock: FileLock,
}

impl UploadLock {
    /// Takes the lock of uploading into `schedule`, without waiting.
    pub fn acquire(warehouse: &Path, schedule: Uuid) -> Result<UploadLock, UploadError> {
        let digest = Sha256::digest(schedule.as_bytes());
        let mut first = [0; 8];
        first.copy_from_slice(&digest[..8]);
        let byte = LockByte::Upload(u64::from_le_bytes(first));
        match FileLock::try_lock(warehouse, byte, LockMode::Exclusive) {
            Ok(lock) => Ok(UploadLock { _lock: lock }),
            Err(LockError::Busy) => Err(UploadError::Busy { schedule }),
            Err(LockError::Io(source)) => Err(UploadError::Lock {
                path: warehouse.to_owned(),
                source,
            }),
        }
    }
}

/// Sends a checked file, chunk by chunk, skipping what an earlier run created. First the
/// external_ids the schedule has are found ([`Sender::calls_in_schedule`]): a row whose
/// external_id the schedule already has is never sent — with any such row outside the chunks the ledger knows, nothing
/// is sent ([`UploadError::AlreadyInSchedule`]) unless `skip_existing`, which sends the
/// others. A chunk the service refuses for its rows (a 400 pointing at them) is counted and
/// reported in the summary, and the next chunks are sent; any other failure stops the upload.
pub async fn send(
    client: &ApiClient,
    warehouse: &mut Warehouse,
    options: &UploadOptions,
    checked: &Checked,
    progress: &dyn UploadProgress,
) -> Result<UploadSummary, UploadError> {
    let sender = Sender {
        client,
        options,
        columns: Rows::open(options)?.columns,
        counters: Counters::for_lane(options.schedule),
        progress,
    };
    let known = sender.calls_in_schedule(warehouse, checked).await?;
    if !options.skip_existing && known.calls > 0 {
        refuse_rows_already_there(warehouse, options, checked, &known)?;
    }
    let mut rows = Rows::open(options)?;
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
        let sent = sender.send_chunk(warehouse, &key, &chunk, &known).await;
        match sent {
            Ok(outcome) => summary.add(outcome),
            Err(UploadError::ScheduleNotFound { schedule, .. }) => {
                return Err(UploadError::ScheduleNotFound {
                    schedule,
                    sent_before: summary.chunks_created + summary.chunks_found > 0,
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

/// Refuses the upload, before anything is sent, when a row outside the chunks the ledger
/// knows has an external_id the schedule already has (a chunk whose every row is there, once
/// each, is not refused: it is found created, by another file or a lost ledger).
fn refuse_rows_already_there(
    warehouse: &Warehouse,
    options: &UploadOptions,
    checked: &Checked,
    known: &InSchedule,
) -> Result<(), UploadError> {
    let mut chunks = ChunksAsChecked::open(options, checked)?;
    let column = chunks.rows.columns.column_of("external_id");
    let mut problems = Vec::new();
    let mut count = 0;
    while let Some((key, chunk)) = chunks.next()? {
        if warehouse.chunk_state(&key)?.is_some() {
            continue;
        }
        let present = known.of_chunk(&chunk)?;
        if whole_chunk(&present).is_some() {
            continue;
        }
        for (i, uids) in present.iter().enumerate() {
            let Some(uid) = uids.first() else { continue };
            count += 1;
            if problems.len() < MAX_LISTED_PROBLEMS {
                let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
                let others = match uids.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                };
                problems.push(RowProblem {
                    line: chunk.lines[i],
                    column: Some(column.clone()),
                    reason: format!(
                        "{id:?} is already in the schedule (call {uid}{others}): sending it would call this contact twice"
                    ),
                });
            }
        }
    }
    if count > 0 {
        return Err(UploadError::AlreadyInSchedule {
            schedule: options.schedule,
            problems,
            count,
        });
    }
    Ok(())
}

/// The uids of a chunk whose every row is in the schedule, once: `None` otherwise.
fn whole_chunk(present: &[Vec<Uuid>]) -> Option<Vec<Uuid>> {
    present
        .iter()
        .map(|uids| match uids.as_slice() {
            [uid] => Some(*uid),
            _ => None,
        })
        .collect()
}

/// Requests of the walk of a schedule per [`MAX_PAGE_SIZE`] calls, as measured against the
/// simulator: a bulk create stamps its up to 1,000 calls with one `updated_at`, and the walker
/// reads such a tie group twice (upwards, then downwards, which is what keeps a call that
/// changes meanwhile from hiding an unchanged one); a schedule filled by uploads costs 2.04
/// requests per 100 calls (51 for 2,500), one whose calls were dialled about 1.
const WALK_REQUESTS_PER_PAGE: u64 = 2;

/// Whether asking for each of `rows` external_ids (one request each) is cheaper than walking
/// the schedule's `calls` calls, whose first page is read already.
fn ask_each_row(rows: u64, calls: u64) -> bool {
    let walk = calls.div_ceil(u64::from(MAX_PAGE_SIZE)) * WALK_REQUESTS_PER_PAGE;
    rows < walk.saturating_sub(1)
}

/// The file's chunks with their ledger keys, each checked against the digest [`check`] took:
/// a file changed since is never sent.
struct ChunksAsChecked<'a> {
    rows: Rows,
    options: &'a UploadOptions,
    checked: &'a Checked,
    index: usize,
}

impl<'a> ChunksAsChecked<'a> {
    fn open(options: &'a UploadOptions, checked: &'a Checked) -> Result<Self, UploadError> {
        Ok(ChunksAsChecked {
            rows: Rows::open(options)?,
            options,
            checked,
            index: 0,
        })
    }

    fn next(&mut self) -> Result<Option<(ChunkKey, Chunk)>, UploadError> {
        let Some(chunk) = self.rows.next_chunk()? else {
            return Ok(None);
        };
        if self.checked.chunk_digests.get(self.index) != Some(&chunk.digest) {
            return Err(UploadError::FileChanged {
                path: self.options.path.clone(),
                first_line: chunk.first_line(),
            });
        }
        self.index += 1;
        let key = ChunkKey {
            schedule: self.options.schedule,
            fingerprint: self.checked.fingerprint.clone(),
            first_line: chunk.first_line(),
        };
        Ok(Some((key, chunk)))
    }
}

/// The schedule's calls by external_id, as listed when the upload starts: on disk (SQLite's
/// temporary database), not in memory, however many calls the schedule has.
struct InSchedule {
    scratch: rusqlite::Connection,
    /// Calls listed, with an external_id or not.
    calls: u64,
}

impl InSchedule {
    fn new() -> Result<Self, rusqlite::Error> {
        let scratch = rusqlite::Connection::open("")?;
        // One transaction for the scratch table's life: nothing of it needs to be durable.
        scratch.execute_batch(
            "CREATE TABLE calls (external_id TEXT NOT NULL, uid BLOB NOT NULL,
                                 PRIMARY KEY (external_id, uid)) WITHOUT ROWID;
             BEGIN",
        )?;
        Ok(InSchedule { scratch, calls: 0 })
    }

    fn add(&mut self, call: &OutboundCall) -> Result<(), rusqlite::Error> {
        if let Some(id) = &call.external_id {
            self.scratch
                .prepare_cached("INSERT OR IGNORE INTO calls VALUES (?1, ?2)")?
                .execute(rusqlite::params![id, call.uid.as_bytes().as_slice()])?;
        }
        Ok(())
    }

    /// The calls with this external_id.
    fn uids(&self, external_id: &str) -> Result<Vec<Uuid>, rusqlite::Error> {
        let mut statement = self
            .scratch
            .prepare_cached("SELECT uid FROM calls WHERE external_id = ?1")?;
        let uids = statement.query_map([external_id], |r| r.get::<_, Vec<u8>>(0))?;
        let mut out = Vec::new();
        for uid in uids {
            out.extend(Uuid::from_slice(&uid?).ok());
        }
        Ok(out)
    }

    /// For each row of the chunk, the calls the schedule has with its external_id (none for
    /// a row without one).
    fn of_chunk(&self, chunk: &Chunk) -> Result<Vec<Vec<Uuid>>, rusqlite::Error> {
        chunk
            .calls
            .iter()
            .map(|call| match &call.external_id {
                Some(id) if self.calls > 0 => self.uids(id),
                _ => Ok(Vec::new()),
            })
            .collect()
    }
}

/// What became of one chunk of the file.
#[derive(Debug, Default)]
struct ChunkOutcome {
    /// Rows this run created (in one chunk sent).
    created: u64,
    /// Rows found created already (by an earlier run, or another file with the same rows).
    found: u64,
    /// Rows passed over because their external_id is in the schedule (`--skip-existing`).
    skipped: u64,
    /// Rows of a chunk the service refused, and its reasons.
    refused: u64,
    problems: Vec<RowProblem>,
}

impl UploadSummary {
    fn add(&mut self, outcome: ChunkOutcome) {
        self.calls_created += outcome.created;
        self.chunks_created += u64::from(outcome.created > 0);
        self.rows_found += outcome.found;
        self.chunks_found += u64::from(outcome.found > 0);
        self.rows_skipped += outcome.skipped;
        self.rows_refused += outcome.refused;
        self.chunks_refused += u64::from(outcome.refused > 0);
        let room = MAX_LISTED_PROBLEMS.saturating_sub(self.refusals.len());
        self.refusals
            .extend(outcome.problems.into_iter().take(room));
    }
}

/// What a lookup by external_id found of a chunk.
enum Found {
    Nothing,
    /// Every row, with its call's uid, in row order.
    All(Vec<Uuid>),
    /// The first rows but not all (a service still creating them, or rows made elsewhere).
    Partly(String),
}

/// Lookups of one chunk in flight at once; the client's limiter paces them.
const LOOKUP_CONCURRENCY: usize = 8;

/// What sending a chunk needs, for the whole upload.
struct Sender<'a> {
    client: &'a ApiClient,
    options: &'a UploadOptions,
    columns: Columns,
    counters: Counters,
    progress: &'a dyn UploadProgress,
}

impl Sender<'_> {
    /// The calls of the schedule whose external_id a row still to send may have, for
    /// [`InSchedule`]. Nothing is asked when the ledger has every chunk of the file as created
    /// (a re-run of a finished upload). Otherwise the first page of the schedule's calls tells
    /// how many it has, and the cheaper of two ways, by those counts, finds them:
    /// - the walk of every call (`updated_after` paging from the beginning, as the sync reads,
    ///   so a call changing meanwhile is read, not skipped), [`MAX_PAGE_SIZE`] a request;
    /// - one request per row still to send, with the list's `external_id` filter,
    ///   [`LOOKUP_CONCURRENCY`] at once under the limiter ([`ask_each_row`]).
    ///
    /// A 404 is a wrong uid, said plainly; nothing has been sent yet.
    async fn calls_in_schedule(
        &self,
        warehouse: &Warehouse,
        checked: &Checked,
    ) -> Result<InSchedule, UploadError> {
        let mut known = InSchedule::new()?;
        let mut rows_to_check = 0;
        for (key, rows) in checked.chunks(self.options.schedule) {
            if !matches!(warehouse.chunk_state(&key)?, Some(ChunkState::Created(_))) {
                rows_to_check += rows;
            }
        }
        if rows_to_check == 0 {
            tracing::info!(
                "the ledger has every chunk of the file as created: the schedule is not listed"
            );
            return Ok(known);
        }
        let schedule = self.options.schedule;
        let mut walker = PageWalker::new(Timestamp::EPOCH, MAX_PAGE_SIZE, WalkLimits::default());
        let filter = ListFilter::default();
        let mut told = false;
        while let Some(request) = walker.next_request() {
            let query = ListQuery {
                updated_after: Some(request.updated_after),
                page: request.page,
                page_size: request.page_size,
                filter: &filter,
            };
            let page = self.list_before_sending(&query).await?;
            let keys: Vec<RowKey> = page
                .data
                .iter()
                .map(|c| RowKey {
                    uid: c.uid,
                    updated_at: c.updated_at,
                })
                .collect();
            walker
                .accept(&keys)
                .map_err(|source| UploadError::Untrusted {
                    request: ApiClient::describe_list(schedule, &query),
                    source,
                })?;
            for call in &page.data {
                known.add(call)?;
            }
            let first_page = known.calls == 0;
            known.calls += keys.len() as u64;
            if first_page
                && let Some(total) = page.pagination.as_ref().map(|p| p.total_count)
                && ask_each_row(rows_to_check, total)
            {
                known.calls = known.calls.max(total);
                self.ask_for_each_row(warehouse, checked, rows_to_check, &mut known)
                    .await?;
                told = true;
                break;
            }
            if known.calls > 0 {
                told = true;
                self.progress.waiting(Some(&format!(
                    "listing the schedule's calls for external_ids already there: {} read",
                    known.calls
                )));
            }
        }
        if told {
            self.progress.waiting(None);
        }
        tracing::info!(
            calls = known.calls,
            "the schedule's calls looked at: a row whose external_id is among them is not sent"
        );
        Ok(known)
    }

    /// Asks the schedule for the external_id of every row of the chunks the ledger does not
    /// have as created, into `known`.
    async fn ask_for_each_row(
        &self,
        warehouse: &Warehouse,
        checked: &Checked,
        rows_to_check: u64,
        known: &mut InSchedule,
    ) -> Result<(), UploadError> {
        let mut chunks = ChunksAsChecked::open(self.options, checked)?;
        let mut asked = 0;
        while let Some((key, chunk)) = chunks.next()? {
            if matches!(warehouse.chunk_state(&key)?, Some(ChunkState::Created(_))) {
                continue;
            }
            let ids = chunk.calls.iter().filter_map(|c| c.external_id.as_deref());
            let mut answers = futures::stream::iter(ids)
                .map(|id| self.calls_with_external_id(id))
                .buffer_unordered(LOOKUP_CONCURRENCY);
            while let Some(calls) = answers.next().await {
                for call in calls? {
                    known.add(&call)?;
                }
            }
            asked += chunk.calls.len() as u64;
            self.progress.waiting(Some(&format!(
                "looking up the rows' external_ids in the schedule ({} calls): {asked} of {rows_to_check} rows",
                known.calls
            )));
        }
        Ok(())
    }

    /// The schedule's calls with this external_id, before anything is sent.
    async fn calls_with_external_id(
        &self,
        external_id: &str,
    ) -> Result<Vec<OutboundCall>, UploadError> {
        let filter = ListFilter {
            external_id: Some(external_id.to_owned()),
            ..ListFilter::default()
        };
        let query = ListQuery {
            updated_after: None,
            page: 1,
            page_size: MAX_PAGE_SIZE,
            filter: &filter,
        };
        self.list_before_sending(&query).await.map(|page| page.data)
    }

    /// A page of the schedule's calls, asked for before anything is sent.
    async fn list_before_sending(&self, query: &ListQuery<'_>) -> Result<CallPage, UploadError> {
        let schedule = self.options.schedule;
        self.client
            .list_calls(schedule, query, &self.counters)
            .await
            .map(|listed| listed.page)
            .map_err(|err| {
                if err.is_not_found() {
                    UploadError::ScheduleNotFound {
                        schedule,
                        sent_before: false,
                    }
                } else {
                    UploadError::Unreachable { cause: err }
                }
            })
    }

    async fn send_chunk(
        &self,
        warehouse: &mut Warehouse,
        key: &ChunkKey,
        chunk: &Chunk,
        known: &InSchedule,
    ) -> Result<ChunkOutcome, UploadError> {
        let n = chunk.calls.len() as u64;
        let present = known.of_chunk(chunk)?;
        // The rows whose external_id the schedule did not have when the upload started: the
        // only rows ever sent, so finding one of them later proves the chunk was created.
        let new = chunk.only(|i| present[i].is_empty());
        let skipped = n - new.calls.len() as u64;
        let found = |rows: u64| ChunkOutcome {
            found: rows,
            skipped: n - rows,
            ..ChunkOutcome::default()
        };
        match warehouse.chunk_state(key)? {
            Some(ChunkState::Created(uids)) => return Ok(found((uids.len() as u64).min(n))),
            // Sent by a run that never saw the answer: the service may still be at it.
            Some(ChunkState::Sent { at }) => {
                if let Some(uids) = whole_chunk(&present) {
                    warehouse.chunk_created(key, &uids)?;
                    self.found_already(chunk);
                    return Ok(found(n));
                }
                if new.calls.is_empty() {
                    return Err(self.partly_there(
                        chunk,
                        "every row's external_id is in the schedule, some more than once".into(),
                    ));
                }
                if let Some(uids) = self.settle(&new, at).await? {
                    warehouse.chunk_created(key, &uids)?;
                    self.found_already(chunk);
                    return Ok(found(uids.len() as u64));
                }
            }
            // Not in the ledger: its rows are found in the schedule by another file with the
            // same contacts, or a ledger lost with its warehouse.
            None => {
                if let Some(uids) = whole_chunk(&present) {
                    warehouse.chunk_sent(key, chunk.last_line(), chunk.calls.len())?;
                    warehouse.chunk_created(key, &uids)?;
                    self.found_already(chunk);
                    return Ok(found(n));
                }
            }
        }
        if new.calls.is_empty() {
            return Ok(ChunkOutcome {
                skipped,
                ..ChunkOutcome::default()
            });
        }
        if skipped > 0 {
            tracing::info!(
                first_line = chunk.first_line(),
                last_line = chunk.last_line(),
                skipped,
                "rows whose external_id is in the schedule already are not sent"
            );
        }
        let outcome = self.create(warehouse, key, chunk.last_line(), &new).await?;
        Ok(ChunkOutcome { skipped, ..outcome })
    }

    fn found_already(&self, chunk: &Chunk) {
        tracing::info!(
            first_line = chunk.first_line(),
            last_line = chunk.last_line(),
            "chunk found created already"
        );
    }

    /// Sends the chunk's `new` rows (the ledger's `last_line` is the file chunk's) until the
    /// service answers, or a lost answer is settled.
    async fn create(
        &self,
        warehouse: &mut Warehouse,
        key: &ChunkKey,
        last_line: u64,
        new: &Chunk,
    ) -> Result<ChunkOutcome, UploadError> {
        let (first_line, last_sent) = (new.first_line(), new.last_line());
        let created = |uids: &[Uuid]| ChunkOutcome {
            created: uids.len() as u64,
            ..ChunkOutcome::default()
        };
        for tries in 1..=MAX_CHUNK_TRIES {
            let sent_at = warehouse.chunk_sent(key, last_line, new.calls.len())?;
            let sent = self
                .client
                .create_calls(
                    self.options.schedule,
                    new.calls.clone(),
                    self.options.force,
                    &self.counters,
                )
                .await;
            let err = match sent {
                Ok(uids) => {
                    warehouse.chunk_created(key, &uids)?;
                    return Ok(created(&uids));
                }
                Err(err) => err,
            };
            // An answer saying no: all or nothing, so nothing was created.
            if err.status().is_some_and(|s| s.is_client_error()) {
                warehouse.chunk_not_created(key)?;
                let problems = self.refused(new, err)?;
                return Ok(ChunkOutcome {
                    refused: new.calls.len() as u64,
                    problems,
                    ..ChunkOutcome::default()
                });
            }
            // No answer, or a 5xx: the service may have created the chunk, or may still.
            if !new.has_external_ids() {
                return Err(UploadError::Unknowable {
                    first_line,
                    last_line: last_sent,
                    cause: Box::new(err),
                });
            }
            if let Some(uids) = self.settle(new, sent_at).await? {
                warehouse.chunk_created(key, &uids)?;
                return Ok(created(&uids));
            }
            if tries == MAX_CHUNK_TRIES {
                return Err(UploadError::GaveUp {
                    first_line,
                    last_line: last_sent,
                    cause: Box::new(err),
                });
            }
            tracing::warn!(
                first_line,
                last_line = last_sent,
                error = %err,
                "the chunk did not show in the service within the settle window; sending it again"
            );
        }
        unreachable!("the last try returns")
    }

    /// A refusal: of rows (a 400 pointing into the chunk), reported and passed over; of the
    /// request itself (an enabled schedule, a wrong uid, a 400 about no row), the end.
    fn refused(&self, chunk: &Chunk, err: ApiError) -> Result<Vec<RowProblem>, UploadError> {
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
            return Ok(problems);
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
                    "confirming lines {}–{} ({} calls sent, answer lost): looking them up by external_id until {} before sending them again",
                    chunk.first_line(),
                    chunk.last_line(),
                    chunk.calls.len(),
                    deadline.truncated(1_000_000_000).to_rfc3339()
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

    /// Whether the service created the chunk, and its calls' uids: a few requests whatever
    /// its size. None of the chunk's external_ids was in the schedule before it was sent and
    /// the bulk endpoint is all or nothing, so its first row tells (one request); the calls
    /// of a created chunk were stamped when it was created, so the listing of what changed
    /// since then holds them (its first [`MAX_PAGE_SIZE`]-call pages, fetched at once). A row
    /// not in those pages (a busy schedule, a service that stamps otherwise) is asked for
    /// alone.
    async fn look_up(&self, chunk: &Chunk) -> Result<Found, UploadError> {
        let first = chunk.calls[0].external_id.as_deref().unwrap_or_default();
        let probe = self.with_external_id(chunk, first).await?;
        let created_at = match probe.as_slice() {
            [] => return Ok(Found::Nothing),
            [call] => call.created_at,
            many => {
                return Err(self.partly_there(
                    chunk,
                    format!(
                        "external_id {first:?} (line {}) has {} calls in the schedule",
                        chunk.first_line(),
                        many.len()
                    ),
                ));
            }
        };
        let mut found = vec![Vec::new(); chunk.calls.len()];
        let rows: std::collections::HashMap<&str, usize> = chunk
            .calls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.external_id.as_deref().map(|id| (id, i)))
            .collect();
        let mut note = |calls: &[OutboundCall]| {
            for call in calls {
                let row = call.external_id.as_deref().and_then(|id| rows.get(id));
                if let Some(&i) = row
                    && !found[i].contains(&call.uid)
                {
                    found[i].push(call.uid);
                }
            }
        };
        let page_one = self.changed_since(chunk, created_at, 1).await?;
        note(&page_one.data);
        let wanted = (chunk.calls.len() as u64).div_ceil(u64::from(MAX_PAGE_SIZE)) + 1;
        let pages = page_one
            .pagination
            .as_ref()
            .map_or(wanted, |p| p.total_pages.min(wanted));
        let mut more = futures::stream::iter(2..=pages)
            .map(|page| self.changed_since(chunk, created_at, page as u32))
            .buffer_unordered(LOOKUP_CONCURRENCY);
        while let Some(page) = more.next().await {
            note(&page?.data);
        }
        drop(more);
        let missing: Vec<usize> = (0..found.len()).filter(|&i| found[i].is_empty()).collect();
        if !missing.is_empty() {
            tracing::debug!(
                missing = missing.len(),
                "rows not listed among the calls changed since the chunk was created: asked for one by one"
            );
        }
        let mut alone = futures::stream::iter(missing)
            .map(|i| async move {
                let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
                (i, self.with_external_id(chunk, id).await)
            })
            .buffer_unordered(LOOKUP_CONCURRENCY);
        while let Some((i, calls)) = alone.next().await {
            found[i] = calls?.iter().map(|c| c.uid).collect();
        }
        drop(alone);
        let mut uids = Vec::with_capacity(found.len());
        for (i, calls) in found.iter().enumerate() {
            let id = chunk.calls[i].external_id.as_deref().unwrap_or_default();
            let line = chunk.lines[i];
            match calls.as_slice() {
                [uid] => uids.push(*uid),
                [] => {
                    return Ok(Found::Partly(format!(
                        "external_id {id:?} (line {line}) is not in the schedule, though the chunk's first row (line {}) is",
                        chunk.first_line()
                    )));
                }
                many => {
                    return Err(self.partly_there(
                        chunk,
                        format!(
                            "external_id {id:?} (line {line}) has {} calls in the schedule",
                            many.len()
                        ),
                    ));
                }
            }
        }
        Ok(Found::All(uids))
    }

    /// The schedule's calls with this external_id (at most two: one more than expected).
    async fn with_external_id(
        &self,
        chunk: &Chunk,
        external_id: &str,
    ) -> Result<Vec<OutboundCall>, UploadError> {
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
        self.list(chunk, &query).await.map(|page| page.data)
    }

    /// A page of the schedule's calls changed at or after `since`.
    async fn changed_since(
        &self,
        chunk: &Chunk,
        since: Timestamp,
        page: u32,
    ) -> Result<CallPage, UploadError> {
        let filter = ListFilter::default();
        let query = ListQuery {
            updated_after: Some(since),
            page,
            page_size: MAX_PAGE_SIZE,
            filter: &filter,
        };
        self.list(chunk, &query).await
    }

    async fn list(&self, chunk: &Chunk, query: &ListQuery<'_>) -> Result<CallPage, UploadError> {
        self.client
            .list_calls(self.options.schedule, query, &self.counters)
            .await
            .map(|listed| listed.page)
            .map_err(|err| {
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
            })
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
            skip_existing: false,
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
    fn a_column_with_an_empty_header_is_refused_by_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("contacts.csv");
        for (header, expected) in [
            (
                "phone_number,,external_id",
                "line 1: column 2 (B) after \"phone_number\" has an empty header",
            ),
            (
                " ,phone_number,external_id",
                "line 1: column 1 (A) has an empty header",
            ),
            (
                "phone_number,external_id,",
                "line 1: column 3 (C) after \"external_id\" has an empty header",
            ),
        ] {
            std::fs::write(&path, format!("{header}\n+15550001000,,a\n")).unwrap();
            let err = check(&options(&path, &[])).unwrap_err().to_string();
            assert!(err.contains(expected), "{header:?}: {err}");
        }
        assert_eq!(spreadsheet_column(25), "Z");
        assert_eq!(spreadsheet_column(26), "AA");
        assert_eq!(spreadsheet_column(27 * 26 - 1), "ZZ");
        assert_eq!(spreadsheet_column(27 * 26), "AAA");
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
    fn each_row_is_asked_for_only_when_that_takes_fewer_requests_than_the_walk() {
        // The walk: 2 requests per 100 calls, its first page already read.
        assert!(!ask_each_row(1, 0));
        assert!(!ask_each_row(1, 100));
        assert!(ask_each_row(1, 101));
        assert!(ask_each_row(48, 2_500));
        assert!(!ask_each_row(49, 2_500));
        assert!(ask_each_row(1_000, 100_000));
        assert!(!ask_each_row(100_000, 100_000));
    }

    #[test]
    fn one_upload_into_a_schedule_at_a_time_whatever_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        std::fs::write(&db, b"").unwrap();
        let (one, two) = (Uuid::from_u128(7), Uuid::from_u128(8));
        let held = UploadLock::acquire(&db, one).unwrap();
        let err = UploadLock::acquire(&db, one).unwrap_err();
        assert!(
            matches!(err, UploadError::Busy { schedule } if schedule == one),
            "{err}"
        );
        assert!(
            err.to_string().starts_with(&format!(
                "another callsync process is uploading into schedule {one} (one upload into a schedule at a time, whatever the file"
            )),
            "{err}"
        );
        // Another schedule is another lock; the sync's lock of the same schedule too.
        let _other = UploadLock::acquire(&db, two).unwrap();
        let _sync = crate::sync::ScheduleLock::acquire(&db, one).unwrap();
        drop(held);
        UploadLock::acquire(&db, one).unwrap();
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
