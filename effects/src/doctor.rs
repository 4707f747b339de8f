//! `lazaret doctor`'s host checks (DX-5): kernel and architecture,
//! runsc and its version, the uid-map helpers and a subordinate range of at
//! least 65536 IDs, slirp4netns, nft (nftables), a usable `/dev/fuse` and fuse-overlayfs, and
//! `XDG_RUNTIME_DIR`. Each problem carries the exact fix. It also advises
//! host Git's `safe.bareRepository = explicit` (spec 3.5), without failing.
//! All host access goes through [`DoctorHost`].

use crate::userns::{lowest_range, Identity, MapKind};
use std::path::{Path, PathBuf};

/// Oldest supported kernel (spec: Linux 6.9).
pub const MIN_KERNEL: (u32, u32) = (6, 9);
/// Oldest supported runsc snapshot date (the bookworm-backports build).
pub const MIN_RUNSC: u32 = 20240101;

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// What was found.
    pub found: String,
    /// `None` when fine; otherwise the exact fix.
    pub fix: Option<String>,
    /// A recommended setting that Lazaret does not need to work but that
    /// closes a risk on the host (never a failed check).
    pub advice: Option<String>,
}

impl Check {
    fn ok(name: &'static str, found: impl Into<String>) -> Check {
        Check {
            name,
            found: found.into(),
            fix: None,
            advice: None,
        }
    }
    fn problem(name: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            found: found.into(),
            fix: Some(fix.into()),
            advice: None,
        }
    }
    fn advise(name: &'static str, found: impl Into<String>, advice: impl Into<String>) -> Check {
        Check {
            name,
            found: found.into(),
            fix: None,
            advice: Some(advice.into()),
        }
    }
    /// Whether the check passed.
    pub fn passed(&self) -> bool {
        self.fix.is_none()
    }
}

/// Metadata the checks need about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// Owner uid.
    pub uid: u32,
    /// Permission bits including setuid.
    pub mode: u32,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// The host as the doctor sees it.
pub trait DoctorHost {
    /// `uname -r`.
    fn kernel_release(&self) -> String;
    /// `uname -m`.
    fn machine(&self) -> String;
    /// The invoking identity, or why it could not be found.
    fn identity(&self) -> Result<Identity, String>;
    /// The first `PATH` entry holding an executable `program`.
    fn which(&self, program: &str) -> Option<PathBuf>;
    /// Standard output of `program args`, or why it failed.
    fn output(&self, program: &Path, args: &[&str]) -> Result<String, String>;
    /// A text file's contents, or why it could not be read.
    fn read(&self, path: &Path) -> Result<String, String>;
    /// Opens a device read-write and closes it again.
    fn open_rw(&self, path: &Path) -> Result<(), std::io::ErrorKind>;
    /// An environment variable.
    fn env(&self, name: &str) -> Option<String>;
    /// Metadata of a path (following symlinks).
    fn stat(&self, path: &Path) -> Option<PathInfo>;
}

/// Runs every check.
pub fn run_checks(host: &dyn DoctorHost) -> Vec<Check> {
    let mut checks = vec![arch(host), kernel(host)];
    let who = host.identity();
    checks.push(match &who {
        Ok(w) if w.uid == 0 => Check::problem(
            "user",
            "running as root (uid 0)",
            "Lazaret refuses to run as root (SR-1): run it as your normal user",
        ),
        Ok(w) => Check::ok("user", format!("{} (uid {})", w.user, w.uid)),
        Err(e) => Check::problem(
            "user",
            e.clone(),
            "add an /etc/passwd entry for this uid (useradd)",
        ),
    });
    checks.push(runsc(host));
    for helper in ["newuidmap", "newgidmap"] {
        checks.push(map_helper(host, helper));
    }
    if let Ok(w) = &who {
        for kind in [MapKind::Uid, MapKind::Gid] {
            checks.push(subordinate(host, w, kind));
        }
    }
    checks.push(tool(host, "slirp4netns", "slirp4netns"));
    checks.push(nft(host));
    checks.push(fuse_device(host));
    checks.push(tool(host, "fuse-overlayfs", "fuse-overlayfs"));
    checks.push(runtime_dir(host, who.as_ref().ok()));
    checks.push(bare_repositories(host));
    checks
}

/// Host Git's `safe.bareRepository` (spec 3.5, SR-4). With Git's default
/// (`all`), host Git run in any directory of the workspace that looks like a
/// bare repository (`HEAD`, `objects/`, `refs/`, a `config` — all plain files
/// the sandbox can write) uses that directory's configuration, which can
/// name programs Git runs (a pager, a filesystem monitor). `explicit` makes
/// host Git use a bare repository only when told to (`--git-dir`,
/// `GIT_DIR`). Asked outside any repository, so only system, global and
/// environment configuration count — where Git honours this key.
fn bare_repositories(host: &dyn DoctorHost) -> Check {
    const NAME: &str = "git bare repos";
    let Some(git) = host.which("git") else {
        return Check::ok(NAME, "no git on PATH");
    };
    let value = host
        .output(&git, &["-C", "/", "config", "--get", "safe.bareRepository"])
        .map(|v| v.trim().to_owned());
    match value {
        Ok(v) if v.eq_ignore_ascii_case("explicit") => {
            Check::ok(NAME, "safe.bareRepository = explicit")
        }
        other => Check::advise(
            NAME,
            match other {
                Ok(v) => format!("safe.bareRepository = {v}"),
                Err(_) => "safe.bareRepository not set (Git's default: all)".to_owned(),
            },
            "git config --global safe.bareRepository explicit (host Git then never runs the \
             configuration of a bare repository an agent planted in a workspace directory)",
        ),
    }
}

fn arch(host: &dyn DoctorHost) -> Check {
    let m = host.machine();
    if m == "x86_64" {
        Check::ok("architecture", m)
    } else {
        Check::problem(
            "architecture",
            m,
            "Lazaret runs on x86-64 only: use an x86-64 machine",
        )
    }
}

/// `(major, minor)` of a kernel release like `6.18.44-fc-v595`.
pub fn parse_kernel(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn kernel(host: &dyn DoctorHost) -> Check {
    let release = host.kernel_release();
    match parse_kernel(&release) {
        Some(v) if v >= MIN_KERNEL => Check::ok("kernel", format!("{release} (>= 6.9)")),
        _ => Check::problem(
            "kernel",
            format!("{release} (Lazaret needs 6.9 or newer)"),
            "boot Linux 6.9 or newer (Debian 12: apt-get install -t bookworm-backports linux-image-amd64, then reboot)",
        ),
    }
}

const RUNSC_FIX: &str = "as root: add `deb http://deb.debian.org/debian bookworm-backports main` to the apt sources, then apt-get update && apt-get install -t bookworm-backports runsc (or run scripts/setup)";

/// The snapshot date of `runsc version 0.0~20240729.0` style output.
pub fn parse_runsc_date(version_output: &str) -> Option<u32> {
    let first = version_output.lines().next()?;
    let tail = first
        .split('~')
        .nth(1)
        .or_else(|| first.strip_prefix("runsc version release-"))?;
    tail.get(..8)?.parse().ok()
}

fn runsc(host: &dyn DoctorHost) -> Check {
    let Some(path) = host.which("runsc") else {
        return Check::problem("runsc", "not found in PATH", RUNSC_FIX);
    };
    match host.output(&path, &["--version"]) {
        Err(e) => Check::problem(
            "runsc",
            format!("{} --version failed: {e}", path.display()),
            RUNSC_FIX,
        ),
        Ok(out) => {
            let first = out.lines().next().unwrap_or_default().to_owned();
            match parse_runsc_date(&out) {
                Some(d) if d >= MIN_RUNSC => {
                    Check::ok("runsc", format!("{first} at {}", path.display()))
                }
                _ => Check::problem(
                    "runsc",
                    format!(
                        "{first} at {} (too old or unrecognised: need a 2024 or newer build)",
                        path.display()
                    ),
                    RUNSC_FIX,
                ),
            }
        }
    }
}

fn map_helper(host: &dyn DoctorHost, helper: &'static str) -> Check {
    let fix = "as root: apt-get install uidmap";
    let Some(path) = host.which(helper) else {
        return Check::problem(helper, "not found in PATH", fix);
    };
    match host.stat(&path) {
        Some(i) if i.mode & 0o4000 != 0 && i.uid == 0 => {
            Check::ok(helper, path.display().to_string())
        }
        _ => Check::problem(
            helper,
            format!("{} is not setuid root", path.display()),
            format!(
                "as root: chown root {0} && chmod u+s {0} (or reinstall uidmap)",
                path.display()
            ),
        ),
    }
}

fn subordinate(host: &dyn DoctorHost, who: &Identity, kind: MapKind) -> Check {
    let name = match kind {
        MapKind::Uid => "subordinate uids",
        MapKind::Gid => "subordinate gids",
    };
    let file = Path::new(kind.subid_file());
    let fix = format!(
        "as root: usermod --add-sub{kind}s 100000-165535 {} (choose a range no other user's overlaps)",
        who.user
    );
    match host.read(file) {
        Err(e) => Check::problem(name, format!("cannot read {}: {e}", file.display()), fix),
        Ok(text) => match lowest_range(&text, kind, who) {
            Ok(r) => Check::ok(
                name,
                format!("{}:{}:{} in {}", who.user, r.start, r.count, file.display()),
            ),
            Err(crate::userns::UsernsError::NoRange { needed, .. }) => Check::problem(
                name,
                format!(
                    "no range of at least {needed} IDs for {} in {}",
                    who.user,
                    file.display()
                ),
                fix,
            ),
            Err(e) => Check::problem(name, e.to_string(), fix),
        },
    }
}

fn tool(host: &dyn DoctorHost, name: &'static str, package: &str) -> Check {
    match host.which(name) {
        Some(p) => Check::ok(name, p.display().to_string()),
        None => Check::problem(
            name,
            "not found in PATH",
            format!("as root: apt-get install {package}"),
        ),
    }
}

/// `nft` (the egress filter, spec 3.7), found where a launch finds it: on
/// `PATH`, else in the system directories a user's `PATH` often lacks.
fn nft(host: &dyn DoctorHost) -> Check {
    let found = host.which("nft").or_else(|| {
        crate::network::nft::SYSTEM_DIRS
            .iter()
            .map(|d| Path::new(d).join("nft"))
            .find(|p| {
                host.stat(p)
                    .is_some_and(|i| !i.is_dir && i.mode & 0o111 != 0)
            })
    });
    match found {
        Some(p) => Check::ok("nft", p.display().to_string()),
        None => Check::problem(
            "nft",
            "not found in PATH or /usr/sbin, /sbin, /usr/local/sbin",
            "as root: apt-get install nftables".to_owned(),
        ),
    }
}

fn fuse_device(host: &dyn DoctorHost) -> Check {
    let dev = Path::new("/dev/fuse");
    match host.open_rw(dev) {
        Ok(()) => Check::ok("/dev/fuse", "opens read-write"),
        Err(std::io::ErrorKind::NotFound) => {
            Check::problem("/dev/fuse", "missing", "as root: modprobe fuse (and make it load at boot: echo fuse > /etc/modules-load.d/fuse.conf)")
        }
        Err(std::io::ErrorKind::PermissionDenied) => Check::problem(
            "/dev/fuse",
            "permission denied (a distribution's udev makes it 0666; this machine has no udev rule for it)",
            "as root: chmod 0666 /dev/fuse (scripts/setup does this)",
        ),
        Err(e) => Check::problem("/dev/fuse", format!("cannot open: {e}"), "as root: check that the fuse module is loaded (modprobe fuse)"),
    }
}

fn runtime_dir(host: &dyn DoctorHost, who: Option<&Identity>) -> Check {
    let uid = who.map_or(0, |w| w.uid);
    let fix = format!(
        "log in through a PAM session that creates it (systemd-logind), or: mkdir -m 0700 -p /tmp/xdg-{uid} && export XDG_RUNTIME_DIR=/tmp/xdg-{uid}"
    );
    let Some(dir) = host.env("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) else {
        return Check::problem("XDG_RUNTIME_DIR", "not set", fix);
    };
    match host.stat(Path::new(&dir)) {
        None => Check::problem("XDG_RUNTIME_DIR", format!("{dir} does not exist"), fix),
        Some(i) if !i.is_dir => {
            Check::problem("XDG_RUNTIME_DIR", format!("{dir} is not a directory"), fix)
        }
        Some(i) if i.uid != uid || i.mode & 0o077 != 0 => Check::problem(
            "XDG_RUNTIME_DIR",
            format!(
                "{dir} is owned by uid {} with mode {:o}; it must be yours and 0700 (SR-10)",
                i.uid,
                i.mode & 0o7777
            ),
            format!("chmod 0700 {dir} (as its owner), or use a directory of your own"),
        ),
        Some(_) => Check::ok("XDG_RUNTIME_DIR", format!("{dir} (0700, yours)")),
    }
}

/// The real host.
#[derive(Debug, Default)]
pub struct RealDoctorHost;

impl DoctorHost for RealDoctorHost {
    fn kernel_release(&self) -> String {
        rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned()
    }
    fn machine(&self) -> String {
        rustix::system::uname()
            .machine()
            .to_string_lossy()
            .into_owned()
    }
    fn identity(&self) -> Result<Identity, String> {
        Identity::current(&mut crate::userns::RealHost).map_err(|e| e.to_string())
    }
    fn which(&self, program: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }
    fn output(&self, program: &Path, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
    fn read(&self, path: &Path) -> Result<String, String> {
        std::fs::read_to_string(path).map_err(|e| e.to_string())
    }
    fn open_rw(&self, path: &Path) -> Result<(), std::io::ErrorKind> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(drop)
            .map_err(|e| e.kind())
    }
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn stat(&self, path: &Path) -> Option<PathInfo> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| PathInfo {
            uid: m.uid(),
            mode: m.mode(),
            is_dir: m.is_dir(),
        })
    }
}

#[cfg(test)]
mod tests;
