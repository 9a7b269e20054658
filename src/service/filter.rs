//! `ListFilter`: the list endpoint's filters (spec, endpoint 7) and nothing else.
//!
//! `[sync.filter]` in the configuration becomes one of these; the client turns it into query
//! pairs. Paging parameters (`updated_after`, `page`, `page_size`) are the sync engine's and are
//! not filters. Lists are sent comma-delimited, as the spec's matching rules say.

/// Filters of `GET /schedules/{uid}/outbound_calls`; empty lists and `None` are not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub status: Vec<String>,
    pub progress: Vec<String>,
    pub source: Vec<String>,
    pub attempt_status: Vec<String>,
    pub outcome: Option<String>,
    pub external_id: Option<String>,
    pub is_test_call: Option<bool>,
    pub full_name: Option<String>,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub phonetic_full_name: Option<String>,
    pub phonetic_first_name: Option<String>,
    pub phonetic_last_name: Option<String>,
    pub email: Option<String>,
}

impl ListFilter {
    /// Every filter name the list endpoint accepts (besides the paging parameters).
    pub const NAMES: [&'static str; 14] = [
        "status",
        "progress",
        "source",
        "attempt_status",
        "outcome",
        "external_id",
        "is_test_call",
        "full_name",
        "first_name",
        "last_name",
        "phonetic_full_name",
        "phonetic_first_name",
        "phonetic_last_name",
        "email",
    ];

    /// The filter as query pairs, in a stable order; values are raw (the client encodes them).
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let lists = [
            ("status", &self.status),
            ("progress", &self.progress),
            ("source", &self.source),
            ("attempt_status", &self.attempt_status),
        ];
        let texts = [
            ("outcome", &self.outcome),
            ("external_id", &self.external_id),
            ("full_name", &self.full_name),
            ("first_name", &self.first_name),
            ("last_name", &self.last_name),
            ("phonetic_full_name", &self.phonetic_full_name),
            ("phonetic_first_name", &self.phonetic_first_name),
            ("phonetic_last_name", &self.phonetic_last_name),
            ("email", &self.email),
        ];
        let mut query: Vec<(&'static str, String)> = lists
            .into_iter()
            .filter(|(_, values)| !values.is_empty())
            .map(|(name, values)| (name, values.join(",")))
            .collect();
        if let Some(flag) = self.is_test_call {
            query.push(("is_test_call", flag.to_string()));
        }
        query.extend(
            texts
                .into_iter()
                .filter_map(|(name, value)| value.as_ref().map(|v| (name, v.clone()))),
        );
        query
    }
}

#[cfg(test)]
mod tests {
    use super::ListFilter;

    #[test]
    fn sends_only_set_filters_with_lists_comma_delimited() {
        assert!(ListFilter::default().to_query().is_empty());
        let f = ListFilter {
            status: vec!["pending".into(), "completed".into()],
            is_test_call: Some(false),
            full_name: Some("Ada L".into()),
            ..ListFilter::default()
        };
        assert_eq!(
            f.to_query(),
            vec![
                ("status", "pending,completed".to_owned()),
                ("is_test_call", "false".to_owned()),
                ("full_name", "Ada L".to_owned()),
            ]
        );
    }
}
