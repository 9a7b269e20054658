//! The write half of the service (endpoints 1–6): call flows, campaigns, schedules, calls.
//!
//! Reads and idempotent writes (enable, disable) are retried like the sync's requests; a
//! create is repeated only when the service certainly did not receive it (a 429, no
//! connection), because the service offers no idempotency key. What to do after an
//! ambiguous failure (a timeout, a 5xx) is the caller's choice: the upload asks the list
//! endpoint by `external_id` whether its calls exist before it sends them again.

use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::client::{ApiClient, Request};
use super::error::ApiError;
use super::models::{
    BulkCreated, CallFlow, Campaign, NewCall, NewCallsBulk, NewCampaign, NewSchedule, OutboundCall,
    Schedule, SchedulePatch, SingleObject,
};
use super::retry::Counters;

/// The spec's limit on entries per bulk request.
pub const MAX_BULK: usize = 1_000;

impl ApiClient {
    /// `GET /api/v1/call_flows/{uid}`.
    pub async fn call_flow(&self, uid: Uuid, counters: &Counters) -> Result<CallFlow, ApiError> {
        let url = self.endpoint(&["call_flows", &uid.to_string()]);
        self.get_json::<SingleObject<CallFlow>>(url, &[], counters)
            .await
            .map(SingleObject::into_inner)
    }

    /// `POST /api/v1/campaigns`.
    pub async fn create_campaign(
        &self,
        campaign: &NewCampaign,
        counters: &Counters,
    ) -> Result<Campaign, ApiError> {
        let url = self.endpoint(&["campaigns"]);
        self.create(url, &[], campaign, counters).await
    }

    /// `POST /api/v1/campaigns/{uid}/schedules`.
    pub async fn create_schedule(
        &self,
        campaign: Uuid,
        schedule: &NewSchedule,
        counters: &Counters,
    ) -> Result<Schedule, ApiError> {
        let url = self.endpoint(&["campaigns", &campaign.to_string(), "schedules"]);
        self.create(url, &[], schedule, counters).await
    }

    /// `PATCH /api/v1/schedules/{uid}` with `is_enabled`: the same answer however often it
    /// is sent, so it is retried like a read.
    pub async fn set_schedule_enabled(
        &self,
        schedule: Uuid,
        enabled: bool,
        counters: &Counters,
    ) -> Result<Schedule, ApiError> {
        let url = self.endpoint(&["schedules", &schedule.to_string()]);
        let patch = SchedulePatch {
            is_enabled: Some(enabled),
        };
        self.send_json(
            Method::PATCH,
            url,
            &[],
            &patch,
            ApiError::is_transient,
            counters,
        )
        .await
    }

    /// `POST /api/v1/schedules/{uid}/outbound_calls`. The answer keys custom parameters by
    /// the call flow's numeric parameter ids, not by name (spec, endpoint 4).
    pub async fn create_call(
        &self,
        schedule: Uuid,
        call: &NewCall,
        force: bool,
        counters: &Counters,
    ) -> Result<OutboundCall, ApiError> {
        let url = self.endpoint(&["schedules", &schedule.to_string(), "outbound_calls"]);
        self.create(url, &force_query(force), call, counters).await
    }

    /// `POST /api/v1/schedules/{uid}/outbound_calls/bulk`: all or nothing; the new uids in
    /// the order of `calls` (1 to [`MAX_BULK`] of them).
    pub async fn create_calls(
        &self,
        schedule: Uuid,
        calls: Vec<NewCall>,
        force: bool,
        counters: &Counters,
    ) -> Result<Vec<Uuid>, ApiError> {
        let url = self.endpoint(&["schedules", &schedule.to_string(), "outbound_calls", "bulk"]);
        let sent = calls.len();
        let body = NewCallsBulk {
            outbound_calls: calls,
        };
        let created: BulkCreated = self
            .create_raw(url.clone(), &force_query(force), &body, counters)
            .await?;
        if created.data.len() != sent {
            return Err(ApiError::Protocol {
                request: format!("POST {}", url.path()),
                problem: format!(
                    "{sent} calls sent, {} uids returned; the service must return one uid per call",
                    created.data.len()
                ),
            });
        }
        Ok(created.data)
    }

    /// A create: retried only when the service certainly did not receive it.
    async fn create<T: DeserializeOwned + Send + 'static>(
        &self,
        url: url::Url,
        query: &[(&'static str, String)],
        body: &impl Serialize,
        counters: &Counters,
    ) -> Result<T, ApiError> {
        self.create_raw::<SingleObject<T>>(url, query, body, counters)
            .await
            .map(SingleObject::into_inner)
    }

    async fn create_raw<T: DeserializeOwned + Send + 'static>(
        &self,
        url: url::Url,
        query: &[(&'static str, String)],
        body: &impl Serialize,
        counters: &Counters,
    ) -> Result<T, ApiError> {
        self.send_json(
            Method::POST,
            url,
            query,
            body,
            ApiError::never_reached_the_service,
            counters,
        )
        .await
    }

    async fn send_json<T: DeserializeOwned + Send + 'static>(
        &self,
        method: Method,
        url: url::Url,
        query: &[(&'static str, String)],
        body: &impl Serialize,
        worth_retrying: fn(&ApiError) -> bool,
        counters: &Counters,
    ) -> Result<T, ApiError> {
        let json = serde_json::to_vec(body).map_err(|source| ApiError::Encode {
            request: format!("{method} {}", url.path()),
            cause: source,
        })?;
        let request = Request {
            method,
            url,
            query,
            json: Some(json.into()),
        };
        Ok(self
            .exchange::<T>(&request, worth_retrying, counters)
            .await?
            .0)
    }
}

fn force_query(force: bool) -> Vec<(&'static str, String)> {
    if force {
        vec![("force", "true".to_owned())]
    } else {
        Vec::new()
    }
}

/// What is wrong with one field of a call to be created, found before sending it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field (`phone_number`, or a custom parameter's name).
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Every problem the spec lets us find before the service does: a phone number that is not
/// `+` and 7 to 15 digits ([`PHONE_DIGITS`]), a custom parameter that looks like a datetime but carries no zone.
pub fn new_call_problems(call: &NewCall) -> Vec<FieldProblem> {
    let mut problems = Vec::new();
    if let Some(reason) = phone_problem(&call.phone_number) {
        problems.push(FieldProblem {
            field: "phone_number".into(),
            reason,
        });
    }
    for (name, value) in &call.custom_parameters {
        if looks_like_a_datetime(value) && super::Timestamp::parse(value).is_err() {
            problems.push(FieldProblem {
                field: name.clone(),
                reason: format!(
                    "{value:?} is a datetime without a zone; add Z or an offset like +02:00"
                ),
            });
        }
    }
    problems
}

/// The digits an international number may have after its `+`: E.164 allows at most 15
/// (country code included), and no country's numbers are shorter than 7 with it. The service
/// refuses a number outside this (its bulk endpoint then refuses the whole chunk), so the
/// check before sending refuses it too.
pub const PHONE_DIGITS: std::ops::RangeInclusive<usize> = 7..=15;

fn phone_problem(phone: &str) -> Option<String> {
    let ok = phone.strip_prefix('+').is_some_and(|digits| {
        PHONE_DIGITS.contains(&digits.len()) && digits.chars().all(|c| c.is_ascii_digit())
    });
    (!ok).then(|| {
        format!(
            "{phone:?} is not in international form (E.164): + followed by {} to {} digits, e.g. +15550100",
            PHONE_DIGITS.start(),
            PHONE_DIGITS.end()
        )
    })
}

/// `YYYY-MM-DD` followed by a time (`T` or a space, then `hh:mm`): what a spreadsheet writes
/// for a datetime. A plain date is not one.
fn looks_like_a_datetime(value: &str) -> bool {
    let b = value.trim().as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    (0..4).all(digit)
        && at(4, b'-')
        && digit(5)
        && digit(6)
        && at(7, b'-')
        && digit(8)
        && digit(9)
        && (at(10, b'T') || at(10, b't') || at(10, b' '))
        && digit(11)
        && digit(12)
        && at(13, b':')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::client::fake::{FakeService, Reply};
    use crate::config::{AuthConfig, Secret};

    const CAMPAIGN: &str = r#"{"uid":"0b6f3a52-7a0e-4d5e-9a51-8c1d2f3e4a5b","name":"n","is_enabled":false,"type":"scheduled_call","direction":"outbound","created_at":"2026-01-31T09:00:00Z","updated_at":"2026-01-31T09:00:00Z"}"#;

    /// Creates a campaign against a service answering `first`, then 201.
    async fn create_after(first: u16) -> (Result<Campaign, ApiError>, usize) {
        let fake = FakeService::start(
            |_, _| Reply::status(500, ""),
            move |n, _| {
                if n == 0 {
                    Reply::status(first, "")
                } else {
                    Reply::status(201, CAMPAIGN)
                }
            },
        )
        .await;
        let client = ApiClient::new(&fake.config(AuthConfig::Static(Secret::new("t")))).unwrap();
        let new = NewCampaign {
            name: "n".into(),
            kind: "scheduled_call".into(),
            direction: None,
        };
        let result = client.create_campaign(&new, &Counters::default()).await;
        (result, fake.api_requests().len())
    }

    #[tokio::test]
    async fn a_create_is_repeated_only_when_the_service_certainly_did_not_act() {
        // 429: refused before anything was done; sent again.
        let (result, sent) = create_after(429).await;
        assert_eq!(result.unwrap().name, "n");
        assert_eq!(sent, 2);
        // 500 or 503: it may have been created; sending again could make two.
        for ambiguous in [500, 502, 503] {
            let (result, sent) = create_after(ambiguous).await;
            assert_eq!(
                result.unwrap_err().status().map(|s| s.as_u16()),
                Some(ambiguous)
            );
            assert_eq!(sent, 1, "{ambiguous}");
        }
    }

    fn call(phone: &str, params: &[(&str, &str)]) -> NewCall {
        NewCall {
            phone_number: phone.into(),
            custom_parameters: params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..NewCall::default()
        }
    }

    #[test]
    fn phone_numbers_are_plus_and_7_to_15_digits() {
        assert!(new_call_problems(&call("+15550100", &[])).is_empty());
        assert!(new_call_problems(&call("+1234567", &[])).is_empty());
        assert!(new_call_problems(&call("+123456789012345", &[])).is_empty());
        for bad in [
            "15550100",
            "+1 555 0100",
            "+",
            "",
            "+1555abc",
            "+123456",
            "+1234567890123456",
            "+1234567890123456789",
        ] {
            let problems = new_call_problems(&call(bad, &[]));
            assert_eq!(problems.len(), 1, "{bad:?}");
            assert_eq!(problems[0].field, "phone_number");
        }
    }

    #[test]
    fn datetimes_need_a_zone_other_values_pass() {
        let ok = [
            ("due_at", "2026-03-01T10:00:00Z"),
            ("due_at", "2026-03-01T10:00:00+02:00"),
            ("day", "2026-03-01"),
            ("plan", "gold"),
            ("note", "2026-03-01 is the day"),
        ];
        assert!(new_call_problems(&call("+15550100", &ok)).is_empty());
        let problems = new_call_problems(&call(
            "+15550100",
            &[
                ("due_at", "2026-03-01T10:00:00"),
                ("seen", "2026-03-01 10:00"),
            ],
        ));
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["due_at", "seen"]);
        assert!(
            problems[0].reason.contains("without a zone"),
            "{}",
            problems[0]
        );
    }
}
