//! What a page lists that the walk cannot take as it is: calls that did not fit the spec's
//! types (`service::Misfit`), set aside with a WARN naming each, their keys still the walk's
//! (their positions were read); and a uid listed twice in one answer, which the walker
//! finds and holds the checkpoint before (the page hid a call in its place), said at WARN.

use uuid::Uuid;

use super::cursor::RowKey;
use crate::service::{CallPage, Misfit};
use crate::untrusted::untrusted_text;
use crate::warehouse::SetAside;

/// The keys of every call the page lists, in its order: its calls' and its misfits'.
pub(super) fn listed_keys(page: &CallPage) -> Vec<RowKey> {
    let mut keys: Vec<RowKey> = (page.data.iter())
        .map(|c| RowKey {
            uid: c.uid,
            updated_at: c.updated_at,
        })
        .collect();
    // In page order: each index is its place among all the page's calls.
    for misfit in &page.misfits {
        let key = RowKey {
            uid: misfit.uid,
            updated_at: misfit.updated_at,
        };
        keys.insert(misfit.index.min(keys.len()), key);
    }
    keys
}

/// The rows setting `misfits` of `schedule` aside, for the pass `run`; each said at WARN.
pub(super) fn set_aside(misfits: Vec<Misfit>, schedule: Uuid, run: Option<i64>) -> Vec<SetAside> {
    (misfits.into_iter())
        .map(|misfit| {
            tracing::warn!(
                %schedule,
                uid = %misfit.uid,
                updated_at = %misfit.updated_at,
                reason = %untrusted_text(&misfit.reason, 300),
                "a listed call does not fit the service's types: set aside with its JSON (set_aside_calls); the rest of its page is written and the checkpoint moves, and a later read of it that fits writes it"
            );
            SetAside::malformed(misfit, run)
        })
        .collect()
}

/// Says at WARN a call the answer listed twice (`listed`: its first listing, `again`: the
/// later one); the later listing is the one written.
pub(super) fn warn_listed_twice(listed: RowKey, keys: &[RowKey], schedule: Uuid) {
    let again = keys
        .iter()
        .rev()
        .find(|k| k.uid == listed.uid)
        .map_or(listed.updated_at, |k| k.updated_at);
    tracing::warn!(
        %schedule,
        uid = %listed.uid,
        first_at = %listed.updated_at,
        again_at = %again,
        "one answer lists a call twice: the later listing is written, and the checkpoint stays before the earlier for this pass (the page may have hidden a call in its place)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Timestamp;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_nanos(i128::from(secs) * 1_000_000_000).unwrap()
    }

    #[test]
    fn misfits_keep_their_place_among_the_listed_keys() {
        let call = |n: u128, secs| {
            let mut call: crate::service::OutboundCall =
                serde_json::from_value(serde_json::json!({
                    "uid": Uuid::from_u128(n), "status": "pending",
                    "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
                }))
                .unwrap();
            call.updated_at = at(secs);
            call
        };
        let misfit = |index, n: u128, secs| Misfit {
            index,
            uid: Uuid::from_u128(n),
            updated_at: at(secs),
            reason: String::new(),
            raw: String::new(),
        };
        let page = CallPage {
            data: vec![call(2, 2), call(4, 4)],
            misfits: vec![misfit(0, 1, 1), misfit(2, 3, 3), misfit(4, 5, 5)],
            pagination: None,
            extra: Default::default(),
        };
        let uids: Vec<u128> = listed_keys(&page).iter().map(|k| k.uid.as_u128()).collect();
        assert_eq!(uids, [1, 2, 3, 4, 5]);
    }
}
