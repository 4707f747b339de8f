//! `lazaret model check` and `lazaret model simulate`.

use crate::report::{self, errln};
use std::path::PathBuf;
use std::process::ExitCode;

use lazaret_conformance::explore::{check, Checked};
use lazaret_generated::support::{Cfg, Protocol};
use lazaret_generated::{visit_model, ModelEntry, ModelVisitor, MODELS};
use lazaret_runtime::simulate::{simulate, trace_of_path, SplitMix64};
use lazaret_runtime::trace::TraceLine;

/// `lazaret model ...`
#[derive(Debug, clap::Subcommand)]
pub enum ModelCmd {
    /// Explore every reachable state (stateright, breadth-first) with the
    /// `.cfg` constants. A counterexample is printed to stdout as a trace.
    Check {
        /// One model (default: the protocol models).
        #[arg(long)]
        model: Option<String>,
    },
    /// A seeded random walk of a model, written as a trace.
    Simulate {
        #[arg(long)]
        model: String,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        steps: u64,
        /// The Domain generation recorded in each line.
        #[arg(long, default_value_t = 0)]
        generation: u64,
        /// Write here instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

pub fn run(cmd: ModelCmd) -> ExitCode {
    match cmd {
        ModelCmd::Check { model } => check_models(model.as_deref()),
        ModelCmd::Simulate {
            model,
            seed,
            steps,
            generation,
            output,
        } => match visit_model(
            &model,
            Simulate {
                seed,
                steps,
                generation,
            },
        ) {
            None => unknown_model(&model),
            Some(Err(e)) => {
                errln!("lazaret: {e}");
                ExitCode::from(2)
            }
            Some(Ok(lines)) => {
                let text: String = lines.iter().map(|l| l.to_json() + "\n").collect();
                let written = match &output {
                    Some(path) => std::fs::write(path, text)
                        .map_err(|e| format!("writing {}: {e}", path.display())),
                    None => report::print_json(&text).map_err(|e| format!("writing stdout: {e}")),
                };
                match written {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        errln!("lazaret: {e}");
                        ExitCode::from(2)
                    }
                }
            }
        },
    }
}

fn unknown_model(name: &str) -> ExitCode {
    let known = MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
    errln!("lazaret: unknown model `{name}` (known: {known})");
    ExitCode::from(2)
}

fn constants<P: Protocol>(entry: &ModelEntry) -> Result<P::Constants, String> {
    Cfg::parse(entry.cfg_file, entry.cfg_text)
        .and_then(|c| P::constants(&c))
        .map_err(|e| format!("{}: {e}", entry.cfg_file))
}

struct Simulate {
    seed: u64,
    steps: u64,
    generation: u64,
}

impl ModelVisitor for Simulate {
    type Output = Result<Vec<TraceLine>, String>;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        let cx = constants::<P>(entry)?;
        let mut rng = SplitMix64::new(self.seed);
        simulate::<P>(&cx, &mut rng, self.steps, self.generation).map_err(|e| e.to_string())
    }
}

/// The result of checking one model.
enum Checked1 {
    Holds,
    Violated,
}

struct Check;

impl ModelVisitor for Check {
    type Output = Result<Checked1, String>;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output {
        let model = Checked::<P>::from_entry(entry, None).map_err(|e| e.to_string())?;
        let cx = model.cx.clone();
        let out = check::<P>(model, None);
        errln!(
            "{}: {} states, depth {}, {:.2} s",
            entry.name,
            out.unique_states,
            out.max_depth,
            out.wall.as_secs_f64()
        );
        let Some((inv, path)) = out.violation else {
            errln!("{}: every invariant and action property holds", entry.name);
            return Ok(Checked1::Holds);
        };
        errln!(
            "{}: {inv} is violated after {} steps; counterexample trace on stdout",
            entry.name,
            path.len()
        );
        let text: String = trace_of_path::<P>(&cx, &path, None, 0)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|l| l.to_json() + "\n")
            .collect();
        if let Err(e) = report::print_json(&text) {
            errln!("lazaret: writing stdout: {e}");
        }
        Ok(Checked1::Violated)
    }
}

fn check_models(only: Option<&str>) -> ExitCode {
    if let Some(name) = only {
        if !MODELS.iter().any(|m| m.name == name) {
            return unknown_model(name);
        }
    }
    let mut violated = false;
    for entry in MODELS {
        let selected = match only {
            Some(m) => m == entry.name,
            None => entry.tla.starts_with("protocol/"),
        };
        if !selected {
            continue;
        }
        match visit_model(entry.name, Check) {
            Some(Ok(Checked1::Holds)) => {}
            Some(Ok(Checked1::Violated)) => violated = true,
            Some(Err(e)) => {
                errln!("lazaret: {}: {e}", entry.name);
                return ExitCode::from(2);
            }
            None => return unknown_model(entry.name),
        }
    }
    if violated {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
