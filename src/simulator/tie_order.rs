//! How the simulator orders calls that share an `updated_at` in an `updated_after` list: the
//! spec says the list is ordered by `updated_at` and nothing of the order within a tie.
//!
//! [`TieOrder::Stable`] orders a tie by uid, as an index on `(updated_at, uid)` would. The
//! other two are what a service sorting on `updated_at` alone may do
//! (`ORDER BY updated_at LIMIT … OFFSET …`; PostgreSQL's manual warns that different
//! `LIMIT`/`OFFSET` values may then give different row orders): [`TieOrder::Shuffled`] draws
//! a tie's order anew for every request, [`TieOrder::TopN`] derives it from the request's
//! `LIMIT` (`OFFSET` + page size), as a bounded top-N heap sort does — the same request
//! answers alike, another page or page size differently.

use std::borrow::Cow;

use uuid::Uuid;

use crate::service::Timestamp;

/// The order among calls sharing an `updated_at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TieOrder {
    #[default]
    Stable,
    Shuffled,
    TopN,
}

impl TieOrder {
    /// The seed a request's ties are ordered by: `None` for the stable order; `request` is
    /// a number no other request of this simulator had.
    pub(super) fn seed(self, request: u64, skip: usize, size: usize) -> Option<u64> {
        match self {
            TieOrder::Stable => None,
            TieOrder::Shuffled => Some(request),
            TieOrder::TopN => Some(skip.saturating_add(size) as u64),
        }
    }
}

/// The list `keys` (sorted by `(updated_at, uid)`) as a request ordered by `seed` sees it,
/// from position `from` on, up to position `until` (both rounded out to whole ties):
/// the keys and the position of the first. Only the ties the window touches are reordered.
pub(super) fn reorder(
    keys: &[(Timestamp, Uuid)],
    from: usize,
    until: usize,
    seed: Option<u64>,
) -> (Cow<'_, [(Timestamp, Uuid)]>, usize) {
    let Some(seed) = seed.filter(|_| from < keys.len()) else {
        return (Cow::Borrowed(keys), 0);
    };
    let until = until.clamp(from + 1, keys.len());
    let first = keys[from].0;
    let last = keys[until - 1].0;
    let start = keys[..from].partition_point(|(t, _)| *t < first);
    let end = until + keys[until..].partition_point(|(t, _)| *t <= last);
    let mut window = keys[start..end].to_vec();
    window.sort_by_key(|(t, uid)| (*t, rank(*uid, seed)));
    (Cow::Owned(window), start)
}

/// A uid's place within its tie under `seed`: splitmix64's finaliser over both.
fn rank(uid: Uuid, seed: u64) -> u64 {
    let (hi, lo) = uid.as_u64_pair();
    let mut x = hi ^ lo.rotate_left(29) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(groups: &[(i64, u64)]) -> Vec<(Timestamp, Uuid)> {
        let mut keys = Vec::new();
        let mut n = 0;
        for &(secs, size) in groups {
            for _ in 0..size {
                n += 1;
                let at = Timestamp::from_unix_nanos(i128::from(secs) * 1_000_000_000).unwrap();
                keys.push((at, Uuid::from_u64_pair(n, n.wrapping_mul(7919))));
            }
        }
        keys.sort();
        keys
    }

    fn page(keys: &[(Timestamp, Uuid)], skip: usize, size: usize, seed: Option<u64>) -> Vec<Uuid> {
        let (window, start) = reorder(keys, skip, skip + size, seed);
        window
            .iter()
            .skip(skip - start)
            .take(size)
            .map(|(_, u)| *u)
            .collect()
    }

    #[test]
    fn the_stable_order_is_the_index_and_others_keep_the_instants_in_place() {
        let keys = keys(&[(1, 250), (2, 30), (3, 120)]);
        for seed in [None, Some(1), Some(2), Some(300)] {
            for skip in [0, 99, 100, 250, 260, 399] {
                let got = page(&keys, skip, 100, seed);
                let want: Vec<Uuid> = keys.iter().skip(skip).take(100).map(|k| k.1).collect();
                assert_eq!(got.len(), want.len());
                // Every position holds a call of the instant the index has there.
                let instant = |u: &Uuid| keys.iter().find(|k| k.1 == *u).unwrap().0;
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(instant(g), instant(w));
                }
                if seed.is_none() {
                    assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn pages_of_an_unstable_order_need_not_partition_a_tie() {
        let keys = keys(&[(1, 1000)]);
        for order in [TieOrder::Shuffled, TieOrder::TopN] {
            let mut seen = std::collections::HashSet::new();
            for p in 0..10 {
                let seed = order.seed(p as u64, p * 100, 100);
                seen.extend(page(&keys, p * 100, 100, seed));
            }
            assert!(seen.len() < 1000, "{order:?}: {}", seen.len());
            // The same request answers alike under a top-N sort.
            if order == TieOrder::TopN {
                assert_eq!(
                    page(&keys, 300, 100, order.seed(1, 300, 100)),
                    page(&keys, 300, 100, order.seed(2, 300, 100))
                );
            }
        }
    }
}
