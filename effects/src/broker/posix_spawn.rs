//! The wrapper's start by `posix_spawn` (spec 3.3 step 3), on the join's
//! critical path: glibc starts the child with `CLONE_VM | CLONE_VFORK`, so
//! the coordinator's page tables are not copied (a `fork` of the
//! multithreaded coordinator is most of a session start's spawn cost) and
//! the call returns once the child has executed the program or failed to,
//! with that failure's errno.
//!
//! Descriptors the child must keep are named by `adddup2(fd, fd)` file
//! actions: POSIX.1-2024 (and glibc since 2.29) clears
//! `FD_CLOEXEC` on the child's copy only, so the parent's stay close-on-exec
//! and a concurrent spawn by another thread never inherits them. The signal
//! mask is emptied and `SIGPIPE` set back to its default in the child, as
//! `std::process::Command` does; the environment is this process's.
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use lazaret_runtime::records::process::HostPid;

/// Starts `program` with `args` (after `argv[0]`, which is `program`),
/// keeping exactly `keep` open across the exec beyond the standard
/// streams; returns its PID.
pub fn spawn_keeping(program: &Path, args: &[OsString], keep: &[RawFd]) -> io::Result<HostPid> {
    let path = c_string(program.as_os_str())?;
    let argv: Vec<CString> = std::iter::once(Ok(path.clone()))
        .chain(args.iter().map(|a| c_string(a)))
        .collect::<io::Result<_>>()?;
    let envp: Vec<CString> = std::env::vars_os()
        .map(|(key, value)| {
            let mut pair = key.into_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            CString::new(pair).map_err(|_| nul_error())
        })
        .collect::<io::Result<_>>()?;
    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    let actions = FileActions::keeping(keep)?;
    let attributes = Attributes::like_std()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: `path`, `argv` and
    // `envp` own their NUL-terminated strings and the pointer arrays end in
    // a null pointer; `actions` and `attributes` are initialized and live
    // until after the call; `pid` is a valid out-pointer.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            actions.as_ptr(),
            attributes.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let pid = u32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::other(format!("posix_spawn returned PID {pid}")))?;
    Ok(HostPid(pid))
}

/// The oldest glibc whose `adddup2(fd, fd)` clears `FD_CLOEXEC`; an older
/// one would close the kept descriptors at the exec.
const KEEPS_FROM: (u32, u32) = (2, 29);

/// Whether this process's glibc keeps descriptors as [`spawn_keeping`]
/// needs; its version otherwise.
pub fn keeps_descriptors() -> Result<(), String> {
    // SAFETY: gnu_get_libc_version takes nothing and returns a pointer to
    // a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) }
        .to_string_lossy()
        .into_owned();
    let mut parts = text.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= KEEPS_FROM => Ok(()),
        _ => Err(text),
    }
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| nul_error())
}

fn nul_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "an argument or environment entry contains a NUL byte",
    )
}

/// `strings`' pointers, then the terminating null pointer (valid while
/// `strings` lives).
fn null_terminated(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// Initialized file actions, destroyed on drop.
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

impl FileActions {
    /// Actions that keep each of `keep` open across the exec.
    fn keeping(keep: &[RawFd]) -> io::Result<Self> {
        // SAFETY: an all-zero posix_spawn_file_actions_t is a valid value
        // to pass to its init function, which overwrites it.
        let mut raw: Box<libc::posix_spawn_file_actions_t> =
            Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable storage for the actions.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *raw) })?;
        let mut actions = Self(raw);
        for &fd in keep {
            // SAFETY: the actions are initialized (above) and borrowed
            // mutably, exclusively, for the call; the descriptor is only
            // named here, used in the child.
            check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *actions.0, fd, fd) })?;
        }
        Ok(actions)
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        &*self.0
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `keeping` and destroyed only here.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut *self.0) };
    }
}

/// Initialized spawn attributes, destroyed on drop.
struct Attributes(Box<libc::posix_spawnattr_t>);

impl Attributes {
    /// An empty signal mask and `SIGPIPE` at its default in the child.
    fn like_std() -> io::Result<Self> {
        // SAFETY: an all-zero posix_spawnattr_t is a valid value to pass to
        // its init function, which overwrites it.
        let mut raw: Box<libc::posix_spawnattr_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable storage for the attributes.
        check(unsafe { libc::posix_spawnattr_init(&mut *raw) })?;
        let mut attributes = Self(raw);
        // SAFETY: sigset_t is plain data; sigemptyset and sigaddset
        // initialize and edit the local sets; the attributes are
        // initialized (above) and owned here.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            check_errno(libc::sigemptyset(&mut empty))?;
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            check_errno(libc::sigemptyset(&mut pipe))?;
            check_errno(libc::sigaddset(&mut pipe, libc::SIGPIPE))?;
            check(libc::posix_spawnattr_setsigmask(&mut *attributes.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(
                &mut *attributes.0,
                &pipe,
            ))?;
            let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut *attributes.0,
                libc::c_short::try_from(flags).map_err(io::Error::other)?,
            ))?;
        }
        Ok(attributes)
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        &*self.0
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialized in `like_std` and destroyed only here.
        unsafe { libc::posix_spawnattr_destroy(&mut *self.0) };
    }
}

/// A posix_spawn family result (an errno value, 0 for success).
fn check(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// A -1-and-errno result.
fn check_errno(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::pipe::{pipe_with, PipeFlags};
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// The kept descriptor is open in the child, another close-on-exec one
    /// is not, and the parent's copy keeps its close-on-exec flag.
    #[test]
    fn only_the_kept_descriptors_cross_the_exec() -> io::Result<()> {
        let (kept_read, kept_write) = pipe_with(PipeFlags::CLOEXEC)?;
        let (other_read, _other_write) = pipe_with(PipeFlags::CLOEXEC)?;
        let (out_read, out_write) = pipe_with(PipeFlags::CLOEXEC)?;
        drop(kept_write);
        let kept = kept_read.as_raw_fd();
        let other = other_read.as_raw_fd();
        let out = out_write.as_raw_fd();
        let script = format!(
            "for fd in {kept} {other}; do if [ -e /proc/self/fd/$fd ]; then echo open; else echo closed; fi; done >&{out}"
        );
        // This thread spawns with SIGUSR1 blocked: the child must not
        // inherit the mask.
        // SAFETY: sigset_t is plain data, initialized by sigemptyset;
        // pthread_sigmask changes only this thread's mask, restored below.
        let before = unsafe {
            let mut usr1: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr1);
            libc::sigaddset(&mut usr1, libc::SIGUSR1);
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, &usr1, &mut before),
                0
            );
            before
        };
        // The shell reports the descriptors; awk, exec'd directly (a shell
        // clears its signal mask when it starts), its own signal state.
        let signals = format!("/^Sig(Blk|Ign)/ {{ print > \"/proc/self/fd/{out}\" }}");
        // One after the other, so their lines come in order.
        let run = |program: &str, args: Vec<OsString>, keep: &[RawFd]| {
            let pid = spawn_keeping(Path::new(program), &args, keep)?;
            let waited = rustix::process::waitpid(
                rustix::process::Pid::from_raw(i32::try_from(pid.0).map_err(io::Error::other)?),
                rustix::process::WaitOptions::empty(),
            )?;
            Ok::<_, io::Error>(waited.and_then(|(_, s)| s.exit_status()))
        };
        let statuses = [
            run("/bin/sh", vec!["-c".into(), script.into()], &[kept, out]),
            run(
                "/usr/bin/awk",
                vec![signals.into(), "/proc/self/status".into()],
                &[out],
            ),
        ];
        // SAFETY: restores this thread's own mask, saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
        let statuses = statuses.into_iter().collect::<io::Result<Vec<_>>>()?;
        drop(out_write);
        let mut report = String::new();
        std::fs::File::from(out_read).read_to_string(&mut report)?;
        assert_eq!(statuses, [Some(0), Some(0)], "{report}");
        let mut lines = report.lines();
        assert_eq!(lines.next(), Some("open"), "{report}");
        assert_eq!(lines.next(), Some("closed"), "{report}");
        // Nothing blocked (SIGUSR1 was, in the spawning thread); SIGPIPE
        // (bit 12) not ignored, although this test process ignores it (the
        // Rust runtime does).
        let mask = |name: &str| {
            report
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        };
        assert_eq!(mask("SigBlk:"), Some(0), "{report}");
        assert_eq!(mask("SigIgn:").map(|m| m & (1 << 12)), Some(0), "{report}");
        assert!(rustix::io::fcntl_getfd(&kept_read)?.contains(rustix::io::FdFlags::CLOEXEC));
        Ok(())
    }

    /// This host's glibc keeps descriptors (the tests above rely on it).
    #[test]
    fn this_glibc_keeps_descriptors() {
        assert_eq!(keeps_descriptors(), Ok(()));
    }

    /// An exec failure comes back as its errno.
    #[test]
    fn a_program_that_cannot_run_fails_with_its_errno() {
        let e = spawn_keeping(Path::new("/nonexistent/lazaret-test"), &[], &[])
            .expect_err("no such program");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    }
}
