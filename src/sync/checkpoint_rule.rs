//! `CheckpointRule`: the one place that decides the checkpoint saved with a page.

use crate::service::Timestamp;

/// The one place that decides the checkpoint saved with a page.
#[derive(Debug, Clone, Copy)]
pub(super) struct CheckpointRule {
    /// The pass read everything from the stored checkpoint on, so it may move it.
    pub(super) moves: bool,
}

impl CheckpointRule {
    pub(super) fn new(stored: Option<Timestamp>, start: Timestamp) -> Self {
        let moves = match stored {
            Some(cursor) => start <= cursor,
            None => start == Timestamp::EPOCH,
        };
        CheckpointRule { moves }
    }

    /// How far the checkpoint may move with a page: as far as the walk has read, but never
    /// past the service's own "now" when it answered. A row stamped in the future (one node's
    /// clock ahead) would otherwise carry the cursor past calls that change before that
    /// instant; held at "now", such a row is read again until time catches up with it.
    /// Never backwards: the sink keeps the later of this and what it has.
    pub(super) fn checkpoint(self, walked: Timestamp, service_now: Timestamp) -> Option<Timestamp> {
        self.moves.then(|| walked.min(service_now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn the_checkpoint_never_passes_the_services_clock() {
        let stored = Some(ts("2026-01-01T00:00:00Z"));
        let rule = CheckpointRule::new(stored, ts("2025-12-31T23:59:55Z"));
        let now = ts("2026-01-01T00:10:00Z");
        // A walk behind the service's clock moves the checkpoint to where it read.
        assert_eq!(
            rule.checkpoint(ts("2026-01-01T00:05:00Z"), now),
            Some(ts("2026-01-01T00:05:00Z"))
        );
        // A row from the future carried the walk past "now": the checkpoint stays at "now".
        assert_eq!(rule.checkpoint(ts("2026-01-01T00:10:33Z"), now), Some(now));
        assert_eq!(rule.checkpoint(ts("2100-01-01T00:00:00Z"), now), Some(now));
    }

    #[test]
    fn only_a_pass_that_read_from_the_checkpoint_moves_it() {
        let stored = Some(ts("2026-01-01T00:00:00Z"));
        let now = ts("2026-01-02T00:00:00Z");
        let walked = ts("2026-01-01T12:00:00Z");
        // A backfill starting after the checkpoint leaves a gap behind it.
        let later = CheckpointRule::new(stored, ts("2026-01-01T06:00:00Z"));
        assert_eq!(later.checkpoint(walked, now), None);
        let first = CheckpointRule::new(None, Timestamp::EPOCH);
        assert_eq!(first.checkpoint(walked, now), Some(walked));
        let not_from_the_start = CheckpointRule::new(None, ts("2026-01-01T06:00:00Z"));
        assert_eq!(not_from_the_start.checkpoint(walked, now), None);
    }
}
