//! A recursive-descent parser for the state-table dialect.
//!
//! Top-level units start in column 1; a definition body is every following
//! token up to the next column-1 token. Bodies are parsed on demand, so
//! definitions the generator never needs (`Spec`, `Live_*`, fairness) may use
//! any TLA+ that TLC accepts. `/\` and `\/` bullet lists are layout
//! sensitive as in TLA+: a list item ends at the first token on a later line
//! at or left of its bullet's column.

use crate::ast::{BinOp, Definition, ExceptEntry, Expr, ExprKind, Module};
use crate::error::{CodegenError, Pos};
use crate::lexer::{lex, Tok, Token};

/// Lexes and splits a module into declarations and (unparsed) definitions.
pub struct Parsed {
    pub file: String,
    pub src: String,
    pub tokens: Vec<Token>,
    pub module: Module,
}

impl std::fmt::Debug for Parsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parsed")
            .field("file", &self.file)
            .field("module", &self.module)
            .finish_non_exhaustive()
    }
}

const ACCEPTED_EXTENDS: &[&str] = &["Naturals", "Integers", "TLC"];

/// Parses the module structure of `src`.
pub fn parse_module(file: &str, src: &str) -> Result<Parsed, CodegenError> {
    let tokens = lex(file, src)?;
    let mut units: Vec<(usize, usize)> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.pos.col == 1 || i == 0 {
            if let Some(last) = units.last_mut() {
                last.1 = i;
            }
            units.push((i, tokens.len()));
        }
    }
    let mut module = Module {
        name: String::new(),
        constants: Vec::new(),
        variables: Vec::new(),
        definitions: Vec::new(),
    };
    let mut ended = false;
    for (s, e) in units {
        let first = &tokens[s];
        if ended {
            break;
        }
        match &first.tok {
            Tok::Dashes => {
                if let Some(Token {
                    tok: Tok::Ident(m), ..
                }) = tokens.get(s + 1)
                {
                    if m == "MODULE" {
                        match tokens.get(s + 2) {
                            Some(Token {
                                tok: Tok::Ident(name),
                                ..
                            }) if s + 2 < e => module.name = name.clone(),
                            _ => {
                                return Err(CodegenError::syntax(
                                    file,
                                    first.pos,
                                    "expected a module name after MODULE",
                                ))
                            }
                        }
                    }
                }
            }
            Tok::End => ended = true,
            Tok::Ident(kw) => match kw.as_str() {
                "EXTENDS" => {
                    for (name, pos) in ident_list(file, &tokens[s + 1..e], first.pos)? {
                        if !ACCEPTED_EXTENDS.contains(&name.as_str()) {
                            return Err(CodegenError::unsupported(
                                file,
                                pos,
                                format!("EXTENDS {name} (only Naturals, Integers, TLC)"),
                            ));
                        }
                    }
                }
                "CONSTANT" | "CONSTANTS" => {
                    module
                        .constants
                        .extend(ident_list(file, &tokens[s + 1..e], first.pos)?);
                }
                "VARIABLE" | "VARIABLES" => {
                    module
                        .variables
                        .extend(ident_list(file, &tokens[s + 1..e], first.pos)?);
                }
                "ASSUME" | "THEOREM" => {}
                "LOCAL" | "INSTANCE" | "RECURSIVE" | "LET" => {
                    return Err(CodegenError::unsupported(file, first.pos, kw.clone()))
                }
                _ => module.definitions.push(definition(file, &tokens, s, e)?),
            },
            other => {
                return Err(CodegenError::syntax(
                    file,
                    first.pos,
                    format!("unexpected {} in column 1", describe(other)),
                ))
            }
        }
    }
    if module.name.is_empty() {
        return Err(CodegenError::syntax(
            file,
            Pos { line: 1, col: 1 },
            "no `---- MODULE Name ----` header",
        ));
    }
    Ok(Parsed {
        file: file.to_string(),
        src: src.to_string(),
        tokens,
        module,
    })
}

fn ident_list(file: &str, toks: &[Token], at: Pos) -> Result<Vec<(String, Pos)>, CodegenError> {
    let mut out = Vec::new();
    let mut expect_ident = true;
    for t in toks {
        match (&t.tok, expect_ident) {
            (Tok::Ident(n), true) => {
                out.push((n.clone(), t.pos));
                expect_ident = false;
            }
            (Tok::Sym(","), false) => expect_ident = true,
            (Tok::Dashes, false) => break,
            (other, _) => {
                return Err(CodegenError::syntax(
                    file,
                    t.pos,
                    format!("unexpected {} in a name list", describe(other)),
                ))
            }
        }
    }
    if out.is_empty() || expect_ident {
        return Err(CodegenError::syntax(file, at, "expected a list of names"));
    }
    Ok(out)
}

fn definition(
    file: &str,
    tokens: &[Token],
    s: usize,
    e: usize,
) -> Result<Definition, CodegenError> {
    let Tok::Ident(name) = &tokens[s].tok else {
        return Err(CodegenError::syntax(
            file,
            tokens[s].pos,
            "expected a definition",
        ));
    };
    let mut i = s + 1;
    let mut params = Vec::new();
    if matches!(tokens.get(i).map(|t| &t.tok), Some(Tok::Sym("("))) && i < e {
        i += 1;
        loop {
            match tokens.get(i).filter(|_| i < e).map(|t| &t.tok) {
                Some(Tok::Ident(p)) => params.push(p.clone()),
                _ => {
                    return Err(CodegenError::syntax(
                        file,
                        tokens[i.min(e - 1)].pos,
                        "expected a parameter name",
                    ))
                }
            }
            i += 1;
            match tokens.get(i).filter(|_| i < e).map(|t| &t.tok) {
                Some(Tok::Sym(",")) => i += 1,
                Some(Tok::Sym(")")) => {
                    i += 1;
                    break;
                }
                _ => {
                    return Err(CodegenError::syntax(
                        file,
                        tokens[i.min(e - 1)].pos,
                        "expected `,` or `)` in a parameter list",
                    ))
                }
            }
        }
    }
    match tokens.get(i).filter(|_| i < e).map(|t| &t.tok) {
        Some(Tok::Sym("==")) => {}
        _ => {
            return Err(CodegenError::syntax(
                file,
                tokens[i.min(e - 1)].pos,
                format!("expected `==` after `{name}`"),
            ))
        }
    }
    // A trailing `----` separator line belongs to no definition.
    let mut end = e;
    while end > i + 1 && tokens[end - 1].tok == Tok::Dashes {
        end -= 1;
    }
    Ok(Definition {
        name: name.clone(),
        params,
        pos: tokens[s].pos,
        body: (i + 1, end),
    })
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Str(s) => format!("string \"{s}\""),
        Tok::Num(n) => format!("number {n}"),
        Tok::Sym(s) => format!("`{s}`"),
        Tok::Dashes => "`----`".to_string(),
        Tok::End => "`====`".to_string(),
    }
}

impl Parsed {
    /// Parses the body of `def` as one expression.
    pub fn body(&self, def: &Definition) -> Result<Expr, CodegenError> {
        let (s, e) = def.body;
        if s >= e {
            return Err(CodegenError::syntax(
                &self.file,
                def.pos,
                format!("definition `{}` has an empty body", def.name),
            ));
        }
        let mut p = ExprParser {
            file: &self.file,
            toks: &self.tokens[s..e],
            i: 0,
            fence: 0,
            fence_line: 0,
        };
        let expr = p.expr(0)?;
        if let Some(t) = p.toks.get(p.i) {
            return Err(CodegenError::syntax(
                &self.file,
                t.pos,
                format!("unexpected {} after the expression", describe(&t.tok)),
            ));
        }
        Ok(expr)
    }

    /// Whether the body of `def` starts `[][`: a box-action property.
    pub fn is_box_action(&self, def: &Definition) -> bool {
        let (s, e) = def.body;
        e >= s + 2
            && self.tokens.get(s).map(|t| &t.tok) == Some(&Tok::Sym("[]"))
            && self.tokens.get(s + 1).map(|t| &t.tok) == Some(&Tok::Sym("["))
    }

    /// The source text of `e`, whitespace collapsed to single spaces.
    pub fn text(&self, e: &Expr) -> String {
        self.src
            .get(e.start..e.end)
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

struct ExprParser<'a> {
    file: &'a str,
    toks: &'a [Token],
    i: usize,
    /// Tokens on a later line than `fence_line` at a column <= `fence` end the current item.
    fence: u32,
    fence_line: u32,
}

// Binding powers (left, right) of infix operators, following TLA+ precedence.
fn infix(sym: &str) -> Option<(u8, u8, BinOp)> {
    Some(match sym {
        "=>" => (2, 1, BinOp::Implies),
        "<=>" => (4, 5, BinOp::Equiv),
        "=" => (10, 11, BinOp::Eq),
        "#" => (10, 11, BinOp::Ne),
        "<" => (10, 11, BinOp::Lt),
        "<=" => (10, 11, BinOp::Le),
        ">" => (10, 11, BinOp::Gt),
        ">=" => (10, 11, BinOp::Ge),
        "\\in" => (10, 11, BinOp::In),
        "\\notin" => (10, 11, BinOp::NotIn),
        "\\cup" => (16, 17, BinOp::Cup),
        ".." => (18, 19, BinOp::Range),
        "+" => (20, 21, BinOp::Add),
        "-" => (20, 21, BinOp::Sub),
        _ => return None,
    })
}

const AND_BP: u8 = 6;
const NOT_BP: u8 = 8;

impl<'a> ExprParser<'a> {
    fn peek(&self) -> Option<&'a Token> {
        let t = self.toks.get(self.i)?;
        if t.pos.line > self.fence_line && t.pos.col <= self.fence {
            return None;
        }
        Some(t)
    }

    fn peek_sym(&self) -> Option<&'static str> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Sym(s)) => Some(s),
            _ => None,
        }
    }

    fn here(&self) -> Pos {
        self.toks
            .get(self.i)
            .or_else(|| self.toks.last())
            .map(|t| t.pos)
            .unwrap_or_default()
    }

    fn err(&self, msg: impl Into<String>) -> CodegenError {
        CodegenError::syntax(self.file, self.here(), msg)
    }

    fn expect(&mut self, sym: &str) -> Result<(), CodegenError> {
        match self.peek_sym() {
            Some(s) if s == sym => {
                self.i += 1;
                Ok(())
            }
            _ => Err(self.err(format!("expected `{sym}`"))),
        }
    }

    fn ident(&mut self) -> Result<String, CodegenError> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Ident(n)) => {
                self.i += 1;
                Ok(n.clone())
            }
            _ => Err(self.err("expected a name")),
        }
    }

    fn prev_end(&self) -> usize {
        self.toks.get(self.i.wrapping_sub(1)).map_or(0, |t| t.end)
    }

    fn mk(&self, start: &Token, kind: ExprKind) -> Expr {
        Expr {
            pos: start.pos,
            start: start.start,
            end: self.prev_end(),
            kind,
        }
    }

    fn expr(&mut self, min_bp: u8) -> Result<Expr, CodegenError> {
        let start = self
            .peek()
            .ok_or_else(|| self.err("expected an expression"))?;
        let mut lhs = self.prefix()?;
        while let Some(sym) = self.peek_sym() {
            if sym == "/\\" || sym == "\\/" {
                if AND_BP < min_bp {
                    break;
                }
                self.i += 1;
                let rhs = self.expr(AND_BP + 1)?;
                let is_and = sym == "/\\";
                let mut items = match lhs.kind {
                    ExprKind::And(v) if is_and => v,
                    ExprKind::Or(v) if !is_and => v,
                    _ => vec![lhs],
                };
                items.push(rhs);
                lhs = self.mk(
                    start,
                    if is_and {
                        ExprKind::And(items)
                    } else {
                        ExprKind::Or(items)
                    },
                );
                continue;
            }
            if sym == "'" {
                self.i += 1;
                lhs = self.mk(start, ExprKind::Prime(Box::new(lhs)));
                continue;
            }
            if sym == "[" {
                self.i += 1;
                let idx = self.expr(0)?;
                self.expect("]")?;
                lhs = self.mk(start, ExprKind::Apply(Box::new(lhs), Box::new(idx)));
                continue;
            }
            let Some((lbp, rbp, op)) = infix(sym) else {
                break;
            };
            if lbp < min_bp {
                break;
            }
            self.i += 1;
            let rhs = self.expr(rbp)?;
            lhs = self.mk(start, ExprKind::Bin(op, Box::new(lhs), Box::new(rhs)));
        }
        Ok(lhs)
    }

    fn bullet_list(&mut self, sym: &'static str) -> Result<Expr, CodegenError> {
        let start = self
            .peek()
            .ok_or_else(|| self.err("expected an expression"))?;
        let col = start.pos.col;
        let saved = (self.fence, self.fence_line);
        let mut items = Vec::new();
        loop {
            let bullet = &self.toks[self.i];
            self.i += 1;
            self.fence = col;
            self.fence_line = bullet.pos.line;
            let item = self.expr(0);
            (self.fence, self.fence_line) = saved;
            items.push(item?);
            match self.peek() {
                Some(t) if t.tok == Tok::Sym(sym) && t.pos.col == col => {}
                _ => break,
            }
        }
        Ok(self.mk(
            start,
            if sym == "/\\" {
                ExprKind::And(items)
            } else {
                ExprKind::Or(items)
            },
        ))
    }

    fn prefix(&mut self) -> Result<Expr, CodegenError> {
        let t = self
            .peek()
            .ok_or_else(|| self.err("expected an expression"))?;
        match &t.tok {
            Tok::Str(s) => {
                self.i += 1;
                Ok(self.mk(t, ExprKind::Str(s.clone())))
            }
            Tok::Num(n) => {
                self.i += 1;
                Ok(self.mk(t, ExprKind::Num(*n)))
            }
            Tok::Ident(name) => self.ident_expr(t, name),
            Tok::Sym(s) => match *s {
                "/\\" | "\\/" => self.bullet_list(s),
                "~" => {
                    self.i += 1;
                    let e = self.expr(NOT_BP)?;
                    Ok(self.mk(t, ExprKind::Not(Box::new(e))))
                }
                "(" => {
                    self.i += 1;
                    let saved = (self.fence, self.fence_line);
                    self.fence = 0;
                    let e = self.expr(0);
                    (self.fence, self.fence_line) = saved;
                    let mut e = e?;
                    self.expect(")")?;
                    e.start = t.start;
                    e.end = self.prev_end();
                    Ok(e)
                }
                "\\A" | "\\E" => self.quantifier(t, *s == "\\A"),
                "{" => {
                    self.i += 1;
                    let items = self.comma_list("}")?;
                    Ok(self.mk(t, ExprKind::SetLit(items)))
                }
                "<<" => {
                    self.i += 1;
                    let items = self.comma_list(">>")?;
                    Ok(self.mk(t, ExprKind::Tuple(items)))
                }
                "[" => self.bracket(t),
                "@" => {
                    self.i += 1;
                    Ok(self.mk(t, ExprKind::At))
                }
                "[]" if matches!(
                    self.toks.get(self.i + 1).map(|t| &t.tok),
                    Some(Tok::Sym("["))
                ) =>
                {
                    self.box_action(t)
                }
                "[]" | "<>" | "~>" => Err(CodegenError::unsupported(
                    self.file,
                    t.pos,
                    format!("temporal operator `{s}` outside Spec/Live_* definitions"),
                )),
                other => Err(self.err(format!("unexpected `{other}`"))),
            },
            other => Err(self.err(format!("unexpected {}", describe(other)))),
        }
    }

    fn comma_list(&mut self, close: &str) -> Result<Vec<Expr>, CodegenError> {
        let saved = (self.fence, self.fence_line);
        self.fence = 0;
        let r = (|| {
            let mut items = Vec::new();
            if self.peek_sym() == Some(close) {
                self.i += 1;
                return Ok(items);
            }
            loop {
                items.push(self.expr(0)?);
                match self.peek_sym() {
                    Some(",") => self.i += 1,
                    Some(s) if s == close => {
                        self.i += 1;
                        return Ok(items);
                    }
                    _ => return Err(self.err(format!("expected `,` or `{close}`"))),
                }
            }
        })();
        (self.fence, self.fence_line) = saved;
        r
    }

    fn ident_expr(&mut self, t: &'a Token, name: &str) -> Result<Expr, CodegenError> {
        self.i += 1;
        match name {
            "TRUE" => return Ok(self.mk(t, ExprKind::Bool(true))),
            "FALSE" => return Ok(self.mk(t, ExprKind::Bool(false))),
            "BOOLEAN" => return Ok(self.mk(t, ExprKind::BooleanSet)),
            "IF" => {
                let c = self.expr(0)?;
                self.keyword("THEN")?;
                let a = self.expr(0)?;
                self.keyword("ELSE")?;
                let b = self.expr(0)?;
                return Ok(self.mk(t, ExprKind::If(Box::new(c), Box::new(a), Box::new(b))));
            }
            "UNCHANGED" => {
                let e = self.expr(NOT_BP)?;
                return Ok(self.mk(t, ExprKind::Unchanged(Box::new(e))));
            }
            "LET" | "CHOOSE" | "SUBSET" | "UNION" | "DOMAIN" | "CASE" | "ENABLED" | "LAMBDA"
            | "Cardinality" | "Len" | "Seq" | "Append" | "Head" | "Tail" => {
                return Err(CodegenError::unsupported(
                    self.file,
                    t.pos,
                    name.to_string(),
                ))
            }
            "THEN" | "ELSE" | "EXCEPT" => {
                return Err(CodegenError::syntax(
                    self.file,
                    t.pos,
                    format!("unexpected `{name}`"),
                ))
            }
            _ => {}
        }
        if self.peek_sym() == Some("(") {
            self.i += 1;
            let args = self.comma_list(")")?;
            return Ok(self.mk(t, ExprKind::Call(name.to_string(), args)));
        }
        Ok(self.mk(t, ExprKind::Ident(name.to_string())))
    }

    fn keyword(&mut self, kw: &str) -> Result<(), CodegenError> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Ident(k)) if k == kw => {
                self.i += 1;
                Ok(())
            }
            _ => Err(self.err(format!("expected `{kw}`"))),
        }
    }

    fn quantifier(&mut self, t: &'a Token, all: bool) -> Result<Expr, CodegenError> {
        self.i += 1;
        let mut binds = Vec::new();
        loop {
            let mut names = vec![self.ident()?];
            while self.peek_sym() == Some(",") {
                self.i += 1;
                names.push(self.ident()?);
            }
            self.expect("\\in").map_err(|_| {
                CodegenError::unsupported(
                    self.file,
                    self.here(),
                    "unbounded quantifier (write `\\A x \\in S : P`)",
                )
            })?;
            let dom = self.expr(11)?;
            for n in names {
                binds.push((n, dom.clone()));
            }
            match self.peek_sym() {
                Some(",") => self.i += 1,
                Some(":") => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.err("expected `,` or `:` in a quantifier")),
            }
        }
        let body = self.expr(0)?;
        Ok(self.mk(t, ExprKind::Quant(all, binds, Box::new(body))))
    }

    /// `[][A]_v` with `v` a name (`_vars` lexes as one identifier) or
    /// `_<<a, b>>`.
    fn box_action(&mut self, t: &'a Token) -> Result<Expr, CodegenError> {
        self.i += 2;
        let saved = (self.fence, self.fence_line);
        self.fence = 0;
        let action = self.expr(0);
        (self.fence, self.fence_line) = saved;
        let action = action?;
        self.expect("]")?;
        let sub_tok = self
            .peek()
            .ok_or_else(|| self.err("expected `_v` after `[][A]`"))?;
        let sub = match &sub_tok.tok {
            Tok::Ident(n) if n.len() > 1 && n.starts_with('_') => {
                self.i += 1;
                Expr {
                    pos: Pos {
                        line: sub_tok.pos.line,
                        col: sub_tok.pos.col + 1,
                    },
                    start: sub_tok.start + 1,
                    end: sub_tok.end,
                    kind: ExprKind::Ident(n[1..].to_string()),
                }
            }
            Tok::Sym("_") => {
                self.i += 1;
                self.prefix()?
            }
            _ => return Err(self.err("expected `_v` after `[][A]`")),
        };
        Ok(self.mk(t, ExprKind::BoxAction(Box::new(action), Box::new(sub))))
    }

    fn bracket(&mut self, t: &'a Token) -> Result<Expr, CodegenError> {
        self.i += 1;
        let saved = (self.fence, self.fence_line);
        self.fence = 0;
        let r = self.bracket_inner(t);
        (self.fence, self.fence_line) = saved;
        r
    }

    fn bracket_inner(&mut self, t: &'a Token) -> Result<Expr, CodegenError> {
        let first = self.expr(0)?;
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Sym("|->")) => {
                self.i += 1;
                let ExprKind::Bin(BinOp::In, var, dom) = first.kind else {
                    return Err(CodegenError::unsupported(
                        self.file,
                        first.pos,
                        "function constructor other than `[x \\in S |-> e]`",
                    ));
                };
                let ExprKind::Ident(name) = var.kind else {
                    return Err(CodegenError::unsupported(
                        self.file,
                        var.pos,
                        "function constructor over a tuple of variables",
                    ));
                };
                let body = self.expr(0)?;
                self.expect("]")?;
                Ok(self.mk(t, ExprKind::FuncCons(name, dom, Box::new(body))))
            }
            Some(Tok::Sym("->")) => {
                self.i += 1;
                let rng = self.expr(0)?;
                self.expect("]")?;
                Ok(self.mk(t, ExprKind::FuncSet(Box::new(first), Box::new(rng))))
            }
            Some(Tok::Ident(k)) if k == "EXCEPT" => {
                self.i += 1;
                let mut entries = Vec::new();
                loop {
                    self.expect("!")?;
                    let mut path = Vec::new();
                    while self.peek_sym() == Some("[") {
                        self.i += 1;
                        path.push(self.expr(0)?);
                        self.expect("]")?;
                    }
                    if path.is_empty() {
                        return Err(CodegenError::unsupported(
                            self.file,
                            self.here(),
                            "EXCEPT entry other than `![x] = e` (records are not in the dialect)",
                        ));
                    }
                    self.expect("=")?;
                    let value = self.expr(0)?;
                    entries.push(ExceptEntry { path, value });
                    match self.peek_sym() {
                        Some(",") => self.i += 1,
                        Some("]") => {
                            self.i += 1;
                            break;
                        }
                        _ => return Err(self.err("expected `,` or `]` in EXCEPT")),
                    }
                }
                Ok(self.mk(t, ExprKind::Except(Box::new(first), entries)))
            }
            _ => Err(CodegenError::unsupported(
                self.file,
                first.pos,
                "bracket expression other than `[x \\in S |-> e]`, `[S -> T]`, `[f EXCEPT ...]` (records are not in the dialect)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(src: &str, name: &str) -> Result<Expr, CodegenError> {
        let p = parse_module("t.tla", src)?;
        let def = p
            .module
            .definitions
            .iter()
            .find(|d| d.name == name)
            .cloned()
            .ok_or_else(|| CodegenError::syntax("t.tla", Pos::default(), "missing"))?;
        p.body(&def)
    }

    #[test]
    fn bullet_lists_follow_layout() {
        let src = "---- MODULE T ----\nA ==\n    /\\ x = 1\n    /\\ \\/ y = 2\n       \\/ y = 3\n    /\\ z = 4\nB == 1\n====\n";
        let e = body_of(src, "A").map(|e| format!("{:?}", e.kind));
        let s = e.unwrap_or_default();
        assert!(s.starts_with("And(["), "{s}");
        // three conjuncts, the second a two-item disjunction
        let e = body_of(src, "A").ok().map(|e| match e.kind {
            ExprKind::And(v) => v
                .iter()
                .map(|x| matches!(&x.kind, ExprKind::Or(o) if o.len() == 2))
                .collect::<Vec<_>>(),
            _ => vec![],
        });
        assert_eq!(e, Some(vec![false, true, false]));
    }

    #[test]
    fn records_are_refused_with_position() {
        let src = "---- MODULE T ----\nA == [a |-> 1]\n====\n";
        let err = body_of(src, "A")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("t.tla:2:7: unsupported construct"), "{err}");
    }

    #[test]
    fn missing_header_is_an_error() {
        let err = parse_module("t.tla", "A == 1\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("t.tla:1:1: syntax error: no `---- MODULE Name ----` header")
        );
    }
}
