//! The file read row by row into calls and chunks, each chunk's rows hashed into its digest
//! and the whole file into the upload's fingerprint.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::columns::Columns;
use super::error::UploadError;
use super::job::UploadOptions;
use crate::service::{MAX_BULK, NewCall};

/// A reader that hashes what passes through it.
pub(super) struct Hashing<R> {
    pub(super) inner: R,
    pub(super) hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// One row of the file.
pub(super) enum Row {
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
    pub(super) fn line(&self) -> u64 {
        match self {
            Row::Call { line, .. } | Row::Ragged { line, .. } | Row::NotText { line, .. } => *line,
        }
    }
}

/// The file's rows with their CSV lines, hashing the bytes as they are read (the upload's
/// fingerprint) and the rows of the current chunk (its digest).
pub(super) struct Rows {
    pub(super) path: PathBuf,
    pub(super) reader: csv::Reader<Hashing<File>>,
    pub(super) columns: Columns,
    pub(super) record: csv::ByteRecord,
    pub(super) chunk: Sha256,
}

impl Rows {
    pub(super) fn open(options: &UploadOptions) -> Result<Self, UploadError> {
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

    pub(super) fn next(&mut self) -> Result<Option<Row>, UploadError> {
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
    pub(super) fn chunk_digest(&mut self) -> [u8; 32] {
        std::mem::take(&mut self.chunk).finalize().into()
    }

    /// The next chunk of at most [`MAX_BULK`] rows; a row that is not a call means the file
    /// is no longer the one checked.
    pub(super) fn next_chunk(&mut self) -> Result<Option<Chunk>, UploadError> {
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
    pub(super) fn fingerprint(mut self, options: &UploadOptions) -> String {
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
pub(super) fn digest_record(digest: &mut Sha256, line: u64, record: &csv::ByteRecord) {
    digest.update(line.to_le_bytes());
    digest.update((record.len() as u64).to_le_bytes());
    for field in record {
        digest.update((field.len() as u64).to_le_bytes());
        digest.update(field);
    }
}

pub(super) fn csv_error(path: &Path, err: &csv::Error) -> UploadError {
    let problem = match err.position() {
        Some(p) => format!("line {}: {err}", p.line()),
        None => err.to_string(),
    };
    UploadError::Csv {
        path: path.to_owned(),
        problem,
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A chunk of rows: their CSV lines and calls, and the digest of their fields.
pub(super) struct Chunk {
    pub(super) lines: Vec<u64>,
    pub(super) calls: Vec<NewCall>,
    pub(super) digest: [u8; 32],
}

impl Chunk {
    pub(super) fn first_line(&self) -> u64 {
        self.lines.first().copied().unwrap_or(0)
    }

    pub(super) fn last_line(&self) -> u64 {
        self.lines.last().copied().unwrap_or(0)
    }

    pub(super) fn has_external_ids(&self) -> bool {
        self.calls.iter().all(|c| c.external_id.is_some())
    }

    /// The rows whose index passes `keep` (the same digest: it is the file's chunk's).
    pub(super) fn only(&self, keep: impl Fn(usize) -> bool) -> Chunk {
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
