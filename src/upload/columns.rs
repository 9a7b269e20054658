//! The CSV's columns and the call fields they fill, both ways: a header read into a
//! mapping, a record into a call, a field or parameter back to the column it came from.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::UploadError;
use crate::service::NewCall;

/// The call fields a column can fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    PhoneNumber,
    FullName,
    FirstName,
    LastName,
    PhoneticFullName,
    PhoneticFirstName,
    PhoneticLastName,
    Email,
    ExternalId,
}

pub(super) const FIELDS: [(&str, Field); 9] = [
    ("phone_number", Field::PhoneNumber),
    ("full_name", Field::FullName),
    ("first_name", Field::FirstName),
    ("last_name", Field::LastName),
    ("phonetic_full_name", Field::PhoneticFullName),
    ("phonetic_first_name", Field::PhoneticFirstName),
    ("phonetic_last_name", Field::PhoneticLastName),
    ("email", Field::Email),
    ("external_id", Field::ExternalId),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Field(Field),
    Parameter(String),
    Dropped,
}

/// What each column of the file becomes.
#[derive(Debug, Clone)]
pub(super) struct Columns {
    pub(super) headers: Vec<String>,
    pub(super) targets: Vec<Target>,
}

impl Columns {
    pub(super) fn from_header(
        path: &Path,
        header: &csv::StringRecord,
        renames: &[(String, String)],
    ) -> Result<Self, UploadError> {
        let bad = |problem: String| UploadError::Header {
            path: path.to_owned(),
            problem,
        };
        let headers: Vec<String> = header.iter().map(|h| h.trim().to_owned()).collect();
        if let Some(problem) = unnamed_column(&headers) {
            return Err(bad(problem));
        }
        for (from, _) in renames {
            if !headers.iter().any(|h| h == from) {
                return Err(bad(format!(
                    "--map {from}=…: the header has no column {from:?} (columns: {})",
                    headers.join(", ")
                )));
            }
        }
        let targets: Vec<Target> = headers
            .iter()
            .map(|h| {
                let name = renames
                    .iter()
                    .find(|(from, _)| from == h)
                    .map_or(h.as_str(), |(_, to)| to.as_str());
                if name.is_empty() {
                    return Target::Dropped;
                }
                FIELDS
                    .iter()
                    .find(|(field, _)| field.eq_ignore_ascii_case(name))
                    .map_or_else(
                        || Target::Parameter(name.to_owned()),
                        |(_, f)| Target::Field(*f),
                    )
            })
            .collect();
        let mut seen = BTreeMap::new();
        for (header, target) in headers.iter().zip(&targets) {
            if *target == Target::Dropped {
                continue;
            }
            if let Some(first) = seen.insert(format!("{target:?}"), header) {
                return Err(bad(format!(
                    "columns {first:?} and {header:?} both fill the same field; drop one with --map {header}="
                )));
            }
        }
        if !targets.contains(&Target::Field(Field::PhoneNumber)) {
            return Err(bad(format!(
                "no phone_number column (columns: {}); name one phone_number or use --map COLUMN=phone_number",
                headers.join(", ")
            )));
        }
        Ok(Columns { headers, targets })
    }

    /// The row as a call; empty cells are not sent. `Err` with the index of a column whose
    /// value is not UTF-8 text.
    pub(super) fn call(&self, record: &csv::ByteRecord) -> Result<NewCall, usize> {
        let mut call = NewCall::default();
        for (i, (target, value)) in self.targets.iter().zip(record.iter()).enumerate() {
            if *target == Target::Dropped {
                continue;
            }
            let value = std::str::from_utf8(value).map_err(|_| i)?.trim();
            if value.is_empty() {
                continue;
            }
            let text = Some(value.to_owned());
            match target {
                Target::Field(Field::PhoneNumber) => call.phone_number = value.to_owned(),
                Target::Field(Field::FullName) => call.full_name = text,
                Target::Field(Field::FirstName) => call.first_name = text,
                Target::Field(Field::LastName) => call.last_name = text,
                Target::Field(Field::PhoneticFullName) => call.phonetic_full_name = text,
                Target::Field(Field::PhoneticFirstName) => call.phonetic_first_name = text,
                Target::Field(Field::PhoneticLastName) => call.phonetic_last_name = text,
                Target::Field(Field::Email) => call.email = text,
                Target::Field(Field::ExternalId) => call.external_id = text,
                Target::Parameter(name) => {
                    call.custom_parameters
                        .insert(name.clone(), value.to_owned());
                }
                Target::Dropped => {}
            }
        }
        Ok(call)
    }

    /// The column a call field (as the API names it) or a parameter came from.
    pub(super) fn column_of(&self, field: &str) -> String {
        let wanted = FIELDS.iter().find(|(name, _)| *name == field).map_or_else(
            || Target::Parameter(field.to_owned()),
            |(_, f)| Target::Field(*f),
        );
        self.targets
            .iter()
            .position(|t| *t == wanted)
            .map_or_else(|| field.to_owned(), |i| self.headers[i].clone())
    }
}

/// A column whose header is empty: its values would go nowhere (a parameter needs a name), so
/// the file is refused rather than a column dropped unseen. Named by its position and its
/// neighbours, as a spreadsheet shows it.
pub(super) fn unnamed_column(headers: &[String]) -> Option<String> {
    let i = headers.iter().position(String::is_empty)?;
    let letter = spreadsheet_column(i);
    let before = i
        .checked_sub(1)
        .map(|b| format!(" after {:?}", headers[b]))
        .unwrap_or_default();
    Some(format!(
        "line 1: column {} ({letter}){before} has an empty header: name it (any name but a call field's is a custom parameter), or delete the column",
        i + 1
    ))
}

/// `A`, `B`, … `Z`, `AA`, … for the zero-based column `i`.
pub(super) fn spreadsheet_column(mut i: usize) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(b'A' + (i % 26) as u8);
        if i < 26 {
            break;
        }
        i = i / 26 - 1;
    }
    letters.reverse();
    String::from_utf8(letters).unwrap_or_default()
}
