//! `lazaret model simulate` / `lazaret trace replay` / `lazaret model check`
//! through the built binary.

use std::path::Path;
use std::process::{Command, Output};

use lazaret_conformance::explore::{check, Checked};
use lazaret_generated::fixtures::two_phase;
use serde_json::Value;

type R = Result<(), Box<dyn std::error::Error>>;

fn lazaret(args: &[&str]) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_lazaret"))
        .args(args)
        .output()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn simulate(model: &str, seed: u64, steps: u64) -> Result<String, Box<dyn std::error::Error>> {
    let out = lazaret(&[
        "model",
        "simulate",
        "--model",
        model,
        "--seed",
        &seed.to_string(),
        "--steps",
        &steps.to_string(),
    ])?;
    assert!(
        out.status.success(),
        "simulate failed: {}",
        text(&out.stderr)
    );
    Ok(text(&out.stdout))
}

fn replay(dir: &Path, name: &str, content: &str) -> Result<Output, Box<dyn std::error::Error>> {
    let path = dir.join(name);
    std::fs::write(&path, content)?;
    Ok(lazaret(&["trace", "replay", &path.display().to_string()])?)
}

#[test]
fn simulated_traces_replay_for_many_seeds() -> R {
    let dir = tempfile::tempdir()?;
    for (model, seeds, steps) in [
        ("Lazaret", 15u64, 120u64),
        ("PreparedLower", 15, 120),
        ("TwoPhase", 15, 30),
        ("Constructs", 15, 30),
    ] {
        for seed in 0..seeds {
            let trace = simulate(model, seed, steps)?;
            let n = trace.lines().count();
            assert!(n > 0, "{model} seed {seed}: empty walk");
            let out = replay(dir.path(), "t.jsonl", &trace)?;
            assert_eq!(
                out.status.code(),
                Some(0),
                "{model} seed {seed}: {}",
                text(&out.stdout)
            );
            assert_eq!(text(&out.stdout), format!("{n} steps conform to {model}\n"));
        }
    }
    // The same seed gives the same walk; another seed another one.
    assert_eq!(
        simulate("Constructs", 3, 30)?,
        simulate("Constructs", 3, 30)?
    );
    assert_ne!(
        simulate("Constructs", 3, 30)?,
        simulate("Constructs", 4, 30)?
    );
    Ok(())
}

/// A valid six-step TwoPhase trace as JSON values.
fn base() -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let t = simulate("TwoPhase", 11, 6)?;
    let v: Vec<Value> = t
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(v.len(), 6);
    Ok(v)
}

fn join(v: &[Value]) -> String {
    v.iter().map(|l| l.to_string() + "\n").collect()
}

fn rejected(dir: &Path, content: &str, expected: &str) -> R {
    let out = replay(dir, "bad.jsonl", content)?;
    assert_eq!(out.status.code(), Some(2), "stdout: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains(expected), "expected `{expected}` in: {err}");
    Ok(())
}

#[test]
fn every_class_of_bad_trace_gets_its_own_error() -> R {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let good = base()?;
    let file = d.join("bad.jsonl").display().to_string();

    rejected(d, "", &format!("{file}: the trace is empty"))?;

    let whole = join(&good);
    let cut = &whole[..whole.len() - 20];
    rejected(d, cut, &format!("{file}:6: the line is truncated"))?;

    let mut v = join(&good[..1]);
    v.push_str("{\"schema\": oops}\n");
    rejected(d, &v, &format!("{file}:2: invalid JSON"))?;

    let mut v = good.clone();
    v[0]["schema"] = Value::from("lazaret-trace-v0");
    rejected(
        d,
        &join(&v),
        &format!("{file}:1: unknown schema `lazaret-trace-v0`"),
    )?;

    let mut v = good.clone();
    v[0]["model"] = Value::from("Nope");
    rejected(d, &join(&v), &format!("{file}:1: unknown model `Nope`"))?;

    let mut v = good.clone();
    v[2]["action"] = Value::from("Fly");
    rejected(
        d,
        &join(&v),
        &format!("{file}:3: TwoPhase has no action `Fly`"),
    )?;

    let mut v = good.clone();
    v[3]["params"]["zz"] = Value::from("r1");
    rejected(
        d,
        &join(&v),
        &format!(
            "{file}:4: action `{}` has no parameter `zz`",
            v[3]["action"].as_str().unwrap_or("?")
        ),
    )?;

    let mut v = good.clone();
    let i = v
        .iter()
        .position(|l| l["params"].get("r").is_some())
        .ok_or("no parameterised step")?;
    v[i]["params"]["r"] = Value::from("r9");
    rejected(
        d,
        &join(&v),
        &format!(
            "{file}:{}: action `{}` parameter `r` = `r9` is not one of {{r1, r2, r3}}",
            i + 1,
            v[i]["action"].as_str().unwrap_or("?")
        ),
    )?;

    let mut v = good.clone();
    v[1]["step"] = Value::from(5);
    rejected(
        d,
        &join(&v),
        &format!("{file}:2: step 5 out of order (expected step 2)"),
    )?;

    let mut v = good.clone();
    v[4].as_object_mut()
        .ok_or("not an object")?
        .remove("generation");
    rejected(
        d,
        &join(&v),
        &format!("{file}:5: field `generation` is missing"),
    )?;
    Ok(())
}

#[test]
fn a_disabled_step_reports_the_failing_guard() -> R {
    let dir = tempfile::tempdir()?;
    let line = r#"{"schema":"lazaret-trace-v1","model":"TwoPhase","step":1,"action":"RMRcvCommitMsg","params":{"r":"r2"},"generation":0}"#;
    let out = replay(dir.path(), "t.jsonl", &format!("{line}\n"))?;
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("divergence at step 1 (line 1): RMRcvCommitMsg(r = r2)\n"),
        "{s}"
    );
    assert!(
        s.contains("guard 1 of RMRcvCommitMsg (model line 55) is false: msgCommit"),
        "{s}"
    );
    assert!(s.contains("model state before the step: {"), "{s}");
    Ok(())
}

#[test]
fn a_wrong_recorded_state_reports_the_difference() -> R {
    let dir = tempfile::tempdir()?;
    let mut v = base()?;
    v[2]["state"]["msgCommit"] =
        Value::from(!v[2]["state"]["msgCommit"].as_bool().unwrap_or(false));
    let out = replay(dir.path(), "t.jsonl", &join(&v))?;
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(s.starts_with("divergence at step 3 (line 3)"), "{s}");
    assert!(
        s.contains("state difference (model vs trace):\n    msgCommit: model "),
        "{s}"
    );
    Ok(())
}

#[test]
fn model_check_reports_states_and_depth() -> R {
    let out = lazaret(&["model", "check", "--model", "TwoPhase"])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let entry = lazaret_generated::MODELS
        .iter()
        .find(|m| m.name == "TwoPhase")
        .ok_or("no TwoPhase")?;
    let expected = check::<two_phase::Model>(Checked::from_entry(entry, None)?, None);
    assert!(
        err.starts_with(&format!(
            "TwoPhase: {} states, depth {}, ",
            expected.unique_states, expected.max_depth
        )),
        "{err}"
    );
    assert!(
        err.contains("TwoPhase: every invariant and action property holds"),
        "{err}"
    );
    let out = lazaret(&["model", "check", "--model", "Nope"])?;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown model `Nope`"));
    Ok(())
}
