//! Pages as a pass hands them to the writer, for the write-half benches (`writer`, `postgres`).

use callsync::service::{OutboundCall, Timestamp};
use callsync::warehouse::PageBatch;
use uuid::Uuid;

/// `calls` of `schedule` in pages of `per_page`, each with the checkpoint a pass would give it
/// (its last `updated_at`), owning their calls as a pass's pages do. Their content hashes are
/// left to [`hash`], so that a bench computes them within its measured time, as a pass does;
/// the copy of the calls is made here, before the clock starts.
pub fn unhashed(
    schedule: Uuid,
    calls: &[OutboundCall],
    per_page: usize,
    synced_at: Timestamp,
) -> Vec<PageBatch> {
    calls
        .chunks(per_page)
        .map(|page| PageBatch {
            schedule,
            calls: page.to_vec(),
            content_hashes: Vec::new(),
            checkpoint: page.last().map(|c| c.updated_at),
            synced_at,
            set_aside: Vec::new(),
            run: None,
        })
        .collect()
}

/// Fills in `page`'s content hashes (`OutboundCall::content_hash`, in order).
pub fn hash(page: &mut PageBatch) {
    page.content_hashes = page.calls.iter().map(OutboundCall::content_hash).collect();
}
