//! `lazaret state gc [--keep-newest N] [--older-than AGE] [--dry-run]
//! [--config FILE] [--json]`: reclaims the prepared lowers no Domain holds
//! (spec 3.9, OR-7, schemas.md "Storage Catalog").
//!
//! Only an artifact no lease names is reclaimed — no generation of any
//! Domain runs on it. A Domain that is not running holds none, so its next
//! launch prepares the image again; its persistent state (the State
//! Anchors' uppers) is not touched. An artifact shared by several Domains
//! waits for the last lease. The keep policy (`runtime::gc_policy`) then
//! keeps the `--keep-newest` most recently used unleased artifacts and
//! every one used within `--older-than`; an artifact's last use is the
//! latest of its preparation and the last launch of any Domain whose State
//! Anchors were last mounted over it (the anchors' `lower` record).
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
//! One artifact whose reclamation fails is reported and the others go on.
//! One `gc` runs at a time (`catalog/gc.lock`; a second waits up to 10 s,
//! then fails).
//!
//! Exit status: 0 done (or nothing to do); 1 an error, or an artifact or
//! preparation whose reclamation or recovery failed (`failed`); 2 bad
//! usage.
use super::list::{storage_root, ListError};
use crate::report::errln;
use clap::Args;
use lazaret_effects::prepare::{recover, PrepareError, PreparedDir, RealPrepareHost, Recovery};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::state_anchor::LOWER_RECORD;
use lazaret_effects::storage_catalog::{CatalogError, Reclaim, StorageCatalog};
use lazaret_effects::userns::{plan_maps, Identity, RealHost, UsernsError};
use lazaret_runtime::catalog_model::Step;
use lazaret_runtime::config::HostEnvironment;
use lazaret_runtime::display::escape_line;
use lazaret_runtime::gc_policy::{self, Policy, Verdict};
use lazaret_runtime::records::catalog::{ArtifactState, PreparedArtifact};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The most Domain directories read for last uses.
const MAX_DOMAINS: usize = 4096;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 done (or nothing to reclaim); 1 an error, or an artifact or preparation that failed; 2 bad usage."
)]
pub struct GcCommand {
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml); only its storage.data_root is
    /// used.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Show what would be reclaimed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keep this many of the most recently used unleased artifacts.
    #[arg(long, value_name = "N", default_value_t = 0)]
    keep_newest: usize,
    /// Keep every unleased artifact used within this age (30m, 12h, 14d,
    /// 2w).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Option<u64>,
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

fn parse_age(text: &str) -> Result<u64, gc_policy::AgeError> {
    gc_policy::parse_age(text)
}

/// What happened to one artifact.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Reclaimed,
    WouldReclaim,
    /// Leases name it (this many).
    InUse(usize),
    /// Kept by the policy.
    Kept(Verdict),
    /// Left Reclaiming: the directory is not the recorded one.
    Retained(&'static str),
    /// Its reclamation failed; the others went on.
    Failed(String),
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
    /// Its recovery failed; the rest went on.
    Failed(String),
}

struct Report {
    storage: PathBuf,
    dry_run: bool,
    /// Each artifact, its last use (seconds since the epoch) and its fate.
    artifacts: Vec<(PreparedArtifact, Option<u64>, Fate)>,
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
            let failed = report
                .artifacts
                .iter()
                .any(|(_, _, f)| matches!(f, Fate::Failed(_)))
                || report
                    .operations
                    .iter()
                    .any(|(_, _, f)| matches!(f, OperationFate::Failed(_)));
            let code = if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
            super::emit("lazaret state gc", &text, command.json, code)
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
    // One gc at a time: each artifact's reclamation is one run of the
    // model, which a second reclaimer of the same tree would break.
    let _only = match command.dry_run {
        true => None,
        false => Some(catalog.gc_lock()?),
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
        // Housekeeping: a failure is said, and reclamation goes on.
        match dir.remove_orphan_locks(&recorded) {
            Ok(n) => report.orphan_locks = n,
            Err(e) => errln!("lazaret state gc: orphan operation locks left: {e}"),
        }
    }
    for op in operations {
        let fate = match host.as_mut() {
            None => OperationFate::Found,
            Some(host) => match recover(host, &catalog, &dir, op.operation_id) {
                Ok(Recovery::Recovered) => OperationFate::Recovered,
                Ok(Recovery::Live) => OperationFate::Running,
                Ok(Recovery::Retained { stage, reason }) => {
                    OperationFate::Retained { stage, reason }
                }
                Err(e) => OperationFate::Failed(e.to_string()),
            },
        };
        report.operations.push((
            op.operation_id.to_string(),
            op.expected_artifact_id.to_string(),
            fate,
        ));
    }
    let leases = catalog.leases()?;
    let rows = catalog.artifacts()?;
    let uses = last_uses(&storage, &rows);
    let now = unix_seconds(std::time::SystemTime::now()).unwrap_or(0);
    let leased = |row: &PreparedArtifact| {
        leases
            .iter()
            .filter(|l| l.artifact == row.prepared_artifact_id)
            .count()
    };
    // The policy's candidates: Available, unleased. A reclamation that
    // began is resumed whatever the policy.
    let candidates: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].state == ArtifactState::Available && leased(&rows[i]) == 0)
        .collect();
    // A last use that cannot be read counts as now: the policy errs on
    // keeping.
    let candidate_uses: Vec<u64> = candidates.iter().map(|&i| uses[i].unwrap_or(now)).collect();
    let policy = Policy {
        keep_newest: command.keep_newest,
        older_than: command.older_than,
    };
    let mut verdicts = vec![Verdict::Reclaim; rows.len()];
    for (&i, verdict) in candidates
        .iter()
        .zip(gc_policy::decide(&policy, now, &candidate_uses))
    {
        verdicts[i] = verdict;
    }
    for ((row, last_use), verdict) in rows.into_iter().zip(uses).zip(verdicts) {
        let leases = leased(&row);
        let fate = match host.as_mut() {
            _ if leases > 0 && row.state == ArtifactState::Available => Fate::InUse(leases),
            _ if verdict != Verdict::Reclaim => Fate::Kept(verdict),
            None => Fate::WouldReclaim,
            Some(host) => {
                reclaim(host, &catalog, &dir, &row).unwrap_or_else(|e| Fate::Failed(e.to_string()))
            }
        };
        report.artifacts.push((row, last_use, fate));
    }
    Ok(report)
}

/// Each artifact's last use: the latest of its preparation (its
/// `artifact.json`, written once) and the last launch of every Domain whose
/// anchors' `lower` record names it (rewritten at each launch). `None`
/// when neither can be read.
fn last_uses(storage: &Path, rows: &[PreparedArtifact]) -> Vec<Option<u64>> {
    let modified = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(unix_seconds)
    };
    let mut launched: BTreeMap<String, u64> = BTreeMap::new();
    if let Ok(domains) = std::fs::read_dir(storage.join("domains")) {
        for domain in domains.flatten().take(MAX_DOMAINS) {
            let record = domain.path().join("anchors").join(LOWER_RECORD);
            let (Ok(text), Some(at)) = (std::fs::read_to_string(&record), modified(&record)) else {
                continue;
            };
            let entry = launched.entry(text.trim().to_owned()).or_insert(at);
            *entry = (*entry).max(at);
        }
    }
    rows.iter()
        .map(|row| {
            let id = row.prepared_artifact_id.to_string();
            let prepared = modified(&storage.join("prepared").join(&id).join("artifact.json"));
            prepared.max(launched.get(&id).copied())
        })
        .collect()
}

fn unix_seconds(at: std::time::SystemTime) -> Option<u64> {
    at.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
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
    for (row, _, fate) in &report.artifacts {
        let id = row.prepared_artifact_id.to_string();
        let what = match fate {
            Fate::Reclaimed => "reclaimed".to_owned(),
            Fate::WouldReclaim => "would be reclaimed (no Domain uses it)".to_owned(),
            Fate::InUse(n) => format!("kept: leased by {n} generation(s)"),
            Fate::Kept(Verdict::KeptNewest) => {
                "kept: among the --keep-newest most recently used".to_owned()
            }
            Fate::Kept(_) => "kept: used within --older-than".to_owned(),
            Fate::Failed(e) => format!("not reclaimed: {}", escape_line(e)),
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
            OperationFate::Failed(e) => format!("not recovered: {}", escape_line(e)),
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
        .filter(|(_, _, f)| *f == Fate::Reclaimed)
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
        .map(|(row, last_use, fate)| {
            let (action, leases, detail) = match fate {
                Fate::Reclaimed => ("reclaimed", 0, None),
                Fate::WouldReclaim => ("would-reclaim", 0, None),
                Fate::InUse(n) => ("in-use", *n, None),
                Fate::Kept(Verdict::KeptNewest) => ("kept", 0, Some("keep-newest".to_owned())),
                Fate::Kept(_) => ("kept", 0, Some("older-than".to_owned())),
                Fate::Retained(why) => ("retained", 0, Some((*why).to_owned())),
                Fate::Failed(e) => ("failed", 0, Some(e.clone())),
            };
            json!({
                "artifact_id": row.prepared_artifact_id.to_string(),
                "manifest_digest": row.selected_manifest_digest.as_str(),
                "path": row.path.to_string(),
                "last_used_unix": last_use,
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
                OperationFate::Failed(e) => ("failed", None, Some(e.clone())),
                OperationFate::Retained { stage, reason } => (
                    "retained",
                    Some(stage.display().to_string()),
                    Some((*reason).to_owned()),
                ),
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
