//! What a launch needs before its generation exists (spec 3.2, 3.6): the
//! image resolved from the blob store, its lower prepared under this
//! user's subordinate ID maps, and the workspace still the object the
//! configuration loaded. None of it is a model step: a failure here
//! leaves no generation to release.
use std::path::PathBuf;
use std::time::Instant;

use lazaret_runtime::config::{VolumeAccess, VolumeKind};
use lazaret_runtime::coordinator::messages::{ObjectId, VolumePlan, VolumeSourceKind};

use super::super::host::{micros, CoordinatorError, LaunchInputs};
use crate::confined::{FileStat, RealSys};
use crate::image::reference::ImageRef;
use crate::image::store::BlobStore;
use crate::image::{resolve, ResolvedImage};
use crate::prepare::{prepare, PreparedLower, RealPrepareHost};
use crate::storage_catalog::StorageCatalog;
use crate::userns::{plan_maps, Identity, NamespaceMaps, RealHost};
use lazaret_runtime::records::ids::SourceIdentity;

/// The prepared inputs of the generation's sandbox.
pub(super) struct PreparedLaunch {
    pub lower: PreparedLower,
    /// The user namespace maps RS's namespace must carry (verified before
    /// its `CommitProcess`).
    pub maps: NamespaceMaps,
    /// The workspace object runsc is handed (RS checks it again).
    pub workspace_object: ObjectId,
    /// The developer volumes, each source revalidated (RS checks again).
    pub volumes: Vec<VolumePlan>,
}

/// `resolve_image`, `prepare_lower` (timed under those names), then the
/// workspace and every volume source revalidated.
pub(super) fn prepare_launch(
    launch: &LaunchInputs<'_>,
    timings: &mut Vec<(String, u64)>,
) -> Result<PreparedLaunch, CoordinatorError> {
    let started = Instant::now();
    let reference =
        ImageRef::parse(&launch.image).map_err(|source| CoordinatorError::ImageReference {
            reference: launch.image.clone(),
            source,
        })?;
    let blobs_dir = launch.storage_root.join("blobs");
    let blobs = BlobStore::open(&blobs_dir).map_err(|source| CoordinatorError::BlobStore {
        path: blobs_dir.clone(),
        source,
    })?;
    // Held until the lower is prepared: `lazaret image rm` deletes no blob
    // under this launch.
    let hold = blobs
        .hold_shared()
        .map_err(|source| CoordinatorError::BlobStore {
            path: blobs_dir.clone(),
            source,
        })?;
    let image = resolve(&reference, &blobs, &mut |_| {}).map_err(|source| {
        CoordinatorError::ImageResolve {
            reference: launch.image.clone(),
            source: Box::new(source),
        }
    })?;
    timings.push(("resolve_image".to_owned(), micros(started)));
    record_image_use(launch, &reference, &image);
    let started = Instant::now();
    let me = Identity::current(&mut RealHost).map_err(CoordinatorError::Userns)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(CoordinatorError::Userns)?;
    // The removal worker of a failed or abandoned preparation is this
    // executable's `__remove-tree`.
    let program = std::env::current_exe().map_err(|source| CoordinatorError::Io {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let lower = prepare(
        &mut RealPrepareHost::new(maps.clone(), program),
        &launch.storage_root,
        &blobs,
        &image,
        &maps,
    )
    .map_err(|source| CoordinatorError::Prepare {
        reference: launch.image.clone(),
        source: Box::new(source),
    })?;
    drop(hold);
    timings.push(("prepare_lower".to_owned(), micros(started)));
    // Spec 3.2: the workspace path goes to runsc (through RS) only after it
    // was reopened through its plan and still names the loaded object; RS
    // checks the identity again at the handoff itself.
    launch
        .workspace
        .revalidate(&RealSys)
        .map_err(CoordinatorError::Workspace)?;
    // Spec 3.2, schemas "volume": likewise each volume source; one swapped
    // for a symlink or a mount since the load is refused, naming it.
    let mut volumes = Vec::with_capacity(launch.volumes.len());
    for v in launch.volumes {
        let decl = v.decl();
        v.source()
            .revalidate(&RealSys)
            .map_err(|source| CoordinatorError::Volume {
                key: decl.key.key("host").to_string(),
                source,
            })?;
        volumes.push(VolumePlan {
            container: decl.container.as_str().to_owned(),
            host: v.source().label().display().to_string(),
            kind: match decl.kind {
                VolumeKind::File => VolumeSourceKind::File,
                VolumeKind::Directory => VolumeSourceKind::Directory,
            },
            read_only: decl.access == VolumeAccess::ReadOnly,
            object: object_id(v.source().stat()),
        });
    }
    Ok(PreparedLaunch {
        lower,
        maps,
        workspace_object: object_id(launch.workspace.stat()),
        volumes,
    })
}

/// Notes in the Storage Catalog that the image was resolved for a launch
/// (what `lazaret image ls` shows). Bookkeeping: a failure is logged and
/// the launch goes on.
fn record_image_use(launch: &LaunchInputs<'_>, reference: &ImageRef, image: &ResolvedImage) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let recorded = SourceIdentity::new(image.manifest_digest.to_string())
        .map_err(|e| e.to_string())
        .and_then(|digest| {
            StorageCatalog::at(&launch.storage_root)
                .record_image(&reference.to_string(), &digest, image.bytes(), now)
                .map_err(|e| e.to_string())
        });
    if let Err(error) = recorded {
        tracing::warn!(%error, image = %reference, "recording the image's use in the Storage Catalog failed");
    }
}

fn object_id(stat: &FileStat) -> ObjectId {
    let id = stat.identity;
    ObjectId {
        dev_major: id.dev_major,
        dev_minor: id.dev_minor,
        ino: id.ino,
    }
}
