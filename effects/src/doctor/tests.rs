use super::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// A fake host that records what the checks asked for.
#[derive(Debug)]
struct Fake {
    release: String,
    machine: String,
    uid: u32,
    programs: HashMap<&'static str, PathBuf>,
    runsc_version: Result<String, String>,
    /// What `git config --get safe.bareRepository` prints (Err: unset).
    bare_repository: Result<String, String>,
    files: HashMap<PathBuf, String>,
    fuse: Result<(), std::io::ErrorKind>,
    env: HashMap<&'static str, String>,
    stats: HashMap<PathBuf, PathInfo>,
    asked: RefCell<Vec<String>>,
}

fn healthy() -> Fake {
    let mut programs = HashMap::new();
    for p in [
        "runsc",
        "newuidmap",
        "newgidmap",
        "slirp4netns",
        "nft",
        "fuse-overlayfs",
        "git",
    ] {
        programs.insert(p, PathBuf::from(format!("/usr/bin/{p}")));
    }
    let mut stats = HashMap::new();
    for p in ["newuidmap", "newgidmap"] {
        stats.insert(
            PathBuf::from(format!("/usr/bin/{p}")),
            PathInfo {
                uid: 0,
                mode: 0o104755,
                is_dir: false,
            },
        );
    }
    stats.insert(
        PathBuf::from("/run/user/1000"),
        PathInfo {
            uid: 1000,
            mode: 0o40700,
            is_dir: true,
        },
    );
    let mut files = HashMap::new();
    files.insert(
        PathBuf::from("/etc/subuid"),
        "dev:100000:65536\n".to_owned(),
    );
    files.insert(
        PathBuf::from("/etc/subgid"),
        "dev:100000:65536\n".to_owned(),
    );
    files.insert(
        PathBuf::from("/etc/passwd"),
        "dev:x:1000:1000::/home/dev:/bin/bash\n".to_owned(),
    );
    Fake {
        release: "6.18.44-fc-v595".into(),
        machine: "x86_64".into(),
        uid: 1000,
        programs,
        runsc_version: Ok("runsc version 0.0~20240729.0\nspec: 1.0.2-dev\n".into()),
        bare_repository: Ok("explicit\n".into()),
        files,
        fuse: Ok(()),
        env: HashMap::from([("XDG_RUNTIME_DIR", "/run/user/1000".to_owned())]),
        stats,
        asked: RefCell::new(Vec::new()),
    }
}

impl DoctorHost for Fake {
    fn kernel_release(&self) -> String {
        self.release.clone()
    }
    fn machine(&self) -> String {
        self.machine.clone()
    }
    fn identity(&self) -> Result<Identity, String> {
        Ok(Identity {
            user: "dev".into(),
            uid: self.uid,
            gid: 1000,
        })
    }
    fn which(&self, program: &str) -> Option<PathBuf> {
        self.asked.borrow_mut().push(format!("which {program}"));
        self.programs.get(program).cloned()
    }
    fn output(&self, program: &Path, args: &[&str]) -> Result<String, String> {
        self.asked
            .borrow_mut()
            .push(format!("run {} {}", program.display(), args.join(" ")));
        if program.ends_with("git") {
            return self.bare_repository.clone();
        }
        self.runsc_version.clone()
    }
    fn read(&self, path: &Path) -> Result<String, String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| "No such file or directory".into())
    }
    fn open_rw(&self, path: &Path) -> Result<(), std::io::ErrorKind> {
        self.asked
            .borrow_mut()
            .push(format!("open {}", path.display()));
        self.fuse
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
    fn stat(&self, path: &Path) -> Option<PathInfo> {
        self.stats.get(path).copied()
    }
}

fn problems(host: &Fake) -> Vec<(String, String)> {
    run_checks(host)
        .into_iter()
        .filter_map(|c| c.fix.map(|f| (c.name.to_owned(), f)))
        .collect()
}

#[test]
fn a_healthy_host_passes_every_check() {
    let host = healthy();
    let checks = run_checks(&host);
    assert!(checks.iter().all(Check::passed), "{checks:?}");
    let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        vec![
            "architecture",
            "kernel",
            "user",
            "runsc",
            "newuidmap",
            "newgidmap",
            "subordinate uids",
            "subordinate gids",
            "slirp4netns",
            "nft",
            "/dev/fuse",
            "fuse-overlayfs",
            "XDG_RUNTIME_DIR",
            "git bare repos"
        ]
    );
    assert!(checks.iter().all(|c| c.advice.is_none()), "{checks:?}");
    assert!(host
        .asked
        .borrow()
        .contains(&"run /usr/bin/git -C / config --get safe.bareRepository".to_owned()));
    assert!(host
        .asked
        .borrow()
        .contains(&"run /usr/bin/runsc --version".to_owned()));
    assert!(host.asked.borrow().contains(&"open /dev/fuse".to_owned()));
}

#[test]
fn each_problem_names_its_fix() {
    let mut host = healthy();
    host.release = "6.1.0-28-amd64".into();
    host.machine = "aarch64".into();
    host.runsc_version = Ok("runsc version 0.0~20221219.0\n".into());
    host.programs.remove("newgidmap");
    host.programs.remove("slirp4netns");
    host.programs.remove("nft");
    host.files
        .insert("/etc/subuid".into(), "dev:100000:1000\n".into());
    host.fuse = Err(std::io::ErrorKind::PermissionDenied);
    host.env.clear();
    let p = problems(&host);
    let fix = |name: &str| {
        p.iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_default()
    };
    assert!(fix("kernel").contains("linux-image-amd64"), "{p:?}");
    assert!(fix("architecture").contains("x86-64"), "{p:?}");
    assert!(
        fix("runsc").contains("-t bookworm-backports runsc"),
        "{p:?}"
    );
    assert_eq!(fix("newgidmap"), "as root: apt-get install uidmap");
    assert!(
        fix("subordinate uids").starts_with("as root: usermod --add-subuids 100000-165535 dev"),
        "{p:?}"
    );
    assert_eq!(fix("slirp4netns"), "as root: apt-get install slirp4netns");
    assert_eq!(fix("nft"), "as root: apt-get install nftables");
    assert_eq!(
        fix("/dev/fuse"),
        "as root: chmod 0666 /dev/fuse (scripts/setup does this)"
    );
    assert!(
        fix("XDG_RUNTIME_DIR").contains("export XDG_RUNTIME_DIR=/tmp/xdg-1000"),
        "{p:?}"
    );
    assert_eq!(p.len(), 9, "{p:?}");
}

#[test]
fn root_missing_runsc_and_a_shared_runtime_dir_are_problems() {
    let mut host = healthy();
    host.uid = 0;
    host.programs.remove("runsc");
    host.stats.insert(
        "/run/user/1000".into(),
        PathInfo {
            uid: 0,
            mode: 0o40755,
            is_dir: true,
        },
    );
    let p = problems(&host);
    let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["user", "runsc", "XDG_RUNTIME_DIR"]);
}

#[test]
fn version_parsers() {
    assert_eq!(parse_kernel("6.18.44-fc-v595"), Some((6, 18)));
    assert_eq!(parse_kernel("6.9"), Some((6, 9)));
    assert_eq!(parse_kernel("garbage"), None);
    assert_eq!(
        parse_runsc_date("runsc version 0.0~20240729.0\nspec: 1.0.2-dev"),
        Some(20240729)
    );
    assert_eq!(
        parse_runsc_date("runsc version release-20250120.0"),
        Some(20250120)
    );
    assert_eq!(parse_runsc_date("something else"), None);
}

/// A user's PATH without /usr/sbin still finds nftables' `nft` there, as a
/// launch does; a non-executable file there is not it.
#[test]
fn nft_is_found_in_the_system_directories_too() {
    let mut host = healthy();
    host.programs.remove("nft");
    let nft = |host: &Fake| run_checks(host).into_iter().find(|c| c.name == "nft");
    assert!(nft(&host).is_some_and(|c| !c.passed()));
    host.stats.insert(
        PathBuf::from("/usr/sbin/nft"),
        PathInfo {
            uid: 0,
            mode: 0o644,
            is_dir: false,
        },
    );
    assert!(nft(&host).is_some_and(|c| !c.passed()));
    host.stats.insert(
        PathBuf::from("/usr/sbin/nft"),
        PathInfo {
            uid: 0,
            mode: 0o755,
            is_dir: false,
        },
    );
    assert!(nft(&host).is_some_and(|c| c.passed() && c.found == "/usr/sbin/nft"));
}

#[test]
fn git_without_explicit_bare_repositories_gets_advice_not_a_failure() {
    for (value, found) in [
        (
            Err("exit status: 1: ".to_owned()),
            "not set (Git's default: all)",
        ),
        (Ok("all\n".to_owned()), "safe.bareRepository = all"),
    ] {
        let mut host = healthy();
        host.bare_repository = value;
        let checks = run_checks(&host);
        assert!(checks.iter().all(Check::passed), "{checks:?}");
        let bare = checks.iter().find(|c| c.name == "git bare repos");
        assert!(
            bare.is_some_and(|c| c.found.contains(found)
                && c.advice.as_deref().is_some_and(
                    |a| a.starts_with("git config --global safe.bareRepository explicit")
                )),
            "{bare:?}"
        );
    }
    // No git on the host: nothing to advise.
    let mut host = healthy();
    host.programs.remove("git");
    let checks = run_checks(&host);
    assert!(checks.iter().all(|c| c.advice.is_none()), "{checks:?}");
}
