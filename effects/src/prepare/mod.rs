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
//! The tree is built in a staging directory and published by one rename; a
//! later preparation of the same manifest with the same maps and preparer is
//! a cache hit. A failed preparation removes its staging directory (inside
//! the namespace, since the tree is owned by subordinate ids) and leaves
//! nothing behind.

use crate::broker::transient::{self, Limits, Transient};
use crate::image::store::{BlobStore, Sha256};
use crate::image::ResolvedImage;
use crate::userns::{spawn_in_user_namespace, MapKind, NamespaceMaps, RealHost};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Version of the preparation recipe; part of the artifact identity.
const RECIPE: &str =
    "lazaret-prepared-lower v5: umoci raw unpack in verified userns, bundle mount points with the init and network directories and the default persistent paths, resolv.conf a regular file";
/// The tag of the private one-manifest layout umoci reads.
/// How long `umoci --version` may take.
const VERSION_LIMIT: Duration = Duration::from_secs(30);
/// How long one preparation worker (`umoci unpack` of an image, `rm` of a
/// tree) may run before it is killed and the preparation fails: far above
/// the minutes a multi-gigabyte image takes on a slow disk.
const WORKER_LIMIT: Duration = Duration::from_secs(30 * 60);
const PRIVATE_TAG: &str = "lazaret";

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
    /// A published artifact's record is unreadable or belongs to another artifact.
    #[error("{path} does not hold prepared artifact {expected}: {detail}; remove {dir} to prepare it again")]
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
    /// the preparation maps, in `cwd`.
    fn run_in_userns(
        &mut self,
        program: &str,
        args: &[OsString],
        cwd: &Path,
    ) -> Result<WorkerRun, PrepareError>;
}

/// The real host: umoci and rm from `PATH`, namespaces via [`crate::userns`].
#[derive(Debug)]
pub struct RealPrepareHost {
    maps: NamespaceMaps,
}

impl RealPrepareHost {
    /// A host whose workers run under `maps`.
    pub fn new(maps: NamespaceMaps) -> Self {
        RealPrepareHost { maps }
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
    ) -> Result<WorkerRun, PrepareError> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The worker's spawn and its map helpers form one section.
        let spawning = crate::broker::exclusion::spawn_exclusion();
        let child = spawn_in_user_namespace(cmd, &mut RealHost, &self.maps);
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
    let (uid_map, gid_map) = (map_text(maps, MapKind::Uid), map_text(maps, MapKind::Gid));
    let identity = format!(
        "{RECIPE}\npreparer {preparer}\nmanifest {}\nuid_map {uid_map}\ngid_map {gid_map}\n",
        image.manifest_digest
    );
    let record = ArtifactRecord {
        artifact_id: Sha256::of(identity.as_bytes()).hex().to_owned(),
        manifest_digest: image.manifest_digest.to_string(),
        source_reference: image.reference.to_string(),
        preparer,
        uid_map,
        gid_map,
    };
    let prepared = storage_root.join("prepared");
    fs::create_dir_all(&prepared).map_err(io_err("create", &prepared))?;
    let dir = prepared.join(&record.artifact_id);
    if let Some(hit) = published(&dir, &record)? {
        return Ok(hit);
    }

    let stage = prepared.join(format!(
        ".staging-{}-{}",
        record.artifact_id,
        std::process::id()
    ));
    let outcome = stage_tree(host, store, image, &record, &stage);
    let outcome = outcome.and_then(|()| match fs::rename(&stage, &dir) {
        Ok(()) => Ok(false),
        // Another preparer published the same artifact first.
        Err(e) if published(&dir, &record).ok().flatten().is_some() => {
            tracing::debug!(error = %e, "lost the publication race");
            Ok(true)
        }
        Err(e) => Err(io_err("publish", &dir)(e)),
    });
    match outcome {
        Ok(lost_race) => {
            if lost_race {
                remove_stage(host, &prepared, &stage)?;
            }
            Ok(PreparedLower {
                rootfs: dir.join("rootfs"),
                dir,
                record,
                cache_hit: lost_race,
            })
        }
        Err(e) => {
            // Leave nothing behind; the original error is the one to report.
            if let Err(cleanup) = remove_stage(host, &prepared, &stage) {
                tracing::warn!(error = %cleanup, "could not remove the staging directory");
            }
            Err(e)
        }
    }
}

/// The published artifact at `dir`, if there is one.
fn published(dir: &Path, record: &ArtifactRecord) -> Result<Option<PreparedLower>, PrepareError> {
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
    }))
}

/// Builds the complete artifact directory at `stage`.
fn stage_tree(
    host: &mut dyn PrepareHost,
    store: &BlobStore,
    image: &ResolvedImage,
    record: &ArtifactRecord,
    stage: &Path,
) -> Result<(), PrepareError> {
    fs::create_dir(stage).map_err(io_err("create", stage))?;
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
    let run = host.run_in_userns("umoci", &args, stage)?;
    if !run.success {
        return Err(PrepareError::Failed {
            program: "umoci raw unpack".into(),
            manifest: record.manifest_digest.clone(),
            status: run.status,
            stderr: run.stderr,
        });
    }
    // The bundle's fixed mount points: runsc would otherwise create them in
    // this tree on every launch (it does so even with an in-memory overlay).
    // Created inside the namespace: the image may own `/` by a nonzero id.
    // `mkdir`, `rm` and `touch` follow symlinks, and the image's are not
    // Lazaret's: a path with one on the way is refused (a product mount
    // point) or not made (a default persistent path, which a profile using
    // it then refuses at launch), so nothing is created outside this tree.
    let rootfs = stage.join("rootfs");
    let manifest = record.manifest_digest.as_str();
    // A directory mount point whole; a file's directories (`rm -f` removes
    // a symlink at the file itself, it does not follow it).
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
    let mut defaults = Vec::new();
    for p in lazaret_runtime::config::DEFAULT_PERSISTENT_DIRS {
        if symlink_on_the_way(&rootfs, p, true)?.is_none() {
            defaults.push(p);
        }
    }
    let mut mkdir: Vec<OsString> = vec!["-p".into(), "--".into()];
    mkdir.extend(
        lazaret_runtime::bundle::MOUNT_POINTS
            .iter()
            // The default persistent paths (spec 3.2): each State Anchor's
            // lower and the bind destination runsc would otherwise create
            // in this tree.
            .copied()
            .chain(defaults)
            .map(|p| format!("rootfs/{}", p.trim_start_matches('/')).into()),
    );
    let run = host.run_in_userns("mkdir", &mkdir, stage)?;
    if !run.success {
        return Err(PrepareError::Failed {
            program: "mkdir (bundle mount points)".into(),
            manifest: record.manifest_digest.clone(),
            status: run.status,
            stderr: run.stderr,
        });
    }
    // The fixed file mount points (the protected resolv.conf, spec 3.7):
    // whatever the image has there (a file, or a symlink a bind would
    // follow) is replaced by an empty regular file.
    for file in lazaret_runtime::bundle::MOUNT_FILES {
        let at: OsString = format!("rootfs/{}", file.trim_start_matches('/')).into();
        for (program, args) in [
            ("rm", vec!["-f".into(), "--".into(), at.clone()]),
            ("touch", vec!["--".into(), at.clone()]),
        ] {
            let run = host.run_in_userns(program, &args, stage)?;
            if !run.success {
                return Err(PrepareError::Failed {
                    program: format!("{program} (bundle file mount point {file})"),
                    manifest: record.manifest_digest.clone(),
                    status: run.status,
                    stderr: run.stderr,
                });
            }
        }
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

/// Removes a staging directory whose tree may be owned by subordinate ids.
fn remove_stage(
    host: &mut dyn PrepareHost,
    prepared: &Path,
    stage: &Path,
) -> Result<(), PrepareError> {
    if fs::symlink_metadata(stage).is_err() {
        return Ok(());
    }
    let args: Vec<OsString> = vec![
        "-rf".into(),
        "--one-file-system".into(),
        "--".into(),
        stage.as_os_str().to_owned(),
    ];
    let run = host.run_in_userns("rm", &args, prepared)?;
    if !run.success || fs::symlink_metadata(stage).is_ok() {
        return Err(PrepareError::Failed {
            program: "rm -rf".into(),
            manifest: stage.display().to_string(),
            status: run.status,
            stderr: run.stderr,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
