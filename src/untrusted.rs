//! Text callsync did not write — the service's error titles, details, pointers and pages, a
//! warehouse's stored error — made safe to show on a terminal, in a log line or in the
//! warehouse: [`untrusted_text`] is the one function that does it, called where such text
//! enters an error (`api::redact::safe`, for every error the API client builds from a
//! response) or is read back from a file (`status`'s stored errors).
//!
//! An escape sequence would retitle or clear the operator's terminal, a CR or LF would forge
//! a log line, a bidi override would show a message other than the one written; so every
//! such character is written out visibly (`\u{1b}`) instead, and the length is capped so a
//! page of garbage cannot flood a log. Everything else passes unchanged.

/// What ends a text cut at its cap.
pub const CUT_MARKER: &str = "…[cut]";

/// `text` with every character that could act on a terminal or a log escaped as `\u{…}`
/// (see [`is_unsafe`]), at most `max_chars` characters long: a longer result is cut and ends
/// with [`CUT_MARKER`], which counts in the cap. Safe text within the cap comes back as it
/// was, so applying it twice changes nothing.
pub fn untrusted_text(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut len = 0;
    // Where the marker would go if the text turns out too long: the last point at which the
    // kept text and the marker still fit within the cap.
    let room = max_chars.saturating_sub(CUT_MARKER.chars().count());
    let mut cut_at = None;
    for c in text.chars() {
        let piece_len = if is_unsafe(c) { escaped_len(c) } else { 1 };
        if len + piece_len > room && cut_at.is_none() {
            cut_at = Some(out.len());
        }
        if len + piece_len > max_chars {
            out.truncate(cut_at.unwrap_or(0));
            if room == 0 {
                return CUT_MARKER.chars().take(max_chars).collect();
            }
            out.push_str(CUT_MARKER);
            return out;
        }
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
        len += piece_len;
    }
    out
}

/// A character no untrusted text may carry as itself: every control character (C0 with
/// ESC, CR, LF and TAB; DEL; C1), the bidirectional embeddings, overrides, isolates and
/// marks, zero-width and invisible characters, the line and paragraph separators, the byte
/// order mark, interlinear annotations and the tag characters (which hide text).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// JSON as serde_json writes it, with the characters it leaves as they are but a terminal
/// would act on (DEL, C1, bidi, separators: see [`is_unsafe`]) written as `\uXXXX` escapes.
/// They can only stand inside strings, so the JSON means exactly what it meant. A raw LF,
/// CR or TAB is whitespace between tokens (serde_json escapes them in strings) and stays.
pub fn json_safe(json: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_unsafe(c) && !matches!(c, '\n' | '\r' | '\t') {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    use std::fmt::Write as _;
    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
}

/// The length of `\u{…}` for `c`: four characters and its hexadecimal digits.
fn escaped_len(c: char) -> usize {
    let digits = (32 - u32::from(c).leading_zeros()).div_ceil(4).max(1);
    4 + digits as usize
}

/// `text` on one line, each run of whitespace (line breaks too) one space: a driver's or a
/// parser's message, which may span lines, inside one of callsync's.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn escapes_what_acts_on_a_terminal_and_keeps_the_rest() {
        let cases = [
            ("plain text: ok", "plain text: ok"),
            ("\u{1b}]0;owned\u{7}", "\\u{1b}]0;owned\\u{7}"),
            ("\u{1b}[2J\u{1b}[H", "\\u{1b}[2J\\u{1b}[H"),
            ("a\r\nINFO forged", "a\\u{d}\\u{a}INFO forged"),
            ("tab\there\0", "tab\\u{9}here\\u{0}"),
            (
                "del\u{7f} c1\u{85}\u{9b}31m",
                "del\\u{7f} c1\\u{85}\\u{9b}31m",
            ),
            (
                "\u{202e}txt.exe\u{202c} \u{2066}x\u{2069}",
                "\\u{202e}txt.exe\\u{202c} \\u{2066}x\\u{2069}",
            ),
            (
                "zw\u{200b}j\u{200d} ls\u{2028}ps\u{2029}",
                "zw\\u{200b}j\\u{200d} ls\\u{2028}ps\\u{2029}",
            ),
            ("bom\u{feff} tag\u{e0041}", "bom\\u{feff} tag\\u{e0041}"),
            ("Ünïcödé, 名前, emoji 📞", "Ünïcödé, 名前, emoji 📞"),
        ];
        for (text, shown) in cases {
            assert_eq!(untrusted_text(text, 200), shown, "{text:?}");
        }
    }

    #[test]
    fn a_long_text_is_cut_with_a_marker_within_the_cap() {
        assert_eq!(untrusted_text("abcdefghij", 10), "abcdefghij");
        assert_eq!(untrusted_text("abcdefghijk", 10), "abcd…[cut]");
        // An escape is never cut in half: it goes whole or not at all.
        assert_eq!(untrusted_text("abc\u{1b}defghijk", 12), "abc…[cut]");
        assert_eq!(untrusted_text("abcdefghijk", 3), "…[c");
        assert_eq!(untrusted_text("", 0), "");
        assert_eq!(untrusted_text("a", 0), "");
    }

    #[test]
    fn json_keeps_its_meaning_without_a_raw_control_character() {
        let value =
            serde_json::json!({"name": "a\u{1b}[2J\u{7f}\u{9b}\u{202e}\u{2028}\u{e0041}\n\"x\\"});
        let json = json_safe(&serde_json::to_string(&value).unwrap());
        assert!(!json.chars().any(is_unsafe), "{json}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).unwrap(),
            value
        );
        let pretty = json_safe(&serde_json::to_string_pretty(&value).unwrap());
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            value
        );
        assert!(pretty.contains('\n'));
        assert!(
            json.contains("\\u202e") && json.contains("\\udb40\\udc41"),
            "{json}"
        );
    }

    /// The nastiest text there is: any characters, weighted towards the dangerous ones.
    fn nasty() -> impl Strategy<Value = String> {
        let dangerous = prop::sample::select(vec![
            '\u{0}',
            '\u{7}',
            '\u{8}',
            '\t',
            '\n',
            '\u{b}',
            '\u{c}',
            '\r',
            '\u{1b}',
            '\u{7f}',
            '\u{80}',
            '\u{85}',
            '\u{9b}',
            '\u{9f}',
            '\u{61c}',
            '\u{200b}',
            '\u{200e}',
            '\u{2028}',
            '\u{2029}',
            '\u{202a}',
            '\u{202e}',
            '\u{2066}',
            '\u{2069}',
            '\u{feff}',
            '\u{e0001}',
            '\\',
            '[',
            ']',
            ';',
            '…',
        ]);
        prop::collection::vec(prop_oneof![any::<char>(), dangerous], 0..300)
            .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #[test]
        fn never_a_control_character_never_beyond_the_cap(text in nasty(), cap in 0usize..400) {
            let shown = untrusted_text(&text, cap);
            prop_assert!(!shown.chars().any(is_unsafe), "{:?}", shown);
            prop_assert!(shown.chars().count() <= cap, "{} > {}", shown.chars().count(), cap);
            // Shown text is shown as it is.
            prop_assert_eq!(untrusted_text(&shown, cap), shown.clone());
        }

        #[test]
        fn bytes_read_lossily_are_made_safe_too(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let shown = untrusted_text(&String::from_utf8_lossy(&bytes), 500);
            prop_assert!(!shown.chars().any(is_unsafe), "{:?}", shown);
            prop_assert!(shown.chars().count() <= 500);
        }
    }
}
