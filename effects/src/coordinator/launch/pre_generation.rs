//! What a launch needs before its generation exists (spec 3.2, 3.6): the
//! image resolved from the blob store, its lower prepared under this
//! user's subordinate ID maps, and the workspace still the object the
//! configuration loaded. None of it is a model step: a failure here
//! leaves no generation to release.
use std::path::PathBuf;

use lazaret_runtime::config::{VolumeAccess, VolumeKind};
use lazaret_runtime::coordinator::messages::{ObjectId, VolumePlan, VolumeSourceKind};

use super::super::host::{CoordinatorError, LaunchInputs};
use crate::confined::{FileStat, RealSys};
use crate::image::reference::ImageRef;
use crate::prepare::obtain::{obtain_lower, ObtainError, Obtained};
use crate::prepare::PreparedLower;
use crate::userns::NamespaceMaps;

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
    let reference =
        ImageRef::parse(&launch.image).map_err(|source| CoordinatorError::ImageReference {
            reference: launch.image.clone(),
            source,
        })?;
    let obtained =
        obtain_lower(&launch.storage_root, &reference, &mut |_| {}).map_err(|e| match e {
            ObtainError::BlobStore { path, source } => CoordinatorError::BlobStore { path, source },
            ObtainError::Resolve { source, .. } => CoordinatorError::ImageResolve {
                reference: launch.image.clone(),
                source,
            },
            ObtainError::Userns(e) => CoordinatorError::Userns(e),
            ObtainError::SelfExe(source) => CoordinatorError::Io {
                path: PathBuf::from("/proc/self/exe"),
                source,
            },
            ObtainError::Prepare { source, .. } => CoordinatorError::Prepare {
                reference: launch.image.clone(),
                source,
            },
        })?;
    timings.push(("resolve_image".to_owned(), obtained.resolve_micros));
    timings.push(("prepare_lower".to_owned(), obtained.prepare_micros));
    let Obtained { lower, maps, .. } = obtained;
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

fn object_id(stat: &FileStat) -> ObjectId {
    let id = stat.identity;
    ObjectId {
        dev_major: id.dev_major,
        dev_minor: id.dev_minor,
        ino: id.ino,
    }
}
