//! The Domain Store: typed redb tables for one Domain's durable generation
//! document (spec 3.6 "Durable generation document refinement", FR-17, FR-21;
//! schemas.md "Domain Store").
//!
//! Only the holder of the Domain flock opens it: [`DomainStore`] borrows the
//! [`DomainLock`] guard for its whole life. Metadata (identity
//! `lazaret-domain-store-v1`, version 1) is checked before any row is read.
//! Every mutation is one [`StoreOp`] batch in one redb write transaction; the
//! ownership rules of `lazaret_runtime::ownership` are applied inside it, so a
//! refused operation leaves the last committed document untouched.
mod error;
mod ledger;
mod ops;
mod read;
mod staged;
mod tables;

pub use error::StoreError;
pub use ledger::StoreLedger;
pub use ops::{SlotTarget, StoreOp};
pub use read::{DomainDocument, GenerationDocument, GenerationView, RecordedSlot, SlotHolder};
pub use staged::accept_staged_ownership;

use crate::domain_lock::DomainLock;
use lazaret_runtime::records::codec;
use lazaret_runtime::records::domain::{
    StoreMetadata, DOMAIN_STORE_SCHEMA_ID, DOMAIN_STORE_SCHEMA_VERSION,
};
use lazaret_runtime::records::process::BootId;
use redb::Database;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An open Domain Store. It cannot outlive the Domain lock it was opened under.
#[derive(Debug)]
pub struct DomainStore<'lock> {
    db: Database,
    path: PathBuf,
    current_boot: BootId,
    _lock: &'lock DomainLock,
}

/// The store lives in the Domain Root beside the lock file it is opened under.
fn check_lock_pairing(lock: &DomainLock, path: &Path) -> Result<(), StoreError> {
    if lock.path().parent() == path.parent() {
        Ok(())
    } else {
        Err(StoreError::LockElsewhere {
            path: path.to_owned(),
            lock: lock.path().to_owned(),
        })
    }
}

impl<'lock> DomainStore<'lock> {
    /// Creates a new store file with v1 metadata (refuses an existing file).
    pub fn create(
        lock: &'lock DomainLock,
        path: &Path,
        current_boot: BootId,
    ) -> Result<Self, StoreError> {
        check_lock_pairing(lock, path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| StoreError::CreateFile {
                path: path.to_owned(),
                source,
            })?;
        let db = Database::builder()
            .create_file(file)
            .map_err(|source| StoreError::Open {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
        let metadata = codec::encode("store metadata", &StoreMetadata::domain_store_v1())?;
        let txn = db
            .begin_write()
            .map_err(StoreError::redb("begin metadata write"))?;
        {
            let mut table = txn
                .open_table(tables::METADATA)
                .map_err(StoreError::redb("open metadata table"))?;
            table
                .insert(tables::METADATA_KEY, metadata.as_slice())
                .map_err(StoreError::redb("write metadata"))?;
        }
        txn.commit().map_err(StoreError::redb("commit metadata"))?;
        Ok(Self {
            db,
            path: path.to_owned(),
            current_boot,
            _lock: lock,
        })
    }

    /// Opens an existing store; unversioned, unknown, older and newer
    /// metadata refuse before any row is read.
    pub fn open(
        lock: &'lock DomainLock,
        path: &Path,
        current_boot: BootId,
    ) -> Result<Self, StoreError> {
        check_lock_pairing(lock, path)?;
        if !path.is_file() {
            return Err(StoreError::Missing {
                what: format!("Domain Store file {}", path.display()),
            });
        }
        let db = Database::open(path).map_err(|source| StoreError::Open {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        check_metadata(&db, path)?;
        Ok(Self {
            db,
            path: path.to_owned(),
            current_boot,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn current_boot(&self) -> BootId {
        self.current_boot
    }
}

fn check_metadata(db: &Database, path: &Path) -> Result<(), StoreError> {
    let path = path.to_owned();
    let txn = db
        .begin_read()
        .map_err(StoreError::redb("begin metadata read"))?;
    let table = match txn.open_table(tables::METADATA) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(StoreError::Unversioned { path })
        }
        Err(e) => return Err(StoreError::redb("open metadata table")(e)),
    };
    let Some(bytes) = table
        .get(tables::METADATA_KEY)
        .map_err(StoreError::redb("read metadata"))?
    else {
        return Err(StoreError::Unversioned { path });
    };
    let metadata: StoreMetadata =
        codec::decode("store metadata", bytes.value()).map_err(|source| {
            StoreError::MetadataMalformed {
                path: path.clone(),
                source,
            }
        })?;
    if metadata.schema_id != DOMAIN_STORE_SCHEMA_ID {
        return Err(StoreError::UnknownIdentity {
            path,
            found: metadata.schema_id,
        });
    }
    match metadata.schema_version {
        DOMAIN_STORE_SCHEMA_VERSION => Ok(()),
        v if v < DOMAIN_STORE_SCHEMA_VERSION => Err(StoreError::OlderVersion { path, found: v }),
        v => Err(StoreError::NewerVersion { path, found: v }),
    }
}
