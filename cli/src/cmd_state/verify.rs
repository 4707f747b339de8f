//! `lazaret state verify PROFILE`: structural verification of a Domain's
//! State Anchors (spec 3.9, FR-11). It needs an inactive Domain and holds
//! its lifecycle lock throughout (`exclusive`), so the result is not
//! invalidated by concurrent writes; it changes nothing
//! (`state_anchor::verify` says what is checked).
//!
//! Exit status: 0 sound, 5 findings, 3 the Domain is running, 1 another
//! refusal or an error, 2 bad usage.
use super::exclusive::{hold_inactive, NotInactive};
use super::{DomainSelection, StateError};
use crate::report::errln;
use clap::Args;
use lazaret_effects::confined::{ConfinedSys, RealSys};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_effects::state_anchor::verify::{verify_anchors, Verification};
use lazaret_runtime::config::HostEnvironment;
use lazaret_runtime::display::escape_line;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// The exit status of a verification that found problems.
const FINDINGS: u8 = 5;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 sound; 5 findings (listed); 3 the Domain is running; 1 a \
                  refusal or an error; 2 bad usage."
)]
pub struct VerifyCommand {
    #[command(flatten)]
    domain: DomainSelection,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyRefusal {
    #[error(transparent)]
    Locate(#[from] StateError),
    #[error(
        "there is no Domain Store at {0}: the Domain never ran, so there is nothing to verify"
    )]
    Absent(PathBuf),
    #[error(transparent)]
    NotInactive(#[from] NotInactive),
    #[error("cannot read the mount table /proc/self/mountinfo: {0}")]
    Mounts(#[source] std::io::Error),
}

pub fn run(command: VerifyCommand) -> ExitCode {
    match verify(&command, &RealSys, &ProcessEnvironment, &RealProcessSys) {
        Ok((text, sound)) => super::emit(
            "lazaret state verify",
            &text,
            command.json,
            if sound {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(FINDINGS)
            },
        ),
        Err(e) => {
            errln!("lazaret state verify: {e}");
            ExitCode::from(match &e {
                VerifyRefusal::NotInactive(n) => n.exit_code(),
                _ => 1,
            })
        }
    }
}

fn verify<P: ProcessSys>(
    command: &VerifyCommand,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
    procs: &P,
) -> Result<(String, bool), VerifyRefusal> {
    let (target, location) = command.domain.locate(sys, env)?;
    let location = &location;
    if !std::fs::symlink_metadata(&target.store).is_ok_and(|m| m.is_file()) {
        return Err(VerifyRefusal::Absent(target.store.clone()));
    }
    let relaunch = command.domain.relaunch(location);
    let lock = hold_inactive(&target, location, &relaunch, procs)?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(VerifyRefusal::Mounts)?;
    let uid = rustix::process::getuid().as_raw();
    let v = verify_anchors(&location.storage_root, &target.domain_root, uid, &mountinfo);
    drop(lock);
    let sound = v.findings.is_empty();
    let text = if command.json {
        render_json(location.domain_id.to_string(), &v)
    } else {
        render_text(location.domain_id.to_string(), &v)
    };
    Ok((text, sound))
}

fn render_json(domain_id: String, v: &Verification) -> String {
    let value = json!({
        "domain_id": domain_id,
        "sound": v.findings.is_empty(),
        "anchors": v.anchors,
        "entries": v.entries,
        "findings": v.findings.iter().map(ToString::to_string).collect::<Vec<_>>(),
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

fn render_text(domain_id: String, v: &Verification) -> String {
    let mut text = format!(
        "Domain {domain_id}: {} State Anchor{} ({}), {} entries looked at\n",
        v.anchors.len(),
        if v.anchors.len() == 1 { "" } else { "s" },
        escape_line(&v.anchors.join(", ")),
        v.entries
    );
    if v.findings.is_empty() {
        text.push_str("sound: nothing found\n");
    } else {
        text.push_str(&format!("{} finding(s):\n", v.findings.len()));
        for f in &v.findings {
            text.push_str(&format!("  {}\n", escape_line(&f.to_string())));
        }
    }
    text
}
