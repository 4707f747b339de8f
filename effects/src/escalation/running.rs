//! The generation's running host processes, at most one per session, and
//! the lock every spawn passes (spec 3.8; Lazaret.tla `CloseSession`
//! "terminates and reaps the session's host process before anything
//! else"). A request's thread spawns only while its session is served, both
//! under the lock its session's close takes: a close either finds the
//! process registered and stops and reaps it, or the spawn finds the
//! session no longer served and nothing runs.
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lazaret_runtime::records::ids::SessionId;

use super::host_process::{ProcessStop, Starting};

/// See the module documentation. Cloned, it is the same registry.
#[derive(Debug, Clone, Default)]
pub struct RunningHostProcesses {
    running: Arc<Mutex<HashMap<SessionId, Arc<ProcessStop>>>>,
}

impl RunningHostProcesses {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<ProcessStop>>> {
        // A panic under the lock left every registered process as it was.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `spawn`s `session`'s host process if `served()` says the session is
    /// still served, and registers it, all under the lock; `None`: not
    /// served, nothing spawned. The start report is waited for after
    /// ([`Starting::started`]): a close meanwhile stops the process. The
    /// registration ends when the returned [`Registration`] is dropped,
    /// once the process is stopped and reaped (or on any way out).
    pub(crate) fn spawn(
        &self,
        session: SessionId,
        served: impl FnOnce() -> bool,
        spawn: impl FnOnce() -> io::Result<Starting>,
    ) -> Option<io::Result<(Starting, Registration<'_>)>> {
        let mut running = self.lock();
        if !served() {
            return None;
        }
        // The mailbox serves one request of a session at a time, and a
        // registration ends with its request: never reached, and refused
        // rather than spawned if it were.
        if running.contains_key(&session) {
            return Some(Err(io::Error::other(
                "a host process of this session is already running",
            )));
        }
        Some(spawn().map(|starting| {
            let stop = Arc::clone(starting.stop());
            running.insert(session, Arc::clone(&stop));
            let registration = Registration {
                running: self,
                session,
                stop,
            };
            (starting, registration)
        }))
    }

    /// `CloseSession`'s effect for the requests of `session`: `unpublish`
    /// (the session is no longer served) runs under the lock, so no spawn
    /// follows; then the host process running for it, if any, is stopped
    /// and reaped before this returns. An error: it may still run.
    pub fn close(&self, session: SessionId, unpublish: impl FnOnce()) -> io::Result<()> {
        let stop = {
            let mut running = self.lock();
            unpublish();
            running.remove(&session)
        };
        match stop {
            Some(stop) => {
                tracing::info!(%session, "the session closed: its host process is stopped");
                stop.kill_and_reap()
            }
            None => Ok(()),
        }
    }

    /// How many host processes are registered (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A host process's registration ([`RunningHostProcesses::spawn`]), ended
/// when dropped (unless its session's close ended it first).
#[derive(Debug)]
pub(crate) struct Registration<'r> {
    running: &'r RunningHostProcesses,
    session: SessionId,
    stop: Arc<ProcessStop>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        if running
            .get(&self.session)
            .is_some_and(|r| Arc::ptr_eq(r, &self.stop))
        {
            running.remove(&self.session);
        }
    }
}
