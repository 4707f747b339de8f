//! The CLI's local terminal: a raw-mode guard that always restores (DX-5:
//! "shall not leave the developer's terminal in a corrupted mode"; spec 3.4
//! host CLI suspension).
//!
//! Restoration happens on every exit path:
//! - normal return and errors: [`RawModeGuard`]'s `Drop`;
//! - `SIGTERM`, `SIGHUP`, `SIGINT`: a signal thread restores, then dies by the
//!   same signal with its default action (so the exit status stays honest);
//! - panic: a chained panic hook restores before the panic message prints.
//!
//! Local suspension (`SIGTSTP` from outside: Ctrl-Z in raw mode is a
//! Suspend *event* for the guest, not a local signal): restore, stop this
//! process, and after `SIGCONT` re-enter raw mode and report that the window
//! size must be re-sent. No guest signal is synthesized.
//!
//! All terminal calls go through [`TermSys`]; tests pass
//! [`fake::RecordingTerm`].
pub mod fake;

use rustix::termios::{LocalModes, Termios, Winsize};
use signal_hook::consts::{SIGCONT, SIGHUP, SIGINT, SIGTERM, SIGTSTP, SIGWINCH};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

/// Terminal and self-control calls.
pub trait TermSys: Send + Sync + 'static {
    fn get_attrs(&self, fd: BorrowedFd<'_>) -> io::Result<Termios>;
    fn set_attrs(&self, fd: BorrowedFd<'_>, attrs: &Termios) -> io::Result<()>;
    fn window_size(&self, fd: BorrowedFd<'_>) -> io::Result<Winsize>;
    /// Stops this process (`SIGSTOP` through a pidfd of itself) until
    /// `SIGCONT`.
    fn stop_self(&self) -> io::Result<()>;
    /// Ends this process by `signal` with its default action.
    fn die_by(&self, signal: i32);
}

/// The real calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealTerm;

impl TermSys for RealTerm {
    fn get_attrs(&self, fd: BorrowedFd<'_>) -> io::Result<Termios> {
        Ok(rustix::termios::tcgetattr(fd)?)
    }

    fn set_attrs(&self, fd: BorrowedFd<'_>, attrs: &Termios) -> io::Result<()> {
        Ok(rustix::termios::tcsetattr(
            fd,
            rustix::termios::OptionalActions::Now,
            attrs,
        )?)
    }

    fn window_size(&self, fd: BorrowedFd<'_>) -> io::Result<Winsize> {
        Ok(rustix::termios::tcgetwinsize(fd)?)
    }

    fn stop_self(&self) -> io::Result<()> {
        let me = rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )?;
        Ok(rustix::process::pidfd_send_signal(
            &me,
            rustix::process::Signal::STOP,
        )?)
    }

    fn die_by(&self, signal: i32) {
        // Resets the disposition to SIG_DFL and re-raises; for the
        // terminating signals used here this does not return.
        if signal_hook::low_level::emulate_default_handler(signal).is_err() {
            std::process::abort();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TerminalModeError {
    #[error("the local terminal is not a terminal (tcgetattr failed): {0}")]
    NotATerminal(#[source] io::Error),
    #[error("cannot duplicate the local terminal descriptor: {0}")]
    Dup(#[source] io::Error),
    #[error("cannot switch the local terminal to raw mode: {0}")]
    EnterRaw(#[source] io::Error),
    #[error("cannot restore the local terminal: {0}")]
    Restore(#[source] io::Error),
    #[error("cannot read the local window size: {0}")]
    WindowSize(#[source] io::Error),
    #[error("cannot install the terminal-restoring signal handlers: {0}")]
    Signals(#[source] io::Error),
    #[error("cannot stop the CLI for local suspension: {0}")]
    Stop(#[source] io::Error),
}

/// What the local terminal reports to the session loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalEvent {
    /// Re-read [`RawModeGuard::window_size`] and send a Resize event (after
    /// `SIGWINCH` or after resuming from a local suspension).
    WindowChanged,
}

/// Shared by the guard, the signal thread and the panic hook; restoring is
/// idempotent.
struct Restorer {
    sys: Arc<dyn TermSys>,
    fd: OwnedFd,
    saved: Termios,
    mode: Mutex<Mode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Raw,
    Restored,
    /// Restored for a local stop; `SIGCONT` re-enters raw mode.
    Suspended,
}

impl std::fmt::Debug for Restorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Restorer").field("fd", &self.fd).finish()
    }
}

impl Restorer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Mode> {
        self.mode.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_raw(&self, mode: &mut Mode) -> Result<(), TerminalModeError> {
        let mut attrs = self.saved.clone();
        attrs.make_raw();
        self.sys
            .set_attrs(self.fd.as_fd(), &attrs)
            .map_err(TerminalModeError::EnterRaw)?;
        *mode = Mode::Raw;
        Ok(())
    }

    fn restore_to(&self, mode: &mut Mode, next: Mode) -> Result<(), TerminalModeError> {
        if *mode == Mode::Raw {
            self.sys
                .set_attrs(self.fd.as_fd(), &self.saved)
                .map_err(TerminalModeError::Restore)?;
        }
        *mode = next;
        Ok(())
    }

    fn restore(&self) -> Result<(), TerminalModeError> {
        self.restore_to(&mut self.lock(), Mode::Restored)
    }

    /// Restore and stop; raw mode comes back with [`Restorer::resumed`].
    fn suspend(&self) -> Result<(), TerminalModeError> {
        {
            let mut mode = self.lock();
            if *mode != Mode::Raw {
                return Ok(());
            }
            self.restore_to(&mut mode, Mode::Suspended)?;
        }
        self.sys.stop_self().map_err(TerminalModeError::Stop)
    }

    /// After `SIGCONT`: raw again if this guard suspended itself.
    fn resumed(&self) -> Result<(), TerminalModeError> {
        let mut mode = self.lock();
        if *mode == Mode::Suspended {
            self.set_raw(&mut mode)?;
        }
        Ok(())
    }

    fn is_raw(&self) -> bool {
        *self.lock() == Mode::Raw
    }
}

/// Raw mode on the local terminal for as long as this guard lives.
#[derive(Debug)]
pub struct RawModeGuard {
    restorer: Arc<Restorer>,
    watcher: Option<(signal_hook::iterator::Handle, JoinHandle<()>)>,
}

/// Whether `attrs` are canonical (cooked) mode.
pub fn is_cooked(attrs: &Termios) -> bool {
    attrs.local_modes.contains(LocalModes::ICANON)
}

impl RawModeGuard {
    /// Saves the current mode of `terminal` and switches it to raw mode.
    /// Installs the panic hook. Signal handling is separate
    /// ([`RawModeGuard::watch_signals`]) so tests can drive it.
    pub fn enter(
        sys: Arc<dyn TermSys>,
        terminal: BorrowedFd<'_>,
    ) -> Result<Self, TerminalModeError> {
        let saved = sys
            .get_attrs(terminal)
            .map_err(TerminalModeError::NotATerminal)?;
        let fd = rustix::io::fcntl_dupfd_cloexec(terminal, 0)
            .map_err(|e| TerminalModeError::Dup(e.into()))?;
        let restorer = Arc::new(Restorer {
            sys,
            fd,
            saved,
            mode: Mutex::new(Mode::Restored),
        });
        restorer.set_raw(&mut restorer.lock())?;
        install_panic_restore(Arc::downgrade(&restorer));
        Ok(Self {
            restorer,
            watcher: None,
        })
    }

    pub fn is_raw(&self) -> bool {
        self.restorer.is_raw()
    }

    pub fn window_size(&self) -> Result<Winsize, TerminalModeError> {
        self.restorer
            .sys
            .window_size(self.restorer.fd.as_fd())
            .map_err(TerminalModeError::WindowSize)
    }

    /// Restores now (also done by `Drop`).
    pub fn restore(&self) -> Result<(), TerminalModeError> {
        self.restorer.restore()
    }

    /// Local suspension: restore, then stop this process. Raw mode returns
    /// with [`RawModeGuard::resume_after_continue`] (the signal thread calls
    /// it on `SIGCONT`); the caller then sends the current window size.
    pub fn suspend_locally(&self) -> Result<(), TerminalModeError> {
        self.restorer.suspend()
    }

    /// After `SIGCONT`: re-enter raw mode if this guard suspended itself.
    pub fn resume_after_continue(&self) -> Result<(), TerminalModeError> {
        self.restorer.resumed()
    }

    /// Starts the signal thread: `SIGTERM`/`SIGHUP`/`SIGINT` restore and
    /// die by the signal, `SIGTSTP` suspends locally, `SIGCONT` re-enters raw
    /// mode; `SIGWINCH` and `SIGCONT` report [`LocalEvent::WindowChanged`]
    /// (coalesced: at most one pending).
    pub fn watch_signals(&mut self) -> Result<Receiver<LocalEvent>, TerminalModeError> {
        let mut signals = signal_hook::iterator::Signals::new([
            SIGTERM, SIGHUP, SIGINT, SIGTSTP, SIGCONT, SIGWINCH,
        ])
        .map_err(TerminalModeError::Signals)?;
        let handle = signals.handle();
        let (tx, rx) = mpsc::sync_channel(1);
        let restorer = Arc::clone(&self.restorer);
        let thread = std::thread::Builder::new()
            .name("terminal-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    on_signal(&restorer, signal, &tx);
                }
            })
            .map_err(TerminalModeError::Signals)?;
        self.watcher = Some((handle, thread));
        Ok(rx)
    }
}

fn notify(tx: &SyncSender<LocalEvent>) {
    match tx.try_send(LocalEvent::WindowChanged) {
        // Full: one notification is already pending and covers this one.
        Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
    }
}

fn on_signal(restorer: &Restorer, signal: i32, tx: &SyncSender<LocalEvent>) {
    match signal {
        // A failed restore or stop leaves the mode as it was; nothing to report.
        SIGTSTP => {
            let _suspended = restorer.suspend();
        }
        SIGCONT => {
            if restorer.resumed().is_ok() {
                notify(tx);
            }
        }
        SIGWINCH => notify(tx),
        _ => {
            // Best effort: the process is ending either way.
            let _restored = restorer.restore();
            restorer.sys.die_by(signal);
        }
    }
}

fn install_panic_restore(restorer: Weak<Restorer>) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Some(r) = restorer.upgrade() {
            let _restored = r.restore();
        }
        previous(info);
    }));
}

impl Drop for RawModeGuard {
    fn drop(&mut self) {
        if let Some((handle, thread)) = self.watcher.take() {
            handle.close();
            let _joined = thread.join();
        }
        let _restored = self.restorer.restore();
    }
}
