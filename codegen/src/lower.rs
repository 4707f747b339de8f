//! From the syntax tree to the typed IR: resolves names, inlines
//! definitions, reads domains from `TypeOK`, splits actions into guards and
//! updates.

use std::collections::{BTreeMap, HashMap};

use crate::ast::{BinOp, Definition, Expr, ExprKind};
use crate::error::{CodegenError, Pos};
use crate::ir::{
    Action, ActionProperty, Bound, CmpOp, ConstSet, Dom, EnumDef, Guard, IExpr, Invariant, Model,
    NumConst, Param, StrSetConst, TExpr, Ty, UnionDef, Update, VarDef,
};
use crate::names::{camel, snake};
use crate::parser::Parsed;

/// Whether a constant is a set of model values, a set of strings or a
/// number, from the `.cfg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstKind {
    Set,
    Strings,
    Number,
}

/// Reads the kind of every constant assigned in a TLC `.cfg` file.
pub fn cfg_kinds(file: &str, text: &str) -> Result<BTreeMap<String, ConstKind>, CodegenError> {
    let mut out = BTreeMap::new();
    let mut in_constants = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split("\\*").next().unwrap_or("").trim();
        let pos = Pos {
            line: u32::try_from(n + 1).unwrap_or(u32::MAX),
            col: 1,
        };
        if line.is_empty() {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        let rest = if matches!(first, "CONSTANT" | "CONSTANTS") {
            in_constants = true;
            line[first.len()..].trim()
        } else if first.chars().all(|c| c.is_ascii_uppercase()) && !line.contains('=') {
            in_constants = false;
            continue;
        } else {
            line
        };
        if !in_constants || rest.is_empty() {
            continue;
        }
        let Some((name, value)) = rest.split_once('=') else {
            return Err(CodegenError::unsupported(
                file,
                pos,
                format!("constant line `{rest}` (expected `Name = value`)"),
            ));
        };
        let name = name.trim().trim_end_matches('<').trim().to_string();
        if rest.contains("<-") {
            return Err(CodegenError::unsupported(
                file,
                pos,
                "constant substitution `<-`",
            ));
        }
        let value = value.trim();
        let kind = if value.starts_with('{') && value[1..].trim_start().starts_with('"') {
            ConstKind::Strings
        } else if value.starts_with('{') {
            ConstKind::Set
        } else if value.parse::<i64>().is_ok() {
            ConstKind::Number
        } else {
            return Err(CodegenError::unsupported(
                file,
                pos,
                format!("constant value `{value}` (expected a set of model values, a set of strings or a number)"),
            ));
        };
        out.insert(name, kind);
    }
    Ok(out)
}

#[derive(Clone, Debug)]
enum Binding {
    Typed(TExpr),
    Lazy(Box<Expr>, Env),
}

type Env = Vec<(String, Binding)>;

fn lookup<'e>(env: &'e Env, name: &str) -> Option<&'e Binding> {
    env.iter().rev().find(|(n, _)| n == name).map(|(_, b)| b)
}

const MAX_DEPTH: usize = 64;

struct Lower<'a> {
    p: &'a Parsed,
    defs: HashMap<&'a str, &'a Definition>,
    kinds: &'a BTreeMap<String, ConstKind>,
    m: Model,
    enum_keys: HashMap<Vec<String>, usize>,
    fresh: usize,
    depth: usize,
    /// Whether state variables may be read (false in `Init`).
    allow_vars: bool,
    /// Whether primes and `UNCHANGED` may appear in expressions (only in
    /// the action of a box-action property).
    allow_primes: bool,
    /// Inside `e'`: variables read the next state.
    primed: bool,
}

/// Builds the IR of a parsed module; `kinds` classifies its constants.
pub fn lower(
    p: &Parsed,
    sha256: &str,
    kinds: &BTreeMap<String, ConstKind>,
) -> Result<Model, CodegenError> {
    let mut l = Lower {
        p,
        defs: p
            .module
            .definitions
            .iter()
            .map(|d| (d.name.as_str(), d))
            .collect(),
        kinds,
        m: Model {
            name: p.module.name.clone(),
            file: p.file.clone(),
            sha256: sha256.to_string(),
            sets: Vec::new(),
            str_sets: Vec::new(),
            numbers: Vec::new(),
            enums: Vec::new(),
            unions: Vec::new(),
            vars: Vec::new(),
            init: Vec::new(),
            actions: Vec::new(),
            invariants: Vec::new(),
            action_properties: Vec::new(),
        },
        enum_keys: HashMap::new(),
        fresh: 0,
        depth: 0,
        allow_vars: true,
        allow_primes: false,
        primed: false,
    };
    l.constants()?;
    l.type_ok()?;
    l.init()?;
    l.next()?;
    l.invariants()?;
    l.action_properties()?;
    l.str_sets_typed()?;
    Ok(l.m)
}

fn has_prime(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Prime(_) | ExprKind::Unchanged(_) | ExprKind::BoxAction(..) => true,
        ExprKind::Str(_)
        | ExprKind::Num(_)
        | ExprKind::Bool(_)
        | ExprKind::BooleanSet
        | ExprKind::Ident(_)
        | ExprKind::At => false,
        ExprKind::Call(_, a) | ExprKind::And(a) | ExprKind::Or(a) | ExprKind::SetLit(a) => {
            a.iter().any(has_prime)
        }
        ExprKind::Tuple(a) => a.iter().any(has_prime),
        ExprKind::Apply(a, b) | ExprKind::Bin(_, a, b) | ExprKind::FuncSet(a, b) => {
            has_prime(a) || has_prime(b)
        }
        ExprKind::Not(a) => has_prime(a),
        ExprKind::Quant(_, binds, body) => {
            binds.iter().any(|(_, d)| has_prime(d)) || has_prime(body)
        }
        ExprKind::If(a, b, c) => has_prime(a) || has_prime(b) || has_prime(c),
        ExprKind::FuncCons(_, d, b) => has_prime(d) || has_prime(b),
        ExprKind::Except(b, entries) => {
            has_prime(b)
                || entries
                    .iter()
                    .any(|en| has_prime(&en.value) || en.path.iter().any(has_prime))
        }
    }
}

fn bound_value(b: &Bound) -> Option<i64> {
    match b {
        Bound::Lit(n) => Some(*n),
        Bound::Const(_) => None,
    }
}

impl<'a> Lower<'a> {
    fn file(&self) -> &str {
        &self.p.file
    }

    fn sem(&self, pos: Pos, msg: impl Into<String>) -> CodegenError {
        CodegenError::semantic(self.file(), pos, msg)
    }

    fn unsup(&self, pos: Pos, what: impl Into<String>) -> CodegenError {
        CodegenError::unsupported(self.file(), pos, what)
    }

    fn def(&self, name: &str, pos: Pos) -> Result<&'a Definition, CodegenError> {
        self.defs
            .get(name)
            .copied()
            .ok_or_else(|| self.sem(pos, format!("`{name}` is not defined")))
    }

    fn fresh_local(&mut self, name: &str) -> String {
        self.fresh += 1;
        format!("{}_{}", snake(name), self.fresh)
    }

    fn constants(&mut self) -> Result<(), CodegenError> {
        for (name, pos) in &self.p.module.constants {
            match self.kinds.get(name) {
                Some(ConstKind::Set) => self.m.sets.push(ConstSet { name: name.clone() }),
                Some(ConstKind::Strings) => self.m.str_sets.push(StrSetConst {
                    name: name.clone(),
                    enum_: None,
                }),
                Some(ConstKind::Number) => self.m.numbers.push(NumConst { name: name.clone() }),
                None => {
                    return Err(self.sem(
                        *pos,
                        format!("constant `{name}` has no value in the .cfg file"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn set_index(&self, name: &str) -> Option<usize> {
        self.m.sets.iter().position(|s| s.name == name)
    }

    fn str_set_index(&self, name: &str) -> Option<usize> {
        self.m.str_sets.iter().position(|s| s.name == name)
    }

    /// Every string-set constant got its enumeration from a membership test.
    fn str_sets_typed(&self) -> Result<(), CodegenError> {
        for s in &self.m.str_sets {
            if s.enum_.is_none() {
                let pos = self
                    .p
                    .module
                    .constants
                    .iter()
                    .find(|(n, _)| *n == s.name)
                    .map_or(Pos { line: 1, col: 1 }, |(_, p)| *p);
                return Err(self.sem(
                    pos,
                    format!(
                        "string-set constant `{}` is never tested with `\\in`, so its element type is unknown",
                        s.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn num_index(&self, name: &str) -> Option<usize> {
        self.m.numbers.iter().position(|s| s.name == name)
    }

    fn var_index(&self, name: &str) -> Option<usize> {
        self.m.vars.iter().position(|s| s.name == name)
    }

    /// Follows parameters and definitions until `e` is something else.
    fn unfold(&mut self, e: &Expr, env: &Env) -> Result<Option<(Expr, Env)>, CodegenError> {
        match &e.kind {
            ExprKind::Ident(name) => {
                if let Some(b) = lookup(env, name) {
                    return Ok(match b {
                        Binding::Lazy(x, env2) => Some(((**x).clone(), env2.clone())),
                        Binding::Typed(_) => None,
                    });
                }
                if self.var_index(name).is_some()
                    || self.set_index(name).is_some()
                    || self.num_index(name).is_some()
                {
                    return Ok(None);
                }
                let d = self.def(name, e.pos)?;
                if !d.params.is_empty() {
                    return Err(self.sem(
                        e.pos,
                        format!("`{name}` takes {} arguments", d.params.len()),
                    ));
                }
                Ok(Some((self.p.body(d)?, Vec::new())))
            }
            ExprKind::Call(name, args) => {
                let d = self.def(name, e.pos)?;
                if d.params.len() != args.len() {
                    return Err(self.sem(
                        e.pos,
                        format!(
                            "`{name}` takes {} arguments, given {}",
                            d.params.len(),
                            args.len()
                        ),
                    ));
                }
                let env2 = d
                    .params
                    .iter()
                    .zip(args)
                    .map(|(p, a)| (p.clone(), Binding::Lazy(Box::new(a.clone()), env.clone())))
                    .collect();
                Ok(Some((self.p.body(d)?, env2)))
            }
            _ => Ok(None),
        }
    }

    fn enter(&mut self, pos: Pos) -> Result<(), CodegenError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.sem(
                pos,
                "definitions nest too deeply (recursion is not in the dialect)",
            ));
        }
        Ok(())
    }

    // ---- domains -------------------------------------------------------

    fn enum_for(&mut self, strings: Vec<String>, hint: &str) -> usize {
        let mut key = strings.clone();
        key.sort();
        key.dedup();
        if let Some(i) = self.enum_keys.get(&key) {
            return *i;
        }
        let mut variants = Vec::new();
        for s in strings {
            if !variants.contains(&s) {
                variants.push(s);
            }
        }
        let i = self.m.enums.len();
        self.m.enums.push(EnumDef {
            name: camel(hint),
            variants,
        });
        self.enum_keys.insert(key, i);
        i
    }

    fn string_lits(&self, items: &[Expr]) -> Option<Vec<String>> {
        items
            .iter()
            .map(|x| match &x.kind {
                ExprKind::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// The domain of a quantifier, function or parameter.
    fn dom(&mut self, e: &Expr, env: &Env, hint: &str) -> Result<Dom, CodegenError> {
        match &e.kind {
            ExprKind::Ident(n) if self.set_index(n).is_some() && lookup(env, n).is_none() => {
                Ok(Dom::Set(self.set_index(n).unwrap_or_default()))
            }
            ExprKind::SetLit(items) => match self.string_lits(items) {
                Some(s) if !s.is_empty() => Ok(Dom::Enum(self.enum_for(s, hint))),
                _ => Err(self.unsup(
                    e.pos,
                    "domain other than a constant set or a set of string literals",
                )),
            },
            ExprKind::Bin(BinOp::Range, lo, hi) => Ok(Dom::Range(self.bound(lo)?, self.bound(hi)?)),
            ExprKind::Ident(n) | ExprKind::Call(n, _) => {
                let n = n.clone();
                let Some((body, env2)) = self.unfold(e, env)? else {
                    return Err(self.unsup(e.pos, format!("`{n}` as a domain")));
                };
                self.enter(e.pos)?;
                let r = self.dom(&body, &env2, &n);
                self.depth -= 1;
                r
            }
            _ => Err(self.unsup(
                e.pos,
                "domain other than a constant set or a set of string literals",
            )),
        }
    }

    /// The type of a `TypeOK` domain.
    fn domain_ty(&mut self, e: &Expr, hint: &str) -> Result<Ty, CodegenError> {
        match &e.kind {
            ExprKind::BooleanSet => Ok(Ty::Bool),
            ExprKind::Bin(BinOp::Range, lo, hi) => Ok(Ty::Range {
                lo: self.bound(lo)?,
                hi: self.bound(hi)?,
            }),
            ExprKind::Bin(BinOp::Cup, a, b) => {
                let (set_e, lits_e) = match (&a.kind, &b.kind) {
                    (_, ExprKind::SetLit(_)) => (a, b),
                    (ExprKind::SetLit(_), _) => (b, a),
                    _ => return Err(self.unsup(e.pos, "\\cup other than `S \\cup {\"None\"}`")),
                };
                let ExprKind::SetLit(items) = &lits_e.kind else {
                    return Err(self.unsup(e.pos, "\\cup other than `S \\cup {\"None\"}`"));
                };
                let Some(sentinels) = self.string_lits(items) else {
                    return Err(self.unsup(lits_e.pos, "\\cup with non-string sentinels"));
                };
                let set = match &set_e.kind {
                    ExprKind::Ident(n) if self.set_index(n).is_some() => {
                        self.set_index(n).unwrap_or_default()
                    }
                    _ => {
                        return Err(self.unsup(
                            set_e.pos,
                            "\\cup whose set is not a constant set of model values",
                        ))
                    }
                };
                let name = camel(hint);
                if let Some(i) = self
                    .m
                    .unions
                    .iter()
                    .position(|u| u.set == set && u.sentinels == sentinels)
                {
                    return Ok(Ty::Union(i));
                }
                self.m.unions.push(UnionDef {
                    name,
                    set,
                    sentinels,
                });
                Ok(Ty::Union(self.m.unions.len() - 1))
            }
            ExprKind::FuncSet(d, r) => {
                let dom = self.dom(d, &Vec::new(), hint)?;
                let rng = self.domain_ty(r, hint)?;
                Ok(Ty::Func(dom, Box::new(rng)))
            }
            ExprKind::SetLit(items) => match self.string_lits(items) {
                Some(s) if !s.is_empty() => Ok(Ty::Enum(self.enum_for(s, hint))),
                _ => Err(self.unsup(e.pos, "a set literal domain that is not all strings")),
            },
            ExprKind::Ident(n) => {
                if let Some(i) = self.set_index(n) {
                    return Ok(Ty::Elem(i));
                }
                let n = n.clone();
                let d = self.def(&n, e.pos)?;
                let body = self.p.body(d)?;
                self.enter(e.pos)?;
                let r = self.domain_ty(&body, &n);
                self.depth -= 1;
                r
            }
            _ => Err(self.unsup(e.pos, "TypeOK domain (see protocol/README.md, Types)")),
        }
    }

    fn bound(&mut self, e: &Expr) -> Result<Bound, CodegenError> {
        match &e.kind {
            ExprKind::Num(n) => Ok(Bound::Lit(*n)),
            ExprKind::Ident(n) => {
                if let Some(i) = self.num_index(n) {
                    return Ok(Bound::Const(i));
                }
                let n = n.clone();
                let d = self.def(&n, e.pos)?;
                let body = self.p.body(d)?;
                self.enter(e.pos)?;
                let r = self.bound(&body);
                self.depth -= 1;
                r
            }
            _ => Err(self.unsup(
                e.pos,
                "range bound other than a number or a number constant",
            )),
        }
    }

    fn conjuncts(e: &Expr) -> Vec<Expr> {
        match &e.kind {
            ExprKind::And(items) => items.clone(),
            _ => vec![e.clone()],
        }
    }

    fn type_ok(&mut self) -> Result<(), CodegenError> {
        let d = self.def("TypeOK", Pos { line: 1, col: 1 })?;
        let body = self.p.body(d)?;
        let mut tys: HashMap<String, Ty> = HashMap::new();
        for c in Self::conjuncts(&body) {
            let ExprKind::Bin(BinOp::In, v, dom) = &c.kind else {
                return Err(self.unsup(c.pos, "TypeOK conjunct other than `v \\in D`"));
            };
            let ExprKind::Ident(name) = &v.kind else {
                return Err(self.unsup(v.pos, "TypeOK conjunct other than `v \\in D`"));
            };
            if !self.p.module.variables.iter().any(|(n, _)| n == name) {
                return Err(self.sem(v.pos, format!("`{name}` is not a variable")));
            }
            if tys.contains_key(name) {
                return Err(self.sem(v.pos, format!("`{name}` has two TypeOK conjuncts")));
            }
            let ty = self.domain_ty(dom, name)?;
            tys.insert(name.clone(), ty);
        }
        for (name, pos) in &self.p.module.variables {
            let Some(ty) = tys.remove(name) else {
                return Err(self.sem(*pos, format!("variable `{name}` has no TypeOK conjunct")));
            };
            self.m.vars.push(VarDef {
                name: name.clone(),
                ty,
            });
        }
        Ok(())
    }

    // ---- expressions ---------------------------------------------------

    fn lower_bool(&mut self, e: &Expr, env: &Env) -> Result<IExpr, CodegenError> {
        let t = self.expr(e, env)?;
        if t.ty != Ty::Bool {
            return Err(self.sem(
                e.pos,
                format!("expected a Boolean, found {}", self.ty_name(&t.ty)),
            ));
        }
        Ok(t.e)
    }

    fn ty_name(&self, t: &Ty) -> String {
        match t {
            Ty::Bool => "a Boolean".into(),
            Ty::Int | Ty::Range { .. } => "a number".into(),
            Ty::Enum(i) => format!("a string of {}", self.m.enums[*i].name),
            Ty::Elem(i) => format!("an element of {}", self.m.sets[*i].name),
            Ty::Union(i) => format!("a value of {}", self.m.unions[*i].name),
            Ty::Func(_, _) => "a function".into(),
        }
    }

    fn to_int(&self, t: TExpr, pos: Pos) -> Result<IExpr, CodegenError> {
        match t.ty {
            Ty::Int => Ok(t.e),
            Ty::Range { .. } => Ok(IExpr::ToInt(Box::new(t.e))),
            other => Err(self.sem(
                pos,
                format!("expected a number, found {}", self.ty_name(&other)),
            )),
        }
    }

    /// Lowers `e` where a value of type `want` is expected (string literals
    /// take that type, numbers are narrowed into it).
    fn value(&mut self, e: &Expr, env: &Env, want: &Ty) -> Result<IExpr, CodegenError> {
        match (&e.kind, want) {
            (ExprKind::Str(s), Ty::Enum(i)) => {
                let en = &self.m.enums[*i];
                match en.variants.iter().position(|v| v == s) {
                    Some(k) => Ok(IExpr::EnumLit(*i, k)),
                    None => Err(self.sem(
                        e.pos,
                        format!("\"{s}\" is not one of {} {:?}", en.name, en.variants),
                    )),
                }
            }
            (ExprKind::Str(s), Ty::Union(i)) => {
                let u = &self.m.unions[*i];
                match u.sentinels.iter().position(|v| v == s) {
                    Some(k) => Ok(IExpr::Sentinel(*i, k)),
                    None => Err(self.sem(
                        e.pos,
                        format!("\"{s}\" is not a sentinel of {} {:?}", u.name, u.sentinels),
                    )),
                }
            }
            (ExprKind::If(c, a, b), _) => Ok(if_then_else(
                self.lower_bool(c, env)?,
                self.value(a, env, want)?,
                self.value(b, env, want)?,
            )),
            (ExprKind::FuncCons(x, d, body), Ty::Func(fd, rng)) => {
                let dom = self.dom(d, env, x)?;
                if dom != *fd {
                    return Err(self.sem(d.pos, "function constructor over a different domain"));
                }
                let local = self.fresh_local(x);
                let mut env2 = env.clone();
                env2.push((
                    x.clone(),
                    Binding::Typed(TExpr {
                        e: IExpr::Local(local.clone()),
                        ty: dom_ty(&dom),
                    }),
                ));
                let b = self.value(body, &env2, rng)?;
                Ok(IExpr::FuncCons(local, dom, Box::new(b)))
            }
            (ExprKind::Except(base, entries), Ty::Func(..)) => {
                let base_t = self.expr(base, env)?;
                if base_t.ty != *want {
                    return Err(self.sem(base.pos, "EXCEPT on a value of another type"));
                }
                let entries = self.except_entries(&base_t, entries, env, true)?;
                Ok(IExpr::Except(Box::new(base_t.e), entries))
            }
            (ExprKind::Ident(_) | ExprKind::Call(..), _) => {
                if let Some((body, env2)) = self.unfold(e, env)? {
                    self.enter(e.pos)?;
                    let r = self.value(&body, &env2, want);
                    self.depth -= 1;
                    return r;
                }
                let t = self.expr(e, env)?;
                self.coerce(t, want, e.pos)
            }
            _ => {
                let t = self.expr(e, env)?;
                self.coerce(t, want, e.pos)
            }
        }
    }

    fn coerce(&self, t: TExpr, want: &Ty, pos: Pos) -> Result<IExpr, CodegenError> {
        if t.ty == *want {
            return Ok(t.e);
        }
        match (&t.ty, want) {
            (Ty::Int | Ty::Range { .. }, Ty::Range { lo, hi }) => {
                let e = self.to_int(t, pos)?;
                Ok(IExpr::Narrow(
                    Box::new(e),
                    lo.clone(),
                    hi.clone(),
                    format!("{}:{pos}", self.file()),
                ))
            }
            (Ty::Range { .. }, Ty::Int) => Ok(IExpr::ToInt(Box::new(t.e))),
            (Ty::Elem(s), Ty::Union(u)) if self.m.unions[*u].set == *s => {
                Ok(IExpr::Wrap(*u, Box::new(t.e)))
            }
            (Ty::Enum(from), Ty::Enum(to))
                if self.m.enums[*from]
                    .variants
                    .iter()
                    .all(|v| self.m.enums[*to].variants.contains(v)) =>
            {
                Ok(IExpr::EnumCast {
                    from: *from,
                    to: *to,
                    e: Box::new(t.e),
                })
            }
            _ => Err(self.sem(
                pos,
                format!(
                    "expected {}, found {}",
                    self.ty_name(want),
                    self.ty_name(&t.ty)
                ),
            )),
        }
    }

    fn except_entries(
        &mut self,
        base: &TExpr,
        entries: &[crate::ast::ExceptEntry],
        env: &Env,
        value_mode: bool,
    ) -> Result<Vec<(Vec<IExpr>, IExpr)>, CodegenError> {
        let mut out = Vec::new();
        for en in entries {
            let mut ty = base.ty.clone();
            let mut path = Vec::new();
            let mut at = if value_mode {
                IExpr::Local("at_base".into())
            } else {
                base.e.clone()
            };
            for p in &en.path {
                let Ty::Func(dom, rng) = ty else {
                    return Err(
                        self.sem(p.pos, "EXCEPT path indexes a value that is not a function")
                    );
                };
                let idx = self.key(p, env, &dom)?;
                at = IExpr::Apply(Box::new(at), Box::new(idx.clone()));
                path.push(idx);
                ty = *rng;
            }
            let mut env2 = env.clone();
            env2.push((
                "@".into(),
                Binding::Typed(TExpr {
                    e: IExpr::At(Box::new(at)),
                    ty: ty.clone(),
                }),
            ));
            let v = self.value(&en.value, &env2, &ty)?;
            out.push((path, v));
        }
        Ok(out)
    }

    fn expr(&mut self, e: &Expr, env: &Env) -> Result<TExpr, CodegenError> {
        let pos = e.pos;
        Ok(match &e.kind {
            ExprKind::Bool(b) => TExpr {
                e: IExpr::Bool(*b),
                ty: Ty::Bool,
            },
            ExprKind::Num(n) => TExpr {
                e: IExpr::Int(*n),
                ty: Ty::Int,
            },
            ExprKind::Str(s) => {
                return Err(self.sem(
                    pos,
                    format!(
                        "string \"{s}\" where its type cannot be told (compare it with a variable)"
                    ),
                ))
            }
            ExprKind::At => match lookup(env, "@") {
                Some(Binding::Typed(t)) => t.clone(),
                _ => return Err(self.sem(pos, "`@` outside an EXCEPT value")),
            },
            ExprKind::Ident(name) => {
                if let Some(Binding::Typed(t)) = lookup(env, name) {
                    return Ok(t.clone());
                }
                if lookup(env, name).is_none() {
                    if let Some(i) = self.var_index(name) {
                        if !self.allow_vars {
                            return Err(self.sem(pos, format!("`{name}` read in Init")));
                        }
                        return Ok(TExpr {
                            e: if self.primed {
                                IExpr::Next(i)
                            } else {
                                IExpr::Var(i)
                            },
                            ty: self.m.vars[i].ty.clone(),
                        });
                    }
                    if let Some(i) = self.num_index(name) {
                        return Ok(TExpr {
                            e: IExpr::NumConst(i),
                            ty: Ty::Int,
                        });
                    }
                    if self.set_index(name).is_some() {
                        return Err(self.unsup(pos, format!("the set `{name}` as a value")));
                    }
                }
                return self.via_unfold(e, env);
            }
            ExprKind::Call(..) => return self.via_unfold(e, env),
            ExprKind::Apply(f, x) => {
                let ft = self.expr(f, env)?;
                let Ty::Func(dom, rng) = ft.ty else {
                    return Err(self.sem(pos, "applying something that is not a function"));
                };
                let xi = self.key(x, env, &dom)?;
                TExpr {
                    e: IExpr::Apply(Box::new(ft.e), Box::new(xi)),
                    ty: *rng,
                }
            }
            ExprKind::Prime(x) if self.allow_primes && !self.primed => {
                self.primed = true;
                let r = self.expr(x, env);
                self.primed = false;
                return r;
            }
            ExprKind::Prime(_) if self.primed => {
                return Err(self.sem(pos, "a prime inside a primed expression"))
            }
            ExprKind::Prime(_) => {
                return Err(self.unsup(
                    pos,
                    "a primed variable outside `v' = e` at the top of an action",
                ))
            }
            ExprKind::Unchanged(x) if self.allow_primes && !self.primed => TExpr {
                e: self.unchanged(x)?,
                ty: Ty::Bool,
            },
            ExprKind::Unchanged(_) => {
                return Err(self.unsup(pos, "UNCHANGED outside the top of an action"))
            }
            ExprKind::BoxAction(..) => {
                return Err(self.unsup(
                    pos,
                    "`[][A]_v` other than as the whole body of a `Live_*` definition",
                ))
            }
            ExprKind::Not(a) => TExpr {
                e: IExpr::Not(Box::new(self.lower_bool(a, env)?)),
                ty: Ty::Bool,
            },
            ExprKind::And(items) | ExprKind::Or(items) => {
                let v = items
                    .iter()
                    .map(|x| self.lower_bool(x, env))
                    .collect::<Result<Vec<_>, _>>()?;
                TExpr {
                    e: if matches!(e.kind, ExprKind::And(_)) {
                        IExpr::And(v)
                    } else {
                        IExpr::Or(v)
                    },
                    ty: Ty::Bool,
                }
            }
            ExprKind::Bin(op, a, b) => self.binary(*op, a, b, env, pos)?,
            ExprKind::Quant(all, binds, body) => {
                let mut env2 = env.clone();
                let mut locals = Vec::new();
                for (n, d) in binds {
                    let dom = self.dom(d, &env2, n)?;
                    let local = self.fresh_local(n);
                    env2.push((
                        n.clone(),
                        Binding::Typed(TExpr {
                            e: IExpr::Local(local.clone()),
                            ty: dom_ty(&dom),
                        }),
                    ));
                    locals.push((local, dom));
                }
                let mut b = self.lower_bool(body, &env2)?;
                for (local, dom) in locals.into_iter().rev() {
                    b = IExpr::Quant(*all, local, dom, Box::new(b));
                }
                TExpr { e: b, ty: Ty::Bool }
            }
            ExprKind::If(c, a, b) => {
                let c = self.lower_bool(c, env)?;
                let at = self.expr(a, env);
                let (at, bt) = match at {
                    Ok(at) => {
                        let bt = self.value(b, env, &at.ty)?;
                        (at, bt)
                    }
                    Err(_) => {
                        let bt = self.expr(b, env)?;
                        let at = self.value(a, env, &bt.ty)?;
                        (
                            TExpr {
                                e: at,
                                ty: bt.ty.clone(),
                            },
                            bt.e,
                        )
                    }
                };
                TExpr {
                    e: if_then_else(c, at.e, bt),
                    ty: at.ty,
                }
            }
            ExprKind::SetLit(_)
            | ExprKind::BooleanSet
            | ExprKind::FuncSet(..)
            | ExprKind::Tuple(_) => return Err(self.unsup(pos, "a set or tuple used as a value")),
            ExprKind::FuncCons(..) | ExprKind::Except(..) => {
                return Err(self.unsup(
                    pos,
                    "a function constructor or EXCEPT outside an assignment",
                ))
            }
        })
    }

    /// The key of a function application `f[x]` over `dom`.
    fn key(&mut self, x: &Expr, env: &Env, dom: &Dom) -> Result<IExpr, CodegenError> {
        if let Dom::Enum(_) = dom {
            return self.value(x, env, &dom_ty(dom));
        }
        let t = self.expr(x, env)?;
        match (dom, &t.ty) {
            (Dom::Set(s), Ty::Elem(s2)) if s == s2 => Ok(t.e),
            // A `S \cup {"None"}` value used as a key: TLC fails on a
            // sentinel; so does the generated index (past the end).
            (Dom::Set(s), Ty::Union(u)) if self.m.unions[*u].set == *s => Ok(t.e),
            (Dom::Range(lo, _), Ty::Int | Ty::Range { .. }) => {
                let lo = lo.clone();
                let v = self.to_int(t, x.pos)?;
                Ok(IExpr::RangeKey(Box::new(v), lo))
            }
            (_, other) => Err(self.sem(
                x.pos,
                format!(
                    "{} is not in the domain of this function",
                    self.ty_name(other)
                ),
            )),
        }
    }

    fn via_unfold(&mut self, e: &Expr, env: &Env) -> Result<TExpr, CodegenError> {
        let Some((body, env2)) = self.unfold(e, env)? else {
            return Err(self.sem(e.pos, "cannot resolve this name"));
        };
        self.enter(e.pos)?;
        let r = self.expr(&body, &env2);
        self.depth -= 1;
        r
    }

    fn binary(
        &mut self,
        op: BinOp,
        a: &Expr,
        b: &Expr,
        env: &Env,
        pos: Pos,
    ) -> Result<TExpr, CodegenError> {
        let boolean = |e| TExpr { e, ty: Ty::Bool };
        match op {
            BinOp::Implies => Ok(boolean(IExpr::Implies(
                Box::new(self.lower_bool(a, env)?),
                Box::new(self.lower_bool(b, env)?),
            ))),
            BinOp::Equiv => Ok(boolean(IExpr::Cmp(
                CmpOp::Eq,
                Box::new(self.lower_bool(a, env)?),
                Box::new(self.lower_bool(b, env)?),
            ))),
            BinOp::Add | BinOp::Sub => {
                let at = self.expr(a, env)?;
                let x = self.to_int(at, a.pos)?;
                let bt = self.expr(b, env)?;
                let y = self.to_int(bt, b.pos)?;
                Ok(TExpr {
                    e: if op == BinOp::Add {
                        IExpr::Add(Box::new(x), Box::new(y))
                    } else {
                        IExpr::Sub(Box::new(x), Box::new(y))
                    },
                    ty: Ty::Int,
                })
            }
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let cmp = match op {
                    BinOp::Eq => CmpOp::Eq,
                    BinOp::Ne => CmpOp::Ne,
                    BinOp::Lt => CmpOp::Lt,
                    BinOp::Le => CmpOp::Le,
                    BinOp::Gt => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                self.compare(cmp, a, b, env, pos).map(boolean)
            }
            BinOp::In | BinOp::NotIn => {
                // A string tested against a string-set constant whose
                // enumeration is known takes that type (`"Network" \in
                // RequiredRoles`, also through a definition's parameter).
                let known = match &b.kind {
                    ExprKind::Ident(n) if lookup(env, n).is_none() => {
                        self.str_set_index(n).and_then(|i| self.m.str_sets[i].enum_)
                    }
                    _ => None,
                };
                let x = match known {
                    Some(en) => TExpr {
                        e: self.value(a, env, &Ty::Enum(en))?,
                        ty: Ty::Enum(en),
                    },
                    None => self.expr(a, env)?,
                };
                let m = self.member(x, b, env, a.pos)?;
                Ok(boolean(if op == BinOp::In {
                    m
                } else {
                    IExpr::Not(Box::new(m))
                }))
            }
            BinOp::Cup | BinOp::Range => Err(self.unsup(pos, "a set used as a value")),
        }
    }

    fn compare(
        &mut self,
        op: CmpOp,
        a: &Expr,
        b: &Expr,
        env: &Env,
        pos: Pos,
    ) -> Result<IExpr, CodegenError> {
        // Two string literals (e.g. a definition's parameter bound to a
        // literal, compared with literals in its body) compare as constants.
        if let (Some(x), Some(y)) = (self.str_lit(a, env), self.str_lit(b, env)) {
            let equal = x == y;
            return Ok(IExpr::Bool(if op == CmpOp::Eq { equal } else { !equal }));
        }
        // A side whose type cannot be told alone (a string literal, an IF or
        // a definition yielding strings) takes the type of the other side.
        let (at, bt) = match self.expr(a, env) {
            Ok(at) => {
                let bt = match self.expr(b, env) {
                    Ok(bt) => bt,
                    // With the type of `a` known, the error of `b` is the specific one.
                    Err(_) => TExpr {
                        e: self.value(b, env, &at.ty)?,
                        ty: at.ty.clone(),
                    },
                };
                (at, bt)
            }
            Err(err) => {
                let Ok(bt) = self.expr(b, env) else {
                    return Err(err);
                };
                let ae = self.value(a, env, &bt.ty)?;
                (
                    TExpr {
                        e: ae,
                        ty: bt.ty.clone(),
                    },
                    bt,
                )
            }
        };
        let int = |t: &Ty| matches!(t, Ty::Int | Ty::Range { .. });
        if int(&at.ty) && int(&bt.ty) {
            let x = self.to_int(at, a.pos)?;
            let y = self.to_int(bt, b.pos)?;
            return Ok(IExpr::Cmp(op, Box::new(x), Box::new(y)));
        }
        if !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            return Err(self.sem(
                pos,
                "ordering comparison between values that are not numbers",
            ));
        }
        let eq = op == CmpOp::Eq;
        match (&at.ty, &bt.ty) {
            (x, y) if x == y => Ok(IExpr::Cmp(op, Box::new(at.e), Box::new(bt.e))),
            (Ty::Enum(_), Ty::Enum(_)) => Ok(IExpr::NameEq(eq, Box::new(at.e), Box::new(bt.e))),
            (Ty::Elem(sa), Ty::Elem(sb)) => Ok(IExpr::ElemEq {
                eq,
                a_union: None,
                a_set: *sa,
                a: Box::new(at.e),
                b_set: *sb,
                b: Box::new(bt.e),
            }),
            (Ty::Union(u), Ty::Elem(sb)) if self.m.unions[*u].set != *sb => Ok(IExpr::ElemEq {
                eq,
                a_union: Some(*u),
                a_set: self.m.unions[*u].set,
                a: Box::new(at.e),
                b_set: *sb,
                b: Box::new(bt.e),
            }),
            (Ty::Elem(sa), Ty::Union(u)) if self.m.unions[*u].set != *sa => Ok(IExpr::ElemEq {
                eq,
                a_union: Some(*u),
                a_set: self.m.unions[*u].set,
                a: Box::new(bt.e),
                b_set: *sa,
                b: Box::new(at.e),
            }),
            (Ty::Elem(_), Ty::Union(_)) => {
                let x = self.coerce(at, &bt.ty, a.pos)?;
                Ok(IExpr::Cmp(op, Box::new(x), Box::new(bt.e)))
            }
            (Ty::Union(_), Ty::Elem(_)) => {
                let y = self.coerce(bt, &at.ty, b.pos)?;
                Ok(IExpr::Cmp(op, Box::new(at.e), Box::new(y)))
            }
            (x, y) => Err(self.sem(
                pos,
                format!("comparing {} with {}", self.ty_name(x), self.ty_name(y)),
            )),
        }
    }

    /// The string literal `e` stands for, through parameter bindings.
    fn str_lit(&self, e: &Expr, env: &Env) -> Option<String> {
        match &e.kind {
            ExprKind::Str(s) => Some(s.clone()),
            ExprKind::Ident(n) => match lookup(env, n) {
                Some(Binding::Lazy(x, env2)) => self.str_lit(x, env2),
                _ => None,
            },
            _ => None,
        }
    }

    /// `x \in set`
    fn member(&mut self, x: TExpr, set: &Expr, env: &Env, pos: Pos) -> Result<IExpr, CodegenError> {
        match &set.kind {
            ExprKind::SetLit(items) => {
                let mut alts = Vec::new();
                for it in items {
                    let t = TExpr {
                        e: x.e.clone(),
                        ty: x.ty.clone(),
                    };
                    let lit = self.value(it, env, &x.ty);
                    let e = match lit {
                        Ok(v) if !matches!(x.ty, Ty::Range { .. }) => {
                            IExpr::Cmp(CmpOp::Eq, Box::new(t.e), Box::new(v))
                        }
                        _ => {
                            let it_t = match &it.kind {
                                ExprKind::Num(n) => TExpr {
                                    e: IExpr::Int(*n),
                                    ty: Ty::Int,
                                },
                                _ => self.expr(it, env)?,
                            };
                            let xi = self.to_int(t, pos)?;
                            let yi = self.to_int(it_t, it.pos)?;
                            IExpr::Cmp(CmpOp::Eq, Box::new(xi), Box::new(yi))
                        }
                    };
                    alts.push(e);
                }
                Ok(IExpr::Or(alts))
            }
            ExprKind::BooleanSet => match x.ty {
                Ty::Bool => Ok(IExpr::Bool(true)),
                _ => Ok(IExpr::Bool(false)),
            },
            ExprKind::Bin(BinOp::Range, lo, hi) => {
                let xi = self.to_int(x, pos)?;
                let lt = self.expr(lo, env)?;
                let l = self.to_int(lt, lo.pos)?;
                let ht = self.expr(hi, env)?;
                let h = self.to_int(ht, hi.pos)?;
                Ok(IExpr::InRange(Box::new(xi), Box::new(l), Box::new(h)))
            }
            ExprKind::Bin(BinOp::Cup, a, b) => {
                let ma = self.member(x.clone(), a, env, pos)?;
                let mb = self.member(x, b, env, pos)?;
                Ok(IExpr::Or(vec![ma, mb]))
            }
            ExprKind::Ident(n) if lookup(env, n).is_none() && self.str_set_index(n).is_some() => {
                let s = self.str_set_index(n).unwrap_or_default();
                let Ty::Enum(e) = x.ty else {
                    return Err(self.sem(
                        pos,
                        format!(
                            "{} tested against the string-set constant `{n}`",
                            self.ty_name(&x.ty)
                        ),
                    ));
                };
                match self.m.str_sets[s].enum_ {
                    Some(prev) if prev != e => {
                        return Err(self.sem(
                            pos,
                            format!(
                                "`{n}` is tested with values of `{}` here and of `{}` elsewhere",
                                self.m.enums[e].name, self.m.enums[prev].name
                            ),
                        ))
                    }
                    _ => self.m.str_sets[s].enum_ = Some(e),
                }
                Ok(IExpr::EnumInConst {
                    set: s,
                    e: Box::new(x.e),
                })
            }
            ExprKind::Ident(n) if lookup(env, n).is_none() && self.set_index(n).is_some() => {
                let s = self.set_index(n).unwrap_or_default();
                match x.ty {
                    Ty::Elem(t) if t == s => Ok(IExpr::Bool(true)),
                    Ty::Elem(t) => Ok(IExpr::ElemIn {
                        from: t,
                        union: None,
                        e: Box::new(x.e),
                        set: s,
                    }),
                    Ty::Union(u) if self.m.unions[u].set == s => {
                        Ok(IExpr::IsElem(u, Box::new(x.e)))
                    }
                    Ty::Union(u) => Ok(IExpr::ElemIn {
                        from: self.m.unions[u].set,
                        union: Some(u),
                        e: Box::new(x.e),
                        set: s,
                    }),
                    _ => Err(self.sem(pos, format!("{} tested against the model-value set `{n}`", self.ty_name(&x.ty)))),
                }
            }
            ExprKind::Ident(_) | ExprKind::Call(..) => {
                let Some((body, env2)) = self.unfold(set, env)? else {
                    return Err(self.unsup(set.pos, "membership in this set"));
                };
                self.enter(set.pos)?;
                let r = self.member(x, &body, &env2, pos);
                self.depth -= 1;
                r
            }
            _ => Err(self.unsup(
                set.pos,
                "\\in against something other than a set literal, a constant set, a range or a definition",
            )),
        }
    }

    // ---- Init, Next, actions, invariants --------------------------------

    fn init(&mut self) -> Result<(), CodegenError> {
        let d = self.def("Init", Pos { line: 1, col: 1 })?;
        let body = self.p.body(d)?;
        let mut vals: Vec<Option<IExpr>> = vec![None; self.m.vars.len()];
        self.allow_vars = false;
        for c in Self::conjuncts(&body) {
            let ExprKind::Bin(BinOp::Eq, v, rhs) = &c.kind else {
                return Err(self.unsup(c.pos, "Init conjunct other than `v = e`"));
            };
            let ExprKind::Ident(name) = &v.kind else {
                return Err(self.unsup(v.pos, "Init conjunct other than `v = e`"));
            };
            let Some(i) = self.var_index(name) else {
                return Err(self.sem(v.pos, format!("`{name}` is not a variable")));
            };
            if vals[i].is_some() {
                return Err(self.sem(v.pos, format!("`{name}` is initialised twice")));
            }
            let ty = self.m.vars[i].ty.clone();
            vals[i] = Some(self.value(rhs, &Vec::new(), &ty)?);
        }
        self.allow_vars = true;
        for (i, v) in vals.into_iter().enumerate() {
            match v {
                Some(v) => self.m.init.push(v),
                None => {
                    return Err(self.sem(
                        d.pos,
                        format!("Init does not set `{}`", self.m.vars[i].name),
                    ))
                }
            }
        }
        Ok(())
    }

    fn next(&mut self) -> Result<(), CodegenError> {
        let d = self.def("Next", Pos { line: 1, col: 1 })?;
        let body = self.p.body(d)?;
        self.next_disjunct(&body, &mut Vec::new())
    }

    fn next_disjunct(
        &mut self,
        e: &Expr,
        binders: &mut Vec<(String, Dom)>,
    ) -> Result<(), CodegenError> {
        match &e.kind {
            ExprKind::Or(items) => {
                for it in items {
                    self.next_disjunct(it, binders)?;
                }
                Ok(())
            }
            ExprKind::Quant(false, binds, body) => {
                let n = binders.len();
                for (name, d) in binds {
                    let dom = self.dom(d, &Vec::new(), name)?;
                    binders.push((name.clone(), dom));
                }
                let r = self.next_disjunct(body, binders);
                binders.truncate(n);
                r
            }
            ExprKind::Ident(name) | ExprKind::Call(name, _) => {
                let args: Vec<Expr> = match &e.kind {
                    ExprKind::Call(_, a) => a.clone(),
                    _ => Vec::new(),
                };
                let d = self.def(name, e.pos)?;
                let body = self.p.body(d)?;
                if d.params.is_empty()
                    && matches!(body.kind, ExprKind::Or(_) | ExprKind::Quant(false, ..))
                    && binders.is_empty()
                {
                    return self.next_disjunct(&body, binders);
                }
                self.action(d, &body, &args, binders, e.pos)
            }
            _ => Err(self.unsup(
                e.pos,
                "Next disjunct other than `\\E p \\in S : A(p)` or `A`",
            )),
        }
    }

    fn action(
        &mut self,
        d: &Definition,
        body: &Expr,
        args: &[Expr],
        binders: &[(String, Dom)],
        pos: Pos,
    ) -> Result<(), CodegenError> {
        if self.m.actions.iter().any(|a| a.name == d.name) {
            return Err(self.sem(pos, format!("action `{}` appears twice in Next", d.name)));
        }
        if args.len() != d.params.len() {
            return Err(self.sem(
                pos,
                format!("`{}` takes {} arguments", d.name, d.params.len()),
            ));
        }
        // Every argument must be a distinct binder of the enclosing \E.
        let mut params = Vec::new();
        let mut binder_of = Vec::new();
        for (p, a) in d.params.iter().zip(args) {
            let ExprKind::Ident(an) = &a.kind else {
                return Err(self.unsup(
                    a.pos,
                    "action argument other than a variable bound by \\E in Next",
                ));
            };
            let Some(bi) = binders.iter().position(|(n, _)| n == an) else {
                return Err(self.unsup(
                    a.pos,
                    "action argument other than a variable bound by \\E in Next",
                ));
            };
            if binder_of.contains(&bi) {
                return Err(self.unsup(a.pos, "the same binder passed twice to an action"));
            }
            binder_of.push(bi);
            params.push(Param {
                name: p.clone(),
                rust: crate::names::local(p),
                dom: binders[bi].1.clone(),
            });
        }
        if binder_of.len() != binders.len() {
            return Err(self.unsup(pos, "a \\E binder in Next that the action does not take"));
        }
        let mut loop_order: Vec<usize> = (0..params.len()).collect();
        loop_order.sort_by_key(|&i| binder_of[i]);
        let env: Env = params
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    Binding::Typed(TExpr {
                        e: IExpr::Local(p.rust.clone()),
                        ty: dom_ty(&p.dom),
                    }),
                )
            })
            .collect();
        let mut guards = Vec::new();
        let mut assigned: Vec<bool> = vec![false; self.m.vars.len()];
        let mut updates = Vec::new();
        for c in Self::conjuncts(body) {
            if has_prime(&c) {
                self.update(&c, &env, &mut assigned, &mut updates)?;
            } else if self.hides_prime(&c)? {
                return Err(self.unsup(
                    c.pos,
                    "an update inside a definition (write it in the action)",
                ));
            } else {
                let expr = self.lower_bool(&c, &env)?;
                guards.push(Guard {
                    text: self.p.text(&c),
                    line: c.pos.line,
                    expr,
                });
            }
        }
        if let Some(i) = assigned.iter().position(|a| !a) {
            return Err(self.sem(
                d.pos,
                format!(
                    "action `{}` neither assigns nor leaves UNCHANGED `{}`",
                    d.name, self.m.vars[i].name
                ),
            ));
        }
        self.m.actions.push(Action {
            name: d.name.clone(),
            line: d.pos.line,
            params,
            loop_order,
            guards,
            updates,
        });
        Ok(())
    }

    /// Whether a conjunct calls a definition that contains primes.
    fn hides_prime(&mut self, c: &Expr) -> Result<bool, CodegenError> {
        match &c.kind {
            ExprKind::Ident(n) | ExprKind::Call(n, _) if self.defs.contains_key(n.as_str()) => {
                let d = self.def(n, c.pos)?;
                Ok(has_prime(&self.p.body(d)?))
            }
            _ => Ok(false),
        }
    }

    fn unchanged_vars(
        &mut self,
        e: &Expr,
        out: &mut Vec<(usize, Pos)>,
    ) -> Result<(), CodegenError> {
        match &e.kind {
            ExprKind::Tuple(items) => {
                for it in items {
                    self.unchanged_vars(it, out)?;
                }
                Ok(())
            }
            ExprKind::Ident(n) => {
                if let Some(i) = self.var_index(n) {
                    out.push((i, e.pos));
                    return Ok(());
                }
                let n = n.clone();
                let d = self.def(&n, e.pos)?;
                let body = self.p.body(d)?;
                self.enter(e.pos)?;
                let r = self.unchanged_vars(&body, out);
                self.depth -= 1;
                r
            }
            _ => Err(self.unsup(e.pos, "UNCHANGED of something other than variables")),
        }
    }

    fn mark(&self, assigned: &mut [bool], i: usize, pos: Pos) -> Result<(), CodegenError> {
        if assigned[i] {
            return Err(self.sem(pos, format!("`{}` is assigned twice", self.m.vars[i].name)));
        }
        assigned[i] = true;
        Ok(())
    }

    fn update(
        &mut self,
        c: &Expr,
        env: &Env,
        assigned: &mut [bool],
        out: &mut Vec<Update>,
    ) -> Result<(), CodegenError> {
        match &c.kind {
            ExprKind::Unchanged(x) => {
                let mut vs = Vec::new();
                self.unchanged_vars(x, &mut vs)?;
                for (i, p) in vs {
                    self.mark(assigned, i, p)?;
                }
                Ok(())
            }
            ExprKind::Bin(BinOp::Eq, lhs, rhs) => {
                let ExprKind::Prime(v) = &lhs.kind else {
                    return Err(self.unsup(c.pos, "update other than `v' = e`"));
                };
                let ExprKind::Ident(name) = &v.kind else {
                    return Err(self.unsup(v.pos, "update other than `v' = e`"));
                };
                let Some(i) = self.var_index(name) else {
                    return Err(self.sem(v.pos, format!("`{name}` is not a variable")));
                };
                if has_prime(rhs) {
                    return Err(self.unsup(rhs.pos, "a primed variable on the right of an update"));
                }
                self.mark(assigned, i, v.pos)?;
                let ty = self.m.vars[i].ty.clone();
                if let ExprKind::Except(base, entries) = &rhs.kind {
                    if matches!(&base.kind, ExprKind::Ident(b) if b == name) {
                        let base_t = TExpr {
                            e: IExpr::Var(i),
                            ty: ty.clone(),
                        };
                        let entries = self.except_entries(&base_t, entries, env, false)?;
                        out.push(Update::Except(i, entries));
                        return Ok(());
                    }
                }
                let e = self.value(rhs, env, &ty)?;
                out.push(Update::Assign(i, e));
                Ok(())
            }
            ExprKind::If(cond, a, b) => {
                let ce = self.lower_bool(cond, env)?;
                let mut ua = Vec::new();
                let mut sa = vec![false; assigned.len()];
                for x in Self::conjuncts(a) {
                    self.update(&x, env, &mut sa, &mut ua)?;
                }
                let mut ub = Vec::new();
                let mut sb = vec![false; assigned.len()];
                for x in Self::conjuncts(b) {
                    self.update(&x, env, &mut sb, &mut ub)?;
                }
                if sa != sb {
                    return Err(self.unsup(
                        c.pos,
                        "IF update whose branches assign different variables",
                    ));
                }
                for (i, s) in sa.iter().enumerate() {
                    if *s {
                        self.mark(assigned, i, c.pos)?;
                    }
                }
                out.push(Update::If(ce, ua, ub));
                Ok(())
            }
            ExprKind::And(items) => {
                for x in items {
                    self.update(x, env, assigned, out)?;
                }
                Ok(())
            }
            _ => Err(self.unsup(
                c.pos,
                "update conjunct other than `v' = e`, UNCHANGED or IF (see protocol/README.md, Actions)",
            )),
        }
    }

    /// `UNCHANGED v` as a Boolean: every variable of `v` keeps its value.
    fn unchanged(&mut self, e: &Expr) -> Result<IExpr, CodegenError> {
        let mut vs = Vec::new();
        self.unchanged_vars(e, &mut vs)?;
        if (0..self.m.vars.len()).all(|i| vs.iter().any(|(v, _)| *v == i)) {
            return Ok(IExpr::Stutter);
        }
        Ok(IExpr::And(
            vs.into_iter()
                .map(|(i, _)| {
                    IExpr::Cmp(CmpOp::Eq, Box::new(IExpr::Next(i)), Box::new(IExpr::Var(i)))
                })
                .collect(),
        ))
    }

    /// The `Live_*` definitions of the form `[][A]_v`, as step predicates
    /// `A \/ UNCHANGED v`. Other `Live_*` bodies (`<>`, `~>`, `[]P`) are
    /// TLC's only and are not parsed.
    fn action_properties(&mut self) -> Result<(), CodegenError> {
        let defs: Vec<&Definition> = self
            .p
            .module
            .definitions
            .iter()
            .filter(|d| d.name.starts_with("Live_") && self.p.is_box_action(d))
            .collect();
        for d in defs {
            if !d.params.is_empty() {
                return Err(self.sem(d.pos, format!("property `{}` takes parameters", d.name)));
            }
            let body = self.p.body(d)?;
            let ExprKind::BoxAction(action, sub) = &body.kind else {
                return Err(self.unsup(
                    body.pos,
                    "a `Live_*` body that starts `[][` but is not `[][A]_v`",
                ));
            };
            self.allow_primes = true;
            let a = self.lower_bool(action, &Vec::new());
            self.allow_primes = false;
            let stutter = self.unchanged(sub)?;
            self.m.action_properties.push(ActionProperty {
                name: d.name.clone(),
                line: d.pos.line,
                expr: IExpr::Or(vec![a?, stutter]),
            });
        }
        Ok(())
    }

    fn invariants(&mut self) -> Result<(), CodegenError> {
        let defs: Vec<&Definition> = self
            .p
            .module
            .definitions
            .iter()
            .filter(|d| d.name.starts_with("Inv_"))
            .collect();
        for d in defs {
            if !d.params.is_empty() {
                return Err(self.sem(d.pos, format!("invariant `{}` takes parameters", d.name)));
            }
            let body = self.p.body(d)?;
            let expr = self.lower_bool(&body, &Vec::new())?;
            self.m.invariants.push(Invariant {
                name: d.name.clone(),
                line: d.pos.line,
                expr,
            });
        }
        Ok(())
    }
}

/// `IF c THEN a ELSE b`, folded when `c` is a constant (a definition's
/// parameter bound to a literal and compared with literals).
fn if_then_else(c: IExpr, a: IExpr, b: IExpr) -> IExpr {
    match c {
        IExpr::Bool(true) => a,
        IExpr::Bool(false) => b,
        c => IExpr::If(Box::new(c), Box::new(a), Box::new(b)),
    }
}

/// The type of an element of a domain.
pub fn dom_ty(d: &Dom) -> Ty {
    match d {
        Dom::Set(i) => Ty::Elem(*i),
        Dom::Enum(i) => Ty::Enum(*i),
        Dom::Range(..) => Ty::Int,
    }
}

/// Whether `b` is a literal that fits `u8`.
pub fn small(b: &Bound) -> bool {
    bound_value(b).is_some_and(|v| (0..=255).contains(&v))
}
