//! Logging set-up: tracing-subscriber to stderr, readable text or JSON lines.
//!
//! The level comes from `[log] level`; `RUST_LOG`, when set, wins. ANSI colours only on a
//! terminal. Nothing here decides what is logged; modules use `tracing` spans and events.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "log.level = {level:?} is not a valid filter (e.g. info, debug, callsync=debug): {reason}"
    )]
    BadLevel { level: String, reason: String },
}

/// Installs the global subscriber; a second call keeps the first one (tests call it often).
pub fn init(log: &LogConfig) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.trim().is_empty() => from_env,
        _ => log.level.clone(),
    };
    let filter = EnvFilter::try_new(&filter).map_err(|e| TelemetryError::BadLevel {
        level: filter.clone(),
        reason: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Ignoring the error is deliberate: it only says a subscriber is already installed.
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .finish()
            .try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_level_is_a_clear_error_and_init_twice_is_fine() {
        let bad = LogConfig {
            level: "info,=[".into(),
            format: LogFormat::Text,
        };
        if std::env::var_os("RUST_LOG").is_none() {
            let err = init(&bad).unwrap_err();
            assert!(
                err.to_string().starts_with("log.level = \"info,=[\""),
                "{err}"
            );
        }
        init(&LogConfig::default()).unwrap();
        init(&LogConfig::default()).unwrap();
    }
}
