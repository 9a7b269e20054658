//! What the command line got wrong, found while or after parsing it (exit code 2).

use crate::service::Timestamp;

/// A usage problem found after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct UsageError(pub(super) String);

/// `--starts-at` and the like: clap's value parser for an RFC 3339 instant.
pub(super) fn parse_timestamp(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse(text).map_err(|e| e.to_string())
}
