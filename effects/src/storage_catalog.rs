//! The Storage Catalog: the host-wide redb tables of prepared artifacts,
//! prepare operations and generation-to-artifact leases (spec 3.6
//! "Prepared lower", "Durable generation document refinement" and
//! "physical lease-acquisition refinement", FR-17, OR-6, OR-7; schemas.md
//! "Storage Catalog").
//!
//! The catalog is `<storage root>/catalog/catalog.redb`, beside its host-wide
//! lock file `catalog.lock`. Every operation is one bounded section: an
//! exclusive `flock` on the lock file waited for at most [`LOCK_WAIT`], open,
//! one transaction, close, unlock. Nothing keeps the catalog open between
//! operations, so concurrent Domain coordinators need no resident process
//! and never open it concurrently (OR-6, FR-17). Metadata (identity
//! `lazaret-storage-catalog-v1`, version 1) is checked before any row is
//! read; unversioned, unknown, older and newer catalogs refuse.
//!
//! An [`ArtifactLease`] row is exactly `(prepared-artifact ID, Domain ID,
//! generation)`. Inserting it is model action `InsertCatalogLease` and
//! removing it `RemoveCatalogLease` (`protocol/PreparedLower.tla`); both are
//! idempotent so that a crash between the catalog commit and the Domain
//! Store commit can be resumed. A lease is inserted only for an Available
//! artifact. The artifact and operation rows are [`artifacts`]'.
//!
//! Removing a lease rechecks, under the lock, the Domain's matching release
//! intent (spec 3.6 release step 4).
mod artifacts;
mod error;
mod images;
mod lock;
mod run;
mod tables;
#[cfg(test)]
mod tests;

pub use artifacts::{PrepareIntent, Published, Reclaim, MAX_OPERATIONS};
pub use error::CatalogError;
pub use run::{CatalogRun, KEPT_CATALOG_TRACES, TRACES_DIR};

use lazaret_runtime::catalog_model::{ActingDomain, ArtifactRows, DomainRecord, Step};
use lazaret_runtime::records::catalog::ArtifactState;
use lazaret_runtime::records::codec;
use lazaret_runtime::records::domain::StoreMetadata;
use lazaret_runtime::records::ids::{DomainId, GenerationId, PreparedArtifactId};
use lock::CatalogLock;
use redb::{
    Database, ReadTransaction, ReadableTable, ReadableTableMetadata, TableError, TableHandle,
    UntypedMultimapTableHandle, UntypedTableHandle, WriteTransaction,
};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The catalog's directory under the Storage Root.
pub const CATALOG_DIR: &str = "catalog";
/// The redb file inside [`CATALOG_DIR`].
pub const CATALOG_FILE: &str = "catalog.redb";
/// The host-wide Storage Catalog lock file inside [`CATALOG_DIR`].
pub const CATALOG_LOCK_FILE: &str = "catalog.lock";
/// The lock file one `lazaret state gc` holds for its whole run, inside
/// [`CATALOG_DIR`].
pub const GC_LOCK_FILE: &str = "gc.lock";
/// The Storage Catalog's schema identity (schemas.md store-version paragraph).
pub const STORAGE_CATALOG_SCHEMA_ID: &str = "lazaret-storage-catalog-v1";
/// The only accepted Storage Catalog version.
pub const STORAGE_CATALOG_SCHEMA_VERSION: u32 = 1;
/// How long one operation waits for the catalog lock before it fails.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The most lease rows the catalog holds; `insert_lease` refuses beyond it
/// and `leases` refuses a catalog that holds more.
pub const MAX_LEASES: usize = 65_536;

/// schemas.md "Storage Catalog" `ArtifactLease`: one prepared artifact
/// leased to one generation of one Domain. Ordered field by field, which is
/// also the order of the catalog's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArtifactLease {
    pub artifact: PreparedArtifactId,
    pub domain: DomainId,
    pub generation: GenerationId,
}

/// Held by one `lazaret state gc` at a time (two reclaiming the same
/// artifact at once would race on its tree); released on drop.
#[derive(Debug)]
pub struct GcLock {
    _lock: CatalogLock,
}

/// What [`StorageCatalog::insert_lease`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseInsert {
    Inserted,
    /// The exact lease was already present (a resumed acquisition).
    AlreadyHeld,
}

/// What [`StorageCatalog::remove_lease`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseRemoval {
    Removed,
    /// The exact lease was not present (a resumed release).
    AlreadyAbsent,
}

/// Where the Storage Catalog of one Storage Root lives. Holds no open
/// file: every operation opens and closes the catalog itself (OR-6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageCatalog {
    dir: PathBuf,
    path: PathBuf,
    lock_path: PathBuf,
    lock_wait: Duration,
    max_leases: usize,
}

/// One open catalog under its lock. Fields drop in declaration order, so
/// the database is closed before the lock is released (spec 3.6, OR-6).
struct Section {
    db: Database,
    _lock: CatalogLock,
}

/// What a write section does when there is no catalog yet.
enum Missing<T> {
    /// Creates and initialises it.
    Create,
    /// Creates nothing and answers this.
    Return(T),
}

/// What the metadata check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// v1 metadata.
    Current,
    /// A new database with no table at all: to be initialised by a write.
    Fresh,
}

impl StorageCatalog {
    /// The catalog of `storage_root`. Does no I/O.
    pub fn at(storage_root: &Path) -> Self {
        let dir = storage_root.join(CATALOG_DIR);
        Self {
            path: dir.join(CATALOG_FILE),
            lock_path: dir.join(CATALOG_LOCK_FILE),
            dir,
            lock_wait: LOCK_WAIT,
            max_leases: MAX_LEASES,
        }
    }

    /// The same catalog with another bound on the lock wait.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    #[cfg(test)]
    fn with_max_leases(mut self, max: usize) -> Self {
        self.max_leases = max;
        self
    }

    /// The exclusive lock of a `lazaret state gc` run, waited for at most
    /// the catalog's lock wait.
    pub fn gc_lock(&self) -> Result<GcLock, CatalogError> {
        self.ensure_dir()?;
        let lock = CatalogLock::acquire(&self.dir.join(GC_LOCK_FILE), self.lock_wait)?;
        Ok(GcLock { _lock: lock })
    }

    /// The redb file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The host-wide lock file.
    pub fn lock_path(&self) -> &Path {
        &self.lock_path
    }

    /// Inserts the exact lease in one catalog transaction (spec 3.6
    /// acquisition step 2, model `InsertCatalogLease`, traced as a
    /// one-step operation) for a Domain whose Host Coordinator knows it as
    /// `record`, for the artifact tree it checked (`tree`: the artifact
    /// directory's device and inode). Creates and initialises the catalog
    /// if needed. An equal
    /// lease already present is `AlreadyHeld` and changes nothing. Only an
    /// Available artifact is leased: a missing or Reclaiming one refuses
    /// (the model's guard `artifact[a] = "Available"`, OR-7), so a
    /// reclamation that began never loses its tree to a new lease.
    pub fn insert_lease(
        &self,
        lease: &ArtifactLease,
        record: DomainRecord,
        tree: (u64, u64),
    ) -> Result<LeaseInsert, CatalogError> {
        let _span = tracing::debug_span!("InsertCatalogLease", lease = ?lease).entered();
        let path = self.path.as_path();
        let mut run = self.run(lease.artifact).acting_for(ActingDomain {
            domain: lease.domain,
            generation: lease.generation,
            record,
        });
        let (inserted, after) = self.write_section(Missing::Create, |txn| {
            let rows = artifacts::rows_in(txn, path, &lease.artifact)?;
            run.observe(&rows)?;
            // The tree the launch checked is still the artifact's: one
            // reclaimed and prepared again meanwhile is another tree.
            if let Some(row) = artifacts::artifact_in(txn, path, &lease.artifact)? {
                if (row.device, row.inode) != tree {
                    return Err(CatalogError::ArtifactReplaced {
                        path: path.to_owned(),
                        artifact: lease.artifact,
                    });
                }
            }
            if rows.leases.contains(&(lease.domain, lease.generation)) {
                return Ok(((LeaseInsert::AlreadyHeld, None), false));
            }
            if !run.enabled(Step::InsertCatalogLease)? {
                if rows.artifact != Some(ArtifactState::Available) {
                    return Err(CatalogError::ArtifactNotAvailable {
                        path: path.to_owned(),
                        artifact: lease.artifact,
                        state: rows.artifact,
                    });
                }
                run.check(Step::InsertCatalogLease)?;
            }
            let mut table = txn
                .open_table(tables::LEASES)
                .map_err(CatalogError::redb(path, "open leases table"))?;
            let held = table
                .len()
                .map_err(CatalogError::redb(path, "count leases"))?;
            if held >= u64::try_from(self.max_leases).unwrap_or(u64::MAX) {
                return Err(CatalogError::Full {
                    path: path.to_owned(),
                    max: self.max_leases,
                });
            }
            table
                .insert(&tables::lease_key(lease), ())
                .map_err(CatalogError::redb(path, "insert lease"))?;
            drop(table);
            let after = artifacts::rows_in(txn, path, &lease.artifact)?;
            Ok(((LeaseInsert::Inserted, Some(after)), true))
        })?;
        if let Some(after) = after {
            run.take(Step::InsertCatalogLease, Some(&after), None)?;
        }
        Ok(inserted)
    }

    /// Removes only the exact lease in one catalog transaction (spec 3.6
    /// release step 4, model `RemoveCatalogLease`, FR-17, traced as a
    /// one-step operation). Under the catalog lock, before the row is
    /// touched, `record` reads what the Domain records now (`None`: it
    /// cannot be read); the model removes the lease only for the matching
    /// release intent, and nothing is removed otherwise. A missing catalog or lease is `AlreadyAbsent`;
    /// nothing is created.
    pub fn remove_lease(
        &self,
        lease: &ArtifactLease,
        record: impl FnOnce() -> Option<DomainRecord>,
    ) -> Result<LeaseRemoval, CatalogError> {
        let _span = tracing::debug_span!("RemoveCatalogLease", lease = ?lease).entered();
        let path = self.path.as_path();
        let mut run = self.run(lease.artifact);
        let (removed, after) = self.write_section(
            Missing::Return((LeaseRemoval::AlreadyAbsent, None)),
            |txn| {
                let rows = artifacts::rows_in(txn, path, &lease.artifact)?;
                if !rows.leases.contains(&(lease.domain, lease.generation)) {
                    return Ok(((LeaseRemoval::AlreadyAbsent, None), false));
                }
                let refused = || CatalogError::ReleaseNotIntended {
                    path: path.to_owned(),
                    artifact: lease.artifact,
                    generation: lease.generation.0,
                };
                run = self.run(lease.artifact).acting_for(ActingDomain {
                    domain: lease.domain,
                    generation: lease.generation,
                    record: record().ok_or_else(refused)?,
                });
                match run.observe(&rows) {
                    Err(CatalogError::Model { source, .. }) => {
                        tracing::warn!(error = %source, "the Domain's record does not explain its lease");
                        return Err(refused());
                    }
                    other => other?,
                }
                if !run.enabled(Step::RemoveCatalogLease)? {
                    return Err(refused());
                }
                txn.open_table(tables::LEASES)
                    .map_err(CatalogError::redb(path, "open leases table"))?
                    .remove(&tables::lease_key(lease))
                    .map_err(CatalogError::redb(path, "remove lease"))?;
                let after = artifacts::rows_in(txn, path, &lease.artifact)?;
                Ok(((LeaseRemoval::Removed, Some(after)), true))
            },
        )?;
        if let Some(after) = after {
            run.take(Step::RemoveCatalogLease, Some(&after), None)?;
        }
        Ok(removed)
    }

    /// Starts `run`'s model from its artifact's rows without a step: a
    /// recovery reads them before its first (physical) step. Returns the
    /// rows. Creates nothing; a missing catalog holds no rows.
    pub fn observe(&self, run: &mut CatalogRun) -> Result<ArtifactRows, CatalogError> {
        let path = self.path.as_path();
        let artifact = run.artifact();
        let rows = self
            .write_section(Missing::Return(None), |txn| {
                Ok((Some(artifacts::rows_in(txn, path, &artifact)?), false))
            })?
            .unwrap_or_default();
        run.observe(&rows)?;
        Ok(rows)
    }

    /// Whether the exact lease is present. A missing catalog holds none.
    pub fn lease_held(&self, lease: &ArtifactLease) -> Result<bool, CatalogError> {
        let _span = tracing::debug_span!("storage_catalog_lease_held", lease = ?lease).entered();
        let path = self.path.as_path();
        let held = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::LEASES, "open leases table")? else {
                return Ok(false);
            };
            let held = table
                .get(&tables::lease_key(lease))
                .map_err(CatalogError::redb(path, "read lease"))?
                .is_some();
            Ok(held)
        })?;
        Ok(held == Some(true))
    }

    /// Every lease, sorted. Refuses a catalog holding more than
    /// [`MAX_LEASES`] rows. A missing catalog holds none.
    pub fn leases(&self) -> Result<Vec<ArtifactLease>, CatalogError> {
        let _span = tracing::debug_span!("storage_catalog_leases").entered();
        let path = self.path.as_path();
        let leases = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::LEASES, "open leases table")? else {
                return Ok(Vec::new());
            };
            let too_many = || CatalogError::TooManyLeases {
                path: path.to_owned(),
                max: self.max_leases,
            };
            let count = table
                .len()
                .map_err(CatalogError::redb(path, "count leases"))?;
            if usize::try_from(count).map_or(true, |count| count > self.max_leases) {
                return Err(too_many());
            }
            let mut leases = Vec::new();
            // Keys are in byte order, which is ArtifactLease's order.
            for entry in table
                .iter()
                .map_err(CatalogError::redb(path, "list leases"))?
            {
                // `()` values: the row is only its key.
                let (key, _) = entry.map_err(CatalogError::redb(path, "read lease"))?;
                if leases.len() >= self.max_leases {
                    return Err(too_many());
                }
                leases.push(tables::lease_from_key(&key.value()));
            }
            Ok(leases)
        })?;
        Ok(leases.unwrap_or_default())
    }

    /// One write section: the catalog opened under its lock, its metadata
    /// checked, `body` run in one transaction that commits only when `body`
    /// reports a change (with v1 metadata, when the catalog was new). A
    /// missing or empty catalog is created, or answered without creating
    /// anything, as `missing` says.
    fn write_section<T>(
        &self,
        missing: Missing<T>,
        body: impl FnOnce(&WriteTransaction) -> Result<(T, bool), CatalogError>,
    ) -> Result<T, CatalogError> {
        let path = self.path.as_path();
        let (section, missing) = match missing {
            Missing::Create => (self.open_or_create()?, None),
            Missing::Return(answer) => match self.open_existing()? {
                Some(section) => (section, Some(answer)),
                None => return Ok(answer),
            },
        };
        let txn = section
            .db
            .begin_write()
            .map_err(CatalogError::redb(path, "begin write"))?;
        let fresh = check_write_metadata(&txn, path)? == Found::Fresh;
        if let (true, Some(answer)) = (fresh, missing) {
            finish(txn, false, path)?;
            return Ok(answer);
        }
        let (value, changed) = match body(&txn) {
            Ok(done) => done,
            Err(e) => {
                // The refusal is the error to report; the abort only
                // discards what `body` did.
                if let Err(abort) = txn.abort() {
                    tracing::warn!(error = %abort, "aborting a refused catalog transaction");
                }
                return Err(e);
            }
        };
        if fresh && changed {
            // The metadata commits with the first row, or not at all.
            initialise(&txn, path)?;
        }
        finish(txn, changed, path)?;
        Ok(value)
    }

    /// One read section; `None` when there is no catalog (or a new empty
    /// one) to read.
    fn read_section<T>(
        &self,
        body: impl FnOnce(&ReadTransaction) -> Result<T, CatalogError>,
    ) -> Result<Option<T>, CatalogError> {
        let path = self.path.as_path();
        let Some(section) = self.open_existing()? else {
            return Ok(None);
        };
        let txn = section
            .db
            .begin_read()
            .map_err(CatalogError::redb(path, "begin read"))?;
        if check_read_metadata(&txn, path)? == Found::Fresh {
            return Ok(None);
        }
        body(&txn).map(Some)
    }

    /// Opens the catalog under its lock, creating the directory (0700) and
    /// the file (0600) if missing.
    fn open_or_create(&self) -> Result<Section, CatalogError> {
        self.ensure_dir()?;
        let lock = CatalogLock::acquire(&self.lock_path, self.lock_wait)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&self.path)
            .map_err(|source| self.open_file_error(source))?;
        self.regular_file_len(&file)?;
        let db = self.database(file)?;
        Ok(Section { db, _lock: lock })
    }

    /// Opens an existing catalog under its lock; `None` when there is
    /// nothing to read (no directory, no file, or an empty file). Creates
    /// no directory and no catalog file.
    fn open_existing(&self) -> Result<Option<Section>, CatalogError> {
        if !self.dir_exists()? {
            return Ok(None);
        }
        let lock = CatalogLock::acquire(&self.lock_path, self.lock_wait)?;
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&self.path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(self.open_file_error(source)),
        };
        if self.regular_file_len(&file)? == 0 {
            return Ok(None);
        }
        let db = self.database(file)?;
        Ok(Some(Section { db, _lock: lock }))
    }

    fn database(&self, file: File) -> Result<Database, CatalogError> {
        Database::builder()
            .create_file(file)
            .map_err(|source| CatalogError::Open {
                path: self.path.clone(),
                source: Box::new(source),
            })
    }

    fn regular_file_len(&self, file: &File) -> Result<u64, CatalogError> {
        let metadata = file
            .metadata()
            .map_err(|source| self.open_file_error(source))?;
        if !metadata.is_file() {
            return Err(CatalogError::NotAFile {
                path: self.path.clone(),
            });
        }
        Ok(metadata.len())
    }

    fn open_file_error(&self, source: io::Error) -> CatalogError {
        CatalogError::OpenFile {
            path: self.path.clone(),
            source,
        }
    }

    /// Whether the catalog directory exists; a symlink or a non-directory
    /// there refuses.
    fn dir_exists(&self) -> Result<bool, CatalogError> {
        match std::fs::symlink_metadata(&self.dir) {
            Ok(m) if m.file_type().is_symlink() => Err(CatalogError::DirSymlink {
                path: self.dir.clone(),
            }),
            Ok(m) if !m.is_dir() => Err(CatalogError::DirNotDirectory {
                path: self.dir.clone(),
            }),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(CatalogError::InspectDir {
                path: self.dir.clone(),
                source,
            }),
        }
    }

    /// Creates the catalog directory (0700) inside an existing Storage Root.
    fn ensure_dir(&self) -> Result<(), CatalogError> {
        if self.dir_exists()? {
            return Ok(());
        }
        match DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => Ok(()),
            // Another coordinator created it first: check what is there now.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.dir_exists().map(drop),
            Err(source) => Err(CatalogError::CreateDir {
                path: self.dir.clone(),
                source,
            }),
        }
    }
}

/// Commits a transaction that changed something, aborts one that did not.
fn finish(txn: WriteTransaction, changed: bool, path: &Path) -> Result<(), CatalogError> {
    if changed {
        txn.commit().map_err(CatalogError::redb(path, "commit"))
    } else {
        txn.abort().map_err(CatalogError::redb(path, "abort"))
    }
}

/// A table of a read transaction, or `None` when no write created it yet.
fn read_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    path: &Path,
    table: redb::TableDefinition<'_, K, V>,
    step: &'static str,
) -> Result<Option<redb::ReadOnlyTable<K, V>>, CatalogError> {
    match txn.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(CatalogError::redb(path, step)(e)),
    }
}

/// Which tables a database holds, as far as the metadata check cares.
struct Listing {
    metadata: bool,
    others: bool,
}

impl Listing {
    fn of(
        tables: impl Iterator<Item = UntypedTableHandle>,
        mut multimap: impl Iterator<Item = UntypedMultimapTableHandle>,
    ) -> Self {
        let mut listing = Self {
            metadata: false,
            others: multimap.next().is_some(),
        };
        for table in tables {
            if table.name() == tables::METADATA.name() {
                listing.metadata = true;
            } else {
                listing.others = true;
            }
            if listing.metadata && listing.others {
                break;
            }
        }
        listing
    }

    /// Without a metadata table: a database with no table at all is new;
    /// one with other tables is unversioned and refuses.
    fn without_metadata(&self, path: &Path) -> Result<Found, CatalogError> {
        if self.others {
            Err(CatalogError::Unversioned {
                path: path.to_owned(),
            })
        } else {
            Ok(Found::Fresh)
        }
    }
}

/// The metadata check of a read section: runs before any other table is
/// opened (schemas.md store-version paragraph).
fn check_read_metadata(txn: &ReadTransaction, path: &Path) -> Result<Found, CatalogError> {
    let listing = Listing::of(
        txn.list_tables()
            .map_err(CatalogError::redb(path, "list tables"))?,
        txn.list_multimap_tables()
            .map_err(CatalogError::redb(path, "list multimap tables"))?,
    );
    if !listing.metadata {
        return listing.without_metadata(path);
    }
    let table = txn
        .open_table(tables::METADATA)
        .map_err(CatalogError::redb(path, "open metadata table"))?;
    check_metadata(&table, path)?;
    Ok(Found::Current)
}

/// The metadata check of a write section: the same, without creating the
/// metadata table as a side effect of looking for it.
fn check_write_metadata(txn: &WriteTransaction, path: &Path) -> Result<Found, CatalogError> {
    let listing = Listing::of(
        txn.list_tables()
            .map_err(CatalogError::redb(path, "list tables"))?,
        txn.list_multimap_tables()
            .map_err(CatalogError::redb(path, "list multimap tables"))?,
    );
    if !listing.metadata {
        return listing.without_metadata(path);
    }
    let table = txn
        .open_table(tables::METADATA)
        .map_err(CatalogError::redb(path, "open metadata table"))?;
    check_metadata(&table, path)?;
    Ok(Found::Current)
}

fn check_metadata(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &Path,
) -> Result<(), CatalogError> {
    let Some(bytes) = table
        .get(tables::METADATA_KEY)
        .map_err(CatalogError::redb(path, "read metadata"))?
    else {
        return Err(CatalogError::Unversioned {
            path: path.to_owned(),
        });
    };
    let metadata: StoreMetadata =
        codec::decode("store metadata", bytes.value()).map_err(|source| {
            CatalogError::MetadataMalformed {
                path: path.to_owned(),
                source,
            }
        })?;
    if metadata.schema_id != STORAGE_CATALOG_SCHEMA_ID {
        return Err(CatalogError::UnknownIdentity {
            path: path.to_owned(),
            found: metadata.schema_id,
        });
    }
    match metadata.schema_version {
        STORAGE_CATALOG_SCHEMA_VERSION => Ok(()),
        v if v < STORAGE_CATALOG_SCHEMA_VERSION => Err(CatalogError::OlderVersion {
            path: path.to_owned(),
            found: v,
        }),
        v => Err(CatalogError::NewerVersion {
            path: path.to_owned(),
            found: v,
        }),
    }
}

/// Writes v1 metadata into a fresh catalog, inside the caller's first write
/// transaction.
fn initialise(txn: &WriteTransaction, path: &Path) -> Result<(), CatalogError> {
    let metadata = codec::encode(
        "store metadata",
        &StoreMetadata {
            schema_id: STORAGE_CATALOG_SCHEMA_ID.to_owned(),
            schema_version: STORAGE_CATALOG_SCHEMA_VERSION,
        },
    )
    .map_err(|source| CatalogError::EncodeMetadata {
        path: path.to_owned(),
        source,
    })?;
    let mut table = txn
        .open_table(tables::METADATA)
        .map_err(CatalogError::redb(path, "open metadata table"))?;
    table
        .insert(tables::METADATA_KEY, metadata.as_slice())
        .map_err(CatalogError::redb(path, "write metadata"))?;
    Ok(())
}
