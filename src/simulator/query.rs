//! Strict query parsing for the list endpoint (and `force` on the create endpoints).
//!
//! Values are URL-decoded as a form (`%2B` is `+`; a bare `+` is a space, as every form
//! decoder reads it). Each problem becomes a 400 in the spec's error shape naming the
//! parameter; a repeated parameter (`Duplicate field: <name>`) and an empty list or list item
//! are problems too.

use url::form_urlencoded;

use super::state::CallState;
use crate::service::{ErrorBody, ListFilter, Timestamp};

#[derive(Debug, Clone)]
pub struct ListParams {
    pub filter: ListFilter,
    pub updated_after: Option<Timestamp>,
    pub page: u32,
    pub page_size: u32,
    /// The decoded pairs as sent, for pagination links.
    pub raw_pairs: Vec<(String, String)>,
}

pub fn parse_list_query(query: Option<&str>) -> Result<ListParams, ErrorBody> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let mut params = ListParams {
        filter: ListFilter::default(),
        updated_after: None,
        page: 1,
        page_size: 50,
        raw_pairs: pairs.clone(),
    };
    let f = &mut params.filter;
    let mut seen = Seen::default();
    for (name, value) in &pairs {
        seen.once(name)?;
        let list = || list(name, value);
        match name.as_str() {
            "status" => f.status = list()?,
            "progress" => f.progress = list()?,
            "source" => f.source = list()?,
            "attempt_status" => f.attempt_status = list()?,
            "outcome" => f.outcome = Some(value.clone()),
            "external_id" => f.external_id = Some(value.clone()),
            "is_test_call" => f.is_test_call = Some(boolean(name, value)?),
            "full_name" => f.full_name = Some(value.clone()),
            "first_name" => f.first_name = Some(value.clone()),
            "last_name" => f.last_name = Some(value.clone()),
            "phonetic_full_name" => f.phonetic_full_name = Some(value.clone()),
            "phonetic_first_name" => f.phonetic_first_name = Some(value.clone()),
            "phonetic_last_name" => f.phonetic_last_name = Some(value.clone()),
            "email" => f.email = Some(value.clone()),
            "updated_after" => {
                params.updated_after = Some(Timestamp::parse(value).map_err(|_| {
                    invalid(
                        name,
                        format!("{value:?} is not an RFC 3339 timestamp with a zone"),
                    )
                })?)
            }
            "page" => {
                params.page = integer(name, value)?;
                if params.page < 1 {
                    return Err(invalid(name, "must be 1 or more"));
                }
            }
            "page_size" => {
                params.page_size = integer(name, value)?;
                if !(1..=100).contains(&params.page_size) {
                    return Err(invalid(name, "must be between 1 and 100"));
                }
            }
            other => return Err(unexpected(other)),
        }
    }
    Ok(params)
}

/// The create endpoints' only parameter: `force`.
pub fn parse_post_query(query: Option<&str>) -> Result<bool, ErrorBody> {
    let mut force = false;
    let mut seen = Seen::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        seen.once(&name)?;
        match name.as_ref() {
            "force" => force = boolean(&name, &value)?,
            other => return Err(unexpected(other)),
        }
    }
    Ok(force)
}

impl ListParams {
    pub fn filter_is_empty(&self) -> bool {
        self.filter == ListFilter::default()
    }

    /// The spec's matching rule for every filter.
    pub fn matches(&self, state: &CallState) -> bool {
        let f = &self.filter;
        let call = &state.call;
        let info = &call.outbound_call_info;
        let any = |wanted: &[String], value: Option<&str>| {
            wanted.is_empty() || value.is_some_and(|v| wanted.iter().any(|w| w == v))
        };
        let contains = |wanted: &Option<String>, value: &Option<String>| match wanted {
            None => true,
            Some(w) => value
                .as_deref()
                .is_some_and(|v| v.to_lowercase().contains(&w.to_lowercase())),
        };
        let attempts = call.outbound_call_attempts.as_deref().unwrap_or_default();
        any(&f.status, Some(&call.status))
            && any(&f.progress, call.progress.as_deref())
            && any(&f.source, Some(state.source))
            && (f.attempt_status.is_empty()
                || attempts
                    .iter()
                    .any(|a| f.attempt_status.contains(&a.status)))
            && f.outcome.as_ref().is_none_or(|o| {
                attempts
                    .iter()
                    .flat_map(|a| a.call_outcomes.iter().flatten())
                    .any(|x| &x.name == o)
            })
            && f.external_id
                .as_ref()
                .is_none_or(|e| call.external_id.as_ref() == Some(e))
            && f.is_test_call
                .is_none_or(|t| call.is_test_call.unwrap_or(false) == t)
            && contains(&f.full_name, &info.full_name)
            && contains(&f.first_name, &info.first_name)
            && contains(&f.last_name, &info.last_name)
            && contains(&f.phonetic_full_name, &info.phonetic_full_name)
            && contains(&f.phonetic_first_name, &info.phonetic_first_name)
            && contains(&f.phonetic_last_name, &info.phonetic_last_name)
            && contains(&f.email, &info.email)
    }
}

/// The names a query has used so far. A repeated parameter is an error rather than "the last
/// one wins" (or "any of them"), which would hide a client's mistake: lists are sent once,
/// comma-delimited, as the spec says.
#[derive(Default)]
struct Seen(Vec<String>);

impl Seen {
    fn once(&mut self, name: &str) -> Result<(), ErrorBody> {
        if self.0.iter().any(|n| n == name) {
            return Err(ErrorBody::new(
                "Invalid request",
                "the query repeats a parameter; send a list once, comma-delimited",
            )
            .with_error(
                format!("Duplicate field: {name}"),
                format!("Duplicate field: {name}"),
                Some(format!("/{name}")),
            ));
        }
        self.0.push(name.to_owned());
        Ok(())
    }
}

/// A comma-delimited list with at least one item and no empty one: `status=` would otherwise
/// match every call, the opposite of a filter.
fn list(name: &str, value: &str) -> Result<Vec<String>, ErrorBody> {
    let items: Vec<String> = value.split(',').map(|s| s.trim().to_owned()).collect();
    if items.iter().any(String::is_empty) {
        return Err(invalid(
            name,
            format!("{value:?} must list one or more values, comma-delimited, none empty"),
        ));
    }
    Ok(items)
}

fn boolean(name: &str, value: &str) -> Result<bool, ErrorBody> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(
            name,
            format!("{value:?} is not a boolean (true or false)"),
        )),
    }
}

fn integer(name: &str, value: &str) -> Result<u32, ErrorBody> {
    value
        .parse()
        .map_err(|_| invalid(name, format!("{value:?} is not a positive integer")))
}

fn invalid(name: &str, detail: impl Into<String>) -> ErrorBody {
    ErrorBody::new("Invalid request", format!("invalid query parameter {name}")).with_error(
        "Invalid value",
        detail,
        Some(format!("/{name}")),
    )
}

fn unexpected(name: &str) -> ErrorBody {
    ErrorBody::new(
        "Invalid request",
        "the query has a parameter this endpoint does not take",
    )
    .with_error(
        format!("Unexpected field: {name}"),
        format!("Unexpected field: {name}"),
        Some(format!("/{name}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let p = parse_list_query(Some("updated_after=2026-01-01T10%3A00%3A00%2B01%3A00&page=2&page_size=10&status=pending,completed&is_test_call=false")).unwrap();
        assert_eq!(
            p.updated_after,
            Some(Timestamp::parse("2026-01-01T09:00:00Z").unwrap())
        );
        assert_eq!((p.page, p.page_size), (2, 10));
        assert_eq!(p.filter.status, vec!["pending", "completed"]);
        for (query, needle) in [
            ("foo=1", "Unexpected field: foo"),
            ("page_size=101", "page_size"),
            ("page_size=0", "page_size"),
            ("page=0", "page"),
            ("page=x", "page"),
            ("is_test_call=yes", "is_test_call"),
            ("updated_after=2026-01-01T10:00:00", "updated_after"),
            ("status=pending&status=completed", "Duplicate field: status"),
            ("page=1&page_size=10&page=2", "Duplicate field: page"),
            ("status=", "status"),
            ("progress=answered,,unanswered", "progress"),
            ("attempt_status=busy,", "attempt_status"),
        ] {
            let err = parse_list_query(Some(query)).unwrap_err();
            assert!(format!("{err}").contains(needle), "{query}: {err}");
        }
        assert!(parse_post_query(Some("force=true")).unwrap());
        assert!(parse_post_query(Some("force=maybe")).is_err());
        let err = parse_post_query(Some("force=false&force=true")).unwrap_err();
        assert!(format!("{err}").contains("Duplicate field: force"), "{err}");
        // A list's items are trimmed; an empty string filter is a filter (substring "").
        let p = parse_list_query(Some("status=pending,%20completed&full_name=")).unwrap();
        assert_eq!(p.filter.status, vec!["pending", "completed"]);
        assert_eq!(p.filter.full_name.as_deref(), Some(""));
    }
}
