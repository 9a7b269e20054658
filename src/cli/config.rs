//! `callsync config`: the effective configuration, each value with its source, secrets
//! redacted — computed by `config::effective`, written here as text or JSON — and a warning
//! on stderr for each credential that would cross the network unencrypted.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Value, json};

use super::output::print_out;
use crate::config::effective::{self, Effective};
use crate::config::{Config, Env};

/// Prints the configuration `config` (loaded already: a configuration error has ended the
/// command with exit code 2 and `check`'s message) as text, or as JSON with `json`.
pub(super) fn run(config: &Config, json: bool) -> Result<ExitCode> {
    let shown = effective::effective(config, &Env::from_process()?)?;
    warn_in_clear(config);
    if json {
        let text = serde_json::to_string_pretty(&to_json(&shown))?;
        print_out(format_args!("{}\n", crate::untrusted::json_safe(&text)))?;
    } else {
        // Values are JSON text already; a path may still hold a character a terminal acts on.
        print_out(crate::untrusted::json_safe(&render(&shown)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Warns of each credential that would cross the network unencrypted (`config`, `check`; the
/// daemon logs it): on stderr, so that stdout stays what scripts read, with the warning
/// priority under the journal.
pub(super) fn warn_in_clear(config: &Config) {
    let priority = if crate::telemetry::stderr_is_the_journal() {
        "<4>"
    } else {
        ""
    };
    for in_clear in config.api.credentials_in_clear() {
        // A closed stderr must not fail the command over a warning.
        let _ = writeln!(std::io::stderr(), "{priority}warning: {in_clear}");
    }
}

/// The text `callsync config` prints: valid TOML, which can be pasted back as a configuration
/// file — a comment naming the file, then `key = value` lines (dotted keys) with the source
/// after `#`, aligned. A key without a value, and a secret, are comments: the secret is not
/// shown, and must be given again (or its `*_file`, or its credential).
fn render(effective: &Effective) -> String {
    let mut out = match &effective.file {
        Some(path) => format!("# configuration file: {}\n", path.display()),
        None => "# no configuration file: CALLSYNC_* variables and defaults\n".to_owned(),
    };
    let assignments: Vec<String> = effective
        .entries
        .iter()
        .map(|entry| {
            if entry.redacted {
                format!("# {} = (redacted: give it again)", entry.key)
            } else if entry.value.is_null() {
                format!("# {} is not set", entry.key)
            } else {
                format!("{} = {}", entry.key, toml_value(&entry.value))
            }
        })
        .collect();
    let width = assignments
        .iter()
        .map(|a| a.chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    for (assignment, entry) in assignments.iter().zip(&effective.entries) {
        out.push_str(&format!("{assignment:width$}  # {}\n", entry.source));
    }
    out
}

/// A JSON value as TOML writes it: strings, numbers and booleans alike (JSON's escapes are
/// TOML's), arrays in brackets, objects as inline tables (`{uid = "…", name = "…"}`, a null
/// member left out: TOML has no null).
fn toml_value(value: &Value) -> String {
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(toml_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(members) => {
            let members: Vec<String> = members
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
        // A null inside an array: never written by callsync's keys; the empty string at least
        // keeps the line TOML.
        Value::Null => "\"\"".to_owned(),
        scalar => scalar.to_string(),
    }
}

/// A key bare when TOML allows it, else quoted.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        Value::String(key.to_owned()).to_string()
    }
}

/// The JSON `callsync config --json` prints: `file`, and `keys`, each with `key`, `value`,
/// `redacted`, `source` and `origin`.
fn to_json(effective: &Effective) -> Value {
    let keys: Vec<Value> = effective
        .entries
        .iter()
        .map(|entry| {
            json!({
                "key": entry.key,
                "value": entry.value,
                "redacted": entry.redacted,
                "source": entry.source.kind(),
                "origin": entry.source.origin(),
            })
        })
        .collect();
    json!({
        "file": effective.file.as_ref().map(|p| p.display().to_string()),
        "keys": keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[api]
base_url = "http://127.0.0.1:9"
access_token = "tok-in-the-file-1"
[sync]
schedules = ["00000000-0000-4000-8000-000000000001"]
cron = "0 */2 * * * *"
"#;

    #[test]
    fn the_text_names_each_source_and_the_json_has_fixed_fields() {
        let env = Env::with_vars(&[("CALLSYNC_LOG__LEVEL", "debug")]);
        let (shown, path, _dir) = effective::of_text(FILE, &env);
        let text = render(&shown);
        let line = |key: &str| {
            text.lines()
                .find(|l| {
                    l.trim_start_matches("# ").starts_with(&format!("{key} = "))
                        || l.starts_with(&format!("# {key} is not set"))
                })
                .unwrap_or_else(|| panic!("{key} in {text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            text.lines().next().unwrap(),
            format!("# configuration file: {}", path.display())
        );
        assert_eq!(
            line("log.level"),
            "log.level = \"debug\" # environment CALLSYNC_LOG__LEVEL"
        );
        assert_eq!(
            line("sync.cron"),
            format!("sync.cron = \"0 */2 * * * *\" # file {}", path.display())
        );
        assert_eq!(
            line("api.access_token"),
            format!(
                "# api.access_token = (redacted: give it again) # file {}",
                path.display()
            )
        );
        assert_eq!(
            line("metrics.listen"),
            "# metrics.listen is not set # default"
        );
        let json = to_json(&shown);
        let level = json["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == "log.level")
            .unwrap();
        assert_eq!(
            level,
            &json!({"key": "log.level", "value": "debug", "redacted": false,
                    "source": "environment", "origin": "CALLSYNC_LOG__LEVEL"})
        );
        assert_eq!(json["file"], json!(path.display().to_string()));
    }

    /// What `config` prints loads back as the same configuration: TOML, every key as set or
    /// defaulted, the secret (a comment) given again.
    #[test]
    fn the_text_is_toml_that_loads_back_as_the_same_configuration() {
        let file = format!(
            "{FILE}[[sync.schedule]]\nuid = \"00000000-0000-4000-8000-000000000002\"\nname = \"Renew \\\"gold\\\"\"\n[sync.filter]\nstatus = [\"pending\"]\n[metrics]\nlisten = \"127.0.0.1:29610\"\n[backup]\ncron = \"0 15 2 * * *\"\ndir = \"/var/lib/callsync/backups\"\n"
        );
        let env = Env::with_vars(&[("CALLSYNC_LOG__LEVEL", "debug")]);
        let (shown, path, dir) = effective::of_text(&file, &env);
        let text = render(&shown);
        assert!(
            text.contains("# api.access_token = (redacted: give it again)"),
            "{text}"
        );
        assert!(!text.contains("tok-in"), "{text}");
        let pasted = dir.path().join("pasted.toml");
        std::fs::write(
            &pasted,
            format!("{text}\napi.access_token = \"tok-in-the-file-1\"\n"),
        )
        .unwrap();
        let original = crate::config::load_from(Some(&path), &env).unwrap();
        let again = crate::config::load_from(Some(&pasted), &Env::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(
            format!(
                "{:?}",
                Config {
                    source: None,
                    ..again
                }
            ),
            format!(
                "{:?}",
                Config {
                    source: None,
                    ..original
                }
            )
        );
    }

    #[test]
    fn neither_the_text_nor_the_json_shows_a_secret() {
        for env in [
            Env::default(),
            Env::with_vars(&[("CALLSYNC_API__ACCESS_TOKEN", "tok-in-a-variable-2")]),
        ] {
            let (shown, _path, _dir) = effective::of_text(FILE, &env);
            for text in [render(&shown), to_json(&shown).to_string()] {
                assert!(!text.contains("tok-in"), "{text}");
                assert!(text.contains("api.access_token"), "{text}");
            }
        }
    }
}
