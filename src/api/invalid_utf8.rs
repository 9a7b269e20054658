//! Invalid UTF-8 in the service's text replaced by U+FFFD before the body is decoded, where
//! that is harmless: inside a string value, and nowhere else.
//!
//! serde_json refuses a whole body for one byte that is not UTF-8 (a misspelt name, a
//! Latin-1 byte from an old system), and the same page comes back on every pass: the
//! schedule would never get past it. A body that is not UTF-8 is therefore scanned once and
//! each maximal invalid sequence (`<[u8]>::utf8_chunks`) inside a string *value* becomes
//! U+FFFD. Why that cannot turn a broken body into a wrong reading of it:
//! - an invalid sequence never holds an ASCII byte, so every quote, backslash, bracket,
//!   comma, colon, digit and literal stays where it was: the body's structure is the one the
//!   service sent;
//! - outside a string a non-ASCII byte is a syntax error, and U+FFFD is one too: it stays
//!   unreadable;
//! - an object's keys are never repaired: two keys differing in an invalid byte would become
//!   one, and a misspelt `name` key would be read as some other field; a body with such a key
//!   stays unreadable;
//! - after a backslash nothing is repaired: the escape was broken, not the text;
//! - a value that must be a uid, an instant or one of a set of words is refused by its own
//!   parser when it holds U+FFFD, as it would be with any other wrong character.
//!
//! A NUL (`\u0000`, which JSON allows) in a string becomes U+FFFD (`\ufffd`) too:
//! PostgreSQL's text and `jsonb` cannot hold one, and would refuse the call's page on every
//! pass; both destinations store the same replacement, so they hold the same calls. In a key
//! as well as a value: an unknown key is kept, in the object's `extra` JSON, and no key
//! callsync reads holds U+FFFD, so none can become another. The escape is replaced by another
//! of the same shape (a backslash, `u`, four hex digits), so the body's structure is
//! untouched; an escaped backslash before `u0000` is text, not a NUL.
//!
//! What was replaced is told with the uid of the outermost object around it that has one
//! (a call, not its attempt), so the log can name the call once.

/// serde_json's recursion limit: a body nested deeper is unreadable whatever its bytes, so
/// the scan stops following it there (and keeps its memory bounded).
const MAX_DEPTH: usize = 128;

/// The most bytes of a `uid` value kept for the log (a uuid has 36).
const UID_BYTES: usize = 64;

/// A NUL as JSON writes it, and the replacement character written the same way.
const NUL_ESCAPE: &[u8] = b"\\u0000";
const REPLACEMENT_ESCAPE: &[u8] = b"\\ufffd";

/// A body with its invalid UTF-8 replaced where harmless.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Repaired {
    pub body: Vec<u8>,
    /// How many invalid sequences and NULs became U+FFFD.
    pub replaced: usize,
    /// The uids of the outermost objects around them (none when no object there has one).
    pub uids: Vec<String>,
}

/// `body` with the invalid UTF-8 and the NULs of its string values replaced, or `None` when
/// there is nothing to replace, or invalid UTF-8 that cannot be (the body stays as it is, and
/// the decoder says why it cannot be read).
pub(super) fn repair(body: &[u8]) -> Option<Repaired> {
    let valid = std::str::from_utf8(body).is_ok();
    if valid && memchr::memmem::find(body, NUL_ESCAPE).is_none() {
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
    // A NUL's escape may have been text, or in a key: then nothing was replaced.
    (scan.replaced > 0).then_some(Repaired {
        body: out,
        replaced: scan.replaced,
        uids: scan.uids,
    })
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
    /// Scans `valid` (UTF-8) into `out`, each NUL escape in a string replaced; stops at the
    /// decoder's depth (`too_deep`).
    fn copy(&mut self, valid: &[u8], out: &mut Vec<u8>) {
        let mut rest = valid;
        while let Some(&byte) = rest.first() {
            if rest.starts_with(NUL_ESCAPE) && self.in_text() {
                REPLACEMENT_ESCAPE.iter().for_each(|&b| self.step(b));
                self.replaced();
                out.extend_from_slice(REPLACEMENT_ESCAPE);
                rest = &rest[NUL_ESCAPE.len()..];
                continue;
            }
            self.step(byte);
            if self.too_deep {
                return;
            }
            out.push(byte);
            rest = &rest[1..];
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

    #[test]
    fn a_body_nested_beyond_the_decoders_limit_is_not_scanned_further() {
        let mut body = "[".repeat(MAX_DEPTH + 1).into_bytes();
        body.extend_from_slice(b"\"\xff\"");
        body.extend_from_slice("]".repeat(MAX_DEPTH + 1).as_bytes());
        assert_eq!(repair(&body), None);
    }
}
