//! Calls the service lists that callsync cannot take as sent, on every destination: a field
//! that does not fit is set aside with its JSON and the rest of the page is written (the
//! checkpoint moves); a uid another schedule's call has is a conflict, never a move (the
//! listing schedule's checkpoint held); a uid twice in one answer holds the checkpoint. A
//! later read that fits writes the call and takes its row out.

use callsync::service::Timestamp;
use callsync::simulator::Lie;
use callsync::sync::PassResult;
use serde_json::Value;
use uuid::Uuid;

use crate::harness::{Dest, TestEnv};
use crate::lies::{backfill, env_of, newest};

/// `set_aside_calls` of `schedule`: (call uid, kind, raw JSON), by uid.
fn set_aside(env: &TestEnv, schedule: Uuid) -> Vec<(Uuid, String, Value)> {
    let sql = format!(
        "SELECT call_uid, kind, raw_json FROM set_aside_calls WHERE schedule_uid = '{schedule}' ORDER BY call_uid"
    );
    let rows: Vec<Vec<Option<String>>> = match &env.pg {
        Some(db) => crate::pg::query(db, &sql),
        None => {
            let db = rusqlite::Connection::open(env.warehouse_path()).expect("the warehouse");
            let mut stmt = db.prepare(&sql).expect("a query");
            stmt.query_map([], |r| Ok(vec![r.get(0)?, r.get(1)?, r.get(2)?]))
                .and_then(Iterator::collect)
                .expect("the rows")
        }
    };
    rows.into_iter()
        .map(|row| {
            let text = |i: usize| row[i].clone().expect("a value");
            let raw = serde_json::from_str(&text(2)).expect("raw_json is JSON");
            (Uuid::parse_str(&text(0)).expect("a uid"), text(1), raw)
        })
        .collect()
}

conformance!(
    a_call_with_a_field_that_does_not_fit_is_set_aside_and_its_page_written,
    mistyped_field_set_aside,
    [
        string_for_a_boolean => ("is_test_call", serde_json::json!("yes")),
        float_for_an_integer => ("attempts_remaining", serde_json::json!(2.5)),
        out_of_range_integer => ("attempts_remaining", serde_json::json!(1.8e23)),
        timestamp_that_does_not_parse => ("created_at", serde_json::json!("yesterday")),
        missing_field => ("status", serde_json::Value::Null),
    ]
);

/// The first call of every page with a field that does not fit: every other call is
/// written, each such call is set aside with its JSON as listed, the pass completes and
/// the checkpoint moves to the end; a backfill of an honest service writes them and takes
/// their rows out.
async fn mistyped_field_set_aside(dest: Dest, (field, value): (&str, Value)) {
    let env = env_of(dest).await;
    let s = env.schedules();
    let lie = Lie::Mistyped {
        field: field.to_owned(),
        value: value.clone(),
    };
    env.sim.lie_about(s[0], Some(lie));
    let reports = env.pass(&s).await;
    for report in &reports {
        assert_eq!(report.result, PassResult::Completed, "{report:?}");
    }
    assert_eq!(
        reports[0].position,
        Some(newest(&env, s[0])),
        "the checkpoint moved"
    );
    let aside = set_aside(&env, s[0]);
    assert!(!aside.is_empty(), "the lie was told");
    let truth = env.sim.truth(s[0]);
    for (uid, kind, raw) in &aside {
        assert_eq!(kind, "malformed");
        assert_eq!(raw["uid"], uid.to_string());
        assert_eq!(raw[field], value, "the call as listed");
        assert!(truth.iter().any(|c| c.uid == *uid));
    }
    let fitting: Vec<_> = (truth.iter())
        .filter(|c| !aside.iter().any(|(uid, ..)| *uid == c.uid))
        .cloned()
        .collect();
    env.assert_holds(s[0], &fitting);
    env.assert_holds(s[1], &env.sim.truth(s[1]));
    assert!(set_aside(&env, s[1]).is_empty());
    // Counted where an operator looks: the pass (for /metrics and /healthz) and `status`.
    let counted = Some(aside.len() as u64);
    assert_eq!(
        (reports[0].set_aside, reports[1].set_aside),
        (counted, Some(0))
    );
    assert_eq!(
        status_set_aside(&env).await,
        [(s[0], aside.len() as u64), (s[1], 0)]
    );

    env.sim.lie_about(s[0], None);
    backfill(&env, s[0]).await;
    env.assert_matches_truth(&s);
    assert!(
        set_aside(&env, s[0]).is_empty(),
        "a read that fits takes the rows out"
    );
    assert_eq!(status_set_aside(&env).await, [(s[0], 0), (s[1], 0)]);
}

/// `status --json`'s `set_aside` of each schedule, in the environment's order.
async fn status_set_aside(env: &TestEnv) -> Vec<(Uuid, u64)> {
    let config = env.write_config("");
    let out =
        crate::cli::callsync(&["--config", config.to_str().unwrap(), "status", "--json"]).await;
    let rows: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", crate::cli::stderr(&out)));
    let mut counts: Vec<(Uuid, u64)> = (rows.as_array().expect("a list").iter())
        .map(|row| {
            let uid = row["schedule_uid"].as_str().expect("a schedule");
            let n = row["set_aside"].as_u64().expect("set_aside");
            (Uuid::parse_str(uid).expect("a uid"), n)
        })
        .collect();
    let order = env.schedules();
    counts.sort_by_key(|(uid, _)| order.iter().position(|s| s == uid));
    counts
}

conformance!(
    a_uid_of_another_schedules_call_is_a_conflict_never_a_move,
    foreign_uid_is_a_conflict
);

/// Schedule B's pages list a call of schedule A first: A's call stays A's, the listing is
/// set aside as a conflict, and B's checkpoint stays before it (the call it hid). Honest
/// again, the next pass reads B whole and takes the conflict's row out.
async fn foreign_uid_is_a_conflict(dest: Dest) {
    let env = env_of(dest).await;
    let s = env.schedules();
    env.pass_ok(&s[..1]).await;
    let theirs = env.sim.truth(s[0])[7].uid;
    env.sim.lie_about(s[1], Some(Lie::ForeignUid(theirs)));
    let report = env.pass(&s[1..]).await.remove(0);
    assert_eq!(report.result, PassResult::Completed, "{report:?}");
    env.assert_holds(s[0], &env.sim.truth(s[0]));
    let aside = set_aside(&env, s[1]);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!((aside[0].0, aside[0].1.as_str()), (theirs, "conflict"));
    let listed_at =
        Timestamp::parse(aside[0].2["updated_at"].as_str().expect("a stamp")).expect("a timestamp");
    let position = report.position.expect("a position");
    assert!(
        position <= listed_at,
        "{position} passed the conflict at {listed_at}"
    );

    env.sim.lie_about(s[1], None);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
    assert!(
        set_aside(&env, s[1]).is_empty(),
        "{:?}",
        set_aside(&env, s[1])
    );
}

conformance!(
    a_uid_twice_in_one_answer_holds_the_checkpoint_before_it,
    uid_twice_holds_the_checkpoint
);

/// Every page lists its first call's uid twice, hiding its second call: the later listing
/// is written, the checkpoint stays before the first such page, and once the service is
/// honest the next pass reads every call.
async fn uid_twice_holds_the_checkpoint(dest: Dest) {
    let env = env_of(dest).await;
    let s = env.schedules();
    env.sim.lie_about(s[0], Some(Lie::UidTwice));
    let mut truth = env.sim.truth(s[0]);
    truth.sort_by_key(|c| (c.updated_at, c.uid));
    let reports = env.pass(&s).await;
    assert_eq!(reports[0].result, PassResult::Completed, "{:?}", reports[0]);
    let position = reports[0].position.expect("a position");
    assert!(
        position <= truth[0].updated_at,
        "{position}: held at the first page"
    );
    env.assert_holds(s[1], &env.sim.truth(s[1]));

    env.sim.lie_about(s[0], None);
    env.pass_ok(&s).await;
    env.assert_matches_truth(&s);
}
