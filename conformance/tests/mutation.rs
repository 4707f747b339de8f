//! The guard-mutation report's further configurations: a mutant the
//! model's own configuration cannot tell apart is checked again in every
//! other configuration TLC and stateright check the model in.
use lazaret_conformance::mutation::{mutant_verdict, Verdict};
use lazaret_generated::{lazaret, FURTHER_CONFIGURATIONS, LAZARET_BUILD, MODELS};

/// `RecordIntent`'s `r \in RequiredRoles` is always true under
/// `Lazaret.cfg`, which requires every role; `LazaretBuild.cfg` requires
/// fewer, and there the mutant records intent for a role the build never
/// acquires, which a property catches.
#[test]
fn a_mutant_the_specification_configuration_misses_dies_in_the_build_one(
) -> Result<(), Box<dyn std::error::Error>> {
    assert!(FURTHER_CONFIGURATIONS
        .iter()
        .any(|f| f.cfg_file == LAZARET_BUILD.cfg_file));
    let own = MODELS
        .iter()
        .find(|m| m.name == "Lazaret")
        .ok_or("no Lazaret model")?;
    let verdict = mutant_verdict::<lazaret::Model>(
        own,
        &[&LAZARET_BUILD],
        "RecordIntent",
        "r \\in RequiredRoles",
        4,
    )?;
    match verdict {
        Some(Verdict::Killed {
            config: Some(cfg), ..
        }) => assert_eq!(cfg, LAZARET_BUILD.cfg_file),
        other => return Err(format!("{other:?}").into()),
    }
    Ok(())
}
