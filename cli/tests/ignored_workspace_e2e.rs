//! End-to-end: Ignored Workspace State through the product (spec 3.5,
//! SR-13), as the unprivileged test user under real runsc. The sandbox's
//! `/workspace` is the ignored-path router: tracked and non-ignored paths
//! are the host's both ways, ignored untracked paths are the Domain's own,
//! persistent across launches, and never the host's (a host `.env` stays
//! unread, a `node_modules` the agent fills never reaches the host).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{
    assert_failed, assert_succeeded, chown_tree, default_image, domain_root, guest_results,
    host_git, signal_through_pidfd, text, Env, ONE_AT_A_TIME,
};

use std::os::unix::fs::PermissionsExt;

/// A repository whose `.gitignore` ignores a secret, dependencies and
/// build output, with a host `.env` and host build output present.
fn repository(env: &Env) {
    host_git(&env.workspace, &["init", "-q"]);
    std::fs::write(
        env.workspace.join(".gitignore"),
        "/.env\nnode_modules/\nbuild/\n",
    )
    .unwrap();
    std::fs::write(env.workspace.join("a.txt"), "host\n").unwrap();
    host_git(&env.workspace, &["add", ".gitignore", "a.txt"]);
    host_git(&env.workspace, &["commit", "-q", "-m", "host"]);
    std::fs::write(env.workspace.join(".env"), "SECRET=host\n").unwrap();
    std::fs::create_dir(env.workspace.join("build")).unwrap();
    std::fs::write(env.workspace.join("build/out.bin"), "host build\n").unwrap();
    chown_tree(&env.workspace);
}

const FIRST: &str = r#"
v() { printf '%s=%s\n' "$1" "$2"; }
cd /workspace
cat .env >/dev/null 2>&1; v env_read $?
test -e build/out.bin; v build_seen $?
echo SECRET=sandbox > .env; v env_write $?
mkdir -p node_modules/pkg && echo module > node_modules/pkg/index.js; v deps_write $?
mkdir -p build && echo sandbox build > build/out.bin; v build_write $?
echo edited >> a.txt; v tracked_write $?
echo new > new.txt; v untracked_write $?
cp /bin/true tool && chmod 4755 tool; v suid_chmod $?
v tool_mode "$(stat -c %a tool)"
git init --bare -q bare.git; v bare_init $?
v status "$(git status --porcelain | tr '\n' ',')"
exit 0
"#;

const SECOND: &str = r#"
v() { printf '%s=%s\n' "$1" "$2"; }
cd /workspace
v env "$(cat .env)"
v deps "$(cat node_modules/pkg/index.js)"
v build "$(cat build/out.bin)"
v tracked "$(tr '\n' ',' < a.txt)"
v check_stat "$(git config --get core.checkStat)"
git add -f node_modules/pkg/index.js 2>/tmp/add.err; v force_add $?
v force_add_error "$(head -n 1 /tmp/add.err)"
v status "$(git status --porcelain | tr '\n' ',')"
exit 0
"#;

/// SR-13: the host's ignored files are not the sandbox's; what the sandbox
/// writes at ignored paths stays in the Domain and is there at the next
/// launch; tracked and non-ignored paths are shared both ways; set-ID bits
/// never reach the host (spec 3.5 mode hygiene).
#[test]
fn ignored_paths_are_the_domains_own_and_persist_across_launches() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("ignored-workspace", &default_image());
    repository(&env);
    let out = env.run(&["default", "--", "bash", "-c", FIRST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = guest_results(&text(&out.stdout));
    assert_failed(&r, &["env_read", "build_seen"]);
    assert_succeeded(
        &r,
        &[
            "env_write",
            "deps_write",
            "build_write",
            "tracked_write",
            "untracked_write",
            "suid_chmod",
            "bare_init",
        ],
    );
    assert_eq!(r.get("tool_mode").map(String::as_str), Some("755"), "{r:?}");
    // Only the tracked change and the non-ignored new files are Git's
    // business; the ignored ones stay ignored inside too.
    assert_eq!(
        r.get("status").map(String::as_str),
        Some(" M a.txt,?? bare.git/,?? new.txt,?? tool,"),
        "{r:?}"
    );
    // On the host: the secret, the build output and the absence of
    // dependencies are as the host left them; the shared paths changed.
    let ws = &env.workspace;
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).unwrap(),
        "SECRET=host\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("build/out.bin")).unwrap(),
        "host build\n"
    );
    assert!(
        !ws.join("node_modules").exists(),
        "dependencies reached the host"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "host\nedited\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("new.txt")).unwrap(),
        "new\n"
    );
    // A bare repository made inside is the sandbox's: its HEAD is not the
    // host's, so host Git there finds the workspace's repository (SR-4).
    assert!(ws.join("bare.git/config").exists());
    assert!(!ws.join("bare.git/HEAD").exists());
    assert_eq!(
        host_git(&ws.join("bare.git"), &["rev-parse", "--absolute-git-dir"]).trim_end(),
        ws.join(".git").display().to_string()
    );
    let mode = std::fs::metadata(ws.join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "{mode:o}");
    // The sandbox's ignored files are the Domain's persistent state.
    let ignored = domain_root(&env.home).join("ignored");
    assert_eq!(
        std::fs::read_to_string(ignored.join(".env")).unwrap(),
        "SECRET=sandbox\n"
    );
    env.assert_nothing_left();

    let out = env.run(&["default", "--", "bash", "-c", SECOND]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = guest_results(&text(&out.stdout));
    assert_eq!(
        r.get("env").map(String::as_str),
        Some("SECRET=sandbox"),
        "{r:?}"
    );
    assert_eq!(r.get("deps").map(String::as_str), Some("module"), "{r:?}");
    assert_eq!(
        r.get("build").map(String::as_str),
        Some("sandbox build"),
        "{r:?}"
    );
    assert_eq!(
        r.get("tracked").map(String::as_str),
        Some("host,edited,"),
        "{r:?}"
    );
    // runsc numbers files anew in each sandbox: sessions' Git leaves inode
    // numbers out of its check, and still sees exactly what changed.
    assert_eq!(
        r.get("check_stat").map(String::as_str),
        Some("minimal"),
        "{r:?}"
    );
    // spec 3.5: force-adding a path only the Domain's state holds is
    // refused before the index changes (EBUSY on the index rename), never
    // a copy to the host or a silent disappearance.
    assert_failed(&r, &["force_add"]);
    assert!(
        r.get("force_add_error")
            .is_some_and(|e| e.contains("index")),
        "{r:?}"
    );
    assert_eq!(host_git(ws, &["ls-files", "node_modules"]), "");
    assert_eq!(
        r.get("status").map(String::as_str),
        Some(" M a.txt,?? bare.git/,?? new.txt,?? tool,"),
        "{r:?}"
    );
    env.assert_nothing_left();
    env.assert_traces_replay();
    // The router is a participant of the generation: its daemon staged and
    // committed through RS, its mount committed, and all of it released.
    let steps = routing_steps(&env);
    for step in [
        "RecordIntent(GitRouting)",
        "StageProcess(GitRoutingDaemon)",
        "CommitProcess(GitRoutingDaemon)",
        "CommitParticipant(GitRouting)",
        "RecordReleaseIntent(GitRouting)",
        "CleanParticipant(GitRouting)",
    ] {
        assert!(steps.iter().any(|s| s == step), "{step} not in {steps:?}");
    }
}

/// The trace steps of this scenario's generations that name the router's
/// role or slot, as `Action(Param)`.
fn routing_steps(env: &Env) -> Vec<String> {
    let lines: Vec<serde_json::Value> = env
        .traces()
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    lines
        .iter()
        .filter_map(|l| {
            let param = l["params"]
                .as_object()?
                .values()
                .filter_map(|v| v.as_str())
                .find(|v| v.starts_with("GitRouting"))?;
            Some(format!("{}({param})", l["action"].as_str()?))
        })
        .collect()
}

/// Spec 3.5: the router's loss fails the Domain closed. The routing
/// daemon killed under a running session ends the session with a message
/// naming the router; the release proves the daemon gone (nothing is left,
/// the store holds only clean generations, the trace replays) and the next
/// launch serves the workspace again. (A daemon whose FUSE session stops
/// serving exits and is lost the same way:
/// `effects/tests/workspace_router.rs::a_daemon_whose_router_stops_serving_ends`.)
#[test]
fn the_routers_loss_fails_the_domain_closed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("router-loss", &default_image());
    repository(&env);
    let mut session = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "cat /workspace/a.txt && sleep 120",
    ]);
    // The session runs in the sandbox once its first output arrives.
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(session.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert_eq!(first, "host\n");
    let daemon = env
        .processes()
        .into_iter()
        .find(|p| p.contains(" __git-routing "))
        .expect("a routing daemon");
    let pid = daemon.split(':').next().unwrap();
    signal_through_pidfd(pid, rustix::process::Signal::KILL);
    let out = session.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the routing daemon of the ignored-path router ended"),
        "{}",
        text(&out.stderr)
    );
    env.assert_nothing_left();
    let out = env.run(&["default", "--", "cat", "/workspace/a.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "host\n");
    env.assert_nothing_left();
}

/// `isolate_gitignored = false` opts out: the workspace is bound as it is,
/// ignored host files included.
#[test]
fn isolate_gitignored_false_shares_the_ignored_paths_too() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("ignored-workspace-off", &default_image());
    env.write_config(
        "config.toml",
        &default_image(),
        "isolate_gitignored = false",
    );
    repository(&env);
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "cat /workspace/.env; mkdir /workspace/node_modules",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "SECRET=host\n");
    assert!(env.workspace.join("node_modules").is_dir());
    env.assert_nothing_left();
    // No router, no routing participant (protocol/LazaretUnrouted.cfg).
    assert_eq!(routing_steps(&env), Vec::<String>::new());
}
