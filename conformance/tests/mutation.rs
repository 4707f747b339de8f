//! The guard-mutation report's further configurations: a mutant the
//! model's own configuration cannot tell apart is checked again in every
//! other configuration TLC and stateright check the model in.
use lazaret_conformance::mutation::{mutant_verdict, Verdict};
use lazaret_generated::{lazaret, ModelEntry, FURTHER_CONFIGURATIONS, LAZARET_UNROUTED, MODELS};

fn lazaret_entry() -> Result<&'static ModelEntry, &'static str> {
    MODELS
        .iter()
        .find(|m| m.name == "Lazaret")
        .ok_or("no Lazaret model")
}

/// `RecordIntent`'s `r \in RequiredRoles` is always true under
/// `Lazaret.cfg`, which requires every role; `LazaretUnrouted.cfg` requires
/// fewer, and there the mutant records intent for a role the build never
/// acquires, which a property catches.
#[test]
fn a_mutant_the_specification_configuration_misses_dies_in_the_build_one(
) -> Result<(), Box<dyn std::error::Error>> {
    assert!(FURTHER_CONFIGURATIONS
        .iter()
        .any(|f| f.cfg_file == LAZARET_UNROUTED.cfg_file));
    let own = lazaret_entry()?;
    let verdict = mutant_verdict::<lazaret::Model>(
        own,
        &[&LAZARET_UNROUTED],
        "RecordIntent",
        "r \\in RequiredRoles",
        4,
    )?;
    match verdict {
        Some(Verdict::Killed {
            config: Some(cfg), ..
        }) => assert_eq!(cfg, LAZARET_UNROUTED.cfg_file),
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}

/// `PauseTerminalForwarding`'s `ptyFwd[s] = TRUE` only keeps the step from
/// being taken when forwarding is already paused: dropped, the step
/// changes nothing, which no TLA+ property can see (every `[][A]_v` admits
/// stuttering) and the no-stutter step check does. The same check leaves
/// the original model alone (its parity tests explore every state).
#[test]
fn a_guard_that_only_prevents_a_no_op_step_is_killed_by_the_step_check(
) -> Result<(), Box<dyn std::error::Error>> {
    let own = lazaret_entry()?;
    let verdict = mutant_verdict::<lazaret::Model>(
        own,
        &[],
        "PauseTerminalForwarding",
        "ptyFwd[s] = TRUE",
        4,
    )?;
    match verdict {
        Some(Verdict::Killed { by, config, .. }) => {
            assert_eq!(by, lazaret_conformance::explore::NO_STUTTER);
            assert_eq!(config, None);
        }
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}
