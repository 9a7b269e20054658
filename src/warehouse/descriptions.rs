//! What every table, view and column of the warehouse means, from ONE source:
//! `contrib/datasette/metadata.json` (what Datasette shows), compiled in. PostgreSQL gets the
//! same text as `COMMENT ON` (`postgres/comments.rs`), which Metabase, Grafana, DBeaver and
//! `\d+` show; the few objects only PostgreSQL has are described here, as Datasette never
//! sees them. Tests keep every column of both back ends described.

/// One table or view and its columns, in the order the source gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub object: String,
    pub description: String,
    pub columns: Vec<(String, String)>,
}

const METADATA: &str = include_str!("../../contrib/datasette/metadata.json");

/// The tables and views both back ends have (and SQLite's own: `local_days`), as
/// `metadata.json` describes them; empty if it were not readable (a unit test proves it is).
pub fn shared() -> Vec<Described> {
    let Ok(metadata) = serde_json::from_str::<serde_json::Value>(METADATA) else {
        return Vec::new();
    };
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    metadata["databases"]["callsync"]["tables"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(object, table)| Described {
            object: object.clone(),
            description: text(&table["description"]),
            columns: table["columns"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(column, about)| (column.clone(), text(about)))
                .collect(),
        })
        .collect()
}

/// The tables only the PostgreSQL warehouse has.
pub fn postgres_only() -> Vec<Described> {
    let described = |object: &str, description: &str, columns: &[(&str, &str)]| Described {
        object: object.to_owned(),
        description: description.to_owned(),
        columns: columns
            .iter()
            .map(|(c, d)| ((*c).to_owned(), (*d).to_owned()))
            .collect(),
    };
    vec![
        described(
            "callsync_schema",
            "PostgreSQL only: the version of callsync's schema (migrations-postgres/), one row. callsync refuses a database whose version it does not know.",
            &[(
                "version",
                "The schema version: the number of migrations applied.",
            )],
        ),
        described(
            "schedule_claims",
            "PostgreSQL only: each schedule's fencing token. A process that claims a schedule (its advisory lock) bumps generation; each page it writes checks the number is still its own, so a process that lost its claim unknowingly cannot commit.",
            &[
                ("schedule_uid", "The schedule."),
                (
                    "generation",
                    "Bumped by every claim; the writer's page commits only while it holds the latest.",
                ),
                ("claimed_at", "When the latest claim was taken (UTC)."),
            ],
        ),
    ]
}

/// `local_day(t)`'s description (PostgreSQL's function).
pub const LOCAL_DAY_FUNCTION: &str = "The day of instant t in the warehouse's time zone (warehouse.timezone; UTC until set), from timezone_offsets: the same days as the views' created_day and started_day, and as SQLite's local_days. SELECT local_day(started_at), count(*) FROM attempt_results GROUP BY 1.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_parses_and_describes_every_object_and_column_it_names() {
        let shared = shared();
        assert!(shared.iter().any(|d| d.object == "calls"));
        assert!(shared.iter().any(|d| d.object == "schedule_outcomes"));
        for d in shared.iter().chain(&postgres_only()) {
            assert!(!d.description.trim().is_empty(), "{}", d.object);
            assert!(!d.columns.is_empty(), "{}", d.object);
            for (column, about) in &d.columns {
                assert!(!about.trim().is_empty(), "{}.{column}", d.object);
            }
        }
    }
}
