//! The protocol models' checks: TLC finds no violation
//! and takes every action; stateright over the generated Rust reaches
//! exactly TLC's distinct states, every invariant holds in every state and
//! every box-action property on every step. TLC runs once per model (with
//! every property of the `.cfg`, liveness included).

use lazaret_conformance::explore::{check, simulate, Checked};
use lazaret_conformance::tlc::{run_tlc_simulation, run_tlc_with, TlcReport};
use lazaret_conformance::workspace_root;
use lazaret_generated::support::Protocol;
use lazaret_generated::{
    lazaret, prepared_lower, session_release, ModelEntry, LAZARET_UNROUTED, MODELS,
};

fn model_entry(name: &str) -> Result<&'static ModelEntry, String> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("no model {name}"))
}

/// What every clean TLC run must show: no violation, exit status 0, and,
/// when `every_action`, every action of the model taken.
fn assert_tlc_clean(tlc: &TlcReport, name: &str, every_action: bool) {
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
    assert_tlc_clean(&tlc, &name, every_action);
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

/// The roles a Domain without the ignored-path router acquires
/// (protocol/LazaretUnrouted.cfg) satisfy every property of the
/// specification too; a routed Domain's are the specification's own.
#[test]
fn lazaret_build_roles_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<lazaret::Model>(&LAZARET_UNROUTED, false)
}

#[test]
fn prepared_lower_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<prepared_lower::Model>(model_entry("PreparedLower")?, true)
}

#[test]
fn session_release_tlc_clean_and_stateright_parity() -> Result<(), Box<dyn std::error::Error>> {
    tlc_and_parity::<session_release::Model>(model_entry("SessionRelease")?, true)
}

/// The product's own sizes (protocol/LazaretProduct.cfg).
const LAZARET_PRODUCT: ModelEntry = ModelEntry {
    name: "Lazaret",
    tla: "protocol/Lazaret.tla",
    cfg_file: "protocol/LazaretProduct.cfg",
    cfg_text: include_str!("../../protocol/LazaretProduct.cfg"),
};

/// TLC's random behaviors and their length (about 30 s on one core), and
/// the states stateright visits along its own (about 20 s: it checks the
/// generated Rust, which is faster).
const SIMULATED_BEHAVIORS: u64 = 600;
const SIMULATED_DEPTH: u64 = 150;
const STATERIGHT_SIMULATED_STATES: usize = 1_000_000;

/// The product's own sizes — the constants of every product trace (four
/// coordinators, 16 session slots, 8 unacknowledged chunks, this build's
/// roles) — are too large to explore, so TLC and stateright both simulate
/// them: reproducible random behaviors, every invariant and action
/// property checked on every state and step (Lazaret-notes.md "Product
/// sizes" argues why the exhaustive checks at two coordinators and two
/// sessions cover the rest).
#[test]
fn product_sizes_are_simulated_by_tlc_and_stateright() -> Result<(), Box<dyn std::error::Error>> {
    // The configuration is the product's: the constants its traces carry.
    use lazaret_runtime::coordinator::host_model::{HostModel, Routing};
    // A routed Domain's, which acquires every role (the default,
    // `isolate_gitignored = true`).
    let product = HostModel::new("hc".into(), 1, Routing::Routed)?;
    let constants = product
        .header()
        .constants
        .ok_or("the product trace header has no constants")?;
    let cfg =
        lazaret_generated::support::Cfg::parse(LAZARET_PRODUCT.cfg_file, LAZARET_PRODUCT.cfg_text)?;
    let cx = <lazaret::Model as Protocol>::constants(&cfg)?;
    let count = |key: &str| constants[key].as_array().map_or(0, Vec::len);
    assert_eq!(cx.coordinators.len(), count("Coordinators"), "coordinators");
    assert_eq!(cx.sessions.len(), count("Sessions"), "sessions");
    assert_eq!(
        Some(cx.max_unacked_chunks),
        constants["MaxUnackedChunks"].as_i64(),
        "unacknowledged chunks"
    );
    let mut roles: Vec<&str> = cx.required_roles.iter().map(|r| r.name()).collect();
    let mut carried: Vec<&str> = constants["RequiredRoles"]["strings"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    roles.sort_unstable();
    carried.sort_unstable();
    assert_eq!(roles, carried, "required roles");
    assert_eq!(roles.len(), lazaret::Roles::ALL.len(), "every role");
    // Every invariant and action property is checked.
    let listed = checked_properties(LAZARET_PRODUCT.cfg_text);
    for name in <lazaret::Model as Protocol>::invariants()
        .iter()
        .map(|i| i.name)
        .chain(
            <lazaret::Model as Protocol>::action_properties()
                .iter()
                .map(|p| p.name),
        )
    {
        assert!(
            listed.contains(name),
            "{} does not check {name}",
            LAZARET_PRODUCT.cfg_file
        );
    }

    let root = workspace_root();
    let tlc = run_tlc_simulation(
        &root.join(LAZARET_PRODUCT.tla),
        &root.join(LAZARET_PRODUCT.cfg_file),
        SIMULATED_BEHAVIORS,
        SIMULATED_DEPTH,
        7,
    )?;
    assert!(
        tlc.violations.is_empty(),
        "TLC simulation: {:?}",
        tlc.violations
    );
    assert_eq!(tlc.exit_code, Some(0), "TLC simulation exit status");
    // Most behaviors run their whole length (few states are terminal).
    assert!(
        tlc.checked >= SIMULATED_BEHAVIORS * SIMULATED_DEPTH / 2,
        "TLC simulation checked only {} states",
        tlc.checked
    );
    let sr = simulate::<lazaret::Model>(
        Checked::from_entry(&LAZARET_PRODUCT, None)?,
        7,
        usize::try_from(SIMULATED_DEPTH)?,
        STATERIGHT_SIMULATED_STATES,
    );
    assert!(
        sr.violation.is_none(),
        "stateright simulation: {:?}",
        sr.violation
    );
    assert!(
        sr.states >= STATERIGHT_SIMULATED_STATES,
        "stateright simulated only {} states",
        sr.states
    );
    eprintln!(
        "product sizes: TLC checked {} states in {:?}; stateright {} states (depth {}) in {:?}",
        tlc.checked, tlc.wall, sr.states, sr.max_depth, sr.wall
    );
    Ok(())
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
    entries.push(&LAZARET_UNROUTED);
    entries.push(&SESSION_TERMINAL);
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

/// The check that joins SessionRelease.tla with the coordinator's record of
/// one terminal (protocol/SessionTerminal-notes.md). TLC only: it is not a
/// model the product runs, so no Rust is generated from it.
const SESSION_TERMINAL: ModelEntry = ModelEntry {
    name: "SessionTerminal",
    tla: "protocol/SessionTerminal.tla",
    cfg_file: "protocol/SessionTerminal.cfg",
    cfg_text: include_str!("../../protocol/SessionTerminal.cfg"),
};

/// Its reachable states (one terminal, both sides), pinned: a change to
/// either side, or to the join, shows here first.
const SESSION_TERMINAL_STATES: u64 = 637_834;

#[test]
fn session_terminal_tlc_clean() -> Result<(), Box<dyn std::error::Error>> {
    let root = workspace_root();
    let e = &SESSION_TERMINAL;
    let tlc = run_tlc_with(&root.join(e.tla), Some(&root.join(e.cfg_file)))?;
    assert_tlc_clean(&tlc, e.name, true);
    assert_eq!(
        tlc.distinct, SESSION_TERMINAL_STATES,
        "SessionTerminal distinct states"
    );
    Ok(())
}

/// One way of breaking the join: the text replaced in SessionTerminal.tla,
/// its replacement, and the property TLC must then report.
struct BrokenJoin {
    what: &'static str,
    from: &'static str,
    to: &'static str,
    violates: &'static str,
}

/// Each tie of SessionTerminal.tla can fail: the join the product makes,
/// broken one way at a time, is reported by the property that names it.
const BROKEN_JOINS: &[BrokenJoin] = &[
    BrokenJoin {
        what: "a gate that gives up and lets the release go on as if recorded",
        from: "    /\\ SR!ReleaseIntentUnconfirmed\n    /\\ gate' = \"GaveUp\"",
        to: "    /\\ SR!ReleaseIntentConfirmed\n    /\\ gate' = \"GaveUp\"",
        violates: "Invariant Inv_Spec_SignalsFollowDurableIntent is violated.",
    },
    BrokenJoin {
        what: "a confirmation before the coordinator answered",
        from: "ReleaseIntentConfirmed ==\n    /\\ gate = \"Acknowledged\"",
        to: "ReleaseIntentConfirmed ==\n    /\\ gate \\in {\"Awaited\", \"Acknowledged\"}",
        violates: "Invariant Inv_Spec_SignalsFollowDurableIntent is violated.",
    },
    BrokenJoin {
        what: "a session loop that goes on while its gate waits",
        from: "Unblocked ==\n    /\\ gate # \"Awaited\"\n",
        to: "Unblocked ==\n",
        violates: "Invariant Inv_Spec_SignalsFollowDurableIntent is violated.",
    },
    BrokenJoin {
        what: "a gate that never waits for the durable intent",
        from: "gate' = IF confirmation' = \"Awaited\" THEN \"Awaited\" ELSE \"Background\"",
        to: "gate' = \"Background\"",
        violates: "Invariant Inv_Spec_SignalsFollowDurableIntent is violated.",
    },
    BrokenJoin {
        what: "an admission without the coordinator's yes",
        from: "    /\\ kind = \"Interactive\"\n    /\\ answer = \"Registered\"\n",
        to: "    /\\ kind = \"Interactive\"\n",
        violates: "Invariant Inv_Spec_AdmittedOnlyWhenRecordedRunning is violated.",
    },
    BrokenJoin {
        what: "a record made clean whatever the release found",
        from: "    /\\ phase = \"Clean\"\n    /\\ rec = \"Closing\"\n",
        to: "    /\\ phase \\in Finished\n    /\\ rec = \"Closing\"\n",
        violates: "Invariant Inv_Spec_RecordedOutcomeIsTheRelease is violated.",
    },
    BrokenJoin {
        what: "a record registered again after its release intent",
        from: "    /\\ Head(reports) = \"Running\"\n    /\\ rec = \"Starting\"\n",
        to: "    /\\ Head(reports) = \"Running\"\n",
        violates: "Action property Live_Spec_RecordMovesAsLazaret is violated.",
    },
    BrokenJoin {
        what: "a session that never reports its end",
        from: "    /\\ WF_vars(ReportEnded)\n",
        to: "",
        violates: "Temporal properties were violated.",
    },
];

#[test]
fn session_terminal_ties_fail_when_the_join_is_broken() -> Result<(), Box<dyn std::error::Error>> {
    let root = workspace_root();
    let model = std::fs::read_to_string(root.join(SESSION_TERMINAL.tla))?;
    let session_release = std::fs::read_to_string(root.join("protocol/SessionRelease.tla"))?;
    for broken in BROKEN_JOINS {
        assert_eq!(
            model.matches(broken.from).count(),
            1,
            "{}: the text to replace is not in SessionTerminal.tla exactly once",
            broken.what
        );
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("SessionTerminal.tla"),
            model.replace(broken.from, broken.to),
        )?;
        std::fs::write(dir.path().join("SessionRelease.tla"), &session_release)?;
        let tlc = run_tlc_with(
            &dir.path().join("SessionTerminal.tla"),
            Some(&root.join(SESSION_TERMINAL.cfg_file)),
        )?;
        assert_eq!(
            tlc.violations.first().map(String::as_str),
            Some(broken.violates),
            "{}: TLC reported {:?}",
            broken.what,
            tlc.violations
        );
    }
    Ok(())
}
