//! The first pass over the file: every row mapped and validated, nothing sent.

use super::columns::Columns;
use super::error::UploadError;
use super::job::{Checked, MAX_LISTED_PROBLEMS, UploadOptions};
use super::problem::RowProblem;
use super::rows::{Row, Rows};
use super::scratch::SeenExternalIds;
use crate::service::{MAX_BULK, new_call_problems};

/// Reads the whole file and reports every bad row; sends nothing.
pub fn check(options: &UploadOptions) -> Result<Checked, UploadError> {
    let mut rows = Rows::open(options)?;
    let mut duplicates = SeenExternalIds::new()?;
    let mut checked = Checked {
        fingerprint: String::new(),
        rows: 0,
        problems: Vec::new(),
        problem_count: 0,
        chunk_digests: Vec::new(),
        chunk_first_lines: Vec::new(),
    };
    let columns = rows.columns.clone();
    let mut in_chunk = 0;
    while let Some(row) = rows.next()? {
        checked.rows += 1;
        if in_chunk == 0 {
            checked.chunk_first_lines.push(row.line());
        }
        for problem in row_problems(&row, &columns, &mut duplicates, options)? {
            checked.problem_count += 1;
            if checked.problems.len() < MAX_LISTED_PROBLEMS {
                checked.problems.push(problem);
            }
        }
        in_chunk += 1;
        if in_chunk == MAX_BULK {
            checked.chunk_digests.push(rows.chunk_digest());
            in_chunk = 0;
        }
    }
    if in_chunk > 0 {
        checked.chunk_digests.push(rows.chunk_digest());
    }
    duplicates.finish()?;
    checked.fingerprint = rows.fingerprint(options);
    Ok(checked)
}

/// Everything wrong with one row.
pub(super) fn row_problems(
    row: &Row,
    columns: &Columns,
    duplicates: &mut SeenExternalIds,
    options: &UploadOptions,
) -> Result<Vec<RowProblem>, UploadError> {
    let (line, call) = match row {
        Row::Call { line, call } => (*line, call),
        Row::Ragged { line, fields } => {
            return Ok(vec![RowProblem {
                line: *line,
                column: None,
                reason: format!(
                    "{fields} fields where the header has {}: a comma too many or too few, or a value with a comma not in double quotes",
                    columns.headers.len()
                ),
            }]);
        }
        Row::NotText { line, column } => {
            return Ok(vec![RowProblem {
                line: *line,
                column: Some(column.clone()),
                reason: "not UTF-8 text: save the file as UTF-8".into(),
            }]);
        }
    };
    let problem = |field: &str, reason: String| RowProblem {
        line,
        column: Some(columns.column_of(field)),
        reason,
    };
    let mut problems = Vec::new();
    if call.phone_number.is_empty() {
        problems.push(problem(
            "phone_number",
            "missing: every call needs a phone number".into(),
        ));
    }
    for p in new_call_problems(call) {
        if !call.phone_number.is_empty() || p.field != "phone_number" {
            problems.push(problem(&p.field, p.reason));
        }
    }
    match &call.external_id {
        Some(id) => {
            if let Some(first) = duplicates.first_seen(id, line)? {
                problems.push(problem(
                    "external_id",
                    format!("{id:?} is also on line {first}: each row needs its own external_id"),
                ));
            }
        }
        None if !options.allow_missing_external_id => problems.push(problem(
            "external_id",
            "missing: it is what lets a re-run find calls already created (or pass --allow-missing-external-id)".into(),
        )),
        None => {}
    }
    Ok(problems)
}
