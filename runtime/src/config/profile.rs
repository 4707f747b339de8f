//! Typed, grammar-checked configuration (every profile) and the selected
//! profile after layout, network and readiness validation (spec 3.2).
use std::collections::BTreeMap;

use super::decode::SCHEMA_ID;
use super::document::{
    RawAutoApproval, RawDocument, RawProfile, RawVolume, VolumeAccess, VolumeKind,
};
use super::error::{ConfigError, KeyPath};
use super::grammar::{nul_free, EnvName, HostPathDecl, ImageReference, ProfileName, SandboxPath};
use super::ipv4::Ipv4Prefix;
use super::layout::SandboxLayoutV1;
use super::network::{DerivedNetworkPolicy, EffectivePolicy};
use super::readiness::ReadinessV1;

/// Default `runtime.runsc_dcache` (spec 3.2).
pub const RUNSC_DCACHE_DEFAULT: u32 = 50_000;
/// Largest `runtime.runsc_dcache` (spec 3.2).
pub const RUNSC_DCACHE_MAX: u32 = 262_144;
/// The share of runsc's descriptor budget the dentry cache may hold: each
/// retained dentry keeps host descriptors open (directfs), so a cache near
/// the budget leaves none for the files the sandbox opens or creates. The
/// same share holds through the ignored-path router (spec 3.5): each file
/// dentry runsc retains there costs the Runtime Supervisor, which has the
/// same budget, the read and write handles runsc keeps open (its inodes
/// hold none).
pub const DCACHE_BUDGET_SHARE: u64 = 4;

/// The `--dcache` runsc gets: the configured `runtime.runsc_dcache`, at
/// most a quarter of the descriptor budget `nofile_max` (the hard
/// `RLIMIT_NOFILE` runsc inherits). With the default 50,000 and a hard
/// limit of 20,000 the sandbox could not create more than about 8,000
/// files in the workspace or a State Anchor (`EMFILE`, measured);
/// docs/resources.md "Descriptors".
pub fn effective_dcache(configured: u32, nofile_max: u64) -> u32 {
    u32::try_from(nofile_max / DCACHE_BUDGET_SHARE)
        .map_or(configured, |share| configured.min(share))
}

/// The most entries any configuration list or map may hold. The pairwise
/// layout, overlap and duplicate rules are quadratic; this bound keeps a
/// 1 MiB document's validation work bounded (not a spec number).
pub const LIST_ITEMS_MAX: usize = 1024;

/// Refuses a list or map longer than [`LIST_ITEMS_MAX`].
fn bounded(key: &KeyPath, len: usize) -> Result<(), ConfigError> {
    if len <= LIST_ITEMS_MAX {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            key: key.clone(),
            found: format!("{len} entries"),
            expected: "at most 1024 entries",
        })
    }
}

/// Persistent paths selected when `persistent_dirs` is omitted (spec 3.2).
pub const DEFAULT_PERSISTENT_DIRS: [&str; 5] = ["/root", "/usr", "/var", "/etc", "/opt"];

/// A decoded v1 document: every profile structurally valid, nothing resolved.
#[derive(Debug)]
pub struct TrustedHostConfigV1 {
    data_root: Option<(KeyPath, HostPathDecl)>,
    default_allow: Vec<(KeyPath, Ipv4Prefix)>,
    default_deny: Vec<(KeyPath, Ipv4Prefix)>,
    runsc_dcache: u32,
    profiles: BTreeMap<ProfileName, ProfileV1>,
}

/// One grammar-checked profile.
#[derive(Debug, Clone)]
pub struct ProfileV1 {
    key: KeyPath,
    image: ImageReference,
    isolate_gitignored: bool,
    persistent_dirs: Vec<(KeyPath, SandboxPath)>,
    allow_egress: Vec<(KeyPath, Ipv4Prefix)>,
    deny_egress: Vec<(KeyPath, Ipv4Prefix)>,
    readiness: Option<ReadinessV1>,
    env: Vec<(KeyPath, EnvName, EnvName)>,
    volumes: Vec<VolumeDecl>,
    escalation: EscalationDecl,
}

/// A declared volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeDecl {
    pub key: KeyPath,
    pub host: HostPathDecl,
    pub container: SandboxPath,
    pub kind: VolumeKind,
    pub access: VolumeAccess,
    pub create: bool,
}

/// The declared escalation table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationDecl {
    pub enabled: bool,
    pub auto_approve: Vec<AutoApprovalDecl>,
}

/// A declared auto-approval rule; its executable is not yet canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoApprovalDecl {
    pub key: KeyPath,
    pub executable: HostPathDecl,
    pub args: Vec<String>,
    pub allow_extra_args: bool,
}

fn prefixes(key: &KeyPath, raw: &[String]) -> Result<Vec<(KeyPath, Ipv4Prefix)>, ConfigError> {
    bounded(key, raw.len())?;
    raw.iter()
        .enumerate()
        .map(|(i, s)| {
            let k = key.index(i);
            Ipv4Prefix::parse(&k, s).map(|p| (k, p))
        })
        .collect()
}

impl TrustedHostConfigV1 {
    pub(crate) fn from_raw(raw: RawDocument) -> Result<Self, ConfigError> {
        if raw.schema != SCHEMA_ID {
            return Err(ConfigError::WrongSchema {
                found: super::error::describe(&raw.schema),
                expected: SCHEMA_ID,
            });
        }
        let data_root = match &raw.storage.data_root {
            Some(s) => {
                let key = KeyPath::root().key("storage").key("data_root");
                nul_free(&key, s)?;
                Some((key.clone(), HostPathDecl::parse(&key, s)?))
            }
            None => None,
        };
        let network = KeyPath::root().key("network");
        let default_allow = prefixes(&network.key("default_allow"), &raw.network.default_allow)?;
        let default_deny = prefixes(&network.key("default_deny"), &raw.network.default_deny)?;
        let runsc_dcache = raw.runtime.runsc_dcache.unwrap_or(RUNSC_DCACHE_DEFAULT);
        if runsc_dcache > RUNSC_DCACHE_MAX {
            return Err(ConfigError::Invalid {
                key: KeyPath::root().key("runtime").key("runsc_dcache"),
                found: runsc_dcache.to_string(),
                expected: "an integer in 0..=262144",
            });
        }
        if raw.profiles.is_empty() {
            return Err(ConfigError::Invalid {
                key: KeyPath::root().key("profiles"),
                found: "no profiles".to_owned(),
                expected: "at least one [profiles.NAME] table",
            });
        }
        let mut profiles = BTreeMap::new();
        for (name, profile) in &raw.profiles {
            let key = KeyPath::root().key("profiles").key(name);
            let parsed_name = ProfileName::parse(&key, name)?;
            profiles.insert(parsed_name, ProfileV1::from_raw(key, profile)?);
        }
        Ok(Self {
            data_root,
            default_allow,
            default_deny,
            runsc_dcache,
            profiles,
        })
    }

    /// `storage.data_root`, the Storage Root of every profile.
    pub fn data_root(&self) -> Option<&HostPathDecl> {
        self.data_root.as_ref().map(|(_, p)| p)
    }

    /// Profile names in sorted order (declaration order never selects one).
    pub fn profile_names(&self) -> impl Iterator<Item = &ProfileName> {
        self.profiles.keys()
    }

    /// Selects exactly the named profile and validates its layout, network
    /// and readiness. Every other profile is dropped here.
    pub fn select(
        self,
        name: &str,
        layout: &SandboxLayoutV1,
    ) -> Result<SelectedProfileV1, ConfigError> {
        let available = self
            .profiles
            .keys()
            .map(ProfileName::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        let Some((profile_name, profile)) =
            self.profiles.into_iter().find(|(n, _)| n.as_str() == name)
        else {
            return Err(ConfigError::UnknownProfile {
                name: name.to_owned(),
                available,
            });
        };
        layout.check_persistent(&profile.persistent_dirs)?;
        let containers: Vec<(KeyPath, SandboxPath)> = profile
            .volumes
            .iter()
            .map(|v| (v.key.key("container"), v.container.clone()))
            .collect();
        layout.check_volumes(&profile.persistent_dirs, &containers)?;
        let policy = EffectivePolicy::derive(
            &self.default_allow,
            &self.default_deny,
            &profile.allow_egress,
            &profile.deny_egress,
        )?;
        if let Some(readiness) = &profile.readiness {
            readiness.check_against(&profile.key.key("readiness"), &policy)?;
        }
        let derived_policy = policy.derived_policy();
        Ok(SelectedProfileV1 {
            name: profile_name,
            data_root: self.data_root,
            runsc_dcache: self.runsc_dcache,
            profile,
            policy,
            derived_policy,
        })
    }
}

impl ProfileV1 {
    fn from_raw(key: KeyPath, raw: &RawProfile) -> Result<Self, ConfigError> {
        let image_key = key.key("image");
        nul_free(&image_key, &raw.image)?;
        let image = ImageReference::parse(&image_key, &raw.image)?;
        let persistent_key = key.key("persistent_dirs");
        let persistent_dirs = match &raw.persistent_dirs {
            Some(list) => {
                bounded(&persistent_key, list.len())?;
                list.iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let k = persistent_key.index(i);
                        nul_free(&k, s)?;
                        SandboxPath::parse(&k, s).map(|p| (k, p))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => DEFAULT_PERSISTENT_DIRS
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let k = KeyPath::label(format!("{persistent_key} (default entry {i})"));
                    SandboxPath::parse(&k, s).map(|p| (k, p))
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let allow_egress = prefixes(&key.key("allow_egress"), &raw.allow_egress)?;
        let deny_egress = prefixes(&key.key("deny_egress"), &raw.deny_egress)?;
        let readiness = match &raw.readiness {
            Some(r) => Some(ReadinessV1::from_raw(&key.key("readiness"), r)?),
            None => None,
        };
        let env_key = key.key("env");
        bounded(&env_key, raw.env.len())?;
        bounded(&key.key("volumes"), raw.volumes.len())?;
        let mut env = Vec::with_capacity(raw.env.len());
        for (name, value) in &raw.env {
            let k = env_key.key(name);
            let sandbox = EnvName::parse(&k, name)?;
            nul_free(&k, value)?;
            let host = EnvName::parse_reference(&k, value)?;
            env.push((k, sandbox, host));
        }
        let volumes = raw
            .volumes
            .iter()
            .enumerate()
            .map(|(i, v)| VolumeDecl::from_raw(key.key("volumes").index(i), v))
            .collect::<Result<Vec<_>, _>>()?;
        let escalation = EscalationDecl::from_raw(&key.key("escalation"), raw)?;
        Ok(Self {
            key,
            image,
            isolate_gitignored: raw.isolate_gitignored.unwrap_or(true),
            persistent_dirs,
            allow_egress,
            deny_egress,
            readiness,
            env,
            volumes,
            escalation,
        })
    }
}

impl VolumeDecl {
    fn from_raw(key: KeyPath, raw: &RawVolume) -> Result<Self, ConfigError> {
        let host_key = key.key("host");
        nul_free(&host_key, &raw.host)?;
        let host = HostPathDecl::parse_volume(&host_key, &raw.host)?;
        let container_key = key.key("container");
        nul_free(&container_key, &raw.container)?;
        let container = SandboxPath::parse(&container_key, &raw.container)?;
        let create = raw.create.unwrap_or(false);
        if create && !(raw.kind == VolumeKind::Directory && host.is_profile_dir()) {
            return Err(ConfigError::Invalid {
                key: key.key("create"),
                found: format!("true for a {} volume at {host}", raw.kind.as_str()),
                expected:
                    "create = true only for kind = \"directory\" with host beneath {profile_dir}/",
            });
        }
        Ok(Self {
            key,
            host,
            container,
            kind: raw.kind,
            access: raw.access.unwrap_or(VolumeAccess::ReadWrite),
            create,
        })
    }
}

impl EscalationDecl {
    fn from_raw(key: &KeyPath, raw: &RawProfile) -> Result<Self, ConfigError> {
        let enabled = raw.escalation.enabled.unwrap_or(false);
        let rules_key = key.key("auto_approve");
        bounded(&rules_key, raw.escalation.auto_approve.len())?;
        if !enabled && !raw.escalation.auto_approve.is_empty() {
            return Err(ConfigError::Invalid {
                key: rules_key,
                found: format!(
                    "{} rules while escalation is disabled",
                    raw.escalation.auto_approve.len()
                ),
                expected: "auto_approve rules only with escalation.enabled = true",
            });
        }
        let mut rules: Vec<AutoApprovalDecl> =
            Vec::with_capacity(raw.escalation.auto_approve.len());
        for (i, r) in raw.escalation.auto_approve.iter().enumerate() {
            let rule = AutoApprovalDecl::from_raw(rules_key.index(i), r)?;
            if let Some(dup) = rules.iter().find(|o| o.same_rule(&rule)) {
                return Err(ConfigError::Conflict {
                    key: rule.key,
                    other: dup.key.clone(),
                    problem: "exact duplicate auto-approval rule; expected distinct rules"
                        .to_owned(),
                });
            }
            rules.push(rule);
        }
        Ok(Self {
            enabled,
            auto_approve: rules,
        })
    }
}

impl AutoApprovalDecl {
    fn from_raw(key: KeyPath, raw: &RawAutoApproval) -> Result<Self, ConfigError> {
        let exe_key = key.key("executable");
        nul_free(&exe_key, &raw.executable)?;
        let executable = HostPathDecl::parse(&exe_key, &raw.executable)?;
        bounded(&key.key("args"), raw.args.len())?;
        for (i, a) in raw.args.iter().enumerate() {
            nul_free(&key.key("args").index(i), a)?;
        }
        let allow_extra_args = raw.allow_extra_args.unwrap_or(false);
        if allow_extra_args && raw.args.is_empty() {
            return Err(ConfigError::Invalid {
                key: key.key("allow_extra_args"),
                found: "true with no args".to_owned(),
                expected: "at least one configured argument when allow_extra_args = true",
            });
        }
        Ok(Self {
            key,
            executable,
            args: raw.args.clone(),
            allow_extra_args,
        })
    }

    fn same_rule(&self, other: &Self) -> bool {
        self.executable == other.executable
            && self.args == other.args
            && self.allow_extra_args == other.allow_extra_args
    }
}

/// The selected profile after every pure check; filesystem and environment
/// resolution happen next, in the effects layer.
#[derive(Debug)]
pub struct SelectedProfileV1 {
    name: ProfileName,
    data_root: Option<(KeyPath, HostPathDecl)>,
    runsc_dcache: u32,
    profile: ProfileV1,
    policy: EffectivePolicy,
    derived_policy: DerivedNetworkPolicy,
}

impl SelectedProfileV1 {
    pub fn name(&self) -> &ProfileName {
        &self.name
    }
    pub fn key(&self) -> &KeyPath {
        &self.profile.key
    }
    pub fn data_root(&self) -> Option<(&KeyPath, &HostPathDecl)> {
        self.data_root.as_ref().map(|(k, p)| (k, p))
    }
    pub fn runsc_dcache(&self) -> u32 {
        self.runsc_dcache
    }
    pub fn image(&self) -> &ImageReference {
        &self.profile.image
    }
    pub fn isolate_gitignored(&self) -> bool {
        self.profile.isolate_gitignored
    }
    pub fn persistent_dirs(&self) -> impl Iterator<Item = &SandboxPath> {
        self.profile.persistent_dirs.iter().map(|(_, p)| p)
    }
    /// `(key path, sandbox name, host reference name)` per env entry.
    pub fn env_references(&self) -> &[(KeyPath, EnvName, EnvName)] {
        &self.profile.env
    }
    pub fn volumes(&self) -> &[VolumeDecl] {
        &self.profile.volumes
    }
    pub fn escalation(&self) -> &EscalationDecl {
        &self.profile.escalation
    }
    pub fn readiness(&self) -> Option<&ReadinessV1> {
        self.profile.readiness.as_ref()
    }
    pub fn policy(&self) -> &EffectivePolicy {
        &self.policy
    }
    pub fn derived_policy(&self) -> &DerivedNetworkPolicy {
        &self.derived_policy
    }
}
