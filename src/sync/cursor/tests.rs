//! The walker against a model service whose rows change between requests.
//!
//! The invariant checked everywhere: when a walk ends, every row the service shows with an
//! `updated_at` before the final checkpoint was seen in exactly that version (so the next
//! pass, starting at the checkpoint, misses nothing), and the walk ended in bounded requests.

use std::collections::HashMap;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_nanos(i128::from(secs) * 1_000_000_000).unwrap()
}

fn uid(n: u64) -> Uuid {
    Uuid::from_u64_pair(0, n)
}

/// The service's list endpoint over an in-memory table: `updated_at >= after`, ordered by
/// (updated_at, uid) as a database would, sliced into pages.
#[derive(Clone, Default)]
struct Service {
    rows: HashMap<Uuid, Timestamp>,
    next_uid: u64,
}

impl Service {
    fn with_groups(groups: &[(i64, usize)]) -> Self {
        let mut s = Service::default();
        for &(secs, n) in groups {
            s.insert(secs, n);
        }
        s
    }

    fn insert(&mut self, secs: i64, n: usize) {
        for _ in 0..n {
            self.next_uid += 1;
            // Scatter uids so new rows land anywhere inside a tie group.
            let id = uid(self.next_uid.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            self.rows.insert(id, at(secs));
        }
    }

    fn list(&self, req: &PageRequest) -> Vec<RowKey> {
        let mut rows: Vec<RowKey> = self
            .rows
            .iter()
            .filter(|(_, t)| **t >= req.updated_after)
            .map(|(u, t)| RowKey {
                uid: *u,
                updated_at: *t,
            })
            .collect();
        rows.sort_by_key(|r| (r.updated_at, r.uid));
        let size = req.page_size as usize;
        rows.into_iter()
            .skip((req.page as usize - 1) * size)
            .take(size)
            .collect()
    }

    /// Moves the `k`-th row (in list order) of those at `secs` to `to`.
    fn touch_kth_at(&mut self, secs: i64, k: usize, to: i64) -> bool {
        let mut group: Vec<Uuid> = self
            .rows
            .iter()
            .filter(|(_, t)| **t == at(secs))
            .map(|(u, _)| *u)
            .collect();
        group.sort();
        match group.get(k) {
            Some(u) => {
                self.rows.insert(*u, at(to));
                true
            }
            None => false,
        }
    }
}

struct Outcome {
    checkpoint: Timestamp,
    requests: usize,
    seen: HashMap<Uuid, Timestamp>,
    checkpoints: Vec<Timestamp>,
}

/// Runs a walk to its end, calling `churn` before every request.
fn walk(
    service: &mut Service,
    start: i64,
    page_size: u32,
    mut churn: impl FnMut(&mut Service, usize),
) -> Result<Outcome, WalkError> {
    let mut walker = PageWalker::new(at(start), page_size, WalkLimits::default());
    let mut seen = HashMap::new();
    let mut checkpoints = Vec::new();
    let mut requests = 0;
    while let Some(req) = walker.next_request() {
        if std::env::var_os("WALK_TRACE").is_some() {
            eprintln!("{req:?}");
        }
        churn(service, requests);
        requests += 1;
        assert!(requests < 100_000, "the walk does not end");
        let rows = service.list(&req);
        for r in &rows {
            seen.insert(r.uid, r.updated_at);
        }
        checkpoints.push(walker.accept(&rows)?.checkpoint);
    }
    Ok(Outcome {
        checkpoint: walker.position(),
        requests,
        seen,
        checkpoints,
    })
}

/// Nothing before the checkpoint was missed, and checkpoints never went backwards.
fn assert_complete(service: &Service, out: &Outcome) {
    for (u, t) in &service.rows {
        if *t < out.checkpoint {
            assert_eq!(
                out.seen.get(u),
                Some(t),
                "row {u} at {t} is before checkpoint {} but was not seen in that version",
                out.checkpoint
            );
        }
    }
    assert!(out.checkpoints.windows(2).all(|w| w[0] <= w[1]));
}

fn check(groups: &[(i64, usize)], page_size: u32, expected_checkpoint: i64) -> Outcome {
    let mut service = Service::with_groups(groups);
    let out = walk(&mut service, 0, page_size, |_, _| {}).unwrap();
    assert_complete(&service, &out);
    let total: usize = groups.iter().map(|g| g.1).sum();
    assert_eq!(out.seen.len(), total, "every row seen");
    assert_eq!(out.checkpoint, at(expected_checkpoint));
    out
}

#[test]
fn static_data_of_every_shape() {
    // (groups of (second, rows), page size, final checkpoint)
    check(&[], 100, 0);
    check(&[(5, 1)], 100, 5);
    check(&[(1, 1), (2, 1), (3, 1)], 2, 3);
    check(&[(1, 40), (2, 60)], 100, 2);
    check(&[(1, 100)], 100, 1); // one full page, then the tail
    check(&[(1, 250), (2, 3)], 100, 2); // tie group larger than a page, then more
    check(&[(1, 200)], 100, 1); // tie group on a page edge at the end of the data
    check(&[(1, 200), (2, 5)], 100, 2); // tie group on a page edge before more data
    check(&[(1, 300), (2, 100), (3, 100)], 100, 3); // edges everywhere
    check(&[(1, 1000)], 100, 1); // one bulk upload
    check(&[(1, 7), (2, 7), (3, 7)], 1, 3); // page size 1: every row is a tie group
    check(&[(1, 5), (2, 4)], 2, 2);
}

#[test]
fn keyset_paging_costs_one_request_per_page() {
    let groups: Vec<(i64, usize)> = (1..=500).map(|s| (s, 1)).collect();
    let out = check(&groups, 100, 500);
    // Each page re-reads the row at the cursor: 500 rows need 6 requests, not 5.
    assert_eq!(out.requests, 6);
}

#[test]
fn a_tie_group_costs_two_scans() {
    // The first page (from 0) moves the cursor to the group; then up pages 1..=11, where the
    // group's last rows sit next to what follows; down pages 10..=1; that page was the end.
    let out = check(&[(1, 1050), (2, 1)], 100, 2);
    assert_eq!(out.requests, 1 + 11 + 10);
    // A group on a page edge: down from page 10, then one probe with another page size.
    let out = check(&[(1, 1000), (2, 1)], 100, 2);
    assert_eq!(out.requests, 1 + 11 + 10 + 1);
}

#[test]
fn rows_leaving_a_tie_group_mid_walk_are_not_stepped_over() {
    for victim in [0, 50, 99, 100, 150, 199, 249] {
        let mut service = Service::with_groups(&[(1, 250), (2, 3)]);
        let out = walk(&mut service, 0, 100, |s, n| {
            if n == 2 {
                s.touch_kth_at(1, victim, 9);
            }
        })
        .unwrap();
        assert_complete(&service, &out);
    }
}

#[test]
fn rows_entering_a_tie_group_while_it_is_now_are_not_stepped_over() {
    // The group's instant is still "now" for the first requests, then time moves on.
    for closes_at in [1, 2, 3, 4, 6] {
        let mut service = Service::with_groups(&[(1, 250)]);
        let out = walk(&mut service, 0, 100, |s, n| {
            if n < closes_at {
                s.insert(1, 3);
            } else if n == closes_at {
                s.insert(2, 1);
            }
        })
        .unwrap();
        assert_complete(&service, &out);
        if closes_at <= 2 {
            // Time moved on before the upward scan reached the group's end.
            assert_eq!(out.checkpoint, at(2), "closes at request {closes_at}");
            assert_eq!(out.seen.len(), service.rows.len());
        }
    }
}

#[test]
fn a_growing_tail_group_ends_the_walk_at_its_instant() {
    // Nothing follows the group, so it may still be growing: the checkpoint stays at its
    // instant and the next pass reads it again; nothing before it is missed.
    let mut service = Service::with_groups(&[(1, 150)]);
    let out = walk(&mut service, 0, 100, |s, _| s.insert(1, 2)).unwrap();
    assert_complete(&service, &out);
    assert_eq!(out.checkpoint, at(1));
}

#[test]
fn a_group_shrinking_to_the_page_edge_mid_walk() {
    let mut service = Service::with_groups(&[(1, 203), (2, 10)]);
    let out = walk(&mut service, 0, 100, |s, n| {
        if n == 1 {
            for _ in 0..3 {
                s.touch_kth_at(1, 0, 3);
            }
        }
    })
    .unwrap();
    assert_complete(&service, &out);
    assert_eq!(out.checkpoint, at(3));
}

#[test]
fn distrusts_the_service() {
    let rows = |ts: &[i64]| -> Vec<RowKey> {
        ts.iter()
            .enumerate()
            .map(|(i, s)| RowKey {
                uid: uid(i as u64 + 1),
                updated_at: at(*s),
            })
            .collect()
    };
    let mut w = PageWalker::new(at(5), 2, WalkLimits::default());
    assert!(matches!(
        w.accept(&rows(&[5, 6, 7])),
        Err(WalkError::PageTooLarge { got: 3, .. })
    ));
    let mut w = PageWalker::new(at(5), 3, WalkLimits::default());
    assert!(matches!(
        w.accept(&rows(&[5, 7, 6])),
        Err(WalkError::OutOfOrder { .. })
    ));
    let mut w = PageWalker::new(at(5), 3, WalkLimits::default());
    assert!(matches!(
        w.accept(&rows(&[4, 6])),
        Err(WalkError::BeforeCursor { .. })
    ));
    // A service that ignores `page` inside a tie group.
    let mut w = PageWalker::new(at(5), 10, WalkLimits::default());
    w.accept(&rows(&[5; 10])).unwrap();
    assert_eq!(w.next_request().unwrap().page, 2);
    assert!(matches!(
        w.accept(&rows(&[5; 10])),
        Err(WalkError::PageIgnored { page: 2, .. })
    ));
    // With small pages the same happens, caught by the page bound instead.
    let mut w = PageWalker::new(at(5), 2, WalkLimits::default());
    let err = (0..100)
        .find_map(|_| w.accept(&rows(&[5, 5])).err())
        .expect("bounded");
    assert!(matches!(err, WalkError::TieUnsettled { .. }), "{err}");
}

#[test]
fn the_position_never_moves_back_and_starts_at_the_start() {
    let w = PageWalker::new(at(42), 100, WalkLimits::default());
    assert_eq!(w.position(), at(42));
    assert_eq!(
        w.next_request(),
        Some(PageRequest {
            updated_after: at(42),
            page: 1,
            page_size: 100
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random data, random page sizes, random updates and inserts while paging: nothing before
    /// the final checkpoint is ever missed, and every walk ends.
    #[test]
    fn never_skips_under_churn(
        groups in prop::collection::vec((1i64..8, 1usize..60), 0..6),
        page_size in 1u32..12,
        events in prop::collection::vec((0usize..40, 0u8..3, 1i64..8, 0usize..80), 0..12),
    ) {
        let mut service = Service::with_groups(&groups);
        let result = walk(&mut service, 0, page_size, |s, n| {
            for (when, kind, secs, k) in &events {
                if *when == n {
                    match kind {
                        // an update: the row moves to "now" (later than everything)
                        0 => { s.touch_kth_at(*secs, *k, 100 + n as i64); }
                        // a row stamped at an instant that is still "now"
                        1 => s.insert(100 + n as i64, 1),
                        // an insert into the latest tie group, whose instant is still "now"
                        // (an insert at an older instant is a late commit: the lookback's job)
                        _ => {
                            let now = s.rows.values().max().copied();
                            if let Some(now) = now {
                                let secs = i64::try_from(now.unix_nanos() / 1_000_000_000).unwrap();
                                s.insert(secs, 1);
                            }
                        }
                    }
                }
            }
        });
        match result {
            Ok(out) => assert_complete(&service, &out),
            Err(WalkError::TieUnsettled { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}
