//! A recording [`PtySys`] for tests: real pipe descriptors stand in for the
//! pair, reads come from a script, and every call is recorded with its
//! typed arguments.
use super::{LineModes, MasterRead, MasterWrite, PtyPair, PtySys, WindowSize};
use lazaret_runtime::terminal::keys::SignalKeys;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PtyCall {
    OpenPair,
    SlaveIdentity,
    SetWindowSize(WindowSize),
    ReadMaster { max: usize },
    WriteMaster(Vec<u8>),
    SignalKeys,
    LineModes,
}

#[derive(Debug, Default)]
pub struct RecordingPty {
    pub calls: RefCell<Vec<PtyCall>>,
    /// Results handed out by `read_master`, oldest first; empty = WouldBlock.
    pub reads: RefCell<VecDeque<io::Result<MasterRead>>>,
    /// Results of `write_master`; empty = everything written.
    pub writes: RefCell<VecDeque<io::Result<MasterWrite>>>,
    pub fail_open: RefCell<Option<io::ErrorKind>>,
    pub fail_resize: RefCell<Option<io::ErrorKind>>,
    /// What `signal_keys` reports; `None` = a cooked terminal's defaults.
    pub keys: RefCell<Option<SignalKeys>>,
}

impl RecordingPty {
    pub fn calls(&self) -> Vec<PtyCall> {
        self.calls.borrow().clone()
    }
}

impl PtySys for RecordingPty {
    fn open_pair(&self) -> io::Result<PtyPair> {
        self.calls.borrow_mut().push(PtyCall::OpenPair);
        if let Some(kind) = *self.fail_open.borrow() {
            return Err(kind.into());
        }
        let (master, slave) = rustix::pipe::pipe()?;
        Ok(PtyPair {
            master,
            slave,
            slave_name: CString::from(c"/dev/pts/fake"),
        })
    }

    fn set_window_size(&self, _master: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
        self.calls.borrow_mut().push(PtyCall::SetWindowSize(size));
        match *self.fail_resize.borrow() {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        }
    }

    fn read_master(&self, _master: BorrowedFd<'_>, max: usize) -> io::Result<MasterRead> {
        self.calls.borrow_mut().push(PtyCall::ReadMaster { max });
        self.reads
            .borrow_mut()
            .pop_front()
            .unwrap_or(Ok(MasterRead::WouldBlock))
    }

    fn write_master(&self, _master: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<MasterWrite> {
        self.calls
            .borrow_mut()
            .push(PtyCall::WriteMaster(bytes.to_vec()));
        self.writes
            .borrow_mut()
            .pop_front()
            .unwrap_or(Ok(MasterWrite::Wrote(bytes.len())))
    }

    fn slave_identity(&self, _slave: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
        self.calls.borrow_mut().push(PtyCall::SlaveIdentity);
        Ok((0x1d, 7))
    }

    fn line_modes(&self, _master: BorrowedFd<'_>) -> io::Result<LineModes> {
        self.calls.borrow_mut().push(PtyCall::LineModes);
        // A cooked terminal echoes.
        Ok(LineModes {
            echo: true,
            flags: [0; 4],
        })
    }

    fn signal_keys(&self, _master: BorrowedFd<'_>) -> io::Result<SignalKeys> {
        self.calls.borrow_mut().push(PtyCall::SignalKeys);
        Ok(self
            .keys
            .borrow()
            .unwrap_or(SignalKeys::from_termios(true, 0x03, 0x1c, 0x1a)))
    }
}
