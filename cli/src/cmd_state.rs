//! `lazaret state`: what a Domain holds durably (issue 5 deliverable 5;
//! spec 3.9's read-only part, DX-6: human and machine-readable output, no
//! persisted file contents).
//!
//! The Domain Store may be opened only by the process holding the Domain
//! flock (spec 3.6 "Durable generation document refinement", FR-17). So
//! this command becomes the lock holder when no Host Coordinator holds it,
//! reads one validated snapshot, and releases the lock; while a Host
//! Coordinator holds it, it refuses (reading through Host Coordinator IPC
//! comes with the session protocol). Nothing is created unless a Domain
//! Store already exists.
use clap::Args;
use lazaret_effects::domain_lock::{DomainLock, DomainLockError};
use lazaret_effects::domain_root::DomainRootLayout;
use lazaret_effects::domain_store::{DomainDocument, DomainStore, StoreError};
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_runtime::records::process::PersistedHostProcessOwnership;
use lazaret_runtime::records::terminal::SessionTerminal;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct StateCommand {
    /// The Domain Root to read (the directory holding domain.lock and
    /// domain.redb). Required until the configuration loader lands; then the
    /// Domain is found from --profile and --workspace instead.
    #[arg(long, value_name = "DIR")]
    domain_root: PathBuf,
    /// Refuse unless the Domain belongs to this workspace (canonicalized).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Refuse unless the Domain belongs to this profile.
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("Domain Root {path}: {source}")]
    DomainRoot { path: PathBuf, source: io::Error },
    #[error("Domain Root {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("no Domain Store at {path}: this Domain has never been started (nothing was created)")]
    NoStore { path: PathBuf },
    #[error("the Domain at {root} is held by a running Host Coordinator; only that coordinator may open its store, and `lazaret state` cannot ask it yet (Host Coordinator IPC is not implemented). Run it again after the Domain's last session has ended")]
    Held { root: PathBuf },
    #[error(transparent)]
    Lock(DomainLockError),
    #[error("cannot read the current boot ID: {0}")]
    BootId(io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the Domain Store at {path} has no Domain record")]
    NoDomainRecord { path: PathBuf },
    #[error("the Domain at {root} belongs to profile {recorded:?}, not {requested:?}")]
    ProfileMismatch {
        root: PathBuf,
        recorded: String,
        requested: String,
    },
    #[error("--workspace {path}: {source}")]
    Workspace { path: PathBuf, source: io::Error },
    #[error("the Domain at {root} belongs to workspace {recorded}, not {requested}")]
    WorkspaceMismatch {
        root: PathBuf,
        recorded: String,
        requested: String,
    },
}

impl StateError {
    fn exit_code(&self) -> u8 {
        match self {
            Self::Held { .. } => 3,
            _ => 1,
        }
    }
}

pub fn run(command: StateCommand) -> ExitCode {
    match inspect(&command) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lazaret state: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Where the Domain Root comes from. Today only the explicit option; the
/// configuration loader will supply the root from profile and workspace.
fn domain_root(command: &StateCommand) -> DomainRootLayout {
    DomainRootLayout::new(&command.domain_root)
}

fn inspect(command: &StateCommand) -> Result<String, StateError> {
    let layout = domain_root(command);
    let root = layout.root().to_owned();
    let meta = std::fs::metadata(&root).map_err(|source| StateError::DomainRoot {
        path: root.clone(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(StateError::NotADirectory { path: root });
    }
    let store_path = layout.store_path();
    if !std::fs::symlink_metadata(&store_path).is_ok_and(|m| m.is_file()) {
        return Err(StateError::NoStore { path: store_path });
    }
    let lock = match DomainLock::try_acquire(&layout.lock_path()) {
        Ok(lock) => lock,
        Err(DomainLockError::Held { .. }) => return Err(StateError::Held { root }),
        Err(e) => return Err(StateError::Lock(e)),
    };
    let boot = RealProcessSys.boot_id().map_err(StateError::BootId)?;
    let document = {
        let store = DomainStore::open(&lock, &store_path, boot)?;
        store.document()?
    };
    drop(lock);
    check_owner(command, &root, &store_path, &document)?;
    Ok(if command.json {
        let mut text = serde_json::to_string_pretty(&to_json(&root, &document))
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text.push('\n');
        text
    } else {
        to_text(&root, &document)
    })
}

fn check_owner(
    command: &StateCommand,
    root: &Path,
    store_path: &Path,
    document: &DomainDocument,
) -> Result<(), StateError> {
    if command.profile.is_none() && command.workspace.is_none() {
        return Ok(());
    }
    let domain = document
        .domain
        .as_ref()
        .ok_or_else(|| StateError::NoDomainRecord {
            path: store_path.to_owned(),
        })?;
    if let Some(requested) = &command.profile {
        if domain.profile_name.as_str() != requested {
            return Err(StateError::ProfileMismatch {
                root: root.to_owned(),
                recorded: domain.profile_name.to_string(),
                requested: requested.clone(),
            });
        }
    }
    if let Some(workspace) = &command.workspace {
        let canonical =
            std::fs::canonicalize(workspace).map_err(|source| StateError::Workspace {
                path: workspace.clone(),
                source,
            })?;
        let requested = std::os::unix::ffi::OsStrExt::as_bytes(canonical.as_os_str());
        if requested != domain.canonical_workspace.as_bytes() {
            return Err(StateError::WorkspaceMismatch {
                root: root.to_owned(),
                recorded: domain.canonical_workspace.to_string(),
                requested: canonical.display().to_string(),
            });
        }
    }
    Ok(())
}

fn slot_json(slot: &PersistedHostProcessOwnership) -> Value {
    match slot.identity() {
        None => json!({ "phase": slot.phase_name() }),
        Some(id) => json!({
            "phase": slot.phase_name(),
            "host_pid": id.host_pid.0,
            "start_time_ticks": id.start_time_ticks,
            "boot_id": id.authority.boot_id.to_string(),
            "pidfs_st_dev": id.authority.pidfs_st_dev.0,
            "pidfs_st_ino": id.authority.pidfs_st_ino.0,
        }),
    }
}

fn slot_text(slot: &PersistedHostProcessOwnership) -> String {
    match slot.identity() {
        None => slot.phase_name().to_owned(),
        Some(id) => format!(
            "{} pid {} start {} (boot {}, pidfs {}:{})",
            slot.phase_name(),
            id.host_pid.0,
            id.start_time_ticks,
            id.authority.boot_id,
            id.authority.pidfs_st_dev.0,
            id.authority.pidfs_st_ino.0
        ),
    }
}

fn terminal_json(t: &SessionTerminal) -> Value {
    let s = &t.snapshot;
    json!({
        "session_id": t.session_id.to_string(),
        "state": format!("{:?}", t.state),
        "container_id": s.container_id.as_ref().map(|c| c.to_string()),
        "host_coordinator": slot_json(&s.host_coordinator),
        "exec_client": slot_json(&s.exec_client),
        "pty_master": s.pty_master.map(|p| json!({
            "master_fd": p.master_fd, "device": p.device, "inode": p.inode
        })),
        "guest_process": s.guest_process.map(|g| json!({
            "leader_pid": g.leader_pid,
            "leader_start_time": g.leader_start_time,
            "process_group_id": g.process_group_id
        })),
    })
}

fn to_json(root: &Path, doc: &DomainDocument) -> Value {
    let generations: Vec<Value> = doc
        .generations
        .iter()
        .map(|g| {
            let gen = &g.generation;
            json!({
                "generation_id": gen.generation_id.0,
                "durable_decision": gen.durable_decision.as_str(),
                "configuration_fingerprint": gen.configuration_fingerprint.to_string(),
                "coordinator_id": gen.coordinator_id.to_string(),
                "network_sidecar_id": gen.network_sidecar_id.to_string(),
                "sandbox_id": gen.sandbox_id.to_string(),
                "participants": g.participants.iter().map(|p| json!({
                    "role": format!("{:?}", p.role),
                    "state": format!("{:?}", p.state),
                    "ownership": p.ownership.as_ref().map(|o| serde_json::to_value(o).unwrap_or(Value::Null)),
                })).collect::<Vec<_>>(),
                "sessions": g.sessions.iter().map(|s| json!({
                    "session_id": s.session_id.to_string(),
                    "cli_id": s.cli_id.to_string(),
                    "session_anchor_id": s.session_anchor_id.to_string(),
                    "session_phase": s.session_phase.as_str(),
                })).collect::<Vec<_>>(),
                "terminals": g.terminals.iter().map(terminal_json).collect::<Vec<_>>(),
                "mailbox": g.mailbox.as_ref().map(|m| json!({
                    "state": format!("{:?}", m.state),
                    "identity_path": m.identity_path.to_string(),
                    "inbox_path": m.inbox_path.to_string(),
                    "outbox_path": m.outbox_path.to_string(),
                })),
            })
        })
        .collect();
    json!({
        "domain_root": root.display().to_string(),
        "domain": doc.domain.as_ref().map(|d| json!({
            "domain_id": d.domain_id.to_string(),
            "profile": d.profile_name.as_str(),
            "workspace": d.canonical_workspace.to_string(),
        })),
        "generations": generations,
    })
}

fn to_text(root: &Path, doc: &DomainDocument) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("Domain Root {}", root.display()));
    match &doc.domain {
        Some(d) => {
            line(format!("Domain      {}", d.domain_id));
            line(format!("profile     {}", d.profile_name));
            line(format!("workspace   {}", d.canonical_workspace));
        }
        None => line("Domain      (no Domain record)".to_owned()),
    }
    if doc.generations.is_empty() {
        line("no generations".to_owned());
    }
    for g in &doc.generations {
        let gen = &g.generation;
        line(format!(
            "generation {}  decision {}  fingerprint {}",
            gen.generation_id, gen.durable_decision, gen.configuration_fingerprint
        ));
        line(format!(
            "  coordinator {}  network sidecar {}  sandbox {}",
            gen.coordinator_id, gen.network_sidecar_id, gen.sandbox_id
        ));
        line(format!("  participants ({})", g.participants.len()));
        for p in &g.participants {
            let mut text = format!("    {:<14} {:?}", format!("{:?}", p.role), p.state);
            match &p.ownership {
                None => text.push_str("  (bare intent)"),
                Some(o) => {
                    let _ = write!(text, "  {o:?}");
                }
            }
            line(text);
        }
        line(format!("  sessions ({})", g.sessions.len()));
        for s in &g.sessions {
            line(format!(
                "    session {}  phase {}  cli {}",
                s.session_id, s.session_phase, s.cli_id
            ));
        }
        line(format!("  session terminals ({})", g.terminals.len()));
        for t in &g.terminals {
            let s = &t.snapshot;
            line(format!(
                "    session {}  {:?}  container {}",
                t.session_id,
                t.state,
                s.container_id
                    .as_ref()
                    .map_or("-".to_owned(), |c| c.to_string())
            ));
            line(format!(
                "      host coordinator {}",
                slot_text(&s.host_coordinator)
            ));
            line(format!(
                "      exec client      {}",
                slot_text(&s.exec_client)
            ));
            if let Some(p) = s.pty_master {
                line(format!(
                    "      pty              master fd {}, devpts {}:{}",
                    p.master_fd, p.device, p.inode
                ));
            }
            if let Some(g) = s.guest_process {
                line(format!(
                    "      guest            leader {} start {} group {}",
                    g.leader_pid, g.leader_start_time, g.process_group_id
                ));
            }
        }
        if let Some(m) = &g.mailbox {
            line(format!("  mailbox {:?}  inbox {}", m.state, m.inbox_path));
        }
    }
    out
}
