//! DomainIdV1 and ConfigurationFingerprintV1 (schemas.md "Domain and
//! configuration digests"; spec README decision: `u32be(runsc_dcache)` is
//! appended after the auto-approval rules; readiness is not fingerprinted).
use std::fmt;

use sha2::{Digest, Sha256};

use super::document::{VolumeAccess, VolumeKind};
use super::error::{ConfigError, KeyPath};
use super::grammar::ProfileName;
use super::ipv4::Ipv4Prefix;
use super::profile::SelectedProfileV1;

const DOMAIN_ID_SEPARATOR: &[u8] = b"lazaret-domain-id-v1\0";
const FINGERPRINT_SEPARATOR: &[u8] = b"lazaret-configuration-fingerprint-v1\0";

/// The u32be framing of schemas.md.
struct Framer {
    out: Vec<u8>,
}

fn framing_error(what: &'static str) -> ConfigError {
    ConfigError::Framing {
        key: KeyPath::label("(configuration fingerprint)".to_owned()),
        what,
    }
}

fn len_u32(len: usize, what: &'static str) -> Result<[u8; 4], ConfigError> {
    u32::try_from(len)
        .map(u32::to_be_bytes)
        .map_err(|_| framing_error(what))
}

impl Framer {
    fn new(separator: &[u8]) -> Self {
        Self {
            out: separator.to_vec(),
        }
    }

    /// `bytes(x) = u32be(len(x)) || x`.
    fn bytes(&mut self, x: &[u8], what: &'static str) -> Result<(), ConfigError> {
        self.out.extend_from_slice(&len_u32(x.len(), what)?);
        self.out.extend_from_slice(x);
        Ok(())
    }

    fn boolean(&mut self, b: bool) {
        self.out.push(u8::from(b));
    }

    /// `u32be(count) || bytes(item)...` with items sorted bytewise.
    fn sorted_list(
        &mut self,
        mut items: Vec<Vec<u8>>,
        what: &'static str,
    ) -> Result<(), ConfigError> {
        items.sort_unstable();
        self.ordered_list(&items, what)
    }

    /// The same framing in the given order.
    fn ordered_list(&mut self, items: &[Vec<u8>], what: &'static str) -> Result<(), ConfigError> {
        self.out.extend_from_slice(&len_u32(items.len(), what)?);
        for item in items {
            self.bytes(item, what)?;
        }
        Ok(())
    }

    fn finish(self) -> [u8; 32] {
        Sha256::digest(&self.out).into()
    }
}

/// Frames one item as `bytes(a) || bytes(b) ...` into a fresh buffer.
fn item(parts: &[&[u8]], what: &'static str) -> Result<Vec<u8>, ConfigError> {
    let mut f = Framer { out: Vec::new() };
    for p in parts {
        f.bytes(p, what)?;
    }
    Ok(f.out)
}

macro_rules! digest_type {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 32]);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&hex::encode(self.0))
            }
        }
    };
}

digest_type!(DomainIdV1, "SHA-256 Domain ID (spec 3.2).");
digest_type!(
    ConfigurationFingerprintV1,
    "SHA-256 configuration fingerprint (schemas.md)."
);

impl DomainIdV1 {
    /// SHA-256 of the separator, `bytes(profile)` and `bytes(workspace)`.
    pub fn compute(profile: &ProfileName, canonical_workspace: &[u8]) -> Result<Self, ConfigError> {
        let mut f = Framer::new(DOMAIN_ID_SEPARATOR);
        f.bytes(profile.as_str().as_bytes(), "the profile name")?;
        f.bytes(canonical_workspace, "the workspace path")?;
        Ok(Self(f.finish()))
    }
}

/// `bytes(sandbox_name) || bytes(host_name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentReferenceRecord {
    pub sandbox_name: String,
    pub host_name: String,
}

/// A volume with its canonical host source (raw pathname bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVolume {
    pub canonical_host_source: Vec<u8>,
    pub container_path: String,
    pub kind: VolumeKind,
    pub access: VolumeAccess,
    pub create: bool,
}

/// An auto-approval rule with its canonical executable path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAutoApprovalRule {
    pub canonical_executable: Vec<u8>,
    pub args: Vec<String>,
    pub allow_extra_args: bool,
}

/// The fingerprinted record of the selected profile. Environment values
/// have no field here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigurationFingerprintRecordV1 {
    pub selected_profile: String,
    pub storage_root: Vec<u8>,
    pub runtime_root: Vec<u8>,
    pub image: String,
    pub isolate_gitignored: bool,
    pub persistent_dirs: Vec<String>,
    pub environment_references: Vec<EnvironmentReferenceRecord>,
    pub volumes: Vec<ResolvedVolume>,
    pub effective_allow_prefixes: Vec<Ipv4Prefix>,
    pub effective_deny_prefixes: Vec<Ipv4Prefix>,
    pub escalation_enabled: bool,
    pub auto_approval_rules: Vec<ResolvedAutoApprovalRule>,
    pub runsc_dcache: u32,
}

impl ConfigurationFingerprintRecordV1 {
    /// The record of `selected` with the canonical paths the effects layer
    /// resolved.
    pub fn new(
        selected: &SelectedProfileV1,
        storage_root: Vec<u8>,
        runtime_root: Vec<u8>,
        volumes: Vec<ResolvedVolume>,
        auto_approval_rules: Vec<ResolvedAutoApprovalRule>,
    ) -> Self {
        Self {
            selected_profile: selected.name().as_str().to_owned(),
            storage_root,
            runtime_root,
            image: selected.image().as_str().to_owned(),
            isolate_gitignored: selected.isolate_gitignored(),
            persistent_dirs: selected
                .persistent_dirs()
                .map(|p| p.as_str().to_owned())
                .collect(),
            environment_references: selected
                .env_references()
                .iter()
                .map(|(_, s, h)| EnvironmentReferenceRecord {
                    sandbox_name: s.as_str().to_owned(),
                    host_name: h.as_str().to_owned(),
                })
                .collect(),
            volumes,
            effective_allow_prefixes: selected.policy().allow().to_vec(),
            effective_deny_prefixes: selected.policy().deny().to_vec(),
            escalation_enabled: selected.escalation().enabled,
            auto_approval_rules,
            runsc_dcache: selected.runsc_dcache(),
        }
    }

    /// The complete hash preimage.
    pub fn preimage(&self) -> Result<Vec<u8>, ConfigError> {
        let mut f = Framer::new(FINGERPRINT_SEPARATOR);
        f.bytes(self.selected_profile.as_bytes(), "the profile name")?;
        f.bytes(&self.storage_root, "the storage root")?;
        f.bytes(&self.runtime_root, "the runtime root")?;
        f.bytes(self.image.as_bytes(), "the image")?;
        f.boolean(self.isolate_gitignored);
        // "A persistent-path item is bytes(path)"; the list frames each item
        // encoding again and sorts the complete encodings.
        let dirs = self
            .persistent_dirs
            .iter()
            .map(|p| item(&[p.as_bytes()], "persistent_dirs"))
            .collect::<Result<Vec<_>, _>>()?;
        f.sorted_list(dirs, "persistent_dirs")?;
        let env = self
            .environment_references
            .iter()
            .map(|r| item(&[r.sandbox_name.as_bytes(), r.host_name.as_bytes()], "env"))
            .collect::<Result<Vec<_>, _>>()?;
        f.sorted_list(env, "env")?;
        let volumes = self
            .volumes
            .iter()
            .map(|v| {
                let mut out = item(
                    &[&v.canonical_host_source, v.container_path.as_bytes()],
                    "volumes",
                )?;
                out.push(match v.kind {
                    VolumeKind::File => 0,
                    VolumeKind::Directory => 1,
                });
                out.push(match v.access {
                    VolumeAccess::ReadOnly => 0,
                    VolumeAccess::ReadWrite => 1,
                });
                out.push(u8::from(v.create));
                Ok(out)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        f.sorted_list(volumes, "volumes")?;
        let prefixes = |list: &[Ipv4Prefix]| list.iter().map(|p| p.encoding().to_vec()).collect();
        f.sorted_list(prefixes(&self.effective_allow_prefixes), "allow prefixes")?;
        f.sorted_list(prefixes(&self.effective_deny_prefixes), "deny prefixes")?;
        f.boolean(self.escalation_enabled);
        let rules = self
            .auto_approval_rules
            .iter()
            .map(|r| {
                let mut rule = Framer { out: Vec::new() };
                rule.bytes(&r.canonical_executable, "auto_approve")?;
                // "an argument item is bytes(arg)", framed again by the
                // declared-order list.
                let args = r
                    .args
                    .iter()
                    .map(|a| item(&[a.as_bytes()], "auto_approve args"))
                    .collect::<Result<Vec<_>, _>>()?;
                rule.ordered_list(&args, "auto_approve args")?;
                rule.boolean(r.allow_extra_args);
                Ok(rule.out)
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        f.sorted_list(rules, "auto_approve")?;
        f.out.extend_from_slice(&self.runsc_dcache.to_be_bytes());
        Ok(f.out)
    }

    /// SHA-256 of [`Self::preimage`].
    pub fn fingerprint(&self) -> Result<ConfigurationFingerprintV1, ConfigError> {
        Ok(ConfigurationFingerprintV1(
            Sha256::digest(self.preimage()?).into(),
        ))
    }
}
