//! The namespace kernel calls of the process chain behind one trait (youki
//! style): [`RealNs`] calls the kernel, [`RecordingNs`] records.
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

pub trait NamespaceSys {
    /// `unshare(CLONE_NEWUSER)`; the caller must be single-threaded.
    fn unshare_user(&self) -> io::Result<()>;
    /// The generation's enforcement network namespace (spec 3.7), created
    /// without moving the caller into it: a short-lived thread unshares
    /// `CLONE_NEWNET`, writes `sysctls` there (path, value: IPv6 off) and
    /// returns a descriptor of the namespace. The caller and the children
    /// it forks stay in the host network namespace.
    fn create_network_namespace(&self, sysctls: &[(&Path, &str)]) -> io::Result<OwnedFd>;
    /// `unshare(CLONE_NEWNET)` for the calling thread: a namespace of its
    /// own with nothing but a down loopback; threads it creates afterwards
    /// share it.
    fn unshare_network(&self) -> io::Result<()>;
    /// `setns(fd, CLONE_NEWNET)` for the calling thread.
    fn enter_network_namespace(&self, fd: BorrowedFd<'_>) -> io::Result<()>;
    /// `unshare(CLONE_NEWNS)`: the generation's mount namespace.
    fn unshare_mount(&self) -> io::Result<()>;
    /// An empty read-only tmpfs over `target` (runsc's "root network
    /// namespace" probe, docs/network.md).
    fn mount_empty_readonly(&self, target: &Path) -> io::Result<()>;
    /// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE)`.
    fn make_mounts_private(&self) -> io::Result<()>;
    /// Writes one sysctl file (of the caller's network namespace).
    fn write_sysctl(&self, path: &Path, value: &str) -> io::Result<()>;
    /// `prctl(PR_SET_PDEATHSIG, sig)`; `None` disarms.
    fn parent_death_signal(&self, signal: Option<rustix::process::Signal>) -> io::Result<()>;
    /// `setns(pidfd, CLONE_NEWUSER | CLONE_NEWNS)`; single-threaded caller.
    fn enter_user_and_mount_of(&self, pidfd: BorrowedFd<'_>) -> io::Result<()>;
    /// `dup2` of `fd` onto descriptor `target` (0, 1 or 2).
    fn dup_onto_stdio(&self, fd: BorrowedFd<'_>, target: u8) -> io::Result<()>;
    /// `mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
    /// "size=BYTES,mode=0700")` in the caller's mount namespace.
    fn mount_tmpfs(&self, target: &Path, size_bytes: u64) -> io::Result<()>;
    /// `setrlimit(RLIMIT_NPROC, {max, max})` for the caller and what it
    /// spawns; inside a user namespace it counts that namespace's tasks.
    fn limit_tasks(&self, max: u64) -> io::Result<()>;
    /// `umount2(target, MNT_DETACH)`.
    fn unmount(&self, target: &Path) -> io::Result<()>;
}

/// The real kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealNs;

impl NamespaceSys for RealNs {
    fn unshare_user(&self) -> io::Result<()> {
        // SAFETY: CLONE_NEWUSER does not change the descriptor table or any
        // memory; the kernel refuses it (EINVAL) in a multi-threaded process,
        // so no other thread can observe a half-changed credential set.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER) }?;
        Ok(())
    }

    fn create_network_namespace(&self, sysctls: &[(&Path, &str)]) -> io::Result<OwnedFd> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| -> io::Result<OwnedFd> {
                    // SAFETY: CLONE_NEWNET does not unshare the descriptor
                    // table (CLONE_FILES), which is what makes unshare unsafe
                    // for Rust's fd ownership; it affects this thread only.
                    unsafe {
                        rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET)
                    }?;
                    // /proc/sys/net resolves to the reader's namespace:
                    // this thread's, the new one.
                    for (path, value) in sysctls {
                        std::fs::write(path, value)?;
                    }
                    Ok(std::fs::File::open("/proc/thread-self/ns/net")?.into())
                })
                .join()
                .map_err(|_| io::Error::other("the namespace thread panicked"))?
        })
    }

    fn unshare_network(&self) -> io::Result<()> {
        // SAFETY: CLONE_NEWNET does not unshare the descriptor table
        // (CLONE_FILES), which is what makes unshare unsafe for Rust's fd
        // ownership; it affects this thread only.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
        Ok(())
    }

    fn enter_network_namespace(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        rustix::thread::move_into_link_name_space(
            fd,
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        Ok(())
    }

    fn unshare_mount(&self) -> io::Result<()> {
        // SAFETY: CLONE_NEWNS does not unshare the descriptor table
        // (CLONE_FILES), which is what makes unshare unsafe for Rust's fd
        // ownership.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }?;
        Ok(())
    }

    fn mount_empty_readonly(&self, target: &Path) -> io::Result<()> {
        use rustix::mount::MountFlags as F;
        rustix::mount::mount(
            "tmpfs",
            target,
            "tmpfs",
            F::RDONLY | F::NOSUID | F::NODEV | F::NOEXEC,
            c"size=4k,mode=0555",
        )?;
        Ok(())
    }

    fn make_mounts_private(&self) -> io::Result<()> {
        use rustix::mount::MountPropagationFlags as P;
        rustix::mount::mount_change("/", P::PRIVATE | P::REC)?;
        Ok(())
    }

    fn write_sysctl(&self, path: &Path, value: &str) -> io::Result<()> {
        std::fs::write(path, value)
    }

    fn parent_death_signal(&self, signal: Option<rustix::process::Signal>) -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(signal)?;
        Ok(())
    }

    fn enter_user_and_mount_of(&self, pidfd: BorrowedFd<'_>) -> io::Result<()> {
        use rustix::thread::ThreadNameSpaceType as T;
        rustix::thread::move_into_thread_name_spaces(pidfd, T::USER | T::MOUNT)?;
        Ok(())
    }

    fn mount_tmpfs(&self, target: &Path, size_bytes: u64) -> io::Result<()> {
        use rustix::mount::MountFlags as F;
        let data = std::ffi::CString::new(format!("size={size_bytes},mode=0700"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        rustix::mount::mount(
            "tmpfs",
            target,
            "tmpfs",
            F::NOSUID | F::NODEV | F::NOEXEC,
            data.as_c_str(),
        )?;
        Ok(())
    }

    fn unmount(&self, target: &Path) -> io::Result<()> {
        rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)?;
        Ok(())
    }

    fn limit_tasks(&self, max: u64) -> io::Result<()> {
        use rustix::process::{setrlimit, Resource, Rlimit};
        setrlimit(
            Resource::Nproc,
            Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        )?;
        Ok(())
    }

    fn dup_onto_stdio(&self, fd: BorrowedFd<'_>, target: u8) -> io::Result<()> {
        match target {
            0 => rustix::stdio::dup2_stdin(fd)?,
            1 => rustix::stdio::dup2_stdout(fd)?,
            2 => rustix::stdio::dup2_stderr(fd)?,
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("descriptor {other} is not stdio"),
                ))
            }
        }
        Ok(())
    }
}

/// Records every call and succeeds, or fails the call named in `fail`.
#[derive(Debug, Default)]
pub struct RecordingNs {
    calls: RefCell<Vec<String>>,
    fail: Option<&'static str>,
}

impl RecordingNs {
    pub fn failing(call: &'static str) -> Self {
        Self {
            calls: RefCell::default(),
            fail: Some(call),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn record(&self, name: &'static str, detail: String) -> io::Result<()> {
        self.calls.borrow_mut().push(format!("{name}{detail}"));
        if self.fail == Some(name) {
            return Err(io::Error::from_raw_os_error(1));
        }
        Ok(())
    }
}

impl NamespaceSys for RecordingNs {
    fn unshare_user(&self) -> io::Result<()> {
        self.record("unshare_user", String::new())
    }
    fn create_network_namespace(&self, sysctls: &[(&Path, &str)]) -> io::Result<OwnedFd> {
        let written: Vec<String> = sysctls
            .iter()
            .map(|(p, v)| format!(" {}={v}", p.display()))
            .collect();
        self.record("create_network_namespace", written.concat())?;
        Ok(std::fs::File::open("/dev/null")?.into())
    }
    fn unshare_network(&self) -> io::Result<()> {
        self.record("unshare_network", String::new())
    }
    fn enter_network_namespace(&self, _fd: BorrowedFd<'_>) -> io::Result<()> {
        self.record("enter_network_namespace", String::new())
    }
    fn unshare_mount(&self) -> io::Result<()> {
        self.record("unshare_mount", String::new())
    }
    fn mount_empty_readonly(&self, target: &Path) -> io::Result<()> {
        self.record("mount_empty_readonly", format!(" {}", target.display()))
    }
    fn make_mounts_private(&self) -> io::Result<()> {
        self.record("make_mounts_private", String::new())
    }
    fn write_sysctl(&self, path: &Path, value: &str) -> io::Result<()> {
        self.record("write_sysctl", format!(" {}={value}", path.display()))
    }
    fn parent_death_signal(&self, signal: Option<rustix::process::Signal>) -> io::Result<()> {
        self.record("parent_death_signal", format!(" {signal:?}"))
    }
    fn enter_user_and_mount_of(&self, pidfd: BorrowedFd<'_>) -> io::Result<()> {
        let _ = pidfd.as_fd();
        self.record("enter_user_and_mount_of", String::new())
    }
    fn dup_onto_stdio(&self, _fd: BorrowedFd<'_>, target: u8) -> io::Result<()> {
        self.record("dup_onto_stdio", format!(" {target}"))
    }
    fn mount_tmpfs(&self, target: &Path, size_bytes: u64) -> io::Result<()> {
        self.record("mount_tmpfs", format!(" {} {size_bytes}", target.display()))
    }
    fn limit_tasks(&self, max: u64) -> io::Result<()> {
        self.record("limit_tasks", format!(" {max}"))
    }
    fn unmount(&self, target: &Path) -> io::Result<()> {
        self.record("unmount", format!(" {}", target.display()))
    }
}
