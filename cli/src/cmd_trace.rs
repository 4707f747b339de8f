//! `lazaret trace replay FILE`: check a trace against its model.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::report::{self, errln, outln};
use lazaret_runtime::replay::{replay_text, Divergence, Outcome, Reason};

/// `lazaret trace ...`
#[derive(Debug, clap::Subcommand)]
pub enum TraceCmd {
    /// Replay a trace: every step must be enabled and every invariant hold.
    /// Exit 0 when it conforms, 1 at a divergence, 2 on unreadable input.
    Replay {
        /// A `lazaret-trace-v1` JSON-lines file.
        file: PathBuf,
    },
}

pub fn run(cmd: TraceCmd) -> ExitCode {
    match cmd {
        TraceCmd::Replay { file } => replay(&file),
    }
}

fn replay(file: &std::path::Path) -> ExitCode {
    let name = file.display().to_string();
    let text = match std::fs::read(file) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                errln!("lazaret: {name}: not UTF-8 text: {e}");
                return ExitCode::from(2);
            }
        },
        Err(e) => {
            errln!("lazaret: reading {name}: {e}");
            return ExitCode::from(2);
        }
    };
    match replay_text(&name, &text) {
        Ok(Outcome::Conforms {
            model,
            steps,
            recorded_start,
        }) => {
            if recorded_start {
                outln!(
                    "{steps} steps conform to {model} from the start state the trace records (it satisfies every invariant; it is not replayed from Init)"
                );
            } else {
                outln!("{steps} steps conform to {model}");
            }
            ExitCode::SUCCESS
        }
        Ok(Outcome::Diverged(d)) => {
            if let Err(e) = report::print_text(&render_divergence(&d)) {
                errln!("lazaret: writing stdout: {e}");
            }
            ExitCode::from(1)
        }
        Err(e) => {
            errln!("lazaret: {e}");
            ExitCode::from(2)
        }
    }
}

/// The report of a divergence, for people.
pub fn render_divergence(d: &Divergence) -> String {
    let mut s = String::new();
    let params = d
        .params
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        s,
        "divergence at step {} (line {}): {}({params})",
        d.step, d.line, d.action
    );
    let _ = match &d.reason {
        Reason::GuardFailed { index, line, text } => writeln!(
            s,
            "  not enabled: guard {index} of {} (model line {line}) is false: {text}",
            d.action
        ),
        Reason::OutOfDomain(e) => writeln!(s, "  update out of its TypeOK range: {e}"),
        Reason::InvariantViolated(name) => writeln!(s, "  invariant {name} fails after the step"),
        Reason::StateMismatch => writeln!(s, "  the recorded state differs from the model's"),
        Reason::ObservationMismatch => writeln!(
            s,
            "  what the product observed after the step differs from the model's next state"
        ),
        Reason::ActionPropertyViolated(name) => {
            writeln!(s, "  step property {name} fails on the step")
        }
    };
    let observed = d.reason == Reason::ObservationMismatch;
    if d.diff.is_empty() {
        let _ = writeln!(s, "  model state before the step: {}", d.model_state);
    } else {
        let (title, other) = if observed {
            (
                "observation difference (model's next state vs observed):",
                "observed",
            )
        } else {
            ("state difference (model vs trace):", "trace")
        };
        let _ = writeln!(s, "  {title}");
        for v in &d.diff {
            let _ = writeln!(s, "    {}: model {} | {other} {}", v.var, v.model, v.trace);
        }
        if observed {
            let _ = writeln!(s, "  model state before the step: {}", d.model_state);
        }
    }
    s
}
