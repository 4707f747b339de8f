//! The routing daemon of a routed Domain (spec 3.5 "The router"; schemas
//! `GitRoutingOwnership`, slot `GitRoutingDaemon`): one process, acquired
//! by the Runtime Supervisor through its causal broker, that serves the
//! ignored-path router and, under it, the Git Sentry filter in RS's mount
//! namespace. It runs in a network namespace of its own (it needs none)
//! without network administration, reports readiness once both are
//! mounted, and serves until the write end of its exit pipe closes (RS
//! stops it, or RS died): then it unmounts both and exits. Its loss is the
//! router's loss, which RS sees on the daemon's pidfd and turns into the
//! Domain's closed failure.
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lazaret_runtime::display::escape_path;

use super::nsys::NamespaceSys;
use crate::broker::sys::TargetCommand;
use crate::broker::ChildPipes;
use crate::git_sentry::filter::{self, FilterError, IndexJudge, MountedFilter};
use crate::inherited_fd::{take_inherited, NotInherited};
use crate::network::authority::AuthoritySys;
use crate::workspace_router::{self, MountedRouter, RouterError};

/// The hidden subcommand the daemon runs as.
pub const GIT_ROUTING_SUBCOMMAND: &str = "__git-routing";

/// The daemon, as readiness errors name it.
pub const DAEMON: &str = "the routing daemon";

/// How long the daemon may take to classify the workspace and mount.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The Git Sentry filter the daemon mounts under the router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentryPlan {
    /// The canonical common git directory.
    pub common: PathBuf,
    /// The workspace's own git directory (its index is judged by the
    /// router before a rename publishes it).
    pub git_dir: PathBuf,
    /// The empty directory to mount the filter on.
    pub at: PathBuf,
}

/// What one daemon serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingPlan {
    /// The canonical workspace (the host backing).
    pub workspace: PathBuf,
    /// The Domain's Ignored Workspace State (the isolated backing).
    pub isolated: PathBuf,
    /// The empty directory to mount the router on.
    pub router_at: PathBuf,
    pub sentry: Option<SentryPlan>,
    /// Editor directories the bundle covers with a tmpfs (relative to the
    /// workspace): each gets a mount point inside the router.
    pub editor_dirs: Vec<PathBuf>,
}

/// The daemon's command line: its plan and the descriptors of its pipes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingArgs {
    pub plan: RoutingPlan,
    /// Written once (one byte) when both mounts serve.
    pub ready_fd: RawFd,
    /// Its EOF ends the daemon.
    pub exit_fd: RawFd,
}

/// Why the daemon's command line is unusable.
#[derive(Debug, thiserror::Error)]
pub enum RoutingArgsError {
    #[error("{flag} needs a value")]
    NoValue { flag: &'static str },
    #[error("{flag} needs a descriptor number, not {value:?}")]
    NotADescriptor { flag: &'static str, value: OsString },
    #[error("unknown argument {0:?}")]
    Unknown(OsString),
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("--common, --git-dir and --filter-at go together")]
    PartialSentry,
}

const WORKSPACE: &str = "--workspace";
const ISOLATED: &str = "--isolated";
const ROUTER_AT: &str = "--router-at";
const COMMON: &str = "--common";
const GIT_DIR: &str = "--git-dir";
const FILTER_AT: &str = "--filter-at";
const EDITOR_DIR: &str = "--editor-dir";
const READY_FD: &str = "--ready-fd";
const EXIT_FD: &str = "--exit-fd";

impl RoutingArgs {
    /// The arguments after the subcommand name; [`RoutingArgs::parse`]
    /// reads them back.
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut argv = Vec::new();
        let mut path = |flag: &str, p: &Path| {
            argv.push(OsString::from(flag));
            argv.push(p.as_os_str().to_owned());
        };
        path(WORKSPACE, &self.plan.workspace);
        path(ISOLATED, &self.plan.isolated);
        path(ROUTER_AT, &self.plan.router_at);
        if let Some(s) = &self.plan.sentry {
            path(COMMON, &s.common);
            path(GIT_DIR, &s.git_dir);
            path(FILTER_AT, &s.at);
        }
        for d in &self.plan.editor_dirs {
            path(EDITOR_DIR, d);
        }
        for (flag, fd) in [(READY_FD, self.ready_fd), (EXIT_FD, self.exit_fd)] {
            argv.push(flag.into());
            argv.push(fd.to_string().into());
        }
        argv
    }

    pub fn parse(argv: &[OsString]) -> Result<Self, RoutingArgsError> {
        let mut workspace = None;
        let mut isolated = None;
        let mut router_at = None;
        let (mut common, mut git_dir, mut filter_at) = (None, None, None);
        let mut editor_dirs = Vec::new();
        let (mut ready_fd, mut exit_fd) = (None, None);
        let mut rest = argv.iter();
        // Bounded by the argument count: each pass consumes two.
        while let Some(arg) = rest.next() {
            let flag = [
                WORKSPACE, ISOLATED, ROUTER_AT, COMMON, GIT_DIR, FILTER_AT, EDITOR_DIR, READY_FD,
                EXIT_FD,
            ]
            .into_iter()
            .find(|f| OsStr::new(f) == arg)
            .ok_or_else(|| RoutingArgsError::Unknown(arg.clone()))?;
            let value = rest.next().ok_or(RoutingArgsError::NoValue { flag })?;
            let path = || PathBuf::from(value);
            let fd = || {
                value
                    .to_str()
                    .and_then(|v| v.parse::<RawFd>().ok())
                    .ok_or_else(|| RoutingArgsError::NotADescriptor {
                        flag,
                        value: value.clone(),
                    })
            };
            match flag {
                WORKSPACE => workspace = Some(path()),
                ISOLATED => isolated = Some(path()),
                ROUTER_AT => router_at = Some(path()),
                COMMON => common = Some(path()),
                GIT_DIR => git_dir = Some(path()),
                FILTER_AT => filter_at = Some(path()),
                EDITOR_DIR => editor_dirs.push(path()),
                READY_FD => ready_fd = Some(fd()?),
                _ => exit_fd = Some(fd()?),
            }
        }
        let sentry = match (common, git_dir, filter_at) {
            (None, None, None) => None,
            (Some(common), Some(git_dir), Some(at)) => Some(SentryPlan {
                common,
                git_dir,
                at,
            }),
            _ => return Err(RoutingArgsError::PartialSentry),
        };
        Ok(Self {
            plan: RoutingPlan {
                workspace: workspace.ok_or(RoutingArgsError::Missing(WORKSPACE))?,
                isolated: isolated.ok_or(RoutingArgsError::Missing(ISOLATED))?,
                router_at: router_at.ok_or(RoutingArgsError::Missing(ROUTER_AT))?,
                sentry,
                editor_dirs,
            },
            ready_fd: ready_fd.ok_or(RoutingArgsError::Missing(READY_FD))?,
            exit_fd: exit_fd.ok_or(RoutingArgsError::Missing(EXIT_FD))?,
        })
    }
}

/// Why the daemon stopped serving, or never served.
#[derive(Debug, thiserror::Error)]
pub enum GitRoutingError {
    #[error(transparent)]
    Args(#[from] RoutingArgsError),
    #[error("{flag} {fd} is not an open descriptor")]
    Descriptor { flag: &'static str, fd: RawFd },
    #[error("a network namespace of its own (unshare CLONE_NEWNET): {0}")]
    OwnNetwork(#[source] io::Error),
    #[error("dropping CAP_NET_ADMIN: {0}")]
    NetworkAdministration(#[source] io::Error),
    #[error(transparent)]
    Router(#[from] RouterError),
    #[error("the mount point of editor directory {} in the router: {source}", escape_path(.path))]
    EditorDir { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error("reporting readiness: {0}")]
    Ready(#[source] io::Error),
    #[error("waiting on the exit pipe: {0}")]
    Wait(#[source] io::Error),
    #[error("the {0} stopped serving its mount")]
    StoppedServing(&'static str),
    #[error("unmounting {}: {source}", escape_path(.path))]
    Unmount { path: PathBuf, source: io::Error },
}

/// Takes ownership of the inherited descriptor `fd` named by `flag`.
fn inherited(flag: &'static str, fd: RawFd) -> Result<OwnedFd, GitRoutingError> {
    take_inherited(fd).map_err(|NotInherited { fd }| GitRoutingError::Descriptor { flag, fd })
}

/// The mounts while the daemon serves.
struct Serving {
    router: MountedRouter,
    filter: Option<MountedFilter>,
}

impl Serving {
    /// Unmounts the filter, then the router; the first failure is
    /// returned, both are attempted (an unmount that fails detaches).
    fn unmount(self) -> Result<(), GitRoutingError> {
        let filter = self.filter.map(|f| {
            let path = f.mountpoint().to_owned();
            f.unmount()
                .map_err(|source| GitRoutingError::Unmount { path, source })
        });
        let path = self.router.mountpoint().to_owned();
        let router = self
            .router
            .unmount()
            .map_err(|source| GitRoutingError::Unmount { path, source });
        filter.unwrap_or(Ok(())).and(router)
    }
}

/// Mounts the router of `plan`, the editor directories' mount points in
/// it and the Git Sentry filter, in that order (the filter judges the
/// index through the router).
fn mount(plan: &RoutingPlan) -> Result<Serving, GitRoutingError> {
    let router = workspace_router::mount(&plan.workspace, &plan.isolated, &plan.router_at)?;
    for d in &plan.editor_dirs {
        let path = plan.router_at.join(d);
        match std::fs::create_dir(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(GitRoutingError::EditorDir { path, source: e })
            }
            _ => {}
        }
    }
    let filter = match &plan.sentry {
        None => None,
        Some(s) => {
            let index = IndexJudge {
                git_dir: s.git_dir.clone(),
                admission: router.index_admission(),
            };
            Some(filter::mount(&s.common, &s.at, Some(index))?)
        }
    };
    Ok(Serving { router, filter })
}

/// The daemon: isolates itself, mounts, reports readiness, serves until
/// its exit pipe's EOF, unmounts. Returns on the first failure (what was
/// mounted is unmounted; the mounts live only in RS's private mount
/// namespace either way).
pub fn run_git_routing<N: NamespaceSys, A: AuthoritySys>(
    ns: &N,
    authority: &A,
    args: &RoutingArgs,
) -> Result<(), GitRoutingError> {
    let ready = inherited(READY_FD, args.ready_fd)?;
    let exit = inherited(EXIT_FD, args.exit_fd)?;
    let _span = tracing::info_span!("GitRoutingDaemon").entered();
    // Before any thread exists, so every request thread shares both.
    ns.unshare_network().map_err(GitRoutingError::OwnNetwork)?;
    authority
        .drop_network_administration()
        .map_err(GitRoutingError::NetworkAdministration)?;
    let serving = mount(&args.plan)?;
    let reported = rustix::io::write(&ready, b"1")
        .map_err(|e| GitRoutingError::Ready(e.into()))
        .map(drop);
    drop(ready);
    let served = reported.and_then(|()| serve(exit.as_fd(), &serving));
    let unmounted = serving.unmount();
    served.and(unmounted)
}

/// How often the daemon checks that both mounts are still served.
const SERVING_CHECK: Duration = Duration::from_secs(1);

/// Serves until `exit` reports EOF (its write end closed everywhere), or
/// until a mount is no longer served: a FUSE session whose request loop
/// ended leaves `/workspace` failing with `ENOTCONN`, which must end the
/// daemon so that RS fails the Domain closed (its loss), not go on.
fn serve(exit: BorrowedFd<'_>, serving: &Serving) -> Result<(), GitRoutingError> {
    let timeout = rustix::event::Timespec {
        tv_sec: i64::try_from(SERVING_CHECK.as_secs()).unwrap_or(1),
        tv_nsec: 0,
    };
    // Bounded by the exit pipe's EOF or a session's end; each turn waits
    // at most SERVING_CHECK.
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &exit,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => {
                let mut byte = [0u8; 1];
                match rustix::io::read(exit, &mut byte) {
                    Ok(0) => return Ok(()),
                    // The write end never writes; EINTR repeats.
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(GitRoutingError::Wait(e.into())),
                }
            }
            Err(e) => return Err(GitRoutingError::Wait(e.into())),
        }
        if !serving.router.serving() {
            return Err(GitRoutingError::StoppedServing("ignored-path router"));
        }
        if serving.filter.as_ref().is_some_and(|f| !f.serving()) {
            return Err(GitRoutingError::StoppedServing("Git Sentry filter"));
        }
    }
}

/// The daemon's command for RS's broker: `program` (this binary) with the
/// subcommand, `plan` and the daemon's ends of `pipes`, which it inherits.
pub fn daemon_command(program: &Path, plan: RoutingPlan, pipes: &ChildPipes) -> TargetCommand {
    let args = RoutingArgs {
        plan,
        ready_fd: pipes.ready_write.as_raw_fd(),
        exit_fd: pipes.exit_read.as_raw_fd(),
    };
    let mut argv = vec![
        program.as_os_str().to_owned(),
        GIT_ROUTING_SUBCOMMAND.into(),
    ];
    argv.extend(args.to_argv());
    TargetCommand {
        argv,
        inherit: vec![args.ready_fd, args.exit_fd],
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use crate::coordinator::nsys::RecordingNs;
    use crate::network::authority::RecordingAuthority;
    use std::os::unix::ffi::OsStrExt;

    fn plan(sentry: bool) -> RoutingPlan {
        RoutingPlan {
            workspace: PathBuf::from("/home/dev/project"),
            isolated: PathBuf::from(OsStr::from_bytes(b"/data/ign\xffored")),
            router_at: PathBuf::from("/run/d/gen-1/router"),
            sentry: sentry.then(|| SentryPlan {
                common: PathBuf::from("/home/dev/project/.git"),
                git_dir: PathBuf::from("/home/dev/project/.git"),
                at: PathBuf::from("/run/d/gen-1/git-sentry"),
            }),
            editor_dirs: vec![PathBuf::from(".vscode"), PathBuf::from(".idea")],
        }
    }

    /// The command line RS writes is the one the daemon reads, byte for
    /// byte (non-UTF-8 paths included), with and without the filter.
    #[test]
    fn the_command_line_round_trips() {
        for sentry in [false, true] {
            let args = RoutingArgs {
                plan: plan(sentry),
                ready_fd: 7,
                exit_fd: 9,
            };
            assert_eq!(RoutingArgs::parse(&args.to_argv()).unwrap(), args);
        }
    }

    /// A command line that names a flag without its value, half the
    /// filter, a descriptor that is no number or an unknown flag is
    /// refused with what is wrong.
    #[test]
    fn a_bad_command_line_is_refused_by_name() {
        let args = RoutingArgs {
            plan: plan(true),
            ready_fd: 7,
            exit_fd: 9,
        };
        let argv = args.to_argv();
        let without = |flag: &str| -> Vec<OsString> {
            let at = argv.iter().position(|a| a == flag).unwrap();
            argv.iter()
                .enumerate()
                .filter(|(i, _)| *i != at && *i != at + 1)
                .map(|(_, a)| a.clone())
                .collect()
        };
        let message = |argv: &[OsString]| RoutingArgs::parse(argv).unwrap_err().to_string();
        assert_eq!(message(&without(WORKSPACE)), "--workspace is missing");
        assert_eq!(message(&without(EXIT_FD)), "--exit-fd is missing");
        assert_eq!(
            message(&without(GIT_DIR)),
            "--common, --git-dir and --filter-at go together"
        );
        let mut bad_fd = argv.clone();
        let at = bad_fd.iter().position(|a| a == READY_FD).unwrap();
        bad_fd[at + 1] = "seven".into();
        assert_eq!(
            message(&bad_fd),
            "--ready-fd needs a descriptor number, not \"seven\""
        );
        let mut unknown = argv.clone();
        unknown.push("--bogus".into());
        assert_eq!(message(&unknown), "unknown argument \"--bogus\"");
        let mut dangling = argv;
        dangling.push(EDITOR_DIR.into());
        assert_eq!(message(&dangling), "--editor-dir needs a value");
    }

    /// The daemon isolates itself before it mounts anything: its own
    /// network namespace, then no network administration; a failure of
    /// either ends it before a mount.
    #[test]
    fn the_daemon_leaves_the_network_before_it_mounts() {
        let ChildPipes {
            ready_read,
            ready_write,
            exit_read,
            exit_write: _exit_write,
        } = ChildPipes::new().unwrap();
        let mut args = RoutingArgs {
            plan: plan(false),
            ready_fd: ready_write.as_raw_fd(),
            exit_fd: exit_read.as_raw_fd(),
        };
        // The descriptors pass to the daemon, which owns them from here.
        std::mem::forget((ready_write, exit_read));
        let ns = RecordingNs::failing("unshare_network");
        let authority = RecordingAuthority::default();
        let err = run_git_routing(&ns, &authority, &args).unwrap_err();
        assert!(matches!(err, GitRoutingError::OwnNetwork(_)), "{err}");
        assert_eq!(ns.calls(), ["unshare_network"]);
        assert!(authority.calls.lock().unwrap().is_empty());
        // Its descriptors were taken and closed: the readiness pipe ends
        // without a report.
        let got = crate::broker::await_ready_byte(DAEMON, &ready_read, READY_TIMEOUT, || Ok(()));
        assert!(
            matches!(got, Err(crate::broker::ReadinessError::Silent { .. })),
            "{got:?}"
        );
        // Descriptors already closed are refused by name.
        args.ready_fd = 1_000_000;
        let err = run_git_routing(&RecordingNs::default(), &authority, &args).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--ready-fd 1000000 is not an open descriptor"
        );
    }
}
