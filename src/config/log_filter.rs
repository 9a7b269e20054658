//! The log filter (`[log] level`, `RUST_LOG`) checked: levels and targets callsync or its
//! crates log under, so that a typo cannot silence the logs.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Why a log filter is refused; the message follows the filter's text.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A bare word is a target to `EnvFilter` (`eror` would show only the events of a module
    /// named `eror`, so nothing at all): a typo of a level must not silence the logs.
    #[error(
        "is not a log level: {word:?} is not one of off, error, warn, info, debug, trace (a target needs a level, e.g. callsync=debug)"
    )]
    NotALevel { word: String },
    #[error("is not a valid filter (e.g. info, debug, callsync=debug): {reason}")]
    Syntax { reason: String },
    /// A target nothing logs under shows nothing: `calsync=info` would silence every line,
    /// a failing pass's ERROR included.
    #[error(
        "names the log target {target:?}, which nothing logs under: a target is callsync, callsync::MODULE (MODULE one of {}), or a crate callsync is built with (e.g. reqwest, rusqlite, hyper)",
        MODULES.join(", ")
    )]
    UnknownTarget { target: String },
}

/// callsync's own modules: `callsync::MODULE` must name one (the module paths its events
/// carry begin so).
const MODULES: [&str; 11] = [
    "api",
    "cli",
    "config",
    "daemon",
    "service",
    "simulator",
    "sync",
    "telemetry",
    "untrusted",
    "upload",
    "warehouse",
];

/// The crates callsync is built with, as their events name them (`-` becomes `_`): the only
/// other targets there are.
const CARGO_LOCK: &str = include_str!("../../Cargo.lock");

/// Whether events may come under `target`: `callsync`, `callsync::MODULE…` with MODULE one of
/// [`MODULES`], or a crate of `Cargo.lock` (and its modules).
fn known_target(target: &str) -> bool {
    let mut path = target.split("::");
    let first = path.next().unwrap_or_default();
    if first == env!("CARGO_CRATE_NAME") {
        return path.next().is_none_or(|module| MODULES.contains(&module));
    }
    CARGO_LOCK
        .lines()
        .filter_map(|line| line.strip_prefix("name = \""))
        .filter_map(|rest| rest.strip_suffix('"'))
        .any(|name| name.replace('-', "_") == first)
}

/// The target of a directive (`callsync::sync[pass]=debug` → `callsync::sync`), if it
/// names one (`debug` and `[pass]=debug` do not).
fn directive_target(directive: &str) -> Option<&str> {
    if !directive.contains('=') && !directive.contains('[') {
        return None;
    }
    let end = directive.find(['[', '=']).unwrap_or(directive.len());
    Some(directive[..end].trim()).filter(|t| !t.is_empty())
}

/// `text` as a filter: comma-separated directives, each a level (`info`) or a target, span
/// or field with `=LEVEL` (`callsync::sync=trace`); never a bare word that is not a level,
/// nor a target nothing logs under ([`known_target`]).
pub fn parse_filter(text: &str) -> Result<EnvFilter, FilterError> {
    for directive in text.split(',').map(str::trim) {
        let names_a_target = directive.contains('=') || directive.contains('[');
        if !directive.is_empty() && !names_a_target && directive.parse::<LevelFilter>().is_err() {
            return Err(FilterError::NotALevel {
                word: directive.to_owned(),
            });
        }
    }
    let filter = EnvFilter::try_new(text).map_err(|e| FilterError::Syntax {
        reason: e.to_string(),
    })?;
    let targets = text.split(',').filter_map(|d| directive_target(d.trim()));
    if let Some(unknown) = targets.into_iter().find(|t| !known_target(t)) {
        return Err(FilterError::UnknownTarget {
            target: unknown.to_owned(),
        });
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`MODULES`] is the crate's top-level modules, every one of them.
    #[test]
    fn the_module_list_is_the_crate_s() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found: Vec<String> = std::fs::read_dir(src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| {
                let name = p.file_stem()?.to_str()?.to_owned();
                (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
            })
            .filter(|name| name != "lib" && name != "main")
            .collect();
        found.sort();
        found.dedup();
        assert_eq!(found, MODULES);
    }
}
