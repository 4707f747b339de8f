//! Host PTY pairs for Session Terminals (spec 3.4, FR-14): the Host
//! Coordinator owns one master per interactive session; the slave becomes
//! the stdin/stdout/stderr of the non-detached `runsc exec` client.
//!
//! Every kernel call goes through [`PtySys`]; [`RealPty`] makes them and
//! [`fake::RecordingPty`] records them for tests. [`SessionPty`] holds one
//! master and applies the backpressure rule of spec 3.4: it reads the master
//! only when the session's client queue has room (a budget from the pure
//! terminal machine), so a flooding guest blocks in the kernel PTY buffer
//! instead of growing a user-space queue.
pub mod fake;
mod real;

pub use real::RealPty;

use lazaret_runtime::records::terminal::PtyIdentity;
use lazaret_runtime::terminal::keys::SignalKeys;
use lazaret_runtime::terminal::protocol::{Chunk, MAX_CHUNK_BYTES};
use std::ffi::CString;
use std::io;
use std::num::NonZeroU16;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// `TIOCSWINSZ` values: rows and columns are nonzero (spec 3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSize {
    pub rows: NonZeroU16,
    pub columns: NonZeroU16,
    pub pixel_width: u16,
    pub pixel_height: u16,
}

/// One non-blocking master read.
#[derive(Debug, PartialEq, Eq)]
pub enum MasterRead {
    Data(Vec<u8>),
    /// Nothing to read now (`EAGAIN`).
    WouldBlock,
    /// Every slave descriptor is closed (Linux reports `EIO`).
    Eof,
}

/// One non-blocking master write.
#[derive(Debug, PartialEq, Eq)]
pub enum MasterWrite {
    Wrote(usize),
    WouldBlock,
}

/// An allocated pair: the master stays with the Host Coordinator, the slave
/// goes to the exec client and is closed here after the spawn.
#[derive(Debug)]
pub struct PtyPair {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// `ptsname` of the master: a diagnostic label, never reopened.
    pub slave_name: CString,
}

/// Kernel calls for host PTYs.
pub trait PtySys {
    /// `posix_openpt(O_RDWR|O_NOCTTY|O_CLOEXEC)`, `grantpt`, `unlockpt`,
    /// `ptsname`, then the slave through `TIOCGPTPEER` (opened from the
    /// master itself, so no pathname can be swapped in), master set
    /// `O_NONBLOCK`.
    fn open_pair(&self) -> io::Result<PtyPair>;
    /// `TIOCSWINSZ` on the master.
    fn set_window_size(&self, master: BorrowedFd<'_>, size: WindowSize) -> io::Result<()>;
    fn read_master(&self, master: BorrowedFd<'_>, max: usize) -> io::Result<MasterRead>;
    fn write_master(&self, master: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<MasterWrite>;
    /// `fstat` of the slave: (`st_dev`, `st_ino`) of its devpts node.
    fn slave_identity(&self, slave: BorrowedFd<'_>) -> io::Result<(u64, u64)>;
    /// `TCGETS` on the master, which Linux answers with the slave's termios:
    /// `ISIG` and the `VINTR`/`VQUIT`/`VSUSP` characters the guest set.
    fn signal_keys(&self, master: BorrowedFd<'_>) -> io::Result<SignalKeys>;
    /// `TCGETS` on the master: the slave's line discipline modes.
    fn line_modes(&self, master: BorrowedFd<'_>) -> io::Result<LineModes>;
}

/// The line discipline's modes as a program sets them (`termios`' input,
/// output, control and local flags), comparable: a program that changes
/// its terminal's settings changes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineModes {
    /// The slave echoes typed input (`ECHO`).
    pub echo: bool,
    /// `c_iflag`, `c_oflag`, `c_cflag`, `c_lflag`.
    pub flags: [u32; 4],
}

#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    #[error("cannot allocate a host PTY pair (openpt/grantpt/unlockpt/ptsname/TIOCGPTPEER): {0}")]
    Open(#[source] io::Error),
    #[error("cannot read the identity of PTY slave {slave}: {source}")]
    Identity { slave: String, source: io::Error },
    #[error("TIOCSWINSZ on the PTY master of {slave} failed: {source}")]
    Resize { slave: String, source: io::Error },
    #[error("reading the PTY master of {slave} failed: {source}")]
    Read { slave: String, source: io::Error },
    #[error("writing to the PTY master of {slave} failed: {source}")]
    Write { slave: String, source: io::Error },
    #[error("reading the line discipline settings of {slave} failed: {source}")]
    Settings { slave: String, source: io::Error },
    #[error("input for {slave} offered while {pending} bytes are still pending")]
    InputPending { slave: String, pending: usize },
}

/// What one [`SessionPty::pump`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Pumped {
    /// The budget was zero: the master was not read (backpressure).
    Paused,
    Data(Chunk),
    WouldBlock,
    Eof,
}

/// One session's PTY master, held by the Host Coordinator.
#[derive(Debug)]
pub struct SessionPty<'s, S: PtySys> {
    sys: &'s S,
    master: OwnedFd,
    slave_name: String,
    identity: PtyIdentity,
    pending_input: Vec<u8>,
}

impl<'s, S: PtySys> SessionPty<'s, S> {
    /// Allocates a pair. Returns the session PTY and the slave for the exec
    /// client's stdio.
    pub fn allocate(sys: &'s S) -> Result<(Self, OwnedFd), PtyError> {
        let pair = sys.open_pair().map_err(PtyError::Open)?;
        let slave_name = pair.slave_name.to_string_lossy().into_owned();
        let (device, inode) =
            sys.slave_identity(pair.slave.as_fd())
                .map_err(|source| PtyError::Identity {
                    slave: slave_name.clone(),
                    source,
                })?;
        let master_fd = u32::try_from(pair.master.as_raw_fd()).map_err(|_| {
            PtyError::Open(io::Error::new(
                io::ErrorKind::InvalidData,
                "negative master descriptor",
            ))
        })?;
        let identity = PtyIdentity {
            master_fd,
            device,
            inode,
        };
        Ok((
            Self {
                sys,
                master: pair.master,
                slave_name,
                identity,
                pending_input: Vec::new(),
            },
            pair.slave,
        ))
    }

    /// The durable PTY identity (schemas.md "Session terminal ownership"):
    /// master descriptor number plus the devpts (`st_dev`, `st_ino`) of its
    /// slave. Exact only together with the HC process identity.
    pub fn identity(&self) -> PtyIdentity {
        self.identity
    }

    pub fn slave_name(&self) -> &str {
        &self.slave_name
    }

    pub fn master(&self) -> BorrowedFd<'_> {
        self.master.as_fd()
    }

    /// `TIOCSWINSZ` on the master (spec 3.4: before the guest `SIGWINCH`).
    pub fn resize(&self, size: WindowSize) -> Result<(), PtyError> {
        self.sys
            .set_window_size(self.master.as_fd(), size)
            .map_err(|source| PtyError::Resize {
                slave: self.slave_name.clone(),
                source,
            })
    }

    /// The slave's current signal keys (the guest's termios: runsc makes
    /// the host slave the guest terminal), read just before typed input is
    /// split into bytes and signals (`lazaret_runtime::terminal::keys`).
    pub fn signal_keys(&self) -> Result<SignalKeys, PtyError> {
        self.sys
            .signal_keys(self.master.as_fd())
            .map_err(|source| PtyError::Settings {
                slave: self.slave_name.clone(),
                source,
            })
    }

    /// The slave's line discipline modes now (the guest's settings).
    pub fn line_modes(&self) -> Result<LineModes, PtyError> {
        self.sys
            .line_modes(self.master.as_fd())
            .map_err(|source| PtyError::Settings {
                slave: self.slave_name.clone(),
                source,
            })
    }

    /// Reads at most `budget` bytes (and at most one protocol chunk). A zero
    /// budget makes no read at all, leaving the data in the kernel buffer.
    pub fn pump(&self, budget: usize) -> Result<Pumped, PtyError> {
        let max = budget.min(MAX_CHUNK_BYTES);
        if max == 0 {
            return Ok(Pumped::Paused);
        }
        let read = self
            .sys
            .read_master(self.master.as_fd(), max)
            .map_err(|source| PtyError::Read {
                slave: self.slave_name.clone(),
                source,
            })?;
        Ok(match read {
            MasterRead::Data(mut bytes) => {
                bytes.truncate(max);
                Pumped::Data(Chunk::new(bytes).map_err(|e| PtyError::Read {
                    slave: self.slave_name.clone(),
                    source: io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
                })?)
            }
            MasterRead::WouldBlock => Pumped::WouldBlock,
            MasterRead::Eof => Pumped::Eof,
        })
    }

    /// Whether input is still waiting for the slave to read; while it is,
    /// the caller stops taking input events from this session's client.
    pub fn input_pending(&self) -> usize {
        self.pending_input.len()
    }

    /// Writes client input; what the kernel does not take now stays pending
    /// (at most one chunk).
    pub fn write_input(&mut self, chunk: &Chunk) -> Result<(), PtyError> {
        if !self.pending_input.is_empty() {
            return Err(PtyError::InputPending {
                slave: self.slave_name.clone(),
                pending: self.pending_input.len(),
            });
        }
        self.pending_input.extend_from_slice(chunk.as_bytes());
        self.flush_input()
    }

    /// Retries pending input; a bounded number of writes per call.
    pub fn flush_input(&mut self) -> Result<(), PtyError> {
        const WRITES_PER_FLUSH_MAX: usize = 16;
        for _ in 0..WRITES_PER_FLUSH_MAX {
            if self.pending_input.is_empty() {
                break;
            }
            let wrote = self
                .sys
                .write_master(self.master.as_fd(), &self.pending_input)
                .map_err(|source| PtyError::Write {
                    slave: self.slave_name.clone(),
                    source,
                })?;
            match wrote {
                MasterWrite::Wrote(n) => {
                    self.pending_input.drain(..n.min(self.pending_input.len()));
                }
                MasterWrite::WouldBlock => break,
            }
        }
        Ok(())
    }

    /// Closes the exact master (spec 3.4 release step 3).
    pub fn close(self) {
        drop(self.master);
    }
}
