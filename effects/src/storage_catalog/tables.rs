//! redb table definitions of the Storage Catalog (schemas.md "Storage
//! Catalog"). The lease key is the fixed-width byte string
//! `prepared_artifact_id (32) | domain_id (32) | generation_id (u64, big-endian)`,
//! so the table's byte order is the order of [`ArtifactLease`]'s fields.
use super::ArtifactLease;
use lazaret_runtime::records::ids::{DomainId, GenerationId, PreparedArtifactId};
use redb::TableDefinition;

/// The one row of [`METADATA`].
pub const METADATA_KEY: &str = "metadata";

/// schemas.md "Storage Catalog" `StoreMetadata`: `METADATA_KEY` -> postcard
/// `StoreMetadata { schema_id, schema_version }`. Same table name and row
/// shape as the Domain Store's, so either store opened as the other refuses
/// on its identity.
pub const METADATA: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("store_metadata");

const ARTIFACT_LEN: usize = 32;
const DOMAIN_LEN: usize = 32;
const GENERATION_LEN: usize = 8;
/// Width of a lease key in bytes.
pub const LEASE_KEY_LEN: usize = ARTIFACT_LEN + DOMAIN_LEN + GENERATION_LEN;

/// A lease key: see the module comment.
pub type LeaseKey = [u8; LEASE_KEY_LEN];

/// schemas.md "Storage Catalog" `ArtifactLease`: the exact
/// `(prepared_artifact_id, domain_id, generation_id)` triple is the whole
/// row, so it is the key and the value is empty.
pub const LEASES: TableDefinition<'_, LeaseKey, ()> = TableDefinition::new("artifact_leases");

/// Encodes a lease as its key.
pub fn lease_key(lease: &ArtifactLease) -> LeaseKey {
    let mut key = [0u8; LEASE_KEY_LEN];
    let (artifact, rest) = key.split_at_mut(ARTIFACT_LEN);
    let (domain, generation) = rest.split_at_mut(DOMAIN_LEN);
    artifact.copy_from_slice(&lease.artifact.0);
    domain.copy_from_slice(&lease.domain.0);
    generation.copy_from_slice(&lease.generation.0.to_be_bytes());
    key
}

/// Decodes a key written by [`lease_key`]. Every 72-byte string is a key.
pub fn lease_from_key(key: &LeaseKey) -> ArtifactLease {
    let mut artifact = [0u8; ARTIFACT_LEN];
    let mut domain = [0u8; DOMAIN_LEN];
    let mut generation = [0u8; GENERATION_LEN];
    let (a, rest) = key.split_at(ARTIFACT_LEN);
    let (d, g) = rest.split_at(DOMAIN_LEN);
    artifact.copy_from_slice(a);
    domain.copy_from_slice(d);
    generation.copy_from_slice(g);
    ArtifactLease {
        artifact: PreparedArtifactId(artifact),
        domain: DomainId(domain),
        generation: GenerationId(u64::from_be_bytes(generation)),
    }
}

/// schemas.md "Storage Catalog" `PreparedArtifact`: prepared-artifact ID ->
/// postcard row.
pub const ARTIFACTS: TableDefinition<'_, [u8; ARTIFACT_LEN], &[u8]> =
    TableDefinition::new("prepared_artifacts");

/// schemas.md "Storage Catalog" `PrepareOperation`: operation ID -> postcard
/// row.
pub const OPERATIONS: TableDefinition<'_, [u8; 16], &[u8]> =
    TableDefinition::new("prepare_operations");

/// The first and last lease keys of one artifact: its leases are exactly
/// the keys between them.
pub fn artifact_lease_range(artifact: &PreparedArtifactId) -> (LeaseKey, LeaseKey) {
    let mut low = [0u8; LEASE_KEY_LEN];
    let mut high = [0xffu8; LEASE_KEY_LEN];
    low[..ARTIFACT_LEN].copy_from_slice(&artifact.0);
    high[..ARTIFACT_LEN].copy_from_slice(&artifact.0);
    (low, high)
}

/// The named images of the blob store (a product extension, not a
/// schemas.md table): normalised reference -> postcard
/// `ImageReferenceRecord`.
pub const IMAGES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("image_references");
