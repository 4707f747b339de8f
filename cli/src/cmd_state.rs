//! `lazaret state [PROFILE] [--workspace DIR] [--config FILE] [--json]`:
//! what a Domain holds durably and what recovery would find (spec
//! 3.2 reserves `state` as the maintenance command, 3.9
//! read-only inspection, DX-6 human and machine-readable output, no
//! persisted file contents).
//!
//! The Domain is located exactly as a launch locates it (profile, canonical
//! workspace and configured roots through `config_resolve::locate_domain`),
//! without creating anything; `--domain-root DIR` names a persistent Domain
//! Root directly instead. The Domain Store may be opened only by the process
//! holding the Domain flock (spec 3.6 "Durable generation document
//! refinement", FR-17): when no Host Coordinator holds it this command
//! becomes the lock holder, reads one validated snapshot and releases the
//! lock; while a Host Coordinator holds it, it shows what can be seen from
//! outside the store and says so.
//!
//! Exit status: 0 the store was read, 3 the Domain is live (store not
//! readable from here), 4 no Domain exists there, 1 any error, 2 bad usage.
mod evidence;
mod exclusive;
pub mod gc;
pub mod inspect;
pub mod list;
mod live;
mod ownership;
mod render;
pub mod reset;
pub mod verify;

use crate::report::errln;
use clap::{Args, Subcommand};
use evidence::GenerationEvidence;
use lazaret_effects::config_resolve::{locate_domain, DomainLocation, LoadError, LoadRequest};
use lazaret_effects::confined::{ConfinedSys, RealSys};
use lazaret_effects::coordinator::paths::DomainPaths;
use lazaret_effects::domain_lock::{DomainLock, DomainLockError};
use lazaret_effects::domain_root::DomainRootLayout;
use lazaret_effects::domain_store::{DomainDocument, DomainStore, StoreError};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_effects::state_anchor::uppers_dir;
use lazaret_effects::state_anchor::usage::{anchors_usage, AnchorUsage, UsageError};
use lazaret_runtime::config::{HostEnvironment, SandboxLayoutV1};
use live::{LiveView, RuntimePaths};
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 the Domain Store was read; 3 the Domain is live (its Host \
                  Coordinator holds the store); 4 there is no Domain Store there (nothing is \
                  created); 1 an error; 2 bad usage. --json field names: docs/durable-state.md."
)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct StateCommand {
    #[command(subcommand)]
    action: Option<StateAction>,
    /// The profile whose Domain to show, for the workspace (required unless
    /// --domain-root is given; then the Domain must belong to it).
    #[arg(value_name = "PROFILE", required_unless_present = "domain_root")]
    profile: Option<String>,
    /// Agent Workspace directory (default: the current directory). With
    /// --domain-root, the Domain must belong to it.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "domain_root")]
    config: Option<String>,
    /// Read this persistent Domain Root (the directory holding domain.lock
    /// and domain.redb) instead of locating the Domain from the
    /// configuration.
    #[arg(long, value_name = "DIR")]
    domain_root: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The maintenance actions (spec 3.9, FR-11). A profile named like one is
/// shown with `lazaret state -- NAME`.
#[derive(Debug, Subcommand)]
pub enum StateAction {
    /// Discard what the agent changed under one persistent path (or all of
    /// them with --all) so the next launch follows the image there. Shows
    /// the Domain and scope first and asks unless --yes; refused while the
    /// Domain runs.
    Reset(reset::ResetCommand),
    /// Every Domain under the Storage Root: its ID, profile, workspace,
    /// whether it runs, when it was last used, what its anchors hold.
    List(list::ListCommand),
    /// Per persistent path, what the agent added, changed, deleted or
    /// replaced against the image, with sizes (never contents).
    Inspect(inspect::InspectCommand),
    /// Check the structure of an inactive Domain's State Anchors under its
    /// lock, changing nothing.
    Verify(verify::VerifyCommand),
    /// Reclaim the prepared images no running Domain uses (their next
    /// launch prepares them again; persistent state is kept), and recover
    /// abandoned preparations. --dry-run shows what would go.
    Gc(gc::GcCommand),
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot locate the Domain of profile {profile:?}: {source}")]
    Locate {
        profile: String,
        #[source]
        source: Box<LoadError>,
    },
    #[error("name the profile (`lazaret state PROFILE`) or a Domain Root (`--domain-root DIR`)")]
    NoTarget,
    #[error("the sandbox layout could not be constructed: {0}")]
    Layout(String),
    #[error("Domain Root {path}: {source}")]
    DomainRoot { path: PathBuf, source: io::Error },
    #[error("Domain Root {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error(transparent)]
    Lock(DomainLockError),
    #[error("cannot read the current boot ID: {0}")]
    BootId(io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
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
    #[error("the Domain Store {store} records {recorded}, not {expected}; it is left as it is: inspect it with `lazaret state --domain-root {root}`", root = store.parent().unwrap_or(Path::new("/")).display())]
    OtherDomain {
        store: PathBuf,
        recorded: String,
        expected: String,
    },
}

/// Where the Domain is and how it was found.
#[derive(Debug)]
pub struct Target {
    /// Set when the Domain was located from the configuration.
    pub located: Option<DomainLocation>,
    /// The persistent Domain Root.
    pub domain_root: PathBuf,
    pub lock: PathBuf,
    pub store: PathBuf,
    /// The runtime Domain root (unknown with `--domain-root`).
    pub runtime: Option<RuntimePaths>,
}

/// What was found there.
#[derive(Debug)]
pub enum Outcome {
    /// No Domain Store: the Domain never ran here; nothing was created.
    Absent,
    /// A Host Coordinator holds the lock; only it may open the store.
    Live(LiveView),
    /// The store as read under the lock, with recovery evidence aligned
    /// with `document.generations`.
    Read {
        document: DomainDocument,
        evidence: Vec<GenerationEvidence>,
    },
}

#[derive(Debug)]
pub struct Report {
    pub target: Target,
    /// The command that starts (and so recovers) this Domain, quoted.
    pub relaunch: String,
    /// The command that shows this Domain again, quoted.
    pub show_again: String,
    pub outcome: Outcome,
    /// What the Domain's State Anchors hold (spec 3.9, FR-11), read from
    /// their uppers whether or not the Domain runs (sizes only, never
    /// contents).
    pub anchors: Result<Vec<AnchorUsage>, UsageError>,
}

impl Report {
    fn exit_code(&self) -> u8 {
        match self.outcome {
            Outcome::Read { .. } => 0,
            Outcome::Live(_) => 3,
            Outcome::Absent => 4,
        }
    }
}

/// Prints a report (JSON or text) and returns `code`, or a failure when
/// stdout cannot take it.
fn emit(command: &str, text: &str, as_json: bool, code: ExitCode) -> ExitCode {
    let printed = if as_json {
        crate::report::print_json(text)
    } else {
        crate::report::print_text(text)
    };
    match printed {
        Ok(()) => code,
        Err(e) => {
            errln!("{command}: writing stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn run(command: StateCommand) -> ExitCode {
    let command = match command.action {
        Some(StateAction::Reset(reset)) => return reset::run(reset),
        Some(StateAction::List(list)) => return list::run(list),
        Some(StateAction::Inspect(inspect)) => return inspect::run(inspect),
        Some(StateAction::Verify(verify)) => return verify::run(verify),
        Some(StateAction::Gc(gc)) => return gc::run(gc),
        None => command,
    };
    match inspect(&command, &RealSys, &ProcessEnvironment, &RealProcessSys) {
        Ok(report) => emit(
            "lazaret state",
            &render::render(&report, command.json),
            command.json,
            ExitCode::from(report.exit_code()),
        ),
        Err(e) => {
            errln!("lazaret state: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A word as a POSIX shell would need it (single-quoted unless plain).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:@,%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `lazaret <profile> ...` or, for a profile named `state`, the explicit
/// form (spec 3.2), then the given options, in backquotes.
fn command_line(
    profile: Option<&str>,
    subcommand: Option<&str>,
    options: &[(&str, &str)],
) -> String {
    let mut words: Vec<String> = vec!["lazaret".to_owned()];
    match (subcommand, profile) {
        (Some(sub), Some(p)) => words.extend([sub.to_owned(), shell_word(p)]),
        (Some(sub), None) => words.push(sub.to_owned()),
        (None, Some("state")) => words.extend(["run", "--profile", "state"].map(String::from)),
        (None, Some(p)) => words.push(shell_word(p)),
        (None, None) => words.push("<profile>".to_owned()),
    }
    for (name, value) in options {
        words.push((*name).to_owned());
        words.push(shell_word(value));
    }
    format!("`{}`", words.join(" "))
}

fn located_target(
    profile: &str,
    workspace: Option<&Path>,
    config: Option<&str>,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
) -> Result<Target, StateError> {
    let layout = SandboxLayoutV1::production().map_err(|e| StateError::Layout(e.to_string()))?;
    let workspace = workspace.unwrap_or(Path::new(".")).to_owned();
    let request = LoadRequest {
        profile,
        config,
        workspace: &workspace,
        env,
        layout: &layout,
    };
    let location = locate_domain(sys, &request).map_err(|source| StateError::Locate {
        profile: profile.to_owned(),
        source: Box::new(source),
    })?;
    // The same paths the launch hands its Host Coordinator.
    let paths = DomainPaths::new(&location.runtime_domain_root, &location.storage_domain_root);
    Ok(Target {
        domain_root: paths.storage.clone(),
        lock: paths.lock(),
        store: paths.store(),
        runtime: Some(RuntimePaths {
            dir: paths.runtime.clone(),
            socket: paths.socket(),
            log: paths.log(),
        }),
        located: Some(location),
    })
}

fn explicit_target(root: &Path) -> Result<Target, StateError> {
    let meta = std::fs::metadata(root).map_err(|source| StateError::DomainRoot {
        path: root.to_owned(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(StateError::NotADirectory {
            path: root.to_owned(),
        });
    }
    let layout = DomainRootLayout::new(root);
    Ok(Target {
        located: None,
        domain_root: root.to_owned(),
        lock: layout.lock_path(),
        store: layout.store_path(),
        runtime: None,
    })
}

/// The explicit checks of `--domain-root` (PROFILE, `--workspace`), or,
/// for a located Domain, that the store records that very Domain (SR-11).
/// Whether a Domain Store's Domain record is the located Domain's (SR-11:
/// its ID, profile and canonical workspace).
fn records_location(
    domain: &lazaret_runtime::records::domain::Domain,
    location: &DomainLocation,
) -> bool {
    domain.domain_id.0 == location.domain_id.0
        && domain.profile_name.as_str() == location.profile
        && domain.canonical_workspace.as_bytes()
            == location.workspace.as_os_str().as_encoded_bytes()
}

fn check_owner(
    command: &StateCommand,
    target: &Target,
    document: &DomainDocument,
) -> Result<(), StateError> {
    let Some(domain) = &document.domain else {
        return Ok(());
    };
    if let Some(location) = &target.located {
        if records_location(domain, location) {
            return Ok(());
        }
        return Err(StateError::OtherDomain {
            store: target.store.clone(),
            recorded: format!(
                "Domain {} (profile {:?}, workspace {})",
                domain.domain_id,
                domain.profile_name.as_str(),
                domain.canonical_workspace
            ),
            expected: format!(
                "Domain {} of profile {:?} in {}",
                location.domain_id,
                location.profile,
                location.workspace.display()
            ),
        });
    }
    if let Some(requested) = &command.profile {
        if domain.profile_name.as_str() != requested {
            return Err(StateError::ProfileMismatch {
                root: target.domain_root.clone(),
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
        if canonical.as_os_str().as_encoded_bytes() != domain.canonical_workspace.as_bytes() {
            return Err(StateError::WorkspaceMismatch {
                root: target.domain_root.clone(),
                recorded: domain.canonical_workspace.to_string(),
                requested: canonical.display().to_string(),
            });
        }
    }
    Ok(())
}

/// The Domain a maintenance action works on, located exactly as a launch
/// locates it.
#[derive(Debug, Args)]
pub struct DomainSelection {
    /// The profile whose Domain to use, for the workspace.
    #[arg(value_name = "PROFILE")]
    profile: String,
    /// Agent Workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
}

impl DomainSelection {
    /// The located Domain: its paths and its location.
    fn locate(
        &self,
        sys: &dyn ConfinedSys,
        env: &dyn HostEnvironment,
    ) -> Result<(Target, DomainLocation), StateError> {
        let mut target = located_target(
            &self.profile,
            self.workspace.as_deref(),
            self.config.as_deref(),
            sys,
            env,
        )?;
        let location = target.located.take().ok_or(StateError::NoTarget)?;
        Ok((target, location))
    }

    /// The command that starts (and so recovers) the Domain, quoted.
    fn relaunch(&self, location: &DomainLocation) -> String {
        let workspace = location.workspace.display().to_string();
        let mut options: Vec<(&str, &str)> = vec![("--workspace", &workspace)];
        if let Some(c) = &self.config {
            options.push(("--config", c));
        }
        command_line(Some(&self.profile), None, &options)
    }
}

/// `Domain <ID> (profile P, workspace W)` and a newline.
fn domain_header(location: &DomainLocation) -> String {
    format!(
        "Domain {} (profile {}, workspace {})\n",
        location.domain_id,
        lazaret_runtime::display::escape_line(&location.profile),
        lazaret_runtime::display::escape_line(&location.workspace.display().to_string())
    )
}

/// Whether `path` names a State Anchor of the Domain: a configured
/// persistent path, or one whose upper an earlier configuration left on
/// disk (spec 3.9: never a host path).
fn known_anchor(path: &str, persistent: &[String], on_disk: &[AnchorUsage]) -> bool {
    persistent.iter().any(|p| p == path) || on_disk.iter().any(|a| a.path == path)
}

/// Becomes the lock holder and reads one validated snapshot, or says why
/// the store cannot be read from here.
fn observe<P: ProcessSys>(
    command: &StateCommand,
    target: &Target,
    procs: &P,
) -> Result<Result<DomainDocument, Outcome>, StateError> {
    if !std::fs::symlink_metadata(&target.store).is_ok_and(|m| m.is_file()) {
        return Ok(Err(Outcome::Absent));
    }
    let lock = match DomainLock::try_acquire(&target.lock) {
        Ok(lock) => lock,
        Err(DomainLockError::Held { .. }) => {
            return Ok(Err(Outcome::Live(live::observe(
                &target.lock,
                target.runtime.as_ref(),
            ))))
        }
        Err(e) => return Err(StateError::Lock(e)),
    };
    let boot = procs.boot_id().map_err(StateError::BootId)?;
    let document = {
        let store = DomainStore::open(&lock, &target.store, boot)?;
        store.document()?
    };
    // Held only for the read: a launch that starts now waits it out.
    drop(lock);
    check_owner(command, target, &document)?;
    Ok(Ok(document))
}

fn inspect<P: ProcessSys>(
    command: &StateCommand,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
    procs: &P,
) -> Result<Report, StateError> {
    let target = match (&command.domain_root, &command.profile) {
        (Some(root), _) => explicit_target(root)?,
        (None, Some(profile)) => located_target(
            profile,
            command.workspace.as_deref(),
            command.config.as_deref(),
            sys,
            env,
        )?,
        // clap already requires PROFILE unless --domain-root is given.
        (None, None) => return Err(StateError::NoTarget),
    };
    let observed = observe(command, &target, procs)?;
    let record = observed.as_ref().ok().and_then(|d| d.domain.as_ref());
    let profile: Option<String> = match (&target.located, record) {
        (Some(l), _) => Some(l.profile.clone()),
        (None, Some(d)) => Some(d.profile_name.to_string()),
        (None, None) => command.profile.clone(),
    };
    let workspace: Option<String> = match (&target.located, record) {
        (Some(l), _) => Some(l.workspace.display().to_string()),
        (None, Some(d)) => Some(d.canonical_workspace.to_string()),
        (None, None) => None,
    };
    let mut options: Vec<(&str, &str)> = Vec::new();
    if let Some(w) = &workspace {
        options.push(("--workspace", w));
    }
    if let Some(c) = &command.config {
        options.push(("--config", c));
    }
    let relaunch = command_line(profile.as_deref(), None, &options);
    let root = target.domain_root.display().to_string();
    let show_again = match &target.located {
        Some(_) => command_line(profile.as_deref(), Some("state"), &options),
        None => command_line(None, Some("state"), &[("--domain-root", &root)]),
    };
    let outcome = match observed {
        Err(outcome) => outcome,
        Ok(document) => {
            let evidence = document
                .generations
                .iter()
                .map(|g| evidence::gather(procs, g, &relaunch))
                .collect();
            Outcome::Read { document, evidence }
        }
    };
    let anchors = anchors_usage(&uppers_dir(&target.domain_root));
    Ok(Report {
        target,
        relaunch,
        show_again,
        outcome,
        anchors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_commands_quote_words_and_launch_a_state_profile_explicitly() {
        assert_eq!(
            command_line(Some("dev"), None, &[("--workspace", "/home/a b/it's")]),
            r"`lazaret dev --workspace '/home/a b/it'\''s'`"
        );
        assert_eq!(
            command_line(Some("state"), None, &[]),
            "`lazaret run --profile state`"
        );
        assert_eq!(
            command_line(Some("state"), Some("state"), &[("--config", "/c.toml")]),
            "`lazaret state state --config /c.toml`"
        );
        assert_eq!(command_line(None, None, &[]), "`lazaret <profile>`");
    }
}
