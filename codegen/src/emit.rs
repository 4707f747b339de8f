//! The Rust emitter: IR -> source text, formatted with prettyplease.
//!
//! The generated module uses `crate::support` of `lazaret-generated`.

use std::fmt::Write as _;

use crate::error::CodegenError;
use crate::ir::{Bound, CmpOp, Dom, IExpr, Model, Ty, Update};
use crate::lower::small;
use crate::names::{camel, local, snake};

/// The command that regenerates `generated/src/*.rs`.
pub const REGENERATE: &str = "cargo run -p lazaret-codegen -- --write";

// Precedence levels of emitted Rust expressions (higher binds tighter).
const P_ATOM: u8 = 10;
const P_UNARY: u8 = 8;
const P_ADD: u8 = 6;
const P_CMP: u8 = 4;
const P_AND: u8 = 3;
const P_OR: u8 = 2;
const P_LOW: u8 = 0;

struct Code(String, u8);

fn wrap(c: Code, need: u8) -> String {
    if c.1 >= need {
        c.0
    } else {
        format!("({})", c.0)
    }
}

/// Whether `e` reads the Rust local `name`.
fn uses(e: &IExpr, name: &str) -> bool {
    match e {
        IExpr::Local(n) => n == name,
        IExpr::Bool(_)
        | IExpr::Int(_)
        | IExpr::EnumLit(..)
        | IExpr::Sentinel(..)
        | IExpr::Var(_)
        | IExpr::Next(_)
        | IExpr::Stutter
        | IExpr::NumConst(_) => false,
        IExpr::Wrap(_, a)
        | IExpr::EnumCast { e: a, .. }
        | IExpr::At(a)
        | IExpr::RangeKey(a, _)
        | IExpr::ToInt(a)
        | IExpr::Narrow(a, ..)
        | IExpr::Not(a)
        | IExpr::IsElem(_, a) => uses(a, name),
        IExpr::ElemIn { e: a, .. } | IExpr::EnumInConst { e: a, .. } => uses(a, name),
        IExpr::Apply(a, b)
        | IExpr::ElemEq { a, b, .. }
        | IExpr::Add(a, b)
        | IExpr::Sub(a, b)
        | IExpr::Implies(a, b)
        | IExpr::Cmp(_, a, b)
        | IExpr::NameEq(_, a, b) => uses(a, name) || uses(b, name),
        IExpr::And(v) | IExpr::Or(v) => v.iter().any(|x| uses(x, name)),
        IExpr::InRange(a, b, c) | IExpr::If(a, b, c) => {
            uses(a, name) || uses(b, name) || uses(c, name)
        }
        IExpr::Quant(_, _, _, b) | IExpr::FuncCons(_, _, b) => uses(b, name),
        IExpr::Except(b, entries) => {
            uses(b, name)
                || entries
                    .iter()
                    .any(|(p, v)| uses(v, name) || p.iter().any(|x| uses(x, name)))
        }
    }
}

fn fallible(e: &IExpr) -> bool {
    match e {
        IExpr::Narrow(..) => true,
        IExpr::Bool(_)
        | IExpr::Int(_)
        | IExpr::EnumLit(..)
        | IExpr::Sentinel(..)
        | IExpr::Var(_)
        | IExpr::Next(_)
        | IExpr::Stutter
        | IExpr::NumConst(_)
        | IExpr::Local(_) => false,
        IExpr::Wrap(_, a)
        | IExpr::EnumCast { e: a, .. }
        | IExpr::At(a)
        | IExpr::RangeKey(a, _)
        | IExpr::ToInt(a)
        | IExpr::Not(a)
        | IExpr::IsElem(_, a) => fallible(a),
        IExpr::ElemIn { e: a, .. } | IExpr::EnumInConst { e: a, .. } => fallible(a),
        IExpr::Apply(a, b)
        | IExpr::ElemEq { a, b, .. }
        | IExpr::Add(a, b)
        | IExpr::Sub(a, b)
        | IExpr::Implies(a, b)
        | IExpr::Cmp(_, a, b)
        | IExpr::NameEq(_, a, b) => fallible(a) || fallible(b),
        IExpr::And(v) | IExpr::Or(v) => v.iter().any(fallible),
        IExpr::InRange(a, b, c) | IExpr::If(a, b, c) => fallible(a) || fallible(b) || fallible(c),
        IExpr::Quant(_, _, _, b) | IExpr::FuncCons(_, _, b) => fallible(b),
        IExpr::Except(b, entries) => {
            fallible(b)
                || entries
                    .iter()
                    .any(|(p, v)| fallible(v) || p.iter().any(fallible))
        }
    }
}

/// Whether generated code mentions the identifier `id` as a whole word.
fn mentions(code: &str, id: &str) -> bool {
    let b = code.as_bytes();
    let is_id = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut start = 0;
    while let Some(off) = code[start..].find(id) {
        let i = start + off;
        let j = i + id.len();
        let before_ok = i == 0 || !is_id(b[i - 1]) && b[i - 1] != b'.';
        let after_ok = j >= b.len() || !is_id(b[j]);
        if before_ok && after_ok {
            return true;
        }
        start = j;
    }
    false
}

/// `name` if `body` uses it, `_name` otherwise.
fn param_name(body: &str, name: &str) -> String {
    if mentions(body, name) {
        name.to_string()
    } else {
        format!("_{name}")
    }
}

struct Emitter<'m> {
    m: &'m Model,
    set_ty: Vec<String>,
    set_field: Vec<String>,
    str_set_field: Vec<String>,
    num_field: Vec<String>,
    enum_names: Vec<String>,
    union_names: Vec<String>,
    var_field: Vec<String>,
}

/// Emits the Rust module for `m`, formatted, with its header.
pub fn emit(m: &Model) -> Result<String, CodegenError> {
    let e = Emitter::new(m)?;
    let raw = e.module();
    let file = syn::parse_file(&raw).map_err(|err| CodegenError::Emit {
        file: m.file.clone(),
        message: format!("{err}\n--- emitted text ---\n{raw}"),
    })?;
    let mut out = String::new();
    let _ = writeln!(out, "// @generated by lazaret-codegen from {}", m.file);
    let _ = writeln!(out, "// source sha256: {}", m.sha256);
    let _ = writeln!(out, "// Do not edit. Regenerate with `{REGENERATE}`.");
    out.push('\n');
    out.push_str(&prettyplease::unparse(&file));
    Ok(out)
}

impl<'m> Emitter<'m> {
    fn new(m: &'m Model) -> Result<Self, CodegenError> {
        let mut taken: Vec<String> = ["State", "Action", "Constants", "Model", "Self"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut unique = |base: String| {
            let mut name = base.clone();
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("{base}{n}");
                n += 1;
            }
            taken.push(name.clone());
            name
        };
        let set_ty: Vec<String> = m
            .sets
            .iter()
            .map(|s| unique(format!("{}Id", camel(&s.name))))
            .collect();
        let enum_names: Vec<String> = m.enums.iter().map(|e| unique(camel(&e.name))).collect();
        let union_names: Vec<String> = m.unions.iter().map(|u| unique(camel(&u.name))).collect();
        for (i, e) in m.enums.iter().enumerate() {
            let mut seen: Vec<String> = Vec::new();
            for v in &e.variants {
                let c = camel(v);
                if seen.contains(&c) {
                    return Err(CodegenError::Emit {
                        file: m.file.clone(),
                        message: format!(
                            "two strings of {} both become the Rust variant {c}",
                            enum_names[i]
                        ),
                    });
                }
                seen.push(c);
            }
        }
        Ok(Self {
            m,
            set_ty,
            set_field: m.sets.iter().map(|s| local(&s.name)).collect(),
            str_set_field: m.str_sets.iter().map(|s| local(&s.name)).collect(),
            num_field: m.numbers.iter().map(|s| local(&s.name)).collect(),
            enum_names,
            union_names,
            var_field: m.vars.iter().map(|v| local(&v.name)).collect(),
        })
    }

    fn rust_ty(&self, t: &Ty) -> String {
        match t {
            Ty::Bool => "bool".into(),
            Ty::Int => "i64".into(),
            Ty::Range { hi, .. } => if small(hi) { "u8" } else { "u16" }.into(),
            Ty::Enum(i) => self.enum_names[*i].clone(),
            Ty::Elem(i) => self.set_ty[*i].clone(),
            Ty::Union(i) => self.union_names[*i].clone(),
            Ty::Func(_, r) => format!("Vec<{}>", self.rust_ty(r)),
        }
    }

    fn dom_ty(&self, d: &Dom) -> String {
        match d {
            Dom::Set(i) => self.set_ty[*i].clone(),
            Dom::Enum(i) => self.enum_names[*i].clone(),
            Dom::Range(..) => "i64".into(),
        }
    }

    fn dom_iter(&self, d: &Dom) -> String {
        match d {
            Dom::Set(i) => format!("{}::all(cx.{}.len())", self.set_ty[*i], self.set_field[*i]),
            Dom::Enum(i) => format!("{}::ALL.into_iter()", self.enum_names[*i]),
            Dom::Range(lo, hi) => format!("({}..={})", self.bound(lo), self.bound(hi)),
        }
    }

    fn bound(&self, b: &Bound) -> String {
        match b {
            Bound::Lit(n) => n.to_string(),
            Bound::Const(i) => format!("cx.{}", self.num_field[*i]),
        }
    }

    fn variant(&self, e: usize, k: usize) -> String {
        format!(
            "{}::{}",
            self.enum_names[e],
            camel(&self.m.enums[e].variants[k])
        )
    }

    // ---- expressions ---------------------------------------------------

    /// `next` selects the in-progress state for `@`.
    fn ex(&self, e: &IExpr, next: bool) -> Code {
        let atom = |s: String| Code(s, P_ATOM);
        match e {
            IExpr::Bool(b) => atom(b.to_string()),
            IExpr::Int(n) => atom(n.to_string()),
            IExpr::EnumLit(i, k) => atom(self.variant(*i, *k)),
            IExpr::Sentinel(u, k) => atom(format!(
                "{}::{}",
                self.union_names[*u],
                camel(&self.m.unions[*u].sentinels[*k])
            )),
            IExpr::Wrap(u, x) => atom(format!(
                "{}::Id({})",
                self.union_names[*u],
                self.ex(x, next).0
            )),
            IExpr::EnumCast { from, to, e: x } => {
                let arms: String = self.m.enums[*from]
                    .variants
                    .iter()
                    .map(|v| {
                        format!(
                            "{}::{} => {}::{},",
                            self.enum_names[*from],
                            camel(v),
                            self.enum_names[*to],
                            camel(v)
                        )
                    })
                    .collect();
                atom(format!("match {} {{ {arms} }}", self.ex(x, next).0))
            }
            IExpr::Var(i) => atom(format!(
                "{}.{}",
                if next { "next" } else { "st" },
                self.var_field[*i]
            )),
            IExpr::Next(i) => atom(format!("next.{}", self.var_field[*i])),
            IExpr::Stutter => Code("next == st".into(), P_CMP),
            IExpr::NumConst(i) => atom(format!("cx.{}", self.num_field[*i])),
            IExpr::Local(n) => atom(n.clone()),
            IExpr::At(x) => self.ex(x, true),
            IExpr::Apply(f, x) => atom(format!(
                "{}[{}]",
                wrap(self.ex(f, next), P_ATOM),
                self.key(x, next)
            )),
            IExpr::RangeKey(x, lo) => atom(format!(
                "range_index({}, {})",
                self.ex(x, next).0,
                self.bound(lo)
            )),
            IExpr::ToInt(x) => atom(format!("i64::from({})", self.ex(x, next).0)),
            IExpr::Narrow(x, lo, hi, at) => atom(format!(
                "narrow(NAME, {}, {}, {}, \"{}\")?",
                self.ex(x, next).0,
                self.bound(lo),
                self.bound(hi),
                at.replace('\\', "\\\\").replace('"', "\\\"")
            )),
            IExpr::Add(a, b) | IExpr::Sub(a, b) => {
                let op = if matches!(e, IExpr::Add(..)) {
                    "+"
                } else {
                    "-"
                };
                Code(
                    format!(
                        "{} {op} {}",
                        wrap(self.ex(a, next), P_ADD),
                        wrap(self.ex(b, next), P_ADD + 1)
                    ),
                    P_ADD,
                )
            }
            IExpr::Not(a) => match &**a {
                IExpr::Cmp(CmpOp::Eq, x, y) => {
                    self.ex(&IExpr::Cmp(CmpOp::Ne, x.clone(), y.clone()), next)
                }
                IExpr::Cmp(CmpOp::Ne, x, y) => {
                    self.ex(&IExpr::Cmp(CmpOp::Eq, x.clone(), y.clone()), next)
                }
                _ => Code(format!("!{}", wrap(self.ex(a, next), P_UNARY)), P_UNARY),
            },
            IExpr::And(v) | IExpr::Or(v) => {
                let (op, p, empty) = if matches!(e, IExpr::And(_)) {
                    ("&&", P_AND, "true")
                } else {
                    ("||", P_OR, "false")
                };
                match v.len() {
                    0 => atom(empty.into()),
                    1 => self.ex(&v[0], next),
                    _ => Code(
                        v.iter()
                            .map(|x| wrap(self.ex(x, next), p + 1))
                            .collect::<Vec<_>>()
                            .join(&format!(" {op} ")),
                        p,
                    ),
                }
            }
            IExpr::Implies(a, b) => Code(
                format!(
                    "{} || {}",
                    wrap(self.ex(&IExpr::Not(a.clone()), next), P_OR + 1),
                    wrap(self.ex(b, next), P_OR + 1)
                ),
                P_OR,
            ),
            IExpr::Cmp(op @ (CmpOp::Eq | CmpOp::Ne), a, b) if matches!(**b, IExpr::Bool(_)) => {
                // `flag = TRUE` reads as `flag`, `flag = FALSE` as `!flag`.
                let positive = matches!(**b, IExpr::Bool(true)) == (*op == CmpOp::Eq);
                if positive {
                    self.ex(a, next)
                } else {
                    Code(format!("!{}", wrap(self.ex(a, next), P_UNARY)), P_UNARY)
                }
            }
            IExpr::Cmp(op, a, b) => {
                let o = match op {
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                    CmpOp::Lt => "<",
                    CmpOp::Le => "<=",
                    CmpOp::Gt => ">",
                    CmpOp::Ge => ">=",
                };
                Code(
                    format!(
                        "{} {o} {}",
                        wrap(self.ex(a, next), P_CMP + 1),
                        wrap(self.ex(b, next), P_CMP + 1)
                    ),
                    P_CMP,
                )
            }
            IExpr::NameEq(eq, a, b) => Code(
                format!(
                    "{}.name() {} {}.name()",
                    wrap(self.ex(a, next), P_ATOM),
                    if *eq { "==" } else { "!=" },
                    wrap(self.ex(b, next), P_ATOM)
                ),
                P_CMP,
            ),
            IExpr::ElemIn {
                from,
                union,
                e: x,
                set,
            } => {
                let test = |v: &str| {
                    format!(
                        "cx.{}.get({v}.index()).is_some_and(|name| cx.{}.contains(name))",
                        self.set_field[*from], self.set_field[*set]
                    )
                };
                match union {
                    None => atom(test(&wrap(self.ex(x, next), P_ATOM))),
                    Some(u) => atom(format!(
                        "matches!({}, {}::Id(v) if {})",
                        self.ex(x, next).0,
                        self.union_names[*u],
                        test("v")
                    )),
                }
            }
            IExpr::ElemEq {
                eq,
                a_union: None,
                a_set,
                a,
                b_set,
                b,
            } => Code(
                format!(
                    "cx.{}.get({}.index()) {} cx.{}.get({}.index())",
                    self.set_field[*a_set],
                    wrap(self.ex(a, next), P_ATOM),
                    if *eq { "==" } else { "!=" },
                    self.set_field[*b_set],
                    wrap(self.ex(b, next), P_ATOM)
                ),
                P_CMP,
            ),
            IExpr::ElemEq {
                eq,
                a_union: Some(u),
                a_set,
                a,
                b_set,
                b,
            } => {
                let m = format!(
                    "matches!({}, {}::Id(v) if cx.{}.get(v.index()) == cx.{}.get({}.index()))",
                    self.ex(a, next).0,
                    self.union_names[*u],
                    self.set_field[*a_set],
                    self.set_field[*b_set],
                    wrap(self.ex(b, next), P_ATOM)
                );
                if *eq {
                    atom(m)
                } else {
                    Code(format!("!{m}"), P_UNARY)
                }
            }
            IExpr::EnumInConst { set, e } => atom(format!(
                "cx.{}.contains(&{})",
                self.str_set_field[*set],
                wrap(self.ex(e, next), P_UNARY)
            )),
            IExpr::IsElem(u, x) => atom(format!(
                "matches!({}, {}::Id(_))",
                self.ex(x, next).0,
                self.union_names[*u]
            )),
            IExpr::InRange(x, lo, hi) => atom(format!(
                "({}..={}).contains(&{})",
                wrap(self.ex(lo, next), P_ADD),
                wrap(self.ex(hi, next), P_ADD),
                wrap(self.ex(x, next), P_UNARY)
            )),
            IExpr::Quant(all, x, d, body) => {
                let b = self.ex(body, next).0;
                let x = if uses(body, x) { x.clone() } else { "_".into() };
                atom(format!(
                    "{}.{}(|{x}| {b})",
                    self.dom_iter(d),
                    if *all { "all" } else { "any" }
                ))
            }
            IExpr::If(c, a, b) => {
                // `ELSE IF` chains read as `else if`.
                let tail = match &**b {
                    IExpr::If(..) => self.ex(b, next).0,
                    _ => format!("{{ {} }}", self.val(b, next)),
                };
                Code(
                    format!(
                        "if {} {{ {} }} else {tail}",
                        self.ex(c, next).0,
                        self.val(a, next)
                    ),
                    P_LOW,
                )
            }
            IExpr::FuncCons(x, d, body) => {
                let b = self.val(body, next);
                let xn = if uses(body, x) { x.clone() } else { "_".into() };
                if let IExpr::Narrow(..) = **body {
                    let call = b.strip_suffix('?').unwrap_or(&b);
                    atom(format!(
                        "{}.map(|{xn}| {call}).collect::<Result<Vec<_>, _>>()?",
                        self.dom_iter(d)
                    ))
                } else if fallible(body) {
                    atom(format!(
                        "{}.map(|{xn}| -> Result<_, StepError> {{ Ok({b}) }}).collect::<Result<Vec<_>, _>>()?",
                        self.dom_iter(d)
                    ))
                } else {
                    atom(format!(
                        "{}.map(|{xn}| {b}).collect::<Vec<_>>()",
                        self.dom_iter(d)
                    ))
                }
            }
            IExpr::Except(base, entries) => {
                let mut s = format!("{{ let mut at_base = {};", self.val(base, next));
                for (path, v) in entries {
                    let _ = write!(
                        s,
                        " at_base{} = {};",
                        self.path(path, next),
                        self.val(v, next)
                    );
                }
                s.push_str(" at_base }");
                atom(s)
            }
        }
    }

    fn key(&self, k: &IExpr, next: bool) -> String {
        match k {
            IExpr::RangeKey(..) => self.ex(k, next).0,
            _ => format!("{}.index()", wrap(self.ex(k, next), P_ATOM)),
        }
    }

    fn path(&self, path: &[IExpr], next: bool) -> String {
        path.iter()
            .map(|p| format!("[{}]", self.key(p, next)))
            .collect()
    }

    /// An owned value: places of non-`Copy` type are cloned.
    fn val(&self, e: &IExpr, next: bool) -> String {
        let code = self.ex(e, next);
        let place = matches!(
            e,
            IExpr::Var(_) | IExpr::Apply(..) | IExpr::Local(_) | IExpr::At(_)
        );
        if place && self.is_vec(e) {
            format!("{}.clone()", wrap(code, P_ATOM))
        } else {
            code.0
        }
    }

    fn is_vec(&self, e: &IExpr) -> bool {
        fn ty_of<'a>(m: &'a Model, e: &IExpr) -> Option<&'a Ty> {
            match e {
                IExpr::Var(i) => Some(&m.vars[*i].ty),
                IExpr::Apply(f, _) => match ty_of(m, f)? {
                    Ty::Func(_, r) => Some(r),
                    _ => None,
                },
                IExpr::At(x) => ty_of(m, x),
                _ => None,
            }
        }
        matches!(ty_of(self.m, e), Some(Ty::Func(..)))
    }

    // ---- items ----------------------------------------------------------

    fn module(&self) -> String {
        let mut s = String::new();
        let m = self.m;
        let _ = writeln!(
            s,
            "/// The TLA+ module name.\npub const NAME: &str = \"{}\";",
            m.name
        );
        let _ = writeln!(
            s,
            "/// The source this module was generated from.\npub const SOURCE: &str = \"{}\";",
            m.file
        );
        let _ = writeln!(
            s,
            "/// SHA-256 of the source.\npub const SOURCE_SHA256: &str = \"{}\";",
            m.sha256
        );
        self.types(&mut s);
        self.constants(&mut s);
        self.state(&mut s);
        self.actions(&mut s);
        self.guards(&mut s);
        self.init(&mut s);
        self.enabled(&mut s);
        self.apply(&mut s);
        self.invariants(&mut s);
        self.action_properties(&mut s);
        self.views(&mut s);
        self.protocol_impl(&mut s);
        let imports = [
            "expect_params",
            "narrow",
            "param",
            "parse_enum",
            "parse_model_value",
            "parse_number",
            "range_index",
            "value_name",
            "ActionParseError",
            "ActionPropertyInfo",
            "Cfg",
            "CfgError",
            "GuardId",
            "GuardInfo",
            "InvariantInfo",
            "Protocol",
            "StepError",
        ]
        .into_iter()
        .filter(|name| mentions(&s, name))
        .collect::<Vec<_>>()
        .join(", ");
        format!("use crate::support::{{{imports}}};\n{s}")
    }

    fn types(&self, s: &mut String) {
        for (i, set) in self.m.sets.iter().enumerate() {
            let t = &self.set_ty[i];
            let _ = writeln!(
                s,
                "/// An element of the constant set `{}` (an index into `Constants::{}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct {t}(pub u16);
impl {t} {{
    /// Every element of a set of `len` model values, in order.
    pub fn all(len: usize) -> impl Iterator<Item = Self> {{ (0..u16::try_from(len).unwrap_or(u16::MAX)).map(Self) }}
    /// The position of this element.
    pub fn index(self) -> usize {{ usize::from(self.0) }}
}}",
                set.name, self.set_field[i]
            );
        }
        for (i, e) in self.m.enums.iter().enumerate() {
            let n = &self.enum_names[i];
            let lits = e
                .variants
                .iter()
                .map(|v| format!("\"{v}\""))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                s,
                "/// The strings {{{lits}}}.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum {n} {{ {} }}
impl {n} {{
    /// Every value, in TLA+ order.
    pub const ALL: [Self; {}] = [{}];
    /// The TLA+ string.
    pub fn name(self) -> &'static str {{ match self {{ {} }} }}
    /// The value for a TLA+ string.
    pub fn from_name(name: &str) -> Option<Self> {{ match name {{ {} _ => None }} }}
    /// The position of this value in `ALL`.
    pub fn index(self) -> usize {{ self as usize }}
}}",
                e.variants
                    .iter()
                    .map(|v| camel(v))
                    .collect::<Vec<_>>()
                    .join(", "),
                e.variants.len(),
                e.variants
                    .iter()
                    .map(|v| format!("Self::{}", camel(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
                e.variants
                    .iter()
                    .map(|v| format!("Self::{} => \"{v}\",", camel(v)))
                    .collect::<String>(),
                e.variants
                    .iter()
                    .map(|v| format!("\"{v}\" => Some(Self::{}),", camel(v)))
                    .collect::<String>(),
            );
        }
        for (i, u) in self.m.unions.iter().enumerate() {
            let n = &self.union_names[i];
            let _ = writeln!(
                s,
                "/// `{} \\cup {{{}}}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum {n} {{ Id({}), {} }}
impl {n} {{
    /// The position of the model value held; a sentinel is past the end of
    /// every function over the set (TLC fails there too).
    pub fn index(self) -> usize {{ match self {{ Self::Id(x) => x.index(), _ => usize::MAX }} }}
}}",
                self.m.sets[u.set].name,
                u.sentinels
                    .iter()
                    .map(|v| format!("\"{v}\""))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.set_ty[u.set],
                u.sentinels
                    .iter()
                    .map(|v| camel(v))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }

    fn constants(&self, s: &mut String) {
        let m = self.m;
        let mut fields = String::new();
        let mut init = String::new();
        for (i, set) in m.sets.iter().enumerate() {
            let _ = write!(
                fields,
                "/// The model values of `{}`.\npub {}: Vec<String>,",
                set.name, self.set_field[i]
            );
            let _ = write!(
                init,
                "{}: cfg.model_values(\"{}\")?,",
                self.set_field[i], set.name
            );
        }
        for (i, set) in m.str_sets.iter().enumerate() {
            let ty = set
                .enum_
                .map_or_else(|| "String".to_string(), |e| self.enum_names[e].clone());
            let _ = write!(
                fields,
                "/// The strings of `{}`.\npub {}: Vec<{ty}>,",
                set.name, self.str_set_field[i]
            );
            let _ = write!(
                init,
                "{}: cfg.strings(\"{}\")?.iter().map(|s| {ty}::from_name(s).ok_or_else(|| CfgError::UnknownString {{ name: \"{}\", value: s.clone() }})).collect::<Result<_, _>>()?,",
                self.str_set_field[i], set.name, set.name
            );
        }
        for (i, n) in m.numbers.iter().enumerate() {
            let _ = write!(
                fields,
                "/// The bound `{}`.\npub {}: i64,",
                n.name, self.num_field[i]
            );
            let _ = write!(init, "{}: cfg.number(\"{}\")?,", self.num_field[i], n.name);
        }
        let _ = writeln!(
            s,
            "/// The constants of the model, sized at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constants {{ {fields} }}
impl Constants {{
    /// The constants given in a TLC `.cfg` file.
    pub fn from_cfg({}: &Cfg) -> Result<Self, CfgError> {{ Ok(Self {{ {init} }}) }}
}}",
            if init.is_empty() { "_cfg" } else { "cfg" }
        );
    }

    fn state(&self, s: &mut String) {
        let mut fields = String::new();
        for (i, v) in self.m.vars.iter().enumerate() {
            let _ = write!(
                fields,
                "/// `{}`\npub {}: {},",
                v.name,
                self.var_field[i],
                self.rust_ty(&v.ty)
            );
        }
        let _ = writeln!(
            s,
            "/// A state: one field per TLA+ variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {{ {fields} }}"
        );
    }

    fn action_pattern(&self, a: &crate::ir::Action, used: impl Fn(&str) -> bool) -> String {
        let name = camel(&a.name);
        if a.params.is_empty() {
            return format!("Action::{name}");
        }
        let fields = a
            .params
            .iter()
            .map(|p| {
                if used(&p.rust) {
                    p.rust.clone()
                } else {
                    format!("{}: _", p.rust)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("Action::{name} {{ {fields} }}")
    }

    fn actions(&self, s: &mut String) {
        let mut variants = String::new();
        for a in &self.m.actions {
            let _ = writeln!(variants, "/// `{}` (line {})", a.name, a.line);
            if a.params.is_empty() {
                let _ = write!(variants, "{},", camel(&a.name));
            } else {
                let fields = a
                    .params
                    .iter()
                    .map(|p| format!("{}: {}", p.rust, self.dom_ty(&p.dom)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = write!(variants, "{} {{ {fields} }},", camel(&a.name));
            }
        }
        let _ = writeln!(
            s,
            "/// An action of `Next`, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {{ {variants} }}"
        );
        let names = self
            .m
            .actions
            .iter()
            .map(|a| format!("\"{}\"", a.name))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "/// The action names in `Next` order.\npub const ACTION_NAMES: &[&str] = &[{names}];"
        );
    }

    fn guards(&self, s: &mut String) {
        let mut table = String::new();
        let mut fns = String::new();
        let mut arms = String::new();
        let mut id = 0u16;
        for a in &self.m.actions {
            let mut checks = String::new();
            for (k, g) in a.guards.iter().enumerate() {
                let body = self.ex(&g.expr, false).0;
                let text = g.text.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = write!(
                    table,
                    "GuardInfo {{ id: GuardId({id}), action: \"{}\", index: {}, line: {}, text: \"{text}\" }},",
                    a.name,
                    k + 1,
                    g.line
                );
                let fname = format!("g{id}_{}", snake(&a.name));
                let params = a
                    .params
                    .iter()
                    .map(|p| format!("{}: {}", param_name(&body, &p.rust), self.dom_ty(&p.dom)))
                    .collect::<Vec<_>>();
                let args = a.params.iter().map(|p| p.rust.clone()).collect::<Vec<_>>();
                let doc = g.text.replace('`', "'");
                let _ = write!(
                    fns,
                    "/// `{}` guard {} (line {}): `{doc}`\nfn {fname}({}: &Constants, {}: &State{}) -> bool {{ {body} }}",
                    a.name,
                    k + 1,
                    g.line,
                    param_name(&body, "cx"),
                    param_name(&body, "st"),
                    params.iter().map(|p| format!(", {p}")).collect::<String>(),
                );
                let _ = write!(
                    checks,
                    "if mask != Some(GuardId({id})) && !{fname}(cx, st{}) {{ return Some(GuardId({id})); }}",
                    args.iter().map(|x| format!(", {x}")).collect::<String>()
                );
                id += 1;
            }
            let pat = self.action_pattern(a, |n| mentions(&checks, n));
            let _ = write!(arms, "{pat} => {{ {checks} }}");
        }
        let _ = writeln!(
            s,
            "/// Every guard conjunct, indexed by `GuardId`.
pub const GUARDS: &[GuardInfo] = &[{table}];
{fns}
/// The first false guard conjunct of `action` in TLA+ order, skipping `mask`.
pub fn first_failing_guard({}: &Constants, {}: &State, action: &Action, {}: Option<GuardId>) -> Option<GuardId> {{
    match *action {{ {arms} }}
    None
}}
/// Whether `action` is enabled in `st` (its guards hold, `mask` skipped).
pub fn enabled(cx: &Constants, st: &State, action: &Action, mask: Option<GuardId>) -> Result<(), &'static GuardInfo> {{
    match first_failing_guard(cx, st, action, mask) {{
        Some(g) => Err(&GUARDS[usize::from(g.0)]),
        None => Ok(()),
    }}
}}",
            param_name(&arms, "cx"),
            param_name(&arms, "st"),
            param_name(&arms, "mask"),
        );
    }

    fn init(&self, s: &mut String) {
        let mut fields = String::new();
        for (i, v) in self.m.init.iter().enumerate() {
            let _ = write!(fields, "{}: {},", self.var_field[i], self.val(v, false));
        }
        let _ = writeln!(
            s,
            "/// The initial state (`Init`).
pub fn init({}: &Constants) -> Result<State, StepError> {{ Ok(State {{ {fields} }}) }}",
            param_name(&fields, "cx")
        );
    }

    fn enabled(&self, s: &mut String) {
        let mut body = String::new();
        for a in &self.m.actions {
            let ctor = if a.params.is_empty() {
                format!("Action::{}", camel(&a.name))
            } else {
                format!(
                    "Action::{} {{ {} }}",
                    camel(&a.name),
                    a.params
                        .iter()
                        .map(|p| p.rust.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let mut stmt = format!("push_if_enabled(cx, st, mask, out, {ctor});");
            for &pi in a.loop_order.iter().rev() {
                let p = &a.params[pi];
                stmt = format!("for {} in {} {{ {stmt} }}", p.rust, self.dom_iter(&p.dom));
            }
            body.push_str(&stmt);
        }
        let _ = writeln!(
            s,
            "fn push_if_enabled(cx: &Constants, st: &State, mask: Option<GuardId>, out: &mut Vec<Action>, action: Action) {{
    if first_failing_guard(cx, st, &action, mask).is_none() {{ out.push(action); }}
}}
/// Appends every enabled action: `Next` order, parameters in element order.
pub fn enabled_actions(cx: &Constants, st: &State, mask: Option<GuardId>, out: &mut Vec<Action>) {{ {body} }}"
        );
    }

    fn updates(&self, ups: &[Update], out: &mut String) {
        for u in ups {
            match u {
                Update::Assign(i, e) => {
                    let _ = write!(out, "next.{} = {};", self.var_field[*i], self.val(e, false));
                }
                Update::Except(i, entries) => {
                    for (path, v) in entries {
                        let _ = write!(
                            out,
                            "next.{}{} = {};",
                            self.var_field[*i],
                            self.path(path, false),
                            self.val(v, false)
                        );
                    }
                }
                Update::If(c, a, b) => {
                    let mut sa = String::new();
                    self.updates(a, &mut sa);
                    let mut sb = String::new();
                    self.updates(b, &mut sb);
                    let _ = write!(out, "if {} {{ {sa} }} else {{ {sb} }}", self.ex(c, false).0);
                }
            }
        }
    }

    fn apply(&self, s: &mut String) {
        let mut arms = String::new();
        for a in &self.m.actions {
            let mut body = String::new();
            self.updates(&a.updates, &mut body);
            let pat = self.action_pattern(a, |n| mentions(&body, n));
            let _ = write!(arms, "{pat} => {{ {body} }}");
        }
        let mutable = if mentions(&arms, "next") { "mut " } else { "" };
        let _ = writeln!(
            s,
            "/// The successor of `st` under `action`, guards not checked.
fn apply({}: &Constants, st: &State, action: &Action) -> Result<State, StepError> {{
    let {mutable}next = st.clone();
    match *action {{ {arms} }}
    Ok(next)
}}
/// Takes `action` from `st`: the first false guard (other than `mask`) is an error.
pub fn step(cx: &Constants, st: &State, action: &Action, mask: Option<GuardId>) -> Result<State, StepError> {{
    if let Some(g) = first_failing_guard(cx, st, action, mask) {{
        return Err(StepError::GuardFailed {{ model: NAME, guard: &GUARDS[usize::from(g.0)] }});
    }}
    apply(cx, st, action)
}}",
            param_name(&arms, "cx")
        );
    }

    fn invariants(&self, s: &mut String) {
        let mut table = String::new();
        for inv in &self.m.invariants {
            let body = self.ex(&inv.expr, false).0;
            let f = snake(&inv.name);
            let _ = writeln!(
                s,
                "/// `{}` (line {})\npub fn {f}({}: &Constants, {}: &State) -> bool {{ {body} }}",
                inv.name,
                inv.line,
                param_name(&body, "cx"),
                param_name(&body, "st")
            );
            let _ = write!(
                table,
                "InvariantInfo {{ name: \"{}\", line: {}, holds: {f} }},",
                inv.name, inv.line
            );
        }
        let _ = writeln!(
            s,
            "/// The `Inv_*` invariants.\npub const INVARIANTS: &[InvariantInfo<Constants, State>] = &[{table}];"
        );
    }

    fn action_properties(&self, s: &mut String) {
        let mut table = String::new();
        for p in &self.m.action_properties {
            let body = self.ex(&p.expr, false).0;
            let f = snake(&p.name);
            let _ = writeln!(
                s,
                "/// `{}` (line {}): `[][A]_v` as `A || UNCHANGED v` on the step `st` -> `next`.\npub fn {f}({}: &Constants, {}: &State, {}: &State) -> bool {{ {body} }}",
                p.name,
                p.line,
                param_name(&body, "cx"),
                param_name(&body, "st"),
                param_name(&body, "next")
            );
            let _ = write!(
                table,
                "ActionPropertyInfo {{ name: \"{}\", line: {}, holds: {f} }},",
                p.name, p.line
            );
        }
        let _ = writeln!(
            s,
            "/// The box-action `Live_*` properties, checked on every step (the other\n/// temporal properties are TLC's only).\npub const ACTION_PROPERTIES: &[ActionPropertyInfo<Constants, State>] = &[{table}];"
        );
    }

    fn view(&self, t: &Ty, code: &str, depth: usize) -> String {
        match t {
            Ty::Bool | Ty::Range { .. } | Ty::Int => format!("serde_json::Value::from({code})"),
            Ty::Enum(_) => format!("serde_json::Value::from({code}.name())"),
            Ty::Elem(i) => format!("value_name(&cx.{}, {code}.index())", self.set_field[*i]),
            Ty::Union(u) => {
                let un = &self.union_names[*u];
                let set = self.m.unions[*u].set;
                let mut arms = format!(
                    "{un}::Id(x) => value_name(&cx.{}, x.index()),",
                    self.set_field[set]
                );
                for sent in &self.m.unions[*u].sentinels {
                    let _ = write!(
                        arms,
                        "{un}::{} => serde_json::Value::from(\"{sent}\"),",
                        camel(sent)
                    );
                }
                format!("match {code} {{ {arms} }}")
            }
            Ty::Func(d, r) => {
                let k = format!("k{depth}");
                let key = match d {
                    Dom::Set(i) => format!(
                        "cx.{}.get({k}.index()).cloned().unwrap_or_default()",
                        self.set_field[*i]
                    ),
                    Dom::Enum(_) => format!("{k}.name().to_string()"),
                    Dom::Range(..) => format!("{k}.to_string()"),
                };
                let idx = match d {
                    Dom::Range(lo, _) => format!("range_index({k}, {})", self.bound(lo)),
                    _ => format!("{k}.index()"),
                };
                let inner = self.view(r, &format!("{code}[{idx}]"), depth + 1);
                format!(
                    "serde_json::Value::Object({}.map(|{k}| ({key}, {inner})).collect())",
                    self.dom_iter(d)
                )
            }
        }
    }

    /// An expression of type `Option<rust_ty(t)>` reading the JSON value
    /// `code` (a `&serde_json::Value`) as `view` writes it.
    fn unview(&self, t: &Ty, code: &str, depth: usize) -> String {
        let position = |set: usize| {
            format!(
                "cx.{}.iter().position(|x| x == s).and_then(|p| u16::try_from(p).ok()).map({})",
                self.set_field[set], self.set_ty[set]
            )
        };
        match t {
            Ty::Bool => format!("{code}.as_bool()"),
            Ty::Int => format!("{code}.as_i64()"),
            Ty::Range { lo, hi } => format!(
                "{code}.as_i64().filter(|n| ({}..={}).contains(n)).and_then(|n| {}::try_from(n).ok())",
                self.bound(lo),
                self.bound(hi),
                self.rust_ty(t)
            ),
            Ty::Enum(i) => format!("{code}.as_str().and_then({}::from_name)", self.enum_names[*i]),
            Ty::Elem(i) => format!("{code}.as_str().and_then(|s| {})", position(*i)),
            Ty::Union(u) => {
                let un = &self.union_names[*u];
                let mut arms = String::new();
                for sent in &self.m.unions[*u].sentinels {
                    let _ = write!(arms, "\"{sent}\" => Some({un}::{}),", camel(sent));
                }
                let _ = write!(
                    arms,
                    "_ => {}.map({un}::Id),",
                    position(self.m.unions[*u].set)
                );
                format!("{code}.as_str().and_then(|s| match s {{ {arms} }})")
            }
            Ty::Func(d, r) => {
                let k = format!("k{depth}");
                let o = format!("o{depth}");
                let x = format!("x{depth}");
                let key = match d {
                    Dom::Set(i) => format!(
                        "cx.{}.get({k}.index()).cloned().unwrap_or_default()",
                        self.set_field[*i]
                    ),
                    Dom::Enum(_) => format!("{k}.name().to_string()"),
                    Dom::Range(..) => format!("{k}.to_string()"),
                };
                let inner = self.unview(r, &x, depth + 1);
                format!(
                    "{code}.as_object().filter(|{o}| {o}.len() == {}.count()).and_then(|{o}| {}.map(|{k}| {o}.get(&{key}).and_then(|{x}| {inner})).collect::<Option<Vec<_>>>())",
                    self.dom_iter(d),
                    self.dom_iter(d)
                )
            }
        }
    }

    fn views(&self, s: &mut String) {
        let mut body = String::from("let mut m = serde_json::Map::new();");
        for (i, v) in self.m.vars.iter().enumerate() {
            let code = format!("st.{}", self.var_field[i]);
            let _ = write!(
                body,
                "m.insert(\"{}\".to_string(), {});",
                v.name,
                self.view(&v.ty, &code, 0)
            );
        }
        body.push_str("serde_json::Value::Object(m)");
        let _ = writeln!(
            s,
            "/// The state as JSON keyed by TLA+ variable names, model values by name.
pub fn state_view({}: &Constants, st: &State) -> serde_json::Value {{ {body} }}",
            param_name(&body, "cx")
        );
        let mut fields = String::new();
        for (i, v) in self.m.vars.iter().enumerate() {
            let _ = write!(
                fields,
                "{}: {}?,",
                self.var_field[i],
                self.unview(&v.ty, &format!("o.get(\"{}\")?", v.name), 0)
            );
        }
        let _ = writeln!(
            s,
            "/// The state `state_view` wrote, or `None` when `v` is not one: a
/// variable missing or extra, or a value outside its `TypeOK` domain.
pub fn state_from_view({}: &Constants, v: &serde_json::Value) -> Option<State> {{
    let o = v.as_object().filter(|o| o.len() == {})?;
    Some(State {{ {fields} }})
}}",
            param_name(&fields, "cx"),
            self.m.vars.len()
        );

        let mut name_arms = String::new();
        let mut param_arms = String::new();
        let mut parse_arms = String::new();
        for a in &self.m.actions {
            let pat = self.action_pattern(a, |_| true);
            let wild = self.action_pattern(a, |_| false);
            let _ = write!(name_arms, "{wild} => \"{}\",", a.name);
            let pairs = a
                .params
                .iter()
                .map(|p| {
                    let v = match p.dom {
                        Dom::Set(i) => format!(
                            "cx.{}.get({}.index()).cloned().unwrap_or_default()",
                            self.set_field[i], p.rust
                        ),
                        Dom::Enum(_) => format!("{}.name().to_string()", p.rust),
                        Dom::Range(..) => format!("{}.to_string()", p.rust),
                    };
                    format!("(\"{}\", {v})", p.name)
                })
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(param_arms, "{pat} => vec![{pairs}],");
            let expected = a
                .params
                .iter()
                .map(|p| format!("\"{}\"", p.name))
                .collect::<Vec<_>>()
                .join(", ");
            let mut build = format!("expect_params(\"{}\", &[{expected}], params)?;", a.name);
            for p in &a.params {
                let parsed = match p.dom {
                    Dom::Set(i) => format!(
                        "{}(parse_model_value(\"{}\", \"{}\", &cx.{}, param(params, \"{}\"))?)",
                        self.set_ty[i], a.name, p.name, self.set_field[i], p.name
                    ),
                    Dom::Range(ref lo, ref hi) => format!(
                        "parse_number(\"{}\", \"{}\", param(params, \"{}\"), {}, {})?",
                        a.name,
                        p.name,
                        p.name,
                        self.bound(lo),
                        self.bound(hi)
                    ),
                    Dom::Enum(i) => format!(
                        "parse_enum(\"{}\", \"{}\", param(params, \"{}\"), {}::from_name, &[{}])?",
                        a.name,
                        p.name,
                        p.name,
                        self.enum_names[i],
                        self.m.enums[i]
                            .variants
                            .iter()
                            .map(|v| format!("\"{v}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let _ = write!(build, "let {} = {parsed};", p.rust);
            }
            let _ = write!(parse_arms, "\"{}\" => {{ {build} Ok({pat}) }}", a.name);
        }
        let _ = writeln!(
            s,
            "/// The TLA+ name of an action.
pub fn action_name(action: &Action) -> &'static str {{ match *action {{ {name_arms} }} }}
/// The parameters of an action as (TLA+ name, model value or string) pairs.
pub fn action_params({}: &Constants, action: &Action) -> Vec<(&'static str, String)> {{ match *action {{ {param_arms} }} }}
/// Rebuilds an action from its TLA+ name and parameters.
pub fn parse_action({}: &Constants, name: &str, params: &[(&str, &str)]) -> Result<Action, ActionParseError> {{
    match name {{ {parse_arms} _ => Err(ActionParseError::UnknownAction {{ model: NAME, action: name.to_string() }}) }}
}}",
            param_name(&param_arms, "cx"),
            param_name(&parse_arms, "cx"),
        );
    }

    fn protocol_impl(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "/// `{}` as a [`Protocol`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Model;
impl Protocol for Model {{
    type Constants = Constants;
    type State = State;
    type Action = Action;
    const NAME: &'static str = NAME;
    const SOURCE: &'static str = SOURCE;
    fn constants(cfg: &Cfg) -> Result<Constants, CfgError> {{ Constants::from_cfg(cfg) }}
    fn init(cx: &Constants) -> Result<State, StepError> {{ init(cx) }}
    fn enabled_actions(cx: &Constants, st: &State, mask: Option<GuardId>, out: &mut Vec<Action>) {{ enabled_actions(cx, st, mask, out) }}
    fn step(cx: &Constants, st: &State, action: &Action, mask: Option<GuardId>) -> Result<State, StepError> {{ step(cx, st, action, mask) }}
    fn guards() -> &'static [GuardInfo] {{ GUARDS }}
    fn invariants() -> &'static [InvariantInfo<Constants, State>] {{ INVARIANTS }}
    fn action_properties() -> &'static [ActionPropertyInfo<Constants, State>] {{ ACTION_PROPERTIES }}
    fn action_names() -> &'static [&'static str] {{ ACTION_NAMES }}
    fn action_name(action: &Action) -> &'static str {{ action_name(action) }}
    fn action_params(cx: &Constants, action: &Action) -> Vec<(&'static str, String)> {{ action_params(cx, action) }}
    fn parse_action(cx: &Constants, name: &str, params: &[(&str, &str)]) -> Result<Action, ActionParseError> {{ parse_action(cx, name, params) }}
    fn state_view(cx: &Constants, st: &State) -> serde_json::Value {{ state_view(cx, st) }}
    fn state_from_view(cx: &Constants, v: &serde_json::Value) -> Option<State> {{ state_from_view(cx, v) }}
}}",
            self.m.name
        );
    }
}
