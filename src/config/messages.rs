//! The `config` crate's and TOML's messages rewritten into callsync's: one line, naming the
//! key, the file or the variable, and what to write instead.

use std::path::Path;

use super::env::{Env, variable_for};
use super::error::{ConfigError, ConfigErrorKind as Kind};
use crate::untrusted::one_line;

/// `config`'s error as one line naming the key (and the variable that set it, if one did),
/// without the crate's "for key `…`" suffix.
pub(super) fn describe(
    err: config::ConfigError,
    file: &Path,
    text: &str,
    env: &Env,
) -> ConfigError {
    use config::ConfigError as E;
    let (key, problem) = match err {
        E::FileParse { cause, .. } => {
            return ConfigError::File {
                path: file.to_owned(),
                key: None,
                kind: Kind::Syntax,
                problem: syntax_error(&*cause, text),
            };
        }
        E::At {
            error,
            key: Some(key),
            ..
        } => (Some(key), message(*error)),
        E::Type {
            unexpected,
            expected,
            key: Some(key),
            ..
        } => (
            Some(key),
            format!("invalid type: {unexpected}, expected {expected}"),
        ),
        other => (None, message(other)),
    };
    let problem = reword_invalid_type(&problem).unwrap_or(problem);
    if let Some((key, problem)) = unknown_key(key.as_deref(), &problem) {
        return match variable_for(env, &key) {
            Some(var) => ConfigError::Env {
                var: var.to_owned(),
                key: Some(key),
                kind: Kind::UnknownKey,
                problem,
            },
            None => ConfigError::File {
                path: file.to_owned(),
                key: Some(key),
                kind: Kind::UnknownKey,
                problem,
            },
        };
    }
    let kind = kind_of(&problem);
    match key {
        Some(key) => blame_variable(ConfigError::new(kind, key, problem), env),
        None => ConfigError::File {
            path: file.to_owned(),
            key: None,
            kind,
            problem,
        },
    }
}

/// The kind of a problem `config` or serde reported, by its words once reworded: "expected
/// an integer, got 0.5" (`raw/strict.rs`, `StringList`, serde's "invalid type" reworded) is a
/// value of the wrong type; anything else is not one callsync knows.
fn kind_of(problem: &str) -> Kind {
    if problem.starts_with("expected ") && problem.contains(", got ") {
        Kind::WrongType
    } else {
        Kind::Other
    }
}

/// An invalid key set by a `CALLSYNC_*` variable is reported as that variable's: the file
/// may not even mention the key.
pub(super) fn blame_variable(err: ConfigError, env: &Env) -> ConfigError {
    match err {
        ConfigError::Invalid { key, kind, problem } => match variable_for(env, &key) {
            Some(var) => ConfigError::Env {
                var: var.to_owned(),
                problem: format!("{key}: {problem}"),
                key: Some(key),
                kind,
            },
            None => ConfigError::Invalid { key, kind, problem },
        },
        other => other,
    }
}

/// Where the TOML is broken and how, without the parser's quote of the line: that line may
/// hold a secret (`access_token = "…` with its quote missing).
pub(super) fn syntax_error(cause: &(dyn std::error::Error + 'static), text: &str) -> String {
    let Some(toml) = cause.downcast_ref::<toml::de::Error>() else {
        // `config`'s own checks on a number the parser accepted ("number too large…"), which
        // name no key: found again here.
        let cause = one_line(&cause.to_string());
        return match number_out_of_range(text) {
            Some((key, span, allowed)) => {
                format!("{}: {key}: {cause} ({allowed})", where_in(text, span.start))
            }
            None => format!("not valid TOML: {cause}"),
        };
    };
    let problem = one_line(toml.message());
    match toml.span() {
        Some(span) => format!("{}: {problem}", where_in(text, span.start)),
        None => format!("not valid TOML: {problem}"),
    }
}

/// `not valid TOML at line L, column C` for the byte `at` of `text`.
pub(super) fn where_in(text: &str, at: usize) -> String {
    match text.get(..at) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("not valid TOML at line {line}, column {column}")
        }
        None => "not valid TOML".to_owned(),
    }
}

/// A number `config` cannot hold: its key (`sync.page_size`, `sync.schedule[1].x`), where it
/// stands, and what is allowed.
pub(super) type OutOfRange = (String, std::ops::Range<usize>, &'static str);

/// The first number `config` cannot hold: an integer beyond 64 bits, a float that overflows.
pub(super) fn number_out_of_range(text: &str) -> Option<OutOfRange> {
    let table = toml::de::DeTable::parse(text).ok()?;
    out_of_range_in_table(table.get_ref(), "")
}

pub(super) fn out_of_range_in_table(
    table: &toml::de::DeTable<'_>,
    prefix: &str,
) -> Option<OutOfRange> {
    table.iter().find_map(|(key, value)| {
        let key = match prefix {
            "" => key.get_ref().to_string(),
            _ => format!("{prefix}.{}", key.get_ref()),
        };
        out_of_range_in_value(value, key)
    })
}

pub(super) fn out_of_range_in_value(
    value: &toml::Spanned<toml::de::DeValue<'_>>,
    key: String,
) -> Option<OutOfRange> {
    use toml::de::DeValue;
    let (fits, allowed) = match value.get_ref() {
        DeValue::Integer(n) => (
            i64::from_str_radix(n.as_str(), n.radix()).is_ok(),
            "integers go from -9223372036854775808 to 9223372036854775807",
        ),
        DeValue::Float(x) => (
            x.as_str()
                .parse::<f64>()
                .is_ok_and(|f| f.is_finite() || x.as_str().contains("inf")),
            "a float must be finite",
        ),
        DeValue::Table(table) => return out_of_range_in_table(table, &key),
        DeValue::Array(items) => {
            return items
                .iter()
                .enumerate()
                .find_map(|(i, item)| out_of_range_in_value(item, format!("{key}[{i}]")));
        }
        DeValue::String(_) | DeValue::Boolean(_) | DeValue::Datetime(_) => (true, ""),
    };
    (!fits).then(|| (key, value.span(), allowed))
}

pub(super) fn message(err: config::ConfigError) -> String {
    match err {
        config::ConfigError::Message(text) => text,
        other => other.to_string(),
    }
}

/// serde's "invalid type: string \"…\", expected a table" as "expected a table, got a
/// string": the text given to a table's key may be a secret meant for one of its keys.
pub(super) fn reword_invalid_type(problem: &str) -> Option<String> {
    let (got, expected) = problem
        .strip_prefix("invalid type: ")?
        .rsplit_once(", expected ")?;
    let got = if got.starts_with("string ") {
        "a string"
    } else {
        got
    };
    Some(format!("expected {expected}, got {got}"))
}

/// serde's "unknown field `x`, expected one of …" under `parent` as the full key and
/// "unknown key parent.x; expected one of …": the full key is what a reader searches for.
pub(super) fn unknown_key(parent: Option<&str>, problem: &str) -> Option<(String, String)> {
    let (field, rest) = problem.strip_prefix("unknown field `")?.split_once('`')?;
    let key = match parent {
        Some(parent) => format!("{parent}.{field}"),
        None => field.to_owned(),
    };
    let rest = rest.strip_prefix(", ").unwrap_or(rest);
    let problem = format!("unknown key {key}; {rest}");
    Some((key, problem))
}
