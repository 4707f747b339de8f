//! The repository-owned wrapper (spec 3.3 steps 3 and 8): a hidden subcommand
//! of the `lazaret` binary that blocks on the inherited launch barrier before
//! any target work. EOF or a malformed release exits without exec. After a
//! valid release it arms parent death, rechecks its parent's pidfs authority
//! and execs the target in place.
use super::sys::WrapperSys;
use super::AuthorityError;
use crate::crash_point::crash_point;
use crate::process_identity::pidfs_authority;
use crate::role_argv::{ArgProblem, NamedArgs};
use lazaret_runtime::records::process::{
    BootId, HostPid, PidfsDev, PidfsIno, PidfsProcessAuthorityV1,
};
use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;

/// The hidden `lazaret` subcommand that runs [`run_wrapper`].
pub const WRAPPER_SUBCOMMAND: &str = "__wrapper";

const RELEASE_MAGIC: &[u8] = b"lazaret-launch-barrier-release-v1\0";
const RELEASE_LEN: usize = RELEASE_MAGIC.len() + 16 + 8 + 8;

/// The release message names the wrapper's own pidfs authority, so a release
/// meant for another acquisition is malformed here.
pub fn release_message(child: &PidfsProcessAuthorityV1) -> Vec<u8> {
    let mut out = Vec::with_capacity(RELEASE_LEN);
    out.extend_from_slice(RELEASE_MAGIC);
    out.extend_from_slice(&child.boot_id.0);
    out.extend_from_slice(&child.pidfs_st_dev.0.to_be_bytes());
    out.extend_from_slice(&child.pidfs_st_ino.0.to_be_bytes());
    out
}

fn parse_release(bytes: &[u8]) -> Option<PidfsProcessAuthorityV1> {
    if bytes.len() != RELEASE_LEN {
        return None;
    }
    let rest = bytes.strip_prefix(RELEASE_MAGIC)?;
    let (boot, rest) = rest.split_at(16);
    let (dev, ino) = rest.split_at(8);
    Some(PidfsProcessAuthorityV1 {
        boot_id: BootId(boot.try_into().ok()?),
        pidfs_st_dev: PidfsDev(u64::from_be_bytes(dev.try_into().ok()?)),
        pidfs_st_ino: PidfsIno(u64::from_be_bytes(ino.try_into().ok()?)),
    })
}

/// The wrapper's command line after the hidden subcommand name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperArgs {
    pub barrier_fd: RawFd,
    pub parent: PidfsProcessAuthorityV1,
    pub target: Vec<OsString>,
}

#[derive(Debug, thiserror::Error)]
#[error("wrapper argument {argument}: {problem} (usage: --barrier-fd N --parent-boot UUID --parent-dev N --parent-ino N -- TARGET...)")]
pub struct WrapperArgsError {
    pub argument: &'static str,
    pub problem: String,
}

impl From<ArgProblem> for WrapperArgsError {
    fn from(p: ArgProblem) -> Self {
        Self {
            argument: p.argument,
            problem: p.problem,
        }
    }
}

impl WrapperArgs {
    pub fn to_argv(
        barrier_fd: RawFd,
        parent: &PidfsProcessAuthorityV1,
        target: &[OsString],
    ) -> Vec<OsString> {
        let mut argv: Vec<OsString> = [
            "--barrier-fd".to_owned(),
            barrier_fd.to_string(),
            "--parent-boot".to_owned(),
            parent.boot_id.to_string(),
            "--parent-dev".to_owned(),
            parent.pidfs_st_dev.0.to_string(),
            "--parent-ino".to_owned(),
            parent.pidfs_st_ino.0.to_string(),
            "--".to_owned(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        argv.extend(target.iter().cloned());
        argv
    }

    pub fn parse(argv: &[OsString]) -> Result<Self, WrapperArgsError> {
        let args = NamedArgs::parse(
            argv,
            [
                "--barrier-fd",
                "--parent-boot",
                "--parent-dev",
                "--parent-ino",
            ],
        )?;
        let barrier_fd = args
            .get(0)?
            .parse::<RawFd>()
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(|| args.refuse(0, "not a descriptor number"))?;
        let boot = BootId::parse(args.get(1)?).map_err(|e| args.refuse(1, &e.to_string()))?;
        Ok(Self {
            barrier_fd,
            parent: PidfsProcessAuthorityV1 {
                boot_id: boot,
                pidfs_st_dev: PidfsDev(args.number(2)?),
                pidfs_st_ino: PidfsIno(args.number(3)?),
            },
            target: args.target,
        })
    }
}

/// Why the wrapper exits without executing its target.
#[derive(Debug, thiserror::Error)]
pub enum WrapperFailure {
    #[error("cannot read the launch barrier: {0}")]
    BarrierRead(io::Error),
    #[error("the launch barrier closed without a release")]
    BarrierClosed,
    #[error("the launch barrier release is malformed ({len} bytes)")]
    MalformedRelease { len: usize },
    #[error("cannot establish this wrapper's own pidfs identity: {0}")]
    OwnIdentity(#[source] AuthorityError),
    #[error("the release names {named:?}, not this wrapper ({own:?})")]
    ReleaseForAnotherProcess {
        named: PidfsProcessAuthorityV1,
        own: PidfsProcessAuthorityV1,
    },
    #[error("cannot arm the parent-death signal: {0}")]
    ArmParentDeath(io::Error),
    #[error("the parent is not the expected owner: there is no parent in this PID namespace")]
    NoParent,
    #[error("the parent is not the expected owner: PID {pid} has authority {observed:?}, expected {expected:?}")]
    ParentMismatch {
        pid: u32,
        observed: PidfsProcessAuthorityV1,
        expected: PidfsProcessAuthorityV1,
    },
    #[error("the parent's pidfs authority: {0}")]
    ParentAuthority(#[source] AuthorityError),
    #[error("exec of the target failed: {0}")]
    Exec(io::Error),
}

impl WrapperFailure {
    /// Distinct exit statuses, so the broker's `waitid` tells them apart.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::BarrierRead(_) | Self::BarrierClosed => 121,
            Self::MalformedRelease { .. } => 122,
            Self::OwnIdentity(_) | Self::ReleaseForAnotherProcess { .. } => 123,
            Self::ArmParentDeath(_) => 124,
            Self::NoParent | Self::ParentMismatch { .. } | Self::ParentAuthority(_) => 125,
            Self::Exec(_) => 127,
        }
    }
}

fn authority_of<S: WrapperSys>(
    sys: &S,
    pid: HostPid,
) -> Result<PidfsProcessAuthorityV1, AuthorityError> {
    let boot = sys.boot_id().map_err(AuthorityError::BootId)?;
    let pidfd = sys
        .pidfd_open(pid)
        .map_err(|source| AuthorityError::PidfdOpen { pid: pid.0, source })?;
    Ok(pidfs_authority(sys, &pidfd, boot)?)
}

/// Runs the wrapper. Returns only when the target must not run.
pub fn run_wrapper<S: WrapperSys>(sys: &S, args: &WrapperArgs) -> WrapperFailure {
    if let Err(failure) = await_release(sys, args) {
        return failure;
    }
    WrapperFailure::Exec(sys.exec(&args.target))
}

/// Steps 3 and 8 up to the target: blocks on the barrier, checks the
/// release names this process, arms parent death and rechecks the parent.
/// `Ok` means the target may run now, in this process (the caller execs it,
/// or runs the exec client's own first step in place: `lazaret __wrapper`
/// does that for `lazaret __enter`, one exec of the binary fewer).
pub fn await_release<S: WrapperSys>(sys: &S, args: &WrapperArgs) -> Result<(), WrapperFailure> {
    // Block before any target work until the broker releases or closes.
    let bytes = match sys.read_barrier(args.barrier_fd, RELEASE_LEN + 1) {
        Ok(bytes) => bytes,
        Err(e) => return Err(WrapperFailure::BarrierRead(e)),
    };
    if bytes.is_empty() {
        return Err(WrapperFailure::BarrierClosed);
    }
    let Some(named) = parse_release(&bytes) else {
        return Err(WrapperFailure::MalformedRelease { len: bytes.len() });
    };
    let own = authority_of(sys, sys.own_pid()).map_err(WrapperFailure::OwnIdentity)?;
    if named != own {
        return Err(WrapperFailure::ReleaseForAnotherProcess { named, own });
    }
    sys.arm_parent_death()
        .map_err(WrapperFailure::ArmParentDeath)?;
    // Recheck after arming: if the parent died before the prctl, getppid now
    // names a reaper whose pidfs authority differs.
    let Some(parent) = sys.parent_pid() else {
        return Err(WrapperFailure::NoParent);
    };
    match authority_of(sys, parent) {
        Ok(observed) if observed == args.parent => {}
        Ok(observed) => {
            return Err(WrapperFailure::ParentMismatch {
                pid: parent.0,
                observed,
                expected: args.parent,
            })
        }
        Err(e) => return Err(WrapperFailure::ParentAuthority(e)),
    }
    crash_point!(
        Wrapper,
        crate::crash_point::target_label(&args.target),
        "before-exec",
        ""
    );
    Ok(())
}
