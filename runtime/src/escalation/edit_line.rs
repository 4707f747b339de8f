//! The line a developer edits a host escalation's command vector on, at the
//! developer prompt (spec 3.8, FR-5; schemas.md `DeveloperDecision`
//! `approved_command_argv`): the vector written as one line of printable
//! ASCII, and that line read back as a vector. No shell reads it: there is
//! no expansion, no variable, no globbing, no `PATH` lookup.
//!
//! Grammar: arguments are separated by spaces. Inside an argument, `'...'`
//! is literal text (it cannot hold `'`), `''` is an empty argument, and a
//! backslash escapes one thing: `\ ` a space, `\'` a quote, `\\` a
//! backslash, `\u{HEX}` the character with that code point (how the
//! prompt shows every character outside printable ASCII, so a shown
//! argument reads back as itself). Any other character stands for itself.
//! The prompt shows every argument in this form too ([`edit_arg`]).

/// Why an edit line is not a vector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditLineError {
    #[error("a quote opened at column {column} is not closed; close it with '")]
    UnclosedQuote { column: usize },
    #[error("the line ends in a backslash; escape a space, a quote, a backslash or \\u{{HEX}}")]
    TrailingBackslash,
    #[error("\\{found} at column {column} is no escape; use \\ (space), \\', \\\\ or \\u{{HEX}}")]
    UnknownEscape { column: usize, found: char },
    #[error("\\u at column {column} is not \\u{{HEX}} with 1 to 6 hex digits naming a character")]
    BadCodePoint { column: usize },
}

/// `argv` as an edit line: each argument in its [`edit_arg`] form, so
/// that [`parse_edit_line`] reads it back exactly.
pub fn edit_line(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| edit_arg(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One argument as the edit line writes it: printable ASCII, with a
/// space, a quote and a backslash escaped, every other character as
/// `\u{HEX}`, and the empty argument as `''`.
pub fn edit_arg(arg: &str) -> String {
    if arg.is_empty() {
        return "''".to_owned();
    }
    let mut out = String::new();
    for c in arg.chars() {
        match c {
            ' ' => out.push_str("\\ "),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '!'..='~' => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    out
}

/// The vector an edit line names (one pass over the line).
pub fn parse_edit_line(line: &str) -> Result<Vec<String>, EditLineError> {
    let mut argv = Vec::new();
    // The argument being read, once anything of it (an empty quote
    // included) was seen.
    let mut current: Option<String> = None;
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let column = at + 1;
        match c {
            ' ' => {
                if let Some(arg) = current.take() {
                    argv.push(arg);
                }
            }
            '\'' => {
                let arg = current.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, q)) => arg.push(q),
                        None => return Err(EditLineError::UnclosedQuote { column }),
                    }
                }
            }
            '\\' => {
                let arg = current.get_or_insert_with(String::new);
                match chars.next() {
                    Some((_, e @ (' ' | '\'' | '\\'))) => arg.push(e),
                    Some((_, 'u')) => arg.push(code_point(&mut chars, column)?),
                    Some((_, found)) => return Err(EditLineError::UnknownEscape { column, found }),
                    None => return Err(EditLineError::TrailingBackslash),
                }
            }
            c => current.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(arg) = current {
        argv.push(arg);
    }
    Ok(argv)
}

/// The `{HEX}` after `\u`.
fn code_point(
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
    column: usize,
) -> Result<char, EditLineError> {
    let bad = EditLineError::BadCodePoint { column };
    if chars.next().map(|(_, c)| c) != Some('{') {
        return Err(bad);
    }
    let mut value: u32 = 0;
    let mut digits = 0;
    loop {
        match chars.next().map(|(_, c)| c) {
            Some('}') if digits > 0 => break,
            Some(h) if digits < 6 => {
                let digit = h.to_digit(16).ok_or_else(|| bad.clone())?;
                value = value * 16 + digit;
                digits += 1;
            }
            _ => return Err(bad),
        }
    }
    char::from_u32(value).ok_or(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn shown_vectors_read_back_as_themselves() {
        for argv in [
            v(&["/usr/bin/git", "push", "origin"]),
            v(&["/bin/sh", "-c", "echo 'a b' \\ \\\\"]),
            v(&["/bin/printf", "", "caf\u{e9}", "\u{1b}[2J", "tab\there"]),
        ] {
            let line = edit_line(&argv);
            assert!(line.bytes().all(|b| (b' '..=b'~').contains(&b)), "{line}");
            assert_eq!(parse_edit_line(&line), Ok(argv), "{line}");
        }
        assert_eq!(
            edit_line(&v(&["/bin/echo", "a b", ""])),
            "/bin/echo a\\ b ''"
        );
    }

    #[test]
    fn lines_as_a_developer_types_them() {
        assert_eq!(
            parse_edit_line("  /usr/bin/git   commit -m 'fix the build' "),
            Ok(v(&["/usr/bin/git", "commit", "-m", "fix the build"]))
        );
        assert_eq!(parse_edit_line("a'b c'd"), Ok(v(&["ab cd"])));
        assert_eq!(parse_edit_line("x '' y"), Ok(v(&["x", "", "y"])));
        assert_eq!(parse_edit_line("\\u{41}\\u{1F600}"), Ok(v(&["A\u{1f600}"])));
        assert_eq!(parse_edit_line(""), Ok(Vec::new()));
        assert_eq!(parse_edit_line("   "), Ok(Vec::new()));
    }

    #[test]
    fn what_is_no_vector_is_refused_by_name() {
        assert_eq!(
            parse_edit_line("/bin/echo 'open"),
            Err(EditLineError::UnclosedQuote { column: 11 })
        );
        assert_eq!(
            parse_edit_line("/bin/echo x\\"),
            Err(EditLineError::TrailingBackslash)
        );
        assert_eq!(
            parse_edit_line("a \\n"),
            Err(EditLineError::UnknownEscape {
                column: 3,
                found: 'n'
            })
        );
        for bad in [
            "\\u41",
            "\\u{}",
            "\\u{1234567}",
            "\\u{d800}",
            "\\u{110000}",
            "\\u{4g}",
        ] {
            assert_eq!(
                parse_edit_line(bad),
                Err(EditLineError::BadCodePoint { column: 1 }),
                "{bad}"
            );
        }
    }
}
