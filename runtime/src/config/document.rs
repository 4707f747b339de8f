//! The closed v1 TOML shape as serde structs (schemas.md "Trusted host
//! configuration" table). Every struct denies unknown fields; no field has an
//! alias and nothing is flattened, so no parser default can make an unknown
//! field meaningful. Values here are still unvalidated strings; `profile.rs`
//! turns them into typed values.
use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDocument {
    pub(crate) schema: String,
    #[serde(default)]
    pub(crate) storage: RawStorage,
    #[serde(default)]
    pub(crate) network: RawNetwork,
    #[serde(default)]
    pub(crate) runtime: RawRuntime,
    pub(crate) profiles: BTreeMap<String, RawProfile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStorage {
    pub(crate) data_root: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    #[serde(default)]
    pub(crate) default_allow: Vec<String>,
    #[serde(default)]
    pub(crate) default_deny: Vec<String>,
}

/// `[runtime]` (spec 3.2; spec README conflict decision).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRuntime {
    pub(crate) runsc_dcache: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    pub(crate) image: String,
    pub(crate) isolate_gitignored: Option<bool>,
    pub(crate) persistent_dirs: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) allow_egress: Vec<String>,
    #[serde(default)]
    pub(crate) deny_egress: Vec<String>,
    pub(crate) readiness: Option<RawReadiness>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) volumes: Vec<RawVolume>,
    #[serde(default)]
    pub(crate) escalation: RawEscalation,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReadiness {
    pub(crate) denied: Vec<RawSocketTarget>,
    pub(crate) permitted: Vec<RawSocketTarget>,
    pub(crate) dns: Vec<RawDnsTarget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSocketTarget {
    pub(crate) address: String,
    pub(crate) port: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDnsTarget {
    pub(crate) resolver: String,
    pub(crate) query: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVolume {
    pub(crate) host: String,
    pub(crate) container: String,
    pub(crate) kind: VolumeKind,
    pub(crate) access: Option<VolumeAccess>,
    pub(crate) create: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEscalation {
    pub(crate) enabled: Option<bool>,
    #[serde(default)]
    pub(crate) auto_approve: Vec<RawAutoApproval>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAutoApproval {
    pub(crate) executable: String,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    pub(crate) allow_extra_args: Option<bool>,
}

/// `volume.kind`. Fingerprint byte: file 0x00, directory 0x01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeKind {
    File,
    Directory,
}

/// `volume.access`. Fingerprint byte: read-only 0x00, read-write 0x01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeAccess {
    ReadOnly,
    ReadWrite,
}

impl VolumeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
        }
    }
}

impl VolumeAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::ReadWrite => "read-write",
        }
    }
}
