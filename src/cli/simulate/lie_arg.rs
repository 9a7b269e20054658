//! `simulate --lie`: what the first schedule's list pages say wrongly (`simulator::Lie`).

use crate::simulator::{Lie, Simulator};

/// A lie as `--lie` spells it, before the simulator's calls exist.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::cli) enum LieArg {
    StampAhead(i64),
    ForeignUid,
    UidTwice,
    Mistyped(String, serde_json::Value),
}

const FORMS: &str = "stamp-ahead=SECS, foreign-uid, uid-twice or mistyped=FIELD:JSON (e.g. mistyped=is_test_call:\"yes\")";

/// `--lie`'s value.
pub(in crate::cli) fn parse_lie(text: &str) -> Result<LieArg, String> {
    let (name, value) = text.split_once('=').unwrap_or((text, ""));
    match (name, value) {
        ("stamp-ahead", secs) => secs
            .parse()
            .map(LieArg::StampAhead)
            .map_err(|_| format!("{secs:?} is not whole seconds: {FORMS}")),
        ("foreign-uid", "") => Ok(LieArg::ForeignUid),
        ("uid-twice", "") => Ok(LieArg::UidTwice),
        ("mistyped", spec) => {
            let (field, json) = spec
                .split_once(':')
                .ok_or_else(|| format!("{spec:?} is not FIELD:JSON: {FORMS}"))?;
            let value = serde_json::from_str(json)
                .map_err(|e| format!("{json:?} is not JSON ({e}): {FORMS}"))?;
            Ok(LieArg::Mistyped(field.to_owned(), value))
        }
        _ => Err(format!(
            "{text:?} is not a lie the simulator tells: {FORMS}"
        )),
    }
}

impl LieArg {
    /// Tells it about the first schedule's pages; a foreign uid is a call of the second.
    pub(in crate::cli) fn tell(&self, simulator: &Simulator) -> Result<(), String> {
        let schedules = simulator.schedule_uids();
        let first = *schedules
            .first()
            .ok_or("--lie needs a schedule (--schedules 1 or more)")?;
        let lie = match self {
            LieArg::StampAhead(secs) => Lie::StampAhead { secs: *secs },
            LieArg::ForeignUid => {
                let other = schedules
                    .get(1)
                    .ok_or("--lie foreign-uid needs --schedules 2 or more")?;
                let uid = (simulator.truth(*other).first().map(|c| c.uid))
                    .ok_or("--lie foreign-uid needs calls (--calls 1 or more)")?;
                Lie::ForeignUid(uid)
            }
            LieArg::UidTwice => Lie::UidTwice,
            LieArg::Mistyped(field, value) => Lie::Mistyped {
                field: field.clone(),
                value: value.clone(),
            },
        };
        simulator.lie_about(first, Some(lie));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lie_is_spelt_and_a_wrong_one_says_the_forms() {
        assert_eq!(parse_lie("stamp-ahead=200"), Ok(LieArg::StampAhead(200)));
        assert_eq!(parse_lie("stamp-ahead=-5"), Ok(LieArg::StampAhead(-5)));
        assert_eq!(parse_lie("foreign-uid"), Ok(LieArg::ForeignUid));
        assert_eq!(parse_lie("uid-twice"), Ok(LieArg::UidTwice));
        assert_eq!(
            parse_lie("mistyped=attempts_remaining:2.5"),
            Ok(LieArg::Mistyped(
                "attempts_remaining".into(),
                serde_json::json!(2.5)
            ))
        );
        for wrong in ["stamp-ahead=soon", "mistyped=x", "mistyped=x:{", "fib"] {
            let error = parse_lie(wrong).unwrap_err();
            assert!(error.contains("stamp-ahead=SECS"), "{wrong}: {error}");
        }
    }
}
