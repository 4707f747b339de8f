//! Writes `docs/mutation-report.md`: every guard conjunct of every model
//! dropped in turn, re-checked with stateright (invariants and action
//! properties) in the model's own configuration and, when that does not
//! kill it, in the model's further configurations, each mutant that is not killed paired with its reason from
//! `protocol/<Model>-notes.md`. Fails when a mutant that is not killed has no
//! reason, or a reason is given for a killed mutant (the report is written
//! either way).
//!
//! `cargo run --release -p lazaret-conformance --bin mutation-report [-- --stdout]`

use std::process::ExitCode;
use std::time::Instant;

use lazaret_conformance::explore::ExploreError;
use lazaret_conformance::mutation::{
    audit, mutate, render, JustificationError, Justifications, ModelMutations,
};
use lazaret_conformance::workspace_root;
use lazaret_generated::support::Protocol;
use lazaret_generated::{visit_model, ModelEntry, ModelVisitor, FURTHER_CONFIGURATIONS, MODELS};

/// Mutant state spaces are explored up to this many times the original's.
const CAP_FACTOR: usize = 4;

struct Mutate;

#[derive(Debug, thiserror::Error)]
enum ReportError {
    #[error(transparent)]
    Explore(#[from] ExploreError),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Justification(#[from] JustificationError),
}

impl ModelVisitor for Mutate {
    type Output = Result<(ModelMutations, Justifications), ReportError>;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        let notes = entry.tla.replace(".tla", "-notes.md");
        let path = workspace_root().join(&notes);
        let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let j = Justifications::parse(&notes, &text, P::guards())?;
        let further: Vec<&ModelEntry> = FURTHER_CONFIGURATIONS
            .iter()
            .filter(|f| f.tla == entry.tla)
            .collect();
        Ok((mutate::<P>(entry, &further, CAP_FACTOR)?, j))
    }
}

fn main() -> ExitCode {
    let to_stdout = std::env::args().any(|a| a == "--stdout");
    let started = Instant::now();
    let mut all = Vec::new();
    // The protocol models; the dialect fixtures' mutants are exercised by tests.
    for entry in MODELS.iter().filter(|m| m.tla.starts_with("protocol/")) {
        match visit_model(entry.name, Mutate) {
            Some(Ok((m, j))) => {
                eprintln!(
                    "{}: {} of {} mutants killed, {} equivalent ({:.0?} so far)",
                    m.model,
                    m.killed(),
                    m.results.len(),
                    m.equivalent(),
                    started.elapsed()
                );
                all.push((m, j));
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
    let a = audit(&all);
    for (model, action, text) in &a.unjustified {
        eprintln!("mutation-report: {model} {action}: `{text}` is not killed and has no reason in the notes");
    }
    for (model, action, text) in &a.stale {
        eprintln!("mutation-report: {model} {action}: `{text}` is killed; remove its reason from the notes");
    }
    let audited = if a.unjustified.is_empty() && a.stale.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    if to_stdout {
        print!("{report}");
        return audited;
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
            eprintln!("wrote {} in {:.1?}", path.display(), started.elapsed());
            audited
        }
        Err(e) => {
            eprintln!("mutation-report: writing {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
