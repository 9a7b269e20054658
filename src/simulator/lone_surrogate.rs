//! Lone surrogates in the served text (`FaultPlan::lone_surrogate_rate`): a share of the
//! calls is served, by the list and the detail endpoint alike, with half a surrogate pair in
//! its text, as a JavaScript or Java service writes a string it cut between the two halves
//! of an emoji. JSON allows the escape; no UTF-8 text holds what it writes.
//!
//! Invariants:
//! - which calls, and what each gets, depends on the call's uid and the rate alone
//!   ([`LoneSurrogate::of`]): every request shows a call the same way, and a test knows what
//!   was served;
//! - the simulator's truth is the call without them: only the served body holds them.
//!
//! serde_json cannot write a lone surrogate from a Rust `String`, so the call is serialized
//! with an ASCII mark where the escape goes, and each mark then becomes its escape in the
//! serialized body.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::reply::error;
use crate::service::{CallPage, OutboundCall};

/// What a chosen call's `first_name` ends in; each a way a string cut mid-emoji looks. Its
/// first custom parameter holding text (in key order) starts with a lone high surrogate too,
/// followed by the parameter's text (`\udbff`), whatever the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoneSurrogate {
    /// A high surrogate at the end of the string (`\ud83d`).
    HighAtTheEnd,
    /// A low surrogate with no high before it (`\ude00`).
    LoneLow,
    /// A high surrogate followed by an escape that is not a low one (`\ud83d\u00e9`).
    HighBeforeAnotherEscape,
    /// A whole emoji, then the first half of another (`\ud83d\ude00\ud83d`).
    EmojiThenHalf,
}

/// What a chosen call's first custom parameter holding text (in key order) starts with: a
/// high surrogate followed by text.
const PARAMETER_ESCAPE: &str = "\\udbff";

/// The mark [`PARAMETER_ESCAPE`] replaces. ASCII that needs no escape and that no seeded
/// text holds, as the names' marks.
const PARAMETER_MARK: &str = "~~lone-surrogate-parameter~~";

/// The low 53 bits of a uid's last eight bytes (random in a v4 uid): a share in [0, 1).
const SHARE_BITS: u32 = 53;

impl LoneSurrogate {
    const ALL: [LoneSurrogate; 4] = [
        LoneSurrogate::HighAtTheEnd,
        LoneSurrogate::LoneLow,
        LoneSurrogate::HighBeforeAnotherEscape,
        LoneSurrogate::EmojiThenHalf,
    ];

    /// What the call `uid` is served with at `rate` (a share of the calls, 0 to 1); `None`
    /// for a call served as it is.
    pub fn of(uid: Uuid, rate: f64) -> Option<LoneSurrogate> {
        let bits = uid.as_u128();
        let share = (bits as u64 & ((1 << SHARE_BITS) - 1)) as f64 / (1u64 << SHARE_BITS) as f64;
        let form = Self::ALL[((bits >> 64) as usize) % Self::ALL.len()];
        (share < rate).then_some(form)
    }

    /// The escapes written at the end of the call's `first_name`, as the body holds them.
    pub fn escape(self) -> &'static str {
        match self {
            LoneSurrogate::HighAtTheEnd => "\\ud83d",
            LoneSurrogate::LoneLow => "\\ude00",
            LoneSurrogate::HighBeforeAnotherEscape => "\\ud83d\\u00e9",
            LoneSurrogate::EmojiThenHalf => "\\ud83d\\ude00\\ud83d",
        }
    }

    fn mark(self) -> &'static str {
        match self {
            LoneSurrogate::HighAtTheEnd => "~~lone-surrogate-high~~",
            LoneSurrogate::LoneLow => "~~lone-surrogate-low~~",
            LoneSurrogate::HighBeforeAnotherEscape => "~~lone-surrogate-high-escape~~",
            LoneSurrogate::EmojiThenHalf => "~~lone-surrogate-emoji-half~~",
        }
    }
}

/// A list page as served at `rate`. A page with no call picked is served as the endpoint
/// serves any, without the marks' extra passes over the body (the benchmarks' simulator
/// serves every page through here).
pub(super) fn page(mut page: CallPage, rate: f64) -> Response {
    let mut marked = false;
    for call in &mut page.data {
        marked |= mark(call, rate);
    }
    if !marked {
        return Json(page).into_response();
    }
    served(&page)
}

/// A call's detail as served at `rate`.
pub(super) fn detail(mut call: OutboundCall, rate: f64) -> Response {
    if !mark(&mut call, rate) {
        return Json(call).into_response();
    }
    served(&call)
}

/// Marks where the call's escapes go, if `rate` picks it (then true).
fn mark(call: &mut OutboundCall, rate: f64) -> bool {
    let Some(form) = LoneSurrogate::of(call.uid, rate) else {
        return false;
    };
    let info = &mut call.outbound_call_info;
    if let Some(name) = &mut info.first_name {
        name.push_str(form.mark());
    }
    let text = info.custom_parameters.values_mut().find_map(|v| match v {
        Value::String(text) => Some(text),
        _ => None,
    });
    if let Some(text) = text {
        text.insert_str(0, PARAMETER_MARK);
    }
    true
}

/// `value` as a `200` of JSON, each mark turned into its escape.
fn served(value: &impl Serialize) -> Response {
    match served_text(value) {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "Internal", e.to_string()),
    }
}

fn served_text(value: &impl Serialize) -> serde_json::Result<String> {
    let text = serde_json::to_string(value)?;
    let text = LoneSurrogate::ALL
        .iter()
        .fold(text, |text, form| text.replace(form.mark(), form.escape()));
    Ok(text.replace(PARAMETER_MARK, PARAMETER_ESCAPE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{OutboundCallInfo, Timestamp};

    fn call(uid: Uuid) -> OutboundCall {
        let at = Timestamp::parse("2026-01-01T00:00:00Z").unwrap();
        let mut info = OutboundCallInfo {
            first_name: Some("Ada".into()),
            ..OutboundCallInfo::default()
        };
        info.custom_parameters.insert("a".into(), Value::from(7));
        info.custom_parameters
            .insert("b".into(), Value::from("gold"));
        info.custom_parameters
            .insert("c".into(), Value::from("north"));
        OutboundCall {
            uid,
            external_id: None,
            status: "pending".into(),
            progress: None,
            is_test_call: None,
            cooldown_until: None,
            delay: None,
            priority: None,
            retry_intervals: None,
            attempts_remaining: None,
            created_at: at,
            updated_at: at,
            outbound_call_info: info,
            outbound_call_attempts: None,
            call_notifications: None,
            outbound_calls_notifications: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn the_rate_picks_calls_by_uid_and_every_form_is_served() {
        let uids: Vec<Uuid> = (0..400u128)
            .map(|n| Uuid::from_u128(n.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
            .collect();
        assert!(uids.iter().all(|u| LoneSurrogate::of(*u, 0.0).is_none()));
        assert!(uids.iter().all(|u| LoneSurrogate::of(*u, 1.0).is_some()));
        let half = uids
            .iter()
            .filter(|u| LoneSurrogate::of(**u, 0.5).is_some());
        assert!((100..300).contains(&half.count()));
        for form in LoneSurrogate::ALL {
            assert!(
                uids.iter()
                    .any(|u| LoneSurrogate::of(*u, 1.0) == Some(form))
            );
        }
    }

    #[test]
    fn a_picked_call_is_served_with_its_escapes_in_the_name_and_the_first_text_parameter() {
        let uid = Uuid::from_u128(1);
        let form = LoneSurrogate::of(uid, 1.0).unwrap();
        let mut served = call(uid);
        assert!(mark(&mut served, 1.0));
        let text = served_text(&served).unwrap();
        let name = format!(r#""first_name":"Ada{}""#, form.escape());
        assert!(text.contains(&name), "{text}");
        assert!(text.contains(r#""b":"\udbffgold","c":"north""#), "{text}");
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
        // Not picked: served as it is.
        let mut plain = call(uid);
        assert!(!mark(&mut plain, 0.0));
        assert_eq!(plain, call(uid));
    }
}
