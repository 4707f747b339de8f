//! Storage Catalog errors: one variant per failing step, each naming the
//! path it concerns.
use lazaret_runtime::catalog_model::{CatalogModelError, Step};
use lazaret_runtime::records::catalog::{ArtifactState, OperationId, OperationShapeError};
use lazaret_runtime::records::codec::CodecError;
use lazaret_runtime::records::ids::PreparedArtifactId;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot inspect the Storage Catalog directory {path}: {source}")]
    InspectDir { path: PathBuf, source: io::Error },
    #[error("the Storage Catalog directory {path} is a symlink; refusing to follow it")]
    DirSymlink { path: PathBuf },
    #[error("the Storage Catalog directory {path} exists and is not a directory")]
    DirNotDirectory { path: PathBuf },
    #[error("cannot create the Storage Catalog directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot open the Storage Catalog lock file {path}: {source}")]
    OpenLock { path: PathBuf, source: io::Error },
    #[error("the Storage Catalog lock file {path} is not a regular file")]
    LockNotAFile { path: PathBuf },
    #[error("flock on the Storage Catalog lock {path} failed: {source}")]
    Flock { path: PathBuf, source: io::Error },
    #[error("the Storage Catalog lock {path} stayed held by another process for {waited:?}")]
    LockTimeout { path: PathBuf, waited: Duration },
    #[error("cannot open the Storage Catalog file {path}: {source}")]
    OpenFile { path: PathBuf, source: io::Error },
    #[error("the Storage Catalog file {path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("cannot open the Storage Catalog {path}: {source}")]
    Open {
        path: PathBuf,
        source: Box<redb::DatabaseError>,
    },
    #[error("Storage Catalog {path} has no store metadata (unversioned); refusing to read it")]
    Unversioned { path: PathBuf },
    #[error("Storage Catalog {path} has malformed metadata: {source}")]
    MetadataMalformed { path: PathBuf, source: CodecError },
    #[error(
        "Storage Catalog {path} has identity {found:?}, expected \"lazaret-storage-catalog-v1\""
    )]
    UnknownIdentity { path: PathBuf, found: String },
    #[error("Storage Catalog {path} has older version {found}; only version 1 is accepted and there is no migration")]
    OlderVersion { path: PathBuf, found: u32 },
    #[error("Storage Catalog {path} has newer version {found}; this Lazaret reads only version 1")]
    NewerVersion { path: PathBuf, found: u32 },
    #[error("cannot encode the Storage Catalog {path} metadata: {source}")]
    EncodeMetadata { path: PathBuf, source: CodecError },
    #[error("Storage Catalog {path}: {step} failed: {source}")]
    Redb {
        path: PathBuf,
        step: &'static str,
        source: Box<redb::Error>,
    },
    #[error("Storage Catalog {path} already holds {max} leases; refusing another")]
    Full { path: PathBuf, max: usize },
    #[error("Storage Catalog {path} holds more than {max} leases; refusing to list them")]
    TooManyLeases { path: PathBuf, max: usize },
    #[error("Storage Catalog {path}: prepared artifact {artifact} is {}; only an Available artifact is leased (launch again to prepare it anew)", availability(.state))]
    ArtifactNotAvailable {
        path: PathBuf,
        artifact: PreparedArtifactId,
        state: Option<ArtifactState>,
    },
    #[error("Storage Catalog {path}: prepared artifact {artifact} was reclaimed and prepared again since this launch checked it; launch again")]
    ArtifactReplaced {
        path: PathBuf,
        artifact: PreparedArtifactId,
    },
    #[error("Storage Catalog {path}: prepared artifact {artifact} is already recorded ({state:?}); refusing to publish over it")]
    ArtifactExists {
        path: PathBuf,
        artifact: PreparedArtifactId,
        state: ArtifactState,
    },
    #[error("Storage Catalog {path}: prepared artifact {artifact} is not being reclaimed; refusing to remove its row")]
    NotReclaiming {
        path: PathBuf,
        artifact: PreparedArtifactId,
    },
    #[error("Storage Catalog {path}: a new prepare operation {operation} must be recorded as Intent with no device or inode")]
    OperationNotIntent {
        path: PathBuf,
        operation: OperationId,
    },
    #[error("Storage Catalog {path}: prepare operation {operation} is not recorded")]
    OperationMissing {
        path: PathBuf,
        operation: OperationId,
    },
    #[error("Storage Catalog {path}: prepare operation {operation} is not Owned; only an Owned operation publishes")]
    OperationNotOwned {
        path: PathBuf,
        operation: OperationId,
    },
    #[error("Storage Catalog {path}: prepare operation {operation} is no longer the row this step expected")]
    OperationChanged {
        path: PathBuf,
        operation: OperationId,
    },
    #[error("Storage Catalog {path}: {source}")]
    OperationShape {
        path: PathBuf,
        source: OperationShapeError,
    },
    #[error("Storage Catalog {path}: a row is malformed: {source}")]
    RowMalformed { path: PathBuf, source: CodecError },
    #[error("Storage Catalog {path}: a {table} row does not match its key")]
    RowKeyMismatch { path: PathBuf, table: &'static str },
    #[error("cannot encode a Storage Catalog {path} row: {source}")]
    EncodeRow { path: PathBuf, source: CodecError },
    #[error("Storage Catalog {path} holds more than {max} {table} rows; refusing")]
    TooManyRows {
        path: PathBuf,
        table: &'static str,
        max: usize,
    },
    #[error("Storage Catalog {path}: the lease of prepared artifact {artifact} for generation {generation} was not removed: its Domain does not record the matching prepared-lower release intent with its State Anchors observed absent (spec 3.6 release step 4)")]
    ReleaseNotIntended {
        path: PathBuf,
        artifact: PreparedArtifactId,
        generation: u64,
    },
    #[error("cannot publish the prepared stage at {path}: {source}")]
    Publish { path: PathBuf, source: io::Error },
    /// The PreparedLower model refused the operation's step, its start
    /// state or what the step's transaction read back.
    #[error("Storage Catalog {path}: {source}")]
    Model {
        path: PathBuf,
        source: Box<CatalogModelError>,
    },
    #[error(
        "Storage Catalog {path}: {step:?} was asked before the operation read its artifact's rows"
    )]
    NotObserved { path: PathBuf, step: Step },
}

/// How an artifact that cannot be leased stands.
fn availability(state: &Option<ArtifactState>) -> &'static str {
    match state {
        None => "not published",
        Some(ArtifactState::Reclaiming) => "being reclaimed",
        Some(ArtifactState::Available) => "Available",
    }
}

impl CatalogError {
    pub(crate) fn redb<'p, E: Into<redb::Error>>(
        path: &'p Path,
        step: &'static str,
    ) -> impl FnOnce(E) -> Self + 'p {
        move |e| Self::Redb {
            path: path.to_owned(),
            step,
            source: Box::new(e.into()),
        }
    }
}
