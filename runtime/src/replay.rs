//! Replays a trace against a generated model: every step must be enabled
//! from the previous state, every invariant must hold after it, every
//! box-action property (`Live_* == [][A]_v`) must hold on it, a recorded
//! state must equal the model's, and what the product observed after the
//! step's effect (`observed`) must equal the model's successor in every
//! variable it records.

use lazaret_generated::support::{Protocol, StepError};
use lazaret_generated::{visit_model, ModelEntry, ModelVisitor, MODELS};
use serde_json::Value;

use crate::trace::{header_cfg, parse_line, TraceError, TraceLine, HEADER_ACTION};

/// Why replay stopped at a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A guard conjunct is false: action, 1-based index, line, TLA+ text.
    GuardFailed {
        index: u16,
        line: u32,
        text: &'static str,
    },
    /// An update left its variable's `TypeOK` range.
    OutOfDomain(String),
    /// An invariant fails in the state after the step.
    InvariantViolated(&'static str),
    /// The state recorded in the trace differs from the model's.
    StateMismatch,
    /// What the product observed after the step's effect differs from the
    /// model's successor (the effect did something else than its step).
    ObservationMismatch,
    /// A box-action property fails on the step.
    ActionPropertyViolated(&'static str),
}

/// One variable whose value differs.
#[derive(Clone, Debug, PartialEq)]
pub struct VarDiff {
    pub var: String,
    pub model: Value,
    pub trace: Value,
}

/// The first step at which a trace leaves the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    pub step: u64,
    pub line: usize,
    pub action: String,
    pub params: Vec<(String, String)>,
    pub reason: Reason,
    /// Model state vs the state recorded in the trace (before the step for
    /// a refused step, after it otherwise), when the trace records one.
    pub diff: Vec<VarDiff>,
    /// The model state the step was taken from.
    pub model_state: Value,
}

/// The result of a replay.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every step conforms; `recorded_start`: the trace starts from the
    /// state its header records (a recovery without its generation's
    /// earlier history), checked against every invariant, not from `Init`.
    Conforms {
        model: String,
        steps: u64,
        recorded_start: bool,
    },
    Diverged(Divergence),
}

/// Top-level variables whose values differ between two state views.
pub fn diff_states(model: &Value, trace: &Value) -> Vec<VarDiff> {
    let empty = serde_json::Map::new();
    let m = model.as_object().unwrap_or(&empty);
    let t = trace.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = m.keys().chain(t.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| m.get(*k) != t.get(*k))
        .map(|k| VarDiff {
            var: k.clone(),
            model: m.get(k).cloned().unwrap_or(Value::Null),
            trace: t.get(k).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// The key of a derived model value that allows several observations:
/// `{"oneOf": [a, b]}` matches an observed `a` or `b` (where the
/// refinement mapping is a relation, `host_model::TerminalRow::allowed`).
pub const ONE_OF: &str = "oneOf";

/// A derived value allowing each of `alternatives`.
pub fn one_of(alternatives: Vec<Value>) -> Value {
    let mut alternative = serde_json::Map::new();
    alternative.insert(ONE_OF.to_owned(), Value::Array(alternatives));
    Value::Object(alternative)
}

/// Whether an observed value is what the model's value says: equal, one of
/// its alternatives ([`ONE_OF`]), or, for maps, matching key by key.
fn observation_matches(model: &Value, observed: &Value) -> bool {
    match (model, observed) {
        (Value::Object(m), _) if m.len() == 1 && m.contains_key(ONE_OF) => {
            m[ONE_OF].as_array().is_some_and(|alternatives| {
                alternatives
                    .iter()
                    .any(|a| observation_matches(a, observed))
            })
        }
        (Value::Object(m), Value::Object(o)) => {
            m.len() == o.len()
                && m.iter()
                    .all(|(k, v)| o.get(k).is_some_and(|ov| observation_matches(v, ov)))
        }
        _ => model == observed,
    }
}

/// The variables `observed` records whose value differs from the model's
/// successor `model` (only those: an observation covers part of the state).
pub fn diff_observed(model: &Value, observed: &Value) -> Vec<VarDiff> {
    let empty = serde_json::Map::new();
    let m = model.as_object().unwrap_or(&empty);
    observed
        .as_object()
        .unwrap_or(&empty)
        .iter()
        .filter(|(k, v)| !m.get(*k).is_some_and(|mv| observation_matches(mv, v)))
        .map(|(k, v)| VarDiff {
            var: k.clone(),
            model: m.get(k).cloned().unwrap_or(Value::Null),
            trace: v.clone(),
        })
        .collect()
}

/// The model's successor as a trace line observes it: for Lazaret, with
/// the values a line observes that are functions of the state
/// (`host_model::with_derived_variables`); other models' observations are
/// their variables.
fn derived_variables(model: &str, view: Value) -> Value {
    match model {
        "Lazaret" => crate::coordinator::host_model::with_derived_variables(view),
        _ => view,
    }
}

/// Replays the text of a trace file (`file` names it in errors).
pub fn replay_text(file: &str, text: &str) -> Result<Outcome, TraceError> {
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .collect();
    if text.trim().is_empty() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    let first = parse_line(file, 1, lines[0], lines.len() == 1)?;
    let known = MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
    visit_model(
        &first.model,
        Replayer {
            file,
            lines: &lines,
        },
    )
    .unwrap_or_else(|| {
        Err(TraceError::UnknownModel {
            file: file.to_string(),
            line: 1,
            model: first.model.clone(),
            known,
        })
    })
}

struct Replayer<'a> {
    file: &'a str,
    lines: &'a [&'a str],
}

impl ModelVisitor for Replayer<'_> {
    type Output = Result<Outcome, TraceError>;

    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        let file = self.file;
        let first = parse_line(file, 1, self.lines[0], self.lines.len() == 1)?;
        if first.step != 0 {
            let cfg = lazaret_generated::support::Cfg::parse(entry.cfg_file, entry.cfg_text)
                .and_then(|c| P::constants(&c))
                .map_err(|e| TraceError::BadAction {
                    file: file.to_string(),
                    line: 1,
                    detail: format!("constants of {}: {e}", entry.name),
                })?;
            return replay::<P>(file, &cfg, self.lines, 0);
        }
        // A product trace: the header sizes the constants.
        let bad = |detail: String| TraceError::BadHeader {
            file: file.to_string(),
            line: 1,
            detail,
        };
        if first.action != HEADER_ACTION || !first.params.is_empty() {
            return Err(bad(format!(
                "expected action `{HEADER_ACTION}` without parameters, found `{}`",
                first.action
            )));
        }
        let constants = first
            .constants
            .as_ref()
            .ok_or_else(|| bad("no `constants`".into()))?;
        let cx = header_cfg(constants)
            .and_then(|c| P::constants(&c).map_err(|e| e.to_string()))
            .map_err(bad)?;
        let init = P::init(&cx).map_err(|e| bad(format!("Init fails: {e}")))?;
        let start = match &first.state {
            Some(recorded) if diff_states(&P::state_view(&cx, &init), recorded).is_empty() => {
                init.clone()
            }
            None => init.clone(),
            Some(recorded) => {
                let start = P::state_from_view(&cx, recorded).ok_or_else(|| {
                    bad("the recorded start state is not a state of the model (a variable missing, extra or outside its TypeOK domain)".into())
                })?;
                if let Some(inv) = P::invariants().iter().find(|i| !(i.holds)(&cx, &start)) {
                    return Err(bad(format!(
                        "the recorded start state violates {}",
                        inv.name
                    )));
                }
                start
            }
        };
        let recorded_start = first.state.is_some() && start != init;
        replay_from::<P>(file, &cx, start, &self.lines[1..], 1).map(|o| match o {
            Outcome::Conforms { model, steps, .. } => Outcome::Conforms {
                model,
                steps,
                recorded_start,
            },
            other => other,
        })
    }
}

/// Replays parsed-on-the-fly `lines` of one model; `skipped` lines (a
/// header) precede them in the file.
pub fn replay<P: Protocol>(
    file: &str,
    cx: &P::Constants,
    lines: &[&str],
    skipped: usize,
) -> Result<Outcome, TraceError> {
    let init = P::init(cx).map_err(|e| TraceError::BadAction {
        file: file.to_string(),
        line: 1,
        detail: format!("Init fails: {e}"),
    })?;
    replay_from::<P>(file, cx, init, lines, skipped)
}

/// Replays `lines` from `state`.
fn replay_from<P: Protocol>(
    file: &str,
    cx: &P::Constants,
    mut state: P::State,
    lines: &[&str],
    skipped: usize,
) -> Result<Outcome, TraceError> {
    let mut steps = 0u64;
    for (i, text) in lines.iter().enumerate() {
        let line = i + 1 + skipped;
        let t: TraceLine = parse_line(file, line, text, i + 1 == lines.len())?;
        if t.model != P::NAME {
            return Err(TraceError::MixedModels {
                file: file.to_string(),
                line,
                first: P::NAME.to_string(),
                found: t.model,
            });
        }
        if t.step != steps + 1 {
            return Err(TraceError::StepOutOfOrder {
                file: file.to_string(),
                line,
                expected: steps + 1,
                found: t.step,
            });
        }
        let params: Vec<(&str, &str)> = t
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let action =
            P::parse_action(cx, &t.action, &params).map_err(|e| TraceError::BadAction {
                file: file.to_string(),
                line,
                detail: e.to_string(),
            })?;
        let before = P::state_view(cx, &state);
        let diverge = |reason: Reason, diff: Vec<VarDiff>| {
            Outcome::Diverged(Divergence {
                step: t.step,
                line,
                action: t.action.clone(),
                params: t.params.clone(),
                reason,
                diff,
                model_state: before.clone(),
            })
        };
        let next = match P::step(cx, &state, &action, None) {
            Ok(n) => n,
            Err(StepError::GuardFailed { guard, .. }) => {
                let diff = t
                    .state
                    .as_ref()
                    .map(|s| diff_states(&before, s))
                    .unwrap_or_default();
                return Ok(diverge(
                    Reason::GuardFailed {
                        index: guard.index,
                        line: guard.line,
                        text: guard.text,
                    },
                    diff,
                ));
            }
            Err(e @ StepError::Domain { .. }) => {
                return Ok(diverge(Reason::OutOfDomain(e.to_string()), Vec::new()))
            }
        };
        let after = P::state_view(cx, &next);
        if let Some(recorded) = &t.state {
            let diff = diff_states(&after, recorded);
            if !diff.is_empty() {
                return Ok(diverge(Reason::StateMismatch, diff));
            }
        }
        if let Some(observed) = &t.observed {
            let diff = diff_observed(&derived_variables(P::NAME, after.clone()), observed);
            if !diff.is_empty() {
                return Ok(diverge(Reason::ObservationMismatch, diff));
            }
        }
        if let Some(inv) = P::invariants().iter().find(|inv| !(inv.holds)(cx, &next)) {
            return Ok(diverge(Reason::InvariantViolated(inv.name), Vec::new()));
        }
        if let Some(p) = P::action_properties()
            .iter()
            .find(|p| !(p.holds)(cx, &state, &next))
        {
            return Ok(diverge(Reason::ActionPropertyViolated(p.name), Vec::new()));
        }
        state = next;
        steps += 1;
    }
    Ok(Outcome::Conforms {
        model: P::NAME.to_string(),
        steps,
        recorded_start: false,
    })
}
