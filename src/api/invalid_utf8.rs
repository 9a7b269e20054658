//! Text the service should not have sent replaced by U+FFFD before the body is decoded,
//! where that is harmless: invalid UTF-8 inside a string value, and nowhere else; a NUL's or
//! a lone surrogate's escape inside any string. Why each is harmless is argued in
//! docs/how-it-stays-correct.md, "Text repaired before decoding".
//!
//! Invariants:
//! - the body's structure is the one the service sent: an invalid sequence holds no ASCII
//!   byte, and an escape is replaced by one of the same shape (`\ufffd`);
//! - invalid UTF-8 is repaired only inside a string *value*, never in a key, never after a
//!   backslash; outside a string it stays a syntax error;
//! - a NUL (`\u0000`) and a lone surrogate escape (`\ud800`–`\udfff` not one half of a
//!   high-then-low pair) become `\ufffd` in keys and values alike; a whole pair is copied as
//!   it is; only a backslash that is not itself escaped starts an escape (`\\ud800` is text);
//! - the common body costs one search: a body that is UTF-8 and holds no `\u` escape to
//!   replace (`holds_escape_to_replace`: `memchr` finds each `\u`, read no further than its
//!   four digits) is left as it is, before any scan or copy;
//! - what was replaced is told with the uid of the outermost object around it that has one
//!   (a call, not its attempt), so the log names the call once.

/// serde_json's recursion limit: a body nested deeper is unreadable whatever its bytes, so
/// the scan stops following it there (and keeps its memory bounded).
const MAX_DEPTH: usize = 128;

/// The most bytes of a `uid` value kept for the log (a uuid has 36).
const UID_BYTES: usize = 64;

/// The replacement character as JSON writes it: the shape of every escape it replaces.
const REPLACEMENT_ESCAPE: &[u8] = b"\\ufffd";

/// The bytes of one `\uXXXX` escape.
const ESCAPE_LEN: usize = 6;

/// A body with what the decoder would refuse replaced where harmless.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Repaired {
    pub body: Vec<u8>,
    /// How many invalid sequences, NULs and lone surrogates became U+FFFD.
    pub replaced: usize,
    /// The uids of the outermost objects around them (none when no object there has one).
    pub uids: Vec<String>,
}

/// `body` with the invalid UTF-8 of its string values, and the NULs and lone surrogates of
/// its strings, replaced; or `None` when there is nothing to replace, or invalid UTF-8 that
/// cannot be (the body stays as it is, and the decoder says why it cannot be read).
pub(super) fn repair(body: &[u8]) -> Option<Repaired> {
    let valid = std::str::from_utf8(body).is_ok();
    if valid && !holds_escape_to_replace(body) {
        return None;
    }
    let mut scan = Scan::default();
    let mut out = Vec::with_capacity(body.len() + 16);
    for chunk in body.utf8_chunks() {
        scan.copy(chunk.valid().as_bytes(), &mut out);
        if scan.too_deep {
            return None;
        }
        if chunk.invalid().is_empty() {
            continue;
        }
        if !scan.in_value_text() {
            return None;
        }
        scan.replaced();
        out.extend_from_slice("\u{FFFD}".as_bytes());
    }
    // An escape found by the search may have been outside any string: then nothing was
    // replaced.
    (scan.replaced > 0).then_some(Repaired {
        body: out,
        replaced: scan.replaced,
        uids: scan.uids,
    })
}

/// What a `\u` escape at the start of some text writes, as far as the repair cares.
#[derive(Debug, PartialEq, Eq)]
enum Escape {
    /// `\u0000`: replaced.
    Nul,
    /// A surrogate that is not one half of a pair: replaced.
    LoneSurrogate,
    /// A high surrogate's escape followed by a low one's (twelve bytes): copied.
    Pair,
    /// Not a `\u` escape, or one of any other code unit, or a broken one (left to the decoder).
    Other,
}

/// The escape at the start of `text` (its first byte a backslash that starts an escape).
fn escape_at(text: &[u8]) -> Escape {
    match code_unit(text) {
        Some(0) => Escape::Nul,
        Some(0xD800..=0xDBFF) => {
            let next = text.get(ESCAPE_LEN..).and_then(code_unit);
            match next {
                Some(0xDC00..=0xDFFF) => Escape::Pair,
                _ => Escape::LoneSurrogate,
            }
        }
        Some(0xDC00..=0xDFFF) => Escape::LoneSurrogate,
        _ => Escape::Other,
    }
}

/// The UTF-16 code unit a `\uXXXX` escape at the start of `text` writes (hex digits in
/// either case, as JSON allows).
fn code_unit(text: &[u8]) -> Option<u16> {
    let digits = text.strip_prefix(b"\\u")?.get(..4)?;
    digits.iter().try_fold(0u16, |unit, &digit| {
        let value = char::from(digit).to_digit(16)?;
        Some(unit << 4 | value as u16)
    })
}

/// Whether `body` holds an escape `repair` replaces: a NUL's or a lone surrogate's, at a
/// backslash that starts an escape. Inside strings this is exactly what the scan replaces
/// (a backslash starts an escape when an even number of backslashes comes before it, as the
/// scan's `escaped` says); outside them it may find one the scan does not replace, which
/// costs a scan and changes nothing.
fn holds_escape_to_replace(body: &[u8]) -> bool {
    // The end of the last pair found: its low half is not looked at alone.
    let mut pair_end = 0;
    for at in memchr::memmem::find_iter(body, b"\\u") {
        if at < pair_end || !starts_escape(body, at) {
            continue;
        }
        match escape_at(&body[at..]) {
            Escape::Nul | Escape::LoneSurrogate => return true,
            Escape::Pair => pair_end = at + 2 * ESCAPE_LEN,
            Escape::Other => {}
        }
    }
    false
}

/// Whether the backslash at `at` starts an escape: each two backslashes before it are one
/// escaped backslash, text.
fn starts_escape(body: &[u8], at: usize) -> bool {
    let before = body[..at].iter().rev().take_while(|&&b| b == b'\\');
    before.count() % 2 == 0
}

/// Where the scan is in the body: in a string or not, and the containers around it.
#[derive(Debug, Default)]
struct Scan {
    containers: Vec<Container>,
    string: Option<Text>,
    escaped: bool,
    too_deep: bool,
    replaced: usize,
    /// The uids found for the replacements so far, in body order.
    uids: Vec<String>,
}

#[derive(Debug, Default)]
struct Container {
    object: bool,
    /// In an object: the next string is a key.
    expect_key: bool,
    /// In an object: the last key was `uid`.
    after_uid_key: bool,
    uid: Option<String>,
    /// A replacement directly in this container's strings.
    repaired_here: bool,
    /// The uids of repaired objects inside it (the outermost ones with a uid).
    inner_uids: Vec<String>,
    /// A repaired container inside it had no uid of its own.
    repaired_inside: bool,
}

/// The string being scanned: a key, a value, and whether it is kept (a key, to know `uid`;
/// the value of a `uid` key, for the log).
#[derive(Debug)]
struct Text {
    key: bool,
    kept: Option<Vec<u8>>,
}

impl Scan {
    /// Scans `valid` (UTF-8) into `out`, each NUL or lone surrogate escape in a string
    /// replaced; stops at the decoder's depth (`too_deep`).
    fn copy(&mut self, valid: &[u8], out: &mut Vec<u8>) {
        let mut rest = valid;
        while let Some(&byte) = rest.first() {
            let escape = if byte == b'\\' && self.in_text() {
                escape_at(rest)
            } else {
                Escape::Other
            };
            let taken = match escape {
                Escape::Nul | Escape::LoneSurrogate => {
                    REPLACEMENT_ESCAPE.iter().for_each(|&b| self.step(b));
                    self.replaced();
                    out.extend_from_slice(REPLACEMENT_ESCAPE);
                    ESCAPE_LEN
                }
                // Both halves at once: the low half alone would look lone.
                Escape::Pair => {
                    let pair = &rest[..2 * ESCAPE_LEN];
                    pair.iter().for_each(|&b| self.step(b));
                    out.extend_from_slice(pair);
                    pair.len()
                }
                Escape::Other => {
                    self.step(byte);
                    if self.too_deep {
                        return;
                    }
                    out.push(byte);
                    1
                }
            };
            rest = &rest[taken..];
        }
    }

    fn step(&mut self, byte: u8) {
        if let Some(text) = &mut self.string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.end_string();
                return;
            }
            if let Some(kept) = &mut text.kept
                && kept.len() < UID_BYTES
            {
                kept.push(byte);
            }
            return;
        }
        match byte {
            b'"' => self.start_string(),
            b'{' | b'[' => self.open(byte == b'{'),
            b'}' | b']' => self.close(),
            b':' => {
                if let Some(top) = self.containers.last_mut() {
                    top.expect_key = false;
                }
            }
            b',' => {
                if let Some(top) = self.containers.last_mut() {
                    top.expect_key = top.object;
                    top.after_uid_key = false;
                }
            }
            _ => {}
        }
    }

    /// Inside a string, a key or a value, not right after its backslash.
    fn in_text(&self) -> bool {
        self.string.is_some() && !self.escaped
    }

    /// Inside a string value, not right after its backslash.
    fn in_value_text(&self) -> bool {
        self.string.as_ref().is_some_and(|text| !text.key) && !self.escaped
    }

    fn replaced(&mut self) {
        self.replaced += 1;
        if let Some(text) = &mut self.string {
            // A uid with a byte that is not text is no uid: its parser refuses it anyway.
            text.kept = None;
        }
        if let Some(top) = self.containers.last_mut() {
            top.repaired_here = true;
        }
    }

    fn start_string(&mut self) {
        let top = self.containers.last();
        let key = top.is_some_and(|c| c.object && c.expect_key);
        let kept = (key || top.is_some_and(|c| c.object && c.after_uid_key)).then(Vec::new);
        self.string = Some(Text { key, kept });
    }

    fn end_string(&mut self) {
        let Some(text) = self.string.take() else {
            return;
        };
        let Some(top) = self.containers.last_mut() else {
            return;
        };
        match (text.key, text.kept) {
            (true, kept) => top.after_uid_key = kept.as_deref() == Some(b"uid"),
            (false, Some(kept)) => {
                top.uid = Some(String::from_utf8_lossy(&kept).into_owned());
            }
            (false, None) => {}
        }
    }

    fn open(&mut self, object: bool) {
        if self.containers.len() >= MAX_DEPTH {
            self.too_deep = true;
            return;
        }
        self.containers.push(Container {
            object,
            expect_key: object,
            ..Container::default()
        });
    }

    /// Ends a container: what was repaired in it is told to its parent, under its uid when
    /// it has one (the outermost uid wins).
    fn close(&mut self) {
        let Some(closed) = self.containers.pop() else {
            return;
        };
        let repaired = closed.repaired_here || closed.repaired_inside;
        let (uids, anonymous) = match closed.uid {
            Some(uid) if repaired || !closed.inner_uids.is_empty() => (vec![uid], false),
            _ => (closed.inner_uids, repaired),
        };
        match self.containers.last_mut() {
            Some(parent) => {
                parent.inner_uids.extend(uids);
                parent.repaired_inside |= anonymous;
            }
            None => self.uids.extend(uids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(body: &[u8]) -> Option<(String, usize, Vec<String>)> {
        repair(body).map(|r| (String::from_utf8(r.body).unwrap(), r.replaced, r.uids))
    }

    #[test]
    fn valid_utf8_is_left_alone() {
        assert_eq!(repair("{\"name\": \"Zoë\"}".as_bytes()), None);
    }

    #[test]
    fn invalid_bytes_in_a_value_become_one_replacement_each_and_name_the_call() {
        let body =
            b"{\"data\":[{\"uid\":\"a\",\"name\":\"ok\"},{\"uid\":\"b\",\"info\":{\"first_name\":\"Jos\xe9 \xff\xfe\"},\"attempts\":[{\"uid\":\"c\",\"note\":\"\xc3\"}]}],\"page\":1}";
        let (text, replaced, uids) = repaired(body).unwrap();
        assert_eq!(
            text,
            "{\"data\":[{\"uid\":\"a\",\"name\":\"ok\"},{\"uid\":\"b\",\"info\":{\"first_name\":\"Jos\u{FFFD} \u{FFFD}\u{FFFD}\"},\"attempts\":[{\"uid\":\"c\",\"note\":\"\u{FFFD}\"}]}],\"page\":1}"
        );
        // `\xff\xfe` is two invalid sequences, `\xe9 ` one: three in the name, one in the note.
        assert_eq!(replaced, 4);
        // The call's uid, once, not its attempt's.
        assert_eq!(uids, ["b"]);
    }

    #[test]
    fn a_uid_after_the_bad_text_still_names_the_object() {
        let body = b"{\"data\":{\"name\":\"\xff\",\"uid\":\"late\"}}";
        let (text, _, uids) = repaired(body).unwrap();
        assert_eq!(text, "{\"data\":{\"name\":\"\u{FFFD}\",\"uid\":\"late\"}}");
        assert_eq!(uids, ["late"]);
        // With no uid anywhere, nothing to name.
        let (_, replaced, uids) = repaired(b"[\"\xff\"]").unwrap();
        assert_eq!((replaced, uids), (1, Vec::<String>::new()));
    }

    #[test]
    fn nothing_but_a_value_is_repaired() {
        for body in [
            // A key: two keys could become one.
            &b"{\"uid\":\"a\",\"na\xffme\":\"x\"}"[..],
            // Outside any string.
            b"{\"uid\":\"a\",\"n\":1\xff}",
            b"\xff{}",
            // Right after a backslash: the escape is broken, not the text.
            b"{\"n\":\"a\\\xff\"}",
        ] {
            assert_eq!(repair(body), None, "{}", String::from_utf8_lossy(body));
        }
        // An escaped quote does not end the string, so what follows is still its text.
        let (text, _, _) = repaired(b"{\"n\":\"say \\\"\xff\\\"\"}").unwrap();
        assert_eq!(text, "{\"n\":\"say \\\"\u{FFFD}\\\"\"}");
    }

    #[test]
    fn a_nul_in_a_value_becomes_a_replacement_and_names_the_call() {
        let body =
            br#"{"data":[{"uid":"a","info":{"first_name":"Jo\u0000e\u0000"},"note":"\\u0000"}]}"#;
        let (text, replaced, uids) = repaired(body).unwrap();
        // An escaped backslash before `u0000` is text: kept.
        assert_eq!(
            text,
            r#"{"data":[{"uid":"a","info":{"first_name":"Jo\ufffde\ufffd"},"note":"\\u0000"}]}"#
        );
        assert_eq!((replaced, uids), (2, vec!["a".to_owned()]));
        let decoded: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            decoded["data"][0]["info"]["first_name"],
            "Jo\u{FFFD}e\u{FFFD}"
        );
        // With invalid UTF-8 beside it, both are replaced.
        let (text, replaced, _) = repaired(b"{\"n\":\"\\u0000\xff\"}").unwrap();
        assert_eq!(
            (text.as_str(), replaced),
            ("{\"n\":\"\\ufffd\u{FFFD}\"}", 2)
        );
    }

    #[test]
    fn a_nul_in_a_key_becomes_a_replacement_and_a_key_named_so_is_no_uid() {
        let (text, replaced, uids) = repaired(br#"{"uid":"a","na\u0000me":"x"}"#).unwrap();
        assert_eq!(text, r#"{"uid":"a","na\ufffdme":"x"}"#);
        assert_eq!((replaced, uids), (1, vec!["a".to_owned()]));
        let (_, _, uids) = repaired(br#"{"uid\u0000":"b","n":"\u0000"}"#).unwrap();
        assert_eq!(uids, Vec::<String>::new());
    }

    #[test]
    fn a_nul_that_is_text_and_other_escapes_are_left_alone() {
        for body in [&br#"{"note":"\\u0000"}"#[..], br#"{"n":"\u0001"}"#] {
            assert_eq!(repair(body), None, "{}", String::from_utf8_lossy(body));
        }
    }

    /// Each lone surrogate escape, in any string, becomes `\ufffd`; a pair, an escaped
    /// backslash's text and other escapes stay. (body, repaired body, how many replaced)
    const SURROGATES: &[(&str, Option<&str>, usize)] = &[
        // A lone high in a name, as the issue saw it; upper-case digits alike.
        (
            r#"{"name":"bad \ud800 surrogate"}"#,
            Some(r#"{"name":"bad \ufffd surrogate"}"#),
            1,
        ),
        (r#"{"n":"\uDBFF!"}"#, Some(r#"{"n":"\ufffd!"}"#), 1),
        // A lone low; two lows; a low then a high: no pair.
        (r#"{"n":"\udc00x"}"#, Some(r#"{"n":"\ufffdx"}"#), 1),
        (
            r#"{"n":"\udfff\ude00"}"#,
            Some(r#"{"n":"\ufffd\ufffd"}"#),
            2,
        ),
        (
            r#"{"n":"\ude00\ud83d"}"#,
            Some(r#"{"n":"\ufffd\ufffd"}"#),
            2,
        ),
        // A high at the end of a string: half an emoji.
        (r#"{"n":"ab\ud83d"}"#, Some(r#"{"n":"ab\ufffd"}"#), 1),
        // A high followed by an escape that is not a low's: the other escape stays.
        (
            r#"{"n":"\ud83d\u0041"}"#,
            Some(r#"{"n":"\ufffd\u0041"}"#),
            1,
        ),
        (r#"{"n":"\ud83d\n"}"#, Some(r#"{"n":"\ufffd\n"}"#), 1),
        // A high followed by a pair: the first high alone is lone.
        (
            r#"{"n":"\ud83d\ud83d\ude00"}"#,
            Some(r#"{"n":"\ufffd\ud83d\ude00"}"#),
            1,
        ),
        // A high followed by the text `\ude00` (an escaped backslash): lone.
        (
            r#"{"n":"\ud83d\\ude00"}"#,
            Some(r#"{"n":"\ufffd\\ude00"}"#),
            1,
        ),
        // The text `\ud83d` followed by a low's escape: the low is lone.
        (
            r#"{"n":"\\ud83d\ude00"}"#,
            Some(r#"{"n":"\\ud83d\ufffd"}"#),
            1,
        ),
        // An escaped backslash, then an escape.
        (r#"{"n":"\\\ud800"}"#, Some(r#"{"n":"\\\ufffd"}"#), 1),
        // Custom parameters' keys and values, a variable's value, any nested string.
        (
            r#"{"custom_parameters":{"k\ud800":"v\udfff","ok":"x"}}"#,
            Some(r#"{"custom_parameters":{"k\ufffd":"v\ufffd","ok":"x"}}"#),
            2,
        ),
        (
            r#"{"attempts":[{"variables":[{"name":"v","value":"\udbff"}]}]}"#,
            Some(r#"{"attempts":[{"variables":[{"name":"v","value":"\ufffd"}]}]}"#),
            1,
        ),
        (
            r#"[[{"a":["\ud800"]}]]"#,
            Some(r#"[[{"a":["\ufffd"]}]]"#),
            1,
        ),
        // A pair is an emoji, in either case: nothing to replace.
        (r#"{"n":"\ud83d\ude00"}"#, None, 0),
        (r#"{"n":"\uD83D\uDE00 \udbff\udfff"}"#, None, 0),
        // Escaped backslashes: the text `\ud800`, not an escape.
        (r#"{"n":"\\ud800"}"#, None, 0),
        (r#"{"n":"\\\\ud800"}"#, None, 0),
        // Other escapes, next to the surrogates: left alone.
        (r#"{"n":"\u00e9\ud7ff\ue000\"\\"}"#, None, 0),
        // A broken escape is the decoder's to refuse.
        (r#"{"n":"\ud80"}"#, None, 0),
    ];

    #[test]
    fn lone_surrogates_become_replacements_and_pairs_stay() {
        for &(body, expected, count) in SURROGATES {
            let found = repaired(body.as_bytes());
            let got = found.as_ref().map(|(text, n, _)| (text.as_str(), *n));
            assert_eq!(got, expected.map(|e| (e, count)), "{body}");
            // The search finds exactly the bodies the scan repairs (all of them strings).
            assert_eq!(
                holds_escape_to_replace(body.as_bytes()),
                expected.is_some(),
                "{body}"
            );
            // What the decoder refused it reads once repaired.
            let decodes = |text: &str| serde_json::from_str::<serde_json::Value>(text).is_ok();
            if let Some(expected) = expected {
                assert!(!decodes(body) && decodes(expected), "{body}");
            }
        }
    }

    #[test]
    fn a_lone_surrogate_is_stored_as_a_replacement_and_names_the_call() {
        let body = br#"{"data":[{"uid":"a","info":{"first_name":"Jo \ud83d\ude00\ud83d"},"attempts":[{"uid":"c","vars":[{"value":"\udc00"}]}]},{"uid":"b","name":"\ud83d\ude00"}]}"#;
        let (text, replaced, uids) = repaired(body).unwrap();
        assert_eq!((replaced, uids), (2, vec!["a".to_owned()]));
        let decoded: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            decoded["data"][0]["info"]["first_name"],
            "Jo \u{1F600}\u{FFFD}"
        );
        assert_eq!(
            decoded["data"][0]["attempts"][0]["vars"][0]["value"],
            "\u{FFFD}"
        );
        assert_eq!(decoded["data"][1]["name"], "\u{1F600}");
        // A key so replaced is no `uid`, a `uid` so replaced names nothing.
        let (_, _, uids) = repaired(br#"{"uid\ud800":"b","n":"\udc00"}"#).unwrap();
        assert_eq!(uids, Vec::<String>::new());
        // Beside invalid UTF-8, both are replaced.
        let (text, replaced, _) = repaired(b"{\"n\":\"\\ud800\xff\"}").unwrap();
        assert_eq!(
            (text.as_str(), replaced),
            ("{\"n\":\"\\ufffd\u{FFFD}\"}", 2)
        );
    }

    #[test]
    fn a_lone_surrogate_outside_a_string_is_left_to_the_decoder() {
        // The search may find it (it does not follow strings); the scan replaces nothing.
        assert_eq!(repair(br#"{"n":1\ud800}"#), None);
        assert_eq!(repair(br#"\ud800"#), None);
    }

    #[test]
    fn a_body_nested_beyond_the_decoders_limit_is_not_scanned_further() {
        let mut body = "[".repeat(MAX_DEPTH + 1).into_bytes();
        body.extend_from_slice(b"\"\xff\"");
        body.extend_from_slice("]".repeat(MAX_DEPTH + 1).as_bytes());
        assert_eq!(repair(&body), None);
    }
}
