//! Domain Store errors: one variant per failing step.
use lazaret_runtime::ownership::OwnershipError;
use lazaret_runtime::records::codec::CodecError;
use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Domain Store {path} is not in the directory of the held Domain lock {lock}")]
    LockElsewhere { path: PathBuf, lock: PathBuf },
    #[error("cannot create the Domain Store file {path}: {source}")]
    CreateFile { path: PathBuf, source: io::Error },
    #[error("cannot open the Domain Store {path}: {source}")]
    Open {
        path: PathBuf,
        source: Box<redb::DatabaseError>,
    },
    #[error("Domain Store {path} has no store metadata (unversioned); refusing to read it")]
    Unversioned { path: PathBuf },
    #[error("Domain Store {path} has malformed metadata: {source}")]
    MetadataMalformed { path: PathBuf, source: CodecError },
    #[error("Domain Store {path} has identity {found:?}, expected \"lazaret-domain-store-v1\"")]
    UnknownIdentity { path: PathBuf, found: String },
    #[error("Domain Store {path} has older version {found}; only version 1 is accepted and there is no migration")]
    OlderVersion { path: PathBuf, found: u32 },
    #[error("Domain Store {path} has newer version {found}; this Lazaret reads only version 1")]
    NewerVersion { path: PathBuf, found: u32 },
    #[error("Domain Store {step} failed: {source}")]
    Redb {
        step: &'static str,
        source: Box<redb::Error>,
    },
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("row {key} of table {table} does not decode: {source}")]
    Row {
        table: &'static str,
        key: String,
        source: CodecError,
    },
    #[error("row {key} of table {table} holds a record for another key")]
    RowKey { table: &'static str, key: String },
    #[error("row {key} of table {table} is not a legal snapshot: {source}")]
    IllegalRow {
        table: &'static str,
        key: String,
        source: Box<OwnershipError>,
    },
    #[error("{operation} on {target} refused: {source}")]
    Rule {
        operation: &'static str,
        target: String,
        source: Box<OwnershipError>,
    },
    #[error("{what} does not exist")]
    Missing { what: String },
    #[error("{what} already exists")]
    Exists { what: String },
    #[error("staged ownership message refused: {0}")]
    Message(#[from] lazaret_runtime::records::process::MessageError),
    #[error("{what} does not match the stored record")]
    Mismatch { what: String },
}

impl StoreError {
    pub(crate) fn redb<E: Into<redb::Error>>(step: &'static str) -> impl FnOnce(E) -> Self {
        move |e| Self::Redb {
            step,
            source: Box::new(e.into()),
        }
    }
}
