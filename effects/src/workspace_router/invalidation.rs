//! Keeping the kernel's caches of the router true while they hold entries
//! and attributes for a long time (spec 3.5: the workspace is shared with
//! the host in real time, and "a subsequent lookup or open uses the current
//! snapshot").
//!
//! The router lets the kernel cache an entry and its attributes
//! ([`filesystem::CACHE_TTL`](super::filesystem::CACHE_TTL)) only where it
//! hears of every change:
//! - an object in Ignored Workspace State changes only through the router,
//!   and the kernel sees each change it makes;
//! - a host directory is watched ([`HostWatches`], inotify) and each change
//!   to it or an entry in it makes the router drop what the kernel holds
//!   ([`follow_host`]); an object below a directory that could not be
//!   watched (beyond [`MAX_WATCHES`], or the user's inotify limit) and a
//!   file with more than one link (its other names are not watched) are
//!   served with zero timeouts, as before;
//! - after a new classification snapshot is published, every entry the
//!   kernel knows whose route changed is dropped (`KernelCache::
//!   after_publication`).
//!
//! An entry is dropped by making it expire
//! ([`KernelNotifier`](super::connection::KernelNotifier)): the kernel
//! looks it up again on its next use and keeps it if it is the same object.
//!
//! A change is seen after it happened: between a host change and its drop
//! (a few milliseconds) the sandbox may see the prior state, and a
//! replaced object answers `ESTALE`, on which the kernel looks its path up
//! again.

use super::connection::KernelNotifier;
use super::filesystem::KernelCache;
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use std::collections::HashMap;
use std::ffi::OsString;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most host directories one router watches; a directory beyond is
/// served without caching.
pub const MAX_WATCHES: usize = 65_536;
/// The most host events handled in one turn (the rest wait for the next).
const MAX_EVENTS_PER_TURN: usize = 4096;
/// How long [`follow_host`] waits for an event before it looks at `stop`.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What changes of a watched directory are followed: every change to an
/// entry's name, content or attributes, and the directory's own.
fn watch_mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// The host directories the router watches, by the backing's (device,
/// inode).
#[derive(Debug)]
pub struct HostWatches {
    inotify: OwnedFd,
    by_wd: HashMap<i32, (u64, u64)>,
    by_dir: HashMap<(u64, u64), i32>,
    budget: usize,
}

impl HostWatches {
    /// A new inotify instance watching at most `budget` directories.
    pub fn new(budget: usize) -> rustix::io::Result<Self> {
        let inotify =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        Ok(Self {
            inotify,
            by_wd: HashMap::new(),
            by_dir: HashMap::new(),
            budget,
        })
    }

    /// A second descriptor of the instance, to read its events from.
    pub fn events(&self) -> rustix::io::Result<OwnedFd> {
        rustix::io::dup(&self.inotify)
    }

    /// Watches the host directory behind `dir`, whose identity is `id`;
    /// whether it is watched (false past the budget or the user's limit).
    pub(crate) fn watch(&mut self, dir: &OwnedFd, id: (u64, u64)) -> bool {
        if self.by_dir.contains_key(&id) {
            return true;
        }
        if self.by_dir.len() >= self.budget {
            return false;
        }
        match inotify::add_watch(
            &self.inotify,
            crate::fuse_passthrough::proc_path(dir),
            watch_mask(),
        ) {
            Ok(wd) => {
                self.by_wd.insert(wd, id);
                self.by_dir.insert(id, wd);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "a host directory could not be watched; it is served without caching");
                false
            }
        }
    }

    /// Stops watching directory `id` (the kernel forgot it).
    pub(crate) fn unwatch(&mut self, id: (u64, u64)) {
        if let Some(wd) = self.by_dir.remove(&id) {
            self.by_wd.remove(&wd);
            // The directory may be gone already (the watch with it).
            let _ = inotify::remove_watch(&self.inotify, wd);
        }
    }

    /// The directory of watch `wd`.
    pub(crate) fn dir_of(&self, wd: i32) -> Option<(u64, u64)> {
        self.by_wd.get(&wd).copied()
    }

    /// Watch `wd` ended (its directory was removed): forgets it.
    pub(crate) fn ended(&mut self, wd: i32) -> Option<(u64, u64)> {
        let id = self.by_wd.remove(&wd)?;
        self.by_dir.remove(&id);
        Some(id)
    }
}

/// One host change: the watch, what happened and the entry's name (none
/// for the directory itself).
#[derive(Debug)]
pub(crate) struct HostEvent {
    pub(crate) wd: i32,
    pub(crate) what: ReadFlags,
    pub(crate) name: Option<OsString>,
}

/// What the kernel must drop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Invalidation {
    /// The entry `name` of directory node `parent`.
    Entry { parent: u64, name: OsString },
    /// Node `ino`'s attributes and cached content.
    Inode(u64),
    /// Node `ino`'s attributes only.
    Attributes(u64),
}

/// Reads host changes from `events` (the watches' instance) and drops
/// what the kernel caches of them, until `stop` — seen at once when the
/// write end of `woken` closes, within [`POLL_INTERVAL`] otherwise. Each
/// turn handles at most [`MAX_EVENTS_PER_TURN`] events; a lost event queue
/// (overflow) drops everything the kernel holds of the host.
pub(crate) fn follow_host(
    events: OwnedFd,
    woken: OwnedFd,
    cache: KernelCache,
    notifier: KernelNotifier,
    stop: Arc<AtomicBool>,
) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
    let timeout = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(POLL_INTERVAL.subsec_nanos()),
    };
    // Bounded by `stop`: each turn waits at most POLL_INTERVAL.
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [
            rustix::event::PollFd::new(&events, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(&woken, rustix::event::PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            // Woken: the router is being unmounted.
            Ok(_) if !fds[1].revents().is_empty() => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the router stopped following host changes; the kernel's caches are dropped");
                notifier.send(cache.everything_of_the_host());
                cache.stop_caching();
                return;
            }
        }
        let mut batch = Vec::new();
        let mut overflow = false;
        let mut reader = inotify::Reader::new(&events, &mut buf);
        // Bounded: a turn ends with the read buffer once it holds
        // MAX_EVENTS_PER_TURN (events already read are never left behind).
        while batch.len() < MAX_EVENTS_PER_TURN || !reader.is_buffer_empty() {
            match reader.next() {
                Ok(e) => {
                    if e.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                        overflow = true;
                        continue;
                    }
                    batch.push(HostEvent {
                        wd: e.wd(),
                        what: e.events(),
                        name: e
                            .file_name()
                            .map(|n| std::ffi::OsStr::from_bytes(n.to_bytes()).to_owned())
                            .filter(|n| !n.is_empty()),
                    });
                }
                Err(_) => break,
            }
        }
        let drops = if overflow {
            tracing::info!(
                "host change events were lost; the kernel's caches of the host are dropped"
            );
            cache.everything_of_the_host()
        } else {
            cache.after_host_events(&batch)
        };
        notifier.send(drops);
    }
}
