//! The runsc OCI bundle's `config.json`, built purely from a [`BundlePlan`]
//! (spec 3.1, 3.5; SR-3, SR-4, SR-12).
//!
//! - SR-12: private PID, IPC, UTS and mount namespaces; the network namespace
//!   is joined by the given path (the Runtime Supervisor's); no user
//!   namespace, no uid/gid mappings, no other namespace path.
//! - SR-3: the only host paths are the prepared rootfs, the canonical
//!   workspace at `/workspace`, the Git Sentry mounts below, the State
//!   Anchors and volumes, and the generation's own files: its network files
//!   and its sandbox credential bundle at [`CREDENTIALS`] (spec 3.3).
//! - PID 1's capability sets are empty and `noNewPrivileges` is set; session
//!   processes get [`SESSION_CAPABILITIES`] (with `noNewPrivileges`).
//! - Git Sentry (spec 3.5, SR-4), see [`GitSentry`]: the host repository's
//!   common git directory is served through the Git Sentry filter
//!   (`BundlePlan::git_filter`, guards in [`crate::git_sentry`]), which
//!   refuses creating, writing, renaming, removing or linking any file Git
//!   reads configuration, hooks or the common-directory location from. The
//!   `.git` (directory, or the linked worktree's `.git` file) is its own
//!   mount point, so `rename`/`rmdir` of `.git` fail with `EBUSY` and the
//!   repository cannot be swapped for another one; its existing `config`
//!   (and the other such files) are also read-only bind mounts of the host
//!   files; `hooks` is a sandbox-local tmpfs. Editor directories that can
//!   auto-run code (`.vscode`, `.idea`) are hidden behind tmpfs.
//!
//! Every mount destination outside the workspace is one of the fixed
//! [`MOUNT_POINTS`], which the preparer creates in the prepared lower: runsc
//! creates a missing destination in the host rootfs directory (even with an
//! in-memory overlay), which would write into the immutable lower.

use crate::config::DestinationClass;
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxNamespaceBuilder, LinuxNamespaceType,
    Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType, ProcessBuilder, RootBuilder, Spec,
    SpecBuilder, UserBuilder,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Where the workspace appears inside the sandbox.
pub const WORKSPACE: &str = "/workspace";
/// Where a linked worktree's common Git directory appears inside.
pub const GIT_COMMON: &str = "/.lazaret/git-common";
/// Where the directory holding the static PID 1 (`lazaret-init`) appears.
pub const INIT_DIR: &str = "/.lazaret/sbin";
/// Where the sandbox's bounded scratch tmpfs is mounted.
pub const TMP: &str = "/tmp";
/// The protected resolver configuration (spec 3.7): the synthetic DNS
/// endpoint only.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// Where the sandbox reads its effective network policy (`network`).
pub const NETWORK_INFO_DIR: &str = "/etc/lazaret";
/// The fixed credential path and the session capability's environment
/// variable (spec 3.3), shared with the Escalation Client that reads them
/// inside the sandbox. A profile's `env` cannot replace the capability.
pub use lazaret_wire::client::{CREDENTIALS, SESSION_CAPABILITY_ENV};
/// The Escalation Mailbox's place inside the sandbox (spec 3.8), shared
/// with the Escalation Client.
pub use lazaret_wire::client::{SANDBOX_MAILBOX, SANDBOX_REQUESTS};
/// Directories every prepared lower must contain as mount points.
pub const MOUNT_POINTS: [&str; 6] = [
    WORKSPACE,
    GIT_COMMON,
    INIT_DIR,
    TMP,
    NETWORK_INFO_DIR,
    SANDBOX_MAILBOX,
];
/// Files every prepared lower must contain as (regular, empty) mount points.
pub const MOUNT_FILES: [&str; 2] = [RESOLV_CONF, CREDENTIALS];

/// Per-Domain resource bounds (spec README decision "Resource bounds": fixed
/// defaults, no configuration keys in v1, enforced outside the agent's
/// control). Measured with runsc 0.0~20240729 rootless (docs/resources.md).
///
/// The guest task ceiling: OCI `RLIMIT_NPROC`, soft and hard, for PID 1 and
/// so for every process (`runsc exec` processes inherit the container's
/// limits). gVisor counts it per guest user, threads included; the guest
/// cannot raise it. A fork bomb gets `EAGAIN`.
pub const GUEST_TASKS_MAX: u64 = 1024;
/// Guest open files: soft and hard `RLIMIT_NOFILE` of every process (the
/// common container defaults; a tool may raise its soft limit up to the
/// hard one).
pub const GUEST_FILES_SOFT: u64 = 1024;
/// See [`GUEST_FILES_SOFT`].
pub const GUEST_FILES_HARD: u64 = 524_288;
/// The size of the sandbox's `/tmp` (gVisor enforces tmpfs `size=`: a
/// write past it fails with `ENOSPC`).
pub const TMP_SIZE: &str = "512m";
/// The size of `/dev/shm`.
pub const SHM_SIZE: &str = "64m";
/// Lazaret's own directory inside the sandbox: every product mount outside
/// the workspace ([`GIT_COMMON`], [`INIT_DIR`]) lies beneath it.
pub const PRODUCT_DIR: &str = "/.lazaret";

/// The protected destinations of the production sandbox layout besides
/// `/workspace`, which [`crate::config::SandboxLayoutV1`] always holds (spec 3.2; schemas.md
/// "Trusted host configuration": the constructor "owned by sandbox-layout
/// construction" supplies "every control, credential, mailbox, proc, sys,
/// dev, runtime, and other product-owned sandbox mount destination").
/// Sandbox-layout construction is this module: every destination a bundle
/// mounts lies at or beneath one of these (tested), so no persistent path or
/// volume can shadow or be shadowed by a product mount.
pub const PROTECTED_DESTINATIONS: [(&str, DestinationClass); 8] = [
    ("/proc", DestinationClass::Protected),
    ("/sys", DestinationClass::Protected),
    // `/dev/pts` and `/dev/shm` are beneath it.
    ("/dev", DestinationClass::Protected),
    (PRODUCT_DIR, DestinationClass::Protected),
    // runsc mounts its own tmpfs here when the image's /tmp is empty (as in
    // the default image) and the bundle names no /tmp: a persistent /tmp or
    // a volume in it would be hidden behind that tmpfs.
    ("/tmp", DestinationClass::Protected),
    // Reserved for Lazaret's own runtime files inside the sandbox (the
    // Escalation Mailbox is beneath PRODUCT_DIR).
    ("/run/lazaret", DestinationClass::Protected),
    // The protected resolver configuration (spec 3.7): an exact file mount
    // that may replace a child of a persistent `/etc`.
    (RESOLV_CONF, DestinationClass::TransientChild),
    // The effective network policy, read-only (spec 3.7).
    (NETWORK_INFO_DIR, DestinationClass::TransientChild),
];

/// The capabilities of every session process (`runsc exec --process`): the
/// conventional container set, so package managers can change ownership and
/// switch users (spec README decision "Sandbox capabilities", SR-5). Never
/// `CAP_NET_ADMIN`, `CAP_NET_RAW` or `CAP_SYS_ADMIN` (tested); with
/// `noNewPrivileges` no exec can gain more. PID 1 (`lazaret-init`) keeps
/// every set empty: it only reaps.
pub const SESSION_CAPABILITIES: [&str; 12] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_SETFCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
];

/// Capabilities no sandbox process specification may hold (SR-5: network
/// administration; raw sockets and SYS_ADMIN by the spec README decision).
pub const NEVER_GRANTED: [&str; 3] = ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN"];

/// The Git Sentry's view of the workspace's repository, resolved on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitSentry {
    /// The workspace is not the top of a Git working tree.
    NoRepository,
    /// `<workspace>/.git` is the repository directory.
    Repository {
        /// Host files inside `.git` that must be read-only: `config` always,
        /// plus `commondir`/`config.worktree` when present.
        read_only: Vec<PathBuf>,
    },
    /// `<workspace>/.git` is a file naming a linked worktree's git directory.
    /// Inside, the common directory is mounted at [`GIT_COMMON`] and the
    /// host `.git` file is covered read-only by `git_file`, a Lazaret-owned
    /// file holding [`worktree_git_file`]'s text.
    LinkedWorktree {
        /// The canonical common directory (`<main>/.git`).
        common_dir: PathBuf,
        /// The worktree's git directory relative to `common_dir`
        /// (`worktrees/<name>`; empty for a `--separate-git-dir` repository).
        worktree_dir: PathBuf,
        /// Host files that must be read-only: the common `config`, the
        /// worktree git directory's `commondir` and `gitdir`, and
        /// `config.worktree` files when present.
        read_only: Vec<PathBuf>,
    },
}

/// The `.git` file the sandbox sees in a linked worktree: it names the
/// worktree's git directory under [`GIT_COMMON`].
pub fn worktree_git_file(worktree_dir: &Path) -> String {
    format!(
        "gitdir: {}\n",
        Path::new(GIT_COMMON).join(worktree_dir).display()
    )
}

/// Everything `config.json` is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundlePlan {
    /// The prepared lower (host path).
    pub rootfs: PathBuf,
    /// The canonical workspace (host path).
    pub workspace: PathBuf,
    /// Where the ignored-path router of the workspace is mounted (host
    /// path; spec 3.5, SR-13): bound at [`WORKSPACE`] in place of the
    /// workspace itself. `None` when `isolate_gitignored` is false.
    pub router: Option<PathBuf>,
    /// The network namespace to join (e.g. `/proc/<rs pid>/ns/net`).
    pub netns: PathBuf,
    /// PID 1's argv.
    pub args: Vec<String>,
    /// PID 1's environment.
    pub env: Vec<String>,
    /// The sandbox host name.
    pub hostname: String,
    /// The Git Sentry plan.
    pub git: GitSentry,
    /// Editor configuration directories present in the workspace, relative
    /// to it (e.g. `.vscode`).
    pub editor_dirs: Vec<PathBuf>,
    /// For a linked worktree: the Lazaret-owned host file holding
    /// [`worktree_git_file`]'s text, bound read-only over `/workspace/.git`.
    pub git_file: Option<PathBuf>,
    /// Where the Git Sentry filter of the common git directory is mounted
    /// (host path): bound in place of the git directory. Required whenever
    /// there is a repository.
    pub git_filter: Option<PathBuf>,
    /// The generation's network files (host directory, spec 3.7): its
    /// `resolv.conf` is bound read-only at [`RESOLV_CONF`] and its `lazaret`
    /// directory (holding `network`, the effective policy for an agent to
    /// read) at [`NETWORK_INFO_DIR`].
    pub network_files: PathBuf,
    /// The generation's sandbox credential bundle (host file, spec 3.3):
    /// bound read-only at [`CREDENTIALS`].
    pub credentials: PathBuf,
    /// The generation's Escalation Mailbox (host directory holding
    /// `requests/` and `results/`, spec 3.8) when the profile enables
    /// escalation: bound read-only at [`SANDBOX_MAILBOX`], its `requests`
    /// read-write at [`SANDBOX_REQUESTS`].
    pub mailbox: Option<PathBuf>,
    /// The State Anchors (spec 3.6, FR-4): `(persistent path, host mount
    /// point)`, each bound read-write at its path. They come before every
    /// mount that may lie beneath a persistent path (the resolver
    /// configuration and network directory beneath `/etc`).
    pub state_anchors: Vec<(PathBuf, PathBuf)>,
    /// The developer volumes (schemas "volume"), each strictly beneath one
    /// State Anchor's path and bound after the anchors.
    pub volumes: Vec<BundleVolume>,
}

/// A developer volume: its host source bound at `container`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleVolume {
    pub container: PathBuf,
    pub host: PathBuf,
    pub read_only: bool,
}

/// Errors of building the bundle configuration.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A path that must be absolute is not.
    #[error("bundle {what} path {path} must be absolute and normalised")]
    NotAbsolute { what: &'static str, path: PathBuf },
    /// A Git Sentry path is outside the places it may be.
    #[error("Git Sentry path {path} is outside {allowed}")]
    OutsideRepository { path: PathBuf, allowed: PathBuf },
    /// An editor directory that is not a plain relative name.
    #[error("editor directory {path} must be a relative path inside the workspace")]
    BadEditorDir { path: PathBuf },
    /// No program for PID 1.
    #[error("the sandbox's PID 1 needs a program (argv is empty)")]
    EmptyArgs,
    /// A linked worktree without its `.git` file, or a worktree directory
    /// that is not a plain relative path.
    #[error("linked worktree plan needs a Lazaret-owned .git file and a relative worktree directory (got {0})")]
    WorktreePlan(String),
    /// A repository without the Git Sentry filter to serve it.
    #[error("the Git Sentry plan needs the filter's absolute mount point (got {0:?})")]
    NoFilter(Option<PathBuf>),
    /// A volume not strictly beneath a State Anchor's path: it would land
    /// in the shared prepared lower or over a persistent path itself.
    #[error("volume {0} is not strictly beneath a persistent path of the plan")]
    VolumeOutsideAnchors(PathBuf),
    /// Two mounts would land on one destination.
    #[error("two bundle mounts target {0}")]
    DuplicateMount(PathBuf),
    /// oci-spec refused a value.
    #[error("cannot build the OCI {what}: {detail}")]
    Spec { what: &'static str, detail: String },
}

fn spec_err(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> BundleError {
    move |e| BundleError::Spec {
        what,
        detail: e.to_string(),
    }
}

fn normal_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components().all(|c| {
            !matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::CurDir
            )
        })
}

fn mount(dest: &Path, typ: &str, source: &Path, options: &[&str]) -> Result<Mount, BundleError> {
    MountBuilder::default()
        .destination(dest)
        .typ(typ)
        .source(source)
        .options(options.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        .build()
        .map_err(spec_err("mount"))
}

fn system_mounts() -> Result<Vec<Mount>, BundleError> {
    let none = Path::new("none");
    Ok(vec![
        mount(
            Path::new("/proc"),
            "proc",
            Path::new("proc"),
            &["nosuid", "noexec", "nodev"],
        )?,
        mount(
            Path::new("/dev"),
            "tmpfs",
            Path::new("tmpfs"),
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        )?,
        mount(
            Path::new("/dev/pts"),
            "devpts",
            Path::new("devpts"),
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
            ],
        )?,
        mount(
            Path::new("/dev/shm"),
            "tmpfs",
            Path::new("shm"),
            &[
                "nosuid",
                "noexec",
                "nodev",
                "mode=1777",
                &format!("size={SHM_SIZE}"),
            ],
        )?,
        mount(
            Path::new(TMP),
            "tmpfs",
            Path::new("tmpfs"),
            &["nosuid", "nodev", "mode=1777", &format!("size={TMP_SIZE}")],
        )?,
        mount(
            Path::new("/sys"),
            "sysfs",
            none,
            &["nosuid", "noexec", "nodev", "ro"],
        )?,
    ])
}

/// The workspace and Git Sentry mounts, parents before children.
fn workspace_mounts(plan: &BundlePlan) -> Result<Vec<Mount>, BundleError> {
    let rw = ["bind", "rw", "nosuid", "nodev"];
    let ro = ["bind", "ro", "nosuid", "nodev"];
    let transient = ["nosuid", "nodev", "mode=755"];
    let ws = Path::new(WORKSPACE);
    let source = match &plan.router {
        Some(router) if normal_absolute(router) => router,
        Some(router) => {
            return Err(BundleError::NotAbsolute {
                what: "ignored-path router",
                path: router.clone(),
            })
        }
        None => &plan.workspace,
    };
    let mut m = vec![mount(ws, "bind", source, &rw)?];
    let dot_git = plan.workspace.join(".git");
    let filter = || {
        plan.git_filter
            .as_deref()
            .filter(|f| normal_absolute(f))
            .ok_or_else(|| BundleError::NoFilter(plan.git_filter.clone()))
    };
    match &plan.git {
        GitSentry::NoRepository => {}
        GitSentry::Repository { read_only } => {
            // The filter of .git as its own mount: rename/rmdir of .git ->
            // EBUSY, and the filter refuses every rebinding of a guarded name.
            let inside = ws.join(".git");
            m.push(mount(&inside, "bind", filter()?, &rw)?);
            git_children(&mut m, &dot_git, &inside, read_only)?;
        }
        GitSentry::LinkedWorktree {
            common_dir,
            worktree_dir,
            read_only,
        } => {
            if !normal_absolute(common_dir) {
                return Err(BundleError::NotAbsolute {
                    what: "Git common directory",
                    path: common_dir.clone(),
                });
            }
            let plain = worktree_dir
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            let Some(git_file) = plan
                .git_file
                .as_ref()
                .filter(|f| normal_absolute(f) && plain)
            else {
                return Err(BundleError::WorktreePlan(format!(
                    "{:?}, {}",
                    plan.git_file,
                    worktree_dir.display()
                )));
            };
            // The host .git file is covered read-only by Lazaret's own: it
            // can be neither rewritten to name another git directory nor
            // renamed away.
            m.push(mount(&ws.join(".git"), "bind", git_file, &ro)?);
            let inside = Path::new(GIT_COMMON);
            m.push(mount(inside, "bind", filter()?, &rw)?);
            git_children(&mut m, common_dir, inside, read_only)?;
        }
    }
    for d in &plan.editor_dirs {
        if d.is_absolute()
            || d.components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(BundleError::BadEditorDir { path: d.clone() });
        }
        m.push(mount(&ws.join(d), "tmpfs", Path::new("tmpfs"), &transient)?);
    }
    Ok(m)
}

/// The read-only files and the hooks tmpfs under a git directory mounted at
/// `inside`.
fn git_children(
    m: &mut Vec<Mount>,
    host: &Path,
    inside: &Path,
    read_only: &[PathBuf],
) -> Result<(), BundleError> {
    let ro = ["bind", "ro", "nosuid", "nodev"];
    for f in read_only {
        match f.strip_prefix(host) {
            Ok(rel) if normal_absolute(f) => m.push(mount(&inside.join(rel), "bind", f, &ro)?),
            _ => {
                return Err(BundleError::OutsideRepository {
                    path: f.clone(),
                    allowed: host.to_owned(),
                })
            }
        }
    }
    m.push(mount(
        &inside.join("hooks"),
        "tmpfs",
        Path::new("tmpfs"),
        &["nosuid", "nodev", "mode=755"],
    )?);
    Ok(())
}

/// Builds `config.json` for `plan`.
pub fn build_spec(plan: &BundlePlan) -> Result<Spec, BundleError> {
    for (what, p) in [
        ("rootfs", &plan.rootfs),
        ("workspace", &plan.workspace),
        ("network namespace", &plan.netns),
    ] {
        if !normal_absolute(p) {
            return Err(BundleError::NotAbsolute {
                what,
                path: p.clone(),
            });
        }
    }
    if plan.args.is_empty() {
        return Err(BundleError::EmptyArgs);
    }
    for (what, p) in [
        ("network files", &plan.network_files),
        ("credentials", &plan.credentials),
    ] {
        if !normal_absolute(p) {
            return Err(BundleError::NotAbsolute {
                what,
                path: p.clone(),
            });
        }
    }
    let mut mounts = system_mounts()?;
    for (path, source) in &plan.state_anchors {
        for (what, p) in [("persistent", path), ("State Anchor mount point", source)] {
            if !normal_absolute(p) {
                return Err(BundleError::NotAbsolute {
                    what,
                    path: p.clone(),
                });
            }
        }
        mounts.push(mount(path, "bind", source, &["bind", "rw"])?);
    }
    // Schemas "volume": each inside an anchor, so after the anchors.
    for v in &plan.volumes {
        for (what, p) in [("volume", &v.container), ("volume source", &v.host)] {
            if !normal_absolute(p) {
                return Err(BundleError::NotAbsolute {
                    what,
                    path: p.clone(),
                });
            }
        }
        let inside = plan
            .state_anchors
            .iter()
            .any(|(path, _)| v.container != *path && v.container.starts_with(path));
        if !inside {
            return Err(BundleError::VolumeOutsideAnchors(v.container.clone()));
        }
        let access = if v.read_only { "ro" } else { "rw" };
        mounts.push(mount(
            &v.container,
            "bind",
            &v.host,
            &["bind", access, "nosuid", "nodev"],
        )?);
    }
    mounts.extend(workspace_mounts(plan)?);
    let ro = ["bind", "ro", "nosuid", "nodev", "noexec"];
    mounts.push(mount(
        Path::new(RESOLV_CONF),
        "bind",
        &plan.network_files.join("resolv.conf"),
        &ro,
    )?);
    mounts.push(mount(
        Path::new(NETWORK_INFO_DIR),
        "bind",
        &plan.network_files.join("lazaret"),
        &ro,
    )?);
    mounts.push(mount(
        Path::new(CREDENTIALS),
        "bind",
        &plan.credentials,
        &ro,
    )?);
    if let Some(mailbox) = &plan.mailbox {
        if !normal_absolute(mailbox) {
            return Err(BundleError::NotAbsolute {
                what: "mailbox",
                path: mailbox.clone(),
            });
        }
        // Spec 3.8: results read-only, requests writable; neither executable.
        mounts.push(mount(Path::new(SANDBOX_MAILBOX), "bind", mailbox, &ro)?);
        mounts.push(mount(
            Path::new(SANDBOX_REQUESTS),
            "bind",
            &mailbox.join("requests"),
            &["bind", "rw", "nosuid", "nodev", "noexec"],
        )?);
    }
    let mut seen = HashSet::new();
    for m in &mounts {
        if !seen.insert(m.destination().clone()) {
            return Err(BundleError::DuplicateMount(m.destination().clone()));
        }
    }
    let no_caps: HashSet<Capability> = HashSet::new();
    let caps = LinuxCapabilitiesBuilder::default()
        .bounding(no_caps.clone())
        .effective(no_caps.clone())
        .inheritable(no_caps.clone())
        .permitted(no_caps.clone())
        .ambient(no_caps)
        .build()
        .map_err(spec_err("capabilities"))?;
    // Spec README "Resource bounds": the guest task ceiling.
    let nproc = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitNproc)
        .soft(GUEST_TASKS_MAX)
        .hard(GUEST_TASKS_MAX)
        .build()
        .map_err(spec_err("rlimits"))?;
    let nofile = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitNofile)
        .soft(GUEST_FILES_SOFT)
        .hard(GUEST_FILES_HARD)
        .build()
        .map_err(spec_err("rlimits"))?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .rlimits(vec![nproc, nofile])
        .user(
            UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .build()
                .map_err(spec_err("user"))?,
        )
        .args(plan.args.clone())
        .env(plan.env.clone())
        .cwd(WORKSPACE)
        .capabilities(caps)
        .no_new_privileges(true)
        .build()
        .map_err(spec_err("process"))?;
    let ns = |typ, path: Option<&Path>| {
        let b = LinuxNamespaceBuilder::default().typ(typ);
        match path {
            Some(p) => b.path(p).build(),
            None => b.build(),
        }
        .map_err(spec_err("namespace"))
    };
    let linux = LinuxBuilder::default()
        .namespaces(vec![
            ns(LinuxNamespaceType::Pid, None)?,
            ns(LinuxNamespaceType::Ipc, None)?,
            ns(LinuxNamespaceType::Uts, None)?,
            ns(LinuxNamespaceType::Mount, None)?,
            ns(LinuxNamespaceType::Network, Some(&plan.netns))?,
        ])
        .build()
        .map_err(spec_err("linux section"))?;
    // The root stays writable for runsc's transient overlay until State
    // Anchors exist; the prepared lower itself is never written (runsc is
    // started with an in-memory overlay).
    let root = RootBuilder::default()
        .path(&plan.rootfs)
        .readonly(false)
        .build()
        .map_err(spec_err("root"))?;
    SpecBuilder::default()
        .version("1.0.2")
        .root(root)
        .hostname(plan.hostname.clone())
        .process(process)
        .mounts(mounts)
        .linux(linux)
        .build()
        .map_err(spec_err("spec"))
}

#[cfg(test)]
mod tests;
