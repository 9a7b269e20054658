//! A list page's calls read one by one: a call whose uid and `updated_at` read well but
//! another field does not fit (a string for a boolean, a float or an out-of-range number for
//! an integer, a timestamp that does not parse, a field it needs missing) is a [`Misfit`],
//! kept with its raw JSON and why, and the rest of the page reads on. A call without a
//! readable uid or `updated_at` still fails the page: no position, no walk.
//!
//! Only a page that failed to read as a whole is read so (`BoundedPage::lenient`): a page
//! that fits costs what it always did.

use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::models::{Misfit, OutboundCall};
use super::timestamp::Timestamp;

/// What a misfit must still say: where it stands in the list.
#[derive(Deserialize)]
struct Key {
    uid: Uuid,
    updated_at: Timestamp,
}

/// One element of a page's `data`: a call, or a misfit; `Err` with the decoder's words when
/// not even its uid and `updated_at` read.
pub(super) fn read_listed(
    index: usize,
    raw: &RawValue,
) -> Result<Result<OutboundCall, Misfit>, String> {
    let error = match serde_json::from_str::<OutboundCall>(raw.get()) {
        Ok(call) => return Ok(Ok(call)),
        Err(error) => error,
    };
    let reason = error.to_string();
    match serde_json::from_str::<Key>(raw.get()) {
        Ok(key) => Ok(Err(Misfit {
            index,
            uid: key.uid,
            updated_at: key.updated_at,
            reason,
            raw: raw.get().to_owned(),
        })),
        Err(_) => Err(format!("call {index} of the page: {reason}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Result<OutboundCall, Misfit>, String> {
        let raw: Box<RawValue> = serde_json::from_str(json).unwrap();
        read_listed(3, &raw)
    }

    const CALL: &str = r#"{"uid":"6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11","status":"pending","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-02T00:00:00Z"FIELD}"#;

    fn with(field: &str) -> String {
        CALL.replace("FIELD", field)
    }

    #[test]
    fn a_call_that_fits_reads_as_a_call() {
        assert!(matches!(read(&with("")), Ok(Ok(_))));
        assert!(matches!(
            read(&with(r#","attempts_remaining":4"#)),
            Ok(Ok(_))
        ));
    }

    #[test]
    fn a_field_that_does_not_fit_sets_the_call_aside_with_its_json_and_why() {
        for (field, says) in [
            (r#","is_test_call":"yes""#, "expected a boolean"),
            (r#","attempts_remaining":2.5"#, "expected i64"),
            (r#","attempts_remaining":1.8e23"#, "expected i64"),
            (r#","cooldown_until":"tomorrow""#, "tomorrow"),
            (r#","retry_intervals":"60""#, "expected a sequence"),
        ] {
            let json = with(field);
            let misfit = match read(&json) {
                Ok(Err(misfit)) => misfit,
                other => panic!("{field}: {other:?}"),
            };
            assert_eq!(misfit.index, 3);
            assert_eq!(
                misfit.uid.to_string(),
                "6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11"
            );
            assert_eq!(
                misfit.updated_at,
                Timestamp::parse("2026-01-02T00:00:00Z").unwrap()
            );
            assert!(misfit.reason.contains(says), "{field}: {}", misfit.reason);
            assert_eq!(misfit.raw, json);
        }
        // A field it needs, missing.
        let json = CALL
            .replace(r#""status":"pending","#, "")
            .replace("FIELD", "");
        assert!(matches!(read(&json), Ok(Err(m)) if m.reason.contains("missing field `status`")));
    }

    #[test]
    fn a_call_without_a_readable_uid_or_updated_at_fails_the_page() {
        let no_stamp = with("").replace(
            r#""updated_at":"2026-01-02T00:00:00Z""#,
            r#""updated_at":"soon""#,
        );
        let error = read(&no_stamp).unwrap_err();
        assert!(error.starts_with("call 3 of the page: "), "{error}");
        let bad_uid = with("").replace("6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11", "42");
        assert!(read(&bad_uid).is_err());
    }
}
