//! Trusted host configuration v1 (spec 3.2; schemas.md "Trusted host
//! configuration", "Domain and configuration digests", "Derived network
//! policy"). Everything here is pure: file bytes and the host environment are
//! inputs, nothing touches the filesystem.
mod decode;
mod digest;
mod document;
mod environment;
mod error;
mod grammar;
mod ipv4;
mod layout;
mod locate;
mod network;
mod overlap;
mod profile;
mod readiness;

pub use decode::{decode_document, SCHEMA_ID, SOURCE_SIZE_MAX_BYTES};
pub use digest::{
    ConfigurationFingerprintRecordV1, ConfigurationFingerprintV1, DomainIdV1,
    EnvironmentReferenceRecord, ResolvedAutoApprovalRule, ResolvedVolume,
};
pub use document::{VolumeAccess, VolumeKind};
pub use environment::{resolve_environment, ResolvedEnvironment, SecretValue};
pub use error::{ConfigError, KeyPath};
pub use grammar::{EnvName, HostPathDecl, ImageReference, ProfileName, SandboxPath};
pub use ipv4::Ipv4Prefix;
pub use layout::{DestinationClass, SandboxLayoutV1};
pub use locate::{
    config_source_path, expand_host_path, home_dir, runtime_root_path, storage_root_path,
    HostEnvironment,
};
pub use network::{
    AddressFamily, AddressFamilyDisposition, DefaultAction, DerivedNetworkPolicy, Disposition,
    EffectivePolicy, PolicyAction, PolicyDecodeError, PolicyDigest, PrefixRule, Resolver,
    DERIVED_POLICY_SCHEMA_ID, RESERVED_TOPOLOGY,
};
pub use overlap::{check_overlaps, TreeEntry, TreeRole};
pub use profile::{
    effective_dcache, AutoApprovalDecl, EscalationDecl, ProfileV1, SelectedProfileV1,
    TrustedHostConfigV1, VolumeDecl, DEFAULT_PERSISTENT_DIRS, LIST_ITEMS_MAX, RUNSC_DCACHE_DEFAULT,
    RUNSC_DCACHE_MAX,
};
pub use readiness::{DnsTarget, ReadinessV1, SocketTarget};
