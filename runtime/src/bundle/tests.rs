use super::*;

/// Sessions get the conventional set and never a network-administration,
/// raw-socket or SYS_ADMIN capability (SR-5; spec README decision).
#[test]
fn session_capabilities_never_include_the_forbidden_ones() {
    for never in NEVER_GRANTED {
        assert!(!SESSION_CAPABILITIES.contains(&never), "{never}");
    }
    let unique: HashSet<&str> = SESSION_CAPABILITIES.iter().copied().collect();
    assert_eq!(unique.len(), SESSION_CAPABILITIES.len());
}

fn plan(git: GitSentry) -> BundlePlan {
    BundlePlan {
        rootfs: "/store/prepared/abc/rootfs".into(),
        workspace: "/home/dev/proj".into(),
        router: None,
        netns: "/proc/4242/ns/net".into(),
        args: vec!["/bin/sh".into(), "-c".into(), "true".into()],
        env: vec!["PATH=/usr/bin:/bin".into()],
        hostname: "lazaret".into(),
        git,
        editor_dirs: vec![".vscode".into()],
        git_file: None,
        git_filter: Some("/run/user/1000/lazaret/d/gen-1/git-sentry".into()),
        network_files: "/run/user/1000/lazaret/d/gen-1/net".into(),
        credentials: "/run/user/1000/lazaret/d/gen-1/credentials".into(),
        mailbox: None,
        state_anchors: vec![
            (
                "/usr".into(),
                "/run/user/1000/lazaret/d/gen-1/anchors/usr".into(),
            ),
            (
                "/etc".into(),
                "/run/user/1000/lazaret/d/gen-1/anchors/etc".into(),
            ),
        ],
        volumes: vec![
            BundleVolume {
                container: "/usr/share/datasets".into(),
                host: "/home/dev/datasets".into(),
                read_only: true,
            },
            BundleVolume {
                container: "/etc/agent/token".into(),
                host: "/home/dev/.config/lazaret/profiles/dev/token".into(),
                read_only: false,
            },
        ],
    }
}

fn json(p: &BundlePlan) -> Result<serde_json::Value, String> {
    let spec = build_spec(p).map_err(|e| e.to_string())?;
    serde_json::to_value(&spec).map_err(|e| e.to_string())
}

fn snapshot(name: &str, value: &serde_json::Value) -> Result<(), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/bundle/snapshots")
        .join(name);
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())? + "\n";
    if std::env::var_os("LAZARET_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).map_err(|e| e.to_string())?;
    }
    let expected =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    assert_eq!(
        text, expected,
        "snapshot {name} differs (LAZARET_UPDATE_SNAPSHOTS=1 rewrites it)"
    );
    Ok(())
}

fn mounts(v: &serde_json::Value) -> Vec<(String, String, String, Vec<String>)> {
    v["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["destination"].as_str().unwrap_or_default().to_owned(),
                m["type"].as_str().unwrap_or_default().to_owned(),
                m["source"].as_str().unwrap_or_default().to_owned(),
                m["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.as_str().map(str::to_owned))
                    .collect(),
            )
        })
        .collect()
}

/// SR-12 and SR-3 properties every bundle has, whatever the Git layout.
fn assert_isolation(v: &serde_json::Value, p: &BundlePlan) {
    let ns: Vec<(String, Option<String>)> = v["linux"]["namespaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["type"].as_str().unwrap_or_default().to_owned(),
                n["path"].as_str().map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        ns,
        vec![
            ("pid".to_owned(), None),
            ("ipc".to_owned(), None),
            ("uts".to_owned(), None),
            ("mount".to_owned(), None),
            ("network".to_owned(), Some(p.netns.display().to_string())),
        ]
    );
    assert!(v["linux"].get("uidMappings").is_none() && v["linux"].get("gidMappings").is_none());
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        assert_eq!(
            v["process"]["capabilities"][set],
            serde_json::json!([]),
            "{set}"
        );
    }
    assert_eq!(v["process"]["noNewPrivileges"], serde_json::json!(true));
    // Spec README "Resource bounds": the guest task ceiling, soft and hard,
    // and the bounded tmpfs file systems.
    assert_eq!(
        v["process"]["rlimits"],
        serde_json::json!([
            {"type": "RLIMIT_NPROC", "soft": 1024, "hard": 1024},
            {"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 524_288}
        ])
    );
    for (dest, size) in [("/tmp", "size=512m"), ("/dev/shm", "size=64m")] {
        let found = mounts(v)
            .into_iter()
            .find(|(d, t, _, _)| d == dest && t == "tmpfs")
            .unwrap_or_else(|| panic!("no tmpfs at {dest}"));
        assert!(found.3.iter().any(|o| o == size), "{dest}: {:?}", found.3);
    }
    // Every destination is the workspace or a protected destination of the
    // production layout, or beneath one (spec 3.2: no persistent path or
    // volume may meet a product mount). The Runtime Supervisor adds the
    // init directory mount.
    let layout = crate::config::SandboxLayoutV1::production().expect("production layout");
    let protected: Vec<String> = layout
        .destinations()
        .map(|(d, _)| d.as_str().to_owned())
        .collect();
    let anchors: Vec<String> = p
        .state_anchors
        .iter()
        .map(|(d, _)| d.display().to_string())
        .collect();
    // Volumes lie strictly beneath an anchor and meet no protected
    // destination in either direction.
    let volumes: Vec<String> = p
        .volumes
        .iter()
        .map(|v| v.container.display().to_string())
        .collect();
    for v in &p.volumes {
        assert!(
            anchors
                .iter()
                .any(|a| v.container.starts_with(a) && v.container != Path::new(a)),
            "{} is beneath no anchor",
            v.container.display()
        );
        for d in &protected {
            assert!(
                !v.container.starts_with(d) && !Path::new(d).starts_with(&v.container),
                "{} meets {d}",
                v.container.display()
            );
        }
    }
    let destinations: Vec<String> = mounts(v)
        .into_iter()
        .map(|(d, ..)| d)
        .filter(|d| !anchors.contains(d) && !volumes.contains(d))
        .collect();
    assert!(destinations.len() > 5, "{destinations:?}");
    for dest in destinations.iter().map(String::as_str).chain([INIT_DIR]) {
        assert!(
            protected.iter().any(|d| Path::new(dest).starts_with(d)),
            "{dest} is not covered by the protected destinations {protected:?}"
        );
    }
    // Host sources: only the rootfs, the workspace, (below) the repository
    // and the volumes' own sources.
    for (dest, typ, src, _) in mounts(v) {
        if let Some(vol) = p.volumes.iter().find(|x| x.container == Path::new(&dest)) {
            assert_eq!(src, vol.host.display().to_string(), "{dest}");
            continue;
        }
        if typ == "bind" && !anchors.contains(&dest) {
            let allowed = [
                p.workspace.display().to_string(),
                "/main/".to_owned(),
                "/run/user/1000/lazaret/".to_owned(),
            ];
            assert!(
                allowed.iter().any(|a| src.starts_with(a.as_str())),
                "{dest} <- {src}"
            );
            // Outside the workspace only the fixed mount points (created in
            // the prepared lower) and their children are destinations.
            assert!(
                MOUNT_POINTS
                    .iter()
                    .chain(MOUNT_FILES.iter())
                    .any(|mp| Path::new(&dest).starts_with(mp)),
                "{dest} would be created in the prepared lower"
            );
        }
    }
}

#[test]
fn plain_repository() -> Result<(), String> {
    let p = plan(GitSentry::Repository {
        read_only: vec!["/home/dev/proj/.git/config".into()],
    });
    let v = json(&p)?;
    assert_isolation(&v, &p);
    let m = mounts(&v);
    let find = |d: &str| m.iter().find(|x| x.0 == d).cloned();
    assert_eq!(
        find("/workspace").map(|x| x.2),
        Some("/home/dev/proj".to_owned())
    );
    // SR-4: .git is the Git Sentry filter, never the host directory itself.
    assert_eq!(
        find("/workspace/.git").map(|x| (x.1, x.2)),
        Some((
            "bind".to_owned(),
            "/run/user/1000/lazaret/d/gen-1/git-sentry".to_owned()
        ))
    );
    assert!(find("/workspace/.git/config").is_some_and(|x| x.3.contains(&"ro".to_owned())));
    assert_eq!(
        find("/workspace/.git/hooks").map(|x| x.1),
        Some("tmpfs".to_owned())
    );
    assert_eq!(
        find("/workspace/.vscode").map(|x| x.1),
        Some("tmpfs".to_owned())
    );
    // Parents are mounted before children.
    let pos = |d: &str| m.iter().position(|x| x.0 == d);
    assert!(
        pos("/workspace") < pos("/workspace/.git")
            && pos("/workspace/.git") < pos("/workspace/.git/config")
    );
    snapshot("plain_repository.json", &v)?;
    // Without the filter there is no plan for a repository.
    for missing in [None, Some(PathBuf::from("relative/git-sentry"))] {
        let mut p = p.clone();
        p.git_filter = missing;
        assert!(matches!(build_spec(&p), Err(BundleError::NoFilter(_))));
    }
    Ok(())
}

#[test]
fn linked_worktree_follows_the_common_dir() -> Result<(), String> {
    let mut p = plan(GitSentry::LinkedWorktree {
        common_dir: "/main/.git".into(),
        worktree_dir: "worktrees/proj".into(),
        read_only: vec![
            "/main/.git/config".into(),
            "/main/.git/worktrees/proj/commondir".into(),
            "/main/.git/worktrees/proj/gitdir".into(),
        ],
    });
    p.git_file = Some("/run/user/1000/lazaret/bundle/dot-git".into());
    let v = json(&p)?;
    assert_isolation(&v, &p);
    let m = mounts(&v);
    let find = |d: &str| m.iter().find(|x| x.0 == d).cloned();
    assert!(find("/workspace/.git").is_some_and(|x| x.2
        == "/run/user/1000/lazaret/bundle/dot-git"
        && x.3.contains(&"ro".to_owned())));
    assert!(find("/.lazaret/git-common")
        .is_some_and(|x| x.2 == "/run/user/1000/lazaret/d/gen-1/git-sentry"
            && x.3.contains(&"rw".to_owned())));
    assert!(find("/.lazaret/git-common/config").is_some_and(|x| x.3.contains(&"ro".to_owned())));
    assert!(find("/.lazaret/git-common/worktrees/proj/commondir")
        .is_some_and(|x| x.3.contains(&"ro".to_owned())));
    assert_eq!(
        find("/.lazaret/git-common/hooks").map(|x| x.1),
        Some("tmpfs".to_owned())
    );
    assert_eq!(
        worktree_git_file(Path::new("worktrees/proj")),
        "gitdir: /.lazaret/git-common/worktrees/proj\n"
    );
    snapshot("linked_worktree.json", &v)?;
    p.git_file = None;
    assert!(matches!(build_spec(&p), Err(BundleError::WorktreePlan(_))));
    Ok(())
}

/// Spec 3.5, SR-13: with the ignored-path router the sandbox's workspace
/// is the router's mount, while the git directory is still the Git
/// Sentry's filter over the host's and its sealed files the host's own.
#[test]
fn the_router_is_bound_at_the_workspace() -> Result<(), String> {
    let mut p = plan(GitSentry::Repository {
        read_only: vec!["/home/dev/proj/.git/config".into()],
    });
    p.router = Some("/run/user/1000/lazaret/d/gen-1/router".into());
    let v = json(&p)?;
    assert_isolation(&v, &p);
    let m = mounts(&v);
    let find = |d: &str| m.iter().find(|x| x.0 == d).cloned();
    assert_eq!(
        find("/workspace").map(|x| x.2),
        Some("/run/user/1000/lazaret/d/gen-1/router".to_owned())
    );
    assert_eq!(
        find("/workspace/.git").map(|x| x.2),
        Some("/run/user/1000/lazaret/d/gen-1/git-sentry".to_owned())
    );
    assert_eq!(
        find("/workspace/.git/config").map(|x| x.2),
        Some("/home/dev/proj/.git/config".to_owned())
    );
    p.router = Some("router".into());
    assert!(matches!(
        build_spec(&p),
        Err(BundleError::NotAbsolute {
            what: "ignored-path router",
            ..
        })
    ));
    Ok(())
}

/// Without a repository the only host binds are the workspace and the
/// generation's read-only network files (spec 3.7).
#[test]
fn no_repository_has_only_the_workspace() -> Result<(), String> {
    let mut p = plan(GitSentry::NoRepository);
    p.editor_dirs.clear();
    p.state_anchors.clear();
    p.volumes.clear();
    let v = json(&p)?;
    assert_isolation(&v, &p);
    let binds: Vec<String> = mounts(&v)
        .into_iter()
        .filter(|m| m.1 == "bind")
        .map(|m| m.0)
        .collect();
    assert_eq!(
        binds,
        vec!["/workspace", RESOLV_CONF, NETWORK_INFO_DIR, CREDENTIALS]
    );
    for (dest, _, source, options) in mounts(&v) {
        if dest == RESOLV_CONF || dest == NETWORK_INFO_DIR {
            assert!(
                source.starts_with("/run/user/1000/lazaret/d/gen-1/net/"),
                "{dest} <- {source}"
            );
        }
        if dest == CREDENTIALS {
            assert_eq!(source, "/run/user/1000/lazaret/d/gen-1/credentials");
        }
        if dest == RESOLV_CONF || dest == NETWORK_INFO_DIR || dest == CREDENTIALS {
            for option in ["ro", "nosuid", "nodev", "noexec"] {
                assert!(options.contains(&option.to_owned()), "{dest}: {options:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn bad_plans_are_refused() {
    let mut p = plan(GitSentry::Repository {
        read_only: vec!["/etc/passwd".into()],
    });
    assert!(matches!(
        build_spec(&p),
        Err(BundleError::OutsideRepository { .. })
    ));
    p.git = GitSentry::NoRepository;
    p.editor_dirs = vec!["../x".into()];
    assert!(matches!(
        build_spec(&p),
        Err(BundleError::BadEditorDir { .. })
    ));
    p.editor_dirs.clear();
    p.workspace = "relative".into();
    assert!(matches!(
        build_spec(&p),
        Err(BundleError::NotAbsolute {
            what: "workspace",
            ..
        })
    ));
    p.workspace = "/w".into();
    p.args.clear();
    assert!(matches!(build_spec(&p), Err(BundleError::EmptyArgs)));
}

/// Spec 3.6: each State Anchor is bound read-write at its persistent path,
/// before the resolver configuration and network directory beneath `/etc`
/// (a later bind of `/etc` would hide them).
#[test]
fn state_anchors_are_bound_before_the_mounts_beneath_them() -> Result<(), String> {
    let p = plan(GitSentry::NoRepository);
    let v = json(&p)?;
    let all = mounts(&v);
    let at = |dest: &str| all.iter().position(|(d, ..)| d == dest);
    let etc = at("/etc").ok_or("no /etc anchor")?;
    assert_eq!(
        all[etc],
        (
            "/etc".to_owned(),
            "bind".to_owned(),
            "/run/user/1000/lazaret/d/gen-1/anchors/etc".to_owned(),
            vec!["bind".to_owned(), "rw".to_owned()]
        )
    );
    assert!(etc < at(RESOLV_CONF).ok_or("no resolv.conf")?);
    assert!(etc < at(NETWORK_INFO_DIR).ok_or("no network directory")?);
    assert!(at("/usr").ok_or("no /usr anchor")? < at(WORKSPACE).ok_or("no workspace")?);
    let mut relative = plan(GitSentry::NoRepository);
    relative.volumes.clear();
    relative.state_anchors = vec![("usr".into(), "/run/x".into())];
    assert!(matches!(
        build_spec(&relative),
        Err(BundleError::NotAbsolute {
            what: "persistent",
            ..
        })
    ));
    Ok(())
}

/// Schemas "volume": each volume is bound at its sandbox path after the
/// anchor it lies in, read-only or read-write as declared, never set-ID or
/// device-bearing; one not strictly beneath an anchor's path is refused.
#[test]
fn volumes_are_bound_inside_their_anchors_with_their_access() -> Result<(), String> {
    let p = plan(GitSentry::NoRepository);
    let all = mounts(&json(&p)?);
    let at = |dest: &str| all.iter().position(|(d, ..)| d == dest);
    let datasets = at("/usr/share/datasets").ok_or("no read-only volume")?;
    let token = at("/etc/agent/token").ok_or("no read-write volume")?;
    assert_eq!(
        all[datasets],
        (
            "/usr/share/datasets".to_owned(),
            "bind".to_owned(),
            "/home/dev/datasets".to_owned(),
            ["bind", "ro", "nosuid", "nodev"]
                .map(str::to_owned)
                .to_vec()
        )
    );
    assert_eq!(
        all[token].3,
        ["bind", "rw", "nosuid", "nodev"]
            .map(str::to_owned)
            .to_vec()
    );
    assert!(at("/usr").ok_or("no /usr anchor")? < datasets);
    assert!(at("/etc").ok_or("no /etc anchor")? < token);
    for outside in ["/usr", "/opt/tools", "/usrlocal/x"] {
        let mut q = plan(GitSentry::NoRepository);
        q.volumes[0].container = outside.into();
        assert!(
            matches!(build_spec(&q), Err(BundleError::VolumeOutsideAnchors(ref d)) if d == Path::new(outside)),
            "{outside}"
        );
    }
    let mut q = plan(GitSentry::NoRepository);
    q.volumes[1].host = "relative/token".into();
    assert!(matches!(
        build_spec(&q),
        Err(BundleError::NotAbsolute {
            what: "volume source",
            ..
        })
    ));
    Ok(())
}

#[test]
fn the_mailbox_is_bound_read_only_with_its_requests_writable() -> Result<(), String> {
    let without = mounts(&json(&plan(GitSentry::NoRepository))?);
    assert!(
        !without.iter().any(|(d, ..)| d.starts_with(SANDBOX_MAILBOX)),
        "no mailbox without escalation"
    );
    let mut p = plan(GitSentry::NoRepository);
    p.mailbox = Some("/run/user/1000/lazaret/d/gen-1/mailbox".into());
    let v = json(&p)?;
    assert_isolation(&v, &p);
    let all = mounts(&v);
    let at = |dest: &str| all.iter().position(|(d, ..)| d == dest);
    let mailbox = at(SANDBOX_MAILBOX).ok_or("no mailbox mount")?;
    let requests = at(SANDBOX_REQUESTS).ok_or("no requests mount")?;
    assert!(mailbox < requests, "the parent is bound first");
    let opts = |o: &[&str]| o.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        all[mailbox],
        (
            SANDBOX_MAILBOX.to_owned(),
            "bind".to_owned(),
            "/run/user/1000/lazaret/d/gen-1/mailbox".to_owned(),
            opts(&["bind", "ro", "nosuid", "nodev", "noexec"])
        )
    );
    assert_eq!(
        all[requests],
        (
            SANDBOX_REQUESTS.to_owned(),
            "bind".to_owned(),
            "/run/user/1000/lazaret/d/gen-1/mailbox/requests".to_owned(),
            opts(&["bind", "rw", "nosuid", "nodev", "noexec"])
        )
    );
    assert!(MOUNT_POINTS.contains(&SANDBOX_MAILBOX));
    p.mailbox = Some("relative/mailbox".into());
    assert!(matches!(
        build_spec(&p),
        Err(BundleError::NotAbsolute {
            what: "mailbox",
            ..
        })
    ));
    Ok(())
}
