//! The router's judgement of the workspace's next index (spec 3.5, the
//! index-publication rules; SR-13): the Git Sentry filter asks it before a
//! rename replaces the index ([`IndexAdmission`]), and it refuses with
//! `EBUSY` an index that would track a path whose only object is in the
//! Ignored Workspace State ([`admit`]).

use super::filesystem::PublishedSnapshot;
use crate::fuse_passthrough::{errno, stat_fd};
use crate::git_sentry::filesystem::IndexAdmission;
use fuser::Errno;
use lazaret_runtime::workspace_routing::index_admission::{admit, ObjectKind};
use lazaret_runtime::workspace_routing::tracked::{index_entries, MAX_INDEX_BYTES};
use lazaret_runtime::workspace_routing::{Backing, ClassificationSnapshot};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Judges the workspace's next index by the snapshot in force and what the
/// two backings hold.
#[derive(Debug)]
pub struct RoutedIndexAdmission {
    pub(super) published: Arc<PublishedSnapshot>,
    pub(super) host_root: OwnedFd,
    pub(super) isolated_root: OwnedFd,
}

impl IndexAdmission for RoutedIndexAdmission {
    fn admit(&self, proposed: &OwnedFd) -> Result<(), Errno> {
        judge(
            &self.published.current(),
            b"",
            proposed,
            (&self.host_root, &self.isolated_root),
        )
    }
}

/// The judgement of `proposed` (open for reading) as the next index of the
/// repository at workspace path `repository` (empty: the workspace's own)
/// by the snapshot `current` and what the two backings (`roots`: host,
/// isolated) hold: `EBUSY` when it would track an isolated-only path.
pub(super) fn judge(
    current: &ClassificationSnapshot,
    repository: &[u8],
    proposed: &OwnedFd,
    (host_root, isolated_root): (&OwnedFd, &OwnedFd),
) -> Result<(), Errno> {
    let _span = tracing::info_span!("AdmitIndex").entered();
    let Some(format) = current.object_format(repository) else {
        return Ok(());
    };
    let bytes = read_all(proposed)?;
    // An index that cannot be judged is refused (the snapshot cannot be
    // read from it either: a split index, one too large).
    let entries = index_entries(&bytes, format).map_err(|e| {
        tracing::warn!(error = %e, "refused an index that cannot be decoded (EBUSY)");
        Errno::EBUSY
    })?;
    admit(current, repository, &entries, |backing, path| {
        let root = match backing {
            Backing::Host => host_root,
            Backing::Isolated => isolated_root,
        };
        object_kind(root, path)
    })
    .map_err(|refusal| {
        tracing::warn!(%refusal, "refused an index that would track an isolated-only path (EBUSY)");
        Errno::EBUSY
    })
}

/// What `root` holds at the workspace path `path`, found without following
/// a symbolic link and never above `root`.
pub(super) fn object_kind(root: &OwnedFd, path: &[u8]) -> Option<ObjectKind> {
    let fd = rustix::fs::openat2(
        root,
        OsStr::from_bytes(path),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = stat_fd(&fd).ok()?;
    Some(match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => ObjectKind::File,
        FileType::Symlink => ObjectKind::Symlink,
        FileType::Directory => ObjectKind::Directory,
        _ => ObjectKind::Other,
    })
}

/// The whole of `file`, at most [`MAX_INDEX_BYTES`] and one more byte (the
/// decoder refuses what is larger).
fn read_all(file: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let limit = MAX_INDEX_BYTES.saturating_add(1);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    // Bounded: at most `limit` bytes are read.
    while out.len() < limit {
        let want = chunk.len().min(limit - out.len());
        match rustix::io::read(file, &mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(out)
}
