//! Where a Domain's coordinator files live. Sockets and control files stay
//! inside the 0700 Domain runtime directory (SR-10); the lock and the Domain
//! Store sit together in the Domain's storage root (durable-state.md).
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainPaths {
    pub runtime: PathBuf,
    pub storage: PathBuf,
}

impl DomainPaths {
    pub fn new(runtime_domain_root: &Path, storage_domain_root: &Path) -> Self {
        Self {
            runtime: runtime_domain_root.to_owned(),
            storage: storage_domain_root.to_owned(),
        }
    }
    /// The CLI <-> HC unix socket.
    pub fn socket(&self) -> PathBuf {
        self.runtime.join("hc.sock")
    }
    /// The publication identity (spec 3.3): the generation's TLS CA and the
    /// digests pinning its Trust Manifest and coordinator leaf, written
    /// before the socket is bound and removed right after it.
    pub fn publication(&self) -> PathBuf {
        self.runtime.join("publication")
    }
    /// The coordinator's diagnostic log (removed on a clean exit).
    pub fn log(&self) -> PathBuf {
        self.runtime.join("coordinator.log")
    }
    pub fn lock(&self) -> PathBuf {
        self.storage.join("domain.lock")
    }
    pub fn store(&self) -> PathBuf {
        self.storage.join("domain.redb")
    }
    /// The Domain's State Anchors (spec 3.6): one upper and one work
    /// directory per persistent path, beneath these two.
    pub fn anchors(&self) -> PathBuf {
        self.storage.join("anchors")
    }
    pub fn anchor_uppers(&self) -> PathBuf {
        crate::state_anchor::uppers_dir(&self.storage)
    }
    pub fn anchor_work(&self) -> PathBuf {
        crate::state_anchor::work_dir(&self.storage)
    }
    /// The Domain's Ignored Workspace State (spec 3.5): the isolated
    /// backing of the ignored-path router, persistent across generations.
    pub fn ignored_state(&self) -> PathBuf {
        self.storage.join("ignored")
    }
    /// Present while a generation may have left workspace entries re-owned
    /// by the sandbox: written by the Runtime Supervisor before its sandbox
    /// starts, removed after its ownership restore (`crate::workspace_owner`).
    /// Persistent, so a crash or a reboot in between is restored next time.
    pub fn owner_restore_marker(&self) -> PathBuf {
        self.storage.join("workspace-owner.pending")
    }
    /// Where the traces of finished generations are kept.
    pub fn traces(&self) -> PathBuf {
        self.storage.join("traces")
    }
    /// One generation's bundle, runsc state and init copy.
    pub fn generation(&self, id: u64) -> PathBuf {
        self.runtime.join(format!("gen-{id}"))
    }
}

/// The sandbox credential bundle's host source in a generation directory
/// (spec 3.3): written by the Host Coordinator before the Runtime
/// Supervisor is planned, bound at `lazaret_runtime::bundle::CREDENTIALS`,
/// unlinked once the sandbox runs.
pub const SANDBOX_CREDENTIALS: &str = "credentials";

/// The generation's Escalation Mailbox in its generation directory (spec
/// 3.8; SR-10: inside the 0700 Domain runtime directory), made only when
/// the profile enables escalation: `requests/` (the sandbox writes) and
/// `results/` (the Host Coordinator writes). It goes with the generation
/// directory.
pub const MAILBOX: &str = "mailbox";

/// A unix socket path short enough for `sockaddr_un` however deep the
/// runtime directory is: `/proc/self/fd/N/hc.sock` through an `O_PATH`
/// descriptor of the directory, held while the path is in use.
#[derive(Debug)]
pub struct ShortSocketPath {
    _dir: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl ShortSocketPath {
    pub fn new(socket: &Path) -> std::io::Result<Self> {
        use rustix::fs::{Mode, OFlags};
        use std::os::fd::AsRawFd;
        let (dir, name) = match (socket.parent(), socket.file_name()) {
            (Some(dir), Some(name)) => (dir, name),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{} has no directory", socket.display()),
                ))
            }
        };
        let fd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())).join(name);
        Ok(Self { _dir: fd, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes a generation directory's sandbox credential source (spec 3.3),
/// if it is still there.
pub(super) fn remove_sandbox_credentials(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(SANDBOX_CREDENTIALS)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes a generation directory once the generation's processes are gone:
/// first its sandbox credential source (the one file with a private key),
/// then the editor directories a Runtime Supervisor made in the workspace
/// and could not take away itself (killed), from the record it keeps there,
/// then the directory (bundle, runsc state, record).
pub(super) fn remove_generation_dir(dir: &Path) -> std::io::Result<()> {
    remove_sandbox_credentials(dir)?;
    crate::git_sentry::remove_recorded_editor_dirs(&dir.join(crate::git_sentry::EDITOR_RECORD));
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
