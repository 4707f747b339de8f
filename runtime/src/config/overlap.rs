//! Overlap rules among the configuration source, Agent Workspace, Lazaret
//! trees, volume sources and auto-approval executables (spec 3.2
//! "Configuration confinement compares canonical component ancestry and
//! retained filesystem identities"; schemas.md auto-approval rule). Labels are
//! canonical pathnames supplied by the effects layer; identities are
//! `(device major, device minor, inode)` when the object exists, and each
//! opened object also carries the identities of the directories containing
//! it, so an alias (bind mount) of a containing directory is an overlap even
//! when no label nests.
use std::path::{Path, PathBuf};

use super::error::{ConfigError, KeyPath};

/// What a compared path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeRole {
    ConfigSource,
    Workspace,
    StorageRoot,
    ProfileDir,
    StorageDomain,
    RuntimeRoot,
    RuntimeDomain,
    Volume,
    Executable,
}

/// One compared path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub role: TreeRole,
    /// The key or label naming the entry in refusals.
    pub key: KeyPath,
    pub label: PathBuf,
    pub identity: Option<(u32, u32, u64)>,
    /// Identities of the directories that contain the opened object, nearest
    /// first, as the kernel resolves `..` from it (empty before it is
    /// opened). A bind mount shares its source's identity, so an alias of a
    /// containing directory shows up here even when the labels are disjoint.
    pub ancestors: Vec<(u32, u32, u64)>,
}

/// The disjointness group of the config source, workspace and Lazaret trees.
fn group(role: TreeRole) -> Option<u8> {
    match role {
        TreeRole::ConfigSource => Some(0),
        TreeRole::Workspace => Some(1),
        TreeRole::StorageRoot | TreeRole::ProfileDir | TreeRole::StorageDomain => Some(2),
        TreeRole::RuntimeRoot | TreeRole::RuntimeDomain => Some(3),
        TreeRole::Volume | TreeRole::Executable => None,
    }
}

fn nests(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Whether `outer`'s object is one of the directories containing `inner`.
fn contains_by_identity(outer: &TreeEntry, inner: &TreeEntry) -> bool {
    outer
        .identity
        .is_some_and(|id| inner.ancestors.contains(&id))
}

/// Equal or nested by canonical label, by identity, or by the identity of a
/// containing directory (a bind-mount alias of an ancestor).
fn overlap(a: &TreeEntry, b: &TreeEntry) -> bool {
    nests(&a.label, &b.label)
        || (a.identity.is_some() && a.identity == b.identity)
        || contains_by_identity(a, b)
        || contains_by_identity(b, a)
}

fn conflict(a: &TreeEntry, b: &TreeEntry, expected: &str) -> ConfigError {
    ConfigError::Conflict {
        key: a.key.clone(),
        other: b.key.clone(),
        problem: format!(
            "{} and {} overlap; expected {expected}",
            a.label.display(),
            b.label.display()
        ),
    }
}

/// Whether a volume entry may touch `other` given where the volume lies.
fn volume_may_touch(
    volume: &TreeEntry,
    other: &TreeEntry,
    profile_dir: Option<&TreeEntry>,
) -> bool {
    let under_profile_dir =
        profile_dir.is_some_and(|p| volume.label.starts_with(&p.label) && volume.label != p.label);
    under_profile_dir && matches!(other.role, TreeRole::StorageRoot | TreeRole::ProfileDir)
}

/// Applies every overlap rule; the first violation refuses.
pub fn check_overlaps(entries: &[TreeEntry]) -> Result<(), ConfigError> {
    let profile_dir = entries.iter().find(|e| e.role == TreeRole::ProfileDir);
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[..i] {
            match (a.role, b.role) {
                (TreeRole::Executable, TreeRole::Executable | TreeRole::ConfigSource)
                | (TreeRole::ConfigSource, TreeRole::Executable) => {}
                (TreeRole::Executable, _) | (_, TreeRole::Executable) => {
                    let (exe, tree) = if a.role == TreeRole::Executable {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    if overlap(exe, tree) {
                        return Err(conflict(exe, tree, "an executable outside the workspace, volume sources, the profile directory and every Lazaret tree"));
                    }
                }
                (TreeRole::Volume, _) | (_, TreeRole::Volume) => {
                    let (vol, other) = if a.role == TreeRole::Volume {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    if !volume_may_touch(vol, other, profile_dir) && overlap(vol, other) {
                        return Err(conflict(vol, other, "volume sources disjoint from each other, the configuration source, the workspace and Lazaret trees (except strictly beneath the profile directory)"));
                    }
                }
                (ra, rb) => {
                    if group(ra) != group(rb) && overlap(a, b) {
                        return Err(conflict(a, b, "the configuration file, workspace, Storage Root and Runtime Root disjoint in both ancestry directions"));
                    }
                }
            }
        }
    }
    Ok(())
}
