//! A call to be created, checked before it is sent: every problem the spec lets a client
//! find before the service does (the bulk endpoint refuses a whole chunk for one bad row).

use super::models::NewCall;
use super::timestamp::Timestamp;

/// What is wrong with one field of a call to be created, found before sending it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field (`phone_number`, or a custom parameter's name).
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Every problem the spec lets us find before the service does: a phone number that is not
/// `+` and 7 to 15 digits ([`PHONE_DIGITS`]), a custom parameter that looks like a datetime but carries no zone.
pub fn new_call_problems(call: &NewCall) -> Vec<FieldProblem> {
    let mut problems = Vec::new();
    if let Some(reason) = phone_problem(&call.phone_number) {
        problems.push(FieldProblem {
            field: "phone_number".into(),
            reason,
        });
    }
    for (name, value) in &call.custom_parameters {
        if looks_like_a_datetime(value) && Timestamp::parse(value).is_err() {
            problems.push(FieldProblem {
                field: name.clone(),
                reason: format!(
                    "{value:?} is a datetime without a zone; add Z or an offset like +02:00"
                ),
            });
        }
    }
    problems
}

/// The digits an international number may have after its `+`: E.164 allows at most 15
/// (country code included), and no country's numbers are shorter than 7 with it. The service
/// refuses a number outside this (its bulk endpoint then refuses the whole chunk), so the
/// check before sending refuses it too.
pub const PHONE_DIGITS: std::ops::RangeInclusive<usize> = 7..=15;

fn phone_problem(phone: &str) -> Option<String> {
    let ok = phone.strip_prefix('+').is_some_and(|digits| {
        PHONE_DIGITS.contains(&digits.len()) && digits.chars().all(|c| c.is_ascii_digit())
    });
    (!ok).then(|| {
        format!(
            "{phone:?} is not in international form (E.164): + followed by {} to {} digits, e.g. +15550100",
            PHONE_DIGITS.start(),
            PHONE_DIGITS.end()
        )
    })
}

/// `YYYY-MM-DD` followed by a time (`T` or a space, then `hh:mm`): what a spreadsheet writes
/// for a datetime. A plain date is not one.
fn looks_like_a_datetime(value: &str) -> bool {
    let b = value.trim().as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    (0..4).all(digit)
        && at(4, b'-')
        && digit(5)
        && digit(6)
        && at(7, b'-')
        && digit(8)
        && digit(9)
        && (at(10, b'T') || at(10, b't') || at(10, b' '))
        && digit(11)
        && digit(12)
        && at(13, b':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(phone: &str, params: &[(&str, &str)]) -> NewCall {
        NewCall {
            phone_number: phone.into(),
            custom_parameters: params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..NewCall::default()
        }
    }

    #[test]
    fn phone_numbers_are_plus_and_7_to_15_digits() {
        assert!(new_call_problems(&call("+15550100", &[])).is_empty());
        assert!(new_call_problems(&call("+1234567", &[])).is_empty());
        assert!(new_call_problems(&call("+123456789012345", &[])).is_empty());
        for bad in [
            "15550100",
            "+1 555 0100",
            "+",
            "",
            "+1555abc",
            "+123456",
            "+1234567890123456",
            "+1234567890123456789",
        ] {
            let problems = new_call_problems(&call(bad, &[]));
            assert_eq!(problems.len(), 1, "{bad:?}");
            assert_eq!(problems[0].field, "phone_number");
        }
    }

    #[test]
    fn datetimes_need_a_zone_other_values_pass() {
        let ok = [
            ("due_at", "2026-03-01T10:00:00Z"),
            ("due_at", "2026-03-01T10:00:00+02:00"),
            ("day", "2026-03-01"),
            ("plan", "gold"),
            ("note", "2026-03-01 is the day"),
        ];
        assert!(new_call_problems(&call("+15550100", &ok)).is_empty());
        let problems = new_call_problems(&call(
            "+15550100",
            &[
                ("due_at", "2026-03-01T10:00:00"),
                ("seen", "2026-03-01 10:00"),
            ],
        ));
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["due_at", "seen"]);
        assert!(
            problems[0].reason.contains("without a zone"),
            "{}",
            problems[0]
        );
    }
}
