//! Typed serde models of every resource in the service's interface.
//!
//! Tolerant by design: every object keeps the fields it does not know in `extra` (so the
//! warehouse can store them instead of dropping them), optional fields default, and a missing
//! key stays distinguishable from an empty array where the difference matters
//! (`call_outcomes`, `call_attempts_variables`, `call_notifications`). Only the identity and
//! cursor fields are required; a wrong type is an error. Both the client and the simulator use
//! these types, so they cannot drift apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::timestamp::Timestamp;

/// Readings of values a service may send for "nothing" where the spec shows a value.
mod tolerant {
    use serde::{Deserialize, Deserializer};

    use crate::service::timestamp::Timestamp;

    /// `null` reads as the empty value (`"custom_parameters": null` is no parameters).
    pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Default + Deserialize<'de>,
    {
        Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
    }

    /// `null` and a blank string (`"cooldown_until": ""`) read as no timestamp; any other
    /// string must be a timestamp.
    pub fn blank_timestamp_as_none<'de, D>(deserializer: D) -> Result<Option<Timestamp>, D::Error>
    where
        D: Deserializer<'de>,
    {
        match Option::<String>::deserialize(deserializer)? {
            Some(text) if !text.trim().is_empty() => Timestamp::parse(&text)
                .map(Some)
                .map_err(serde::de::Error::custom),
            _ => Ok(None),
        }
    }
}

/// Fields of a JSON object that the models do not know, in the order the service sent them.
pub type Extra = Map<String, Value>;

/// `custom_parameters`: keyed by parameter name (list and detail) or numeric id (single create).
/// Values are strings in the spec; any JSON value is kept rather than rejected.
pub type CustomParameters = BTreeMap<String, Value>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    pub uid: Uuid,
    pub name: String,
    pub is_enabled: bool,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default = "outbound")]
    pub direction: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub uid: Uuid,
    pub name: String,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    pub retry_type: String,
    pub retry_intervals: Vec<i64>,
    pub is_enabled: bool,
    #[serde(default)]
    pub is_auto: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A call flow; only `campaign_uid` is specified, everything else lands in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallFlow {
    pub campaign_uid: Uuid,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An outbound call as the list and detail endpoints return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundCall {
    pub uid: Uuid,
    #[serde(default)]
    pub external_id: Option<String>,
    pub status: String,
    #[serde(default)]
    pub progress: Option<String>,
    #[serde(default)]
    pub is_test_call: Option<bool>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub cooldown_until: Option<Timestamp>,
    /// Type not shown by the spec (always null there): kept as raw JSON.
    #[serde(default)]
    pub delay: Option<Value>,
    /// Type not shown by the spec (always null there): kept as raw JSON.
    #[serde(default)]
    pub priority: Option<Value>,
    #[serde(default)]
    pub retry_intervals: Option<Vec<i64>>,
    #[serde(default)]
    pub attempts_remaining: Option<i64>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default, deserialize_with = "tolerant::null_as_default")]
    pub outbound_call_info: OutboundCallInfo,
    /// `None` when the key is absent: the attempts are then unknown, not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound_call_attempts: Option<Vec<Attempt>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_notifications: Option<Vec<Notification>>,
    /// Deprecated name of `call_notifications`; read only when that key is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound_calls_notifications: Option<Vec<Notification>>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl OutboundCall {
    /// The call's notifications, from `call_notifications` or else the deprecated field;
    /// `None` when the service sent neither (unknown, not empty).
    pub fn notifications(&self) -> Option<&[Notification]> {
        self.call_notifications
            .as_deref()
            .or(self.outbound_calls_notifications.as_deref())
    }

    /// A stable 64-bit fingerprint of everything the service said about the call (FNV-1a over
    /// its JSON form): equal for equal content, whatever `updated_at` says. Stable across
    /// builds and Rust versions, so it can be stored.
    pub fn content_hash(&self) -> u64 {
        // Hashed as it is serialized: the same bytes as `to_vec`, without holding them.
        let mut hash = Fnv1a::default();
        let _ = serde_json::to_writer(&mut hash, self);
        hash.0
    }

    /// True when some attempt lacks `call_outcomes` or `call_attempts_variables`
    /// (a summary list item): only the detail endpoint can complete it.
    pub fn lacks_attempt_children(&self) -> bool {
        self.outbound_call_attempts
            .as_deref()
            .is_none_or(|attempts| {
                attempts
                    .iter()
                    .any(|a| a.call_outcomes.is_none() || a.call_attempts_variables.is_none())
            })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutboundCallInfo {
    #[serde(default)]
    pub phone_number: Option<String>,
    #[serde(default)]
    pub full_name: Option<String>,
    #[serde(default)]
    pub first_name: Option<String>,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub phonetic_full_name: Option<String>,
    #[serde(default)]
    pub phonetic_first_name: Option<String>,
    #[serde(default)]
    pub phonetic_last_name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub event_date_time: Option<Timestamp>,
    #[serde(default)]
    pub external_id: Option<String>,
    #[serde(default, deserialize_with = "tolerant::null_as_default")]
    pub custom_parameters: CustomParameters,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub uid: Uuid,
    pub status: String,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub started_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub answered_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub ended_at: Option<Timestamp>,
    /// Unit not shown by the spec; stored as the service sends it.
    #[serde(default)]
    pub duration: Option<i64>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub created_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub updated_at: Option<Timestamp>,
    /// Structure not shown by the spec: kept as raw JSON.
    #[serde(default)]
    pub error_details: Option<Value>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub transfer_started_at: Option<Timestamp>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub transfer_answered_at: Option<Timestamp>,
    #[serde(default)]
    pub transfer_destination: Option<String>,
    /// `None` when the key is absent (summary list): unknown, not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_outcomes: Option<Vec<Outcome>>,
    /// `None` when the key is absent (summary list): unknown, not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_attempts_variables: Option<Vec<AttemptVariable>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub uid: Uuid,
    pub name: String,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub created_at: Option<Timestamp>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptVariable {
    pub uid: Uuid,
    pub name: String,
    /// A string in every shown case; any JSON value is kept.
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub created_at: Option<Timestamp>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub uid: Uuid,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub message_count: Option<i64>,
    #[serde(default, deserialize_with = "tolerant::blank_timestamp_as_none")]
    pub delivered_at: Option<Timestamp>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One page of `GET /schedules/{uid}/outbound_calls`. Read through `BoundedPage` (`page.rs`), so a
/// page can be refused at its first row beyond those asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallPage {
    pub data: Vec<OutboundCall>,
    /// The calls of `data` that did not fit (a page read leniently, `page.rs`), in
    /// page order; `data` holds the others.
    #[serde(skip)]
    pub misfits: Vec<Misfit>,
    pub pagination: Option<Pagination>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A listed call that does not fit the spec's types but whose uid and `updated_at` read
/// well (`misfit.rs`): set aside rather than written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    /// Its place in the page's `data`.
    pub index: usize,
    pub uid: Uuid,
    pub updated_at: Timestamp,
    /// What did not fit, as the decoder said it.
    pub reason: String,
    /// The call as the service listed it (JSON text).
    pub raw: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pagination {
    pub total_count: u64,
    pub total_pages: u64,
    pub page_size: u64,
    pub current_page: u64,
    #[serde(default)]
    pub links: PaginationLinks,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PaginationLinks {
    #[serde(rename = "self", default)]
    pub self_link: Option<String>,
    #[serde(default)]
    pub next: Option<String>,
    #[serde(default)]
    pub prev: Option<String>,
    #[serde(default)]
    pub last: Option<String>,
}

/// The service's error body (400 in the spec; our choice for every error status).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default)]
    pub errors: Vec<ErrorItem>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorItem {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ErrorSource>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorSource {
    #[serde(default)]
    pub pointer: Option<String>,
}

impl ErrorBody {
    pub fn new(title: impl Into<String>, detail: impl Into<String>) -> Self {
        ErrorBody {
            title: Some(title.into()),
            detail: Some(detail.into()),
            errors: Vec::new(),
        }
    }

    /// Adds one problem, optionally pointing at the offending field.
    pub fn with_error(
        mut self,
        title: impl Into<String>,
        detail: impl Into<String>,
        pointer: Option<String>,
    ) -> Self {
        self.errors.push(ErrorItem {
            title: Some(title.into()),
            detail: Some(detail.into()),
            source: pointer.map(|p| ErrorSource { pointer: Some(p) }),
        });
        self
    }
}

impl std::fmt::Display for ErrorBody {
    /// One line: title, detail, then each error with its pointer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = [self.title.as_deref(), self.detail.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        f.write_str(if head.is_empty() { "(no title)" } else { &head })?;
        for e in self.errors.iter().take(ERRORS_SHOWN) {
            let pointer = e
                .source
                .as_ref()
                .and_then(|s| s.pointer.as_deref())
                .unwrap_or("-");
            write!(
                f,
                "; [{pointer}] {}",
                [e.title.as_deref(), e.detail.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(": ")
            )?;
        }
        if self.errors.len() > ERRORS_SHOWN {
            write!(f, "; and {} more", self.errors.len() - ERRORS_SHOWN)?;
        }
        Ok(())
    }
}

/// The problems of an error body its message lists; the rest are counted. A refused chunk
/// of a thousand rows must not make a message of a thousand problems.
pub const ERRORS_SHOWN: usize = 20;

/// A single-object response: bare (`{…}`, our reading of the spec) or wrapped as
/// `{"data": {…}}` (accepted too, in case the service wraps it).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SingleObject<T> {
    Wrapped { data: T },
    Bare(T),
}

impl<T> SingleObject<T> {
    pub fn into_inner(self) -> T {
        match self {
            SingleObject::Wrapped { data } | SingleObject::Bare(data) => data,
        }
    }
}

/// Body of `POST /campaigns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewCampaign {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
}

/// Body of `POST /campaigns/{uid}/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewSchedule {
    pub name: String,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    pub retry_type: String,
    pub retry_intervals: Vec<i64>,
}

/// Body of `POST /schedules/{uid}/outbound_calls`, and one entry of the bulk body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewCall {
    pub phone_number: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phonetic_full_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phonetic_first_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phonetic_last_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

/// Body of `POST /schedules/{uid}/outbound_calls/bulk`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewCallsBulk {
    pub outbound_calls: Vec<NewCall>,
}

/// Response of the bulk create: the new uids in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkCreated {
    pub data: Vec<Uuid>,
}

/// Body of `PATCH /schedules/{uid}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulePatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_enabled: Option<bool>,
}

/// Response of an OAuth 2.0 token endpoint (RFC 6749 §5.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    #[serde(default)]
    pub token_type: Option<String>,
    /// Lifetime in seconds. Kept as sent (a number of any size or sign, or a numeric
    /// string, as some providers send): `auth.rs` decides what a usable lifetime is, so an
    /// odd value never fails the token request.
    #[serde(default)]
    pub expires_in: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// 64-bit FNV-1a.
#[cfg(test)]
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a::default();
    hash.feed(bytes);
    hash.0
}

/// 64-bit FNV-1a over whatever is written to it.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn feed(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    }
}

impl std::io::Write for Fnv1a {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.feed(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn outbound() -> String {
    "outbound".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A list item exactly as the spec shapes it, plus one field the models do not know.
    fn spec_call() -> Value {
        json!({
            "uid": "6f1c1d9e-3a43-4c0b-9f39-0d3c5a3f2b11",
            "external_id": "crm-42",
            "status": "completed",
            "progress": "answered",
            "is_test_call": false,
            "cooldown_until": null,
            "delay": null,
            "priority": null,
            "retry_intervals": [60, 120, 300],
            "attempts_remaining": 0,
            "created_at": "2026-01-31T09:00:00Z",
            "updated_at": "2026-01-31T09:05:00.250Z",
            "outbound_call_info": {
                "phone_number": "15550100",
                "full_name": "Ada Lovelace",
                "first_name": "Ada",
                "last_name": "Lovelace",
                "phonetic_full_name": "", "phonetic_first_name": "", "phonetic_last_name": "",
                "email": "ada@example.com",
                "event_date_time": null,
                "external_id": "crm-42",
                "custom_parameters": {"plan": "gold"}
            },
            "outbound_call_attempts": [{
                "uid": "9b2e7a55-1111-4c0b-9f39-0d3c5a3f2b11",
                "status": "hangup",
                "started_at": "2026-01-31T09:01:00Z",
                "answered_at": "2026-01-31T09:01:05Z",
                "ended_at": "2026-01-31T09:03:00Z",
                "duration": 115,
                "created_at": "2026-01-31T09:01:00Z",
                "updated_at": "2026-01-31T09:03:00Z",
                "error_details": null,
                "transfer_started_at": null,
                "transfer_answered_at": null,
                "transfer_destination": null,
                "call_outcomes": [{"uid": "0b2e7a55-2222-4c0b-9f39-0d3c5a3f2b11", "name": "interested", "created_at": "2026-01-31T09:03:00Z"}],
                "call_attempts_variables": [{"uid": "0b2e7a55-3333-4c0b-9f39-0d3c5a3f2b11", "name": "callback", "value": "yes", "status": "confirmed", "created_at": "2026-01-31T09:02:00Z"}]
            }],
            "call_notifications": [{"uid": "0b2e7a55-4444-4c0b-9f39-0d3c5a3f2b11", "status": "delivered", "message_count": 1, "delivered_at": "2026-01-31T09:04:00Z"}],
            "sentiment": {"score": 0.9}
        })
    }

    #[test]
    fn call_round_trips_with_unknown_fields_kept() {
        let value = spec_call();
        let call: OutboundCall = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(call.extra.get("sentiment"), Some(&json!({"score": 0.9})));
        assert_eq!(
            call.outbound_call_info.custom_parameters["plan"],
            json!("gold")
        );
        let back = serde_json::to_value(&call).unwrap();
        let mut expected = value;
        expected["updated_at"] = json!("2026-01-31T09:05:00.250Z");
        assert_eq!(back, expected);
    }

    #[test]
    fn null_and_blank_mean_nothing_but_wrong_values_are_errors() {
        let mut value = spec_call();
        value["outbound_call_info"]["custom_parameters"] = Value::Null;
        value["cooldown_until"] = json!("");
        value["outbound_call_attempts"][0]["transfer_started_at"] = json!("  ");
        let call: OutboundCall = serde_json::from_value(value.clone()).unwrap();
        assert!(call.outbound_call_info.custom_parameters.is_empty());
        assert_eq!(call.cooldown_until, None);
        let attempts = call.outbound_call_attempts.as_deref().unwrap();
        assert_eq!(attempts[0].transfer_started_at, None);

        value["outbound_call_info"] = Value::Null;
        let call: OutboundCall = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(call.outbound_call_info, OutboundCallInfo::default());

        for wrong in [json!("soon"), json!(5), json!("2026-11-22T10:00:00")] {
            value["cooldown_until"] = wrong.clone();
            let read = serde_json::from_value::<OutboundCall>(value.clone());
            assert!(read.is_err(), "{wrong} must be rejected");
        }
    }

    #[test]
    fn missing_children_differ_from_empty_children() {
        let mut value = spec_call();
        let attempt = &mut value["outbound_call_attempts"][0];
        attempt.as_object_mut().unwrap().remove("call_outcomes");
        attempt["call_attempts_variables"] = json!([]);
        let call: OutboundCall = serde_json::from_value(value).unwrap();
        let a = &call.outbound_call_attempts.as_ref().unwrap()[0];
        assert_eq!(a.call_outcomes, None);
        assert_eq!(a.call_attempts_variables, Some(vec![]));
        assert!(call.lacks_attempt_children());
    }

    #[test]
    fn deprecated_notifications_read_only_when_current_absent() {
        let mut value = spec_call();
        value["outbound_calls_notifications"] = json!([]);
        let call: OutboundCall = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(call.notifications().map(<[_]>::len), Some(1));

        value.as_object_mut().unwrap().remove("call_notifications");
        value["outbound_calls_notifications"] =
            json!([{"uid": "0b2e7a55-5555-4c0b-9f39-0d3c5a3f2b11"}]);
        let call: OutboundCall = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(call.notifications().map(<[_]>::len), Some(1));
        assert!(call.extra.is_empty() || !call.extra.contains_key("outbound_calls_notifications"));

        value
            .as_object_mut()
            .unwrap()
            .remove("outbound_calls_notifications");
        let call: OutboundCall = serde_json::from_value(value).unwrap();
        assert_eq!(call.notifications(), None);
    }

    #[test]
    fn missing_required_fields_and_wrong_types_are_errors() {
        for key in ["uid", "status", "updated_at", "created_at"] {
            let mut value = spec_call();
            value.as_object_mut().unwrap().remove(key);
            assert!(
                serde_json::from_value::<OutboundCall>(value).is_err(),
                "{key}"
            );
        }
        let mut value = spec_call();
        value["attempts_remaining"] = json!("four");
        assert!(serde_json::from_value::<OutboundCall>(value).is_err());
        let mut value = spec_call();
        value["updated_at"] = json!("2026-01-31 09:05:00");
        assert!(serde_json::from_value::<OutboundCall>(value).is_err());
    }

    #[test]
    fn page_and_error_body_parse_spec_shapes() {
        let page: CallPage = serde_json::from_value(json!({
            "data": [spec_call()],
            "pagination": {"total_count": 1, "total_pages": 1, "page_size": 50, "current_page": 1,
                "links": {"self": "http://x/a?page=1", "next": null, "prev": null, "last": "http://x/a?page=1"}}
        }))
        .unwrap();
        let p = page.pagination.unwrap();
        assert_eq!((p.total_count, p.links.next), (1, None));

        let body: ErrorBody = serde_json::from_value(json!({
            "title": "Invalid request", "detail": "1 entry is invalid",
            "errors": [{"title": "Invalid value", "detail": "phone number must be +<digits>",
                        "source": {"pointer": "/outbound_calls/3/phone_number"}}]
        }))
        .unwrap();
        assert_eq!(
            body.to_string(),
            "Invalid request: 1 entry is invalid; [/outbound_calls/3/phone_number] Invalid value: phone number must be +<digits>"
        );
    }

    #[test]
    fn content_hash_follows_content_not_updated_at() {
        let call: OutboundCall = serde_json::from_value(spec_call()).unwrap();
        let same = call.clone();
        assert_eq!(call.content_hash(), same.content_hash());
        let mut changed = call.clone();
        changed.progress = Some("unanswered".into());
        assert_ne!(call.content_hash(), changed.content_hash());
        // A known value pins the algorithm: stored hashes must stay valid across releases.
        assert_eq!(fnv1a(b"callsync"), 0xe907_cb28_0a4a_1286);
        // Hashed as serialized: the same as hashing the JSON bytes whole.
        assert_eq!(
            call.content_hash(),
            fnv1a(&serde_json::to_vec(&call).unwrap())
        );
    }

    #[test]
    fn single_objects_are_read_bare_or_wrapped() {
        let flow = json!({"uid": "0b2e7a55-6666-4c0b-9f39-0d3c5a3f2b11", "campaign_uid": "0b2e7a55-7777-4c0b-9f39-0d3c5a3f2b11"});
        let bare: CallFlow = serde_json::from_value::<SingleObject<CallFlow>>(flow.clone())
            .unwrap()
            .into_inner();
        let wrapped: CallFlow =
            serde_json::from_value::<SingleObject<CallFlow>>(json!({ "data": flow }))
                .unwrap()
                .into_inner();
        assert_eq!(bare, wrapped);
        assert_eq!(
            bare.extra["uid"],
            json!("0b2e7a55-6666-4c0b-9f39-0d3c5a3f2b11")
        );
    }
}
