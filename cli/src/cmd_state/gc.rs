//! `lazaret state gc [--dry-run] [--config FILE] [--json]`: reclaims the
//! prepared lowers no Domain holds (spec 3.9, OR-7, schemas.md "Storage
//! Catalog").
//!
//! The policy: a prepared artifact is reclaimed once no lease names it —
//! no generation of any Domain runs on it. A Domain that is not running
//! holds none, so its next launch prepares the image again; its
//! persistent state (the State Anchors' uppers) is not touched. An
//! artifact shared by several Domains waits for the last lease.
//!
//! Each artifact goes through the model's steps: `BeginReclaim` (under the
//! catalog lock, Available -> Reclaiming only with no lease; from then on
//! no lease can be inserted for it), the removal of its exact tree (the
//! recorded device and inode, by the removal worker in the developer's
//! user namespace), `RemoveArtifact`. An interrupted reclamation is
//! resumed by the next `gc`. A directory that is not the recorded one is
//! never removed: the row stays Reclaiming and the directory is reported.
//!
//! Prepare operations whose process is gone are recovered first
//! (`prepare::recover`); running ones are left alone; ones that left a
//! tree Lazaret cannot prove it created are reported, not deleted.
//!
//! Exit status: 0 done (or nothing to do); 1 an error; 2 bad usage.
use super::list::{storage_root, ListError};
use crate::report::errln;
use clap::Args;
use lazaret_effects::prepare::{recover, PrepareError, PreparedDir, RealPrepareHost, Recovery};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::storage_catalog::{CatalogError, Reclaim, StorageCatalog};
use lazaret_effects::userns::{plan_maps, Identity, RealHost, UsernsError};
use lazaret_runtime::catalog_model::Step;
use lazaret_runtime::config::HostEnvironment;
use lazaret_runtime::display::escape_line;
use lazaret_runtime::records::catalog::{ArtifactState, PreparedArtifact};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 done (or nothing to reclaim); 1 an error; 2 bad usage.")]
pub struct GcCommand {
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml); only its storage.data_root is
    /// used.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Show what would be reclaimed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error(transparent)]
    Storage(#[from] ListError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("the removal worker's user namespace: {0}")]
    Userns(#[source] UsernsError),
    #[error("cannot locate the lazaret executable for the removal worker: {0}")]
    Executable(#[source] std::io::Error),
}

/// What happened to one artifact.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Reclaimed,
    WouldReclaim,
    /// Leases name it (this many).
    InUse(usize),
    /// Left Reclaiming: the directory is not the recorded one.
    Retained(&'static str),
}

/// What happened to one prepare operation.
#[derive(Debug, PartialEq, Eq)]
enum OperationFate {
    Recovered,
    Running,
    Retained {
        stage: PathBuf,
        reason: &'static str,
    },
    /// `--dry-run`: not looked at beyond its row.
    Found,
}

struct Report {
    storage: PathBuf,
    dry_run: bool,
    artifacts: Vec<(PreparedArtifact, Fate)>,
    operations: Vec<(String, String, OperationFate)>,
    /// Operation lock files no operation named, removed.
    orphan_locks: usize,
}

pub fn run(command: GcCommand) -> ExitCode {
    match gc(&command, &ProcessEnvironment) {
        Ok(report) => {
            let text = if command.json {
                render_json(&report)
            } else {
                render_text(&report)
            };
            super::emit("lazaret state gc", &text, command.json, ExitCode::SUCCESS)
        }
        Err(e) => {
            errln!("lazaret state gc: {e}");
            ExitCode::FAILURE
        }
    }
}

fn gc(command: &GcCommand, env: &dyn HostEnvironment) -> Result<Report, GcError> {
    let storage = storage_root(command.config.as_deref(), env)?;
    let mut report = Report {
        storage: storage.clone(),
        dry_run: command.dry_run,
        artifacts: Vec::new(),
        operations: Vec::new(),
        orphan_locks: 0,
    };
    let catalog = StorageCatalog::at(&storage);
    let Some(dir) = PreparedDir::open_existing(&storage)? else {
        return Ok(report);
    };
    let mut host = if command.dry_run {
        None
    } else {
        let me = Identity::current(&mut RealHost).map_err(GcError::Userns)?;
        let maps = plan_maps(&mut RealHost, &me).map_err(GcError::Userns)?;
        let program = std::env::current_exe().map_err(GcError::Executable)?;
        Some(RealPrepareHost::new(maps, program))
    };
    let operations = catalog.prepare_operations()?;
    if !command.dry_run {
        let recorded: Vec<_> = operations.iter().map(|op| op.operation_id).collect();
        report.orphan_locks = dir.remove_orphan_locks(&recorded)?;
    }
    for op in operations {
        let fate = match host.as_mut() {
            None => OperationFate::Found,
            Some(host) => match recover(host, &catalog, &dir, op.operation_id)? {
                Recovery::Recovered => OperationFate::Recovered,
                Recovery::Live => OperationFate::Running,
                Recovery::Retained { stage, reason } => OperationFate::Retained { stage, reason },
            },
        };
        report.operations.push((
            op.operation_id.to_string(),
            op.expected_artifact_id.to_string(),
            fate,
        ));
    }
    let leases = catalog.leases()?;
    for row in catalog.artifacts()? {
        let leased = leases
            .iter()
            .filter(|l| l.artifact == row.prepared_artifact_id)
            .count();
        let fate = match host.as_mut() {
            _ if leased > 0 && row.state == ArtifactState::Available => Fate::InUse(leased),
            None => Fate::WouldReclaim,
            Some(host) => reclaim(host, &catalog, &dir, &row)?,
        };
        report.artifacts.push((row, fate));
    }
    Ok(report)
}

/// `BeginReclaim`, then `RemoveArtifact`: the exact tree's removal and
/// the row's, one run of the PreparedLower model.
fn reclaim(
    host: &mut RealPrepareHost,
    catalog: &StorageCatalog,
    dir: &PreparedDir,
    row: &PreparedArtifact,
) -> Result<Fate, GcError> {
    let mut run = catalog.run(row.prepared_artifact_id);
    let row = match catalog.begin_reclaim(&mut run)? {
        Reclaim::Started(row) | Reclaim::Resumed(row) => row,
        Reclaim::Leased { leases } => return Ok(Fate::InUse(leases)),
        Reclaim::Absent => return Ok(Fate::Reclaimed),
    };
    // The model's RemoveArtifact removes the tree and then the row: it is
    // checked before the tree goes.
    run.check(Step::RemoveArtifact)?;
    // Its name beneath the opened `prepared/` and the recorded device and
    // inode identify the tree; the recorded path is only a lookup hint.
    let name = row.prepared_artifact_id.to_string();
    dir.remove_exact(host, &name, (row.device, row.inode), None)?;
    if dir.identity_of(&name)?.is_some() {
        return Ok(Fate::Retained(
            "its directory is not the one the catalog recorded",
        ));
    }
    catalog.remove_artifact(&mut run)?;
    Ok(Fate::Reclaimed)
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn render_text(report: &Report) -> String {
    let mut out = format!(
        "Storage Root {}\n",
        escape_line(&report.storage.display().to_string())
    );
    if report.artifacts.is_empty() && report.operations.is_empty() {
        out.push_str("No prepared artifact is recorded: nothing to reclaim.\n");
        return out;
    }
    for (row, fate) in &report.artifacts {
        let id = row.prepared_artifact_id.to_string();
        let what = match fate {
            Fate::Reclaimed => "reclaimed".to_owned(),
            Fate::WouldReclaim => "would be reclaimed (no Domain uses it)".to_owned(),
            Fate::InUse(n) => format!("kept: in use by {n} running generation(s)"),
            Fate::Retained(why) => format!(
                "left being reclaimed: {why}; check {} and remove it, then run gc again",
                escape_line(&row.path.to_string())
            ),
        };
        out.push_str(&format!(
            "  artifact {}  {}  {what}\n",
            short(&id),
            escape_line(row.selected_manifest_digest.as_str())
        ));
    }
    for (id, artifact, fate) in &report.operations {
        let what = match fate {
            OperationFate::Recovered => "abandoned: its stage was removed".to_owned(),
            OperationFate::Running => "still preparing: left alone".to_owned(),
            OperationFate::Found => "recorded (gc recovers it if its process is gone)".to_owned(),
            OperationFate::Retained { stage, reason } => format!(
                "retained ({reason}): check {} and remove it, then run gc again",
                escape_line(&stage.display().to_string())
            ),
        };
        out.push_str(&format!(
            "  preparation {} of artifact {}  {what}\n",
            short(id),
            short(artifact)
        ));
    }
    let reclaimed = report
        .artifacts
        .iter()
        .filter(|(_, f)| *f == Fate::Reclaimed)
        .count();
    if report.orphan_locks > 0 {
        out.push_str(&format!(
            "Removed {} operation lock file(s) no preparation named.\n",
            report.orphan_locks
        ));
    }
    if report.dry_run {
        out.push_str("Dry run: nothing was changed.\n");
    } else {
        out.push_str(&format!(
            "Reclaimed {reclaimed} prepared artifact(s); a Domain whose image was reclaimed prepares it again at its next launch, keeping its persistent state.\n"
        ));
    }
    out
}

fn render_json(report: &Report) -> String {
    let artifacts: Vec<_> = report
        .artifacts
        .iter()
        .map(|(row, fate)| {
            let (action, leases, detail) = match fate {
                Fate::Reclaimed => ("reclaimed", 0, None),
                Fate::WouldReclaim => ("would-reclaim", 0, None),
                Fate::InUse(n) => ("in-use", *n, None),
                Fate::Retained(why) => ("retained", 0, Some(*why)),
            };
            json!({
                "artifact_id": row.prepared_artifact_id.to_string(),
                "manifest_digest": row.selected_manifest_digest.as_str(),
                "path": row.path.to_string(),
                "action": action,
                "leases": leases,
                "detail": detail,
            })
        })
        .collect();
    let operations: Vec<_> = report
        .operations
        .iter()
        .map(|(id, artifact, fate)| {
            let (action, stage, detail) = match fate {
                OperationFate::Recovered => ("recovered", None, None),
                OperationFate::Running => ("running", None, None),
                OperationFate::Found => ("found", None, None),
                OperationFate::Retained { stage, reason } => {
                    ("retained", Some(stage.display().to_string()), Some(*reason))
                }
            };
            json!({
                "operation_id": id,
                "artifact_id": artifact,
                "action": action,
                "stage": stage,
                "detail": detail,
            })
        })
        .collect();
    let mut text = json!({
        "storage_root": report.storage.display().to_string(),
        "dry_run": report.dry_run,
        "artifacts": artifacts,
        "operations": operations,
        "orphan_locks_removed": report.orphan_locks,
    })
    .to_string();
    text.push('\n');
    text
}
