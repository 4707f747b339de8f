//! The protocol models' checks: TLC finds no violation
//! and takes every action; stateright over the generated Rust reaches
//! exactly TLC's distinct states, every invariant holds in every state and
//! every box-action property on every step. TLC runs once per model (with
//! every property of the `.cfg`, liveness included).

use lazaret_conformance::explore::{check, Checked};
use lazaret_conformance::tlc::run_tlc_with;
use lazaret_conformance::workspace_root;
use lazaret_generated::support::Protocol;
use lazaret_generated::{lazaret, prepared_lower, ModelEntry, LAZARET_BUILD, MODELS};

fn model_entry(name: &str) -> Result<&'static ModelEntry, String> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("no model {name}"))
}

/// `every_action`: TLC must take every action (false for a configuration
/// that leaves roles out, whose actions then cannot fire).
fn tlc_and_parity<P: Protocol>(
    e: &ModelEntry,
    every_action: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let name = format!("{} ({})", P::NAME, e.cfg_file);
    let root = workspace_root();
    let tlc = run_tlc_with(&root.join(e.tla), Some(&root.join(e.cfg_file)))?;
    assert!(
        tlc.violations.is_empty(),
        "TLC on {name}: {:?}",
        tlc.violations
    );
    assert_eq!(tlc.exit_code, Some(0), "TLC exit status on {name}");
    assert!(
        !every_action || tlc.uncovered().is_empty(),
        "TLC on {name}: actions never taken: {:?}",
        tlc.uncovered()
    );
    // Every action of the generated model appears in TLC's coverage, so an
    // action missing from Next cannot pass as "covered".
    for action in P::action_names() {
        assert!(
            tlc.coverage.iter().any(|c| c.action == *action),
            "TLC on {name}: action {action} has no coverage line (not in Next?)"
        );
    }
    let sr = check::<P>(Checked::from_entry(e, None)?, None);
    assert!(
        sr.violation.is_none(),
        "stateright on {name}: {:?}",
        sr.violation
    );
    eprintln!(
        "{name}: TLC {} distinct states in {:?}; stateright {} in {:?}",
        tlc.distinct, tlc.wall, sr.unique_states, sr.wall
    );
    assert_eq!(
        sr.unique_states as u64, tlc.distinct,
        "stateright unique states vs TLC distinct states for {name}"
    );
    Ok(())
}

#[test]
fn lazaret_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<lazaret::Model>(model_entry("Lazaret")?, true)
}

/// The roles this build acquires (protocol/LazaretBuild.cfg) satisfy every
/// property of the specification too.
#[test]
fn lazaret_build_roles_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<lazaret::Model>(&LAZARET_BUILD, false)
}

#[test]
fn prepared_lower_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<prepared_lower::Model>(model_entry("PreparedLower")?, true)
}

/// The `INVARIANTS` and `PROPERTIES` a TLC configuration lists, comments
/// (`\*`) removed.
fn checked_properties(cfg: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut listing = false;
    for line in cfg.lines() {
        let line = line.split("\\*").next().unwrap_or_default();
        if let Some(first) = line.split_whitespace().next() {
            if !line.starts_with(char::is_whitespace) {
                listing = matches!(
                    first,
                    "INVARIANT" | "INVARIANTS" | "PROPERTY" | "PROPERTIES"
                );
                out.extend(
                    line.split_whitespace()
                        .skip(1)
                        .map(str::to_owned)
                        .filter(|_| listing),
                );
                continue;
            }
        }
        if listing {
            out.extend(line.split_whitespace().map(str::to_owned));
        }
    }
    out
}

/// Every `Inv_*` and `Live_*` a model defines is checked by TLC in its
/// specification configuration, and the build configuration checks exactly
/// the same properties (no property is left out silently).
#[test]
fn every_named_property_is_listed_in_every_configuration() -> Result<(), Box<dyn std::error::Error>>
{
    let root = workspace_root();
    let mut entries: Vec<&ModelEntry> = MODELS.iter().collect();
    entries.push(&LAZARET_BUILD);
    for e in entries {
        let tla = std::fs::read_to_string(root.join(e.tla))?;
        let defined: std::collections::BTreeSet<String> = tla
            .lines()
            .filter_map(|l| {
                let name = l.split_whitespace().next()?;
                let rest = l.trim_start_matches(name).trim_start();
                ((name.starts_with("Inv_") || name.starts_with("Live_")) && rest.starts_with("=="))
                    .then(|| name.to_owned())
            })
            .collect();
        assert!(!defined.is_empty(), "{}: no named property", e.tla);
        let mut listed = checked_properties(e.cfg_text);
        assert!(
            listed.remove("TypeOK"),
            "{}: TypeOK is not checked",
            e.cfg_file
        );
        assert_eq!(
            defined.difference(&listed).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{}: defined in {} but not checked",
            e.cfg_file,
            e.tla
        );
        assert_eq!(
            listed.difference(&defined).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{}: listed but not defined in {}",
            e.cfg_file,
            e.tla
        );
    }
    Ok(())
}
