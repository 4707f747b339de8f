//! Refusals of confined path handling; one variant per failing step, each
//! naming the path and what was expected.
use std::io;
use std::path::PathBuf;

/// Describes an `openat2` failure under the v1 resolve flags.
pub(crate) fn open_problem(error: &io::Error) -> String {
    match rustix::io::Errno::from_io_error(error) {
        Some(rustix::io::Errno::LOOP) => {
            "a symbolic link is on the path; expected no symbolic links".to_owned()
        }
        Some(rustix::io::Errno::XDEV) => {
            "the path crosses a mount point or leaves its ancestor; expected one filesystem beneath the retained ancestor".to_owned()
        }
        Some(rustix::io::Errno::NOENT) => "it does not exist; expected an existing object".to_owned(),
        Some(rustix::io::Errno::NOTDIR) => {
            "a path component is not a directory; expected directories above the final component".to_owned()
        }
        _ => format!("{error}; expected an openable object"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    #[error("{path}: resolving its existing ancestors failed: {source}; expected an accessible directory chain")]
    ResolveAncestors { path: PathBuf, source: io::Error },
    #[error("opening the filesystem root failed: {source}")]
    OpenRoot { source: io::Error },
    #[error("{path}: opening the retained ancestor failed: {problem}")]
    OpenAncestor { path: PathBuf, problem: String },
    #[error("{path}: the retained ancestor is {found}; expected a directory")]
    AncestorNotDirectory { path: PathBuf, found: &'static str },
    #[error("{path}: the retained ancestor changed identity or mount; expected the recorded device, inode and mount")]
    AncestorChanged { path: PathBuf },
    #[error("{path}: {problem}")]
    Open { path: PathBuf, problem: String },
    #[error("{path}: reading metadata failed: {source}")]
    Stat { path: PathBuf, source: io::Error },
    #[error("{path}: reading the canonical pathname failed: {source}")]
    FdPath { path: PathBuf, source: io::Error },
    #[error("{path}: is {found}; expected {expected}")]
    WrongType {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    #[error("{path}: creating the directory failed: {source}; expected a creatable component")]
    Mkdir { path: PathBuf, source: io::Error },
    #[error("{path}: setting mode 0700 on the created directory failed: {source}; expected an exact mode")]
    Chmod { path: PathBuf, source: io::Error },
    #[error("{path}: owned by uid {owner}; expected {expected}")]
    Owner {
        path: PathBuf,
        owner: u32,
        expected: String,
    },
    #[error("{path}: mode {mode:04o}; expected {expected}")]
    Mode {
        path: PathBuf,
        mode: u32,
        expected: &'static str,
    },
    #[error("{path}: has {nlink} hard links; expected exactly one")]
    HardLinks { path: PathBuf, nlink: u32 },
    #[error("{path}: changed identity, type or mount after it was opened; expected the object recorded when the plan was built")]
    Changed { path: PathBuf },
    #[error("reading the invoking user's identity failed: {source}")]
    UserIds { source: io::Error },
    #[error("{path}: has {count} path components; expected at most {max}")]
    TooDeep {
        path: PathBuf,
        count: usize,
        max: usize,
    },
}
