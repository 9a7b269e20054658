//! Redaction: text from a response, before an error holds it, with every secret the request
//! carried removed (as sent, form-encoded or JSON-quoted) and made safe to show.

use crate::service::models::ErrorBody;
use crate::untrusted::untrusted_text;

/// The most characters of one field of an error body (a title, a detail, a pointer) an
/// error keeps.
pub(super) const FIELD_CHARS: usize = 500;

/// Text from a response as an error may hold it: `secrets` removed, then made safe to show
/// ([`untrusted_text`]: control characters escaped, at most `max_chars`). Every text the
/// API client takes from a response into an error passes here.
pub(crate) fn safe(text: &str, secrets: &[&str], max_chars: usize) -> String {
    // Redacted before it is cut, so no prefix of a secret survives at the cut.
    untrusted_text(&redact(text, secrets), max_chars)
}

/// `body`'s strings with `secrets` removed and made safe to show ([`safe`]): a service that
/// echoes the request (its Authorization header) must not put our token into an error or a
/// log line, nor a hostile one its escape sequences into the operator's terminal.
pub(crate) fn safe_error_body(mut body: ErrorBody, secrets: &[&str]) -> ErrorBody {
    let clean = |text: &mut Option<String>| {
        if let Some(t) = text.as_mut() {
            *t = safe(t, secrets, FIELD_CHARS);
        }
    };
    clean(&mut body.title);
    clean(&mut body.detail);
    for e in &mut body.errors {
        clean(&mut e.title);
        clean(&mut e.detail);
        if let Some(source) = e.source.as_mut() {
            clean(&mut source.pointer);
        }
    }
    body
}

/// `text` with every spelling of each secret a server could echo — as sent in a form, as
/// written inside a JSON string, or plain — replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let form: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        let json = serde_json::to_string(secret).unwrap_or_default();
        let json = json.trim_matches('"');
        for spelling in [form.as_str(), json, secret] {
            if !spelling.is_empty() {
                out = out.replace(spelling, "[redacted]");
            }
        }
    }
    out
}

/// The first line of a body, `secrets` removed, made safe to show and at most 200
/// characters, for error messages.
pub(crate) fn excerpt(body: &[u8], secrets: &[&str]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.trim().lines().next().unwrap_or("").trim();
    safe(line, secrets, 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t+/ value\"x";

    #[test]
    fn redaction_covers_every_spelling_and_keeps_the_rest() {
        let form: String = url::form_urlencoded::byte_serialize(SECRET.as_bytes()).collect();
        let text = format!("a {SECRET} b {form} c {}", serde_json::json!(SECRET));
        assert_eq!(
            redact(&text, &[SECRET]),
            "a [redacted] b [redacted] c \"[redacted]\""
        );
        assert_eq!(redact("nothing here", &[SECRET, ""]), "nothing here");
    }
}
