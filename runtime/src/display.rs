//! Escaping for Lazaret's own messages (spec README 'Terminal output
//! hygiene'): a name Lazaret did not choose (a path, a directory under
//! `.git/modules`, a file name in an error, a coordinator's message) is
//! printed with its control characters escaped, so it cannot move the
//! cursor, set the title or write the clipboard, and cannot start a line of
//! its own.
//!
//! Escaped: every C0 control (U+0000..=U+001F), DEL and every C1 control
//! (U+0080..=U+009F), that is every `char::is_control`. A C0 control or DEL
//! becomes `\xNN` (`\n`, `\r`, `\t` by name), a C1 control `\u{NN}`, and a
//! byte that is not UTF-8 `\xNN` (so `\x9b` is the byte and `\u{9b}` the
//! character). Everything else, other Unicode included, is untouched.
//! A backslash is not escaped: the result is for reading, not for parsing
//! back, so a name that itself contains `\x1b` reads the same as one with
//! an ESC.
//!
//! Two forms: [`escape_line`] (and [`escape_bytes`], [`escape_os_str`] for
//! names that may not be UTF-8) escapes line breaks and tabs too, for a
//! one-line diagnostic and for a name embedded in any message: a newline
//! taken from a name must not start what looks like a line of Lazaret's
//! own. [`escape_controls`] keeps `\n` and `\t`, for the multi-line reports
//! Lazaret composes itself. [`escape_json_text`] makes JSON text that
//! serde_json wrote safe to print (serde_json escapes C0 controls in
//! strings but writes DEL and C1 controls as they are).
use std::borrow::Cow;
use std::ffi::OsStr;
use std::path::Path;

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_digits(out: &mut String, byte: u8) {
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0x0f)]));
}

/// Whether `c` is escaped; `keep_breaks` keeps `\n` and `\t`.
fn escaped(c: char, keep_breaks: bool) -> bool {
    c.is_control() && !(keep_breaks && matches!(c, '\n' | '\t'))
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        _ => {
            // A control is U+0000..=U+001F, U+007F or U+0080..=U+009F: one
            // byte's worth.
            let code = u8::try_from(u32::from(c)).unwrap_or(u8::MAX);
            if code < 0x80 {
                out.push_str("\\x");
                hex_digits(out, code);
            } else {
                out.push_str("\\u{");
                hex_digits(out, code);
                out.push('}');
            }
        }
    }
}

fn escape_str(text: &str, keep_breaks: bool) -> Cow<'_, str> {
    let Some(first) = text.find(|c| escaped(c, keep_breaks)) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    push_str_escaped(&mut out, &text[first..], keep_breaks);
    Cow::Owned(out)
}

fn push_str_escaped(out: &mut String, text: &str, keep_breaks: bool) {
    for c in text.chars() {
        if escaped(c, keep_breaks) {
            push_escaped(out, c);
        } else {
            out.push(c);
        }
    }
}

/// `text` with every control character escaped except `\n` and `\t`: for
/// multi-line text Lazaret composes itself.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    escape_str(text, true)
}

/// `text` with every control character escaped, line breaks and tabs
/// included: for a one-line diagnostic, or a name inside any message.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape_str(text, false)
}

/// [`escape_line`] for bytes that may not be UTF-8: each byte that is not
/// part of a UTF-8 character becomes `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return escape_line(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        push_str_escaped(&mut out, chunk.valid(), false);
        for &b in chunk.invalid() {
            out.push_str("\\x");
            hex_digits(&mut out, b);
        }
    }
    Cow::Owned(out)
}

/// [`escape_bytes`] of a name or path as the OS gives it.
pub fn escape_os_str(name: &OsStr) -> Cow<'_, str> {
    escape_bytes(name.as_encoded_bytes())
}

/// [`escape_bytes`] of a path.
pub fn escape_path(path: &Path) -> Cow<'_, str> {
    escape_os_str(path.as_os_str())
}

/// JSON text (as serde_json writes it) with every control character that
/// is not JSON whitespace written as a `\u00NN` escape. Outside strings
/// JSON text has no such character, so this stays valid JSON with the same
/// value.
pub fn escape_json_text(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && !matches!(c, '\n' | '\t' | '\r');
    if !json.contains(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if unsafe_char(c) {
            out.push_str("\\u00");
            hex_digits(&mut out, u8::try_from(u32::from(c)).unwrap_or(u8::MAX));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn controls_are_escaped_and_other_text_is_untouched() {
        // (what, input, escape_line, escape_controls)
        let table: &[(&str, &str, &str, &str)] = &[
            ("ESC", "a\x1bb", "a\\x1bb", "a\\x1bb"),
            ("BEL", "a\x07", "a\\x07", "a\\x07"),
            (
                "a title sequence",
                "evil\x1b]0;x\x07",
                "evil\\x1b]0;x\\x07",
                "evil\\x1b]0;x\\x07",
            ),
            ("CSI introducer", "\x1b[2J", "\\x1b[2J", "\\x1b[2J"),
            ("C1 CSI U+009B", "a\u{9b}2J", "a\\u{9b}2J", "a\\u{9b}2J"),
            (
                "C1 OSC U+009D",
                "\u{9d}52;c;x",
                "\\u{9d}52;c;x",
                "\\u{9d}52;c;x",
            ),
            ("DEL", "a\x7fb", "a\\x7fb", "a\\x7fb"),
            ("NUL", "a\0b", "a\\x00b", "a\\x00b"),
            ("carriage return", "ok\rfake", "ok\\rfake", "ok\\rfake"),
            (
                "newline",
                "a\nlazaret: b",
                "a\\nlazaret: b",
                "a\nlazaret: b",
            ),
            ("tab", "a\tb", "a\\tb", "a\tb"),
            (
                "ordinary Unicode",
                "é ❤ 𝐀 “q” \u{a0} ü",
                "é ❤ 𝐀 “q” \u{a0} ü",
                "é ❤ 𝐀 “q” \u{a0} ü",
            ),
            ("backslash", "C:\\x1b", "C:\\x1b", "C:\\x1b"),
            ("empty", "", "", ""),
        ];
        for (what, input, line, text) in table {
            assert_eq!(escape_line(input), *line, "{what}: escape_line");
            assert_eq!(escape_controls(input), *text, "{what}: escape_controls");
            assert_eq!(
                escape_bytes(input.as_bytes()),
                *line,
                "{what}: escape_bytes"
            );
            // Nothing left to escape: escaping twice changes nothing.
            assert_eq!(escape_line(line), *line, "{what}: twice");
            assert!(!escape_line(input).contains(char::is_control), "{what}");
        }
        assert!(matches!(escape_line("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped_as_bytes() {
        let table: &[(&[u8], &str)] = &[
            (b"a\xffb", "a\\xffb"),
            (b"\x9b2J", "\\x9b2J"),
            (b"\xc2\x9b2J", "\\u{9b}2J"),
            (b"\xe2\x9d", "\\xe2\\x9d"),
            (b"ok\xe2\x9d\xa4\x1b]0;x\x07\xc3", "ok❤\\x1b]0;x\\x07\\xc3"),
        ];
        for (input, expected) in table {
            assert_eq!(escape_bytes(input), *expected);
            assert_eq!(escape_os_str(OsStr::from_bytes(input)), *expected);
            assert_eq!(escape_path(Path::new(OsStr::from_bytes(input))), *expected);
        }
    }

    #[test]
    fn json_text_keeps_its_value_and_loses_its_controls() {
        let value = serde_json::json!({
            "workspace": "/w/evil\u{1b}]0;x\u{7}\u{9b}2J\u{7f}é",
            "list": ["\u{9d}52;c;aGk=\u{9c}"],
        });
        for text in [
            value.to_string(),
            serde_json::to_string_pretty(&value).unwrap_or_default(),
        ] {
            // serde_json escapes C0 but not DEL or C1.
            assert!(text.contains('\u{9b}') && text.contains('\u{7f}'));
            let safe = escape_json_text(&text);
            assert!(
                !safe.contains(|c: char| c.is_control() && c != '\n'),
                "{safe}"
            );
            let back: serde_json::Value = serde_json::from_str(&safe).unwrap_or_default();
            assert_eq!(back, value);
        }
        assert!(matches!(escape_json_text("{\"a\": 1}\n"), Cow::Borrowed(_)));
    }
}
