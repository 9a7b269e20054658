//! The log filter (`[log] level`, `RUST_LOG`, `-q`/`-v`) as a type: [`LogFilter`], built only
//! by parsing text that names levels and targets callsync or its crates log under (so that a
//! typo cannot silence the logs), or from a bare level.

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

/// A checked log filter: the directive text as written (what `callsync config` prints) and
/// the `EnvFilter` it makes. Built only by [`LogFilter::parse`], or from a level
/// ([`LogFilter::from`] a `LevelFilter`, for `-q`/`-v` and the defaults), so holding one means
/// it was checked.
#[derive(Debug, Clone)]
pub struct LogFilter {
    text: String,
    filter: EnvFilter,
    /// The targets its directives name (`callsync::sync` of `callsync::sync=debug`).
    targets: Vec<String>,
}

impl LogFilter {
    /// `text` as a filter: comma-separated directives, each a level (`info`) or a target, span
    /// or field with `=LEVEL` (`callsync::sync=trace`); never a bare word that is not a level,
    /// nor a target nothing logs under ([`known_target`]).
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        for directive in text.split(',').map(str::trim) {
            let names_a_target = directive.contains('=') || directive.contains('[');
            if !directive.is_empty() && !names_a_target && directive.parse::<LevelFilter>().is_err()
            {
                return Err(FilterError::NotALevel {
                    word: directive.to_owned(),
                });
            }
        }
        let filter = EnvFilter::try_new(text).map_err(|e| FilterError::Syntax {
            reason: e.to_string(),
        })?;
        let targets: Vec<String> = text
            .split(',')
            .filter_map(|d| directive_target(d.trim()))
            .map(str::to_owned)
            .collect();
        if let Some(unknown) = targets.iter().find(|t| !known_target(t)) {
            return Err(FilterError::UnknownTarget {
                target: unknown.clone(),
            });
        }
        Ok(LogFilter {
            text: text.to_owned(),
            filter,
            targets,
        })
    }

    /// The filter as written (`info`, `warn,callsync::sync=debug`).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The filter to install (a copy: a subscriber takes its own).
    pub fn env_filter(&self) -> EnvFilter {
        self.filter.clone()
    }

    /// Whether a directive names the crate `name` or one of its modules as its target
    /// (`rusqlite_migration=info`, `tokio_cron_scheduler::job=debug`).
    pub fn names_crate(&self, name: &str) -> bool {
        self.targets
            .iter()
            .any(|target| target.split("::").next() == Some(name))
    }
}

/// Every event at `level` or more severe: `error` for `-q`, `debug` for `-v`.
impl From<LevelFilter> for LogFilter {
    fn from(level: LevelFilter) -> Self {
        LogFilter {
            text: level.to_string(),
            filter: EnvFilter::default().add_directive(level.into()),
            targets: Vec::new(),
        }
    }
}

impl std::fmt::Display for LogFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
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

    /// A filter made from a level is the one its name parses to.
    #[test]
    fn a_level_makes_the_filter_its_name_parses_to() {
        for level in [
            LevelFilter::OFF,
            LevelFilter::ERROR,
            LevelFilter::WARN,
            LevelFilter::INFO,
            LevelFilter::DEBUG,
            LevelFilter::TRACE,
        ] {
            let made = LogFilter::from(level);
            let parsed = LogFilter::parse(&level.to_string()).unwrap();
            assert_eq!(made.as_str(), parsed.as_str());
            assert_eq!(
                made.env_filter().to_string(),
                parsed.env_filter().to_string()
            );
            assert_eq!(made.env_filter().max_level_hint(), Some(level));
        }
        assert_eq!(LogFilter::from(LevelFilter::ERROR).as_str(), "error");
    }

    #[test]
    fn a_filter_names_a_crate_by_its_directives_targets() {
        let filter =
            LogFilter::parse("info,tokio_cron_scheduler::job=debug,[rusqlite_migration]=info")
                .unwrap();
        assert!(filter.names_crate("tokio_cron_scheduler"));
        assert!(!filter.names_crate("tokio"));
        // A span named like a crate is no target.
        assert!(!filter.names_crate("rusqlite_migration"));
        assert_eq!(
            filter.to_string(),
            "info,tokio_cron_scheduler::job=debug,[rusqlite_migration]=info"
        );
    }
}
