//! Invariant 7 against a service that lies about one row a page: its first row is stamped
//! later (ahead of the service's clock, or ahead of the rows after it but within the
//! clock) and listed last, where that stamp sorts, as a faulty node or a proxy would. The
//! counts are the honest table's. Whatever the walk concludes, no honest row stamped before
//! a checkpoint it returned went unseen.

use std::collections::HashSet;

use super::*;

/// The stamp the lie gives a page's first row, from the answer's clock.
#[derive(Debug, Clone, Copy)]
enum Lie {
    /// So many seconds after the clock: a row from the future.
    Ahead(i64),
    /// In 2099.
    Far,
    /// The clock itself: later than every honest row, yet not from the future.
    Now,
}

struct Walked {
    seen: HashSet<Uuid>,
    checkpoints: Vec<Timestamp>,
    result: Result<(), WalkError>,
}

/// Walks `service` from the epoch, every page's first row lied about.
fn walk_lied_to(service: &Service, page_size: u32, lie: Lie) -> Walked {
    let mut walker = walker(at(0), page_size);
    let mut seen = HashSet::new();
    let mut checkpoints = Vec::new();
    for n in 0..10_000 {
        let Some(req) = walker.next_request() else {
            return Walked {
                seen,
                checkpoints,
                result: Ok(()),
            };
        };
        let served_at = at(now(n));
        let mut rows = service.list(&req);
        if !rows.is_empty() {
            let mut first = rows.remove(0);
            first.updated_at = match lie {
                Lie::Ahead(secs) => at(now(n) + secs),
                Lie::Far => at(4_070_908_800),
                Lie::Now => served_at,
            };
            rows.push(first);
        }
        let facts = PageFacts {
            total_count: Some(service.count_from(req.updated_after)),
            served_at: Some(served_at),
            future: Some(at(now(n) + 1)),
        };
        if req.purpose == Purpose::Walk {
            seen.extend(rows.iter().map(|r| r.uid));
        }
        match walker.accept(&rows, facts) {
            Ok(accepted) => checkpoints.push(accepted.checkpoint),
            Err(error) => {
                return Walked {
                    seen,
                    checkpoints,
                    result: Err(error),
                };
            }
        }
    }
    panic!("the walk does not end");
}

/// No honest row before any checkpoint the walk returned went unseen.
fn assert_nothing_passed_unread(service: &Service, walked: &Walked, case: &str) {
    let furthest = walked.checkpoints.iter().max().copied().unwrap_or(at(0));
    let unread: Vec<_> = service
        .rows
        .iter()
        .filter(|(uid, t)| **t < furthest && !walked.seen.contains(uid))
        .collect();
    assert!(
        unread.is_empty(),
        "{case}: checkpoint {furthest} passed unread rows {unread:?}"
    );
}

const SHAPES: [&[(i64, usize)]; 3] = [
    &[(1, 0)],
    &[
        (5, 3),
        (6, 3),
        (7, 3),
        (8, 3),
        (9, 3),
        (10, 3),
        (11, 3),
        (12, 3),
        (13, 3),
        (14, 3),
    ],
    &[(5, 25), (6, 25), (7, 25), (8, 25)],
];

fn distinct(n: i64) -> Service {
    let mut service = Service::default();
    for secs in 1..=n {
        service.insert(secs, 1);
    }
    service
}

fn services() -> Vec<(String, Service)> {
    let mut all = vec![("300 distinct".to_owned(), distinct(300))];
    for (i, groups) in SHAPES.iter().enumerate().skip(1) {
        all.push((format!("groups #{i}"), Service::with_groups(groups)));
    }
    all
}

#[test]
fn a_row_from_the_future_is_no_position_and_every_call_is_read() {
    for (name, service) in services() {
        for page_size in [10, 100] {
            for lie in [Lie::Ahead(200), Lie::Far] {
                let case = format!("{name}, pages of {page_size}, {lie:?}");
                let walked = walk_lied_to(&service, page_size, lie);
                // A group lied about on every page may end the walk at it, held: the next
                // pass reads from there.
                assert_nothing_passed_unread(&service, &walked, &case);
            }
        }
    }
    // Distinct stamps read by keyset paging: the walk ends, having read everything, with the
    // checkpoint at the last honest row read in order (never the service's "now").
    let service = distinct(300);
    let all: HashSet<Uuid> = service.rows.keys().copied().collect();
    for page_size in [10, 100] {
        for lie in [Lie::Ahead(200), Lie::Far] {
            let walked = walk_lied_to(&service, page_size, lie);
            assert_eq!(walked.result, Ok(()), "{lie:?}");
            assert_eq!(walked.seen, all, "{lie:?}");
            assert_eq!(walked.checkpoints.iter().max(), Some(&at(300)), "{lie:?}");
        }
    }
}

#[test]
fn a_row_stamped_past_calls_it_hides_fails_the_walk_with_the_checkpoint_held() {
    for (name, service) in services() {
        for page_size in [10, 100] {
            let case = format!("{name}, pages of {page_size}");
            let walked = walk_lied_to(&service, page_size, Lie::Now);
            assert_nothing_passed_unread(&service, &walked, &case);
        }
    }
    // Keyset paging over distinct stamps: the answer from the lied stamp counts fewer calls
    // than the page before it left, and says so, the checkpoint at the walk's start.
    let walked = walk_lied_to(&distinct(300), 100, Lie::Now);
    assert_eq!(
        walked.result,
        Err(WalkError::CountShort {
            at: at(now(0)),
            promised: 300 - 99,
            got: 0,
            checkpoint: at(0),
        })
    );
    assert_eq!(walked.checkpoints, vec![at(0)]);
}
