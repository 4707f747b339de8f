//! The prepared lower (spec 3.6 "Prepared lower", SR-15, FR-22).
//!
//! A resolved image is materialised into a Lazaret-owned root filesystem tree
//! under `<storage root>/prepared/<artifact id>/rootfs` by umoci — an OCI-aware
//! preparer that applies layers in order with whiteouts, opaque directories,
//! hard links and ownership — running as root of a short-lived verified user
//! namespace with the Runtime Supervisor's maps, so nonzero image uids/gids
//! land on subordinate host ids. umoci reads the verified blobs from Lazaret's
//! blob store (a private one-manifest layout pointing at them), never from the
//! user's layout, so what is unpacked is exactly the resolved manifest.
//!
//! The preparer also creates the bundle's fixed mount points
//! (`lazaret_runtime::bundle::MOUNT_POINTS`) and the default persistent
//! paths (the State Anchors' bind destinations), since runsc would
//! otherwise create them inside the published tree.
//!
//! Each preparation is a prepare operation of the Storage Catalog (spec 3.6,
//! OR-7, schemas.md "Storage Catalog"; [`operation`]): its intent is
//! recorded before the stage `prepared/.stage-<operation>` is created, the
//! stage is recorded as Owned with its device and inode, the tree is built
//! inside it, and publication renames it to `prepared/<artifact id>` under
//! the catalog lock in the transaction that inserts the Available artifact.
//! A later preparation of the same manifest with the same maps and preparer
//! is a cache hit on that row. A failed preparation removes its exact stage
//! through the removal worker and forgets its operation; one whose process
//! died is recovered by the next preparation of the same artifact, or by
//! `lazaret state gc`, once its operation lock shows no process of it is
//! left.
pub mod mount_points;
pub mod obtain;
mod operation;

pub use operation::{recover, PreparedDir, Recovery, PREPARED_DIR};

use crate::broker::transient::{self, Limits, Transient};
use crate::crash_point::crash_point;
use crate::image::store::BlobStore;
use crate::image::ResolvedImage;
use crate::storage_catalog::{CatalogError, CatalogRun, PrepareIntent, StorageCatalog};
use crate::tree_removal::{self, RemovalError};
use crate::userns::{spawn_in_user_namespace, MapKind, NamespaceMaps, RealHost};
use lazaret_generated::prepared_lower::StageStates;
use lazaret_runtime::catalog_model::Step;
use lazaret_runtime::records::catalog::{
    ArtifactState, OperationId, PrepareOperation, PrepareStageState, PreparedArtifact,
};
use lazaret_runtime::records::ids::{HostPath, PreparedArtifactId, Sha256Digest, SourceIdentity};
use operation::OperationLock;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Version of the preparation recipe; part of the artifact identity.
const RECIPE: &str =
    "lazaret-prepared-lower v9: umoci raw unpack in verified userns, bundle mount points with the init, network and escalation mailbox directories and the default persistent paths made descriptor-relatively (0755), resolv.conf and the credential path empty regular files (0644), published through the Storage Catalog";
/// The tag of the private one-manifest layout umoci reads.
/// How long `umoci --version` may take.
const VERSION_LIMIT: Duration = Duration::from_secs(30);
/// How long one preparation worker (`umoci unpack` of an image, `rm` of a
/// tree) may run before it is killed and the preparation fails: far above
/// the minutes a multi-gigabyte image takes on a slow disk.
const WORKER_LIMIT: Duration = Duration::from_secs(30 * 60);
const PRIVATE_TAG: &str = "lazaret";
/// How often a preparation waiting for another one of the same artifact
/// looks again.
const WAIT_POLL: Duration = Duration::from_millis(250);
/// How long it waits in all: another preparation's workers are each bounded
/// by [`WORKER_LIMIT`].
const WAIT_LIMIT: Duration = Duration::from_secs(2 * 30 * 60);
/// How many times one preparation starts over after waiting or recovering.
const MAX_ATTEMPTS: usize = 4;

/// The metadata stored next to a prepared rootfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// Prepared-artifact ID (hex sha256 of the recipe, preparer version,
    /// source manifest and maps); independent of the storage path.
    pub artifact_id: String,
    /// Source image identity: the manifest digest.
    pub manifest_digest: String,
    /// The reference it was resolved from (informational).
    pub source_reference: String,
    /// The preparer and its version.
    pub preparer: String,
    /// The uid map the tree's ownership was written under.
    pub uid_map: String,
    /// The gid map the tree's ownership was written under.
    pub gid_map: String,
}

/// A published prepared lower.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedLower {
    /// Its record.
    pub record: ArtifactRecord,
    /// The artifact directory (`.../prepared/<id>`).
    pub dir: PathBuf,
    /// The root filesystem tree (`.../prepared/<id>/rootfs`).
    pub rootfs: PathBuf,
    /// Whether it was already published (nothing was unpacked).
    pub cache_hit: bool,
    /// The artifact directory's device and inode as checked against its
    /// Storage Catalog row.
    pub tree: (u64, u64),
}

/// Errors of preparation; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A storage directory or file step failed.
    #[error("cannot {step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The preparer could not be run.
    #[error("cannot run the preparer {program}: {detail}")]
    Spawn { program: String, detail: String },
    /// The image has a symlink (or a file) where Lazaret needs a directory
    /// of its own on the way to a mount point.
    #[error("image {manifest}: {link} is a symbolic link or a file on the way to Lazaret's mount point {path}; the image is refused (expected a directory there)")]
    SymlinkedMountPath {
        manifest: String,
        path: String,
        link: String,
    },
    /// The preparer failed.
    #[error("{program} failed ({status}) preparing {manifest}: {stderr}")]
    Failed {
        program: String,
        manifest: String,
        status: String,
        stderr: String,
    },
    /// A Storage Catalog step failed.
    #[error(transparent)]
    Catalog(CatalogError),
    /// The artifact is being reclaimed by `lazaret state gc`.
    #[error("prepared artifact {artifact} is being reclaimed by `lazaret state gc`; launch again when it has finished")]
    Reclaiming { artifact: String },
    /// An abandoned preparation of the same artifact holds a tree Lazaret
    /// cannot prove it created.
    #[error("an interrupted preparation of this image left {stage}, which is retained ({reason}); check it, remove it, then run `lazaret state gc`")]
    Retained {
        stage: PathBuf,
        reason: &'static str,
    },
    /// Another preparation of the same artifact did not finish in time.
    #[error(
        "another preparation of prepared artifact {artifact} is still running after {waited:?}"
    )]
    StillPreparing { artifact: String, waited: Duration },
    /// Preparation kept finding the artifact's slot taken.
    /// A new operation's lock file was taken or removed by `lazaret state
    /// gc` between its creation and its lock (it looked like an orphan):
    /// the preparation starts again with a new operation.
    #[error("the new operation lock {path} was taken by another process before it could be held")]
    LockRaced { path: PathBuf },
    #[error("prepared artifact {artifact}: gave up after {MAX_ATTEMPTS} attempts to record a preparation")]
    Contended { artifact: String },
    /// Removing a stage failed.
    #[error("cannot remove the stage {path}: {source}")]
    Removal { path: PathBuf, source: RemovalError },
    /// A published artifact's record is unreadable or belongs to another artifact.
    #[error("{path} does not hold prepared artifact {expected}: {detail}; `lazaret state gc` reclaims the artifact so that the next launch prepares it again (a directory at {dir} that Lazaret did not record is left for you to remove)")]
    BadRecord {
        path: PathBuf,
        dir: PathBuf,
        expected: String,
        detail: String,
    },
}

/// Output of one worker run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRun {
    /// Whether it exited 0.
    pub success: bool,
    /// Exit status text.
    pub status: String,
    /// Standard error.
    pub stderr: String,
}

/// The process interactions of preparation.
pub trait PrepareHost {
    /// The preparer's version string (part of the artifact identity).
    fn preparer_version(&mut self) -> Result<String, PrepareError>;
    /// Runs `program args` as root of a fresh verified user namespace with
    /// the preparation maps, in `cwd`. The worker inherits `hold` (its
    /// operation's lock) for its whole life.
    fn run_in_userns(
        &mut self,
        program: &str,
        args: &[OsString],
        cwd: &Path,
        hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError>;
    /// Makes the bundle's mount points beneath `stage`'s `rootfs`
    /// ([`mount_points::make_mount_points`]) as root of the same
    /// namespace; the worker inherits `hold`.
    fn make_mount_points(
        &mut self,
        stage: &Path,
        stage_identity: (u64, u64),
        hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError>;
    /// Empties the directory `dir` if it is still `(device, inode)`, as
    /// root of the same namespace (the tree is owned by subordinate IDs);
    /// the worker inherits `hold` (a preparation's operation lock).
    fn remove_tree(
        &mut self,
        dir: &Path,
        device: u64,
        inode: u64,
        hold: Option<BorrowedFd<'_>>,
    ) -> Result<(), PrepareError>;
}

/// The real host: umoci from `PATH`, namespaces via [`crate::userns`],
/// mount points and removal through `program`'s workers
/// ([`mount_points`], [`tree_removal`]).
#[derive(Debug)]
pub struct RealPrepareHost {
    maps: NamespaceMaps,
    program: PathBuf,
}

impl RealPrepareHost {
    /// A host whose workers run under `maps`; `program` is the lazaret
    /// executable, whose hidden `__mount-points` and `__remove-tree` make
    /// mount points and remove trees.
    pub fn new(maps: NamespaceMaps, program: PathBuf) -> Self {
        RealPrepareHost { maps, program }
    }

    /// Runs `cmd` (named `program` in errors) as root of a fresh verified
    /// user namespace with the preparation maps; it inherits `hold`.
    fn worker(
        &self,
        mut cmd: Command,
        program: &str,
        hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The worker's spawn and its map helpers form one section.
        let spawning = crate::broker::exclusion::spawn_exclusion();
        let inherited = tree_removal::inheritable(hold).map_err(|e| PrepareError::Spawn {
            program: program.into(),
            detail: format!("cannot pass the operation lock: {e}"),
        })?;
        let child = spawn_in_user_namespace(cmd, &mut RealHost, &self.maps);
        drop(inherited);
        drop(spawning);
        let child = child.map_err(|e| PrepareError::Spawn {
            program: program.into(),
            detail: e.to_string(),
        })?;
        let out = Transient::adopt(child, program.to_owned())
            .and_then(|worker| worker.finish(b"", Limits::of(WORKER_LIMIT)))
            .map_err(|e| PrepareError::Spawn {
                program: program.into(),
                detail: e.to_string(),
            })?;
        Ok(WorkerRun {
            success: out.status.success(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

impl PrepareHost for RealPrepareHost {
    fn preparer_version(&mut self) -> Result<String, PrepareError> {
        let out = transient::output(
            Command::new("umoci").arg("--version"),
            b"",
            Limits::of(VERSION_LIMIT),
        )
        .map_err(|e| PrepareError::Spawn {
            program: "umoci".into(),
            detail: format!("{e} (install it: apt-get install umoci)"),
        })?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn run_in_userns(
        &mut self,
        program: &str,
        args: &[OsString],
        cwd: &Path,
        hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError> {
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(cwd);
        self.worker(cmd, program, hold)
    }

    fn make_mount_points(
        &mut self,
        stage: &Path,
        (device, inode): (u64, u64),
        hold: BorrowedFd<'_>,
    ) -> Result<WorkerRun, PrepareError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg(mount_points::MOUNT_POINTS_SUBCOMMAND)
            .arg("--stage")
            .arg(stage)
            .args([
                "--device",
                &device.to_string(),
                "--inode",
                &inode.to_string(),
            ])
            .current_dir(stage);
        self.worker(cmd, mount_points::MOUNT_POINTS_SUBCOMMAND, hold)
    }

    fn remove_tree(
        &mut self,
        dir: &Path,
        device: u64,
        inode: u64,
        hold: Option<BorrowedFd<'_>>,
    ) -> Result<(), PrepareError> {
        tree_removal::run_worker(&self.program, dir, device, inode, hold).map_err(|source| {
            PrepareError::Removal {
                path: dir.to_owned(),
                source,
            }
        })
    }
}

fn map_text(maps: &NamespaceMaps, kind: MapKind) -> String {
    maps.of(kind)
        .iter()
        .map(|m| format!("{} {} {}", m.inside, m.outside, m.count))
        .collect::<Vec<_>>()
        .join(", ")
}

fn io_err<'p>(step: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> PrepareError + 'p {
    move |source| PrepareError::Io {
        step,
        path: path.to_owned(),
        source,
    }
}

/// The identity of one preparation: what the artifact ID is computed from,
/// and the catalog's view of it.
struct ArtifactIdentity {
    record: ArtifactRecord,
    id: PreparedArtifactId,
    policy_id: Sha256Digest,
    id_map_digest: Sha256Digest,
}

fn sha256(text: &str) -> [u8; 32] {
    sha2::Sha256::digest(text.as_bytes()).into()
}

impl ArtifactIdentity {
    fn of(preparer: String, image: &ResolvedImage, maps: &NamespaceMaps) -> Self {
        let (uid_map, gid_map) = (map_text(maps, MapKind::Uid), map_text(maps, MapKind::Gid));
        let policy = format!("{RECIPE}\npreparer {preparer}\n");
        let id_maps = format!("uid_map {uid_map}\ngid_map {gid_map}\n");
        let identity = format!("{policy}manifest {}\n{id_maps}", image.manifest_digest);
        let id = sha256(&identity);
        ArtifactIdentity {
            record: ArtifactRecord {
                artifact_id: hex::encode(id),
                manifest_digest: image.manifest_digest.to_string(),
                source_reference: image.reference.to_string(),
                preparer,
                uid_map,
                gid_map,
            },
            id: PreparedArtifactId(id),
            policy_id: Sha256Digest(sha256(&policy)),
            id_map_digest: Sha256Digest(sha256(&id_maps)),
        }
    }

    /// A new operation of this artifact, as its intent records it.
    fn operation(&self, dir: &PreparedDir) -> Result<PrepareOperation, PrepareError> {
        let mut random = [0u8; 16];
        let urandom = Path::new("/dev/urandom");
        io::Read::read_exact(
            &mut fs::File::open(urandom).map_err(io_err("open", urandom))?,
            &mut random,
        )
        .map_err(io_err("read", urandom))?;
        let operation_id = OperationId(random);
        let stage = dir.stage_path(operation_id);
        let value =
            |what: &'static str, e: lazaret_runtime::records::ids::ValueError| PrepareError::Io {
                step: what,
                path: stage.clone(),
                source: io::Error::other(e.to_string()),
            };
        let digest = SourceIdentity::new(self.record.manifest_digest.clone())
            .map_err(|e| value("record the manifest digest of", e))?;
        Ok(PrepareOperation {
            operation_id,
            expected_artifact_id: self.id,
            source_identity: digest.clone(),
            selected_manifest_digest: digest,
            policy_id: self.policy_id,
            id_map_digest: self.id_map_digest,
            stage_path: HostPath::new(stage.as_os_str().as_encoded_bytes().to_vec())
                .map_err(|e| value("record the path of", e))?,
            stage_state: PrepareStageState::Intent,
            device: None,
            inode: None,
        })
    }
}

/// Prepares (or finds) the lower for `image` under `storage_root`.
pub fn prepare(
    host: &mut dyn PrepareHost,
    storage_root: &Path,
    store: &BlobStore,
    image: &ResolvedImage,
    maps: &NamespaceMaps,
) -> Result<PreparedLower, PrepareError> {
    let _span = tracing::info_span!("PrepareLower", manifest = %image.manifest_digest).entered();
    let preparer = host.preparer_version()?;
    let identity = ArtifactIdentity::of(preparer, image, maps);
    let catalog = StorageCatalog::at(storage_root);
    let dir = PreparedDir::open(storage_root)?;
    for _ in 0..MAX_ATTEMPTS {
        if let Some(row) = catalog
            .artifact(&identity.id)
            .map_err(PrepareError::Catalog)?
        {
            return cache_hit(&dir, &row, &identity.record);
        }
        let op = identity.operation(&dir)?;
        let lock = match OperationLock::create(&dir, op.operation_id) {
            Ok(lock) => lock,
            Err(PrepareError::LockRaced { path }) => {
                tracing::debug!(path = %path.display(), "operation lock raced; a new operation");
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut run = catalog.run(identity.id);
        let intent = catalog.record_prepare_intent(&op, &mut run);
        let occupied = match intent {
            Ok(PrepareIntent::Recorded) => {
                crash_point!(Prepare, "operation", "after-intent", "RecordPrepareIntent");
                let operation = Operation {
                    catalog: &catalog,
                    dir: &dir,
                    op: &op,
                    run,
                };
                return operation.run(host, store, image, &identity, lock);
            }
            Ok(PrepareIntent::Published(row) | PrepareIntent::Reclaiming(row)) => {
                lock.release(&dir);
                return cache_hit(&dir, &row, &identity.record);
            }
            Ok(PrepareIntent::Occupied(other)) => other,
            Err(e) => {
                lock.release(&dir);
                return Err(PrepareError::Catalog(e));
            }
        };
        lock.release(&dir);
        wait_or_recover(
            host,
            &catalog,
            &dir,
            &identity.record,
            occupied.operation_id,
        )?;
    }
    Err(PrepareError::Contended {
        artifact: identity.record.artifact_id,
    })
}

/// Another operation holds the artifact's slot: waits while a process of
/// it lives, recovers it once none does.
fn wait_or_recover(
    host: &mut dyn PrepareHost,
    catalog: &StorageCatalog,
    dir: &PreparedDir,
    record: &ArtifactRecord,
    other: OperationId,
) -> Result<(), PrepareError> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        match recover(host, catalog, dir, other)? {
            Recovery::Recovered => return Ok(()),
            Recovery::Retained { stage, reason } => {
                return Err(PrepareError::Retained { stage, reason })
            }
            Recovery::Live => {}
        }
        if started.elapsed() >= WAIT_LIMIT {
            return Err(PrepareError::StillPreparing {
                artifact: record.artifact_id.clone(),
                waited: WAIT_LIMIT,
            });
        }
        if !said {
            tracing::info!(operation = %other, "waiting for another preparation of the same image");
            said = true;
        }
        std::thread::sleep(WAIT_POLL);
    }
}

/// A recorded prepare operation and its run of the PreparedLower model.
struct Operation<'a> {
    catalog: &'a StorageCatalog,
    dir: &'a PreparedDir,
    op: &'a PrepareOperation,
    run: CatalogRun,
}

impl Operation<'_> {
    /// The recorded operation, from its stage to publication. Whatever
    /// fails on the way ends the operation's worker (`PrepareWorkerCrash`)
    /// and recovers it as any later preparation or `lazaret state gc`
    /// would, so the catalog and the prepared directory are as before; the
    /// first error is the one reported.
    fn run(
        mut self,
        host: &mut dyn PrepareHost,
        store: &BlobStore,
        image: &ResolvedImage,
        identity: &ArtifactIdentity,
        lock: OperationLock,
    ) -> Result<PreparedLower, PrepareError> {
        match self.build(host, store, image, identity, &lock) {
            Ok(row) => {
                lock.release(self.dir);
                debug_assert_eq!(row.prepared_artifact_id, identity.id);
                let published = self.dir.path().join(&identity.record.artifact_id);
                Ok(PreparedLower {
                    rootfs: published.join("rootfs"),
                    dir: published,
                    record: identity.record.clone(),
                    cache_hit: false,
                    tree: (row.device, row.inode),
                })
            }
            Err(e) => {
                // Leave nothing behind, under the lock this operation holds;
                // the original error is the one to report.
                let ended =
                    self.run
                        .enabled(Step::PrepareWorkerCrash)
                        .and_then(|ended| match ended {
                            true => self.run.took(Step::PrepareWorkerCrash, None),
                            false => Ok(()),
                        });
                if let Err(model) = ended {
                    tracing::warn!(error = %model, "the failed preparation's end is not a model step");
                }
                let recovered = operation::recover_held(
                    host,
                    self.catalog,
                    self.dir,
                    self.op.operation_id,
                    &lock,
                );
                match recovered {
                    Ok(Recovery::Recovered) => lock.release(self.dir),
                    Ok(left) => {
                        tracing::warn!(?left, "the failed preparation's stage was retained")
                    }
                    Err(cleanup) => {
                        tracing::warn!(error = %cleanup, "could not remove the failed preparation's stage");
                    }
                }
                Err(e)
            }
        }
    }

    /// `CreateStage`, `RecordStageOwned`, the tree, `PublishArtifact`.
    fn build(
        &mut self,
        host: &mut dyn PrepareHost,
        store: &BlobStore,
        image: &ResolvedImage,
        identity: &ArtifactIdentity,
        lock: &OperationLock,
    ) -> Result<PreparedArtifact, PrepareError> {
        let (catalog, dir, op) = (self.catalog, self.dir, self.op);
        let stage = dir.stage_path(op.operation_id);
        self.run
            .check(Step::CreateStage)
            .map_err(PrepareError::Catalog)?;
        let (device, inode) = dir.create_stage(op.operation_id)?;
        self.run
            .took(Step::CreateStage, Some(StageStates::Own))
            .map_err(PrepareError::Catalog)?;
        crash_point!(Prepare, "operation", "after-stage", "CreateStage");
        catalog
            .record_stage_owned(op.operation_id, device, inode, &mut self.run)
            .map_err(PrepareError::Catalog)?;
        crash_point!(Prepare, "operation", "after-owned", "RecordStageOwned");
        stage_tree(
            host,
            store,
            image,
            &identity.record,
            (&stage, (device, inode)),
            lock.hold(),
        )?;
        crash_point!(Prepare, "operation", "after-tree", "PublishArtifact");
        catalog
            .publish_artifact(op.operation_id, |owned| dir.publish(owned), &mut self.run)
            .map_err(PrepareError::Catalog)
    }
}

/// A published artifact: the catalog row's directory, still the recorded
/// one, holding this artifact's record.
fn cache_hit(
    dir: &PreparedDir,
    row: &PreparedArtifact,
    record: &ArtifactRecord,
) -> Result<PreparedLower, PrepareError> {
    if row.state == ArtifactState::Reclaiming {
        return Err(PrepareError::Reclaiming {
            artifact: record.artifact_id.clone(),
        });
    }
    // The name beneath the opened `prepared/` and the recorded device and
    // inode are the proof; the recorded path is only a lookup hint (spec
    // 3.6), so a moved Storage Root still finds its artifacts.
    let path = dir.path().join(&record.artifact_id);
    let bad = |detail: String| PrepareError::BadRecord {
        path: path.clone(),
        dir: path.clone(),
        expected: record.artifact_id.clone(),
        detail,
    };
    if dir.identity_of(&record.artifact_id)? != Some((row.device, row.inode)) {
        return Err(bad(format!(
            "it is not the directory the Storage Catalog recorded (device {} inode {})",
            row.device, row.inode
        )));
    }
    published(&path, record, (row.device, row.inode))?
        .ok_or_else(|| bad("it has no artifact.json".to_owned()))
}

/// The published artifact at `dir`, if there is one.
fn published(
    dir: &Path,
    record: &ArtifactRecord,
    tree: (u64, u64),
) -> Result<Option<PreparedLower>, PrepareError> {
    let path = dir.join("artifact.json");
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    let bad = |detail: String| PrepareError::BadRecord {
        path: path.clone(),
        dir: dir.to_owned(),
        expected: record.artifact_id.clone(),
        detail,
    };
    let found: ArtifactRecord = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if found.artifact_id != record.artifact_id || found.manifest_digest != record.manifest_digest {
        return Err(bad(format!(
            "it records artifact {} of {}",
            found.artifact_id, found.manifest_digest
        )));
    }
    Ok(Some(PreparedLower {
        rootfs: dir.join("rootfs"),
        dir: dir.to_owned(),
        record: found,
        cache_hit: true,
        tree,
    }))
}

/// Builds the complete artifact directory at `stage` (which exists, empty,
/// with the recorded identity `stage_identity`).
fn stage_tree(
    host: &mut dyn PrepareHost,
    store: &BlobStore,
    image: &ResolvedImage,
    record: &ArtifactRecord,
    (stage, stage_identity): (&Path, (u64, u64)),
    hold: BorrowedFd<'_>,
) -> Result<(), PrepareError> {
    // A private layout naming exactly the resolved manifest, over the store's
    // verified blobs.
    let layout = stage.join("image");
    fs::create_dir(&layout).map_err(io_err("create", &layout))?;
    let write = |name: &str, text: String| {
        let p = layout.join(name);
        fs::write(&p, text).map_err(io_err("write", &p))
    };
    write("oci-layout", r#"{"imageLayoutVersion":"1.0.0"}"#.to_owned())?;
    write(
        "index.json",
        serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": image.manifest_media_type,
                "digest": image.manifest_digest.to_string(),
                "size": image.manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": PRIVATE_TAG}
            }]
        })
        .to_string(),
    )?;
    let blobs = layout.join("blobs");
    std::os::unix::fs::symlink(store.root().join("blobs"), &blobs)
        .map_err(io_err("link", &blobs))?;

    let args: Vec<OsString> = vec![
        "raw".into(),
        "unpack".into(),
        "--image".into(),
        format!("image:{PRIVATE_TAG}").into(),
        "rootfs".into(),
    ];
    let run = host.run_in_userns("umoci", &args, stage, hold)?;
    if !run.success {
        return Err(PrepareError::Failed {
            program: "umoci raw unpack".into(),
            manifest: record.manifest_digest.clone(),
            status: run.status,
            stderr: run.stderr,
        });
    }
    // The bundle's fixed mount points (`mount_points`), made by a worker
    // in the namespace descriptor-relatively. An image symlink on the way
    // to a product mount point refuses the image here first, naming it.
    let rootfs = stage.join("rootfs");
    let manifest = record.manifest_digest.as_str();
    let points = lazaret_runtime::bundle::MOUNT_POINTS
        .iter()
        .map(|p| (p, true));
    let files = lazaret_runtime::bundle::MOUNT_FILES
        .iter()
        .map(|f| (f, false));
    for (path, whole) in points.chain(files) {
        if let Some(link) = symlink_on_the_way(&rootfs, path, whole)? {
            return Err(PrepareError::SymlinkedMountPath {
                manifest: manifest.to_owned(),
                path: (*path).to_owned(),
                link,
            });
        }
    }
    let run = host.make_mount_points(stage, stage_identity, hold)?;
    if !run.success {
        return Err(PrepareError::Failed {
            program: "the mount-point worker".into(),
            manifest: record.manifest_digest.clone(),
            status: run.status,
            stderr: run.stderr,
        });
    }
    fs::remove_file(&blobs).map_err(io_err("remove", &blobs))?;
    for name in ["oci-layout", "index.json"] {
        let p = layout.join(name);
        fs::remove_file(&p).map_err(io_err("remove", &p))?;
    }
    fs::remove_dir(&layout).map_err(io_err("remove", &layout))?;
    let rec = stage.join("artifact.json");
    let text = serde_json::to_string_pretty(record)
        .map_err(|e| io_err("encode", &rec)(io::Error::other(e)))?;
    fs::write(&rec, text).map_err(io_err("write", &rec))?;
    Ok(())
}

/// The first component of `path` inside `rootfs` that exists and is not a
/// directory (a symlink, or a file where a directory belongs), looked at
/// without following anything; its last component too when `whole`. What
/// does not exist yet is made fresh, so the walk stops there.
fn symlink_on_the_way(
    rootfs: &Path,
    path: &str,
    whole: bool,
) -> Result<Option<String>, PrepareError> {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let checked = if whole {
        components.len()
    } else {
        components.len().saturating_sub(1)
    };
    let mut at = rootfs.to_owned();
    let mut shown = String::new();
    for c in &components[..checked] {
        at.push(c);
        shown.push('/');
        shown.push_str(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(Some(shown)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("inspect", &at)(e)),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
