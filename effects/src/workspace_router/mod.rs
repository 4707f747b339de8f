//! Mounting the ignored-path router ([`filesystem::RouterFs`]) of a
//! workspace (spec 3.5, "Ignored Workspace State routing contract"; SR-13):
//! the classification snapshot is read from the host
//! ([`crate::workspace_routing::read_snapshot`]) and the router is mounted
//! on an empty directory, in the caller's mount namespace, which must be
//! private. A routed Domain's routing daemon mounts it in the Runtime
//! Supervisor's mount namespace before runsc starts, and the bundle binds
//! it at `/workspace` (`coordinator::git_routing`).

mod connection;
pub mod filesystem;
pub mod index_admission;
pub mod invalidation;

use crate::workspace_routing::{
    read_snapshot_and_inputs, InputState, RoutingInputError, SnapshotInputs,
};
use connection::{mount_device, KernelNotifier};
use filesystem::{KernelCache, PublishedSnapshot, RouterFs};
use index_admission::RoutedIndexAdmission;
use invalidation::{follow_host, HostWatches, MAX_WATCHES};
use lazaret_runtime::display::escape_path;
use lazaret_runtime::workspace_routing::ClassificationSnapshot;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Request threads serving the router.
const THREADS: usize = 2;
/// How often the watcher looks at the snapshot's inputs for a change the
/// host made (a change through the router makes it look at once).
pub const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// How far before a read an input's modification time may lie and the
/// change still have happened during the read: file systems stamp times
/// from a clock that ticks every few milliseconds.
const TIMESTAMP_SLACK: Duration = Duration::from_millis(50);

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
    /// The host directories could not be watched (inotify).
    #[error("watching {} for changes: {source} (inotify instances are limited per user: fs.inotify.max_user_instances)", escape_path(.path))]
    Watch {
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
    mounted: Mounted,
    watcher: Watcher,
    admission: Arc<RoutedIndexAdmission>,
}

/// The threads that publish a new snapshot when an input changes and
/// follow host changes ([`invalidation::follow_host`]).
#[derive(Debug)]
struct Watcher {
    stop: Arc<AtomicBool>,
    nudge: SyncSender<()>,
    /// The write end of the pipe the host-following thread polls besides
    /// its events: closing it wakes that thread at once.
    wake: Option<std::os::fd::OwnedFd>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.nudge.try_send(());
        drop(self.wake.take());
        // Bounded: two threads.
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::warn!("a watcher thread of the ignored-path router panicked");
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a new snapshot is published: the router's snapshot in force and
/// the kernel's caches of it, which drop every entry whose route changed.
struct Publication {
    published: Arc<PublishedSnapshot>,
    cache: KernelCache,
    notifier: KernelNotifier,
}

impl Publication {
    fn publish(&self, snapshot: ClassificationSnapshot) {
        let _span = tracing::info_span!("PublishRoutingSnapshot").entered();
        // Once every answer under the prior snapshot has been sent (the
        // publication waits for them) and is known: those whose route
        // changed are dropped. The kernel drops an entry only after a
        // lookup in flight in its directory has ended.
        self.published.publish(snapshot);
        let drops = self.cache.after_publication(&self.published.current());
        self.notifier.send(drops);
    }
}

/// Publishes a new snapshot of `workspace` whenever one of its inputs
/// changes, until `stop`. A snapshot
/// that cannot be read leaves the prior one in force (spec 3.5) and is
/// logged.
fn watch(
    workspace: PathBuf,
    mut inputs: SnapshotInputs,
    publication: Publication,
    nudged: Receiver<()>,
    stop: Arc<AtomicBool>,
) {
    let published = Arc::clone(&publication.published);
    let mut seen: Vec<InputState> = inputs.fingerprint();
    // A read failed and is tried once more even if nothing changes (the
    // failure may have been passing).
    let mut retried = false;
    // Bounded by `stop`: each turn waits at most WATCH_INTERVAL.
    while !stop.load(Ordering::SeqCst) {
        // A nudge (an ignore file changed through the router, perhaps one
        // not watched yet: in a new directory) reads again whatever the
        // fingerprint says.
        let asked = match nudged.recv_timeout(WATCH_INTERVAL) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let now = inputs.fingerprint();
        if now == seen && !asked {
            continue;
        }
        let started = SystemTime::now();
        match read_snapshot_and_inputs(&workspace) {
            // A repository does not stop being one mid-session: a `.git` that
            // no longer looks valid would make every ignored path the host's.
            // The prior snapshot stays in force (it fails closed).
            Ok((snapshot, _))
                if !snapshot.has_repository() && published.current().has_repository() =>
            {
                tracing::warn!("the workspace's repository no longer looks valid; the prior routing snapshot stays in force");
                seen = now;
            }
            Ok((snapshot, read_from)) => {
                publication.publish(snapshot);
                inputs = read_from;
                seen = inputs.fingerprint();
                retried = false;
                // An input may have changed while it was being read: read
                // again.
                if !settled_before(&seen, started) {
                    seen.clear();
                }
            }
            Err(e) if !retried => {
                tracing::info!(error = %e, "the routing snapshot could not be read again; trying once more");
                retried = true;
                seen.clear();
            }
            Err(e) => {
                tracing::warn!(error = %e, "the routing snapshot could not be read again; the prior one stays in force until an input changes");
                seen = now;
            }
        }
    }
}

/// Whether every input of `fingerprint` (taken after a read that started
/// at `started`) was last modified before the read, by more than the
/// file systems' timestamp granularity ([`TIMESTAMP_SLACK`]).
fn settled_before(fingerprint: &[InputState], started: SystemTime) -> bool {
    let bound = started
        .checked_sub(TIMESTAMP_SLACK)
        .unwrap_or(std::time::UNIX_EPOCH)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let bound_secs = i64::try_from(bound.as_secs()).unwrap_or(i64::MAX);
    let bound_nanos = i64::from(bound.subsec_nanos());
    fingerprint
        .iter()
        .flatten()
        .all(|&(.., secs, nanos)| secs < bound_secs || (secs == bound_secs && nanos < bound_nanos))
}

impl MountedRouter {
    /// Where the router is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mounted.mountpoint
    }

    /// Whether the FUSE session still serves the mount: `false` once its
    /// request loop ended (the mount was taken away or the kernel ended
    /// the connection), when every access fails with `ENOTCONN`.
    pub fn serving(&self) -> bool {
        self.mounted
            .session
            .as_ref()
            .is_some_and(|s| !s.guard.is_finished())
    }

    /// The judge of the workspace's next index, for the Git Sentry filter
    /// (spec 3.5, index publication).
    pub fn index_admission(&self) -> Arc<RoutedIndexAdmission> {
        Arc::clone(&self.admission)
    }

    /// Unmounts and waits for the request threads to end (dropping it
    /// unmounts too).
    pub fn unmount(mut self) -> io::Result<()> {
        self.watcher.stop();
        self.mounted.unmount()
    }
}

/// The mount and the session serving it.
#[derive(Debug)]
struct Mounted {
    /// None until the session runs.
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
    /// Whether the mount is still there.
    live: bool,
}

impl Mounted {
    /// Unmounts and waits for the session to end. A mount still in use
    /// (`EBUSY`) is detached: nothing stays mounted either way.
    fn unmount(&mut self) -> io::Result<()> {
        use rustix::mount::{unmount, UnmountFlags};
        if !self.live {
            return Ok(());
        }
        self.live = false;
        match unmount(&self.mountpoint, UnmountFlags::empty()) {
            // Not a mount point any more: it was taken away (the session
            // ended with it), nothing is left to unmount.
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => {
                let _ = unmount(&self.mountpoint, UnmountFlags::DETACH);
                return Err(e.into());
            }
        }
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match session.join() {
            // Requests still queued when the unmount lands make the kernel
            // end the connection as aborted: unmounted all the same.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::CONNABORTED.raw_os_error()) => {
                Ok(())
            }
            other => other,
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.live {
            // The session thread ends with the connection.
            let _ = rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH);
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
    let (snapshot, inputs) =
        read_snapshot_and_inputs(workspace).map_err(|source| RouterError::Classify {
            path: workspace.to_owned(),
            source,
        })?;
    // Every open handle is a descriptor (runsc keeps a read and a write
    // handle open on each file it retains).
    crate::fuse_passthrough::raise_nofile();
    let published = Arc::new(PublishedSnapshot::new(snapshot));
    let (nudge, nudged) = sync_channel(1);
    let host = open_dir(workspace)?;
    let isolated = open_dir(isolated)?;
    let dup_err = |source| RouterError::Open {
        path: workspace.to_owned(),
        source,
    };
    let admission = Arc::new(RoutedIndexAdmission {
        published: Arc::clone(&published),
        host_root: rustix::io::fcntl_dupfd_cloexec(&host, 0).map_err(dup_err)?,
        isolated_root: rustix::io::fcntl_dupfd_cloexec(&isolated, 0).map_err(dup_err)?,
    });
    let mut config = fuser::Config::default();
    config.n_threads = Some(THREADS);
    config.clone_fd = true;
    let mount_err = |source| RouterError::Mount {
        path: mountpoint.to_owned(),
        source,
    };
    let watch_err = |source| RouterError::Watch {
        path: workspace.to_owned(),
        source,
    };
    let watches = HostWatches::new(MAX_WATCHES).map_err(watch_err)?;
    let events = watches.events().map_err(watch_err)?;
    let fs = RouterFs::new(
        host,
        isolated,
        Arc::clone(&published),
        nudge.clone(),
        watches,
    )
    .map_err(|source| RouterError::Open {
        path: workspace.to_owned(),
        source,
    })?;
    let cache = fs.kernel_cache();
    let device = mount_device(mountpoint).map_err(|e| mount_err(e.into()))?;
    // From here on, dropping `mounted` unmounts.
    let mut mounted = Mounted {
        session: None,
        mountpoint: mountpoint.to_owned(),
        live: true,
    };
    let notifier = KernelNotifier::new(
        rustix::io::fcntl_dupfd_cloexec(&device, 0).map_err(|e| mount_err(e.into()))?,
    );
    let session = fuser::Session::from_fd(fs, device, config.acl, config).map_err(mount_err)?;
    mounted.session = Some(session.spawn().map_err(mount_err)?);
    let stop = Arc::new(AtomicBool::new(false));
    let (woken, wake) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| mount_err(e.into()))?;
    // From here on, dropping `watcher` stops the threads started so far.
    let mut watcher = Watcher {
        stop: Arc::clone(&stop),
        nudge,
        wake: Some(wake),
        threads: Vec::with_capacity(2),
    };
    let publication = Publication {
        published,
        cache: cache.clone(),
        notifier: notifier.clone(),
    };
    let (workspace_path, watch_stop) = (workspace.to_owned(), Arc::clone(&stop));
    watcher.threads.push(
        std::thread::Builder::new()
            .name("routing-watch".to_owned())
            .spawn(move || watch(workspace_path, inputs, publication, nudged, watch_stop))
            .map_err(mount_err)?,
    );
    watcher.threads.push(
        std::thread::Builder::new()
            .name("routing-follow".to_owned())
            .spawn(move || follow_host(events, woken, cache, notifier, stop))
            .map_err(mount_err)?,
    );
    Ok(MountedRouter {
        mounted,
        watcher,
        admission,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modified_at(t: SystemTime) -> InputState {
        let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Some((
            1,
            2,
            3,
            i64::try_from(d.as_secs()).unwrap_or(0),
            i64::from(d.subsec_nanos()),
        ))
    }

    /// An input stamped a few milliseconds before the read started may have
    /// changed during it (coarse timestamps): not settled; one stamped well
    /// before is; an absent input has nothing to change.
    #[test]
    fn a_change_stamped_just_before_the_read_is_read_again() {
        let started = SystemTime::now();
        let just_before = started - Duration::from_millis(5);
        let well_before = started - Duration::from_secs(2);
        assert!(!settled_before(&[modified_at(just_before)], started));
        assert!(!settled_before(
            &[modified_at(started + Duration::from_millis(1))],
            started
        ));
        assert!(!settled_before(
            &[modified_at(well_before), modified_at(just_before)],
            started
        ));
        assert!(settled_before(&[modified_at(well_before), None], started));
        assert!(settled_before(&[], started));
    }
}
