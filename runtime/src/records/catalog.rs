//! Storage Catalog rows (schemas.md "Storage Catalog"; spec 3.6 "Prepared
//! lower", OR-7): the published prepared artifacts and the prepare
//! operations that publish them. The lease row is the catalog's key-only
//! `ArtifactLease` (`lazaret-effects`' `storage_catalog`).
//!
//! Field order is the schema's, and it is the Postcard order of the row.
use crate::records::ids::{HostPath, PreparedArtifactId, Sha256Digest, SourceIdentity};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A named image in the Storage Root's blob store: what `lazaret image ls`
/// lists and `lazaret image rm` removes. Not a schemas.md record: the
/// Storage Catalog's `image_references` table is a product extension
/// (docs/durable-state.md), keyed by `reference`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageReferenceRecord {
    /// The normalised reference (`docker.io/library/debian:bookworm`).
    pub reference: String,
    /// The manifest it resolved to last (this host's platform).
    pub manifest_digest: SourceIdentity,
    /// Manifest, config and layer bytes.
    pub bytes: u64,
    /// When it first resolved to this manifest (Unix seconds).
    pub pulled_at: u64,
    /// When it was last pulled or resolved for a launch (Unix seconds).
    pub used_at: u64,
}

/// schemas.md `ArtifactState`: a published artifact may be leased while
/// Available; Reclaiming is the durable start of its removal (OR-7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ArtifactState {
    Available,
    Reclaiming,
}

/// schemas.md `PreparedArtifact`: one published prepared lower and the
/// exact directory that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PreparedArtifact {
    pub prepared_artifact_id: PreparedArtifactId,
    pub source_identity: SourceIdentity,
    pub selected_manifest_digest: SourceIdentity,
    pub policy_id: Sha256Digest,
    pub id_map_digest: Sha256Digest,
    /// The artifact directory (`<storage root>/prepared/<id>`).
    pub path: HostPath,
    pub device: u64,
    pub inode: u64,
    pub state: ArtifactState,
}

/// A prepare operation's ID: 128 random bits, also the name of its stage.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OperationId(pub [u8; 16]);

impl fmt::Debug for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OperationId({self})")
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// schemas.md `PrepareStageState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrepareStageState {
    /// Recorded before the stage exists: no device/inode evidence.
    Intent,
    /// The stage exists and its device and inode are recorded.
    Owned,
}

/// schemas.md `PrepareOperation`: one preparation in progress (or
/// abandoned), recorded before its stage is created.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PrepareOperation {
    pub operation_id: OperationId,
    pub expected_artifact_id: PreparedArtifactId,
    pub source_identity: SourceIdentity,
    pub selected_manifest_digest: SourceIdentity,
    pub policy_id: Sha256Digest,
    pub id_map_digest: Sha256Digest,
    pub stage_path: HostPath,
    pub stage_state: PrepareStageState,
    pub device: Option<u64>,
    pub inode: Option<u64>,
}

/// A prepare operation whose evidence does not match its stage state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("prepare operation {operation}: stage state {state:?} with device {device:?} and inode {inode:?} (Intent has neither, Owned has both)")]
pub struct OperationShapeError {
    pub operation: OperationId,
    pub state: PrepareStageState,
    pub device: Option<u64>,
    pub inode: Option<u64>,
}

impl PrepareOperation {
    /// The stage's recorded `(device, inode)`: present exactly when Owned
    /// (schemas.md "Storage Catalog" paragraph).
    pub fn evidence(&self) -> Result<Option<(u64, u64)>, OperationShapeError> {
        match (self.stage_state, self.device, self.inode) {
            (PrepareStageState::Intent, None, None) => Ok(None),
            (PrepareStageState::Owned, Some(device), Some(inode)) => Ok(Some((device, inode))),
            (state, device, inode) => Err(OperationShapeError {
                operation: self.operation_id,
                state,
                device,
                inode,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use crate::records::codec;

    fn operation(state: PrepareStageState, evidence: Option<(u64, u64)>) -> PrepareOperation {
        PrepareOperation {
            operation_id: OperationId([7; 16]),
            expected_artifact_id: PreparedArtifactId([1; 32]),
            source_identity: SourceIdentity::new("sha256:aa").unwrap(),
            selected_manifest_digest: SourceIdentity::new("sha256:bb").unwrap(),
            policy_id: Sha256Digest([2; 32]),
            id_map_digest: Sha256Digest([3; 32]),
            stage_path: HostPath::new(b"/s/prepared/.stage-07".to_vec()).unwrap(),
            stage_state: state,
            device: evidence.map(|e| e.0),
            inode: evidence.map(|e| e.1),
        }
    }

    #[test]
    fn rows_round_trip_in_schema_field_order() {
        let artifact = PreparedArtifact {
            prepared_artifact_id: PreparedArtifactId([1; 32]),
            source_identity: SourceIdentity::new("sha256:aa").unwrap(),
            selected_manifest_digest: SourceIdentity::new("sha256:bb").unwrap(),
            policy_id: Sha256Digest([2; 32]),
            id_map_digest: Sha256Digest([3; 32]),
            path: HostPath::new(b"/s/prepared/01".to_vec()).unwrap(),
            device: 9,
            inode: 10,
            state: ArtifactState::Reclaiming,
        };
        let bytes = codec::encode("artifact", &artifact).unwrap();
        // The ID's 32 bytes lead the row, the state's variant index ends it.
        assert_eq!(&bytes[..32], &[1; 32]);
        assert_eq!(bytes.last(), Some(&1));
        assert_eq!(
            codec::decode::<PreparedArtifact>("artifact", &bytes).unwrap(),
            artifact
        );
        let op = operation(PrepareStageState::Owned, Some((4, 5)));
        let bytes = codec::encode("operation", &op).unwrap();
        assert_eq!(&bytes[..16], &[7; 16]);
        assert_eq!(
            codec::decode::<PrepareOperation>("operation", &bytes).unwrap(),
            op
        );
    }

    #[test]
    fn evidence_is_present_exactly_when_owned() {
        assert_eq!(
            operation(PrepareStageState::Intent, None).evidence(),
            Ok(None)
        );
        assert_eq!(
            operation(PrepareStageState::Owned, Some((4, 5))).evidence(),
            Ok(Some((4, 5)))
        );
        assert!(operation(PrepareStageState::Intent, Some((4, 5)))
            .evidence()
            .is_err());
        assert!(operation(PrepareStageState::Owned, None)
            .evidence()
            .is_err());
        let mut half = operation(PrepareStageState::Owned, Some((4, 5)));
        half.inode = None;
        assert!(half.evidence().is_err());
    }
}
