//! Trace lines (`lazaret-trace-v1`): one JSON object per model step, produced
//! as data by the core and by the simulator, read back by the replayer.
//!
//! `{"schema":"lazaret-trace-v1","model":"Lazaret","step":1,"action":"Elect",
//!   "params":{"c":"c1"},"generation":0,"state":{...},"observed":{...}}` —
//! `state` (the model state after the step, as `Protocol::state_view`) is
//! optional, and so is `observed`: what the product read back after the
//! step's effect (for the Host Coordinator, the Domain Store's record of
//! the generation as the model's durable variables `decision`, `part` and
//! `slot`, in `state`'s encoding). `state` is the core's own view; only
//! `observed` comes from outside the model, and replay checks that the
//! model's successor agrees with it.
//!
//! A trace written by the product starts with a header, step 0, action
//! `Init`, that carries the constants the run was sized with (`constants`:
//! model-value sets as arrays of names, numbers as numbers, string sets as
//! `{"strings":[...]}`); without a header the replayer uses the model's
//! `.cfg` constants.

use lazaret_generated::support::{Cfg, CfgValue};
use serde_json::Value;

/// The schema id of every line.
pub const SCHEMA: &str = "lazaret-trace-v1";

/// One step of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLine {
    pub model: String,
    /// 1-based, consecutive.
    pub step: u64,
    pub action: String,
    /// (parameter, value) in the action's parameter order.
    pub params: Vec<(String, String)>,
    /// The Domain generation the step belongs to.
    pub generation: u64,
    /// The model state after the step, when recorded.
    pub state: Option<Value>,
    /// What the product observed after the step's effect: a subset of the
    /// model's variables in `state`'s encoding, when recorded.
    pub observed: Option<Value>,
    /// Only on the step-0 header: the constants of the run.
    pub constants: Option<Value>,
}

/// The action name of the step-0 header line.
pub const HEADER_ACTION: &str = "Init";

impl TraceLine {
    /// The line as compact JSON (no trailing newline), fields in the
    /// documented order.
    pub fn to_json(&self) -> String {
        let q = |s: &str| Value::from(s).to_string();
        let params = self
            .params
            .iter()
            .map(|(k, v)| format!("{}:{}", q(k), q(v)))
            .collect::<Vec<_>>()
            .join(",");
        let mut out = format!(
            "{{\"schema\":{},\"model\":{},\"step\":{},\"action\":{},\"params\":{{{params}}},\"generation\":{}",
            q(SCHEMA),
            q(&self.model),
            self.step,
            q(&self.action),
            self.generation
        );
        if let Some(c) = &self.constants {
            out.push_str(",\"constants\":");
            out.push_str(&c.to_string());
        }
        if let Some(s) = &self.state {
            out.push_str(",\"state\":");
            out.push_str(&s.to_string());
        }
        if let Some(o) = &self.observed {
            out.push_str(",\"observed\":");
            out.push_str(&o.to_string());
        }
        out.push('}');
        out
    }
}

/// Why a trace line could not be read (`line` is 1-based).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("{file}: the trace is empty")]
    Empty { file: String },
    #[error("{file}:{line}: the line is truncated (JSON ends early): {detail}")]
    Truncated {
        file: String,
        line: usize,
        detail: String,
    },
    #[error("{file}:{line}: invalid JSON: {detail}")]
    InvalidJson {
        file: String,
        line: usize,
        detail: String,
    },
    #[error("{file}:{line}: expected a JSON object")]
    NotAnObject { file: String, line: usize },
    #[error("{file}:{line}: field `{field}` is missing or not {expected}")]
    BadField {
        file: String,
        line: usize,
        field: &'static str,
        expected: &'static str,
    },
    #[error("{file}:{line}: unknown field `{field}`")]
    UnknownField {
        file: String,
        line: usize,
        field: String,
    },
    #[error("{file}:{line}: unknown schema `{found}` (expected `{SCHEMA}`)")]
    UnknownSchema {
        file: String,
        line: usize,
        found: String,
    },
    #[error("{file}:{line}: unknown model `{model}` (known: {known})")]
    UnknownModel {
        file: String,
        line: usize,
        model: String,
        known: String,
    },
    #[error("{file}:{line}: model `{found}` differs from `{first}` on the first line")]
    MixedModels {
        file: String,
        line: usize,
        first: String,
        found: String,
    },
    #[error("{file}:{line}: step {found} out of order (expected step {expected})")]
    StepOutOfOrder {
        file: String,
        line: usize,
        expected: u64,
        found: u64,
    },
    #[error("{file}:{line}: the step-0 header: {detail}")]
    BadHeader {
        file: String,
        line: usize,
        detail: String,
    },
    #[error("{file}:{line}: {detail}")]
    BadAction {
        file: String,
        line: usize,
        detail: String,
    },
}

const FIELDS: &[&str] = &[
    "schema",
    "model",
    "step",
    "action",
    "params",
    "generation",
    "constants",
    "state",
    "observed",
];

/// The constants of a step-0 header as the `.cfg` values they stand for:
/// an array of names is a set of model values, a number a number,
/// `{"strings":[...]}` a set of strings.
pub fn header_cfg(constants: &Value) -> Result<Cfg, String> {
    let Value::Object(map) = constants else {
        return Err("`constants` is not an object".into());
    };
    let mut cfg = Cfg::default();
    for (name, value) in map {
        let names = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect()
        };
        let parsed = match value {
            Value::Number(n) => CfgValue::Number(
                n.as_i64()
                    .ok_or_else(|| format!("constant `{name}`: {n} is not an integer"))?,
            ),
            Value::Array(_) => CfgValue::ModelValues(
                names(value)
                    .ok_or_else(|| format!("constant `{name}`: expected an array of names"))?,
            ),
            Value::Object(o) if o.len() == 1 && o.contains_key("strings") => {
                CfgValue::ModelValues(
                    names(&o["strings"])
                        .ok_or_else(|| format!("constant `{name}`: `strings` is not an array of strings"))?
                        .into_iter()
                        .map(|s| format!("\"{s}\""))
                        .collect(),
                )
            }
            other => {
                return Err(format!(
                    "constant `{name}`: expected an array of names, a number or {{\"strings\":[...]}}, found {other}"
                ))
            }
        };
        cfg.constants.insert(name.clone(), parsed);
    }
    Ok(cfg)
}

/// Parses one line (1-based `line`); `last` says whether it is the last
/// line of the file (where a cut-off object is reported as truncated).
pub fn parse_line(
    file: &str,
    line: usize,
    text: &str,
    last: bool,
) -> Result<TraceLine, TraceError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        if e.is_eof() && last {
            TraceError::Truncated {
                file: file.to_string(),
                line,
                detail: e.to_string(),
            }
        } else {
            TraceError::InvalidJson {
                file: file.to_string(),
                line,
                detail: e.to_string(),
            }
        }
    })?;
    let Value::Object(obj) = value else {
        return Err(TraceError::NotAnObject {
            file: file.to_string(),
            line,
        });
    };
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(TraceError::UnknownField {
            file: file.to_string(),
            line,
            field: k.clone(),
        });
    }
    let bad = |field: &'static str, expected: &'static str| TraceError::BadField {
        file: file.to_string(),
        line,
        field,
        expected,
    };
    let schema = obj
        .get("schema")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("schema", "a string"))?;
    if schema != SCHEMA {
        return Err(TraceError::UnknownSchema {
            file: file.to_string(),
            line,
            found: schema.to_string(),
        });
    }
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("model", "a string"))?;
    let step = obj
        .get("step")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("step", "a natural number"))?;
    let action = obj
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("action", "a string"))?;
    let params = match obj.get("params") {
        Some(Value::Object(p)) => p
            .iter()
            .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("params", "an object of strings"))?,
        _ => return Err(bad("params", "an object of strings")),
    };
    let generation = obj
        .get("generation")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("generation", "a natural number"))?;
    Ok(TraceLine {
        model: model.to_string(),
        step,
        action: action.to_string(),
        params,
        generation,
        state: obj.get("state").cloned(),
        observed: match obj.get("observed") {
            None => None,
            Some(o @ Value::Object(_)) => Some(o.clone()),
            Some(_) => return Err(bad("observed", "an object")),
        },
        constants: obj.get("constants").cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let line = TraceLine {
            model: "M".into(),
            step: 3,
            action: "A".into(),
            params: vec![("s".into(), "s1".into())],
            generation: 2,
            state: Some(serde_json::json!({"x": 1})),
            observed: Some(serde_json::json!({"x": 1})),
            constants: None,
        };
        let text = line.to_json();
        assert!(text.starts_with("{\"schema\":\"lazaret-trace-v1\",\"model\":\"M\",\"step\":3,"));
        assert_eq!(parse_line("t", 1, &text, true), Ok(line));
    }

    #[test]
    fn truncated_only_at_the_end() {
        let cut = "{\"schema\":\"lazaret-trace-v1\",\"mo";
        assert!(matches!(
            parse_line("t", 4, cut, true),
            Err(TraceError::Truncated { line: 4, .. })
        ));
        assert!(matches!(
            parse_line("t", 4, cut, false),
            Err(TraceError::InvalidJson { line: 4, .. })
        ));
    }
}
