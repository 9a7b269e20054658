//! The simulator's auth, in one place: the OAuth token endpoint (client credentials, by HTTP
//! Basic or in the form), the tokens it issues and their lifetime, and the bearer check every
//! `/api/v1` request passes (`faults.rs` applies it before anything else).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use url::form_urlencoded;
use uuid::Uuid;

use super::mutex::lock;
use super::shared::Shared;

impl Shared {
    pub(super) fn issue_token(&self) -> (String, Duration) {
        let token = format!("sim-{}", Uuid::new_v4().simple());
        let expiry = self.clock.now().saturating_add(self.token_lifetime);
        lock(&self.tokens).insert(token.clone(), expiry);
        (token, self.token_lifetime)
    }

    /// Issued tokens not yet expired at the clock's "now".
    pub(super) fn live_tokens(&self) -> usize {
        let now = self.clock.now();
        lock(&self.tokens)
            .values()
            .filter(|expiry| now < **expiry)
            .count()
    }

    /// `Ok` when the header carries the static token or an unexpired issued one.
    pub(super) fn check_bearer(&self, header: Option<&HeaderValue>) -> Result<(), AuthProblem> {
        let value = header
            .map(|h| h.to_str().map_err(|_| AuthProblem::NotBearer))
            .transpose()?
            .ok_or(AuthProblem::Missing)?;
        let token = credentials(value, "Bearer").ok_or(AuthProblem::NotBearer)?;
        if token == self.static_token {
            return Ok(());
        }
        match lock(&self.tokens).get(token) {
            Some(expiry) if self.clock.now() < *expiry => Ok(()),
            Some(_) => Err(AuthProblem::Expired),
            None => Err(AuthProblem::Unknown),
        }
    }
}

/// The credentials of an `Authorization` header value of `scheme`: the scheme name is
/// case-insensitive and followed by one or more spaces (RFC 7235, section 2.1).
fn credentials<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (name, rest) = value.split_once(' ')?;
    let credentials = rest.trim();
    (name.eq_ignore_ascii_case(scheme) && !credentials.is_empty()).then_some(credentials)
}

/// Why a request to `/api/v1` is not authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthProblem {
    Missing,
    NotBearer,
    Expired,
    Unknown,
}

impl AuthProblem {
    pub(crate) fn detail(self) -> &'static str {
        match self {
            AuthProblem::Missing => "missing Authorization header",
            AuthProblem::NotBearer => "the Authorization header must be `Bearer <token>`",
            AuthProblem::Expired => "the access token has expired",
            AuthProblem::Unknown => "the access token is not valid",
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750, section 3): without bearer credentials no
    /// error code; with a token we do not accept, `invalid_token` and the reason.
    pub(crate) fn challenge(self) -> String {
        const REALM: &str = "Bearer realm=\"callsync-simulator\"";
        match self {
            AuthProblem::Missing | AuthProblem::NotBearer => REALM.to_owned(),
            AuthProblem::Expired | AuthProblem::Unknown => format!(
                "{REALM}, error=\"invalid_token\", error_description=\"{}\"",
                self.detail()
            ),
        }
    }
}

pub(super) async fn token(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let form: std::collections::HashMap<String, String> = form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "unsupported_grant_type"})),
        )
            .into_response();
    }
    let (id, secret) = basic_auth(&headers).unwrap_or_else(|| {
        (
            form.get("client_id").cloned().unwrap_or_default(),
            form.get("client_secret").cloned().unwrap_or_default(),
        )
    });
    if id != shared.client_id || secret != shared.client_secret {
        // RFC 6749, section 5.2: a 401 names the scheme the client may authenticate with.
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"callsync-simulator\"",
            )],
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let (token, lifetime) = shared.issue_token();
    Json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": lifetime.as_secs().max(1),
    }))
    .into_response()
}

fn basic_auth(headers: &HeaderMap) -> Option<(String, String)> {
    use base64_lite::decode;
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = credentials(value, "Basic")?;
    let decoded = String::from_utf8(decode(encoded)?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

/// Just enough base64 for HTTP Basic credentials.
mod base64_lite {
    pub fn decode(text: &str) -> Option<Vec<u8>> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let mut buffer = 0u32;
        let mut bits = 0;
        for c in text.bytes().filter(|c| *c != b'=') {
            let v = ALPHABET.iter().position(|a| *a == c)? as u32;
            buffer = (buffer << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((buffer >> bits) as u8);
            }
        }
        Some(out)
    }
}
