//! Mounting the ignored-path router ([`filesystem::RouterFs`]) of a
//! workspace (spec 3.5, "Ignored Workspace State routing contract"; SR-13):
//! the classification snapshot is read from the host
//! ([`crate::workspace_routing::read_snapshot`]) and the router is mounted
//! on an empty directory, in the caller's mount namespace, which must be
//! private.
//!
//! Not yet part of a launch: the sandbox still sees the workspace through a
//! plain bind (docs/ignored-workspace.md, "What is built").

pub mod filesystem;

use crate::workspace_routing::{read_snapshot, RoutingInputError};
use filesystem::RouterFs;
use lazaret_runtime::display::escape_path;
use std::io;
use std::path::{Path, PathBuf};

/// Request threads serving the router.
const THREADS: usize = 2;

/// Errors of mounting the router; one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The classification inputs could not be read.
    #[error("classifying {}: {source}", escape_path(.path))]
    Classify {
        path: PathBuf,
        source: RoutingInputError,
    },
    /// A backing directory could not be opened.
    #[error("opening {} for the ignored-path router: {source}", escape_path(.path))]
    Open {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    /// The FUSE mount failed.
    #[error("mounting the ignored-path router on {}: {source} (is /dev/fuse mode 0666? `lazaret doctor` checks)", escape_path(.path))]
    Mount { path: PathBuf, source: io::Error },
}

/// A mounted router; [`MountedRouter::unmount`] (or dropping it) unmounts.
#[derive(Debug)]
pub struct MountedRouter {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl MountedRouter {
    /// Where the router is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the request threads to end (dropping it
    /// unmounts too).
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            // Requests still queued when the unmount lands make the kernel
            // end the connection as aborted: unmounted all the same.
            Some(s) => match s.umount_and_join() {
                Err(e)
                    if e.raw_os_error() == Some(rustix::io::Errno::CONNABORTED.raw_os_error()) =>
                {
                    Ok(())
                }
                other => other,
            },
            None => Ok(()),
        }
    }
}

fn open_dir(path: &Path) -> Result<std::os::fd::OwnedFd, RouterError> {
    rustix::fs::openat(
        rustix::fs::CWD,
        path,
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|source| RouterError::Open {
        path: path.to_owned(),
        source,
    })
}

/// Mounts the router of the canonical `workspace`, with the Domain's
/// Ignored Workspace State in the existing directory `isolated`, on the
/// empty directory `mountpoint`.
pub fn mount(
    workspace: &Path,
    isolated: &Path,
    mountpoint: &Path,
) -> Result<MountedRouter, RouterError> {
    let _span =
        tracing::info_span!("MountIgnoredPathRouter", path = %workspace.display()).entered();
    let snapshot = read_snapshot(workspace).map_err(|source| RouterError::Classify {
        path: workspace.to_owned(),
        source,
    })?;
    let host = open_dir(workspace)?;
    let isolated = open_dir(isolated)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("lazaret-router".to_owned()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    config.n_threads = Some(THREADS);
    config.clone_fd = true;
    let mount_err = |source| RouterError::Mount {
        path: mountpoint.to_owned(),
        source,
    };
    let session = fuser::Session::new(RouterFs::new(host, isolated, snapshot), mountpoint, &config)
        .map_err(mount_err)?;
    let session = session.spawn().map_err(mount_err)?;
    Ok(MountedRouter {
        session: Some(session),
        mountpoint: mountpoint.to_owned(),
    })
}
