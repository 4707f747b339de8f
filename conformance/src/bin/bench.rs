//! stateright vs TLC wall time on the same model and constants, side by side
//! in one run. Opt-in (not part of the test suite):
//!
//! `cargo run --release -p lazaret-conformance --bin bench [-- --model NAME] [--write]`
//!
//! TLC checks the `.cfg` without its temporal `PROPERTY` section (stateright
//! also checks the box-action `Live_*` properties on every step, a small
//! extra cost on its side), with `LAZARET_TLC_WORKERS` workers
//! (default 1) and stateright with one thread. `--write` appends the results
//! to `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::process::ExitCode;

use lazaret_conformance::explore::{check, Checked};
use lazaret_conformance::tlc::{run_tlc_with, safety_only};
use lazaret_conformance::workspace_root;
use lazaret_generated::support::Protocol;
use lazaret_generated::{visit_model, ModelEntry, ModelVisitor, MODELS};

struct Bench;

impl ModelVisitor for Bench {
    type Output = Result<String, String>;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        let root = workspace_root();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let cfg = dir.path().join("safety.cfg");
        std::fs::write(&cfg, safety_only(entry.cfg_text)).map_err(|e| e.to_string())?;
        let tlc = run_tlc_with(&root.join(entry.tla), Some(&cfg)).map_err(|e| e.to_string())?;
        let model = Checked::<P>::from_entry(entry, None).map_err(|e| e.to_string())?;
        let sr = check::<P>(model, None);
        if !tlc.violations.is_empty() || sr.violation.is_some() {
            return Err(format!(
                "not comparable: TLC reports {:?}; stateright reports {:?}",
                tlc.violations,
                sr.violation.map(|(name, path)| (name, path.len()))
            ));
        }
        let ratio = sr.wall.as_secs_f64() / tlc.wall.as_secs_f64().max(f64::EPSILON);
        let mut row = String::new();
        let _ = write!(
            row,
            "| {} | {} | {} | {:.2} | {} | {} | {:.2} | {:.3} |",
            entry.name,
            tlc.distinct,
            tlc.depth,
            tlc.wall.as_secs_f64(),
            sr.unique_states,
            sr.max_depth,
            sr.wall.as_secs_f64(),
            ratio
        );
        Ok(row)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1));
    let write = args.iter().any(|a| a == "--write");
    let mut table = String::from(
        "| model | TLC distinct | TLC depth | TLC s | stateright unique | stateright depth | stateright s | stateright/TLC |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for entry in MODELS {
        if only.is_some_and(|m| m != entry.name) {
            continue;
        }
        match visit_model(entry.name, Bench) {
            Some(Ok(row)) => {
                eprintln!("{row}");
                table.push_str(&row);
                table.push('\n');
            }
            Some(Err(e)) => {
                eprintln!("bench: {}: {e}", entry.name);
                return ExitCode::FAILURE;
            }
            None => {
                eprintln!("bench: no model {}", entry.name);
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{table}");
    if write {
        let path = workspace_root().join("docs").join("benchmarks.md");
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            "# Benchmarks\n\nstateright (generated Rust, one thread, release build) vs TLC (`-workers 1`, invariants only) on the same `.cfg` constants, measured side by side by `cargo run --release -p lazaret-conformance --bin bench -- --write`.\n".to_string()
        });
        let _ = write!(text, "\n## Run\n\n{table}");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("bench: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
