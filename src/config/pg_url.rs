//! `warehouse.url` as text: its two forms (a `postgresql://` URI, or libpq's `key=value`
//! connection string), split into pairs the way libpq and tokio-postgres read them, and any
//! password in it found and redacted whatever else is wrong with it.
//!
//! The password check reads the text as generously as either parser would: tokio-postgres
//! takes a URI's user info up to its *first* `@` (a `/` before it included, where libpq would
//! stop), and percent-decodes it and the parameters' names (`pass%77ord=`). Redaction
//! covers more than the check, to be safe on a URL that parses as nothing: from the user
//! info's first `:` to the *last* `@` (a password holding an `@`), and a `password`
//! parameter's value to the end of the text.

/// What replaces a password.
pub const REDACTED: &str = "[redacted]";

/// `url` with any password replaced by [`REDACTED`]; the same text when it holds none.
pub fn redacted(url: &str) -> String {
    match uri_rest(url) {
        Some(at) => redact_uri(url, at),
        None => redact_key_values(url),
    }
}

/// Whether `url` holds a password in any form callsync's or libpq's parser would read.
pub fn holds_password(url: &str) -> bool {
    redacted(url) != url
}

/// Where a URI's text after `scheme://` begins, for any scheme (redaction does not care
/// which); `None` for a `key=value` string.
fn uri_rest(url: &str) -> Option<usize> {
    let scheme_end = url.find("://")?;
    let scheme = &url[..scheme_end];
    let is_scheme = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    is_scheme.then_some(scheme_end + 3)
}

fn redact_uri(url: &str, rest_at: usize) -> String {
    let rest = &url[rest_at..];
    let mut out = url[..rest_at].to_owned();
    let mut tail = rest;
    // User info: up to the first `@` (tokio-postgres's reading), a password after its `:`,
    // hidden up to the last `@` in case it holds one.
    if let Some(first_at) = rest.find('@')
        && let Some(colon) = rest[..first_at].find(':')
    {
        let last_at = rest.rfind('@').unwrap_or(first_at);
        out.push_str(&rest[..=colon]);
        out.push_str(REDACTED);
        tail = &rest[last_at..];
    }
    let Some(query_at) = tail.find('?') else {
        out.push_str(tail);
        return out;
    };
    out.push_str(&tail[..=query_at]);
    let mut first = true;
    for pair in tail[query_at + 1..].split('&') {
        if !first {
            out.push('&');
        }
        first = false;
        let (key, _) = pair.split_once('=').unwrap_or((pair, ""));
        if is_password_key(&percent_decoded(key)) && pair.contains('=') {
            // To the end: a value holding `&` would leave its rest in the next "pair".
            out.push_str(key);
            out.push('=');
            out.push_str(REDACTED);
            return out;
        }
        out.push_str(pair);
    }
    out
}

fn is_password_key(key: &str) -> bool {
    key.trim().eq_ignore_ascii_case("password")
}

/// A `key=value` string with every `password` value hidden: a quoted one to its closing
/// quote (or the end, unterminated), a bare one to the next white space.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = find_password_keyword(rest) {
        let after_key = found + "password".len();
        let after_space = rest[after_key..].trim_start();
        let Some(value) = after_space.strip_prefix('=') else {
            out.push_str(&rest[..after_key]);
            rest = &rest[after_key..];
            continue;
        };
        let value = value.trim_start();
        let value_at = rest.len() - value.len();
        out.push_str(&rest[..value_at]);
        out.push_str(REDACTED);
        rest = &value[value_end(value).0..];
    }
    out.push_str(rest);
    out
}

/// Where `password` begins as a keyword (at the start, or after white space).
fn find_password_keyword(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let at = from + found;
        if at == 0 || text[..at].ends_with(char::is_whitespace) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The length of a `key=value` string's value at the start of `value`, as libpq reads it,
/// and whether it ended well (a quoted one at its closing quote).
fn value_end(value: &str) -> (usize, bool) {
    let quoted = value.starts_with('\'');
    let mut chars = value.char_indices().skip(usize::from(quoted));
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return (at + 1, true),
            c if c.is_whitespace() && !quoted => return (at, true),
            _ => {}
        }
    }
    (value.len(), !quoted)
}

/// The pairs of a `key=value` connection string, as libpq (and tokio-postgres) read them:
/// a keyword, `=` with optional white space around it, and a value, bare (up to white space)
/// or in single quotes, `\` escaping the next character in either.
pub fn key_value_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        let named = crate::untrusted::untrusted_text(key, 40);
        let value = rest[key_end..].trim_start().strip_prefix('=');
        let (Some(value), false) = (value, key.is_empty()) else {
            return Err(format!(
                "`{named}` is not a key=value pair: write pairs separated by spaces (host=HOST dbname=DBNAME user=USER), or a postgresql:// URI"
            ));
        };
        let value = value.trim_start();
        let (end, ended) = value_end(value);
        let quoted = value.starts_with('\'');
        if !ended {
            return Err(format!("the value of `{named}` has no closing quote"));
        }
        if end == 0 {
            return Err(format!("`{named}` has no value"));
        }
        let raw = if quoted {
            &value[1..end - 1]
        } else {
            &value[..end]
        };
        pairs.push((key.to_owned(), unescaped(raw)));
        rest = value[end..].trim_start();
    }
    Ok(pairs)
}

fn unescaped(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// `pairs` as a `key=value` string tokio-postgres reads back to the same pairs.
pub fn key_value_text(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(key, value)| {
            let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
            format!("{key}='{escaped}'")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `%XX` decoded as tokio-postgres decodes a URI's parts: a `%` not followed by two hex
/// digits stays, `+` is not a space; bytes that are not UTF-8 are replaced.
pub fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_password_is_redacted() {
        for (url, shown) in [
            (
                "postgresql://callsync:hunter2@db.example.com/callsync",
                "postgresql://callsync:[redacted]@db.example.com/callsync",
            ),
            // tokio-postgres reads the user info up to the first `@`, a `/` included.
            (
                "postgresql://callsync:hun/ter2@db.example.com/callsync",
                "postgresql://callsync:[redacted]@db.example.com/callsync",
            ),
            // A password holding an `@`: hidden up to the last one.
            (
                "postgres://u:p@ss@db/x?sslmode=require",
                "postgres://u:[redacted]@db/x?sslmode=require",
            ),
            (
                "postgresql://u:%68unter2@h/d",
                "postgresql://u:[redacted]@h/d",
            ),
            (
                "postgresql://h/d?sslmode=require&password=hunter2&x=1",
                "postgresql://h/d?sslmode=require&password=[redacted]",
            ),
            (
                "postgresql://h/d?pass%77ord=hunter2",
                "postgresql://h/d?pass%77ord=[redacted]",
            ),
            // Not a valid URI at all: redacted all the same.
            ("postgresql://u:hunter2@", "postgresql://u:[redacted]@"),
            ("mysql://u:hunter2@h/d", "mysql://u:[redacted]@h/d"),
            (
                "host=h password=hunter2 dbname=d",
                "host=h password=[redacted] dbname=d",
            ),
            (
                "host=h password = 'hun ter\\'2' dbname=d",
                "host=h password = [redacted] dbname=d",
            ),
            (
                "host=h password='unterminated",
                "host=h password=[redacted]",
            ),
            ("PASSWORD=x", "PASSWORD=[redacted]"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
            assert!(holds_password(url), "{url}");
        }
    }

    #[test]
    fn the_configuration_s_debug_form_hides_it_too() {
        let config = crate::config::PostgresConfig {
            url: "postgresql://u:hunter2@h/d".into(),
            password: None,
            schema: crate::config::DEFAULT_SCHEMA.into(),
        };
        let shown = format!("{config:?}");
        assert!(
            shown.contains("postgresql://u:[redacted]@h/d") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn urls_without_a_password_are_shown_as_they_are() {
        for url in [
            "postgresql://callsync@db.example.com:5432/callsync?sslmode=verify-full",
            "postgresql://callsync@/warehouse?host=/run/postgresql",
            "postgresql://u@[::1]:5432/d?application_name=a@b",
            "postgresql:///d",
            "host=/run/postgresql dbname=warehouse user=callsync passfile=/etc/pgpass",
            "not a url",
            "",
        ] {
            assert_eq!(redacted(url), url);
            assert!(!holds_password(url), "{url}");
        }
    }

    #[test]
    fn key_value_strings_are_split_as_libpq_splits_them() {
        let pairs = key_value_pairs(
            "  host=db.example.com port = 6543 dbname='my \\'dw\\'' application_name=a\\ b options='-c x=1'",
        )
        .unwrap();
        let expected = [
            ("host", "db.example.com"),
            ("port", "6543"),
            ("dbname", "my 'dw'"),
            ("application_name", "a b"),
            ("options", "-c x=1"),
        ];
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(pairs, expected);
        let owned: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(key_value_pairs(&key_value_text(&owned)).unwrap(), owned);
        for bad in [
            "host",
            "host=",
            "host='x",
            "host='x\\'",
            "host=x dbname",
            "=x",
        ] {
            assert!(key_value_pairs(bad).is_err(), "{bad}");
        }
        assert_eq!(
            key_value_pairs("host=''").unwrap(),
            [("host".to_owned(), String::new())]
        );
    }

    #[test]
    fn percent_decoding_is_tokio_postgres_s() {
        assert_eq!(percent_decoded("a%20b+c%2"), "a b+c%2");
        assert_eq!(percent_decoded("pass%77ord"), "password");
    }
}
