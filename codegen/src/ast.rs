//! The syntax tree of a dialect module, before names are resolved.

use crate::error::Pos;

/// Binary operators of the dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    In,
    NotIn,
    Implies,
    Equiv,
    Cup,
    Range,
}

impl BinOp {
    /// The TLA+ spelling.
    pub fn text(self) -> &'static str {
        match self {
            Self::Eq => "=",
            Self::Ne => "#",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::Add => "+",
            Self::Sub => "-",
            Self::In => "\\in",
            Self::NotIn => "\\notin",
            Self::Implies => "=>",
            Self::Equiv => "<=>",
            Self::Cup => "\\cup",
            Self::Range => "..",
        }
    }
}

/// An expression node.
#[derive(Clone, Debug)]
pub struct Expr {
    pub pos: Pos,
    /// Byte range in the source, for quoting guard conjuncts.
    pub start: usize,
    pub end: usize,
    pub kind: ExprKind,
}

/// One `![a][b] = e` entry of an `EXCEPT`.
#[derive(Clone, Debug)]
pub struct ExceptEntry {
    pub path: Vec<Expr>,
    pub value: Expr,
}

/// Expression shapes.
#[derive(Clone, Debug)]
pub enum ExprKind {
    Str(String),
    Num(i64),
    Bool(bool),
    /// `BOOLEAN`
    BooleanSet,
    Ident(String),
    Call(String, Vec<Expr>),
    Apply(Box<Expr>, Box<Expr>),
    Prime(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    /// `\A` (true) or `\E` (false) with `(name, domain)` bindings.
    Quant(bool, Vec<(String, Expr)>, Box<Expr>),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    SetLit(Vec<Expr>),
    FuncCons(String, Box<Expr>, Box<Expr>),
    FuncSet(Box<Expr>, Box<Expr>),
    Except(Box<Expr>, Vec<ExceptEntry>),
    Tuple(Vec<Expr>),
    Unchanged(Box<Expr>),
    /// `@` inside an `EXCEPT` value.
    At,
    /// `[][A]_v`: action `A` or stuttering on `v` (a whole `Live_*` body).
    BoxAction(Box<Expr>, Box<Expr>),
}

/// A top-level definition `Name(p, q) == body`, its body parsed lazily.
#[derive(Clone, Debug)]
pub struct Definition {
    pub name: String,
    pub params: Vec<String>,
    pub pos: Pos,
    /// Index of the first body token and one past the last, in the module's token list.
    pub body: (usize, usize),
}

/// A parsed module: declarations plus the raw definitions.
#[derive(Clone, Debug)]
pub struct Module {
    pub name: String,
    pub constants: Vec<(String, Pos)>,
    pub variables: Vec<(String, Pos)>,
    pub definitions: Vec<Definition>,
}
