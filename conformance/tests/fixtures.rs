//! TLC and stateright on the dialect fixtures: the same checks the protocol
//! models get, so the checking machinery is itself tested.

use lazaret_conformance::explore::{check, Checked};
use lazaret_conformance::mutation::{guard_id, mutate, Verdict};
use lazaret_conformance::tlc::run_tlc;
use lazaret_conformance::workspace_root;
use lazaret_generated::fixtures::{constructs, two_phase};
use lazaret_generated::support::Protocol;
use lazaret_generated::{ModelEntry, MODELS};

fn entry(name: &str) -> Result<&'static ModelEntry, String> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("no model {name}"))
}

/// TLC once: no violation, every action taken; then stateright: the same
/// number of distinct states, every invariant holds.
fn tlc_and_parity<P: Protocol>(name: &str) -> Result<(), Box<dyn std::error::Error>> {
    let e = entry(name)?;
    let tlc = run_tlc(&workspace_root().join(e.tla))?;
    assert!(
        tlc.violations.is_empty(),
        "TLC on {name}: {:?}",
        tlc.violations
    );
    assert_eq!(tlc.exit_code, Some(0), "TLC exit status on {name}");
    assert!(
        tlc.uncovered().is_empty(),
        "TLC on {name}: actions never taken: {:?}",
        tlc.uncovered()
    );
    assert_eq!(
        tlc.coverage.len(),
        P::action_names().len(),
        "TLC coverage lists every action"
    );
    let sr = check::<P>(Checked::from_entry(e, None)?, None);
    assert!(
        sr.violation.is_none(),
        "stateright on {name}: {:?}",
        sr.violation
    );
    assert_eq!(
        sr.unique_states as u64, tlc.distinct,
        "stateright unique states vs TLC distinct states for {name}"
    );
    Ok(())
}

#[test]
fn two_phase_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<two_phase::Model>("TwoPhase")
}

#[test]
fn constructs_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<constructs::Model>("Constructs")
}

#[test]
fn dropping_a_guard_is_caught() -> Result<(), Box<dyn std::error::Error>> {
    let e = entry("TwoPhase")?;
    let g = guard_id::<two_phase::Model>("RMRcvCommitMsg", 1).ok_or("no guard")?;
    let out = check::<two_phase::Model>(Checked::from_entry(e, Some(g))?, None);
    let (inv, path) = out.violation.ok_or("mutant not killed")?;
    assert_eq!(inv, "Inv_Spec_Consistent");
    assert!(!path.is_empty());
    Ok(())
}

#[test]
fn mutation_verdicts_on_two_phase() -> Result<(), Box<dyn std::error::Error>> {
    let m = mutate::<two_phase::Model>(entry("TwoPhase")?, &[], 20)?;
    assert_eq!(m.results.len(), two_phase::GUARDS.len());
    let verdict = |action: &str, index: u16| {
        m.results
            .iter()
            .find(|r| r.guard.action == action && r.guard.index == index)
            .map(|r| r.verdict.clone())
    };
    assert!(matches!(
        verdict("RMRcvCommitMsg", 1),
        Some(Verdict::Killed { .. })
    ));
    assert!(matches!(
        verdict("TMCommit", 2),
        Some(Verdict::Killed { .. })
    ));
    assert_eq!(
        verdict("TMAbort", 1),
        Some(Verdict::Killed {
            by: "Live_Spec_DecisionIsFinal".into(),
            depth: 8,
            config: None,
        })
    );
    Ok(())
}

#[test]
fn an_action_property_kills_a_mutant_no_invariant_sees_first(
) -> Result<(), Box<dyn std::error::Error>> {
    // Without `tmState = "init"`, TMAbort revises a commit: the step itself
    // falsifies Live_Spec_DecisionIsFinal, before any invariant fails.
    let e = entry("TwoPhase")?;
    let g = guard_id::<two_phase::Model>("TMAbort", 1).ok_or("no guard")?;
    let out = check::<two_phase::Model>(Checked::from_entry(e, Some(g))?, None);
    let (by, path) = out.violation.ok_or("mutant not killed")?;
    assert_eq!(by, "Live_Spec_DecisionIsFinal");
    assert_eq!(
        path.last().map(two_phase::action_name),
        Some("TMAbort"),
        "{path:?}"
    );
    Ok(())
}

#[test]
fn a_mutant_counterexample_replays_to_the_dropped_guard() -> Result<(), Box<dyn std::error::Error>>
{
    use lazaret_runtime::replay::{replay, Outcome, Reason};
    use lazaret_runtime::simulate::trace_of_path;

    let e = entry("TwoPhase")?;
    let g = guard_id::<two_phase::Model>("RMRcvCommitMsg", 1).ok_or("no guard")?;
    let model = Checked::<two_phase::Model>::from_entry(e, Some(g))?;
    let cx = model.cx.clone();
    let (_, path) = check::<two_phase::Model>(model, None)
        .violation
        .ok_or("mutant not killed")?;
    let lines: Vec<String> = trace_of_path::<two_phase::Model>(&cx, &path, Some(g), 0)?
        .iter()
        .map(|l| l.to_json())
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    // Against the real model, the step the mutant allowed is refused by
    // exactly the dropped guard.
    match replay::<two_phase::Model>("cex.jsonl", &cx, &refs, 0)? {
        Outcome::Diverged(d) => {
            assert_eq!(d.action, "RMRcvCommitMsg");
            assert_eq!(
                d.reason,
                Reason::GuardFailed {
                    index: 1,
                    line: 55,
                    text: "msgCommit"
                }
            );
            assert!(usize::try_from(d.step)? <= path.len());
        }
        other => return Err(format!("expected a divergence, got {other:?}").into()),
    }
    Ok(())
}
