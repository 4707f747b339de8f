//! One prepare operation on the Storage Catalog (spec 3.6 "Prepared
//! lower", OR-7; schemas.md "Storage Catalog"; `protocol/PreparedLower.tla`
//! actions `RecordPrepareIntent`, `CreateStage`, `RecordStageOwned`,
//! `PublishArtifact`, `PrepareWorkerCrash`, `RecoverAbandonedStage`,
//! `ForgetPrepareOperation`, `ForgetAbandonedIntent`, each a step of the
//! operation's run of the PreparedLower model, checked before its effect).
//!
//! Everything happens beneath `<storage root>/prepared`, opened once without
//! following a symbolic link: the stage `.stage-<operation>` is created
//! there exclusively, published by a `RENAME_NOREPLACE` to `<artifact id>`,
//! and removed only by the removal worker from its recorded device and
//! inode. Nothing is removed by a path string.
//!
//! Whether an operation's worker is gone is proved by its lock,
//! `.stage-<operation>.lock`: the preparer takes it before the intent is
//! recorded, every worker it spawns inherits it, and it is released only
//! after the operation is retired. A lock that can be taken therefore
//! means no process of that operation is left, so its tree cannot change
//! any more; recovery holds the lock while it acts.
use super::{PrepareError, PrepareHost};
use crate::crash_point::crash_point;
use crate::lock_file::{try_lock, Flock};
use crate::storage_catalog::{CatalogError, StorageCatalog};
use lazaret_generated::prepared_lower::{StageStates, WorkerStates};
use lazaret_runtime::catalog_model::Step;
use lazaret_runtime::records::catalog::{OperationId, PrepareOperation, PrepareStageState};
use lazaret_runtime::records::ids::HostPath;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, CWD};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The directory of prepared artifacts under the Storage Root.
pub const PREPARED_DIR: &str = "prepared";
/// A stage's name is this followed by its operation ID.
const STAGE_PREFIX: &str = ".stage-";
/// An operation's lock is its stage's name followed by this.
const LOCK_SUFFIX: &str = ".lock";
/// The most entries of `prepared/` one search for orphan locks reads.
const MAX_SCANNED: usize = 1 << 17;

/// `<storage root>/prepared`, open.
#[derive(Debug)]
pub struct PreparedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What recovery did with an operation whose worker is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Its exact stage (if any was left) was removed and the operation
    /// forgotten: the artifact may be prepared again.
    Recovered,
    /// A process of the operation still holds its lock.
    Live,
    /// Retained fail-closed (OR-7): a tree Lazaret cannot prove it created
    /// is at the stage path; nothing was deleted.
    Retained {
        stage: PathBuf,
        reason: &'static str,
    },
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl PreparedDir {
    /// Opens (creating it 0700 when missing) `<storage_root>/prepared`,
    /// reached without a symbolic link.
    pub fn open(storage_root: &Path) -> Result<Self, PrepareError> {
        let path = storage_root.join(PREPARED_DIR);
        match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io_error("create", &path, e)),
        }
        let fd = rustix::fs::openat2(
            CWD,
            &path,
            dir_flags(),
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| io_error("open (without following a symbolic link)", &path, e))?;
        Ok(Self { fd, path })
    }

    /// Opens `<storage_root>/prepared` if it exists; creates nothing.
    pub fn open_existing(storage_root: &Path) -> Result<Option<Self>, PrepareError> {
        let path = storage_root.join(PREPARED_DIR);
        match rustix::fs::openat2(
            CWD,
            &path,
            dir_flags(),
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => Ok(Some(Self { fd, path })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_error(
                "open (without following a symbolic link)",
                &path,
                e,
            )),
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stage path of `operation`.
    pub fn stage_path(&self, operation: OperationId) -> PathBuf {
        self.path.join(stage_name(operation))
    }

    /// The `(device, inode)` of the directory `name` here, not followed;
    /// `None` when nothing is there (anything but a directory has an
    /// identity no operation recorded).
    pub fn identity_of(&self, name: &str) -> Result<Option<(u64, u64)>, PrepareError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {
                Ok(Some((st.st_dev, st.st_ino)))
            }
            // Anything else is not a tree this operation made.
            Ok(_) => Ok(Some((u64::MAX, u64::MAX))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_error("inspect", &self.path.join(name), e)),
        }
    }

    /// Model `CreateStage`: the stage directory, created exclusively (it
    /// fails when any entry holds the name); returns its identity.
    pub fn create_stage(&self, operation: OperationId) -> Result<(u64, u64), PrepareError> {
        let _span = tracing::debug_span!("CreateStage", %operation).entered();
        let name = stage_name(operation);
        let path = self.path.join(&name);
        rustix::fs::mkdirat(&self.fd, name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(|e| io_error("create the stage", &path, e))?;
        let stage = rustix::fs::openat(&self.fd, name.as_str(), dir_flags(), Mode::empty())
            .map_err(|e| io_error("open the stage", &path, e))?;
        let st = rustix::fs::fstat(&stage).map_err(|e| io_error("inspect", &path, e))?;
        Ok((st.st_dev, st.st_ino))
    }

    /// The publication step of `PublishArtifact`, run under the catalog
    /// lock: the stage, still the recorded directory, is renamed to the
    /// artifact's name without replacing anything.
    pub fn publish(
        &self,
        op: &PrepareOperation,
    ) -> Result<crate::storage_catalog::Published, CatalogError> {
        let stage = stage_name(op.operation_id);
        let artifact = op.expected_artifact_id.to_string();
        let stage_path = self.path.join(&stage);
        let failed = |path: &Path| {
            let path = path.to_owned();
            move |e: rustix::io::Errno| CatalogError::Publish {
                path,
                source: e.into(),
            }
        };
        let recorded = match op.evidence() {
            Ok(Some(evidence)) => evidence,
            _ => {
                return Err(CatalogError::OperationNotOwned {
                    path: stage_path,
                    operation: op.operation_id,
                })
            }
        };
        let found = match rustix::fs::statat(&self.fd, stage.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() => {
                Some((st.st_dev, st.st_ino))
            }
            Ok(_) => None,
            Err(e) => return Err(failed(&stage_path)(e)),
        };
        if found != Some(recorded) {
            return Err(CatalogError::Publish {
                path: stage_path,
                source: io::Error::other(
                    "the stage is no longer the directory this operation created",
                ),
            });
        }
        rustix::fs::renameat_with(
            &self.fd,
            stage.as_str(),
            &self.fd,
            artifact.as_str(),
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(failed(&self.path.join(&artifact)))?;
        rustix::fs::fsync(&self.fd).map_err(failed(&self.path))?;
        // Renamed, not yet committed: recovery finds the tree at the
        // artifact's name by the operation's recorded identity.
        crash_point!(Prepare, "operation", "after-rename", "PublishArtifact");
        let path = self.path.join(&artifact);
        let host_path =
            HostPath::new(path.as_os_str().as_encoded_bytes().to_vec()).map_err(|e| {
                CatalogError::Publish {
                    path: path.clone(),
                    source: io::Error::other(e.to_string()),
                }
            })?;
        Ok(crate::storage_catalog::Published {
            path: host_path,
            device: recorded.0,
            inode: recorded.1,
        })
    }

    /// Removes the directory `name` here if it is still `(device, inode)`:
    /// its contents through the removal worker, then the emptied directory
    /// itself (the developer's). `hold` is a preparation's operation lock,
    /// which the worker inherits. Returns whether there was anything to remove.
    pub fn remove_exact(
        &self,
        host: &mut dyn PrepareHost,
        name: &str,
        evidence: (u64, u64),
        hold: Option<BorrowedFd<'_>>,
    ) -> Result<bool, PrepareError> {
        let path = self.path.join(name);
        if self.identity_of(name)? != Some(evidence) {
            return Ok(false);
        }
        host.remove_tree(&path, evidence.0, evidence.1, hold)?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(|e| io_error("remove the emptied directory", &path, e))?;
        // On disk before the catalog forgets it: a directory that came back
        // after a power loss would block its name with no row naming it.
        rustix::fs::fsync(&self.fd).map_err(|e| io_error("sync", &self.path, e))?;
        Ok(true)
    }
}

impl PreparedDir {
    /// Removes the directory `name` here only if it is empty (`rmdir`
    /// cannot remove anything else); whether it did.
    fn remove_empty(&self, name: &str) -> Result<bool, PrepareError> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) => {
                rustix::fs::fsync(&self.fd).map_err(|e| io_error("sync", &self.path, e))?;
                Ok(true)
            }
            Err(
                rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST | rustix::io::Errno::NOTDIR,
            ) => Ok(false),
            Err(e) => Err(io_error("remove the empty stage", &self.path.join(name), e)),
        }
    }
}

impl PreparedDir {
    /// Removes the operation lock files that no recorded operation names
    /// and no process holds (left by a preparer that died before its
    /// intent was recorded, or could not remove its file); returns how
    /// many. `recorded` is every operation the catalog holds.
    pub fn remove_orphan_locks(&self, recorded: &[OperationId]) -> Result<usize, PrepareError> {
        let mut removed = 0;
        let mut names = Vec::new();
        let mut seen = 0usize;
        let entries =
            rustix::fs::Dir::read_from(&self.fd).map_err(|e| io_error("read", &self.path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error("read", &self.path, e))?;
            seen += 1;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_prefix(STAGE_PREFIX)
                .and_then(|n| n.strip_suffix(LOCK_SUFFIX))
                .and_then(parse_operation)
            {
                names.push(id);
            }
            // Bounded: a directory holding more is not Lazaret's doing,
            // and the rest waits for the next run.
            if names.len() >= crate::storage_catalog::MAX_OPERATIONS || seen >= MAX_SCANNED {
                break;
            }
        }
        for id in names {
            if recorded.contains(&id) {
                continue;
            }
            if let Taken::Free(lock) = OperationLock::take(self, id)? {
                lock.release(self);
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// An operation ID from its 32 hex digits.
fn parse_operation(hex: &str) -> Option<OperationId> {
    let mut id = [0u8; 16];
    if hex.len() != 32 {
        return None;
    }
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(OperationId(id))
}

/// `.stage-<operation>`.
fn stage_name(operation: OperationId) -> String {
    format!("{STAGE_PREFIX}{operation}")
}

fn io_error(step: &'static str, path: &Path, e: rustix::io::Errno) -> PrepareError {
    PrepareError::Io {
        step,
        path: path.to_owned(),
        source: e.into(),
    }
}

/// What [`OperationLock::take`] found.
#[derive(Debug)]
pub enum Taken {
    /// No process of the operation holds it: taken.
    Free(OperationLock),
    /// A process of the operation holds it.
    Held,
    /// No lock file: something removed it, so nothing proves the operation
    /// is over.
    Missing,
}

/// The liveness lock of one operation (see the module comment).
#[derive(Debug)]
pub struct OperationLock {
    fd: OwnedFd,
    name: String,
    path: PathBuf,
}

impl OperationLock {
    /// A new operation's lock: created exclusively and taken, before its
    /// intent is recorded.
    pub fn create(dir: &PreparedDir, operation: OperationId) -> Result<Self, PrepareError> {
        let name = format!("{}{LOCK_SUFFIX}", stage_name(operation));
        let path = dir.path.join(&name);
        let fd = rustix::fs::openat(
            &dir.fd,
            name.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io_error("create the operation lock", &path, e))?;
        // Between the creation and the lock, `remove_orphan_locks` may take
        // the file (no operation names it yet) and unlink it: then either
        // the lock is held, or the name is no longer this file.
        let raced = || PrepareError::LockRaced { path: path.clone() };
        match try_lock(&fd) {
            Ok(Flock::Taken) => {}
            Ok(Flock::Held) => return Err(raced()),
            Err(e) => return Err(io_error("lock", &path, e)),
        }
        let own = rustix::fs::fstat(&fd).map_err(|e| io_error("inspect", &path, e))?;
        match rustix::fs::statat(&dir.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino) => {}
            Ok(_) | Err(rustix::io::Errno::NOENT) => return Err(raced()),
            Err(e) => return Err(io_error("inspect", &path, e)),
        }
        // On disk before the intent that names it: a recorded operation
        // always has its lock file, even after a power loss.
        rustix::fs::fsync(&dir.fd).map_err(|e| io_error("sync", &dir.path, e))?;
        Ok(Self { fd, name, path })
    }

    /// Takes an existing operation's lock if no process of it holds it.
    pub fn take(dir: &PreparedDir, operation: OperationId) -> Result<Taken, PrepareError> {
        let name = format!("{}{LOCK_SUFFIX}", stage_name(operation));
        let path = dir.path.join(&name);
        let fd = match rustix::fs::openat(
            &dir.fd,
            name.as_str(),
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(Taken::Missing),
            Err(e) => return Err(io_error("open the operation lock", &path, e)),
        };
        match try_lock(&fd) {
            Ok(Flock::Taken) => Ok(Taken::Free(Self { fd, name, path })),
            Ok(Flock::Held) => Ok(Taken::Held),
            Err(e) => Err(io_error("lock", &path, e)),
        }
    }

    /// The descriptor workers inherit.
    pub fn hold(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Removes the lock file, then releases the lock, once the operation is
    /// retired (published, or forgotten) or was never recorded. A file that
    /// cannot be removed is only logged: the operation is over either way,
    /// and `lazaret state gc` removes lock files no operation names.
    pub fn release(self, dir: &PreparedDir) {
        match rustix::fs::unlinkat(&dir.fd, self.name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove an operation lock file");
            }
        }
    }
}

/// Recovers an operation found in the catalog (OR-7): when its lock can be
/// taken, its worker is gone, so
/// - an Owned operation: the exact stage (by its recorded device and
///   inode) is removed (`RecoverAbandonedStage`), and so is a tree at the
///   artifact's name with that identity (a publication whose catalog
///   commit was lost), then the operation is forgotten
///   (`ForgetPrepareOperation`);
/// - an Intent operation is forgotten (`ForgetAbandonedIntent`) when
///   nothing is at its stage path, or only an empty directory (the stage
///   it created before a crash kept it from recording it as Owned; its
///   worker starts only after that, so nothing was written into it, and
///   `rmdir` removes nothing else);
/// - anything else at the stage path is retained and reported.
///
/// The row is read again under the operation's lock, so an operation that
/// finished meanwhile is left alone.
pub fn recover(
    host: &mut dyn PrepareHost,
    catalog: &StorageCatalog,
    dir: &PreparedDir,
    operation: OperationId,
) -> Result<Recovery, PrepareError> {
    let lock = match OperationLock::take(dir, operation)? {
        Taken::Free(lock) => lock,
        Taken::Held => return Ok(Recovery::Live),
        // Retired meanwhile (its preparer removes the file after the
        // row), or the file was removed by something else.
        Taken::Missing if recorded(catalog, operation)?.is_none() => {
            return Ok(Recovery::Recovered)
        }
        Taken::Missing => {
            return Ok(Recovery::Retained {
                stage: dir.stage_path(operation),
                reason: "its operation lock file is missing, so nothing proves its process is gone",
            })
        }
    };
    let outcome = recover_held(host, catalog, dir, operation, &lock)?;
    if outcome == Recovery::Recovered {
        lock.release(dir);
    }
    Ok(outcome)
}

/// [`recover`] by the holder of the operation's lock (the operation's own
/// preparer cleaning up after a failure, or a recovery that took it).
pub(super) fn recover_held(
    host: &mut dyn PrepareHost,
    catalog: &StorageCatalog,
    dir: &PreparedDir,
    operation: OperationId,
    lock: &OperationLock,
) -> Result<Recovery, PrepareError> {
    match recorded(catalog, operation)? {
        None => Ok(Recovery::Recovered),
        Some(op) => recover_row(host, catalog, dir, &op, lock),
    }
}

/// The operation's row, if the catalog still holds it.
fn recorded(
    catalog: &StorageCatalog,
    operation: OperationId,
) -> Result<Option<PrepareOperation>, PrepareError> {
    Ok(catalog
        .prepare_operations()
        .map_err(PrepareError::Catalog)?
        .into_iter()
        .find(|op| op.operation_id == operation))
}

fn recover_row(
    host: &mut dyn PrepareHost,
    catalog: &StorageCatalog,
    dir: &PreparedDir,
    op: &PrepareOperation,
    lock: &OperationLock,
) -> Result<Recovery, PrepareError> {
    let stage = stage_name(op.operation_id);
    let stage_path = dir.path.join(&stage);
    let artifact = op.expected_artifact_id.to_string();
    let found = dir.identity_of(&stage)?;
    let catalog_err = PrepareError::Catalog;
    // The worker is gone (its lock was taken); what is at the stage path
    // is the model's `stage`.
    let observed = match (op.stage_state, op.evidence()) {
        (PrepareStageState::Owned, Ok(Some(evidence))) => match found {
            Some(f) if f == evidence => StageStates::Own,
            Some(_) => StageStates::Foreign,
            // Renamed to the artifact's name, the catalog commit lost: the
            // same tree (the rename is below the model's abstraction).
            None if dir.identity_of(&artifact)? == Some(evidence) => StageStates::Own,
            // Nothing of the operation is left: its exact stage is absent.
            None => StageStates::Removed,
        },
        (PrepareStageState::Intent, Ok(None)) => match found {
            None => StageStates::Absent,
            // The stage it created before it could record it Owned, if
            // `rmdir` (the step's effect) proves it empty.
            Some(_) => StageStates::Own,
        },
        _ => StageStates::Foreign,
    };
    let mut run = catalog
        .run(op.expected_artifact_id)
        .knowing(WorkerStates::Dead, observed);
    let rows = catalog.observe(&mut run).map_err(catalog_err)?;
    let retained = Recovery::Retained {
        stage: stage_path,
        reason: match op.stage_state {
            PrepareStageState::Owned => "it is not the directory the operation recorded",
            PrepareStageState::Intent => {
                "the operation was interrupted before it recorded the stage as its own"
            }
        },
    };
    if run
        .enabled(Step::RecoverAbandonedStage)
        .map_err(catalog_err)?
    {
        let _span =
            tracing::info_span!("RecoverAbandonedStage", operation = %op.operation_id).entered();
        let evidence = (op.device.unwrap_or(u64::MAX), op.inode.unwrap_or(u64::MAX));
        dir.remove_exact(host, &stage, evidence, Some(lock.hold()))?;
        // A tree at the artifact's name is this stage renamed only while
        // no artifact row claims the name.
        if rows.artifact.is_none() {
            dir.remove_exact(host, &artifact, evidence, Some(lock.hold()))?;
        }
        let gone = dir.identity_of(&stage)?.is_none();
        run.took(
            Step::RecoverAbandonedStage,
            Some(if gone {
                StageStates::Removed
            } else {
                StageStates::Own
            }),
        )
        .map_err(catalog_err)?;
    }
    if run
        .enabled(Step::ForgetPrepareOperation)
        .map_err(catalog_err)?
    {
        catalog
            .forget_prepare_operation(op, &mut run)
            .map_err(catalog_err)?;
        return Ok(Recovery::Recovered);
    }
    if run
        .enabled(Step::ForgetAbandonedIntent)
        .map_err(catalog_err)?
    {
        let _span =
            tracing::info_span!("ForgetAbandonedIntent", operation = %op.operation_id).entered();
        if found.is_some() && !dir.remove_empty(&stage)? {
            return Ok(retained);
        }
        catalog
            .forget_prepare_operation(op, &mut run)
            .map_err(catalog_err)?;
        return Ok(Recovery::Recovered);
    }
    Ok(retained)
}
