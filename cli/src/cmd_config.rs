//! `lazaret config check` and `lazaret config init` (spec 3.2).
use std::path::{Path, PathBuf};

use crate::report::{self, errln, outln};

use clap::{Args, Subcommand};
use lazaret_effects::config_init::{write_new_config, InitError};
use lazaret_effects::config_resolve::{
    load_configuration, LoadError, LoadRequest, ResolvedDomainConfiguration,
};
use lazaret_effects::confined::ConfinedSys;
use lazaret_runtime::config::{config_source_path, ConfigError, HostEnvironment, SandboxLayoutV1};
use lazaret_runtime::display::{escape_line, escape_path};
use serde_json::json;

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Load PROFILE exactly as a launch would and print the resolved result.
    Check {
        /// The profile to check (required; never inferred).
        profile: String,
        /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
        /// else ~/.config/lazaret/config.toml).
        #[arg(long, value_name = "FILE")]
        config: Option<String>,
        /// Agent Workspace directory (default: the current directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a commented starter configuration (mode 0600); never overwrites.
    Init {
        /// Where to write (default: the default configuration path).
        #[arg(long, value_name = "FILE")]
        config: Option<String>,
    },
}

/// The one reporting layer of `lazaret config`: each variant's message
/// names the file, key path and expectation.
#[derive(Debug, thiserror::Error)]
pub enum ConfigCommandError {
    #[error("lazaret refuses to run as root (uid 0); run it as the user it acts for (spec SR-1)")]
    Root,
    #[error("reading the invoking user's identity failed: {0}")]
    User(#[source] std::io::Error),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("config init: {0}")]
    Locate(#[source] ConfigError),
    #[error("config init: {0}")]
    Init(#[from] InitError),
    #[error("the sandbox layout could not be constructed: {0}")]
    Layout(#[source] ConfigError),
    #[error("writing the report failed: {0}")]
    Output(#[source] std::io::Error),
}

/// Runs `lazaret config ...` with explicit kernel and environment access.
pub fn run(
    args: &ConfigArgs,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
) -> Result<(), ConfigCommandError> {
    // SR-1: commands that act for a user refuse uid 0.
    let user = sys.user_ids().map_err(ConfigCommandError::User)?;
    if user.uid == 0 {
        return Err(ConfigCommandError::Root);
    }
    match &args.command {
        ConfigCommand::Check {
            profile,
            config,
            workspace,
            json,
        } => {
            let layout = SandboxLayoutV1::production().map_err(ConfigCommandError::Layout)?;
            let workspace = workspace.clone().unwrap_or_else(|| PathBuf::from("."));
            let request = LoadRequest {
                profile,
                config: config.as_deref(),
                workspace: &workspace,
                env,
                layout: &layout,
            };
            let resolved = load_configuration(sys, &request)?;
            let shadowed = shadowing_warning(profile, &crate::command_names());
            if let Some(warning) = &shadowed {
                errln!("lazaret: warning: {warning}");
            }
            let printed = if *json {
                let mut document = json_report(&resolved);
                document["warnings"] = json!(shadowed.iter().collect::<Vec<_>>());
                let mut s = document.to_string();
                s.push('\n');
                report::print_json(&s)
            } else {
                report::print_text(&text_report(&resolved))
            };
            printed.map_err(ConfigCommandError::Output)
        }
        ConfigCommand::Init { config } => {
            let path =
                config_source_path(config.as_deref(), env).map_err(ConfigCommandError::Locate)?;
            let written = write_new_config(sys, &path, STARTER_CONFIG.as_bytes(), user.uid)?;
            outln!("wrote {}", escape_path(&written));
            Ok(())
        }
    }
}

/// The starter configuration written by `config init`.
pub const STARTER_CONFIG: &str = r#"# Lazaret trusted host configuration (see docs/config.md).
# This file must be owned by you or root, have one hard link and no group or
# other write permission.
schema = "lazaret-trusted-host-config-v1"

# [storage]
# data_root = "~/.local/share/lazaret"   # default: $XDG_DATA_HOME/lazaret

# [network]
# default_allow = []                      # IPv4 prefixes allowed for every profile
# default_deny = []                       # IPv4 prefixes denied for every profile

# [runtime]
# runsc_dcache = 50000                    # 0..=262144

[profiles.default]
image = "docker.io/library/debian:bookworm"
# isolate_gitignored = true
# persistent_dirs = ["/root", "/usr", "/var", "/etc", "/opt"]
# allow_egress = []
# deny_egress = []
# env = { GITHUB_TOKEN = "env:GITHUB_TOKEN" }   # references only, never values
#
# [[profiles.default.volumes]]
# host = "{profile_dir}/cache"
# container = "/root/.cache"
# kind = "directory"
# access = "read-write"
# create = true
#
# [profiles.default.escalation]
# enabled = false
# auto_approve = [{ executable = "/usr/bin/git", args = ["fetch"], allow_extra_args = true }]
"#;

/// The warning for a profile whose name is one of Lazaret's commands: the
/// short form `lazaret NAME` runs the command (spec README decision "Command
/// names and profile names").
fn shadowing_warning(profile: &str, commands: &[String]) -> Option<String> {
    commands.iter().any(|c| c == profile).then(|| {
        format!(
            "profile '{profile}' has the name of the command `lazaret {profile}`, which \
             `lazaret {profile}` runs; launch this profile with `lazaret run {profile}`"
        )
    })
}

fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn json_report(r: &ResolvedDomainConfiguration) -> serde_json::Value {
    let s = r.selected();
    let policy = s.policy();
    json!({
        "profile": s.name().as_str(),
        "config": lossy(&r.source_label()),
        "workspace": lossy(&r.workspace().label()),
        "domain_id": r.domain_id().to_string(),
        "configuration_fingerprint": r.fingerprint().to_string(),
        "policy_digest": r.policy_digest().to_string(),
        "image": s.image().as_str(),
        "isolate_gitignored": s.isolate_gitignored(),
        "storage_root": lossy(&r.storage_root().label()),
        "runtime_root": lossy(&r.runtime_root().label()),
        "profile_dir": lossy(&r.profile_dir().label()),
        "persistent_dirs": s.persistent_dirs().map(|p| p.as_str()).collect::<Vec<_>>(),
        "volumes": r.volumes().iter().map(|v| json!({
            "host": lossy(&v.source().label()),
            "container": v.decl().container.as_str(),
            "kind": v.decl().kind.as_str(),
            "access": v.decl().access.as_str(),
            "create": v.decl().create,
        })).collect::<Vec<_>>(),
        "env": s.env_references().iter().map(|(_, sandbox, host)| json!({
            "name": sandbox.as_str(),
            "reference": format!("env:{host}"),
        })).collect::<Vec<_>>(),
        "allow": policy.allow().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "deny": policy.deny().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "escalation": {
            "enabled": s.escalation().enabled,
            "auto_approve": r.auto_approval_rules().iter().map(|rule| json!({
                "executable": lossy(&rule.executable().label()),
                "args": rule.rule().args,
                "allow_extra_args": rule.rule().allow_extra_args,
            })).collect::<Vec<_>>(),
        },
        "runsc_dcache": r.runsc_dcache(),
    })
}

fn list<T: ToString>(items: impl Iterator<Item = T>) -> String {
    let v: Vec<String> = items.map(|i| i.to_string()).collect();
    if v.is_empty() {
        "(none)".to_owned()
    } else {
        v.join(" ")
    }
}

/// A path in the text report: every control escaped, and bytes that are not
/// UTF-8 as `\xNN` (spec README 'Terminal output hygiene').
fn shown(p: &Path) -> String {
    escape_path(p).into_owned()
}

/// The human report: one line per value, each value escaped to one line.
fn text_report(r: &ResolvedDomainConfiguration) -> String {
    let s = r.selected();
    let mut out = String::new();
    let mut line = |k: &str, v: String| {
        out.push_str(&format!("{k:<27} {}\n", escape_line(&v)));
    };
    line("profile:", s.name().to_string());
    line("configuration:", shown(&r.source_label()));
    line("workspace:", shown(&r.workspace().label()));
    line("image:", s.image().to_string());
    line("isolate_gitignored:", s.isolate_gitignored().to_string());
    line("storage root:", shown(&r.storage_root().label()));
    line("runtime root:", shown(&r.runtime_root().label()));
    line("profile directory:", shown(&r.profile_dir().label()));
    line("persistent dirs:", list(s.persistent_dirs()));
    for v in r.volumes() {
        let d = v.decl();
        line(
            "volume:",
            format!(
                "{} -> {} ({}, {}{})",
                shown(&v.source().label()),
                d.container,
                d.kind.as_str(),
                d.access.as_str(),
                if d.create { ", create" } else { "" }
            ),
        );
    }
    line(
        "env (names only):",
        list(
            s.env_references()
                .iter()
                .map(|(_, n, h)| format!("{n}=env:{h}")),
        ),
    );
    line("allow:", list(s.policy().allow().iter()));
    line("deny:", list(s.policy().deny().iter()));
    line(
        "escalation:",
        if s.escalation().enabled {
            "enabled"
        } else {
            "disabled"
        }
        .to_owned(),
    );
    for rule in r.auto_approval_rules() {
        let mut text = shown(&rule.executable().label());
        for a in &rule.rule().args {
            text.push(' ');
            text.push_str(&format!("{a:?}"));
        }
        if rule.rule().allow_extra_args {
            text.push_str(" ...");
        }
        line("auto-approve:", text);
    }
    line("runsc_dcache:", r.runsc_dcache().to_string());
    line("domain id:", r.domain_id().to_string());
    line("configuration fingerprint:", r.fingerprint().to_string());
    line("policy digest:", r.policy_digest().to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::shadowing_warning;

    #[test]
    fn only_a_command_name_is_shadowed_and_the_warning_names_the_run_form() {
        let commands = crate::command_names();
        for name in ["doctor", "config", "state", "run", "help", "model", "trace"] {
            let w = shadowing_warning(name, &commands).unwrap_or_default();
            assert!(w.contains(&format!("lazaret run {name}")), "{name}: {w}");
        }
        for name in ["default", "agent", "doctors", "__coordinator"] {
            assert_eq!(shadowing_warning(name, &commands), None, "{name}");
        }
    }
}
