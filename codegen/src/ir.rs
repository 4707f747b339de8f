//! The typed, definition-free intermediate representation of one model.
//!
//! Every definition is inlined, every name resolved, every string literal
//! bound to the enum of the position it appears in. The emitter turns this
//! into Rust one node at a time.

/// A bound of a `lo..hi` domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Lit(i64),
    /// Index into [`Model::numbers`].
    Const(usize),
}

/// The domain of a function or of a quantified variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dom {
    /// A constant set of model values, index into [`Model::sets`].
    Set(usize),
    /// A set of strings, index into [`Model::enums`].
    Enum(usize),
    /// `lo..hi`; its elements are numbers.
    Range(Bound, Bound),
}

/// Types of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Bool,
    /// The result of arithmetic, or a number literal (carried as `i64`).
    Int,
    /// A stored bounded natural `lo..hi`.
    Range {
        lo: Bound,
        hi: Bound,
    },
    Enum(usize),
    Elem(usize),
    /// Index into [`Model::unions`].
    Union(usize),
    Func(Dom, Box<Ty>),
}

/// A constant set of model values.
#[derive(Clone, Debug)]
pub struct ConstSet {
    pub name: String,
}

/// A constant set of strings of one enumeration (`RequiredRoles =
/// {"Sandbox", ...}` in the `.cfg`): a run-time subset of that enumeration.
#[derive(Clone, Debug)]
pub struct StrSetConst {
    pub name: String,
    /// Index into [`Model::enums`], fixed by the first membership test.
    pub enum_: Option<usize>,
}

/// A number constant (a bound).
#[derive(Clone, Debug)]
pub struct NumConst {
    pub name: String,
}

/// An enumeration of string literals.
#[derive(Clone, Debug)]
pub struct EnumDef {
    pub name: String,
    pub variants: Vec<String>,
}

/// `S \cup {"None", ...}`.
#[derive(Clone, Debug)]
pub struct UnionDef {
    pub name: String,
    pub set: usize,
    pub sentinels: Vec<String>,
}

/// A state variable.
#[derive(Clone, Debug)]
pub struct VarDef {
    pub name: String,
    pub ty: Ty,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Typed expressions.
#[derive(Clone, Debug)]
pub enum IExpr {
    Bool(bool),
    Int(i64),
    EnumLit(usize, usize),
    /// A sentinel of a union: (union, sentinel index).
    Sentinel(usize, usize),
    /// A value of string enum `from` as the same string of enum `to`
    /// (every string of `from` is one of `to`).
    EnumCast {
        from: usize,
        to: usize,
        e: Box<IExpr>,
    },
    /// An element of a model-value set wrapped into a union.
    Wrap(usize, Box<IExpr>),
    Var(usize),
    /// A primed variable `v'`: its value in the next state (action
    /// properties only).
    Next(usize),
    /// `UNCHANGED vars` over every variable: the next state equals this one.
    Stutter,
    NumConst(usize),
    /// A Rust local (parameter, bound variable, `@`).
    Local(String),
    /// The in-progress value of an `EXCEPT` target (`@`): variable and path.
    At(Box<IExpr>),
    /// `f[k]`; `k` is an element, an enum value, a union holding an
    /// element, or a [`IExpr::RangeKey`].
    Apply(Box<IExpr>, Box<IExpr>),
    /// A number used as a key of a function over `lo..hi`: the offset from `lo`.
    RangeKey(Box<IExpr>, Bound),
    /// Widen a stored bounded natural to `i64`.
    ToInt(Box<IExpr>),
    /// Narrow an `i64` to a stored bounded natural, failing the step outside `lo..hi`.
    Narrow(Box<IExpr>, Bound, Bound, String),
    Add(Box<IExpr>, Box<IExpr>),
    Sub(Box<IExpr>, Box<IExpr>),
    Not(Box<IExpr>),
    And(Vec<IExpr>),
    Or(Vec<IExpr>),
    Implies(Box<IExpr>, Box<IExpr>),
    /// Comparison of two values of the same Rust type (ints widened first).
    Cmp(CmpOp, Box<IExpr>, Box<IExpr>),
    /// Equality of two different string enums, by literal.
    NameEq(bool, Box<IExpr>, Box<IExpr>),
    /// A model value of set `from` (an element, or a union over `from`
    /// holding one) is also a member of the constant set `set` (sets may
    /// share model values, e.g. `FaultDomains = {d2}` within `Domains`).
    ElemIn {
        from: usize,
        union: Option<usize>,
        e: Box<IExpr>,
        set: usize,
    },
    /// Equality of model values drawn from two different constant sets;
    /// `a` may be a union over `a_set` (a sentinel equals no model value).
    ElemEq {
        eq: bool,
        a_union: Option<usize>,
        a_set: usize,
        a: Box<IExpr>,
        b_set: usize,
        b: Box<IExpr>,
    },
    /// A string enum value is a member of a string-set constant (index
    /// into [`Model::str_sets`]).
    EnumInConst {
        set: usize,
        e: Box<IExpr>,
    },
    /// The union value holds a model value (not a sentinel).
    IsElem(usize, Box<IExpr>),
    /// `lo <= x /\ x <= hi` on `i64`.
    InRange(Box<IExpr>, Box<IExpr>, Box<IExpr>),
    /// `\A` (true) / `\E` (false).
    Quant(bool, String, Dom, Box<IExpr>),
    If(Box<IExpr>, Box<IExpr>, Box<IExpr>),
    /// `[x \in D |-> e]`.
    FuncCons(String, Dom, Box<IExpr>),
    /// `[f EXCEPT ![p]... = e, ...]` as a new value.
    Except(Box<IExpr>, Vec<(Vec<IExpr>, IExpr)>),
}

/// A typed expression.
#[derive(Clone, Debug)]
pub struct TExpr {
    pub e: IExpr,
    pub ty: Ty,
}

/// One state update of an action.
#[derive(Clone, Debug)]
pub enum Update {
    /// `v' = e`
    Assign(usize, IExpr),
    /// `v' = [v EXCEPT ![p] = e, ...]`, applied in place.
    Except(usize, Vec<(Vec<IExpr>, IExpr)>),
    /// `IF c THEN (updates) ELSE (updates)`.
    If(IExpr, Vec<Update>, Vec<Update>),
}

/// A guard conjunct.
#[derive(Clone, Debug)]
pub struct Guard {
    /// The conjunct as written (whitespace collapsed).
    pub text: String,
    pub line: u32,
    pub expr: IExpr,
}

/// An action parameter.
#[derive(Clone, Debug)]
pub struct Param {
    /// The TLA+ name.
    pub name: String,
    /// The Rust field / local name.
    pub rust: String,
    pub dom: Dom,
}

/// An action (a disjunct of `Next`).
#[derive(Clone, Debug)]
pub struct Action {
    pub name: String,
    pub line: u32,
    pub params: Vec<Param>,
    /// Order of `\E` binders in `Next` (outermost first), as indices into `params`.
    pub loop_order: Vec<usize>,
    pub guards: Vec<Guard>,
    pub updates: Vec<Update>,
}

/// A state invariant `Inv_*`.
#[derive(Clone, Debug)]
pub struct Invariant {
    pub name: String,
    pub line: u32,
    pub expr: IExpr,
}

/// An action property `Live_* == [][A]_v`: `A \/ UNCHANGED v` checked on
/// every step (state, next state).
#[derive(Clone, Debug)]
pub struct ActionProperty {
    pub name: String,
    pub line: u32,
    pub expr: IExpr,
}

/// One model.
#[derive(Clone, Debug)]
pub struct Model {
    pub name: String,
    /// The path the source was read from, as given to the generator.
    pub file: String,
    pub sha256: String,
    pub sets: Vec<ConstSet>,
    pub str_sets: Vec<StrSetConst>,
    pub numbers: Vec<NumConst>,
    pub enums: Vec<EnumDef>,
    pub unions: Vec<UnionDef>,
    pub vars: Vec<VarDef>,
    /// Initial value of every variable, in variable order.
    pub init: Vec<IExpr>,
    pub actions: Vec<Action>,
    pub invariants: Vec<Invariant>,
    /// The box-action `Live_*` properties; the other temporal properties
    /// (`<>`, `~>`, fairness) are TLC's only.
    pub action_properties: Vec<ActionProperty>,
}
