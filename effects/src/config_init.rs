//! `lazaret config init`: writes a starter configuration with mode 0600,
//! never overwriting an existing file. Missing parent directories are created
//! one component at a time with mode 0700.
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::confined::{
    open_problem, resolve_ancestors, ConfinedError, ConfinedPathPlan, ConfinedSys, RootHandle,
};

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Confined(#[from] ConfinedError),
    #[error("{}: already exists; expected no file there (config init never overwrites)", path.display())]
    Exists { path: PathBuf },
    #[error("{}: creating the file failed: {problem}", path.display())]
    Create { path: PathBuf, problem: String },
    #[error("{}: setting mode 0600 failed: {source}; the new file was removed", path.display())]
    Chmod {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: writing failed: {source}; the partial file was removed", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Creates `path` (absolute, normalized) with `contents` and mode 0600.
pub fn write_new_config(
    sys: &dyn ConfinedSys,
    path: &Path,
    contents: &[u8],
    uid: u32,
) -> Result<PathBuf, InitError> {
    let (ancestor, rest) = resolve_ancestors(sys, path)?;
    let parent = match rest.split_last() {
        Some((_, [])) | None => ConfinedPathPlan::new(sys, &ancestor, PathBuf::from("."))?,
        Some((_, missing)) => {
            let dir = ancestor.join(missing.iter().collect::<PathBuf>());
            let root = RootHandle::ensure(sys, &dir, uid)?;
            // The parent is reopened by its label: it must still be the
            // directory that was just created and checked (spec 3.2).
            let plan = ConfinedPathPlan::new(sys, &root.label(), PathBuf::from("."))?;
            if plan.ancestor_identity() != root.object().stat().identity {
                return Err(ConfinedError::Changed { path: root.label() }.into());
            }
            plan
        }
    };
    let name = rest.last().map_or_else(PathBuf::new, PathBuf::from);
    let dir = parent.open(sys, OFlags::PATH | OFlags::DIRECTORY)?;
    let label = parent.label().join(&name);
    let label = PathBuf::from_iter(label.components());
    let file = sys
        .openat2(
            dir.as_fd(),
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(0o600),
            crate::confined::confined_resolve(),
        )
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                InitError::Exists {
                    path: label.clone(),
                }
            } else {
                InitError::Create {
                    path: label.clone(),
                    problem: open_problem(&e),
                }
            }
        })?;
    // The create mode is masked by the umask: set 0600 exactly, then write.
    let written = sys
        .chmod(file.as_fd(), Mode::from_raw_mode(0o600))
        .map_err(|source| InitError::Chmod {
            path: label.clone(),
            source,
        })
        .and_then(|()| {
            sys.write_all(file.as_fd(), contents)
                .map_err(|source| InitError::Write {
                    path: label.clone(),
                    source,
                })
        });
    if let Err(e) = written {
        // Leave nothing behind: the file was created by this call.
        let _removed = sys.unlinkat(dir.as_fd(), &name);
        return Err(e);
    }
    Ok(label)
}
