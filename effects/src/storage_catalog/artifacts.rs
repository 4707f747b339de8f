//! The Storage Catalog's artifact half (spec 3.6 "Prepared lower", OR-7;
//! schemas.md "Storage Catalog"): `PrepareOperation` rows, recorded as
//! Intent before a stage exists and moved to Owned with the stage's device
//! and inode; `PreparedArtifact` rows, inserted Available by publication
//! and moved to Reclaiming only when no lease names them. Every function
//! is one catalog-lock section and one transaction, named after the
//! `protocol/PreparedLower.tla` action it performs and taken as that step
//! of the operation's [`CatalogRun`]: the rows the section reads are the
//! model's state, the model decides, and the rows read back after the
//! write are the step's observation.
use super::{read_table, tables, CatalogError, CatalogRun, Missing, StorageCatalog};
use lazaret_runtime::catalog_model::{ArtifactRows, Step, MAX_HOLDERS};
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
    /// device or inode) before its stage is created, when the model
    /// enables it; otherwise the rows say why: the artifact is already
    /// published, being reclaimed, or another operation holds its slot.
    pub fn record_prepare_intent(
        &self,
        op: &PrepareOperation,
        run: &mut CatalogRun,
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
        let artifact = op.expected_artifact_id;
        let (found, after) = self.write_section(Missing::Create, |txn| {
            run.observe(&rows_in(txn, path, &artifact)?)?;
            if !run.enabled(Step::RecordPrepareIntent)? {
                if let Some(row) = artifact_in(txn, path, &artifact)? {
                    return Ok(match row.state {
                        ArtifactState::Available => ((PrepareIntent::Published(row), None), false),
                        ArtifactState::Reclaiming => {
                            ((PrepareIntent::Reclaiming(row), None), false)
                        }
                    });
                }
                if let Some(other) = operation_for(txn, path, &artifact)? {
                    return Ok(((PrepareIntent::Occupied(other), None), false));
                }
                run.check(Step::RecordPrepareIntent)?;
            }
            let mut table = txn
                .open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?;
            let held = bounded_len(&table, path, "prepare_operations", MAX_OPERATIONS)?;
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
            drop(table);
            let after = rows_in(txn, path, &artifact)?;
            Ok(((PrepareIntent::Recorded, Some(after)), true))
        })?;
        if let Some(after) = after {
            run.take(Step::RecordPrepareIntent, Some(&after), None)?;
        }
        Ok(found)
    }

    /// Model `RecordStageOwned`: the exact operation moves from Intent to
    /// Owned with its stage's device and inode. Repeating it with the same
    /// evidence changes nothing.
    pub fn record_stage_owned(
        &self,
        operation: OperationId,
        device: u64,
        inode: u64,
        run: &mut CatalogRun,
    ) -> Result<PrepareOperation, CatalogError> {
        let _span = tracing::debug_span!("RecordStageOwned", %operation).entered();
        let path = self.path.as_path();
        let artifact = run.artifact();
        let (op, after) = self.write_section(Missing::Create, |txn| {
            let mut op = operation_row(txn, path, operation)?;
            run.observe(&rows_in(txn, path, &artifact)?)?;
            if !run.enabled(Step::RecordStageOwned)? {
                return match op.evidence() {
                    Ok(Some(found)) if found == (device, inode) => Ok(((op, None), false)),
                    _ => Err(CatalogError::OperationChanged {
                        path: path.to_owned(),
                        operation,
                    }),
                };
            }
            op.stage_state = PrepareStageState::Owned;
            op.device = Some(device);
            op.inode = Some(inode);
            let bytes = encode(path, "prepare operation", &op)?;
            txn.open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?
                .insert(&operation.0, bytes.as_slice())
                .map_err(CatalogError::redb(path, "update operation"))?;
            let after = rows_in(txn, path, &artifact)?;
            Ok(((op, Some(after)), true))
        })?;
        if let Some(after) = after {
            run.take(Step::RecordStageOwned, Some(&after), None)?;
        }
        Ok(op)
    }

    /// Model `PublishArtifact`: under the catalog lock, `publish` moves the
    /// owned stage to the artifact's path, and one transaction inserts the
    /// Available artifact and retires the operation. Only an Owned
    /// operation publishes, and never over an artifact row.
    pub fn publish_artifact(
        &self,
        operation: OperationId,
        publish: impl FnOnce(&PrepareOperation) -> Result<Published, CatalogError>,
        run: &mut CatalogRun,
    ) -> Result<PreparedArtifact, CatalogError> {
        let _span = tracing::debug_span!("PublishArtifact", %operation).entered();
        let path = self.path.as_path();
        let artifact = run.artifact();
        let (row, after) = self.write_section(Missing::Create, |txn| {
            let op = operation_row(txn, path, operation)?;
            run.observe(&rows_in(txn, path, &artifact)?)?;
            if !run.enabled(Step::PublishArtifact)? {
                if let Some(row) = artifact_in(txn, path, &op.expected_artifact_id)? {
                    return Err(CatalogError::ArtifactExists {
                        path: path.to_owned(),
                        artifact: row.prepared_artifact_id,
                        state: row.state,
                    });
                }
                if op.stage_state == PrepareStageState::Owned {
                    // Owned, yet refused: the model's guard says why.
                    run.check(Step::PublishArtifact)?;
                }
                return Err(CatalogError::OperationNotOwned {
                    path: path.to_owned(),
                    operation,
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
            txn.open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?
                .remove(&operation.0)
                .map_err(CatalogError::redb(path, "retire operation"))?;
            let after = rows_in(txn, path, &artifact)?;
            Ok(((row, after), true))
        })?;
        run.take(Step::PublishArtifact, Some(&after), None)?;
        Ok(row)
    }

    /// Model `ForgetPrepareOperation` (an Owned operation whose exact stage
    /// is proved absent) and `ForgetAbandonedIntent` (an Intent operation
    /// whose worker is gone and whose stage path holds nothing): removes
    /// the operation only if its row is still exactly `expected` and the
    /// model enables the step.
    pub fn forget_prepare_operation(
        &self,
        expected: &PrepareOperation,
        run: &mut CatalogRun,
    ) -> Result<(), CatalogError> {
        let step = match expected.stage_state {
            PrepareStageState::Owned => Step::ForgetPrepareOperation,
            PrepareStageState::Intent => Step::ForgetAbandonedIntent,
        };
        let _span =
            tracing::debug_span!("forget_prepare_operation", ?step, operation = %expected.operation_id)
                .entered();
        let path = self.path.as_path();
        let artifact = run.artifact();
        let key = expected.operation_id;
        let missing = || CatalogError::OperationMissing {
            path: path.to_owned(),
            operation: key,
        };
        let after = self.write_section(Missing::Return(None), |txn| {
            let current = operation_row(txn, path, key)?;
            if current != *expected {
                return Err(CatalogError::OperationChanged {
                    path: path.to_owned(),
                    operation: key,
                });
            }
            run.observe(&rows_in(txn, path, &artifact)?)?;
            run.check(step)?;
            txn.open_table(tables::OPERATIONS)
                .map_err(CatalogError::redb(path, "open operations table"))?
                .remove(&key.0)
                .map_err(CatalogError::redb(path, "remove operation"))?;
            Ok((Some(rows_in(txn, path, &artifact)?), true))
        })?;
        run.take(step, Some(&after.ok_or_else(missing)?), None)
    }

    /// Model `BeginReclaim` (OR-7): Available -> Reclaiming only when the
    /// model enables it: no lease row names the artifact, from any Domain
    /// or generation. Reclaiming is durable: the tree may be removed after
    /// this commits, and no lease can be inserted for it any more.
    pub fn begin_reclaim(&self, run: &mut CatalogRun) -> Result<Reclaim, CatalogError> {
        let id = run.artifact();
        let _span = tracing::debug_span!("BeginReclaim", artifact = %id).entered();
        let path = self.path.as_path();
        let (reclaim, after) =
            self.write_section(Missing::Return((Reclaim::Absent, None)), |txn| {
                let rows = rows_in(txn, path, &id)?;
                run.observe(&rows)?;
                let Some(mut row) = artifact_in(txn, path, &id)? else {
                    return Ok(((Reclaim::Absent, None), false));
                };
                if row.state == ArtifactState::Reclaiming {
                    return Ok(((Reclaim::Resumed(row), None), false));
                }
                if !run.enabled(Step::BeginReclaim)? {
                    let leases = rows.leases.len();
                    return Ok(((Reclaim::Leased { leases }, None), false));
                }
                row.state = ArtifactState::Reclaiming;
                let bytes = encode(path, "prepared artifact", &row)?;
                txn.open_table(tables::ARTIFACTS)
                    .map_err(CatalogError::redb(path, "open artifacts table"))?
                    .insert(&id.0, bytes.as_slice())
                    .map_err(CatalogError::redb(path, "update artifact"))?;
                let after = rows_in(txn, path, &id)?;
                Ok(((Reclaim::Started(row), Some(after)), true))
            })?;
        if let Some(after) = after {
            run.take(Step::BeginReclaim, Some(&after), None)?;
        }
        Ok(reclaim)
    }

    /// Model `RemoveArtifact`, its last part: after the exact tree is gone
    /// (checked with the run before the removal began), the Reclaiming
    /// row goes. An artifact the model does not see Reclaiming refuses.
    pub fn remove_artifact(&self, run: &mut CatalogRun) -> Result<(), CatalogError> {
        let id = run.artifact();
        let _span = tracing::debug_span!("RemoveArtifact", artifact = %id).entered();
        let path = self.path.as_path();
        let not_reclaiming = || CatalogError::NotReclaiming {
            path: path.to_owned(),
            artifact: id,
        };
        let after = self.write_section(Missing::Return(None), |txn| {
            run.observe(&rows_in(txn, path, &id)?)?;
            if !run.enabled(Step::RemoveArtifact)? {
                return Err(not_reclaiming());
            }
            txn.open_table(tables::ARTIFACTS)
                .map_err(CatalogError::redb(path, "open artifacts table"))?
                .remove(&id.0)
                .map_err(CatalogError::redb(path, "remove artifact"))?;
            Ok((Some(rows_in(txn, path, &id)?), true))
        })?;
        run.take(
            Step::RemoveArtifact,
            Some(&after.ok_or_else(not_reclaiming)?),
            None,
        )
    }
}

/// The rows of `artifact` inside a write transaction: what a model step
/// reads (schemas.md "Storage Catalog": its artifact row, the one prepare
/// operation that may hold its slot, its lease rows).
pub(super) fn rows_in(
    txn: &WriteTransaction,
    path: &Path,
    artifact: &PreparedArtifactId,
) -> Result<ArtifactRows, CatalogError> {
    let row = artifact_in(txn, path, artifact)?;
    let operation = operation_for(txn, path, artifact)?;
    let table = txn
        .open_table(tables::LEASES)
        .map_err(CatalogError::redb(path, "open leases table"))?;
    let (low, high) = tables::artifact_lease_range(artifact);
    let mut leases = Vec::new();
    for entry in table
        .range(low..=high)
        .map_err(CatalogError::redb(path, "list leases"))?
    {
        let (key, _) = entry.map_err(CatalogError::redb(path, "read lease"))?;
        if leases.len() > MAX_HOLDERS {
            break; // the model refuses more than MAX_HOLDERS
        }
        let lease = tables::lease_from_key(&key.value());
        leases.push((lease.domain, lease.generation));
    }
    Ok(ArtifactRows {
        artifact: row.map(|r| r.state),
        operation: operation.map(|o| o.stage_state),
        leases,
    })
}

/// The prepare operation holding `artifact`'s slot, if any.
fn operation_for(
    txn: &WriteTransaction,
    path: &Path,
    artifact: &PreparedArtifactId,
) -> Result<Option<PrepareOperation>, CatalogError> {
    let table = txn
        .open_table(tables::OPERATIONS)
        .map_err(CatalogError::redb(path, "open operations table"))?;
    bounded_len(&table, path, "prepare_operations", MAX_OPERATIONS)?;
    for entry in table
        .iter()
        .map_err(CatalogError::redb(path, "list operations"))?
    {
        let (key, value) = entry.map_err(CatalogError::redb(path, "read operation"))?;
        let op = decode_operation(path, &key.value(), value.value())?;
        if op.expected_artifact_id == *artifact {
            return Ok(Some(op));
        }
    }
    Ok(None)
}

/// The operation's row; a missing one is an error naming it.
fn operation_row(
    txn: &WriteTransaction,
    path: &Path,
    operation: OperationId,
) -> Result<PrepareOperation, CatalogError> {
    let table = txn
        .open_table(tables::OPERATIONS)
        .map_err(CatalogError::redb(path, "open operations table"))?;
    let row = table
        .get(&operation.0)
        .map_err(CatalogError::redb(path, "read operation"))?;
    match row {
        Some(row) => decode_operation(path, &operation.0, row.value()),
        None => Err(CatalogError::OperationMissing {
            path: path.to_owned(),
            operation,
        }),
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
pub(super) fn bounded_len(
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

pub(super) fn encode<T: Serialize>(
    path: &Path,
    record: &'static str,
    row: &T,
) -> Result<Vec<u8>, CatalogError> {
    codec::encode(record, row).map_err(|source| CatalogError::EncodeRow {
        path: path.to_owned(),
        source,
    })
}

pub(super) fn decode<T: DeserializeOwned>(
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
