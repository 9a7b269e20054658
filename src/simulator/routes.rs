//! The HTTP face: axum handlers for the spec's eight endpoints and an OAuth token endpoint.
//!
//! Strict where the spec is silent (our documented choices): an unlisted query parameter is
//! `400 Unexpected field: <name>`; a malformed integer, boolean or zone-less timestamp, a
//! page below 1 or a page_size outside 1..=100 is a 400; creating calls on an enabled
//! schedule without `force=true` is a 409; every error body has the spec's error shape.
//! Call-creation bodies are checked field by field in `validate.rs`, so every problem points at
//! its field.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::Value;
use uuid::Uuid;

use super::auth::token;
use super::life;
use super::lone_surrogate;
use super::mutex::lock;
use super::query::{ListParams, parse_list_query, parse_post_query};
use super::reply::{
    Fail, JsonBody, Reply, bad_request, fail, json_body, json_errors, not_found, not_found_error,
    parse_uid,
};
use super::shared::Shared;
use super::state::Refusal;
use super::tie_order;
use super::validate::{self, Problem};
use crate::service::{
    BulkCreated, CallPage, ErrorBody, NewSchedule, Pagination, PaginationLinks, Schedule,
    SchedulePatch, Timestamp,
};

/// Largest request body accepted. axum's default (2 MB) is smaller than a valid 1,000-entry
/// bulk request with long names and parameters; 32 MiB leaves room for any valid one.
pub const BODY_LIMIT: usize = 32 * 1024 * 1024;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/oauth/token", post(token))
        .route("/api/v1/call_flows/{uid}", get(call_flow))
        .route("/api/v1/campaigns", post(create_campaign))
        .route("/api/v1/campaigns/{uid}/schedules", post(create_schedule))
        .route("/api/v1/schedules/{uid}", patch(patch_schedule))
        .route(
            "/api/v1/schedules/{uid}/outbound_calls",
            get(list_calls).post(create_call),
        )
        .route(
            "/api/v1/schedules/{uid}/outbound_calls/bulk",
            post(bulk_create),
        )
        .route("/api/v1/outbound_calls/{uid}", get(get_call))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Inside the fault layer, so an injected 502 keeps its proxy's HTML page.
        .layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            super::faults::middleware,
        ))
        .with_state(shared)
}

async fn call_flow(State(shared): State<Arc<Shared>>, Path(uid): Path<String>) -> Reply {
    let uid = parse_uid(&uid, "call flow")?;
    match shared.state().call_flows.get(&uid) {
        Some(flow) => Ok(Json(flow.clone()).into_response()),
        None => Err(not_found_error(format!("call flow {uid}"))),
    }
}

async fn create_campaign(State(shared): State<Arc<Shared>>, JsonBody(body): JsonBody) -> Reply {
    let value: Value = json_body(&body)?;
    if value.get("is_enabled").is_some() {
        return Err(bad_request(
            ErrorBody::new("Invalid request", "is_enabled cannot be set on creation").with_error(
                "Invalid value",
                "is_enabled is not allowed when creating a campaign",
                Some("/is_enabled".into()),
            ),
        ));
    }
    let new: crate::service::NewCampaign = json_body(&body)?;
    let mut state = shared.state();
    let now = state.now();
    let mut campaign = super::seed::campaign(&mut *shared.rng(), now);
    campaign.name = new.name;
    campaign.kind = new.kind;
    campaign.direction = new.direction.unwrap_or_else(|| "outbound".into());
    state.campaigns.insert(campaign.uid, campaign.clone());
    Ok((StatusCode::CREATED, Json(campaign)).into_response())
}

async fn create_schedule(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    JsonBody(body): JsonBody,
) -> Reply {
    let campaign = parse_uid(&uid, "campaign")?;
    let new: NewSchedule = json_body(&body)?;
    let mut state = shared.state();
    if !state.campaigns.contains_key(&campaign) {
        return Err(not_found_error(format!("campaign {campaign}")));
    }
    let now = state.now();
    let schedule = Schedule {
        uid: life::uid(&mut *shared.rng()),
        name: new.name,
        starts_at: new.starts_at,
        ends_at: new.ends_at,
        retry_type: new.retry_type,
        retry_intervals: new.retry_intervals,
        is_enabled: false,
        is_auto: false,
        created_at: now,
        updated_at: now,
        extra: Default::default(),
    };
    state.add_schedule(schedule.clone());
    Ok((StatusCode::CREATED, Json(schedule)).into_response())
}

async fn patch_schedule(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    JsonBody(body): JsonBody,
) -> Reply {
    let uid = parse_uid(&uid, "schedule")?;
    let patch: SchedulePatch = json_body(&body)?;
    let mut state = shared.state();
    let now = state.now();
    match state.schedules.get_mut(&uid) {
        Some(s) => {
            if let Some(enabled) = patch.is_enabled {
                s.schedule.is_enabled = enabled;
                s.schedule.updated_at = now;
            }
            Ok(Json(s.schedule.clone()).into_response())
        }
        None => Err(not_found_error(format!("schedule {uid}"))),
    }
}

/// Checks the schedule exists and accepts new calls (disabled, or `force=true`).
fn check_creatable(shared: &Shared, schedule: Uuid, force: bool) -> Result<(), Fail> {
    shared
        .state()
        .creatable(schedule, force)
        .map(drop)
        .map_err(|refusal| refused(refusal, schedule))
}

fn refused(refusal: Refusal, schedule: Uuid) -> Fail {
    match refusal {
        Refusal::NoSuchSchedule => not_found_error(format!("schedule {schedule}")),
        Refusal::Enabled => fail(
            StatusCode::CONFLICT,
            "Schedule is enabled",
            "calls can be added only while the schedule is disabled, unless force=true is sent",
        ),
    }
}

fn invalid_entries(problems: Vec<Problem>) -> Fail {
    let n = problems.len();
    let body = problems.into_iter().fold(
        ErrorBody::new(
            "Invalid request",
            format!("{n} invalid value(s); nothing was created"),
        ),
        |body, p| body.with_error(p.title, p.detail, Some(p.pointer)),
    );
    bad_request(body)
}

async fn create_call(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> Reply {
    let schedule = parse_uid(&uid, "schedule")?;
    let force = parse_post_query(query.as_deref()).map_err(bad_request)?;
    let body: Value = json_body(&body)?;
    check_creatable(&shared, schedule, force)?;
    let new = validate::single(&body).map_err(invalid_entries)?;
    let mut state = shared.state();
    let now = state.now();
    let created = state
        .create_calls(schedule, vec![new], force, now, &mut *shared.rng())
        .map_err(|refusal| refused(refusal, schedule))?;
    let call = created
        .first()
        .and_then(|uid| state.call(uid))
        .map(|c| c.call.clone())
        .ok_or_else(|| {
            fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Server error",
                "the new call was not stored",
            )
        })?;
    // The single-create response keys custom parameters by their numeric id.
    let mut response = call;
    response.outbound_call_info.custom_parameters = response
        .outbound_call_info
        .custom_parameters
        .into_iter()
        .map(|(name, value)| (state.parameter_id(&name).to_string(), value))
        .collect();
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

async fn bulk_create(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> Reply {
    let schedule = parse_uid(&uid, "schedule")?;
    let force = parse_post_query(query.as_deref()).map_err(bad_request)?;
    let body: Value = json_body(&body)?;
    check_creatable(&shared, schedule, force)?;
    let entries = validate::bulk(&body).map_err(invalid_entries)?;
    let mut state = shared.state();
    let now = state.now();
    let uids = state
        .create_calls(schedule, entries, force, now, &mut *shared.rng())
        .map_err(|refusal| refused(refusal, schedule))?;
    Ok((StatusCode::CREATED, Json(BulkCreated { data: uids })).into_response())
}

async fn get_call(State(shared): State<Arc<Shared>>, Path(uid): Path<String>) -> Reply {
    let uid = parse_uid(&uid, "outbound call")?;
    let rate = shared.faults().lone_surrogate_rate;
    if let Some(frozen) = lock(&shared.frozen_details).get(&uid) {
        return Ok(lone_surrogate::detail(frozen.clone(), rate));
    }
    let mut state = shared.state();
    state.apply_due();
    match state.call(&uid) {
        Some(c) => Ok(lone_surrogate::detail(c.call.clone(), rate)),
        None => Err(not_found_error(format!("outbound call {uid}"))),
    }
}

async fn list_calls(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    RawQuery(query): RawQuery,
) -> Reply {
    let schedule = parse_uid(&uid, "schedule")?;
    let params = parse_list_query(query.as_deref()).map_err(bad_request)?;
    let broken = shared.broken(schedule);
    if let Some(bad) = broken.filter(|bad| bad.replaces_the_page()) {
        return Ok(bad.respond());
    }
    let page = {
        let mut state = shared.state();
        state.apply_due();
        if !state.schedules.contains_key(&schedule) {
            return Err(not_found_error(format!("schedule {schedule}")));
        }
        let request = shared
            .lists
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        select_page(
            &state,
            schedule,
            &params,
            shared.summary_list,
            |skip, size| shared.tie_order.seed(request, skip, size),
        )
    };
    let (data, total) = page;
    let pagination = pagination(&shared, schedule, &params, total);
    let page = CallPage {
        data,
        misfits: Vec::new(),
        pagination: Some(pagination),
        extra: Default::default(),
    };
    Ok(match (broken, shared.lie(schedule)) {
        (Some(bad), _) => bad.garble(&page),
        (None, Some(lie)) => lie.tell(&page, shared.clock.now()),
        (None, None) => lone_surrogate::page(page, shared.faults().lone_surrogate_rate),
    })
}

/// The page's calls and the total number of matches.
fn select_page(
    state: &super::state::State,
    schedule: Uuid,
    params: &ListParams,
    summary: bool,
    tie_seed: impl Fn(usize, usize) -> Option<u64>,
) -> (Vec<crate::service::OutboundCall>, u64) {
    let size = params.page_size as usize;
    let skip = (params.page as usize - 1).saturating_mul(size);
    let (total, page) = match params.updated_after {
        // Keyset paging reads from a point in the sorted index: only the page's calls are
        // looked up (a full re-read would otherwise cost the simulator n²/page lookups).
        // Ties are ordered as the simulator's tie order says: only those the page touches
        // (or, with filters, every one) are reordered.
        Some(after) => {
            let keys = state.keys_from(schedule, after);
            let seed = tie_seed(skip, size);
            let (from, until) = if params.filter_is_empty() {
                (skip, skip.saturating_add(size))
            } else {
                (0, keys.len())
            };
            let (ordered, start) = tie_order::reorder(keys, from, until, seed);
            let calls = ordered.iter().filter_map(|(_, uid)| state.call(uid));
            page_of(calls, keys.len(), params, skip, size, start)
        }
        None => {
            // Without updated_after (not shown by the spec): creation order, then uid.
            let mut all: Vec<&super::state::CallState> = state
                .keys_from(schedule, Timestamp::EPOCH)
                .iter()
                .filter_map(|(_, uid)| state.call(uid))
                .collect();
            all.sort_by_key(|c| (c.call.created_at, c.call.uid));
            let len = all.len();
            page_of(all.into_iter(), len, params, skip, size, 0)
        }
    };
    let data = page
        .into_iter()
        .map(|c| {
            let mut call = c.call.clone();
            if summary {
                for attempt in call.outbound_call_attempts.iter_mut().flatten() {
                    attempt.call_outcomes = None;
                    attempt.call_attempts_variables = None;
                }
            }
            call
        })
        .collect();
    (data, total)
}

/// The calls of page `skip / size` among `candidates` (`len` of them before filters, the
/// first at position `start`) and how many match the request's filters.
fn page_of<'a>(
    candidates: impl Iterator<Item = &'a super::state::CallState>,
    len: usize,
    params: &ListParams,
    skip: usize,
    size: usize,
    start: usize,
) -> (u64, Vec<&'a super::state::CallState>) {
    if params.filter_is_empty() {
        let page = candidates.skip(skip.saturating_sub(start)).take(size);
        return (len as u64, page.collect());
    }
    let mut total = 0;
    let mut page = Vec::with_capacity(size);
    for call in candidates.filter(|c| params.matches(c)) {
        if total >= skip && page.len() < size {
            page.push(call);
        }
        total += 1;
    }
    (total as u64, page)
}

fn pagination(shared: &Shared, schedule: Uuid, params: &ListParams, total: u64) -> Pagination {
    let size = u64::from(params.page_size);
    let pages = total.div_ceil(size);
    let page = u64::from(params.page);
    let link = |p: u64| {
        let mut url = shared.base_url.clone();
        url.set_path(&format!("/api/v1/schedules/{schedule}/outbound_calls"));
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in &params.raw_pairs {
                if k != "page" {
                    q.append_pair(k, v);
                }
            }
            q.append_pair("page", &p.to_string());
        }
        url.to_string()
    };
    Pagination {
        total_count: total,
        total_pages: pages,
        page_size: size,
        current_page: page,
        links: PaginationLinks {
            self_link: Some(link(page)),
            next: (page < pages).then(|| link(page + 1)),
            prev: (page > 1 && pages > 0).then(|| link((page - 1).min(pages))),
            last: Some(link(pages.max(1))),
        },
    }
}
