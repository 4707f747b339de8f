//! Tokens of the state-table dialect (protocol/README.md), with 1-based line
//! and column so every error can name `file:line:col`.

use crate::error::{CodegenError, Pos};

/// One token kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// An identifier or keyword (`MODULE`, `IF`, `EXCEPT`, ...).
    Ident(String),
    /// A string literal without its quotes.
    Str(String),
    /// A natural-number literal.
    Num(i64),
    /// An operator or punctuation, spelled as in the source (`/\`, `==`, `\in`).
    Sym(&'static str),
    /// A line of four or more dashes (module header or separator).
    Dashes,
    /// A line of four or more `=` (module end).
    End,
}

/// A token with its position and byte range in the source.
#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub pos: Pos,
    pub start: usize,
    pub end: usize,
}

/// Multi-character symbols, longest first so that `==` wins over `=`.
const SYMBOLS: &[&str] = &[
    "|->", "<=>", "<<", ">>", "==", "/\\", "\\/", "=>", "->", "<=", ">=", "=<", "/=", "..", "[]",
    "<>", "~>", "=", "#", "<", ">", "+", "-", "(", ")", "[", "]", "{", "}", ",", ":", "'", "!",
    "@", "~", "_",
];

/// Backslash operators the dialect accepts, with their canonical spelling.
const BACKSLASH_WORDS: &[(&str, &str)] = &[
    ("in", "\\in"),
    ("equiv", "<=>"),
    ("notin", "\\notin"),
    ("cup", "\\cup"),
    ("union", "\\cup"),
    ("A", "\\A"),
    ("E", "\\E"),
    ("leq", "<="),
    ("geq", ">="),
    ("lnot", "~"),
    ("neg", "~"),
    ("land", "/\\"),
    ("lor", "\\/"),
];

/// Splits `src` into tokens, dropping `\*` line comments and `(* *)` block
/// comments (nested).
pub fn lex(file: &str, src: &str) -> Result<Vec<Token>, CodegenError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    let mut line = 1u32;
    let mut line_start = 0usize;
    let pos_of = |i: usize, line: u32, line_start: usize| Pos {
        line,
        col: u32::try_from(src[line_start..i].chars().count() + 1).unwrap_or(u32::MAX),
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            i += 1;
            line += 1;
            line_start = i;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let pos = pos_of(i, line, line_start);
        if src[i..].starts_with("\\*") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if src[i..].starts_with("(*") {
            let mut depth = 0u32;
            loop {
                if i >= bytes.len() {
                    return Err(CodegenError::syntax(file, pos, "unterminated comment `(*`"));
                }
                if src[i..].starts_with("(*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*)") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if bytes[i] == b'\n' {
                        line += 1;
                        line_start = i + 1;
                    }
                    i += 1;
                }
            }
            continue;
        }
        let start = i;
        let tok = if src[i..].starts_with("----") {
            while i < bytes.len() && bytes[i] == b'-' {
                i += 1;
            }
            Tok::Dashes
        } else if src[i..].starts_with("====") {
            while i < bytes.len() && bytes[i] == b'=' {
                i += 1;
            }
            Tok::End
        } else if c == b'"' {
            i += 1;
            let s = i;
            while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                if bytes[i] == b'\\' {
                    return Err(CodegenError::unsupported(
                        file,
                        pos_of(i, line, line_start),
                        "escape sequences in string literals",
                    ));
                }
                i += 1;
            }
            if i >= bytes.len() || bytes[i] != b'"' {
                return Err(CodegenError::syntax(
                    file,
                    pos,
                    "unterminated string literal",
                ));
            }
            i += 1;
            Tok::Str(src[s..i - 1].to_string())
        } else if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let n = src[start..i]
                .parse::<i64>()
                .map_err(|_| CodegenError::syntax(file, pos, "number literal out of range"))?;
            Tok::Num(n)
        } else if c.is_ascii_alphabetic() || c == b'_' && next_is_ident(bytes, i + 1) {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            Tok::Ident(src[start..i].to_string())
        } else if c == b'\\' {
            let s = i + 1;
            let mut e = s;
            while e < bytes.len() && bytes[e].is_ascii_alphabetic() {
                e += 1;
            }
            let word = &src[s..e];
            match BACKSLASH_WORDS.iter().find(|(w, _)| *w == word) {
                Some((_, canon)) => {
                    i = e;
                    Tok::Sym(canon)
                }
                None if src[i..].starts_with("\\/") => {
                    i += 2;
                    Tok::Sym("\\/")
                }
                None => {
                    return Err(CodegenError::unsupported(
                        file,
                        pos,
                        format!("operator `\\{word}`"),
                    ))
                }
            }
        } else {
            match SYMBOLS.iter().find(|s| src[i..].starts_with(**s)) {
                Some(sym) => {
                    i += sym.len();
                    Tok::Sym(canonical(sym))
                }
                None => {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    return Err(CodegenError::syntax(
                        file,
                        pos,
                        format!("unexpected character `{ch}`"),
                    ));
                }
            }
        };
        out.push(Token {
            tok,
            pos,
            start,
            end: i,
        });
    }
    Ok(out)
}

fn next_is_ident(bytes: &[u8], i: usize) -> bool {
    bytes
        .get(i)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

fn canonical(sym: &'static str) -> &'static str {
    match sym {
        "=<" => "<=",
        "/=" => "#",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_comments() {
        let toks = lex("t.tla", "a == \\* c\n  (* x\n *) f[s] # \"Up\"").unwrap_or_default();
        let kinds: Vec<_> = toks.iter().map(|t| t.tok.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                Tok::Ident("a".into()),
                Tok::Sym("=="),
                Tok::Ident("f".into()),
                Tok::Sym("["),
                Tok::Ident("s".into()),
                Tok::Sym("]"),
                Tok::Sym("#"),
                Tok::Str("Up".into()),
            ]
        );
        assert_eq!(toks[2].pos, Pos { line: 3, col: 5 });
    }

    #[test]
    fn unknown_backslash_operator_is_named() {
        let err = lex("t.tla", "x == a \\subseteq b")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("t.tla:1:8: unsupported construct: operator `\\subseteq`")
        );
    }
}
