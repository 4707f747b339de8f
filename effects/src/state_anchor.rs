//! State Anchors (spec 3.6, FR-4, DX-2): the Domain's persistent layer over
//! the persistent paths of the sandbox.
//!
//! Each persistent path gets one kernel overlayfs whose lower is the
//! prepared lower's subtree at that path, whose upper and work directories
//! are the Domain's, mounted by the Runtime Supervisor in its own mount
//! namespace (owned by the verified user namespace, so `userxattr`) and
//! bound into the sandbox at the path. The medium was chosen by measurement
//! (docs/benchmarks.md "State Anchor medium"): it costs what a host-disk
//! bind costs inside runsc, needs no daemon, and leaves nothing to stop.
//!
//! The anchors' durable identity ([`AnchorMounts`]) is the mount namespace
//! (its 64-bit namespace ID, which the kernel never reuses) and each mount's
//! unique mount ID with its root's device and inode. Unmounting checks
//! that identity first: a mismatch refuses and touches nothing (spec 3.6
//! "A mismatched mount refuses release"). The Host Coordinator proves the
//! anchors absent independently of the supervisor: no process it can see is
//! still in that mount namespace ([`wait_namespace_left`]).
//!
//! Every kernel call is behind [`AnchorSys`]; tests pass a recording fake.
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lazaret_runtime::coordinator::messages::AnchorPlan;
use lazaret_runtime::records::ids::{HostPath, ValueError};
use lazaret_runtime::records::participant::{
    AnchorMount, AnchorMounts, MountIdentity, MountNamespaceIdentity,
};

/// The directory of a generation's directory that holds its anchors' mount
/// points (never removed recursively: see the supervisor's teardown).
pub const MOUNT_POINTS_DIR: &str = "anchors";

/// The most State Anchors one generation mounts: a profile's persistent
/// paths are validated to be pairwise disjoint, and no useful profile
/// needs more.
pub const MAX_ANCHORS: usize = 64;

/// What the anchor code needs to know of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Absent,
    /// A directory (never a symlink to one) with its mode and owner as the
    /// caller's user namespace sees them.
    Directory {
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// Something else: a symlink, a file, a device.
    Other,
}

/// The kernel calls of State Anchors.
pub trait AnchorSys {
    /// What is at `path`, without following a final symlink.
    fn entry(&self, path: &Path) -> io::Result<Entry>;
    /// `mkdir(path, 0700)`, then `chown` and `chmod` to the given owner and
    /// mode (`mkdir` alone would apply the umask).
    fn create_directory(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> io::Result<()>;
    /// A kernel overlayfs (`userxattr`, `nosuid`, `nodev`) of `lower` under
    /// `upper` (work directory `work`) attached at `target`; returns the new
    /// mount's identity.
    /// The directory at `path` inside the image `rootfs`, reached without
    /// any symlink (ELOOP otherwise) and without leaving it, as a
    /// canonical host path.
    fn lower_in(&self, rootfs: &Path, path: &str) -> io::Result<PathBuf>;
    fn mount_overlay(
        &self,
        lower: &Path,
        upper: &Path,
        work: &Path,
        target: &Path,
    ) -> io::Result<MountIdentity>;
    /// The identity of the mount whose root is at `target` now.
    fn mount_identity(&self, target: &Path) -> io::Result<MountIdentity>;
    /// `umount2(target, 0)`, or with `MNT_DETACH` when `detach`.
    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()>;
    /// The caller's mount namespace.
    fn mount_namespace(&self) -> io::Result<MountNamespaceIdentity>;
    /// The processes, among those the caller may inspect, whose mount
    /// namespace is `ns` (at most `limit` of them).
    fn processes_in(&self, ns: &MountNamespaceIdentity, limit: usize) -> io::Result<Vec<u32>>;
    /// Whether the mount namespace with ID `ns.id` still exists, by its
    /// ID and not by the processes in it; `None` when this kernel cannot
    /// answer.
    fn namespace_exists(&self, ns: &MountNamespaceIdentity) -> io::Result<Option<bool>>;
}

/// Errors of mounting, unmounting and proving State Anchors absent; one
/// variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    #[error("the profile has {count} persistent paths; at most {MAX_ANCHORS} are supported")]
    TooMany { count: usize },
    #[error("cannot inspect {path} ({what}): {source}")]
    Inspect {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the persistent path {path} is not a directory in the image ({lower} is {found}); remove it from persistent_dirs or use an image where it is one")]
    LowerNotDirectory {
        path: String,
        lower: PathBuf,
        found: &'static str,
    },
    #[error("the State Anchor {what} {path} is not a directory (a symlink or file was put there); refusing to use it")]
    NotDirectory { what: &'static str, path: PathBuf },
    #[error("cannot create the State Anchor {what} {path}: {source}")]
    Create {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot mount the State Anchor of {path} at {mountpoint}: {source}")]
    Mount {
        path: String,
        mountpoint: PathBuf,
        source: io::Error,
    },
    #[error("cannot read the mount namespace: {0}")]
    Namespace(io::Error),
    #[error("the State Anchors were recorded in mount namespace {recorded}, this process is in {current}; refusing to unmount")]
    OtherNamespace { recorded: u64, current: u64 },
    #[error("the State Anchor at {mountpoint} is not the recorded mount (recorded {recorded:?}, found {found:?}); refusing to unmount it")]
    MountMismatch {
        mountpoint: PathBuf,
        recorded: MountIdentity,
        found: MountIdentity,
    },
    #[error("cannot unmount the State Anchor at {mountpoint}: {source}")]
    Unmount {
        mountpoint: PathBuf,
        source: io::Error,
    },
    #[error("the State Anchor mount point {path} is not a recordable path: {source}")]
    Path { path: PathBuf, source: ValueError },
    #[error("cannot look for processes in mount namespace {namespace}: {source}")]
    Scan { namespace: u64, source: io::Error },
    #[error("the State Anchors' mount namespace {namespace} is still in use after {waited:?} (processes the scan sees: {pids:?}; none means a process that cannot be inspected, an open descriptor or a bind mount of it)")]
    NamespaceInUse {
        namespace: u64,
        pids: Vec<u32>,
        waited: Duration,
    },
    #[error("cannot ask whether mount namespace {namespace} still exists: {source}")]
    Exists { namespace: u64, source: io::Error },
}

/// The name of a persistent path's directories under the Domain's anchors
/// directory: the path without its leading `/`, with `%` and `/` escaped
/// (`/usr/local` -> `usr%2Flocal`), so distinct paths never share one.
pub fn anchor_name(path: &str) -> String {
    let mut name = String::with_capacity(path.len());
    for ch in path.trim_start_matches('/').chars() {
        match ch {
            '%' => name.push_str("%25"),
            '/' => name.push_str("%2F"),
            c => name.push(c),
        }
    }
    name
}

fn inspect<S: AnchorSys>(sys: &S, what: &'static str, path: &Path) -> Result<Entry, AnchorError> {
    sys.entry(path).map_err(|source| AnchorError::Inspect {
        what,
        path: path.to_owned(),
        source,
    })
}

/// A directory the anchor owns (upper, work, mount point): created when
/// absent with `mode` and owner, used as it is when it is a directory,
/// refused otherwise.
fn own_directory<S: AnchorSys>(
    sys: &S,
    what: &'static str,
    path: &Path,
    attrs: (u32, u32, u32),
) -> Result<(), AnchorError> {
    match inspect(sys, what, path)? {
        Entry::Directory { .. } => Ok(()),
        Entry::Other => Err(AnchorError::NotDirectory {
            what,
            path: path.to_owned(),
        }),
        Entry::Absent => {
            let (mode, uid, gid) = attrs;
            sys.create_directory(path, mode, uid, gid)
                .map_err(|source| AnchorError::Create {
                    what,
                    path: path.to_owned(),
                    source,
                })
        }
    }
}

/// Mounts one anchor: the lower must be a directory of the prepared lower
/// (runsc would create a missing bind destination inside the shared
/// prepared lower; the preparer creates the default persistent paths); a
/// new upper takes the lower's mode and owner (the anchor root shows the
/// upper's).
fn mount_one<S: AnchorSys>(sys: &S, plan: &AnchorPlan) -> Result<AnchorMount, AnchorError> {
    let rootfs = PathBuf::from(&plan.rootfs);
    let lower = match sys.lower_in(&rootfs, &plan.path) {
        Ok(lower) => lower,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(AnchorError::LowerNotDirectory {
                path: plan.path.clone(),
                lower: rootfs.join(plan.path.trim_start_matches('/')),
                found: "absent",
            })
        }
        // Bound at its literal path while its lower would be another path
        // of the image (or the host's): refused (docs/persistent-state.md).
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(AnchorError::LowerNotDirectory {
                path: plan.path.clone(),
                lower: rootfs.join(plan.path.trim_start_matches('/')),
                found: "reached through a symbolic link of the image",
            })
        }
        Err(source) => {
            return Err(AnchorError::Inspect {
                what: "lower",
                path: rootfs.join(plan.path.trim_start_matches('/')),
                source,
            })
        }
    };
    let attrs = match inspect(sys, "lower", &lower)? {
        Entry::Directory { mode, uid, gid } => (mode & 0o7777, uid, gid),
        Entry::Absent => {
            return Err(AnchorError::LowerNotDirectory {
                path: plan.path.clone(),
                lower,
                found: "absent",
            })
        }
        Entry::Other => {
            return Err(AnchorError::LowerNotDirectory {
                path: plan.path.clone(),
                lower,
                found: "not a directory",
            })
        }
    };
    let upper = PathBuf::from(&plan.upper);
    let work = PathBuf::from(&plan.work);
    let mountpoint = PathBuf::from(&plan.mountpoint);
    own_directory(sys, "upper directory", &upper, attrs)?;
    own_directory(sys, "work directory", &work, (0o700, 0, 0))?;
    own_directory(sys, "mount point", &mountpoint, (0o700, 0, 0))?;
    let recordable =
        HostPath::new(plan.mountpoint.as_bytes().to_vec()).map_err(|source| AnchorError::Path {
            path: mountpoint.clone(),
            source,
        })?;
    let mount = sys
        .mount_overlay(&lower, &upper, &work, &mountpoint)
        .map_err(|source| AnchorError::Mount {
            path: plan.path.clone(),
            mountpoint: mountpoint.clone(),
            source,
        })?;
    Ok(AnchorMount {
        mountpoint: recordable,
        mount,
    })
}

/// Spec 3.6 step 4: mounts every anchor of `plans`, in order, in the
/// caller's mount namespace. On any failure the anchors mounted so far are
/// unmounted again before the error returns: nothing partial stays mounted.
pub fn mount_anchors<S: AnchorSys>(
    sys: &S,
    plans: &[AnchorPlan],
) -> Result<AnchorMounts, AnchorError> {
    let _span = tracing::info_span!("MountStateAnchors", anchors = plans.len()).entered();
    if plans.len() > MAX_ANCHORS {
        return Err(AnchorError::TooMany { count: plans.len() });
    }
    let namespace = sys.mount_namespace().map_err(AnchorError::Namespace)?;
    let mut anchors = Vec::with_capacity(plans.len());
    for plan in plans {
        match mount_one(sys, plan) {
            Ok(m) => anchors.push(m),
            Err(e) => {
                let mounted = AnchorMounts { namespace, anchors };
                if let Err(undo) = unmount_anchors(sys, &mounted) {
                    tracing::warn!(error = %undo, "unmounting the State Anchors of a failed mount");
                }
                return Err(e);
            }
        }
    }
    Ok(AnchorMounts { namespace, anchors })
}

/// Spec 3.6 release step 2: unmounts every recorded anchor, last first,
/// each only after its mount point shows exactly the recorded mount. A
/// busy anchor is detached (nothing can write through it once the sandbox
/// is gone; its last user takes it along). An anchor whose mount point no
/// longer shows a mount of the recorded identity refuses: nothing else is
/// unmounted after it.
pub fn unmount_anchors<S: AnchorSys>(sys: &S, mounts: &AnchorMounts) -> Result<(), AnchorError> {
    let _span =
        tracing::info_span!("UnmountStateAnchors", anchors = mounts.anchors.len()).entered();
    let current = sys.mount_namespace().map_err(AnchorError::Namespace)?;
    if current.id != mounts.namespace.id {
        return Err(AnchorError::OtherNamespace {
            recorded: mounts.namespace.id,
            current: current.id,
        });
    }
    for anchor in mounts.anchors.iter().rev() {
        let mountpoint = PathBuf::from(anchor.mountpoint.to_string());
        let found = sys
            .mount_identity(&mountpoint)
            .map_err(|source| AnchorError::Inspect {
                what: "mount point",
                path: mountpoint.clone(),
                source,
            })?;
        if found != anchor.mount {
            return Err(AnchorError::MountMismatch {
                mountpoint,
                recorded: anchor.mount,
                found,
            });
        }
        let unmounted = match sys.unmount(&mountpoint, false) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
                tracing::warn!(path = %mountpoint.display(), "State Anchor busy; detaching it");
                sys.unmount(&mountpoint, true)
            }
            other => other,
        };
        unmounted.map_err(|source| AnchorError::Unmount {
            mountpoint: mountpoint.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The most processes an absence check reports.
const REPORTED_PIDS: usize = 16;

/// The Host Coordinator's independent absence proof of a generation's
/// State Anchors: their mount namespace, which only the Runtime Supervisor
/// and what it started (runsc, the helper) and the sessions' exec clients
/// enter, has no process left in it, and the namespace itself is gone.
/// Polls every `poll` until `timeout` (the exec clients end shortly after
/// the sandbox they served).
///
/// The process scan alone cannot see a process the caller may not inspect
/// (a non-dumpable one), nor a descriptor or bind mount that keeps the
/// namespace alive; the namespace's own existence, asked by its ID, covers
/// all of them. Where the kernel cannot answer that, the scan decides.
pub fn wait_namespace_left<S: AnchorSys>(
    sys: &S,
    ns: &MountNamespaceIdentity,
    timeout: Duration,
    poll: Duration,
) -> Result<(), AnchorError> {
    let started = Instant::now();
    loop {
        let pids = sys
            .processes_in(ns, REPORTED_PIDS)
            .map_err(|source| AnchorError::Scan {
                namespace: ns.id,
                source,
            })?;
        let exists = if pids.is_empty() {
            sys.namespace_exists(ns)
                .map_err(|source| AnchorError::Exists {
                    namespace: ns.id,
                    source,
                })?
                .unwrap_or(false)
        } else {
            true
        };
        if !exists {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(AnchorError::NamespaceInUse {
                namespace: ns.id,
                pids,
                waited,
            });
        }
        std::thread::sleep(poll.min(timeout.saturating_sub(waited)));
    }
}

pub mod changes;
pub mod destinations;
pub mod real;
pub mod reset;
pub mod usage;
pub mod verify;

/// The Domain's anchor uppers, beneath its storage domain root
/// (docs/persistent-state.md "Where it lives on the host").
pub fn uppers_dir(storage_domain_root: &Path) -> PathBuf {
    storage_domain_root.join("anchors").join("upper")
}

/// The file beside the uppers naming the prepared lower the anchors were
/// last mounted over (its artifact ID), rewritten at each launch: what
/// `lazaret state inspect` compares an upper with, and (by its
/// modification time) the artifact's last use for `lazaret state gc`'s
/// keep policy. No safety decision reads it.
pub const LOWER_RECORD: &str = "lower";

/// Records `artifact_id` (64 hex digits) as the anchors' lower: written
/// beside, then renamed over, so a reader sees the old or the new one.
pub fn record_lower(storage_domain_root: &Path, artifact_id: &str) -> io::Result<()> {
    let dir = storage_domain_root.join("anchors");
    let staged = dir.join(format!(".{LOWER_RECORD}.new"));
    std::fs::write(&staged, artifact_id.as_bytes())?;
    std::fs::rename(&staged, dir.join(LOWER_RECORD))
}

/// The recorded lower's root file system (`<storage root>/prepared/<artifact
/// ID>/rootfs`), when one is recorded and well formed.
pub fn recorded_lower(storage_root: &Path, storage_domain_root: &Path) -> Option<PathBuf> {
    let text =
        std::fs::read_to_string(storage_domain_root.join("anchors").join(LOWER_RECORD)).ok()?;
    let id = text.trim();
    let well_formed = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    well_formed.then(|| storage_root.join("prepared").join(id).join("rootfs"))
}

/// The Domain's anchor work directories, beside the uppers.
pub fn work_dir(storage_domain_root: &Path) -> PathBuf {
    storage_domain_root.join("anchors").join("work")
}

#[cfg(test)]
mod tests;
