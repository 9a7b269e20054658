//! What every table, view and column of the warehouse means, from ONE source:
//! `contrib/datasette/metadata.json` (what Datasette shows), compiled in. PostgreSQL gets the
//! same text as `COMMENT ON` (`postgres/comments.rs`), which Metabase, Grafana, DBeaver and
//! `\d+` show; the few objects only PostgreSQL has are described there, as Datasette never
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_parses_and_describes_every_object_and_column_it_names() {
        let shared = shared();
        assert!(shared.iter().any(|d| d.object == "calls"));
        assert!(shared.iter().any(|d| d.object == "schedule_outcomes"));
        for d in &shared {
            assert!(!d.description.trim().is_empty(), "{}", d.object);
            assert!(!d.columns.is_empty(), "{}", d.object);
            for (column, about) in &d.columns {
                assert!(!about.trim().is_empty(), "{}.{column}", d.object);
            }
        }
    }
}
