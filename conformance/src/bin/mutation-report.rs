//! Writes `docs/mutation-report.md`: every guard conjunct of every model
//! dropped in turn, re-checked with stateright.
//!
//! `cargo run --release -p lazaret-conformance --bin mutation-report [-- --stdout]`

use std::process::ExitCode;

use lazaret_conformance::explore::ExploreError;
use lazaret_conformance::mutation::{mutate, render, ModelMutations};
use lazaret_conformance::workspace_root;
use lazaret_generated::support::Protocol;
use lazaret_generated::{visit_model, ModelEntry, ModelVisitor, MODELS};

/// Mutant state spaces are explored up to this many times the original's.
const CAP_FACTOR: usize = 4;

struct Mutate;

impl ModelVisitor for Mutate {
    type Output = Result<ModelMutations, ExploreError>;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        mutate::<P>(entry, CAP_FACTOR)
    }
}

fn main() -> ExitCode {
    let to_stdout = std::env::args().any(|a| a == "--stdout");
    let mut all = Vec::new();
    // The protocol models; the dialect fixtures' mutants are exercised by tests.
    for entry in MODELS.iter().filter(|m| m.tla.starts_with("protocol/")) {
        match visit_model(entry.name, Mutate) {
            Some(Ok(m)) => {
                eprintln!(
                    "{}: {} of {} mutants killed",
                    m.model,
                    m.killed(),
                    m.results.len()
                );
                all.push(m);
            }
            Some(Err(e)) => {
                eprintln!("mutation-report: {e}");
                return ExitCode::FAILURE;
            }
            None => {
                eprintln!("mutation-report: model {} is not generated", entry.name);
                return ExitCode::FAILURE;
            }
        }
    }
    let report = render(&all);
    if to_stdout {
        print!("{report}");
        return ExitCode::SUCCESS;
    }
    let path = workspace_root().join("docs").join("mutation-report.md");
    if let Some(dir) = path.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("mutation-report: creating {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    match std::fs::write(&path, report) {
        Ok(()) => {
            eprintln!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mutation-report: writing {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
