use std::path::Path;
use std::time::Duration;

use uuid::Uuid;

use super::columns::{Columns, spreadsheet_column};
use super::existing::ask_each_row;
use super::send::locate;
use super::*;
use crate::config::{DestinationConfig, WarehouseConfig};

fn options(path: &Path, renames: &[(&str, &str)]) -> UploadOptions {
    UploadOptions {
        schedule: Uuid::nil(),
        path: path.to_owned(),
        renames: renames
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect(),
        force: false,
        allow_missing_external_id: false,
        skip_existing: false,
        settle: Duration::from_secs(1),
    }
}

fn check_text(text: &[u8]) -> Checked {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contacts.csv");
    std::fs::write(&path, text).unwrap();
    check(&options(&path, &[])).unwrap()
}

#[test]
fn rows_with_too_few_or_too_many_fields_are_each_reported_and_reading_goes_on() {
    let checked = check_text(
        b"phone_number,external_id,plan\n\
          +15550001,a,gold\n\
          +15550002,b\n\
          +15550003,c,gold\n\
          +15550004,d,gold,extra\n\
          555,e,gold\n\
          +15550006,f,\xff\xfe\n",
    );
    let problems: Vec<String> = checked.problems.iter().map(ToString::to_string).collect();
    assert_eq!(checked.rows, 6);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with("line 3: 2 fields where the header has 3"),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("line 5: 4 fields where the header has 3"),
        "{problems:#?}"
    );
    assert!(
        problems[2].starts_with("line 6, column phone_number: "),
        "{problems:#?}"
    );
    assert_eq!(
        problems[3],
        "line 7, column plan: not UTF-8 text: save the file as UTF-8"
    );
}

#[test]
fn a_column_with_an_empty_header_is_refused_by_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contacts.csv");
    for (header, expected) in [
        (
            "phone_number,,external_id",
            "line 1: column 2 (B) after \"phone_number\" has an empty header",
        ),
        (
            " ,phone_number,external_id",
            "line 1: column 1 (A) has an empty header",
        ),
        (
            "phone_number,external_id,",
            "line 1: column 3 (C) after \"external_id\" has an empty header",
        ),
    ] {
        std::fs::write(&path, format!("{header}\n+15550001000,,a\n")).unwrap();
        let err = check(&options(&path, &[])).unwrap_err().to_string();
        assert!(err.contains(expected), "{header:?}: {err}");
    }
    assert_eq!(spreadsheet_column(25), "Z");
    assert_eq!(spreadsheet_column(26), "AA");
    assert_eq!(spreadsheet_column(27 * 26 - 1), "ZZ");
    assert_eq!(spreadsheet_column(27 * 26), "AAA");
}

#[test]
fn each_chunk_of_rows_has_its_digest() {
    let mut text = String::from("phone_number,external_id\n");
    for n in 0..2_500 {
        text.push_str(&format!("+1555{n:07},ext-{n}\n"));
    }
    let first = check_text(text.as_bytes());
    assert_eq!(first.chunk_digests.len(), 3);
    // One value changed in the second chunk changes its digest alone.
    let changed = check_text(text.replace("ext-1500\n", "ext-X\n").as_bytes());
    assert_eq!(changed.chunk_digests[0], first.chunk_digests[0]);
    assert_ne!(changed.chunk_digests[1], first.chunk_digests[1]);
    assert_eq!(changed.chunk_digests[2], first.chunk_digests[2]);
    assert_ne!(changed.fingerprint, first.fingerprint);
}

#[test]
fn each_row_is_asked_for_only_when_that_takes_fewer_requests_than_the_walk() {
    // The walk: 2 requests per 100 calls, its first page already read.
    assert!(!ask_each_row(1, 0));
    assert!(!ask_each_row(1, 100));
    assert!(ask_each_row(1, 101));
    assert!(ask_each_row(48, 2_500));
    assert!(!ask_each_row(49, 2_500));
    assert!(ask_each_row(1_000, 100_000));
    assert!(!ask_each_row(100_000, 100_000));
}

#[test]
fn one_upload_into_a_schedule_at_a_time_whatever_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let backend = crate::warehouse::open(&WarehouseConfig {
        destination: DestinationConfig::Sqlite {
            path: dir.path().join("w.db"),
        },
        busy_timeout: Duration::from_secs(5),
        keep_runs: None,
        timezone: chrono_tz::UTC,
    })
    .unwrap();
    // Two handles on the file: the other one stands for another process.
    let (mut warehouse, mut elsewhere) = (backend.writer().unwrap(), backend.writer().unwrap());
    let (one, two) = (Uuid::from_u128(7), Uuid::from_u128(8));
    let mut upload_elsewhere = |schedule| {
        let (claim, _) = (elsewhere.upload_ledger(schedule).unwrap()).expect("not held");
        claim
    };
    let held = upload_elsewhere(one);
    let Err(err) = ledger(warehouse.as_mut(), one) else {
        panic!("a second upload into the schedule is refused");
    };
    assert!(
        matches!(err, UploadError::Busy { schedule } if schedule == one),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "another callsync process is uploading into schedule {one} (one upload into a schedule at a time, whatever the file"
        )),
        "{err}"
    );
    // Another schedule is another lock; the sync's claim of the same schedule too.
    let _other = upload_elsewhere(two);
    let _sync = (elsewhere.claim(one).unwrap()).expect("the sync's claim is free");
    drop(held);
    assert!(ledger(warehouse.as_mut(), one).is_ok());
}

#[test]
fn pointers_are_decoded_before_they_name_a_column() {
    let header = csv::StringRecord::from(vec!["Phone", "a/b", "c~d", "external_id"]);
    let columns = Columns::from_header(
        Path::new("x.csv"),
        &header,
        &[("Phone".into(), "phone_number".into())],
    )
    .unwrap();
    let lines = [2, 3, 5];
    let at = |pointer: &str| locate(pointer, &lines, &columns);
    assert_eq!(
        at("/outbound_calls/1/custom_parameters/a~1b"),
        Some((3, Some("a/b".into())))
    );
    assert_eq!(
        at("/outbound_calls/2/custom_parameters/c~0d"),
        Some((5, Some("c~d".into())))
    );
    assert_eq!(
        at("/outbound_calls/0/phone_number"),
        Some((2, Some("Phone".into())))
    );
    // `~01` is `~1`, not `/`: `~1` is decoded first.
    assert_eq!(
        at("/outbound_calls/0/custom_parameters/x~01"),
        Some((2, Some("x~1".into())))
    );
    assert_eq!(at("/outbound_calls/2"), Some((5, None)));
    assert_eq!(at("/outbound_calls/3/phone_number"), None);
    assert_eq!(at(""), None);
}

#[test]
fn a_problem_shows_its_column_name_escaped() {
    let problem = RowProblem {
        line: 2,
        column: Some("phone\r\n\u{1b}[2J".into()),
        reason: "refused".into(),
    };
    assert_eq!(
        problem.to_string(),
        "line 2, column phone\\u{d}\\u{a}\\u{1b}[2J: refused"
    );
}
