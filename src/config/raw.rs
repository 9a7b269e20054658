//! The serde mirror of the file and the environment: every key as written, read strictly
//! (`strict.rs`); nothing here checks a value, `validate.rs` does.

use std::path::PathBuf;

use serde::Deserialize;

use strict::strict;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) api: RawApi,
    #[serde(default)]
    pub(super) warehouse: RawWarehouse,
    #[serde(default)]
    pub(super) sync: RawSync,
    #[serde(default)]
    pub(super) log: RawLog,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
    #[serde(default)]
    pub(super) backup: RawBackup,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawBackup {
    pub(super) cron: Option<String>,
    pub(super) dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) keep: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawApi {
    pub(super) base_url: Option<String>,
    pub(super) access_token: Option<String>,
    pub(super) access_token_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) request_timeout_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) connect_timeout_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) requests_per_second: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) detail_concurrency: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_response_mib: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) create_settle_secs: Option<i64>,
    #[serde(default)]
    pub(super) retry: RawRetry,
    pub(super) oauth: Option<RawOAuth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawRetry {
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_attempts: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_elapsed_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) initial_interval_ms: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_interval_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) multiplier: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawOAuth {
    pub(super) token_url: Option<String>,
    pub(super) client_id: Option<String>,
    pub(super) client_secret: Option<String>,
    pub(super) client_secret_file: Option<PathBuf>,
    pub(super) scope: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawWarehouse {
    pub(super) path: Option<PathBuf>,
    /// A PostgreSQL URI: the warehouse on a server instead of a file.
    pub(super) url: Option<String>,
    pub(super) password_file: Option<PathBuf>,
    /// The PostgreSQL schema callsync's tables live in.
    pub(super) schema: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) busy_timeout_secs: Option<i64>,
    pub(super) keep_runs: Option<String>,
    pub(super) timezone: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawSync {
    pub(super) schedules: Option<StringList>,
    /// `[[sync.schedule]]`: schedules with a name.
    pub(super) schedule: Option<Vec<RawSchedule>>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) lookback_secs: Option<i64>,
    pub(super) cron: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) page_size: Option<i64>,
    pub(super) details: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) concurrency: Option<i64>,
    pub(super) reconcile_cron: Option<String>,
    pub(super) reconcile_window: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) shutdown_timeout_secs: Option<i64>,
    pub(super) behind_after: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_clock_skew_secs: Option<i64>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) max_lag_secs: Option<i64>,
    pub(super) instance: Option<String>,
    #[serde(default)]
    pub(super) filter: RawFilter,
}

/// One `[[sync.schedule]]` entry.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with uid, name and, optionally, campaign"
)]
pub(super) struct RawSchedule {
    pub(super) uid: Option<String>,
    pub(super) name: Option<String>,
    /// The uid of the campaign the schedule belongs to: the service has no endpoint that
    /// says it, so the configuration may.
    pub(super) campaign: Option<String>,
}

/// A list key: a TOML array, or one comma-delimited string (as an environment variable is).
#[derive(Debug)]
pub(super) enum StringList {
    Many(Vec<String>),
    One(String),
}

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StringListVisitor)
    }
}

pub(super) struct StringListVisitor;

impl<'de> serde::de::Visitor<'de> for StringListVisitor {
    type Value = StringList;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of strings or one comma-separated string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<StringList, E> {
        Ok(StringList::One(text.to_owned()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<StringList, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<String>()? {
            items.push(item);
        }
        Ok(StringList::Many(items))
    }
}

impl StringList {
    pub(super) fn into_vec(self) -> Vec<String> {
        let items = match self {
            StringList::Many(items) => items,
            StringList::One(text) => text.split(',').map(str::to_owned).collect(),
        };
        items
            .into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawFilter {
    pub(super) status: Option<StringList>,
    pub(super) progress: Option<StringList>,
    pub(super) source: Option<StringList>,
    pub(super) attempt_status: Option<StringList>,
    pub(super) outcome: Option<String>,
    pub(super) external_id: Option<String>,
    #[serde(default, deserialize_with = "strict")]
    pub(super) is_test_call: Option<bool>,
    pub(super) full_name: Option<String>,
    pub(super) first_name: Option<String>,
    pub(super) last_name: Option<String>,
    pub(super) phonetic_full_name: Option<String>,
    pub(super) phonetic_first_name: Option<String>,
    pub(super) phonetic_last_name: Option<String>,
    pub(super) email: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawLog {
    pub(super) level: Option<String>,
    pub(super) format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawMetrics {
    pub(super) listen: Option<String>,
}

mod strict;
