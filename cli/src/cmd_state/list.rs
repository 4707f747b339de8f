//! `lazaret state list [--config FILE] [--json]`: every Domain under the
//! Storage Root (spec 3.9, FR-11, DX-6): its ID, profile, workspace,
//! whether it runs, when it was last used and what its State Anchors hold.
//!
//! The Storage Root is the configuration's (`storage.data_root`, else the
//! default); the Domains are the `domains/<Domain ID>` directories there. An
//! inactive Domain's profile and workspace are read from its Domain Store
//! under its lock, held only for the read. A running Domain's store is its
//! Host Coordinator's alone (spec 3.6, FR-17): its profile and workspace
//! are the ones that coordinator was started for, read from its command
//! line. Nothing is created or written.
use super::live::{self, LiveView};
use crate::report::errln;
use clap::Args;
use lazaret_effects::coordinator::COORDINATOR_SUBCOMMAND;
use lazaret_effects::domain_lock::{DomainLock, DomainLockError};
use lazaret_effects::domain_root::DomainRootLayout;
use lazaret_effects::domain_store::{DomainStore, StoreError};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_effects::state_anchor::uppers_dir;
use lazaret_effects::state_anchor::usage::anchors_usage;
use lazaret_runtime::config::{
    config_source_path, decode_document, storage_root_path, ConfigError, HostEnvironment,
};
use lazaret_runtime::display::escape_line;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

/// The most Domains one listing reads.
const MAX_DOMAINS: usize = 4096;

#[derive(Debug, Args)]
#[command(after_help = "Exit status: 0 listed (possibly none); 1 an error; 2 bad usage.")]
pub struct ListCommand {
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml); only its storage.data_root is
    /// used.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("the configuration: {0}")]
    Config(#[source] ConfigError),
    #[error("reading the configuration {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the Storage Root's Domains {path}: {source}")]
    ReadDomains {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("more than {MAX_DOMAINS} Domains under {0}; listing stopped")]
    TooMany(PathBuf),
}

/// Whether a Domain runs, and what is known of it.
#[derive(Debug)]
enum Activity {
    /// Its Host Coordinator holds the lock.
    Running(LiveView),
    /// Not running: its store was read.
    Inactive,
    /// Not running and never ran (no Domain Store).
    Empty,
}

/// One Domain of the listing.
#[derive(Debug)]
struct Listed {
    domain_id: String,
    root: PathBuf,
    profile: Option<String>,
    workspace: Option<String>,
    activity: Activity,
    /// The Domain Store's last modification: its last launch or teardown.
    last_used: Option<SystemTime>,
    anchor_files: u64,
    anchor_bytes: u64,
    /// What could not be read (the Domain is still listed).
    problem: Option<String>,
}

pub fn run(command: ListCommand) -> ExitCode {
    match list(&command, &ProcessEnvironment, &RealProcessSys) {
        Ok(text) => super::emit("lazaret state list", &text, command.json, ExitCode::SUCCESS),
        Err(e) => {
            errln!("lazaret state list: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration's Storage Root (the default when there is no
/// configuration file).
pub(crate) fn storage_root(
    config: Option<&str>,
    env: &dyn HostEnvironment,
) -> Result<PathBuf, ListError> {
    let path = config_source_path(config, env).map_err(ListError::Config)?;
    let document = match std::fs::read(&path) {
        Ok(bytes) => Some(decode_document(&bytes).map_err(ListError::Config)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && config.is_none() => None,
        Err(source) => return Err(ListError::ReadConfig { path, source }),
    };
    storage_root_path(document.as_ref().and_then(|d| d.data_root()), env).map_err(ListError::Config)
}

/// The profile and workspace a running Host Coordinator was started for
/// (`__coordinator --profile P --workspace W`).
fn coordinator_target(pid: u32) -> Option<(String, String)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    target_of_args(&args)
}

fn target_of_args(args: &[String]) -> Option<(String, String)> {
    if args.get(1).map(String::as_str) != Some(COORDINATOR_SUBCOMMAND) {
        return None;
    }
    let value = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).cloned()
    };
    Some((value("--profile")?, value("--workspace")?))
}

fn read_domain<P: ProcessSys>(domain_id: String, root: PathBuf, procs: &P) -> Listed {
    let layout = DomainRootLayout::new(&root);
    let store_path = layout.store_path();
    let last_used = std::fs::metadata(&store_path)
        .and_then(|m| m.modified())
        .ok();
    let usage = anchors_usage(&uppers_dir(&root)).unwrap_or_default();
    let mut listed = Listed {
        domain_id,
        profile: None,
        workspace: None,
        activity: Activity::Empty,
        last_used,
        anchor_files: usage.iter().map(|a| a.files).sum(),
        anchor_bytes: usage.iter().map(|a| a.bytes).sum(),
        problem: None,
        root,
    };
    if last_used.is_none() {
        return listed;
    }
    let lock = match DomainLock::try_acquire(&layout.lock_path()) {
        Ok(lock) => lock,
        Err(DomainLockError::Held { .. }) => {
            let view = live::observe(&layout.lock_path(), None);
            if let Some((profile, workspace)) = view
                .lock_holders
                .as_deref()
                .and_then(|pids| pids.iter().find_map(|p| coordinator_target(*p)))
            {
                listed.profile = Some(profile);
                listed.workspace = Some(workspace);
            }
            listed.activity = Activity::Running(view);
            return listed;
        }
        Err(e) => {
            listed.problem = Some(e.to_string());
            return listed;
        }
    };
    let read = procs.boot_id().map_err(|e| e.to_string()).and_then(|boot| {
        DomainStore::open(&lock, &store_path, boot)
            .and_then(|store| store.document())
            .map_err(|e: StoreError| e.to_string())
    });
    drop(lock);
    match read {
        Ok(document) => {
            listed.activity = Activity::Inactive;
            if let Some(domain) = document.domain {
                listed.profile = Some(domain.profile_name.to_string());
                listed.workspace = Some(domain.canonical_workspace.to_string());
            }
        }
        Err(problem) => listed.problem = Some(problem),
    }
    listed
}

fn list<P: ProcessSys>(
    command: &ListCommand,
    env: &dyn HostEnvironment,
    procs: &P,
) -> Result<String, ListError> {
    let storage = storage_root(command.config.as_deref(), env)?;
    let domains_dir = storage.join("domains");
    let mut domains = Vec::new();
    match std::fs::read_dir(&domains_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|source| ListError::ReadDomains {
                    path: domains_dir.clone(),
                    source,
                })?;
                // Only directories named by a Domain ID (64 hex digits).
                let name = entry.file_name().to_string_lossy().into_owned();
                let is_id = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
                if !is_id || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if domains.len() == MAX_DOMAINS {
                    return Err(ListError::TooMany(domains_dir));
                }
                domains.push(read_domain(name, entry.path(), procs));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(ListError::ReadDomains {
                path: domains_dir,
                source,
            })
        }
    }
    // Most recently used first.
    domains.sort_by_key(|d| std::cmp::Reverse(d.last_used));
    Ok(if command.json {
        render_json(&storage, &domains)
    } else {
        render_text(&storage, &domains, SystemTime::now())
    })
}

fn unix_seconds(t: Option<SystemTime>) -> Option<u64> {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

fn state_word(a: &Activity) -> &'static str {
    match a {
        Activity::Running(_) => "running",
        Activity::Inactive => "inactive",
        Activity::Empty => "empty",
    }
}

fn render_json(storage: &Path, domains: &[Listed]) -> String {
    let items: Vec<serde_json::Value> = domains
        .iter()
        .map(|d| {
            json!({
                "domain_id": d.domain_id,
                "domain_root": d.root.display().to_string(),
                "profile": d.profile,
                "workspace": d.workspace,
                "state": state_word(&d.activity),
                "last_used_unix": unix_seconds(d.last_used),
                "anchor_files": d.anchor_files,
                "anchor_bytes": d.anchor_bytes,
                "problem": d.problem,
            })
        })
        .collect();
    let value = json!({
        "storage_root": storage.display().to_string(),
        "domains": items,
    });
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// "3 minutes ago", "2 days ago".
pub(crate) fn ago(now: SystemTime, then: Option<SystemTime>) -> String {
    let Some(then) = then else {
        return "never".to_owned();
    };
    let secs = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    let (n, unit) = match secs {
        0..=59 => return "just now".to_owned(),
        60..=3599 => (secs / 60, "minute"),
        3600..=86_399 => (secs / 3600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

fn render_text(storage: &Path, domains: &[Listed], now: SystemTime) -> String {
    let mut text = format!(
        "{} Domain{} under {}\n",
        domains.len(),
        if domains.len() == 1 { "" } else { "s" },
        escape_line(&storage.display().to_string())
    );
    for d in domains {
        text.push_str(&format!(
            "\n{}  {}\n  profile    {}\n  workspace  {}\n  last used  {}\n  anchors    {} files, {} bytes\n",
            d.domain_id,
            state_word(&d.activity),
            escape_line(d.profile.as_deref().unwrap_or("(unknown)")),
            escape_line(d.workspace.as_deref().unwrap_or("(unknown)")),
            ago(now, d.last_used),
            d.anchor_files,
            d.anchor_bytes,
        ));
        if let Activity::Running(view) = &d.activity {
            if let Some(pids) = &view.lock_holders {
                let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                text.push_str(&format!("  coordinator PID {}\n", pids.join(", ")));
            }
        }
        if let Some(problem) = &d.problem {
            text.push_str(&format!("  not read: {}\n", escape_line(problem)));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_use_is_said_in_the_largest_whole_unit() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        let at = |secs: u64| Some(now - Duration::from_secs(secs));
        assert_eq!(ago(now, None), "never");
        assert_eq!(ago(now, at(5)), "just now");
        assert_eq!(ago(now, at(60)), "1 minute ago");
        assert_eq!(ago(now, at(7200)), "2 hours ago");
        assert_eq!(ago(now, at(3 * 86_400 + 5)), "3 days ago");
        // A clock that went back is "just now", never negative.
        assert_eq!(ago(now, Some(now + Duration::from_secs(9))), "just now");
    }

    #[test]
    fn a_coordinator_is_recognised_by_its_role_and_flags() {
        let argv = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            target_of_args(&argv(&[
                "/usr/bin/lazaret",
                COORDINATOR_SUBCOMMAND,
                "--profile",
                "dev",
                "--workspace",
                "/home/u/p"
            ])),
            Some(("dev".to_owned(), "/home/u/p".to_owned()))
        );
        // Another role, or the flags as a launch's arguments, are not one.
        assert_eq!(
            target_of_args(&argv(&[
                "lazaret",
                "dev",
                "--",
                COORDINATOR_SUBCOMMAND,
                "--profile",
                "x",
                "--workspace",
                "y"
            ])),
            None
        );
        assert_eq!(
            target_of_args(&argv(&[
                "lazaret",
                COORDINATOR_SUBCOMMAND,
                "--profile",
                "dev"
            ])),
            None
        );
        // This test process is no coordinator.
        assert_eq!(coordinator_target(std::process::id()), None);
    }
}
