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

use super::client::ApiClient;
use super::error::ApiError;
use super::exchange::Request;
use super::retry::Counters;
use crate::service::models::{
    BulkCreated, CallFlow, Campaign, NewCall, NewCallsBulk, NewCampaign, NewSchedule, OutboundCall,
    Schedule, SchedulePatch, SingleObject,
};

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
    /// the order of `calls` (1 to [`MAX_BULK`](crate::service::MAX_BULK) of them).
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
            .value)
    }
}

fn force_query(force: bool) -> Vec<(&'static str, String)> {
    if force {
        vec![("force", "true".to_owned())]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fake::{FakeService, Reply};
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
        let client = ApiClient::new(
            &fake.config(AuthConfig::Static(Secret::new("t"))),
            &AuthConfig::Static(Secret::new("t")),
        )
        .unwrap();
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
}
