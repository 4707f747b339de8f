//! The verified user namespace (spec 3.1, SR-12).
//!
//! A child process unshares `CLONE_NEWUSER` and blocks on a pipe. The parent
//! writes its maps with the setuid helpers `newuidmap`/`newgidmap` — namespace
//! ID 0 to the invoking uid/gid, namespace IDs 1..=65536 to the lowest
//! configured subordinate range of at least 65536 IDs — then reads
//! `/proc/<pid>/uid_map` and `gid_map` back and compares them exactly before it
//! releases the child. A child whose maps do not verify never runs its program.
//!
//! Every host interaction (reading `/etc/subuid`, running the map helpers,
//! reading the live maps) goes through [`UsernsHost`]; [`RealHost`] is the
//! real one and tests pass a recording fake.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use crate::broker::transient::{self, Limits, Transient, TransientError};

/// How long one `newuidmap`/`newgidmap` run may take (it takes
/// milliseconds).
const MAP_HELPER_LIMIT: Duration = Duration::from_secs(10);

/// Namespace IDs 1..=`SUBORDINATE_IDS` map to the subordinate range (SR-12).
pub const SUBORDINATE_IDS: u32 = 65536;

/// Which of the two ID maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// User IDs: `/etc/subuid`, `newuidmap`, `/proc/<pid>/uid_map`.
    Uid,
    /// Group IDs: `/etc/subgid`, `newgidmap`, `/proc/<pid>/gid_map`.
    Gid,
}

impl MapKind {
    /// The subordinate-ID database for this kind.
    pub fn subid_file(self) -> &'static str {
        match self {
            MapKind::Uid => "/etc/subuid",
            MapKind::Gid => "/etc/subgid",
        }
    }
    /// The setuid map helper for this kind.
    pub fn helper(self) -> &'static str {
        match self {
            MapKind::Uid => "newuidmap",
            MapKind::Gid => "newgidmap",
        }
    }
    /// The `/proc/<pid>/` file holding the live map.
    pub fn proc_file(self) -> &'static str {
        match self {
            MapKind::Uid => "uid_map",
            MapKind::Gid => "gid_map",
        }
    }
}

impl fmt::Display for MapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MapKind::Uid => "uid",
            MapKind::Gid => "gid",
        })
    }
}

/// One line of an ID map: `count` IDs from `inside` map to `outside`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    /// First ID inside the namespace.
    pub inside: u32,
    /// First ID outside (in the parent namespace).
    pub outside: u32,
    /// Number of IDs.
    pub count: u32,
}

/// A subordinate range from `/etc/subuid` or `/etc/subgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubordinateRange {
    /// First subordinate ID.
    pub start: u32,
    /// Number of IDs in the range.
    pub count: u32,
}

/// The invoking identity the namespace maps ID 0 to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Login name (subordinate files list owners by name or by uid).
    pub user: String,
    /// Real uid.
    pub uid: u32,
    /// Real gid.
    pub gid: u32,
}

impl Identity {
    /// The calling process's identity, with the login name from `/etc/passwd`
    /// through `host`.
    pub fn current(host: &mut dyn UsernsHost) -> Result<Identity, UsernsError> {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let passwd = host.read_file(Path::new("/etc/passwd"))?;
        let user = passwd
            .lines()
            .filter_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let _pw = f.next()?;
                let id = f.next()?.parse::<u32>().ok()?;
                (id == uid).then(|| name.to_owned())
            })
            .next()
            .ok_or(UsernsError::NoPasswdEntry { uid })?;
        Ok(Identity { user, uid, gid })
    }
}

/// The two maps a verified namespace carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceMaps {
    /// The uid map, exactly two lines.
    pub uid: [IdMap; 2],
    /// The gid map, exactly two lines.
    pub gid: [IdMap; 2],
}

impl NamespaceMaps {
    /// 0 -> `id`, 1..=65536 -> `range.start..`.
    fn pair(id: u32, range: SubordinateRange) -> [IdMap; 2] {
        [
            IdMap {
                inside: 0,
                outside: id,
                count: 1,
            },
            IdMap {
                inside: 1,
                outside: range.start,
                count: SUBORDINATE_IDS,
            },
        ]
    }

    /// The maps for `who` with the chosen subordinate ranges.
    pub fn new(who: &Identity, subuid: SubordinateRange, subgid: SubordinateRange) -> Self {
        NamespaceMaps {
            uid: Self::pair(who.uid, subuid),
            gid: Self::pair(who.gid, subgid),
        }
    }

    /// The map of `kind`.
    pub fn of(&self, kind: MapKind) -> &[IdMap; 2] {
        match kind {
            MapKind::Uid => &self.uid,
            MapKind::Gid => &self.gid,
        }
    }

    /// Host uid that namespace uid `inside` maps to, if mapped.
    pub fn host_id(&self, kind: MapKind, inside: u32) -> Option<u32> {
        self.of(kind).iter().find_map(|m| {
            let off = inside.checked_sub(m.inside)?;
            (off < m.count).then(|| m.outside + off)
        })
    }
}

/// Errors of creating and verifying a user namespace; one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    /// Reading a host file failed.
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// The uid has no `/etc/passwd` entry.
    #[error("uid {uid} has no entry in /etc/passwd; Lazaret needs a named user to look up subordinate IDs")]
    NoPasswdEntry { uid: u32 },
    /// A subordinate-ID line for this user is malformed.
    #[error("{path}:{line}: expected `name-or-uid:start:count` with decimal start and count, found {text:?}")]
    MalformedSubid {
        path: String,
        line: usize,
        text: String,
    },
    /// No range of at least 65536 IDs for this user.
    #[error("{path} has no range of at least {needed} IDs for user {user} (uid {uid}); fix: as root run `usermod --add-sub{kind}s 100000-165535 {user}` (pick a range that overlaps no other user's)")]
    NoRange {
        path: String,
        user: String,
        uid: u32,
        needed: u32,
        kind: MapKind,
    },
    /// Creating the synchronisation pipes failed.
    #[error("cannot create the user-namespace synchronisation pipe: {0}")]
    Pipe(io::Error),
    /// The child never reported that it unshared its user namespace.
    #[error("the child did not report its user namespace (it exited or unshare(CLONE_NEWUSER) failed): {0}")]
    ChildNotReady(io::Error),
    /// The map helper could not be started.
    #[error(
        "cannot run {helper} (the `uidmap` package provides it: apt-get install uidmap): {source}"
    )]
    HelperRun {
        helper: &'static str,
        source: TransientError,
    },
    /// The map helper failed.
    #[error("{helper} {args} failed with {status}: {stderr}")]
    HelperFailed {
        helper: &'static str,
        args: String,
        status: String,
        stderr: String,
    },
    /// The live map could not be parsed.
    #[error("/proc/{pid}/{file}: cannot parse line {text:?}")]
    MalformedLiveMap {
        pid: i32,
        file: &'static str,
        text: String,
    },
    /// The live map differs from the requested one.
    #[error("/proc/{pid}/{file} is {found:?}, expected exactly {expected:?}; refusing to release the child")]
    MapMismatch {
        pid: i32,
        file: &'static str,
        expected: Vec<IdMap>,
        found: Vec<IdMap>,
    },
    /// Spawning the child failed (including a child refused after a failed verification).
    #[error("cannot start {program} in a new user namespace: {source}")]
    Spawn { program: String, source: io::Error },
    /// Releasing the child failed.
    #[error("cannot release the child in its user namespace: {0}")]
    Release(io::Error),
}

/// The host interactions of user-namespace setup.
pub trait UsernsHost {
    /// Reads a whole text file (`/etc/subuid`, `/etc/passwd`, `/proc/<pid>/uid_map`).
    fn read_file(&mut self, path: &Path) -> Result<String, UsernsError>;
    /// Runs `newuidmap`/`newgidmap` for `pid` with `maps`.
    fn write_map(&mut self, kind: MapKind, pid: i32, maps: &[IdMap]) -> Result<(), UsernsError>;
}

/// The real host: files from the file system, helpers from `PATH`.
#[derive(Debug, Default)]
pub struct RealHost;

impl UsernsHost for RealHost {
    fn read_file(&mut self, path: &Path) -> Result<String, UsernsError> {
        std::fs::read_to_string(path).map_err(|source| UsernsError::Read {
            path: path.to_owned(),
            source,
        })
    }

    fn write_map(&mut self, kind: MapKind, pid: i32, maps: &[IdMap]) -> Result<(), UsernsError> {
        let helper = kind.helper();
        let mut args = vec![pid.to_string()];
        for m in maps {
            args.extend([
                m.inside.to_string(),
                m.outside.to_string(),
                m.count.to_string(),
            ]);
        }
        let out = transient::output(
            Command::new(helper).args(&args),
            b"",
            Limits::of(MAP_HELPER_LIMIT),
        )
        .map_err(|source| UsernsError::HelperRun { helper, source })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(UsernsError::HelperFailed {
                helper,
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }
}

/// The lowest-starting range of at least 65536 IDs owned by `who` (by name or
/// by uid) in the contents of a subordinate-ID file.
pub fn lowest_range(
    contents: &str,
    kind: MapKind,
    who: &Identity,
) -> Result<SubordinateRange, UsernsError> {
    let path = kind.subid_file();
    let uid_text = who.uid.to_string();
    let mut best: Option<SubordinateRange> = None;
    for (i, raw) in contents.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(':');
        let owner = fields.next().unwrap_or_default();
        if owner != who.user && owner != uid_text {
            continue;
        }
        let malformed = || UsernsError::MalformedSubid {
            path: path.to_owned(),
            line: i + 1,
            text: raw.to_owned(),
        };
        let start = fields
            .next()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(malformed)?;
        let count = fields
            .next()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(malformed)?;
        if fields.next().is_some() || start.checked_add(count).is_none() {
            return Err(malformed());
        }
        if count >= SUBORDINATE_IDS && best.is_none_or(|b| start < b.start) {
            best = Some(SubordinateRange { start, count });
        }
    }
    best.ok_or_else(|| UsernsError::NoRange {
        path: path.to_owned(),
        user: who.user.clone(),
        uid: who.uid,
        needed: SUBORDINATE_IDS,
        kind,
    })
}

/// Parses the text of `/proc/<pid>/uid_map` or `gid_map`.
pub fn parse_live_map(text: &str, pid: i32, kind: MapKind) -> Result<Vec<IdMap>, UsernsError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let n: Vec<u32> = l
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect();
            match n[..] {
                [inside, outside, count] if l.split_whitespace().count() == 3 => Ok(IdMap {
                    inside,
                    outside,
                    count,
                }),
                _ => Err(UsernsError::MalformedLiveMap {
                    pid,
                    file: kind.proc_file(),
                    text: l.to_owned(),
                }),
            }
        })
        .collect()
}

/// Chooses the maps for `who` from the host's subordinate-ID files.
pub fn plan_maps(host: &mut dyn UsernsHost, who: &Identity) -> Result<NamespaceMaps, UsernsError> {
    let subuid = lowest_range(
        &host.read_file(Path::new(MapKind::Uid.subid_file()))?,
        MapKind::Uid,
        who,
    )?;
    let subgid = lowest_range(
        &host.read_file(Path::new(MapKind::Gid.subid_file()))?,
        MapKind::Gid,
        who,
    )?;
    Ok(NamespaceMaps::new(who, subuid, subgid))
}

/// Writes both maps of `pid` (already in its new user namespace) and verifies
/// the live maps exactly.
pub fn map_and_verify(
    host: &mut dyn UsernsHost,
    pid: i32,
    maps: &NamespaceMaps,
) -> Result<(), UsernsError> {
    // gid first: newgidmap may need the process not yet to have a uid map on
    // some shadow versions' setgroups handling; the order is otherwise free.
    for kind in [MapKind::Gid, MapKind::Uid] {
        host.write_map(kind, pid, maps.of(kind))?;
    }
    for kind in [MapKind::Uid, MapKind::Gid] {
        let path = PathBuf::from(format!("/proc/{pid}/{}", kind.proc_file()));
        let found = parse_live_map(&host.read_file(&path)?, pid, kind)?;
        if found[..] != maps.of(kind)[..] {
            return Err(UsernsError::MapMismatch {
                pid,
                file: kind.proc_file(),
                expected: maps.of(kind).to_vec(),
                found,
            });
        }
    }
    Ok(())
}

/// A byte the parent sends to release a verified child.
const RELEASE: u8 = 1;
/// A byte the parent sends to make the child exit without running its program.
const REFUSE: u8 = 0;

/// Spawns `cmd` in a new user namespace with verified `maps`: the child
/// unshares `CLONE_NEWUSER`, reports its pid and blocks until the parent has
/// mapped and verified it. On any failure the child is refused (it exits
/// without running its program) and the error is returned. The caller holds
/// the spawn exclusion and takes the child over as a transient child of the
/// broker ([`crate::broker::transient::Transient::adopt`]).
pub fn spawn_in_user_namespace(
    mut cmd: Command,
    host: &mut dyn UsernsHost,
    maps: &NamespaceMaps,
) -> Result<Child, UsernsError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| UsernsError::Pipe(e.into()))?;
    let (release_r, release_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| UsernsError::Pipe(e.into()))?;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe raw system calls (unshare, getpid, write, read) on
    // descriptors that stay open until exec (they are close-on-exec).
    unsafe {
        cmd.pre_exec(move || child_unshare_and_wait(&ready_w, &release_r));
    }
    // std's spawn blocks until the child has exec'd, so it runs on its own
    // thread while this one maps and releases the child.
    let spawner = std::thread::spawn(move || cmd.spawn());
    let outcome = read_pid(ready_r).and_then(|pid| map_and_verify(host, pid, maps));
    // Release on success; on failure send the refusal byte (the child holds
    // its own inherited copy of the write end, so closing ours gives no EOF).
    let mut release = std::fs::File::from(release_w);
    let released = match outcome {
        Ok(()) => release.write_all(&[RELEASE]).map_err(UsernsError::Release),
        Err(e) => {
            // If the child is already gone the write fails; the error that
            // matters is `e`.
            let _ = release.write_all(&[REFUSE]);
            Err(e)
        }
    };
    drop(release);
    let spawned = spawner.join().map_err(|_| UsernsError::Spawn {
        program: program.clone(),
        source: io::Error::other("spawner thread panicked"),
    })?;
    match (released, spawned) {
        (Ok(()), Ok(child)) => Ok(child),
        (Err(e), Ok(child)) => {
            // The child got the refusal byte (or EOF) and exits without
            // exec; reap it through its pidfd so nothing is left behind.
            // No signal is needed.
            let _ = Transient::adopt(child, program)
                .and_then(|refused| refused.finish(b"", Limits::of(MAP_HELPER_LIMIT)));
            Err(e)
        }
        (Err(e), Err(_)) => Err(e),
        (Ok(()), Err(source)) => Err(UsernsError::Spawn { program, source }),
    }
}

/// Reads the 4-byte pid the child writes after unsharing.
fn read_pid(ready_r: OwnedFd) -> Result<i32, UsernsError> {
    let mut buf = [0u8; 4];
    std::fs::File::from(ready_r)
        .read_exact(&mut buf)
        .map_err(UsernsError::ChildNotReady)?;
    Ok(i32::from_ne_bytes(buf))
}

/// The child's side, between fork and exec.
fn child_unshare_and_wait(ready_w: &OwnedFd, release_r: &OwnedFd) -> io::Result<()> {
    // SAFETY: only CLONE_NEWUSER is unshared (no descriptor-table change), in
    // the single-threaded child between fork and exec.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER) }?;
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let bytes = pid.to_ne_bytes();
    if rustix::io::write(ready_w, &bytes)? != bytes.len() {
        return Err(io::Error::other("short write of the pid"));
    }
    let mut b = [0u8; 1];
    match rustix::io::read(release_r, &mut b)? {
        1 if b[0] == RELEASE => Ok(()),
        _ => Err(io::Error::other(
            "user namespace maps not verified; refusing to run",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A recording fake host.
    #[derive(Debug, Default)]
    struct FakeHost {
        files: HashMap<PathBuf, String>,
        calls: Vec<String>,
        /// When set, the live maps read back are these instead of what was written.
        tamper: Option<String>,
    }

    impl UsernsHost for FakeHost {
        fn read_file(&mut self, path: &Path) -> Result<String, UsernsError> {
            self.calls.push(format!("read {}", path.display()));
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| UsernsError::Read {
                    path: path.to_owned(),
                    source: io::ErrorKind::NotFound.into(),
                })
        }
        fn write_map(
            &mut self,
            kind: MapKind,
            pid: i32,
            maps: &[IdMap],
        ) -> Result<(), UsernsError> {
            let text: String = maps
                .iter()
                .map(|m| format!("{:>10} {:>10} {:>10}\n", m.inside, m.outside, m.count))
                .collect();
            self.calls.push(format!(
                "{} {pid} {}",
                kind.helper(),
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
            let live = match (&self.tamper, kind) {
                (Some(t), MapKind::Uid) => t.clone(),
                _ => text,
            };
            self.files.insert(
                PathBuf::from(format!("/proc/{pid}/{}", kind.proc_file())),
                live,
            );
            Ok(())
        }
    }

    fn me() -> Identity {
        Identity {
            user: "dev".into(),
            uid: 1001,
            gid: 1002,
        }
    }

    #[test]
    fn picks_lowest_sufficient_range_by_name_or_uid() {
        let text = "# comment\nother:100000:65536\ndev:300000:65536\n1001:200000:70000\ndev:50000:1000\nbroken-other:x:y\n";
        let r = lowest_range(text, MapKind::Uid, &me()).map_err(|e| e.to_string());
        assert_eq!(
            r,
            Ok(SubordinateRange {
                start: 200000,
                count: 70000
            })
        );
    }

    /// Whatever the file holds, a chosen range belongs to the user, is large
    /// enough and starts no later than any other sufficient range of theirs.
    #[test]
    fn chosen_range_is_the_lowest_sufficient_own_range() {
        fn prop(entries: Vec<(bool, u32, u32)>) -> bool {
            let text: String = entries
                .iter()
                .map(|(mine, start, count)| {
                    format!(
                        "{}:{}:{}\n",
                        if *mine { "dev" } else { "other" },
                        start / 2,
                        count % 200_000
                    )
                })
                .collect();
            let sufficient: Vec<u32> = entries
                .iter()
                .filter(|(mine, start, count)| {
                    *mine
                        && count % 200_000 >= SUBORDINATE_IDS
                        && (start / 2).checked_add(count % 200_000).is_some()
                })
                .map(|(_, start, _)| start / 2)
                .collect();
            match lowest_range(&text, MapKind::Uid, &me()) {
                Ok(r) => sufficient.iter().min() == Some(&r.start) && r.count >= SUBORDINATE_IDS,
                Err(UsernsError::NoRange { .. }) => sufficient.is_empty(),
                Err(_) => false,
            }
        }
        quickcheck::quickcheck(prop as fn(Vec<(bool, u32, u32)>) -> bool);
    }

    #[test]
    fn too_small_range_is_refused_with_the_fix() {
        let err = lowest_range("dev:100000:65535\n", MapKind::Gid, &me())
            .map(|_| ())
            .map_err(|e| e.to_string());
        let msg = err.err().unwrap_or_default();
        assert!(msg.contains("/etc/subgid"), "{msg}");
        assert!(msg.contains("usermod --add-subgids"), "{msg}");
    }

    #[test]
    fn malformed_own_line_names_file_and_line() {
        let err = lowest_range("other:1:2\ndev:abc:65536\n", MapKind::Uid, &me())
            .map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err("/etc/subuid:2: expected `name-or-uid:start:count` with decimal start and count, found \"dev:abc:65536\"".into())
        );
    }

    #[test]
    fn maps_then_verifies_in_order() {
        let mut host = FakeHost::default();
        host.files
            .insert("/etc/subuid".into(), "dev:100000:65536\n".into());
        host.files
            .insert("/etc/subgid".into(), "dev:300000:65536\n".into());
        let maps = plan_maps(&mut host, &me()).map_err(|e| e.to_string());
        let maps = maps.as_ref().map_err(Clone::clone);
        assert!(maps.is_ok(), "{maps:?}");
        let Ok(maps) = maps else { return };
        assert_eq!(maps.host_id(MapKind::Uid, 0), Some(1001));
        assert_eq!(maps.host_id(MapKind::Uid, 1000), Some(100999));
        assert_eq!(maps.host_id(MapKind::Gid, 65536), Some(365535));
        assert_eq!(maps.host_id(MapKind::Gid, 65537), None);
        let r = map_and_verify(&mut host, 42, maps).map_err(|e| e.to_string());
        assert_eq!(r, Ok(()));
        assert_eq!(
            host.calls,
            vec![
                "read /etc/subuid",
                "read /etc/subgid",
                "newgidmap 42 0 1002 1 1 300000 65536",
                "newuidmap 42 0 1001 1 1 100000 65536",
                "read /proc/42/uid_map",
                "read /proc/42/gid_map",
            ]
        );
    }

    #[test]
    fn a_live_map_that_differs_is_refused() {
        let mut host = FakeHost {
            tamper: Some("0 1001 1\n1 100000 65535\n".into()),
            ..Default::default()
        };
        let maps = NamespaceMaps::new(
            &me(),
            SubordinateRange {
                start: 100000,
                count: 65536,
            },
            SubordinateRange {
                start: 100000,
                count: 65536,
            },
        );
        let err = map_and_verify(&mut host, 7, &maps).map_err(|e| e.to_string());
        let msg = err.err().unwrap_or_default();
        assert!(msg.starts_with("/proc/7/uid_map is"), "{msg}");
        assert!(msg.contains("refusing to release"), "{msg}");
    }

    #[test]
    fn live_map_parser_rejects_garbage() {
        assert!(parse_live_map("0 1 2 3\n", 1, MapKind::Uid).is_err());
        assert!(parse_live_map("0 x 2\n", 1, MapKind::Uid).is_err());
        let ok = parse_live_map("         0       1001          1\n", 1, MapKind::Uid)
            .map_err(|e| e.to_string());
        assert_eq!(
            ok,
            Ok(vec![IdMap {
                inside: 0,
                outside: 1001,
                count: 1
            }])
        );
    }
}
