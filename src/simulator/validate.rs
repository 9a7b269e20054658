//! Field-by-field validation of the call-creation bodies (endpoints 4 and 5).
//!
//! The bodies are read as JSON values and checked here rather than deserialized straight into
//! `NewCall`: serde stops at the first problem and cannot say where it was, while the spec
//! wants every problem reported with a JSON pointer to its field (`/phone_number`, or
//! `/outbound_calls/<index>/<field>` in a bulk request). Our choices where the spec is silent:
//! `phone_number` is required; every other field is an optional string (`custom_parameters` an
//! optional object of strings); `null` counts as not sent; an unknown field is an error
//! (`Unexpected field: <name>`, as rule 3 reads for the list query). The single and the bulk
//! endpoints share this code, so an entry is valid in one exactly when it is in the other.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::life;
use crate::service::{NewCall, Timestamp};

/// Entries per bulk request (spec, Limits).
pub const BULK_ENTRIES: std::ops::RangeInclusive<usize> = 1..=1000;

/// One problem with a request body, in the spec's error-item terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub title: String,
    pub detail: String,
    /// JSON pointer (RFC 6901) to the offending value; `""` is the whole body.
    pub pointer: String,
}

impl Problem {
    fn new(title: impl Into<String>, detail: impl Into<String>, pointer: String) -> Self {
        Problem {
            title: title.into(),
            detail: detail.into(),
            pointer,
        }
    }
}

/// `base` extended by one reference token, escaped as RFC 6901 says (`~` → `~0`, `/` → `~1`).
pub fn pointer(base: &str, token: &str) -> String {
    format!("{base}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// The optional string fields of a call entry, besides `phone_number`.
const TEXT_FIELDS: [&str; 8] = [
    "full_name",
    "first_name",
    "last_name",
    "phonetic_full_name",
    "phonetic_first_name",
    "phonetic_last_name",
    "email",
    "external_id",
];

/// The body of `POST /schedules/{uid}/outbound_calls`.
pub fn single(body: &Value) -> Result<NewCall, Vec<Problem>> {
    entry(body, "")
}

/// The body of `POST /schedules/{uid}/outbound_calls/bulk`: every entry is checked, and every
/// problem of every entry is reported (the request is all-or-nothing).
pub fn bulk(body: &Value) -> Result<Vec<NewCall>, Vec<Problem>> {
    let object = object(body, "")?;
    let mut problems = unexpected_fields(object, "", |name| name == "outbound_calls");
    let entries = match object.get("outbound_calls") {
        None | Some(Value::Null) => {
            problems.push(missing("/outbound_calls"));
            return Err(problems);
        }
        Some(Value::Array(entries)) => entries,
        Some(_) => {
            problems.push(wrong_type(
                "/outbound_calls".into(),
                "an array of outbound calls",
            ));
            return Err(problems);
        }
    };
    if !BULK_ENTRIES.contains(&entries.len()) {
        problems.push(Problem::new(
            "Invalid size",
            format!(
                "outbound_calls has {} entries; send {} to {}",
                entries.len(),
                BULK_ENTRIES.start(),
                BULK_ENTRIES.end()
            ),
            "/outbound_calls".into(),
        ));
        return Err(problems);
    }
    let mut calls = Vec::with_capacity(entries.len());
    for (i, value) in entries.iter().enumerate() {
        match entry(value, &format!("/outbound_calls/{i}")) {
            Ok(call) => calls.push(call),
            Err(mut more) => problems.append(&mut more),
        }
    }
    if problems.is_empty() {
        Ok(calls)
    } else {
        Err(problems)
    }
}

/// One call entry found at `at` (`""` for a single create).
fn entry(value: &Value, at: &str) -> Result<NewCall, Vec<Problem>> {
    let object = object(value, at)?;
    let mut problems = unexpected_fields(object, at, |name| {
        name == "phone_number" || name == "custom_parameters" || TEXT_FIELDS.contains(&name)
    });
    let phone = match present(object, "phone_number") {
        None => {
            problems.push(missing(&pointer(at, "phone_number")));
            None
        }
        Some(Value::String(phone)) => match life::phone_problem(phone) {
            Some(problem) => {
                problems.push(Problem::new(
                    "Invalid phone number",
                    format!("{phone:?} {problem}"),
                    pointer(at, "phone_number"),
                ));
                None
            }
            None => Some(phone.clone()),
        },
        Some(_) => {
            problems.push(wrong_type(pointer(at, "phone_number"), "a string"));
            None
        }
    };
    let mut text = |name: &str| match present(object, name) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.push(wrong_type(pointer(at, name), "a string"));
            None
        }
    };
    let [
        full_name,
        first_name,
        last_name,
        phonetic_full_name,
        phonetic_first_name,
        phonetic_last_name,
        email,
        external_id,
    ] = TEXT_FIELDS.map(&mut text);
    let custom_parameters = custom_parameters(object, at, &mut problems);
    match phone {
        Some(phone_number) if problems.is_empty() => Ok(NewCall {
            phone_number,
            full_name,
            first_name,
            last_name,
            phonetic_full_name,
            phonetic_first_name,
            phonetic_last_name,
            email,
            custom_parameters,
            external_id,
        }),
        _ => Err(problems),
    }
}

/// `custom_parameters`: an object of strings; names ending in `_at` hold datetimes, which the
/// spec requires in ISO 8601 with a zone (our reading of which parameters are datetimes).
fn custom_parameters(
    object: &Map<String, Value>,
    at: &str,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, String> {
    let at = pointer(at, "custom_parameters");
    let parameters = match present(object, "custom_parameters") {
        None => return BTreeMap::new(),
        Some(Value::Object(parameters)) => parameters,
        Some(_) => {
            problems.push(wrong_type(at, "an object of strings"));
            return BTreeMap::new();
        }
    };
    let mut out = BTreeMap::new();
    for (name, value) in parameters {
        let Value::String(value) = value else {
            problems.push(wrong_type(pointer(&at, name), "a string"));
            continue;
        };
        if name.ends_with("_at") && Timestamp::parse(value).is_err() {
            problems.push(Problem::new(
                "Invalid custom parameter",
                format!(
                    "{name} must be an ISO 8601 datetime with a timezone (+hh:mm or Z), not {value:?}"
                ),
                pointer(&at, name),
            ));
            continue;
        }
        out.insert(name.clone(), value.clone());
    }
    out
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, Vec<Problem>> {
    value
        .as_object()
        .ok_or_else(|| vec![wrong_type(at.to_owned(), "a JSON object")])
}

/// The field's value, `None` when absent or `null` (both mean "not sent").
fn present<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|v| !v.is_null())
}

fn unexpected_fields(
    object: &Map<String, Value>,
    at: &str,
    known: impl Fn(&str) -> bool,
) -> Vec<Problem> {
    object
        .keys()
        .filter(|name| !known(name))
        .map(|name| {
            Problem::new(
                format!("Unexpected field: {name}"),
                format!("Unexpected field: {name}"),
                pointer(at, name),
            )
        })
        .collect()
}

fn missing(at: &str) -> Problem {
    let name = at.rsplit('/').next().unwrap_or(at);
    Problem::new(
        "Missing field",
        format!("{name} is required"),
        at.to_owned(),
    )
}

fn wrong_type(at: String, expected: &str) -> Problem {
    let name = at.rsplit('/').next().unwrap_or_default();
    let subject = if name.is_empty() { "the body" } else { name };
    Problem::new("Invalid type", format!("{subject} must be {expected}"), at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pointers(problems: &[Problem]) -> Vec<&str> {
        problems.iter().map(|p| p.pointer.as_str()).collect()
    }

    #[test]
    fn a_full_entry_becomes_a_new_call() {
        let call = single(&json!({
            "phone_number": "+15550100", "full_name": "Ada", "email": null,
            "custom_parameters": {"plan": "gold", "due_at": "2026-01-01T10:00:00+01:00"}
        }))
        .unwrap();
        assert_eq!(call.phone_number, "+15550100");
        assert_eq!(call.full_name.as_deref(), Some("Ada"));
        assert_eq!(call.email, None, "null is not sent");
        assert_eq!(call.custom_parameters.len(), 2);
    }

    #[test]
    fn every_problem_of_every_entry_is_reported_with_its_pointer() {
        let problems = bulk(&json!({"outbound_calls": [
            {"phone_number": "+15550000001"},
            {"phone_number": 15550000002_u64, "full_name": 3, "nickname": "x"},
            {"full_name": "x", "custom_parameters": {"a/b": 1, "due_at": "tomorrow"}},
            "not an object",
        ]}))
        .unwrap_err();
        assert_eq!(
            pointers(&problems),
            vec![
                "/outbound_calls/1/nickname",
                "/outbound_calls/1/phone_number",
                "/outbound_calls/1/full_name",
                "/outbound_calls/2/phone_number",
                "/outbound_calls/2/custom_parameters/a~1b",
                "/outbound_calls/2/custom_parameters/due_at",
                "/outbound_calls/3",
            ]
        );
        assert_eq!(problems[3].title, "Missing field");
        assert_eq!(problems[1].title, "Invalid type");
        assert_eq!(problems[0].title, "Unexpected field: nickname");
    }

    #[test]
    fn the_bulk_envelope_is_checked_first() {
        for (body, at, title) in [
            (json!([]), "", "Invalid type"),
            (json!({}), "/outbound_calls", "Missing field"),
            (
                json!({"outbound_calls": {}}),
                "/outbound_calls",
                "Invalid type",
            ),
            (
                json!({"outbound_calls": []}),
                "/outbound_calls",
                "Invalid size",
            ),
        ] {
            let problems = bulk(&body).unwrap_err();
            assert_eq!(
                (problems[0].pointer.as_str(), problems[0].title.as_str()),
                (at, title),
                "{body}"
            );
        }
        let too_many = json!({"outbound_calls": vec![json!({"phone_number": "+15550100"}); 1001]});
        assert_eq!(bulk(&too_many).unwrap_err()[0].title, "Invalid size");
    }
}
