//! The physical host-process launcher (spec 3.8: "invokes an executable with
//! an argument vector and contains no shell-expansion path"; schemas.md
//! auto-approval rules; SR-8). The executable is an object Lazaret holds
//! open, not a name: an auto-approval rule's object was opened and checked
//! when the configuration loaded, and before every execution it is checked
//! again — its path must still name the same object, and the object must
//! still be a regular file with exactly one hard link, owned by root or the
//! developer, with no group or other write bit, executable by the developer.
//! A hard link added or the path renamed over since load refuses the run.
//!
//! The process is started from the held descriptor (`/proc/self/fd/N`,
//! made inheritable only in the forked child), with argument zero set to
//! the canonical path, an explicit environment and working directory:
//! there is no `PATH` lookup and no shell. A script runs by the kernel's
//! ordinary `#!` handling on that same opened object. It runs under the
//! `lazaret __host-command` supervisor, which takes down whatever the
//! command started when it ends or is stopped ([`super::subreaper`]).
use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lazaret_runtime::escalation::command::{check_argv, CommandError};

use crate::config_objects::executable_rules;
use crate::confined::{ConfinedError, ConfinedSys, OpenedObject, UserIds};

/// Why the launcher refuses to start a host process.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command vector: {0}")]
    Argv(#[from] CommandError),
    #[error("the command's executable {requested:?} is not the approved executable {approved}")]
    NotTheExecutable {
        requested: String,
        approved: PathBuf,
    },
    #[error("the approved executable {path} changed since it was loaded: {source}")]
    Changed {
        path: PathBuf,
        source: ConfinedError,
    },
    #[error("cannot read the approved executable {path}: {source}")]
    Stat {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the approved executable {path} {problem}")]
    Rules { path: PathBuf, problem: String },
    #[error("cannot start the host process: {0}")]
    Spawn(std::io::Error),
    #[error("cannot open the executable {path}: {source}")]
    Open {
        path: PathBuf,
        source: ConfinedError,
    },
}

/// Opens the canonical executable at `path` as an approved executable
/// and checks it by the rules of module docs, as the configuration's
/// auto-approval rules are checked when they load.
pub fn open_executable(
    sys: &dyn ConfinedSys,
    user: &UserIds,
    path: &Path,
) -> Result<OpenedObject, LaunchError> {
    let object = OpenedObject::open_existing(sys, path).map_err(|source| LaunchError::Open {
        path: path.to_owned(),
        source,
    })?;
    executable_rules(object.stat(), user).map_err(|problem| LaunchError::Rules {
        path: path.to_owned(),
        problem,
    })?;
    Ok(object)
}

/// What the host process gets besides its vector: an exact environment
/// (nothing is inherited from the Host Coordinator) and a working
/// directory.
#[derive(Clone, Debug)]
pub struct HostProcessSetting {
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    /// The `lazaret` binary whose `__host-command` role the command runs
    /// under ([`super::subreaper`]).
    pub supervisor: PathBuf,
}

/// The command that runs `argv` through the held `executable`, once the
/// executable is checked again (module docs). `argv[0]` must be the
/// executable's canonical path byte for byte. Standard streams are pipes.
pub fn host_command(
    sys: &dyn ConfinedSys,
    user: &UserIds,
    executable: &OpenedObject,
    argv: &[String],
    setting: &HostProcessSetting,
    report: BorrowedFd<'_>,
) -> Result<Command, LaunchError> {
    check_argv(argv)?;
    let path = executable.label();
    // Byte for byte (schemas.md), not as normalised path components.
    if argv[0].as_bytes() != path.as_os_str().as_bytes() {
        return Err(LaunchError::NotTheExecutable {
            requested: argv[0].clone(),
            approved: path,
        });
    }
    executable
        .revalidate(sys)
        .map_err(|source| LaunchError::Changed {
            path: path.clone(),
            source,
        })?;
    // The held object's current metadata: a hard link added, or the path
    // renamed over (the held object then has no link), shows here.
    let now = sys
        .stat(executable.fd())
        .map_err(|source| LaunchError::Stat {
            path: path.clone(),
            source,
        })?;
    executable_rules(&now, user).map_err(|problem| LaunchError::Rules {
        path: path.clone(),
        problem,
    })?;
    Ok(through_descriptor(executable.fd(), argv, setting, report))
}

/// `argv` run through the object behind `fd`, under the supervisor
/// ([`super::subreaper`]): argument zero as given, the descriptor and the
/// supervisor's `report` descriptor inheritable only in the forked child,
/// standard input the lifeline (a pipe whose write end the caller keeps),
/// standard output and error pipes.
fn through_descriptor(
    fd: BorrowedFd<'_>,
    argv: &[String],
    setting: &HostProcessSetting,
    report: BorrowedFd<'_>,
) -> Command {
    let raw = fd.as_raw_fd();
    let report = report.as_raw_fd();
    let supervised = super::subreaper::SupervisorArgs {
        executable_fd: raw,
        report_fd: report,
        argv: argv.iter().map(OsString::from).collect(),
    };
    let mut command = Command::new(&setting.supervisor);
    command
        .arg(super::subreaper::HOST_COMMAND_SUBCOMMAND)
        .args(supervised.to_argv())
        .env_clear()
        .envs(setting.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&setting.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: fcntl is async-signal-safe; the closure touches only the
    // descriptor numbers copied into it, open in the forked child
    // (inherited from this process, which holds them until the spawn
    // returned).
    unsafe {
        command.pre_exec(move || {
            for inherited in [raw, report] {
                let fd = BorrowedFd::borrow_raw(inherited);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            Ok(())
        });
    }
    command
}
