//! What sending and looking up need for the whole upload: its methods are the steps of
//! `send.rs`, the search of `existing.rs` and the lookups of `lookup.rs`.

use super::columns::Columns;
use super::job::UploadOptions;
use super::job::UploadProgress;
use crate::api::{ApiClient, Counters};

/// Lookups of one chunk in flight at once; the client's limiter paces them.
pub(super) const LOOKUP_CONCURRENCY: usize = 8;

/// What sending a chunk needs, for the whole upload.
pub(super) struct Sender<'a> {
    pub(super) client: &'a ApiClient,
    pub(super) options: &'a UploadOptions,
    pub(super) columns: Columns,
    pub(super) counters: Counters,
    pub(super) progress: &'a dyn UploadProgress,
}
