//! `lazaret __enter`: what an exec client runs as after the broker releases
//! it. It opens a pidfd for the Runtime Supervisor, checks that the pidfs
//! identity is exactly the supervisor HC acquired (so a recycled PID is never
//! entered), joins its user and mount namespaces through that pidfd, moves
//! the inherited session pipes onto stdio and execs `runsc exec`.
use super::nsys::NamespaceSys;
use crate::process_identity::{ProcessSys, PID_FS_MAGIC};
use crate::role_argv::{ArgProblem, NamedArgs};
use lazaret_runtime::records::process::{HostPid, PidfsDev, PidfsIno};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnterArgs {
    pub pid: HostPid,
    pub dev: PidfsDev,
    pub ino: PidfsIno,
    /// Inherited descriptors for stdin, stdout, stderr.
    pub stdio: [RawFd; 3],
    pub target: Vec<OsString>,
}

#[derive(Debug, thiserror::Error)]
pub enum EnterError {
    #[error("__enter argument {argument}: {problem} (usage: --pid N --dev N --ino N --stdio A,B,C -- TARGET...)")]
    Args {
        argument: &'static str,
        problem: String,
    },
    #[error("pidfd_open of the Runtime Supervisor PID {pid} failed: {source}")]
    Pidfd { pid: u32, source: io::Error },
    #[error(
        "PID {pid} is not the acquired Runtime Supervisor (pidfs {found:?}, expected {expected:?})"
    )]
    NotTheSupervisor {
        pid: u32,
        found: (u64, u64),
        expected: (u64, u64),
    },
    #[error("pidfs identity of PID {pid}: {source}")]
    Identity { pid: u32, source: io::Error },
    #[error("joining the Runtime Supervisor's user and mount namespaces failed: {0}")]
    Setns(io::Error),
    #[error("moving the session pipes onto stdio failed: {0}")]
    Stdio(io::Error),
    #[error("exec of {program:?} failed: {source}")]
    Exec {
        program: OsString,
        source: io::Error,
    },
}

impl From<ArgProblem> for EnterError {
    fn from(p: ArgProblem) -> Self {
        Self::Args {
            argument: p.argument,
            problem: p.problem,
        }
    }
}

impl EnterArgs {
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            "--pid".into(),
            self.pid.0.to_string().into(),
            "--dev".into(),
            self.dev.0.to_string().into(),
            "--ino".into(),
            self.ino.0.to_string().into(),
            "--stdio".into(),
            format!("{},{},{}", self.stdio[0], self.stdio[1], self.stdio[2]).into(),
            "--".into(),
        ];
        argv.extend(self.target.iter().cloned());
        argv
    }

    pub fn parse(argv: &[OsString]) -> Result<Self, EnterError> {
        let args = NamedArgs::parse(argv, ["--pid", "--dev", "--ino", "--stdio"])?;
        let pid = u32::try_from(args.number(0)?).map_err(|_| args.refuse(0, "out of range"))?;
        let fds: Vec<RawFd> = args
            .get(3)?
            .split(',')
            .map(|f| f.parse::<RawFd>().ok().filter(|fd| *fd > 2))
            .collect::<Option<_>>()
            .ok_or_else(|| args.refuse(3, "expected three descriptor numbers above 2"))?;
        let stdio: [RawFd; 3] = fds
            .try_into()
            .map_err(|_| args.refuse(3, "expected exactly three descriptors"))?;
        Ok(Self {
            pid: HostPid(pid),
            dev: PidfsDev(args.number(1)?),
            ino: PidfsIno(args.number(2)?),
            stdio,
            target: args.target,
        })
    }
}

/// Runs the helper; returns only on failure (after exec it is `runsc exec`).
pub fn run_enter<P: ProcessSys, N: NamespaceSys>(
    procs: &P,
    ns: &N,
    args: &EnterArgs,
) -> EnterError {
    let pid = args.pid.0;
    let pidfd = match procs.pidfd_open(args.pid) {
        Ok(pidfd) => pidfd,
        Err(source) => return EnterError::Pidfd { pid, source },
    };
    let identity = procs.fstatfs_type(&pidfd).and_then(|t| {
        if t == PID_FS_MAGIC {
            procs.fstat_pidfs(&pidfd)
        } else {
            Err(io::Error::other(format!("f_type {t:#x} is not pidfs")))
        }
    });
    match identity {
        Ok((dev, ino)) if dev == args.dev && ino == args.ino => {}
        Ok((dev, ino)) => {
            return EnterError::NotTheSupervisor {
                pid,
                found: (dev.0, ino.0),
                expected: (args.dev.0, args.ino.0),
            }
        }
        Err(source) => return EnterError::Identity { pid, source },
    }
    if let Err(e) = ns.enter_user_and_mount_of(pidfd.as_fd()) {
        return EnterError::Setns(e);
    }
    for (target, fd) in (0u8..).zip(args.stdio) {
        // SAFETY: the descriptors were inherited from the Host Coordinator
        // for exactly this purpose and stay open until exec; the borrow ends
        // with this call.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if let Err(e) = ns.dup_onto_stdio(borrowed, target) {
            return EnterError::Stdio(e);
        }
    }
    let Some((program, rest)) = args.target.split_first() else {
        return EnterError::Args {
            argument: "TARGET",
            problem: "the target command is empty".into(),
        };
    };
    let source = std::process::Command::new(program).args(rest).exec();
    EnterError::Exec {
        program: program.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::nsys::RecordingNs;
    use crate::process_identity::fake::{FakeProcess, FakeProcessSys};
    use crate::process_identity::ChildState;
    use lazaret_runtime::records::process::BootId;

    fn table(ino: u64) -> FakeProcessSys {
        let procs = FakeProcessSys::new(BootId([3; 16]));
        procs.insert(
            4242,
            FakeProcess {
                dev: 7,
                ino,
                start_time: 1,
                fs_type: PID_FS_MAGIC,
                state: ChildState::Running,
            },
        );
        procs
    }

    fn args() -> EnterArgs {
        EnterArgs {
            pid: HostPid(4242),
            dev: PidfsDev(7),
            ino: PidfsIno(99),
            stdio: [5, 6, 7],
            target: vec!["runsc".into(), "exec".into(), "c".into(), "true".into()],
        }
    }

    #[test]
    fn arguments_round_trip_and_bad_descriptors_are_refused() -> Result<(), EnterError> {
        assert_eq!(EnterArgs::parse(&args().to_argv())?, args());
        let mut bad = args().to_argv();
        bad[7] = "0,1,2".into();
        assert!(matches!(
            EnterArgs::parse(&bad),
            Err(EnterError::Args {
                argument: "--stdio",
                ..
            })
        ));
        Ok(())
    }

    /// A PID whose pidfs identity is not the acquired supervisor's is never
    /// entered: no setns, no stdio change, no exec.
    #[test]
    fn a_recycled_supervisor_pid_is_not_entered() {
        let ns = RecordingNs::default();
        let err = run_enter(&table(100), &ns, &args());
        assert!(
            matches!(err, EnterError::NotTheSupervisor { pid: 4242, .. }),
            "{err}"
        );
        assert!(ns.calls().is_empty(), "{:?}", ns.calls());
    }

    /// The exact supervisor is entered before stdio moves; a failing step
    /// stops before exec.
    #[test]
    fn the_exact_supervisor_is_entered_before_stdio_moves() {
        let ns = RecordingNs::failing("dup_onto_stdio");
        let err = run_enter(&table(99), &ns, &args());
        assert!(matches!(err, EnterError::Stdio(_)), "{err}");
        assert_eq!(
            ns.calls(),
            vec![
                "enter_user_and_mount_of".to_owned(),
                "dup_onto_stdio 0".to_owned()
            ]
        );
    }
}
