//! One problem with one row, where an operator finds it in the file.

/// Where it is: a line, and a column when the problem is one field's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowProblem {
    /// CSV line (the header is line 1).
    pub line: u64,
    /// The CSV column, as its header names it; `None` for a problem of the whole row.
    pub column: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for RowProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.column {
            // The column's name is the CSV file's text.
            Some(column) => write!(
                f,
                "line {}, column {}: {}",
                self.line,
                crate::untrusted::untrusted_text(column, 200),
                self.reason
            ),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
    }
}
