//! Credentials and the service's URLs: none may ride in one, and none should cross a network
//! unencrypted.
//!
//! Invariants: a URL's user info (a user name, a password) never reaches a message, a log
//! line or `callsync config`'s output — [`user_info_redacted`] hides it in any text, a URL or
//! not; `api.base_url` and `api.oauth.token_url` with user info are refused (reqwest would
//! send it as HTTP Basic credentials: to the service in place of the bearer token, to the
//! token endpoint beside the client's). [`ApiConfig::credentials_in_clear`] names each
//! credential that would go over plain `http://` to a host other than this machine's
//! loopback (127.0.0.0/8, ::1, localhost); whether that is acceptable (a private network, a
//! TLS-terminating sidecar) is the operator's call, so it is a warning, never an error.

use std::fmt;
use std::net::Ipv6Addr;

use url::{Host, Url};

use super::error::{ConfigError, ConfigErrorKind as Kind};
use super::types::{ApiConfig, AuthConfig};

/// What replaces user info in anything shown.
const REDACTED: &str = "[redacted]";

/// `text` with the user info of a URL in it replaced by [`REDACTED`]: everything before the
/// last `@` of the authority (after `scheme://`, or from the start without one, up to the
/// first `/`, `?` or `#`). Read as generously as a parser might, so that it also covers text
/// that parses as no URL at all.
pub(super) fn user_info_redacted(text: &str) -> String {
    let authority_at = text.find("://").map_or(0, |at| at + 3);
    let rest = &text[authority_at..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{REDACTED}{}", &text[..authority_at], &rest[at..]),
        None => text.to_owned(),
    }
}

/// `url` as `callsync config` prints it: its user info, if any, redacted.
pub(super) fn shown(url: &Url) -> String {
    user_info_redacted(url.as_str())
}

/// Refuses `url` (the value of `key`, written as `text`) when it carries user info, saying
/// where it would have gone and what to write instead, without repeating it.
pub(super) fn refuse_user_info(key: &str, url: &Url, text: &str) -> Result<(), ConfigError> {
    if url.username().is_empty() && url.password().is_none() {
        return Ok(());
    }
    let (sent_to, instead) = match key {
        "api.oauth.token_url" => (
            "to the token endpoint beside the client's credentials",
            "the client's id and secret go in api.oauth.client_id and client_secret",
        ),
        _ => (
            "to the service in place of the token",
            "the token goes in api.access_token, access_token_file or [api.oauth]",
        ),
    };
    Err(ConfigError::new(
        Kind::BadUrl,
        key,
        format!(
            "{:?} has a user name or password in it, which callsync would send {sent_to}; remove it ({instead})",
            user_info_redacted(text.trim())
        ),
    ))
}

/// A credential that would cross the network unencrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InClear {
    /// The key of the URL it goes to (`api.base_url`, `api.oauth.token_url`).
    pub key: &'static str,
    /// That URL's host.
    pub host: String,
    /// What would travel (`the access token`).
    pub what: &'static str,
}

impl fmt::Display for InClear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is plain http:// to {}, which is not this machine (127.0.0.0/8, ::1 or localhost): {} would cross the network unencrypted, readable on every network in between; use https://",
            self.key, self.host, self.what
        )
    }
}

impl ApiConfig {
    /// Each credential configured that would go over plain `http://` to a host that is not
    /// this machine's loopback; none without credentials.
    pub fn credentials_in_clear(&self) -> Vec<InClear> {
        let (to_service, token_url) = match &self.auth {
            None => return Vec::new(),
            Some(AuthConfig::Static(_)) => ("the access token", None),
            Some(AuthConfig::OAuth(oauth)) => ("the OAuth access tokens", Some(&oauth.token_url)),
        };
        let mut found = Vec::new();
        found.extend(in_clear("api.base_url", &self.base_url, to_service));
        if let Some(url) = token_url {
            found.extend(in_clear(
                "api.oauth.token_url",
                url,
                "the client secret and the tokens it is given",
            ));
        }
        found
    }
}

fn in_clear(key: &'static str, url: &Url, what: &'static str) -> Option<InClear> {
    (url.scheme() == "http" && !is_loopback(url)).then(|| InClear {
        key,
        host: url.host_str().unwrap_or_default().to_owned(),
        what,
    })
}

/// Whether `url`'s host is this machine's loopback: 127.0.0.0/8, ::1 (or 127.0.0.0/8 mapped
/// into IPv6), `localhost`.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => {
            ip == Ipv6Addr::LOCALHOST || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Some(Host::Domain(name)) => name.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
        None => false,
    }
}
