//! Taking ownership of a descriptor a Lazaret process was started with
//! (`--channel-fd`, `--ready-fd`, ...): the one place a number from the
//! command line becomes an `OwnedFd`.
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The number does not name a descriptor this process inherited: it is
/// stdin, stdout or stderr, or no descriptor is open under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fd} is not an open descriptor")]
pub struct NotInherited {
    pub fd: RawFd,
}

/// Takes ownership of the inherited descriptor `fd` and marks it
/// close-on-exec, so it reaches no process this one starts. The caller
/// names it by the flag that carried it, and must not take the same number
/// twice.
pub fn take_inherited(fd: RawFd) -> Result<OwnedFd, NotInherited> {
    // SAFETY: borrowed only for this validity check.
    let open = fd > 2 && rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(fd) }).is_ok();
    if !open {
        return Err(NotInherited { fd });
    }
    // SAFETY: the descriptor is open (checked above) and was inherited by
    // this process for the one purpose its flag names; nothing else here
    // owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, IntoRawFd};

    #[test]
    fn an_open_descriptor_is_taken_and_closed_on_exec() {
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let raw = r.into_raw_fd();
        let owned = take_inherited(raw).unwrap();
        assert_eq!(owned.as_raw_fd(), raw);
        let flags = rustix::io::fcntl_getfd(&owned).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn standard_streams_and_closed_numbers_are_refused() {
        for fd in [0, 1, 2, -1, 1_000_000] {
            assert_eq!(take_inherited(fd).unwrap_err(), NotInherited { fd });
        }
    }
}
