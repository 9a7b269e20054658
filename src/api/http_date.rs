//! The `Date` header: the service's clock as it answered.
//!
//! RFC 9110's IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the two obsolete forms it asks
//! a recipient to accept. The day name is redundant with the date, and `httpdate` refuses a
//! date whose day name does not match it: a `Date` rewritten by hand or by a proxy that
//! changed only the year (`Sat, 28 Nov 2099 …`, a Saturday in 2026 but a Friday in 2099) was
//! then dropped as if there were none. Such a date is read by its date; whether the clock it
//! shows can be trusted is the sync's question (`sync/service_clock.rs`), not the parser's.

use reqwest::header::{DATE, HeaderMap};
use time::PrimitiveDateTime;
use time::macros::format_description;

use crate::service::Timestamp;

/// The `Date` header (whole seconds); `None` when absent or not an HTTP date.
pub(super) fn date(headers: &HeaderMap) -> Option<Timestamp> {
    let text = headers.get(DATE)?.to_str().ok()?.trim();
    match httpdate::parse_http_date(text) {
        Ok(at) => {
            let nanos = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
            Timestamp::from_unix_nanos(i128::try_from(nanos).ok()?)
        }
        Err(_) => fixdate_with_any_day_name(text),
    }
}

/// IMF-fixdate read by its date, whatever its day name says.
fn fixdate_with_any_day_name(text: &str) -> Option<Timestamp> {
    let (day_name, rest) = text.split_once(", ")?;
    if day_name.len() != 3 || !day_name.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let format =
        format_description!("[day] [month repr:short] [year] [hour]:[minute]:[second] GMT");
    let at = PrimitiveDateTime::parse(rest, &format).ok()?;
    Timestamp::from_unix_nanos(at.assume_utc().unix_timestamp_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dated(text: &str) -> Option<Timestamp> {
        let mut headers = HeaderMap::new();
        headers.insert(DATE, text.parse().unwrap());
        date(&headers)
    }

    fn ts(text: &str) -> Option<Timestamp> {
        Some(Timestamp::parse(text).unwrap())
    }

    #[test]
    fn date_reads_the_http_date() {
        assert_eq!(date(&HeaderMap::new()), None);
        assert_eq!(
            dated("Tue, 24 Nov 2026 10:15:07 GMT"),
            ts("2026-11-24T10:15:07Z")
        );
        assert_eq!(
            dated("Wednesday, 21-Oct-15 07:28:00 GMT"),
            ts("2015-10-21T07:28:00Z")
        );
        assert_eq!(
            dated("Wed Oct 21 07:28:00 2015"),
            ts("2015-10-21T07:28:00Z")
        );
        for garbage in [
            "yesterday",
            "Tue, 24 Nov 2026",
            "Tuesday, 24 Nov 2026 10:15:07 GMT",
        ] {
            assert_eq!(dated(garbage), None, "{garbage}");
        }
    }

    #[test]
    fn a_date_whose_day_name_is_wrong_is_read_by_its_date() {
        // 28 Nov 2099 is a Saturday: a clock far ahead, not a missing header.
        assert_eq!(
            dated("Sat, 28 Nov 2099 02:52:08 GMT"),
            ts("2099-11-28T02:52:08Z")
        );
        assert_eq!(
            dated("Mon, 01 Jan 1971 00:00:00 GMT"),
            ts("1971-01-01T00:00:00Z")
        );
        // Still an HTTP date: a day that does not exist is none.
        assert_eq!(dated("Sat, 31 Feb 2099 02:52:08 GMT"), None);
    }
}
