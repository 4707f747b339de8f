//! `lazaret state reset PROFILE (PATH | --all) [--yes]`: discard what the
//! agent changed under one persistent path, or under all of them, so the
//! next launch follows the current image there (spec 3.9, FR-11, OR-5,
//! SR-14, DX-6).
//!
//! The Domain is located exactly as a launch locates it; only a configured
//! persistent path (or one whose anchor is still on disk from an earlier
//! configuration) can be named, never a host path. The resolved Domain and
//! the exact scope are shown first and, without `--yes`, confirmed on a
//! terminal. Then the Domain is held inactive (`exclusive`: its lock, every
//! generation released, no catalog lease), so nothing can be using the
//! state; `--yes` never skips these checks. The reset itself is `state_anchor::reset`: one rename decides
//! it, and a removal worker in the Domain's user namespace frees the space.
//!
//! Exit status: 0 reset (or nothing to reset), 3 the Domain is running,
//! 1 any other refusal or error, 2 bad usage.
use super::exclusive::{hold_inactive, NotInactive};
use super::{known_anchor, DomainSelection, StateError, Target};
use crate::report::{errln, prompt};
use clap::Args;
use lazaret_effects::config_resolve::DomainLocation;
use lazaret_effects::confined::{ConfinedSys, RealSys};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_effects::state_anchor::reset::{
    discard_anchor_state, run_removal_worker, ResetError, ResetScope,
};
use lazaret_effects::state_anchor::usage::{anchors_usage, AnchorUsage, UsageError};
use lazaret_effects::state_anchor::{anchor_name, uppers_dir};
use lazaret_runtime::config::HostEnvironment;
use lazaret_runtime::display::escape_line;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 reset (or nothing to reset); 3 the Domain is running; 1 a \
                  refusal or an error (nothing was reset); 2 bad usage."
)]
pub struct ResetCommand {
    #[command(flatten)]
    domain: DomainSelection,
    /// The persistent path whose State Anchor to reset (for example /usr).
    #[arg(value_name = "PATH", required_unless_present = "all")]
    path: Option<String>,
    /// Reset every State Anchor of the Domain.
    #[arg(long, conflicts_with = "path")]
    all: bool,
    /// Do not ask; the safety checks still apply.
    #[arg(long)]
    yes: bool,
    /// Print the result as JSON (the question, if asked, goes to stderr).
    #[arg(long)]
    json: bool,
}

/// Why a reset did not happen; one variant per refusal.
#[derive(Debug, thiserror::Error)]
pub enum ResetRefusal {
    #[error(transparent)]
    Locate(#[from] StateError),
    #[error("{path} is not a persistent path of profile {profile:?} (its persistent paths: {configured}) and no State Anchor of it is on disk; name one of them or --all")]
    NotPersistent {
        path: String,
        profile: String,
        configured: String,
    },
    #[error("stdin is not a terminal, so the reset cannot be confirmed: pass --yes to reset without the question")]
    NotConfirmable,
    #[error("reading the answer: {0}")]
    Answer(#[source] std::io::Error),
    #[error("not confirmed: nothing was reset")]
    Declined,
    #[error(transparent)]
    NotInactive(#[from] NotInactive),
    #[error(transparent)]
    Reset(#[from] ResetError),
    #[error("the State Anchors cannot be listed for the preview: {0}")]
    Usage(#[from] UsageError),
    #[error("cannot find the lazaret executable for the removal worker: {0}")]
    Executable(#[source] std::io::Error),
}

impl ResetRefusal {
    fn exit_code(&self) -> u8 {
        match self {
            Self::NotInactive(e) => e.exit_code(),
            _ => 1,
        }
    }
}

pub fn run(command: ResetCommand) -> ExitCode {
    match reset(&command, &RealSys, &ProcessEnvironment, &RealProcessSys) {
        Ok(text) => super::emit(
            "lazaret state reset",
            &text,
            command.json,
            ExitCode::SUCCESS,
        ),
        Err(e) => {
            errln!("lazaret state reset: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The selected anchors: the scope and the persistent paths it covers.
fn scope_of(
    command: &ResetCommand,
    persistent: &[String],
    on_disk: &[AnchorUsage],
) -> Result<(ResetScope, Vec<String>), ResetRefusal> {
    let Some(path) = &command.path else {
        let mut paths: Vec<String> = persistent.to_vec();
        for a in on_disk {
            if !paths.contains(&a.path) {
                paths.push(a.path.clone());
            }
        }
        return Ok((ResetScope::All, paths));
    };
    // Spec 3.9: a configured persistent path, never a host path; an anchor
    // an earlier configuration left on disk may be named too.
    if known_anchor(path, persistent, on_disk) {
        return Ok((ResetScope::Anchor(anchor_name(path)), vec![path.clone()]));
    }
    Err(ResetRefusal::NotPersistent {
        path: path.clone(),
        profile: command.domain.profile.clone(),
        configured: if persistent.is_empty() {
            "none".to_owned()
        } else {
            persistent.join(", ")
        },
    })
}

/// DX-6: the resolved Domain and the exact scope, before anything happens.
fn preview(
    target: &Target,
    location: &DomainLocation,
    paths: &[String],
    on_disk: &[AnchorUsage],
) -> String {
    let mut text = super::domain_header(location);
    text.push_str(&format!(
        "State Anchors in {}:\n",
        escape_line(&target.domain_root.display().to_string())
    ));
    for path in paths {
        let held = match on_disk.iter().find(|a| &a.path == path) {
            Some(a) if a.unreadable > 0 && !a.complete && a.files == 0 => {
                "not readable by you (another sandbox user's private directory); it is discarded whole".to_owned()
            }
            Some(a) => format!(
                "{} files, {} directories, {} deleted image paths, {} bytes",
                a.files, a.directories, a.deleted, a.bytes
            ),
            None => "nothing changed".to_owned(),
        };
        text.push_str(&format!(
            "  {}: discard what the agent changed ({held})\n",
            escape_line(path)
        ));
    }
    text.push_str("The image, the workspace and every other persistent path stay as they are.\n");
    text
}

fn confirm(command: &ResetCommand) -> Result<(), ResetRefusal> {
    if command.yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(ResetRefusal::NotConfirmable);
    }
    let answer = prompt("Reset? [y/N] ").map_err(ResetRefusal::Answer)?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err(ResetRefusal::Declined),
    }
}

/// A name unique to this reset inside the discard directory.
fn reset_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{}", std::process::id())
}

fn reset<P: ProcessSys>(
    command: &ResetCommand,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
    procs: &P,
) -> Result<String, ResetRefusal> {
    let (target, location) = command.domain.locate(sys, env)?;
    let location = &location;
    let persistent = location.persistent_dirs.clone();
    // The preview must name every anchor --all discards (DX-6).
    let on_disk = anchors_usage(&uppers_dir(&target.domain_root))?;
    let (scope, paths) = scope_of(command, &persistent, &on_disk)?;
    let shown = preview(&target, location, &paths, &on_disk);
    if command.json {
        crate::report::eprint_text(&shown);
    } else {
        crate::report::print_text(&shown).map_err(ResetRefusal::Answer)?;
    }
    confirm(command)?;
    let relaunch = command.domain.relaunch(location);
    let (discarded, reclaimed) = if std::fs::symlink_metadata(&target.store)
        .is_ok_and(|m| m.is_file())
    {
        let lock = hold_inactive(&target, location, &relaunch, procs)?;
        let discarded = discard_anchor_state(&target.domain_root, &scope, &reset_tag())?;
        // The rename decided the reset: a removal that fails now only
        // leaves space to reclaim, which the next reset does first.
        let removed = std::env::current_exe()
            .map_err(ResetRefusal::Executable)
            .and_then(|program| {
                run_removal_worker(&program, &target.domain_root).map_err(ResetRefusal::from)
            });
        drop(lock);
        if let Err(e) = &removed {
            errln!("lazaret state reset: warning: the reset is done, but its space was not reclaimed ({e}); the next `lazaret state reset` reclaims it");
        }
        (discarded, removed.is_ok())
    } else {
        // No Domain Store: the Domain never ran, so there is no anchor.
        (Vec::new(), true)
    };
    let done = if discarded.is_empty() {
        "Nothing to reset: the selected State Anchors hold nothing.\n".to_owned()
    } else {
        format!(
            "Reset {}; the next launch starts {} from the image.\n",
            paths.join(", "),
            if paths.len() == 1 { "it" } else { "them" }
        )
    };
    if command.json {
        let value = serde_json::json!({
            "domain_id": location.domain_id.to_string(),
            "domain_root": target.domain_root.display().to_string(),
            "scope": match &scope {
                ResetScope::All => "all".to_owned(),
                ResetScope::Anchor(_) => paths.join(""),
            },
            "paths": paths,
            "reset": !discarded.is_empty(),
            "reclaimed": reclaimed,
        });
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        return Ok(text);
    }
    Ok(done)
}
