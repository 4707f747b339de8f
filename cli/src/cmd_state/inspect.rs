//! `lazaret state inspect PROFILE [PATH]`: per persistent path, what the
//! agent added, changed, deleted or replaced, with kinds and sizes and
//! never contents (spec 3.9, FR-11, DX-6).
//!
//! The upper is compared with the prepared lower it was last mounted over,
//! which the Host Coordinator records beside the uppers when it mounts them
//! (`state_anchor::LOWER_RECORD`); a released generation's records keep no
//! path, and a running Domain's store is its coordinator's alone (FR-17).
//! Without a recorded lower that still exists, entries are `written` (added
//! or changed). Only reads; works whether or not the Domain runs.
use super::{known_anchor, DomainSelection, StateError};
use crate::report::errln;
use clap::Args;
use lazaret_effects::config_resolve::DomainLocation;
use lazaret_effects::confined::{ConfinedSys, RealSys};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::state_anchor::changes::{
    anchor_changes, open_lower, AnchorChanges, ChangesError, MAX_LISTED,
};
use lazaret_effects::state_anchor::usage::{anchors_usage, UsageError};
use lazaret_effects::state_anchor::{anchor_name, recorded_lower, uppers_dir};
use lazaret_runtime::config::HostEnvironment;
use lazaret_runtime::display::escape_line;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 shown; 1 an error; 2 bad usage.")]
pub struct InspectCommand {
    #[command(flatten)]
    domain: DomainSelection,
    /// Only the State Anchor of this persistent path (for example /usr).
    #[arg(value_name = "PATH")]
    path: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Locate(#[from] StateError),
    #[error("{path} is not a persistent path of profile {profile:?} and no State Anchor of it is on disk")]
    NotPersistent { path: String, profile: String },
    #[error("the State Anchors: {0}")]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Changes(#[from] ChangesError),
}

pub fn run(command: InspectCommand) -> ExitCode {
    match inspect(&command, &RealSys, &ProcessEnvironment) {
        Ok(text) => super::emit(
            "lazaret state inspect",
            &text,
            command.json,
            ExitCode::SUCCESS,
        ),
        Err(e) => {
            errln!("lazaret state inspect: {e}");
            ExitCode::FAILURE
        }
    }
}

fn inspect(
    command: &InspectCommand,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
) -> Result<String, InspectError> {
    let (target, location) = command.domain.locate(sys, env)?;
    let location = &location;
    let uppers = uppers_dir(&target.domain_root);
    let on_disk = anchors_usage(&uppers)?;
    let paths: Vec<String> = match &command.path {
        Some(path) => {
            if !known_anchor(path, &location.persistent_dirs, &on_disk) {
                return Err(InspectError::NotPersistent {
                    path: path.clone(),
                    profile: command.domain.profile.clone(),
                });
            }
            vec![path.clone()]
        }
        None => {
            let mut all = location.persistent_dirs.clone();
            all.extend(
                on_disk
                    .iter()
                    .map(|a| a.path.clone())
                    .filter(|p| !location.persistent_dirs.contains(p)),
            );
            all
        }
    };
    let lower = recorded_lower(&location.storage_root, &target.domain_root);
    let mut anchors = Vec::with_capacity(paths.len());
    for path in paths {
        let upper = uppers.join(anchor_name(&path));
        let changes = if upper.is_dir() {
            let lower_fd = lower.as_ref().and_then(|r| open_lower(r, &path));
            match anchor_changes(&path, &upper, lower_fd) {
                // Another sandbox user's private directory at the root.
                Err(ChangesError::OpenUpper { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    AnchorChanges {
                        unread: vec![path.clone()],
                        complete: false,
                        ..AnchorChanges::default()
                    }
                }
                other => other?,
            }
        } else {
            AnchorChanges {
                complete: true,
                ..AnchorChanges::default()
            }
        };
        anchors.push((path, changes));
    }
    Ok(if command.json {
        render_json(location, lower.as_ref(), &anchors)
    } else {
        render_text(location, lower.as_ref(), &anchors)
    })
}

fn render_json(
    location: &DomainLocation,
    lower: Option<&PathBuf>,
    anchors: &[(String, AnchorChanges)],
) -> String {
    let items: Vec<serde_json::Value> = anchors
        .iter()
        .map(|(path, c)| {
            json!({
                "path": path,
                "complete": c.complete,
                "unread": c.unread,
                "changes": c.entries.iter().map(|e| json!({
                    "path": e.path,
                    "change": e.change.as_str(),
                    "kind": e.kind.as_str(),
                    "bytes": e.bytes,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let value = json!({
        "domain_id": location.domain_id.to_string(),
        "profile": location.profile,
        "workspace": location.workspace.display().to_string(),
        "lower": lower.map(|p| p.display().to_string()),
        "anchors": items,
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

fn render_text(
    location: &DomainLocation,
    lower: Option<&PathBuf>,
    anchors: &[(String, AnchorChanges)],
) -> String {
    let mut text = super::domain_header(location);
    match lower {
        Some(path) => text.push_str(&format!(
            "Compared with the prepared lower {}\n",
            escape_line(&path.display().to_string())
        )),
        None => text.push_str(
            "No prepared lower is recorded: added and changed paths are shown as written\n",
        ),
    }
    for (path, c) in anchors {
        text.push_str(&format!("\n{}: ", escape_line(path)));
        if c.entries.is_empty() && c.unread.is_empty() {
            text.push_str("as in the image\n");
            continue;
        }
        let count = |change: &str| {
            c.entries
                .iter()
                .filter(|e| e.change.as_str() == change)
                .count()
        };
        let summary: Vec<String> = ["added", "changed", "deleted", "replaced", "written"]
            .iter()
            .filter(|w| count(w) > 0)
            .map(|w| format!("{} {w}", count(w)))
            .collect();
        text.push_str(&summary.join(", "));
        text.push('\n');
        for e in &c.entries {
            let what = match e.kind.as_str() {
                "directory" => "/",
                "symlink" => " (symlink)",
                _ => "",
            };
            text.push_str(&format!(
                "  {:<9}{:>12}  {}{what}\n",
                e.change.as_str(),
                if e.bytes > 0 {
                    e.bytes.to_string()
                } else {
                    String::new()
                },
                escape_line(&e.path)
            ));
        }
        for u in &c.unread {
            text.push_str(&format!(
                "  unread   {:>12}  {}/ (another sandbox user's private directory)\n",
                "",
                escape_line(u)
            ));
        }
        if !c.complete {
            text.push_str(&format!(
                "  (stopped after {MAX_LISTED} entries or at the depth limit)\n"
            ));
        }
    }
    text
}
