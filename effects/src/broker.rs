//! The causal child acquisition broker (spec 3.3, the nine steps; spec 3.4
//! terminal acquisition step 2). One broker per process owns every spawn and
//! reap of Lazaret-owned children; acquisition takes `&mut self` and holds
//! the process-wide spawn exclusion ([`exclusion`]) while it spawns, and
//! children are reaped only through their retained pidfds.
pub mod exclusion;
pub mod ledger;
mod posix_spawn;
pub mod remote;
pub mod sys;
pub mod transient;
pub mod wrapper;

use crate::process_identity::{
    identity_of, pidfs_authority, ChildState, IdentityError, ProcessHandle, Signal,
};
use lazaret_runtime::records::process::{
    HostPid, PidfsProcessAuthorityV1, ProcessOwnershipMessageVersion, StagedProcessOwnership,
};
use ledger::{AcquisitionLedger, LedgerError};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use sys::{SpawnSys, TargetCommand, WrapperSpawn};

static CLAIMED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("this process already has its child acquisition broker")]
    AlreadyClaimed,
    #[error("SIGCHLD is ignored in this process, so the kernel would auto-reap children; the broker requires the default disposition")]
    SigchldIgnored,
    #[error("cannot read this process's SIGCHLD disposition: {0}")]
    SigchldUnreadable(io::Error),
    #[error("this host's glibc is {found}; Lazaret needs 2.29 or later, whose posix_spawn keeps a descriptor open for the child (adddup2(fd, fd)) without exposing it to other spawns")]
    GlibcTooOld { found: String },
    #[error("cannot establish this process's own pidfs authority: {0}")]
    OwnIdentity(#[source] AuthorityError),
    #[error("step 1 (durable intent) refused: {0}")]
    Intent(LedgerError),
    #[error("step 2 (launch barrier pipe) failed: {0}")]
    BarrierPipe(io::Error),
    #[error("step 3 (spawn the wrapper {program}) failed: {source}")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("step 4 (pidfd_open of wrapper PID {pid}) failed: {source}")]
    PidfdOpen { pid: u32, source: io::Error },
    #[error("step 4 (waitid WNOWAIT on wrapper PID {pid}) failed: {source}")]
    Waitid { pid: u32, source: io::Error },
    #[error(
        "step 4: the wrapper PID {pid} already exited ({state:?}) before its identity was taken"
    )]
    ChildExited { pid: u32, state: ChildState },
    #[error("step 5 (pidfs identity) refused: {0}")]
    Identity(#[from] IdentityError),
    #[error("step 6 (staged ownership) refused; the barrier was closed: {0}")]
    Staged(LedgerError),
    #[error("step 6: the ledger confirmed {confirmed:?}, not the staged tuple {staged:?}")]
    StagedMismatch {
        staged: Box<StagedProcessOwnership>,
        confirmed: Box<StagedProcessOwnership>,
    },
    #[error("step 7 (release the barrier) failed: {0}")]
    Release(io::Error),
    #[error("step 9: target readiness failed: {0}")]
    Readiness(#[source] ReadinessError),
    #[error("step 9 (committed ownership) refused: {0}")]
    Committed(LedgerError),
}

/// Why a process's own pidfs authority could not be established.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("boot id: {0}")]
    BootId(#[source] io::Error),
    #[error("pidfd_open({pid}): {source}")]
    PidfdOpen { pid: u32, source: io::Error },
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// Why a target failed its readiness check before its commit (spec 3.3
/// step 9). `what` names the target (`runsc run`, `slirp4netns`).
#[derive(Debug, thiserror::Error)]
pub enum ReadinessError {
    /// The target ended before it was ready.
    #[error("{what} ended before it was ready: {state:?}")]
    Ended {
        what: &'static str,
        state: ChildState,
    },
    /// Whether the target still runs could not be read.
    #[error("{what}: its state cannot be read: {source}")]
    Unreadable {
        what: &'static str,
        source: io::Error,
    },
    #[error("{what} was not ready within {within:?}")]
    Timeout {
        what: &'static str,
        within: std::time::Duration,
    },
    /// The target closed its readiness report without reporting.
    #[error("{what} closed its readiness pipe without reporting")]
    Silent { what: &'static str },
    #[error("{what}: {step}: {source}")]
    Io {
        what: &'static str,
        step: &'static str,
        source: io::Error,
    },
}

impl ReadinessError {
    /// `Ok` while the peeked target runs; why it does not otherwise.
    pub fn running(what: &'static str, peeked: io::Result<ChildState>) -> Result<(), Self> {
        match peeked {
            Ok(ChildState::Running) => Ok(()),
            Ok(state) => Err(Self::Ended { what, state }),
            Err(source) => Err(Self::Unreadable { what, source }),
        }
    }
}

/// A long-lived child's two pipes: the one it reports readiness on (one
/// byte; EOF if it dies first) and the one whose closing makes it exit.
#[derive(Debug)]
pub struct ChildPipes {
    pub ready_read: std::os::fd::OwnedFd,
    pub ready_write: std::os::fd::OwnedFd,
    pub exit_read: std::os::fd::OwnedFd,
    /// Held by the parent for the child's whole life: when it closes (at
    /// stop, or because the parent died) the child exits.
    pub exit_write: std::os::fd::OwnedFd,
}

impl ChildPipes {
    pub fn new() -> io::Result<Self> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let (ready_read, ready_write) = pipe_with(PipeFlags::CLOEXEC)?;
        let (exit_read, exit_write) = pipe_with(PipeFlags::CLOEXEC)?;
        Ok(Self {
            ready_read,
            ready_write,
            exit_read,
            exit_write,
        })
    }
}

/// Waits for the one readiness byte target `what` writes to `ready`, for
/// at most `within`; `running` says whether it still runs (`Err` once it
/// ended). EOF without the byte is [`ReadinessError::Silent`].
pub fn await_ready_byte(
    what: &'static str,
    ready: &std::os::fd::OwnedFd,
    within: std::time::Duration,
    running: impl Fn() -> Result<(), ReadinessError>,
) -> Result<(), ReadinessError> {
    use std::io::Read as _;
    let io =
        |step: &'static str| move |source: io::Error| ReadinessError::Io { what, step, source };
    let deadline = std::time::Instant::now() + within;
    // Bounded: one poll per 50 ms until the deadline.
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(ReadinessError::Timeout { what, within });
        }
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        let mut fds = [rustix::event::PollFd::new(
            ready,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => {
                let mut byte = [0u8; 1];
                let mut file = std::fs::File::from(
                    ready
                        .try_clone()
                        .map_err(io("duplicating its readiness pipe"))?,
                );
                return match file.read(&mut byte) {
                    Ok(1) => Ok(()),
                    Ok(_) => Err(ReadinessError::Silent { what }),
                    Err(e) => Err(io("reading its readiness pipe")(e)),
                };
            }
            Err(e) => return Err(io("polling its readiness pipe")(e.into())),
        }
        running()?;
    }
}

/// A child whose exact staged ownership is durable and whose barrier was
/// released. Staged ownership authorizes exact cleanup only.
#[derive(Debug)]
pub struct StagedChild {
    handle: ProcessHandle,
    staged: StagedProcessOwnership,
}

impl StagedChild {
    pub fn handle(&self) -> &ProcessHandle {
        &self.handle
    }

    pub fn staged(&self) -> &StagedProcessOwnership {
        &self.staged
    }
}

/// A child whose ownership is committed after target readiness.
#[derive(Debug)]
pub struct CommittedChild {
    handle: ProcessHandle,
    staged: StagedProcessOwnership,
}

impl CommittedChild {
    pub fn handle(&self) -> &ProcessHandle {
        &self.handle
    }

    pub fn ownership(&self) -> &StagedProcessOwnership {
        &self.staged
    }
}

/// Step 9 failed; the still-staged child comes back for exact cleanup.
#[derive(Debug)]
pub struct CommitFailure {
    pub error: BrokerError,
    pub child: StagedChild,
}

/// The per-process broker.
#[derive(Debug)]
pub struct Broker<S: SpawnSys> {
    sys: S,
    program: PathBuf,
    own: PidfsProcessAuthorityV1,
    last_refused: Option<ChildState>,
}

impl<S: SpawnSys> Drop for Broker<S> {
    fn drop(&mut self) {
        CLAIMED.store(false, Ordering::SeqCst);
    }
}

impl<S: SpawnSys> Broker<S> {
    /// Claims this process's single broker. `program` is the `lazaret` binary
    /// whose hidden wrapper subcommand every child is spawned through.
    pub fn claim(sys: S, program: PathBuf) -> Result<Self, BrokerError> {
        if CLAIMED.swap(true, Ordering::SeqCst) {
            return Err(BrokerError::AlreadyClaimed);
        }
        let release = |e| {
            CLAIMED.store(false, Ordering::SeqCst);
            e
        };
        match sys.sigchld_ignored() {
            Ok(false) => {}
            Ok(true) => return Err(release(BrokerError::SigchldIgnored)),
            Err(e) => return Err(release(BrokerError::SigchldUnreadable(e))),
        }
        if let Err(found) = posix_spawn::keeps_descriptors() {
            return Err(release(BrokerError::GlibcTooOld { found }));
        }
        let own = (|| {
            let boot = sys.boot_id().map_err(AuthorityError::BootId)?;
            let pid = sys.own_pid();
            let pidfd = sys
                .pidfd_open(pid)
                .map_err(|source| AuthorityError::PidfdOpen { pid: pid.0, source })?;
            Ok(pidfs_authority(&sys, &pidfd, boot)?)
        })()
        .map_err(|e| release(BrokerError::OwnIdentity(e)))?;
        Ok(Self {
            sys,
            program,
            own,
            last_refused: None,
        })
    }

    pub fn sys(&self) -> &S {
        &self.sys
    }

    /// This process's pidfs authority (what its wrappers recheck).
    pub fn own_authority(&self) -> PidfsProcessAuthorityV1 {
        self.own
    }

    /// Steps 1-7: returns once the child's exact staged ownership is durable
    /// and its barrier released. On any refusal the barrier is closed (the
    /// wrapper exits without exec) and the wrapper is reaped.
    pub fn acquire<L: AcquisitionLedger>(
        &mut self,
        target: &TargetCommand,
        ledger: &mut L,
    ) -> Result<StagedChild, BrokerError> {
        let context = ledger.context();
        let _span = tracing::info_span!("CausalAcquire", slot = ?context.slot, generation = context.generation_id.0).entered();
        ledger.persist_intent().map_err(BrokerError::Intent)?;
        let exclusion = exclusion::spawn_exclusion();
        let (read, write) = self.sys.barrier_pipe().map_err(BrokerError::BarrierPipe)?;
        let pid = self
            .sys
            .spawn_wrapper(&WrapperSpawn {
                program: &self.program,
                barrier: &read,
                parent: self.own,
                target,
            })
            .map_err(|source| BrokerError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        // Only the wrapper holds the read end now.
        drop(read);
        drop(exclusion);
        let pidfd = match self.sys.pidfd_open(pid) {
            Ok(pidfd) => pidfd,
            Err(source) => {
                drop(write);
                if let Err(e) = self.sys.reap_unopened(pid) {
                    tracing::warn!(pid = pid.0, error = %e, "cannot reap the refused wrapper");
                }
                return Err(BrokerError::PidfdOpen { pid: pid.0, source });
            }
        };
        let staged = (|| {
            match self
                .sys
                .waitid(&pidfd, crate::process_identity::WaitMode::Peek)
            {
                Ok(ChildState::Running) => {}
                Ok(state) => return Err(BrokerError::ChildExited { pid: pid.0, state }),
                Err(source) => return Err(BrokerError::Waitid { pid: pid.0, source }),
            }
            let identity = identity_of(&self.sys, &pidfd)?;
            let staged = StagedProcessOwnership {
                version: ProcessOwnershipMessageVersion::V1,
                domain_id: context.domain_id,
                generation_id: context.generation_id,
                coordinator_id: context.coordinator_id,
                slot: context.slot,
                identity,
            };
            let confirmed = ledger
                .persist_staged(&staged)
                .map_err(BrokerError::Staged)?;
            if *confirmed.staged() != staged {
                return Err(BrokerError::StagedMismatch {
                    staged: Box::new(staged),
                    confirmed: Box::new(*confirmed.staged()),
                });
            }
            Ok(staged)
        })();
        let staged = match staged {
            Ok(staged) => staged,
            Err(e) => {
                drop(write);
                self.reap_refused(pid, &pidfd);
                return Err(e);
            }
        };
        let message = wrapper::release_message(&staged.identity.authority);
        if let Err(e) = self.sys.write_release(write, &message) {
            self.reap_refused(pid, &pidfd);
            return Err(BrokerError::Release(e));
        }
        Ok(StagedChild {
            handle: ProcessHandle::new(pidfd, staged.identity),
            staged,
        })
    }

    fn reap_refused(&mut self, pid: HostPid, pidfd: &crate::process_identity::Pidfd) {
        // The barrier is closed, so the wrapper exits without exec.
        match self
            .sys
            .waitid(pidfd, crate::process_identity::WaitMode::Block)
        {
            Ok(state) => {
                tracing::info!(pid = pid.0, ?state, "refused wrapper reaped");
                self.last_refused = Some(state);
            }
            Err(e) => tracing::warn!(pid = pid.0, error = %e, "cannot reap the refused wrapper"),
        }
    }

    /// How the last refused wrapper ended (diagnostics: 121 is barrier EOF).
    pub fn last_refused_wrapper(&self) -> Option<ChildState> {
        self.last_refused
    }

    /// Step 9: after the caller's target-specific readiness check, promotes
    /// the exact staged identity to committed.
    pub fn commit<L, R>(
        &mut self,
        child: StagedChild,
        ledger: &mut L,
        readiness: R,
    ) -> Result<CommittedChild, Box<CommitFailure>>
    where
        L: AcquisitionLedger,
        R: FnOnce(&S, &ProcessHandle) -> Result<(), ReadinessError>,
    {
        let _span = tracing::info_span!("CommitOwnership", slot = ?child.staged.slot).entered();
        if let Err(e) = readiness(&self.sys, &child.handle) {
            return Err(Box::new(CommitFailure {
                error: BrokerError::Readiness(e),
                child,
            }));
        }
        if let Err(e) = ledger.persist_committed(&child.staged) {
            return Err(Box::new(CommitFailure {
                error: BrokerError::Committed(e),
                child,
            }));
        }
        Ok(CommittedChild {
            handle: child.handle,
            staged: child.staged,
        })
    }

    /// Signals through the retained pidfd only.
    pub fn signal(&self, handle: &ProcessHandle, signal: Signal) -> io::Result<()> {
        handle.signal(&self.sys, signal)
    }

    /// Blocks until the child exits and reaps it through its pidfd.
    pub fn wait(&self, handle: &ProcessHandle) -> io::Result<ChildState> {
        handle.wait(&self.sys)
    }

    /// Reaps the child if it has exited.
    pub fn poll(&self, handle: &ProcessHandle) -> io::Result<ChildState> {
        handle.poll(&self.sys)
    }
}
