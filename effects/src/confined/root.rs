//! Lazaret-owned roots (spec 3.2): a missing Storage, Runtime, profile,
//! Domain or volume root is created one component at a time beneath its
//! retained existing ancestor, each component with mode 0700, refusing
//! symlinks, magic links and child mounts, and reopened before proceeding.
//! The root, if it exists, and every created component must be a directory
//! owned by the invoking user with mode exactly 0700.
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::error::{open_problem, ConfinedError};
use super::plan::{confined_resolve, resolve_ancestors, stat, ConfinedPathPlan, OpenedObject};
use super::sys::{ConfinedSys, FileKind, FileStat};

const LAZARET_DIR_MODE: u32 = 0o700;

/// A validated Lazaret-owned directory root, retained through its plan.
#[derive(Debug)]
pub struct RootHandle(OpenedObject);

fn require_owned_dir(path: &Path, st: &FileStat, uid: u32) -> Result<(), ConfinedError> {
    if st.kind() != FileKind::Directory {
        return Err(ConfinedError::WrongType {
            path: path.to_owned(),
            found: st.kind().describe(),
            expected: "a directory",
        });
    }
    if st.uid != uid {
        return Err(ConfinedError::Owner {
            path: path.to_owned(),
            owner: st.uid,
            expected: format!("the invoking user (uid {uid}) for a Lazaret-owned directory"),
        });
    }
    if st.permissions() != LAZARET_DIR_MODE {
        return Err(ConfinedError::Mode {
            path: path.to_owned(),
            mode: st.permissions(),
            expected: "exactly 0700 for a Lazaret-owned directory",
        });
    }
    Ok(())
}

/// Walks the plan's suffix from its ancestor, creating each missing
/// component with mode 0700 and checking each component's owner and mode.
fn create_components(
    sys: &dyn ConfinedSys,
    plan: &ConfinedPathPlan,
    uid: u32,
) -> Result<FileStat, ConfinedError> {
    plan.revalidate_ancestor(sys)?;
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
    let mut label: PathBuf = plan.label();
    for _ in plan.suffix().components() {
        label.pop();
    }
    let mut current: Option<OwnedFd> = None;
    let mut last: Option<FileStat> = None;
    for component in plan.suffix().components() {
        let name = Path::new(component.as_os_str());
        label.push(name);
        let dir = current.as_ref().map_or(plan.ancestor(), |fd| fd.as_fd());
        let opened = match sys.openat2(dir, name, dir_flags, Mode::empty(), confined_resolve()) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mode = Mode::from_raw_mode(LAZARET_DIR_MODE);
                let created = match sys.mkdirat(dir, name, mode) {
                    Ok(()) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                    Err(source) => {
                        return Err(ConfinedError::Mkdir {
                            path: label.clone(),
                            source,
                        })
                    }
                };
                let fd = sys
                    .openat2(dir, name, dir_flags, Mode::empty(), confined_resolve())
                    .map_err(|e| ConfinedError::Open {
                        path: label.clone(),
                        problem: open_problem(&e),
                    })?;
                // mkdir's mode is masked by the umask, which can only take
                // bits away: set it exactly, but only on what still looks
                // like the directory just made (a directory of ours with no
                // bit beyond 0700; a link count would not tell emptiness on
                // every filesystem). Anything else keeps its mode and is
                // judged below.
                let st = stat(sys, fd.as_fd(), &label)?;
                if created
                    && st.kind() == FileKind::Directory
                    && st.uid == uid
                    && st.permissions() & !LAZARET_DIR_MODE == 0
                {
                    sys.chmod(fd.as_fd(), mode)
                        .map_err(|source| ConfinedError::Chmod {
                            path: label.clone(),
                            source,
                        })?;
                }
                fd
            }
            Err(e) => {
                return Err(ConfinedError::Open {
                    path: label.clone(),
                    problem: open_problem(&e),
                })
            }
        };
        let st = stat(sys, opened.as_fd(), &label)?;
        require_owned_dir(&label, &st, uid)?;
        last = Some(st);
        current = Some(opened);
    }
    last.ok_or(ConfinedError::WrongType {
        path: label,
        found: "an empty suffix",
        expected: "at least one component beneath the ancestor",
    })
}

impl RootHandle {
    /// Ensures `path` (absolute, normalized) is a Lazaret-owned directory.
    pub(crate) fn ensure(
        sys: &dyn ConfinedSys,
        path: &Path,
        uid: u32,
    ) -> Result<Self, ConfinedError> {
        let (ancestor, rest) = resolve_ancestors(sys, path)?;
        let plan = ConfinedPathPlan::new(sys, &ancestor, rest.iter().collect())?;
        Self::create_through(sys, plan, uid)
    }

    /// Ensures `rel` beneath this root is a Lazaret-owned directory.
    pub(crate) fn ensure_child(
        &self,
        sys: &dyn ConfinedSys,
        rel: &Path,
        uid: u32,
    ) -> Result<Self, ConfinedError> {
        let plan = ConfinedPathPlan::new(sys, &self.0.label(), rel.to_owned())?;
        if plan.ancestor_identity() != self.0.stat().identity {
            return Err(ConfinedError::Changed {
                path: self.0.label(),
            });
        }
        Self::create_through(sys, plan, uid)
    }

    fn create_through(
        sys: &dyn ConfinedSys,
        plan: ConfinedPathPlan,
        uid: u32,
    ) -> Result<Self, ConfinedError> {
        let created = create_components(sys, &plan, uid)?;
        let object = OpenedObject::through(sys, plan)?;
        if object.stat().identity != created.identity {
            return Err(ConfinedError::Changed {
                path: object.label(),
            });
        }
        require_owned_dir(&object.label(), object.stat(), uid)?;
        Ok(Self(object))
    }

    pub fn object(&self) -> &OpenedObject {
        &self.0
    }

    pub(crate) fn into_inner(self) -> OpenedObject {
        self.0
    }

    pub fn label(&self) -> PathBuf {
        self.0.label()
    }

    pub fn revalidate(&self, sys: &dyn ConfinedSys) -> Result<(), ConfinedError> {
        self.0.revalidate(sys)
    }
}
