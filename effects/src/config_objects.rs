//! Opening the objects a configuration names — workspace, volume sources and
//! auto-approval executables — through confined plans, with their load-time
//! checks (spec 3.2; schemas.md auto-approval rule).
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::config::{
    ConfigError, HostPathDecl, KeyPath, TreeEntry, TreeRole, VolumeDecl, VolumeKind,
};

use crate::config_resolve::LoadError;
use crate::confined::{
    ConfinedError, ConfinedSys, FileKind, FileStat, OpenedObject, RootHandle, UserIds,
};

pub(crate) fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

pub(crate) fn identity(o: &OpenedObject) -> Option<(u32, u32, u64)> {
    let id = o.stat().identity;
    Some((id.dev_major, id.dev_minor, id.ino))
}

/// The overlap entry of an opened object: its canonical label, identity and
/// the identities of its containing directories (spec 3.2: confinement
/// compares component ancestry and retained filesystem identities).
pub(crate) fn opened_entry(
    loader: &Loader<'_>,
    role: TreeRole,
    key: KeyPath,
    object: &OpenedObject,
) -> Result<TreeEntry, LoadError> {
    let ancestors = object
        .containing_identities(loader.sys)
        .map_err(loader.path_err(&key))?
        .into_iter()
        .map(|id| (id.dev_major, id.dev_minor, id.ino))
        .collect();
    Ok(TreeEntry {
        role,
        label: object.label(),
        identity: identity(object),
        ancestors,
        key,
    })
}

/// Whether `path` exists as a directory (following symlinks, as the
/// ancestors of a plan are resolved once).
pub(crate) fn sys_is_dir(sys: &dyn ConfinedSys, path: &Path) -> bool {
    sys.open_ambient(path, true)
        .and_then(|fd| sys.stat(fd.as_fd()))
        .is_ok_and(|st| st.kind() == FileKind::Directory)
}

pub(crate) fn label_key(text: &str) -> KeyPath {
    KeyPath::label(text.to_owned())
}

/// The loader's context for one load.
pub(crate) struct Loader<'a> {
    pub(crate) sys: &'a dyn ConfinedSys,
    pub(crate) file: PathBuf,
    pub(crate) user: UserIds,
}

impl Loader<'_> {
    pub(crate) fn path_err(&self, key: &KeyPath) -> impl Fn(ConfinedError) -> LoadError + '_ {
        let key = key.clone();
        move |source| LoadError::Path {
            file: self.file.clone(),
            key: key.clone(),
            source,
        }
    }

    pub(crate) fn config_err(&self) -> impl Fn(ConfigError) -> LoadError + '_ {
        |source| LoadError::Config {
            file: self.file.clone(),
            source,
        }
    }

    /// The canonical label a not-yet-created path will have.
    pub(crate) fn planned_label(&self, key: &KeyPath, path: &Path) -> Result<PathBuf, LoadError> {
        let (ancestor, rest) =
            crate::confined::resolve_ancestors(self.sys, path).map_err(self.path_err(key))?;
        Ok(rest.iter().fold(ancestor, |acc, c| acc.join(c)))
    }

    pub(crate) fn workspace(&self, path: &Path) -> Result<OpenedObject, LoadError> {
        let err = |source| LoadError::Workspace {
            file: self.file.clone(),
            source,
        };
        let ambient = self.sys.open_ambient(path, true).map_err(|e| {
            err(ConfinedError::Open {
                path: path.to_owned(),
                problem: crate::confined::open_problem(&e),
            })
        })?;
        let canonical = self.sys.fd_path(ambient.as_fd()).map_err(|source| {
            err(ConfinedError::FdPath {
                path: path.to_owned(),
                source,
            })
        })?;
        let ambient_stat = self.sys.stat(ambient.as_fd()).map_err(|source| {
            err(ConfinedError::Stat {
                path: path.to_owned(),
                source,
            })
        })?;
        let object = OpenedObject::open_existing(self.sys, &canonical).map_err(err)?;
        object
            .require_kind(FileKind::Directory, "a directory")
            .map_err(err)?;
        if object.stat().identity != ambient_stat.identity {
            return Err(err(ConfinedError::Changed { path: canonical }));
        }
        Ok(object)
    }

    pub(crate) fn volume(
        &self,
        decl: &VolumeDecl,
        path: &Path,
        profile_dir: &RootHandle,
    ) -> Result<OpenedObject, LoadError> {
        let key = decl.key.key("host");
        if decl.create {
            let HostPathDecl::ProfileDir(rest) = &decl.host else {
                return Err(self.config_err()(ConfigError::Invalid {
                    key: decl.key.key("create"),
                    found: "true".to_owned(),
                    expected: "create = true only beneath {profile_dir}/",
                }));
            };
            let root = profile_dir
                .ensure_child(self.sys, Path::new(rest), self.user.uid)
                .map_err(self.path_err(&key))?;
            return Ok(root.into_inner());
        }
        let object = OpenedObject::open_existing(self.sys, path).map_err(self.path_err(&key))?;
        let (kind, expected) = match decl.kind {
            VolumeKind::File => (FileKind::Regular, "a regular file (kind = \"file\")"),
            VolumeKind::Directory => (FileKind::Directory, "a directory (kind = \"directory\")"),
        };
        object
            .require_kind(kind, expected)
            .map_err(self.path_err(&key))?;
        Ok(object)
    }

    /// Resolves an auto-approval executable to its canonical object and
    /// applies the load-time checks (spec 3.2).
    pub(crate) fn executable(&self, key: &KeyPath, path: &Path) -> Result<OpenedObject, LoadError> {
        let refuse = |path: &Path, problem: String| LoadError::Executable {
            file: self.file.clone(),
            key: key.clone(),
            path: path.to_owned(),
            problem,
        };
        let ambient = self
            .sys
            .open_ambient(path, true)
            .map_err(|e| refuse(path, crate::confined::open_problem(&e)))?;
        let canonical = self
            .sys
            .fd_path(ambient.as_fd())
            .map_err(|e| refuse(path, e.to_string()))?;
        let ambient_stat = self
            .sys
            .stat(ambient.as_fd())
            .map_err(|e| refuse(path, e.to_string()))?;
        let object =
            OpenedObject::open_existing(self.sys, &canonical).map_err(self.path_err(key))?;
        let st = object.stat();
        if st.identity != ambient_stat.identity {
            return Err(refuse(
                &canonical,
                "changed while being resolved; expected a stable object".to_owned(),
            ));
        }
        executable_rules(st, &self.user).map_err(|problem| refuse(&canonical, problem))?;
        Ok(object)
    }
}

/// The rules an auto-approval executable meets at load and before every
/// execution (schemas.md auto-approval rules, spec 3.2): a regular file with
/// exactly one hard link, owned by root or the invoking user, granting no
/// group or other write permission, executable by the invoking user. The
/// problem names the rule broken.
pub(crate) fn executable_rules(st: &FileStat, user: &UserIds) -> Result<(), String> {
    if st.kind() != FileKind::Regular {
        return Err(format!(
            "is {}; expected a regular file",
            st.kind().describe()
        ));
    }
    if st.nlink != 1 {
        return Err(format!("has {} hard links; expected exactly one", st.nlink));
    }
    if st.uid != 0 && st.uid != user.uid {
        return Err(format!(
            "is owned by uid {}; expected root or the invoking user (uid {})",
            st.uid, user.uid
        ));
    }
    if st.permissions() & 0o022 != 0 {
        return Err(format!(
            "has mode {:04o}; expected no group or other write bit",
            st.permissions()
        ));
    }
    let exec_bit = if st.uid == user.uid {
        0o100
    } else if st.gid == user.gid || user.groups.contains(&st.gid) {
        0o010
    } else {
        0o001
    };
    if st.permissions() & exec_bit == 0 {
        return Err(format!(
            "has mode {:04o}; expected it to be executable by the invoking user",
            st.permissions()
        ));
    }
    Ok(())
}
