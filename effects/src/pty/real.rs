//! The real PTY calls (rustix).
use super::{LineModes, MasterRead, MasterWrite, PtyPair, PtySys, WindowSize};
use lazaret_runtime::terminal::keys::SignalKeys;
use rustix::fs::{fcntl_getfl, fcntl_setfl, fstat, OFlags};
use rustix::io::Errno;
use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, ptsname, unlockpt, OpenptFlags};
use rustix::termios::{tcgetattr, tcsetwinsize, LocalModes, SpecialCodeIndex, Winsize};
use std::io;
use std::os::fd::BorrowedFd;

#[derive(Debug, Default, Clone, Copy)]
pub struct RealPty;

impl PtySys for RealPty {
    fn open_pair(&self) -> io::Result<PtyPair> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = openpt(flags)?;
        grantpt(&master)?;
        unlockpt(&master)?;
        let slave_name = ptsname(&master, Vec::new())?;
        let slave = ioctl_tiocgptpeer(&master, flags)?;
        let status = fcntl_getfl(&master)?;
        fcntl_setfl(&master, status | OFlags::NONBLOCK)?;
        Ok(PtyPair {
            master,
            slave,
            slave_name,
        })
    }

    fn set_window_size(&self, master: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
        Ok(tcsetwinsize(
            master,
            Winsize {
                ws_row: size.rows.get(),
                ws_col: size.columns.get(),
                ws_xpixel: size.pixel_width,
                ws_ypixel: size.pixel_height,
            },
        )?)
    }

    fn read_master(&self, master: BorrowedFd<'_>, max: usize) -> io::Result<MasterRead> {
        let mut buf = vec![0u8; max];
        match rustix::io::read(master, &mut buf) {
            Ok(0) | Err(Errno::IO) => Ok(MasterRead::Eof),
            Ok(n) => {
                buf.truncate(n);
                Ok(MasterRead::Data(buf))
            }
            Err(Errno::AGAIN) => Ok(MasterRead::WouldBlock),
            Err(e) => Err(e.into()),
        }
    }

    fn write_master(&self, master: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<MasterWrite> {
        match rustix::io::write(master, bytes) {
            Ok(n) => Ok(MasterWrite::Wrote(n)),
            Err(Errno::AGAIN) => Ok(MasterWrite::WouldBlock),
            Err(e) => Err(e.into()),
        }
    }

    fn slave_identity(&self, slave: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
        let st = fstat(slave)?;
        Ok((st.st_dev, st.st_ino))
    }

    fn line_modes(&self, master: BorrowedFd<'_>) -> io::Result<LineModes> {
        let t = tcgetattr(master)?;
        Ok(LineModes {
            echo: t.local_modes.contains(LocalModes::ECHO),
            flags: [
                t.input_modes.bits(),
                t.output_modes.bits(),
                t.control_modes.bits(),
                t.local_modes.bits(),
            ],
        })
    }

    fn signal_keys(&self, master: BorrowedFd<'_>) -> io::Result<SignalKeys> {
        let t = tcgetattr(master)?;
        let cc = &t.special_codes;
        Ok(SignalKeys::from_termios(
            t.local_modes.contains(LocalModes::ISIG),
            cc[SpecialCodeIndex::VINTR],
            cc[SpecialCodeIndex::VQUIT],
            cc[SpecialCodeIndex::VSUSP],
        ))
    }
}
