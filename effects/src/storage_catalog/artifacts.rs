//! The Storage Catalog's artifact half (spec 3.6 "Prepared lower", OR-7;
//! schemas.md "Storage Catalog"): `PrepareOperation` rows, recorded as
//! Intent before a stage exists and moved to Owned with the stage's device
//! and inode; `PreparedArtifact` rows, inserted Available by publication
//! and moved to Reclaiming only when no lease names them. Every function
//! is one catalog-lock section and one transaction, named after the
//! `protocol/PreparedLower.tla` action it performs.
use super::{read_table, tables, CatalogError, Missing, StorageCatalog};
use lazaret_runtime::records::catalog::{
    ArtifactState, OperationId, PrepareOperation, PrepareStageState, PreparedArtifact,
};
use lazaret_runtime::records::codec;
use lazaret_runtime::records::ids::{HostPath, PreparedArtifactId};
use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;

/// The most prepare operations the catalog holds at once.
pub const MAX_OPERATIONS: usize = 1024;
/// The most prepared artifacts the catalog holds.
pub const MAX_ARTIFACTS: usize = 65_536;

/// What [`StorageCatalog::record_prepare_intent`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareIntent {
    /// The operation is recorded: its stage may be created.
    Recorded,
    /// The artifact is already published and Available.
    Published(PreparedArtifact),
    /// The artifact is being reclaimed; it cannot be prepared until its
    /// removal finishes.
    Reclaiming(PreparedArtifact),
    /// Another operation holds the artifact's one prepare slot.
    Occupied(PrepareOperation),
}

/// Where publication put the tree: the artifact directory, as opened after
/// the rename.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub path: HostPath,
    pub device: u64,
    pub inode: u64,
}

/// What [`StorageCatalog::begin_reclaim`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Available -> Reclaiming: the tree may now be removed.
    Started(PreparedArtifact),
    /// It was already Reclaiming (an interrupted reclamation resumes).
    Resumed(PreparedArtifact),
    /// Leases still name it: nothing changed.
    Leased { leases: usize },
    /// No such artifact.
    Absent,
}

impl StorageCatalog {
    /// The artifact's row, if the catalog holds one.
    pub fn artifact(
        &self,
        id: &PreparedArtifactId,
    ) -> Result<Option<PreparedArtifact>, CatalogError> {
        let path = self.path.as_path();
        let row = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::ARTIFACTS, "open artifacts table")?
            else {
                return Ok(None);
            };
            let row = table
                .get(&id.0)
                .map_err(CatalogError::redb(path, "read artifact"))?;
            row.map(|row| decode_artifact(path, &id.0, row.value()))
                .transpose()
        })?;
        Ok(row.flatten())
    }

    /// Every artifact row, in ID order.
    pub fn artifacts(&self) -> Result<Vec<PreparedArtifact>, CatalogError> {
        let path = self.path.as_path();
        let rows = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::ARTIFACTS, "open artifacts table")?
            else {
                return Ok(Vec::new());
            };
            bounded_len(&table, path, "prepared_artifacts", MAX_ARTIFACTS)?;
            let mut rows = Vec::new();
            for entry in table
                .iter()
                .map_err(CatalogError::redb(path, "list artifacts"))?
            {
                let (key, value) = entry.map_err(CatalogError::redb(path, "read artifact"))?;
                rows.push(decode_artifact(path, &key.value(), value.value())?);
            }
            Ok(rows)
        })?;
        Ok(rows.unwrap_or_default())
    }

    /// Every prepare operation, in ID order.
    pub fn prepare_operations(&self) -> Result<Vec<PrepareOperation>, CatalogError> {
        let path = self.path.as_path();
        let rows = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::OPERATIONS, "open operations table")?
            else {
                return Ok(Vec::new());
            };
            bounded_len(&table, path, "prepare_operations", MAX_OPERATIONS)?;
            let mut rows = Vec::new();
            for entry in table
                .iter()
                .map_err(CatalogError::redb(path, "list operations"))?
            {
                let (key, value) = entry.map_err(CatalogError::redb(path, "read operation"))?;
                rows.push(decode_operation(path, &key.value(), value.value())?);
            }
            Ok(rows)
        })?;
        Ok(rows.unwrap_or_default())
    }

    /// Model `RecordPrepareIntent`: records `op` (stage state Intent, no
    /// device or inode) before its stage is created, unless the artifact
    /// is already published or another operation holds its slot.
    pub fn record_prepare_intent(
        &self,
        op: &PrepareOperation,
    ) -> Result<PrepareIntent, CatalogError> {
        let _span =
            tracing::debug_span!("RecordPrepareIntent", operation = %op.operation_id).entered();
        let path = self.path.as_path();
        if op.stage_state != PrepareStageState::Intent || op.evidence() != Ok(None) {
            return Err(CatalogError::OperationNotIntent {
                path: path.to_owned(),
                operation: op.operation_id,
            });
        }
        self.write_section(Missing::Create, |txn| {
            if let Some(row) = artifact_in(txn, path, &op.expected_artifact_id)? {
                return Ok(match row.state {
                    ArtifactState::Available => (PrepareIntent::Published(row), false),
                    ArtifactState::Reclaiming => (PrepareIntent::Reclaiming(row), false),
                });
            }
            let mut table = txn
                .open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?;
            let held = bounded_len(&table, path, "prepare_operations", MAX_OPERATIONS)?;
            for entry in table
                .iter()
                .map_err(CatalogError::redb(path, "list operations"))?
            {
                let (key, value) = entry.map_err(CatalogError::redb(path, "read operation"))?;
                let other = decode_operation(path, &key.value(), value.value())?;
                if other.expected_artifact_id == op.expected_artifact_id {
                    return Ok((PrepareIntent::Occupied(other), false));
                }
            }
            if held >= MAX_OPERATIONS {
                return Err(CatalogError::TooManyRows {
                    path: path.to_owned(),
                    table: "prepare_operations",
                    max: MAX_OPERATIONS,
                });
            }
            let bytes = encode(path, "prepare operation", op)?;
            table
                .insert(&op.operation_id.0, bytes.as_slice())
                .map_err(CatalogError::redb(path, "insert operation"))?;
            Ok((PrepareIntent::Recorded, true))
        })
    }

    /// Model `RecordStageOwned`: the exact operation moves from Intent to
    /// Owned with its stage's device and inode. Repeating it with the same
    /// evidence changes nothing.
    pub fn record_stage_owned(
        &self,
        operation: OperationId,
        device: u64,
        inode: u64,
    ) -> Result<PrepareOperation, CatalogError> {
        let _span = tracing::debug_span!("RecordStageOwned", %operation).entered();
        let path = self.path.as_path();
        let missing = || CatalogError::OperationMissing {
            path: path.to_owned(),
            operation,
        };
        self.write_section(Missing::Create, |txn| {
            let mut table = txn
                .open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?;
            let mut op = match table
                .get(&operation.0)
                .map_err(CatalogError::redb(path, "read operation"))?
            {
                Some(row) => decode_operation(path, &operation.0, row.value())?,
                None => return Err(missing()),
            };
            match op.evidence() {
                Ok(None) => {}
                Ok(Some(found)) if found == (device, inode) => return Ok((op, false)),
                _ => {
                    return Err(CatalogError::OperationChanged {
                        path: path.to_owned(),
                        operation,
                    })
                }
            }
            op.stage_state = PrepareStageState::Owned;
            op.device = Some(device);
            op.inode = Some(inode);
            let bytes = encode(path, "prepare operation", &op)?;
            table
                .insert(&operation.0, bytes.as_slice())
                .map_err(CatalogError::redb(path, "update operation"))?;
            Ok((op, true))
        })
    }

    /// Model `PublishArtifact`: under the catalog lock, `publish` moves the
    /// owned stage to the artifact's path, and one transaction inserts the
    /// Available artifact and retires the operation. Only an Owned
    /// operation publishes, and never over an artifact row.
    pub fn publish_artifact(
        &self,
        operation: OperationId,
        publish: impl FnOnce(&PrepareOperation) -> Result<Published, CatalogError>,
    ) -> Result<PreparedArtifact, CatalogError> {
        let _span = tracing::debug_span!("PublishArtifact", %operation).entered();
        let path = self.path.as_path();
        self.write_section(Missing::Create, |txn| {
            let mut ops = txn
                .open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?;
            let op = match ops
                .get(&operation.0)
                .map_err(CatalogError::redb(path, "read operation"))?
            {
                Some(row) => decode_operation(path, &operation.0, row.value())?,
                None => {
                    return Err(CatalogError::OperationMissing {
                        path: path.to_owned(),
                        operation,
                    })
                }
            };
            if !matches!(op.evidence(), Ok(Some(_))) {
                return Err(CatalogError::OperationNotOwned {
                    path: path.to_owned(),
                    operation,
                });
            }
            if let Some(row) = artifact_in(txn, path, &op.expected_artifact_id)? {
                return Err(CatalogError::ArtifactExists {
                    path: path.to_owned(),
                    artifact: row.prepared_artifact_id,
                    state: row.state,
                });
            }
            let artifacts = txn
                .open_table(tables::ARTIFACTS)
                .map_err(CatalogError::redb(path, "open artifacts table"))?;
            bounded_len(&artifacts, path, "prepared_artifacts", MAX_ARTIFACTS - 1)?;
            drop(artifacts);
            let placed = publish(&op)?;
            let row = PreparedArtifact {
                prepared_artifact_id: op.expected_artifact_id,
                source_identity: op.source_identity.clone(),
                selected_manifest_digest: op.selected_manifest_digest.clone(),
                policy_id: op.policy_id,
                id_map_digest: op.id_map_digest,
                path: placed.path,
                device: placed.device,
                inode: placed.inode,
                state: ArtifactState::Available,
            };
            let bytes = encode(path, "prepared artifact", &row)?;
            txn.open_table(tables::ARTIFACTS)
                .map_err(CatalogError::redb(path, "open artifacts table"))?
                .insert(&row.prepared_artifact_id.0, bytes.as_slice())
                .map_err(CatalogError::redb(path, "insert artifact"))?;
            ops.remove(&operation.0)
                .map_err(CatalogError::redb(path, "retire operation"))?;
            Ok((row, true))
        })
    }

    /// Model `ForgetPrepareOperation` (an Owned operation whose exact stage
    /// is proved absent) and `ForgetAbandonedIntent` (an Intent operation
    /// whose worker is gone and whose stage path holds nothing): removes
    /// the operation only if its row is still exactly `expected`. Returns
    /// whether it was removed.
    pub fn forget_prepare_operation(
        &self,
        expected: &PrepareOperation,
    ) -> Result<bool, CatalogError> {
        let _span =
            tracing::debug_span!("ForgetPrepareOperation", operation = %expected.operation_id)
                .entered();
        let path = self.path.as_path();
        self.write_section(Missing::Return(false), |txn| {
            let mut table = txn
                .open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?;
            let key = expected.operation_id.0;
            let current = match table
                .get(&key)
                .map_err(CatalogError::redb(path, "read operation"))?
            {
                Some(row) => decode_operation(path, &key, row.value())?,
                None => return Ok((false, false)),
            };
            if current != *expected {
                return Err(CatalogError::OperationChanged {
                    path: path.to_owned(),
                    operation: expected.operation_id,
                });
            }
            table
                .remove(&key)
                .map_err(CatalogError::redb(path, "remove operation"))?;
            Ok((true, true))
        })
    }

    /// Model `BeginReclaim` (OR-7): Available -> Reclaiming only when no
    /// lease row names the artifact, from any Domain or generation.
    /// Reclaiming is durable: the tree may be removed after this commits,
    /// and no lease can be inserted for it any more.
    pub fn begin_reclaim(&self, id: &PreparedArtifactId) -> Result<Reclaim, CatalogError> {
        let _span = tracing::debug_span!("BeginReclaim", artifact = %id).entered();
        let path = self.path.as_path();
        self.write_section(Missing::Return(Reclaim::Absent), |txn| {
            let Some(mut row) = artifact_in(txn, path, id)? else {
                return Ok((Reclaim::Absent, false));
            };
            if row.state == ArtifactState::Reclaiming {
                return Ok((Reclaim::Resumed(row), false));
            }
            let leases = txn
                .open_table(tables::LEASES)
                .map_err(CatalogError::redb(path, "open leases table"))?;
            let (low, high) = tables::artifact_lease_range(id);
            let mut held = 0usize;
            for entry in leases
                .range(low..=high)
                .map_err(CatalogError::redb(path, "list leases"))?
            {
                entry.map_err(CatalogError::redb(path, "read lease"))?;
                held += 1;
            }
            if held > 0 {
                return Ok((Reclaim::Leased { leases: held }, false));
            }
            row.state = ArtifactState::Reclaiming;
            let bytes = encode(path, "prepared artifact", &row)?;
            txn.open_table(tables::ARTIFACTS)
                .map_err(CatalogError::redb(path, "open artifacts table"))?
                .insert(&id.0, bytes.as_slice())
                .map_err(CatalogError::redb(path, "update artifact"))?;
            Ok((Reclaim::Started(row), true))
        })
    }

    /// Model `RemoveArtifact`: after the exact tree is gone, the Reclaiming
    /// row goes. An Available artifact refuses; a missing one is `false`.
    pub fn remove_artifact(&self, id: &PreparedArtifactId) -> Result<bool, CatalogError> {
        let _span = tracing::debug_span!("RemoveArtifact", artifact = %id).entered();
        let path = self.path.as_path();
        self.write_section(Missing::Return(false), |txn| {
            let Some(row) = artifact_in(txn, path, id)? else {
                return Ok((false, false));
            };
            if row.state != ArtifactState::Reclaiming {
                return Err(CatalogError::NotReclaiming {
                    path: path.to_owned(),
                    artifact: *id,
                });
            }
            txn.open_table(tables::ARTIFACTS)
                .map_err(CatalogError::redb(path, "open artifacts table"))?
                .remove(&id.0)
                .map_err(CatalogError::redb(path, "remove artifact"))?;
            Ok((true, true))
        })
    }
}

/// The artifact row inside a write transaction.
pub(super) fn artifact_in(
    txn: &WriteTransaction,
    path: &Path,
    id: &PreparedArtifactId,
) -> Result<Option<PreparedArtifact>, CatalogError> {
    let table = txn
        .open_table(tables::ARTIFACTS)
        .map_err(CatalogError::redb(path, "open artifacts table"))?;
    let row = table
        .get(&id.0)
        .map_err(CatalogError::redb(path, "read artifact"))?;
    row.map(|row| decode_artifact(path, &id.0, row.value()))
        .transpose()
}

/// The table's row count, refused past `max`.
fn bounded_len(
    table: &impl ReadableTableMetadata,
    path: &Path,
    name: &'static str,
    max: usize,
) -> Result<usize, CatalogError> {
    let len = table
        .len()
        .map_err(CatalogError::redb(path, "count rows"))?;
    match usize::try_from(len) {
        Ok(len) if len <= max => Ok(len),
        _ => Err(CatalogError::TooManyRows {
            path: path.to_owned(),
            table: name,
            max,
        }),
    }
}

fn encode<T: Serialize>(
    path: &Path,
    record: &'static str,
    row: &T,
) -> Result<Vec<u8>, CatalogError> {
    codec::encode(record, row).map_err(|source| CatalogError::EncodeRow {
        path: path.to_owned(),
        source,
    })
}

fn decode<T: DeserializeOwned>(
    path: &Path,
    record: &'static str,
    bytes: &[u8],
) -> Result<T, CatalogError> {
    codec::decode(record, bytes).map_err(|source| CatalogError::RowMalformed {
        path: path.to_owned(),
        source,
    })
}

/// An artifact row, checked against its key.
fn decode_artifact(
    path: &Path,
    key: &[u8; 32],
    bytes: &[u8],
) -> Result<PreparedArtifact, CatalogError> {
    let row: PreparedArtifact = decode(path, "prepared artifact", bytes)?;
    if row.prepared_artifact_id.0 != *key {
        return Err(CatalogError::RowKeyMismatch {
            path: path.to_owned(),
            table: "prepared_artifacts",
        });
    }
    Ok(row)
}

/// An operation row, checked against its key and its stage state.
fn decode_operation(
    path: &Path,
    key: &[u8; 16],
    bytes: &[u8],
) -> Result<PrepareOperation, CatalogError> {
    let row: PrepareOperation = decode(path, "prepare operation", bytes)?;
    if row.operation_id.0 != *key {
        return Err(CatalogError::RowKeyMismatch {
            path: path.to_owned(),
            table: "prepare_operations",
        });
    }
    row.evidence()
        .map_err(|source| CatalogError::OperationShape {
            path: path.to_owned(),
            source,
        })?;
    Ok(row)
}

#[cfg(test)]
#[path = "artifacts_tests.rs"]
mod tests;
