//! An image's prepared lower obtained from its reference, as a launch and
//! `lazaret image pull` both obtain it (spec 3.6 "Prepared lower":
//! preparation resolves the selected base image, then materialises it under
//! the user's verified subordinate ID maps): the blob store held shared,
//! the reference resolved into it, its use recorded in the Storage
//! Catalog, then the lower prepared (or found prepared).
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{prepare, PrepareError, PreparedLower, RealPrepareHost};
use crate::image::reference::ImageRef;
use crate::image::store::{BlobStore, StoreError};
use crate::image::{resolve, ImageError, Progress, ResolvedImage};
use crate::storage_catalog::StorageCatalog;
use crate::userns::{plan_maps, Identity, NamespaceMaps, RealHost, UsernsError};
use lazaret_runtime::records::ids::SourceIdentity;

/// What [`obtain_lower`] reports while it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Resolution and blob transfer.
    Fetch(Progress),
    /// Preparation starts: the lower is unpacked from `layers` layers of
    /// `bytes` bytes unless an equal one is already prepared.
    Unpack { layers: usize, bytes: u64 },
    /// The lower is ready; `cache_hit` when it was prepared before.
    Prepared { cache_hit: bool, micros: u64 },
}

/// An image resolved and its lower prepared.
#[derive(Debug)]
pub struct Obtained {
    pub image: ResolvedImage,
    pub lower: PreparedLower,
    /// The user namespace maps the lower was prepared under (the Runtime
    /// Supervisor's namespace must carry the same).
    pub maps: NamespaceMaps,
    /// Microseconds spent resolving, then preparing.
    pub resolve_micros: u64,
    pub prepare_micros: u64,
}

/// Errors of obtaining a lower; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum ObtainError {
    #[error("the image blob store {path}: {source}")]
    BlobStore { path: PathBuf, source: StoreError },
    #[error("image {reference}: {source}")]
    Resolve {
        reference: String,
        source: Box<ImageError>,
    },
    #[error("user namespace: {0}")]
    Userns(#[source] UsernsError),
    #[error("locating this program (/proc/self/exe) for the preparation workers: {0}")]
    SelfExe(#[source] std::io::Error),
    #[error("preparing the root filesystem from {reference}: {source}")]
    Prepare {
        reference: String,
        source: Box<PrepareError>,
    },
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Resolves `reference` into the Storage Root's blob store and prepares its
/// lower, reporting each stage to `progress`.
pub fn obtain_lower(
    storage_root: &Path,
    reference: &ImageRef,
    progress: &mut dyn FnMut(Stage),
) -> Result<Obtained, ObtainError> {
    let started = Instant::now();
    let blobs_dir = storage_root.join("blobs");
    let store_err = |source| ObtainError::BlobStore {
        path: blobs_dir.clone(),
        source,
    };
    let blobs = BlobStore::open(&blobs_dir).map_err(store_err)?;
    // Held until the lower is prepared: `lazaret image rm` deletes no blob
    // under this preparation.
    let hold = blobs.hold_shared().map_err(store_err)?;
    let image =
        resolve(reference, &blobs, &mut |p| progress(Stage::Fetch(p))).map_err(|source| {
            ObtainError::Resolve {
                reference: reference.to_string(),
                source: Box::new(source),
            }
        })?;
    let resolve_micros = micros(started);
    record_image_use(storage_root, reference, &image);
    let started = Instant::now();
    let me = Identity::current(&mut RealHost).map_err(ObtainError::Userns)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(ObtainError::Userns)?;
    // The removal worker of a failed or abandoned preparation is this
    // executable's `__remove-tree`.
    let program = std::env::current_exe().map_err(ObtainError::SelfExe)?;
    progress(Stage::Unpack {
        layers: image.manifest.layers().len(),
        bytes: image.bytes(),
    });
    let lower = prepare(
        &mut RealPrepareHost::new(maps.clone(), program),
        storage_root,
        &blobs,
        &image,
        &maps,
    )
    .map_err(|source| ObtainError::Prepare {
        reference: reference.to_string(),
        source: Box::new(source),
    })?;
    drop(hold);
    let prepare_micros = micros(started);
    progress(Stage::Prepared {
        cache_hit: lower.cache_hit,
        micros: prepare_micros,
    });
    Ok(Obtained {
        image,
        lower,
        maps,
        resolve_micros,
        prepare_micros,
    })
}

/// Notes in the Storage Catalog that the image was resolved (what
/// `lazaret image ls` shows). Bookkeeping: a failure is logged and the
/// preparation goes on.
fn record_image_use(storage_root: &Path, reference: &ImageRef, image: &ResolvedImage) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let recorded = SourceIdentity::new(image.manifest_digest.to_string())
        .map_err(|e| e.to_string())
        .and_then(|digest| {
            StorageCatalog::at(storage_root)
                .record_image(&reference.to_string(), &digest, image.bytes(), now)
                .map_err(|e| e.to_string())
        });
    if let Err(error) = recorded {
        tracing::warn!(%error, image = %reference, "recording the image's use in the Storage Catalog failed");
    }
}
