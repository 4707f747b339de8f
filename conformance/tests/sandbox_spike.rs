//! End-to-end spike (issue 6): the real launch path's foundations together —
//! verified user namespace, a private mount namespace and an empty network
//! namespace, the bundle from `runtime::bundle` over the prepared lower of the
//! default Debian image, and `runsc run` — as the unprivileged test user.
//! Proves the Git Sentry and isolation properties from inside gVisor and
//! that nothing is left behind, and measures the cold cycle.

use lazaret_conformance::fixtures::sh;
use lazaret_conformance::test_user::{delegate, Delegation};
use lazaret_effects::git_sentry;
use lazaret_effects::image::reference::ImageRef;
use lazaret_effects::image::resolve;
use lazaret_effects::image::store::BlobStore;
use lazaret_effects::prepare::{prepare, PreparedLower, RealPrepareHost};
use lazaret_effects::userns::{
    plan_maps, spawn_in_user_namespace, Identity, NamespaceMaps, RealHost,
};
use lazaret_runtime::bundle::{build_spec, worktree_git_file, BundlePlan, GitSentry, GIT_COMMON};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The checks PID 1 (bash, which reaps its children) runs inside the sandbox;
/// each prints `name=value`.
const CHECKS: &str = r#"
v() { printf '%s=%s\n' "$1" "$2"; }
cd /workspace
v version "$(cat /proc/version)"
v dmesg "$(dmesg 2>/dev/null | head -n 1)"
v from_host "$(cat from_host)"
echo inside > from_sandbox; v wrote $?
echo x 2>/dev/null >> .git/config; v cfg_append $?
git config user.name evil 2>/dev/null; v git_config $?
ln -s .git/config cfglink; echo x 2>/dev/null >> cfglink; v cfg_via_symlink $?; rm -f cfglink
mv .git moved 2>/dev/null; v mv_git $?
mv .git/hooks .git/h2 2>/dev/null; v mv_hooks $?
rmdir .git/hooks 2>/dev/null; v rmdir_hooks $?
mv .git/config .git/c2 2>/dev/null; v mv_cfg $?
rm -f .git/config 2>/dev/null; v rm_cfg $?
ln .git/config hardlink 2>/dev/null; v hardlink $?
printf '#!/bin/sh\necho evil\n' > .git/hooks/pre-commit; v hook_write $?
v vscode "$(ls -A .vscode)"
echo '{}' > .vscode/settings.json; v vscode_write $?
test -e "$HOST_HOME"; v home $?
v shadow "$(grep -c "^$HOST_USER:" /etc/shadow)"
git status --porcelain >/dev/null; v git_status $?
git -c user.name=s -c user.email=s@s commit -q --allow-empty -m inside; v git_commit $?
exit 0
"#;

struct Run {
    stdout: String,
    stderr: String,
    success: bool,
    elapsed: Duration,
}

/// One cold cycle: RS in a fresh verified user namespace unshares mount and
/// network namespaces, waits for its bundle, then execs `runsc run`.
fn run_sandbox(
    maps: &NamespaceMaps,
    rootfs: &Path,
    workspace: &Path,
    work: &Path,
    args: Vec<String>,
    env: Vec<String>,
) -> Result<Run, String> {
    let start = Instant::now();
    let bundle = work.join("bundle");
    let state = work.join("runsc-state");
    std::fs::create_dir_all(&bundle).map_err(s)?;
    std::fs::create_dir_all(&state).map_err(s)?;
    let script = format!(
        "echo ready; read go; exec runsc --root={} --ignore-cgroups --network=none --overlay2=root:memory run --bundle {} spike",
        state.display(),
        bundle.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--net",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut rs = spawn_in_user_namespace(cmd, &mut RealHost, maps).map_err(s)?;
    let mut out = BufReader::new(rs.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    out.read_line(&mut line).map_err(s)?;
    if line != "ready\n" {
        return Err(format!("runtime supervisor said {line:?}"));
    }
    let plan = BundlePlan {
        rootfs: rootfs.to_owned(),
        workspace: workspace.to_owned(),
        netns: PathBuf::from(format!("/proc/{}/ns/net", rs.id())),
        args,
        env,
        hostname: "lazaret".into(),
        git: git_sentry::resolve(workspace).map_err(s)?,
        editor_dirs: git_sentry::editor_dirs(workspace).map_err(s)?,
        git_file: None,
    };
    let mut plan = plan;
    if let GitSentry::LinkedWorktree { worktree_dir, .. } = &plan.git {
        let f = work.join("dot-git");
        std::fs::write(&f, worktree_git_file(worktree_dir)).map_err(s)?;
        plan.git_file = Some(f);
    }
    let spec = build_spec(&plan).map_err(s)?;
    let text = serde_json::to_string_pretty(&spec).map_err(s)?;
    std::fs::write(bundle.join("config.json"), text).map_err(s)?;
    rs.stdin
        .take()
        .ok_or("no stdin")?
        .write_all(b"go\n")
        .map_err(s)?;
    let mut stderr = String::new();
    let mut err_pipe = rs.stderr.take().ok_or("no stderr")?;
    let err_thread = std::thread::spawn(move || {
        let _ = err_pipe.read_to_string(&mut stderr);
        stderr
    });
    let mut stdout = String::new();
    out.read_to_string(&mut stdout).map_err(s)?;
    let status = rs.wait().map_err(s)?;
    let stderr = err_thread
        .join()
        .map_err(|_| "stderr reader panicked".to_owned())?;
    Ok(Run {
        stdout,
        stderr,
        success: status.success(),
        elapsed: start.elapsed(),
    })
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push(format!("{name}: {text}"));
        }
    }
    found
}

/// The default image's reference (built or found in the cache by
/// scripts/build-image; as root, before delegation, so the test user reads
/// the root cache).
fn default_image() -> Result<String, String> {
    let root_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if rustix::process::geteuid().is_root() {
        return Ok(sh(&root_dir, "scripts/build-image")
            .map_err(s)?
            .trim()
            .to_owned());
    }
    match std::env::var("LAZARET_SPIKE_IMAGE") {
        Ok(r) => Ok(r),
        Err(_) => Ok(sh(&root_dir, "scripts/build-image")
            .map_err(s)?
            .trim()
            .to_owned()),
    }
}

/// The caller's identity, maps and the prepared lower of the default image
/// (in a persistent storage root, so later runs are cache hits).
fn prepared_lower() -> Result<(Identity, NamespaceMaps, PreparedLower), String> {
    let image_ref = default_image()?;
    let me = Identity::current(&mut RealHost).map_err(s)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(s)?;
    let home = PathBuf::from(std::env::var("HOME").map_err(s)?);
    let storage = home.join(".cache/lazaret-conformance/storage");
    let store = BlobStore::open(&storage.join("blobs")).map_err(s)?;
    let t = Instant::now();
    let image = resolve(
        &ImageRef::parse(&image_ref).map_err(s)?,
        &store,
        &mut |_| {},
    )
    .map_err(s)?;
    let lower = prepare(
        &mut RealPrepareHost::new(maps.clone()),
        &storage,
        &store,
        &image,
        &maps,
    )
    .map_err(s)?;
    println!(
        "resolve+prepare: {:?} (cache hit: {})",
        t.elapsed(),
        lower.cache_hit
    );
    Ok((me, maps, lower))
}

#[test]
fn spike_linked_worktree_is_protected_through_its_common_dir() -> Result<(), String> {
    let image_ref = default_image()?;
    if delegate(
        "spike_linked_worktree_is_protected_through_its_common_dir",
        &[("LAZARET_SPIKE_IMAGE", &image_ref)],
    )
    .map_err(s)?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let (_me, maps, lower) = prepared_lower()?;
    let tmp = tempfile::tempdir().map_err(s)?;
    let work = std::fs::canonicalize(tmp.path()).map_err(s)?;
    let main = work.join("main");
    std::fs::create_dir(&main).map_err(s)?;
    sh(
        &main,
        "git init -q -b main && echo secret > main_only && git add main_only && \
         git -c user.name=h -c user.email=h@h commit -q -m host && git worktree add -q ../wt",
    )
    .map_err(s)?;
    let ws = work.join("wt");
    let common = main.join(".git");
    let gitdir = common.join("worktrees/wt");
    let before: Vec<Vec<u8>> = [
        common.join("config"),
        gitdir.join("commondir"),
        ws.join(".git"),
    ]
    .iter()
    .map(std::fs::read)
    .collect::<Result<_, _>>()
    .map_err(s)?;
    let checks = format!(
        r#"
v() {{ printf '%s=%s\n' "$1" "$2"; }}
cd /workspace
git status --porcelain >/dev/null; v git_status $?
echo x 2>/dev/null >> {inside}/config; v cfg_append $?
echo /tmp/evil 2>/dev/null > {inside}/worktrees/wt/commondir; v commondir_write $?
echo 'gitdir: /tmp/evil' 2>/dev/null > .git; v dotgit_write $?
mv .git moved 2>/dev/null; v mv_dotgit $?
mv {inside} /.lazaret/g2 2>/dev/null; v mv_common $?
printf '#!/bin/sh\n' > {inside}/hooks/pre-commit; v hook_write $?
test -e {main}/main_only; v main_worktree_visible $?
git -c user.name=s -c user.email=s@s commit -q --allow-empty -m inside-wt; v git_commit $?
exit 0
"#,
        inside = GIT_COMMON,
        main = main.display(),
    );
    let env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned()];
    let run = run_sandbox(
        &maps,
        &lower.rootfs,
        &ws,
        &work,
        vec!["/bin/bash".into(), "-c".into(), checks],
        env,
    )?;
    assert!(
        run.success,
        "sandbox failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    println!("inside:\n{}", run.stdout);
    let v: BTreeMap<&str, &str> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let get = |k: &str| v.get(k).copied().unwrap_or("<missing>");
    assert_eq!(get("git_status"), "0");
    for k in [
        "cfg_append",
        "commondir_write",
        "dotgit_write",
        "mv_dotgit",
        "mv_common",
    ] {
        assert_ne!(get(k), "0", "{k} succeeded inside the sandbox");
        assert_ne!(get(k), "<missing>", "{k} did not run");
    }
    let after: Vec<Vec<u8>> = [
        common.join("config"),
        gitdir.join("commondir"),
        ws.join(".git"),
    ]
    .iter()
    .map(std::fs::read)
    .collect::<Result<_, _>>()
    .map_err(s)?;
    assert_eq!(after, before, "a protected file changed on the host");
    assert_eq!(get("hook_write"), "0");
    assert!(
        !common.join("hooks/pre-commit").exists(),
        "hook reached the host"
    );
    assert_eq!(
        get("main_worktree_visible"),
        "1",
        "only the common dir of the main repository is visible"
    );
    assert_eq!(get("git_commit"), "0");
    assert_eq!(
        sh(&ws, "git log -1 --format=%s").map_err(s)?.trim(),
        "inside-wt"
    );
    let state = work.join("runsc-state");
    assert!(processes_mentioning(&state.display().to_string()).is_empty());
    assert_eq!(std::fs::read_dir(&state).map_err(s)?.count(), 0);
    assert_lower_untouched(&lower)?;
    Ok(())
}

/// Nothing in the prepared lower is newer than its record: runsc wrote
/// neither files nor mount points into it.
fn assert_lower_untouched(lower: &PreparedLower) -> Result<(), String> {
    let changed = sh(
        Path::new("/"),
        &format!(
            "find {} -newer {} 2>/dev/null || true",
            lower.rootfs.display(),
            lower.dir.join("artifact.json").display()
        ),
    )
    .map_err(s)?;
    assert!(
        changed.trim().is_empty(),
        "the prepared lower was written:\n{changed}"
    );
    Ok(())
}

#[test]
fn spike_sandbox_protects_git_and_leaves_nothing_behind() -> Result<(), String> {
    let image_ref = default_image()?;
    if delegate(
        "spike_sandbox_protects_git_and_leaves_nothing_behind",
        &[("LAZARET_SPIKE_IMAGE", &image_ref)],
    )
    .map_err(s)?
        == Delegation::PassedAsTestUser
    {
        return Ok(());
    }
    let (me, maps, lower) = prepared_lower()?;
    let home = PathBuf::from(std::env::var("HOME").map_err(s)?);

    let tmp = tempfile::tempdir().map_err(s)?;
    let work = std::fs::canonicalize(tmp.path()).map_err(s)?;
    let ws = work.join("ws");
    std::fs::create_dir(&ws).map_err(s)?;
    sh(
        &ws,
        "git init -q && git -c user.name=h -c user.email=h@h commit -q --allow-empty -m host && \
         echo host > from_host && mkdir .vscode && echo '{\"tasks\":[]}' > .vscode/tasks.json",
    )
    .map_err(s)?;
    let config_before = std::fs::read(ws.join(".git/config")).map_err(s)?;
    let marker = home.join(".lazaret-spike-marker");
    std::fs::write(&marker, "host secret").map_err(s)?;

    let env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        format!("HOST_HOME={}", marker.display()),
        format!("HOST_USER={}", me.user),
    ];
    let run = run_sandbox(
        &maps,
        &lower.rootfs,
        &ws,
        &work,
        vec!["/bin/bash".into(), "-c".into(), CHECKS.into()],
        env,
    )?;
    let _ = std::fs::remove_file(&marker);
    assert!(
        run.success,
        "sandbox failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    let v: BTreeMap<&str, &str> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let get = |k: &str| v.get(k).copied().unwrap_or("<missing>");
    println!("inside:\n{}", run.stdout);

    // gVisor, not the host kernel: its /proc/version is a fixed 4.4.0 string
    // (it does not say "gVisor"); its syslog does.
    let host_version = std::fs::read_to_string("/proc/version").map_err(s)?;
    assert_ne!(get("version"), host_version.trim());
    assert!(
        get("version").starts_with("Linux version 4.4.0"),
        "{}",
        get("version")
    );
    assert!(get("dmesg").contains("gVisor"), "{}", get("dmesg"));
    // Edits propagate both ways.
    assert_eq!(get("from_host"), "host");
    assert_eq!(get("wrote"), "0");
    assert_eq!(
        std::fs::read_to_string(ws.join("from_sandbox")).map_err(s)?,
        "inside\n"
    );
    // SR-4: .git/config cannot be written, replaced, removed or linked; .git
    // and hooks cannot be moved away.
    for k in [
        "cfg_append",
        "git_config",
        "cfg_via_symlink",
        "mv_git",
        "mv_hooks",
        "rmdir_hooks",
        "mv_cfg",
        "rm_cfg",
        "hardlink",
    ] {
        assert_ne!(get(k), "0", "{k} succeeded inside the sandbox");
        assert_ne!(get(k), "<missing>", "{k} did not run");
    }
    assert_eq!(
        std::fs::read(ws.join(".git/config")).map_err(s)?,
        config_before
    );
    assert!(
        ws.join(".git/HEAD").is_file()
            && !ws.join("moved").exists()
            && !ws.join("hardlink").exists()
    );
    // A hook written inside lands in transient storage only.
    assert_eq!(get("hook_write"), "0");
    assert!(
        !ws.join(".git/hooks/pre-commit").exists(),
        "hook reached the host"
    );
    // Editor directory hidden and transient.
    assert_eq!(get("vscode"), "");
    assert_eq!(get("vscode_write"), "0");
    assert!(!ws.join(".vscode/settings.json").exists());
    assert!(ws.join(".vscode/tasks.json").is_file());
    // Paths outside the workspace are not visible.
    assert_eq!(get("home"), "1", "the host home marker is visible");
    assert_eq!(
        get("shadow"),
        "0",
        "the host's /etc/shadow content is visible"
    );
    // Git works inside and its commits are the host's.
    assert_eq!(get("git_status"), "0");
    assert_eq!(get("git_commit"), "0");
    let subject = sh(&ws, "git log -1 --format=%s").map_err(s)?;
    assert_eq!(subject.trim(), "inside");

    // Nothing left behind: no runsc state, no process, no mount visible here.
    let state = work.join("runsc-state");
    let leftovers: Vec<_> = std::fs::read_dir(&state)
        .map_err(s)?
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(leftovers.is_empty(), "runsc state left: {leftovers:?}");
    let procs = processes_mentioning(&state.display().to_string());
    assert!(procs.is_empty(), "processes left: {procs:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(s)?;
    assert!(
        !mountinfo.contains(&work.display().to_string()),
        "a mount leaked into the host namespace"
    );

    // Cold cycle (prepared lower cached): RS + namespaces + runsc run /bin/true + teardown.
    let mut times = Vec::new();
    for _ in 0..5 {
        let r = run_sandbox(
            &maps,
            &lower.rootfs,
            &ws,
            &work,
            vec!["/bin/true".into()],
            vec![],
        )?;
        assert!(r.success, "{}", r.stderr);
        times.push(r.elapsed);
    }
    times.sort();
    println!(
        "cold cycle runsc run /bin/true: median {:?}, all {times:?}",
        times[times.len() / 2]
    );
    assert!(processes_mentioning(&state.display().to_string()).is_empty());
    assert_lower_untouched(&lower)?;
    Ok(())
}
