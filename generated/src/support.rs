//! Hand-written support shared by every generated model: the [`Protocol`]
//! trait that conformance and runtime are generic over, guard and invariant
//! descriptors, step and parse errors, and the `.cfg` reader for constants.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

/// A guard conjunct of a model, numbered across all its actions in `Next` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GuardId(pub u16);

/// What the generator knows about one guard conjunct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GuardInfo {
    pub id: GuardId,
    /// The TLA+ action the guard belongs to.
    pub action: &'static str,
    /// 1-based position among the action's guard conjuncts.
    pub index: u16,
    /// Line of the conjunct in the `.tla` file.
    pub line: u32,
    /// The conjunct as written in TLA+ (whitespace collapsed).
    pub text: &'static str,
}

/// A state invariant `Inv_*` as a predicate.
#[derive(Clone, Copy)]
pub struct InvariantInfo<C, S> {
    pub name: &'static str,
    pub line: u32,
    pub holds: fn(&C, &S) -> bool,
}

impl<C, S> Debug for InvariantInfo<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvariantInfo")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// A box-action property `Live_* == [][A]_v` as a predicate on a step
/// (state, next state).
#[derive(Clone, Copy)]
pub struct ActionPropertyInfo<C, S> {
    pub name: &'static str,
    pub line: u32,
    pub holds: fn(&C, &S, &S) -> bool,
}

impl<C, S> Debug for ActionPropertyInfo<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionPropertyInfo")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// Why a step was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum StepError {
    /// A guard conjunct of the action is false in the current state.
    #[error("{model}: {} is not enabled: guard {} of {} (line {}) is false: {}", .guard.action, .guard.index, .guard.action, .guard.line, .guard.text)]
    GuardFailed {
        model: &'static str,
        guard: &'static GuardInfo,
    },
    /// An update produced a number outside its variable's `TypeOK` range.
    #[error("{model}: the update at {at} yields {value}, outside {lo}..{hi}")]
    Domain {
        model: &'static str,
        at: &'static str,
        value: i64,
        lo: i64,
        hi: i64,
    },
}

/// Why an action could not be rebuilt from its name and parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionParseError {
    #[error("{model} has no action `{action}`")]
    UnknownAction { model: &'static str, action: String },
    #[error("action `{action}` has no parameter `{param}` (expected {expected})")]
    UnknownParam {
        action: &'static str,
        param: String,
        expected: String,
    },
    #[error("action `{action}` is missing parameter `{param}`")]
    MissingParam {
        action: &'static str,
        param: &'static str,
    },
    #[error("action `{action}` parameter `{param}` = `{value}` is not one of {expected}")]
    BadValue {
        action: &'static str,
        param: &'static str,
        value: String,
        expected: String,
    },
}

/// A constant value from a TLC `.cfg` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CfgValue {
    /// `{a, b}`: a set of model values.
    ModelValues(Vec<String>),
    Number(i64),
}

/// The parts of a TLC `.cfg` file the checkers use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cfg {
    pub constants: BTreeMap<String, CfgValue>,
    pub invariants: Vec<String>,
    pub properties: Vec<String>,
}

/// Why a `.cfg` file or its constants were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CfgError {
    #[error("{file}:{line}: expected `Name = value` in the CONSTANTS section, found `{text}`")]
    BadLine {
        file: String,
        line: usize,
        text: String,
    },
    #[error("{file}:{line}: constant `{name}`: expected a set of model values or a number, found `{text}`")]
    BadValue {
        file: String,
        line: usize,
        name: String,
        text: String,
    },
    #[error("constant `{name}` is not given a value")]
    Missing { name: &'static str },
    #[error("constant `{name}` must be {expected}")]
    WrongKind {
        name: &'static str,
        expected: &'static str,
    },
    #[error("constant `{name}`: `{value}` is not one of the model's strings for it")]
    UnknownString { name: &'static str, value: String },
}

impl Cfg {
    /// Parses the text of a TLC `.cfg` file.
    pub fn parse(file: &str, text: &str) -> Result<Self, CfgError> {
        #[derive(PartialEq)]
        enum Section {
            Constants,
            Invariants,
            Properties,
            Other,
        }
        let mut cfg = Self::default();
        let mut section = Section::Other;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split("\\*").next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            let rest: &str = match first {
                "CONSTANT" | "CONSTANTS" => {
                    section = Section::Constants;
                    line[first.len()..].trim()
                }
                "INVARIANT" | "INVARIANTS" => {
                    section = Section::Invariants;
                    line[first.len()..].trim()
                }
                "PROPERTY" | "PROPERTIES" => {
                    section = Section::Properties;
                    line[first.len()..].trim()
                }
                w if w.chars().all(|c| c.is_ascii_uppercase()) && !line.contains('=') => {
                    section = Section::Other;
                    continue;
                }
                _ => line,
            };
            if rest.is_empty() {
                continue;
            }
            match section {
                Section::Constants => {
                    let Some((name, value)) = rest.split_once('=') else {
                        return Err(CfgError::BadLine {
                            file: file.to_string(),
                            line: n + 1,
                            text: rest.to_string(),
                        });
                    };
                    let name = name.trim().to_string();
                    let value = value.trim();
                    let parsed = if let Some(inner) =
                        value.strip_prefix('{').and_then(|v| v.strip_suffix('}'))
                    {
                        CfgValue::ModelValues(
                            inner
                                .split(',')
                                .map(str::trim)
                                .filter(|s| !s.is_empty())
                                .map(str::to_string)
                                .collect(),
                        )
                    } else if let Ok(v) = value.parse::<i64>() {
                        CfgValue::Number(v)
                    } else {
                        return Err(CfgError::BadValue {
                            file: file.to_string(),
                            line: n + 1,
                            name,
                            text: value.to_string(),
                        });
                    };
                    cfg.constants.insert(name, parsed);
                }
                Section::Invariants => cfg
                    .invariants
                    .extend(rest.split_whitespace().map(str::to_string)),
                Section::Properties => cfg
                    .properties
                    .extend(rest.split_whitespace().map(str::to_string)),
                Section::Other => {}
            }
        }
        Ok(cfg)
    }

    /// The model values of set constant `name` (at most `u16::MAX` of them).
    pub fn model_values(&self, name: &'static str) -> Result<Vec<String>, CfgError> {
        match self.constants.get(name) {
            Some(CfgValue::ModelValues(v)) if v.len() <= usize::from(u16::MAX) => Ok(v.clone()),
            Some(_) => Err(CfgError::WrongKind {
                name,
                expected: "a set of at most 65535 model values",
            }),
            None => Err(CfgError::Missing { name }),
        }
    }

    /// The strings of string-set constant `name` (`{"A", "B"}`), unquoted.
    pub fn strings(&self, name: &'static str) -> Result<Vec<String>, CfgError> {
        let wrong = CfgError::WrongKind {
            name,
            expected: "a set of quoted strings",
        };
        match self.constants.get(name) {
            Some(CfgValue::ModelValues(v)) => v
                .iter()
                .map(|s| {
                    s.strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .filter(|s| !s.contains('"'))
                        .map(str::to_string)
                        .ok_or_else(|| wrong.clone())
                })
                .collect(),
            Some(_) => Err(wrong),
            None => Err(CfgError::Missing { name }),
        }
    }

    /// The number constant `name` (in `0..=u16::MAX`, the widest stored range).
    pub fn number(&self, name: &'static str) -> Result<i64, CfgError> {
        match self.constants.get(name) {
            Some(CfgValue::Number(v)) if (0..=i64::from(u16::MAX)).contains(v) => Ok(*v),
            Some(_) => Err(CfgError::WrongKind {
                name,
                expected: "a number in 0..65535",
            }),
            None => Err(CfgError::Missing { name }),
        }
    }
}

/// Narrows a computed number into a stored `lo..hi` range.
pub fn narrow<T: TryFrom<i64>>(
    model: &'static str,
    value: i64,
    lo: i64,
    hi: i64,
    at: &'static str,
) -> Result<T, StepError> {
    let err = StepError::Domain {
        model,
        at,
        value,
        lo,
        hi,
    };
    if !(lo..=hi).contains(&value) {
        return Err(err);
    }
    T::try_from(value).map_err(|_| err)
}

/// The JSON name of model value `i` of a set (`"?"` past its end).
pub fn value_name(names: &[String], i: usize) -> serde_json::Value {
    serde_json::Value::from(names.get(i).map_or("?", String::as_str))
}

/// Checks that `given` names exactly the parameters `expected` of `action`.
pub fn expect_params(
    action: &'static str,
    expected: &[&'static str],
    given: &[(&str, &str)],
) -> Result<(), ActionParseError> {
    for (name, _) in given {
        if !expected.contains(name) {
            return Err(ActionParseError::UnknownParam {
                action,
                param: (*name).to_string(),
                expected: if expected.is_empty() {
                    "none".to_string()
                } else {
                    expected.join(", ")
                },
            });
        }
    }
    for name in expected {
        if !given.iter().any(|(n, _)| n == name) {
            return Err(ActionParseError::MissingParam {
                action,
                param: name,
            });
        }
    }
    Ok(())
}

/// The value given for parameter `name` (present after [`expect_params`]).
pub fn param<'g>(given: &[(&str, &'g str)], name: &str) -> &'g str {
    given
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, v)| *v)
}

/// The index of model value `value` in `names`.
pub fn parse_model_value(
    action: &'static str,
    param: &'static str,
    names: &[String],
    value: &str,
) -> Result<u16, ActionParseError> {
    names
        .iter()
        .position(|n| n == value)
        .and_then(|i| u16::try_from(i).ok())
        .ok_or_else(|| ActionParseError::BadValue {
            action,
            param,
            value: value.to_string(),
            expected: format!("{{{}}}", names.join(", ")),
        })
}

/// A number parameter value in `lo..=hi`.
pub fn parse_number(
    action: &'static str,
    param: &'static str,
    value: &str,
    lo: i64,
    hi: i64,
) -> Result<i64, ActionParseError> {
    value
        .parse::<i64>()
        .ok()
        .filter(|v| (lo..=hi).contains(v))
        .ok_or_else(|| ActionParseError::BadValue {
            action,
            param,
            value: value.to_string(),
            expected: format!("{lo}..{hi}"),
        })
}

/// The position of `value` in a function over `lo..hi` (past the end when
/// `value < lo`, as TLC fails to apply the function there).
pub fn range_index(value: i64, lo: i64) -> usize {
    usize::try_from(value - lo).unwrap_or(usize::MAX)
}

/// A string-enum parameter value.
pub fn parse_enum<T>(
    action: &'static str,
    param: &'static str,
    value: &str,
    from_name: fn(&str) -> Option<T>,
    names: &[&str],
) -> Result<T, ActionParseError> {
    from_name(value).ok_or_else(|| ActionParseError::BadValue {
        action,
        param,
        value: value.to_string(),
        expected: format!("{{{}}}", names.join(", ")),
    })
}

/// One generated model, so that checkers, the runtime and trace replay are
/// generic over `Lazaret` and `PreparedLower`.
pub trait Protocol: 'static {
    type Constants: Clone + Debug + Send + Sync + 'static;
    type State: Clone + Debug + PartialEq + Eq + Hash + Send + Sync + 'static;
    type Action: Clone + Debug + PartialEq + Eq + Hash + Send + Sync + 'static;

    /// The TLA+ module name.
    const NAME: &'static str;
    /// The source file, relative to the workspace root.
    const SOURCE: &'static str;

    /// Constants from a parsed `.cfg`.
    fn constants(cfg: &Cfg) -> Result<Self::Constants, CfgError>;
    /// The initial state (`Init`).
    fn init(cx: &Self::Constants) -> Result<Self::State, StepError>;
    /// Appends the enabled actions in `Next` order, parameters in element order.
    /// `mask` drops one guard conjunct (guard mutation).
    fn enabled_actions(
        cx: &Self::Constants,
        st: &Self::State,
        mask: Option<GuardId>,
        out: &mut Vec<Self::Action>,
    );
    /// The successor state, or the first false guard conjunct (other than `mask`).
    fn step(
        cx: &Self::Constants,
        st: &Self::State,
        action: &Self::Action,
        mask: Option<GuardId>,
    ) -> Result<Self::State, StepError>;
    /// Every guard conjunct, indexed by [`GuardId`].
    fn guards() -> &'static [GuardInfo];
    /// The `Inv_*` invariants.
    fn invariants() -> &'static [InvariantInfo<Self::Constants, Self::State>];
    /// The box-action `Live_*` properties, checked on every step.
    fn action_properties() -> &'static [ActionPropertyInfo<Self::Constants, Self::State>];
    /// The action names in `Next` order.
    fn action_names() -> &'static [&'static str];
    /// The TLA+ name of an action.
    fn action_name(action: &Self::Action) -> &'static str;
    /// The parameters of an action as (TLA+ name, value) pairs.
    fn action_params(cx: &Self::Constants, action: &Self::Action) -> Vec<(&'static str, String)>;
    /// Rebuilds an action from its name and parameters.
    fn parse_action(
        cx: &Self::Constants,
        name: &str,
        params: &[(&str, &str)],
    ) -> Result<Self::Action, ActionParseError>;
    /// The state as a JSON object keyed by TLA+ variable names.
    fn state_view(cx: &Self::Constants, st: &Self::State) -> serde_json::Value;
    /// The state `state_view` wrote, or `None` if `v` is not one.
    fn state_from_view(cx: &Self::Constants, v: &serde_json::Value) -> Option<Self::State>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfg_sections_and_values() {
        let text = "CONSTANTS\n  Hosts = {h1, h2}\n  MaxGen = 2\nINIT Init\nNEXT Next\nINVARIANT TypeOK\nINVARIANTS Inv_A\n  Inv_B\nPROPERTY Live_X\n";
        let cfg = Cfg::parse("m.cfg", text);
        let cfg = cfg.as_ref().ok();
        assert_eq!(
            cfg.and_then(|c| c.model_values("Hosts").ok()),
            Some(vec!["h1".to_string(), "h2".to_string()])
        );
        assert_eq!(cfg.and_then(|c| c.number("MaxGen").ok()), Some(2));
        assert_eq!(
            cfg.map(|c| c.invariants.clone()),
            Some(vec!["TypeOK".into(), "Inv_A".into(), "Inv_B".into()])
        );
        assert_eq!(
            cfg.map(|c| c.number("Hosts")),
            Some(Err(CfgError::WrongKind {
                name: "Hosts",
                expected: "a number in 0..65535"
            }))
        );
    }

    #[test]
    fn bad_constant_value_names_line() {
        let err = Cfg::parse("m.cfg", "CONSTANTS\n  X = foo\n").err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("m.cfg:2: constant `X`: expected a set of model values or a number, found `foo`")
        );
    }

    #[test]
    fn narrow_checks_bounds() {
        assert_eq!(narrow::<u8>("M", 3, 0, 3, "here"), Ok(3));
        assert!(narrow::<u8>("M", 4, 0, 3, "here").is_err());
        assert!(narrow::<u8>("M", -1, 0, 3, "here").is_err());
    }
}
