//! `callsync status`'s read side, one derivation over facts every destination gathers alike:
//! more passes behind than it reads, and a walker whose host and instance names would act on
//! a terminal, show the same status, to the byte, on each destination.

use std::time::Duration;

use callsync::service::Timestamp;
use callsync::simulator::SimulatorOptions;
use callsync::warehouse::{
    Destination, PassFigures, ProcessIdentity, RunId, RunKind, RunOutcome, RunRecord, RunStats,
    RunSummary, ScheduleStatus, Stored,
};
use uuid::Uuid;

use crate::harness::{Dest, TestEnv};

/// Passes `status` reads of a schedule (`warehouse::status::RECENT_PASSES`): the passes
/// behind in a row are counted up to this many.
const RECENT_PASSES: i64 = 100;

/// More than `status` reads, all behind.
const BEHIND: u64 = 130;

const HOST: &str = "db\u{1b}]0;owned\u{7}-host\r\n2026-01-01T00:00:00Z ERROR forged\u{202e}";

conformance!(status_reads_alike_on_every_destination, status_reads_alike);

async fn status_reads_alike(dest: Dest) {
    let env = TestEnv::start_on(SimulatorOptions::default(), dest).await;
    let warehouse = callsync::warehouse::open(&env.config.warehouse).expect("configured");
    // The destinations' calls block (PostgreSQL's on a runtime of its own).
    let shown = tokio::task::spawn_blocking(move || {
        let mut writer = warehouse.writer().expect("the warehouse opens");
        let last = record_passes(writer.as_mut());
        let now = at(0).saturating_add(Duration::from_secs(3600));
        (writer.status_at(now).expect("status reads"), last)
    })
    .await
    .expect("the passes are recorded");
    let (shown, last) = shown;
    assert_eq!(shown, [expected(last)]);
    // `status --json`'s bytes, instants in the warehouse's form, text escaped.
    let json = serde_json::to_value(&shown[0]).unwrap();
    assert_eq!(json["schedule_uid"], SCHEDULE.to_string());
    assert_eq!(
        json["last_run"]["started_at"],
        "2026-03-01T02:10:00.000000Z"
    );
    assert_eq!(
        json["last_run"]["finished_at"],
        "2026-03-01T02:10:07.250000Z"
    );
    assert_eq!(json["last_run"]["horizon"], "2026-03-01T02:09:59.000000Z");
    assert_eq!(
        json["last_run"]["host"],
        "db\\u{1b}]0;owned\\u{7}-host\\u{d}\\u{a}2026-01-01T00:00:00Z ERROR forged\\u{202e}"
    );
    assert_eq!(json["behind_passes"], RECENT_PASSES);
}

const SCHEDULE: Uuid = Uuid::from_u128(0x5747_0001);

/// The `n`th minute after 2026-03-01T00:00:00Z.
fn at(n: u64) -> Timestamp {
    Timestamp::parse("2026-03-01T00:00:00Z")
        .unwrap()
        .saturating_add(Duration::from_secs(60 * n))
}

fn walker() -> ProcessIdentity {
    ProcessIdentity {
        host: HOST.to_owned(),
        // Longer than a walker's name is shown (255 characters), a bell in it.
        instance: format!("blue\u{7}{}", "x".repeat(300)),
        pid: 4242,
    }
}

fn stats() -> RunStats {
    RunStats {
        pages: 2,
        calls_seen: 40,
        calls_written: 3,
        requests: 3,
        ..RunStats::default()
    }
}

/// One pass completed, then [`BEHIND`] passes behind, a minute apart, each 7.25 s long;
/// returns the last one's id.
fn record_passes(writer: &mut dyn Destination) -> RunId {
    let mut last = None;
    for n in 0..=BEHIND {
        let run =
            crate::harness::start_run(writer, SCHEDULE, RunKind::Incremental, at(n), &walker());
        let record = RunRecord {
            outcome: if n == 0 {
                RunOutcome::Completed
            } else {
                RunOutcome::Behind
            },
            stats: stats(),
            finished_at: at(n).saturating_add(Duration::from_millis(7250)),
            horizon: Some(at(n).saturating_sub(Duration::from_secs(1))),
            lag_secs: Some(30.0),
            error: None,
            error_kind: None,
        };
        writer
            .finish_run(run, &record)
            .expect("the end is recorded");
        last = Some(run);
    }
    last.expect("passes are recorded")
}

/// The status both destinations must show, spelt out, its latest pass `last`.
fn expected(last: RunId) -> ScheduleStatus {
    let started = at(BEHIND);
    let finished = started.saturating_add(Duration::from_millis(7250));
    let instance_shown = format!("blue\\u{{7}}{}…[cut]", "x".repeat(255 - 9 - 6));
    ScheduleStatus {
        cursor: None,
        lag_secs: None,
        last_run: Some(RunSummary {
            kind: Stored::Known(RunKind::Incremental),
            figures: PassFigures {
                started_at: started,
                finished_at: Some(finished),
                pages: 2,
                calls_seen: 40,
                calls_written: 3,
                requests: 3,
                retries: 0,
                horizon: Some(started.saturating_sub(Duration::from_secs(1))),
                lag_secs: Some(30.0),
                detail_requests: 0,
                rate_limited: 0,
                throttled_secs: 0.0,
                future_rows: 0,
                pid: Some(4242),
                run_id: last,
            },
            error: None,
            host: Some(
                "db\\u{1b}]0;owned\\u{7}-host\\u{d}\\u{a}2026-01-01T00:00:00Z ERROR forged\\u{202e}"
                    .into(),
            ),
            instance: Some(instance_shown),
            error_kind: None,
            outcome: Some(RunOutcome::Behind),
        }),
        last_result: Some(Some(RunOutcome::Behind)),
        last_success_at: Some(finished),
        behind_passes: RECENT_PASSES,
        falling_behind: true,
        slowed_by: Vec::new(),
        never_synced: false,
        ..ScheduleStatus::never_synced(SCHEDULE)
    }
}
