//! A recording [`TermSys`]: it keeps the "current" attributes in memory,
//! records every call, and records `die_by` instead of dying.
use super::{is_cooked, TermSys};
use rustix::termios::{Termios, Winsize};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, PoisonError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TermCall {
    GetAttrs,
    /// `cooked` = the attributes set have ICANON.
    SetAttrs {
        cooked: bool,
    },
    WindowSize,
    StopSelf,
    DieBy(i32),
}

#[derive(Debug)]
pub struct RecordingTerm {
    current: Mutex<Termios>,
    calls: Mutex<Vec<TermCall>>,
    size: Winsize,
}

impl RecordingTerm {
    /// Starts with `initial` (take them from a real PTY slave).
    pub fn new(initial: Termios, size: Winsize) -> Self {
        Self {
            current: Mutex::new(initial),
            calls: Mutex::new(Vec::new()),
            size,
        }
    }

    pub fn calls(&self) -> Vec<TermCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn currently_cooked(&self) -> bool {
        is_cooked(&self.current.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn record(&self, call: TermCall) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }
}

impl TermSys for RecordingTerm {
    fn get_attrs(&self, _fd: BorrowedFd<'_>) -> io::Result<Termios> {
        self.record(TermCall::GetAttrs);
        Ok(self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    fn set_attrs(&self, _fd: BorrowedFd<'_>, attrs: &Termios) -> io::Result<()> {
        self.record(TermCall::SetAttrs {
            cooked: is_cooked(attrs),
        });
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = attrs.clone();
        Ok(())
    }

    fn window_size(&self, _fd: BorrowedFd<'_>) -> io::Result<Winsize> {
        self.record(TermCall::WindowSize);
        Ok(self.size)
    }

    fn stop_self(&self) -> io::Result<()> {
        self.record(TermCall::StopSelf);
        Ok(())
    }

    fn die_by(&self, signal: i32) {
        self.record(TermCall::DieBy(signal));
    }
}
