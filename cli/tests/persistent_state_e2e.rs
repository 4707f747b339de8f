//! End-to-end: persistent sandbox state (spec 3.6, FR-4, DX-2), as the
//! unprivileged test user with the real runsc. What an agent installs under
//! a persistent path survives the Domain's teardown and is there in the
//! next generation; what it writes anywhere else is gone; the prepared
//! lower under the anchors is never written. Every scenario ends with the
//! shared leak check (which includes an empty Storage Catalog lease table)
//! and trace replay.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{
    actions_of, assert_failed, assert_succeeded, default_image, guest_results, runtime_files, text,
    Env, ONE_AT_A_TIME,
};

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The guest script's result helper: `r NAME CMD...` runs CMD and prints
/// `NAME=<status>`.
const RESULT: &str = r#"r() { name=$1; shift; "$@" > /tmp/out.$name 2>&1; echo "$name=$?"; }"#;

/// Builds a local `.deb` (`lz-probe`, one file under `/usr/share`) and
/// installs it with `dpkg -i` (results `build`, `install`).
const PROBE_PACKAGE: &str = r#"mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/share/lz-probe
printf 'Package: lz-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: test <t@t>\nDescription: probe\n' > /tmp/pkg/DEBIAN/control
echo installed > /tmp/pkg/usr/share/lz-probe/marker
r build dpkg-deb --root-owner-group --build /tmp/pkg /tmp/probe.deb
r install dpkg -i /tmp/probe.deb
"#;

/// Starts a session that keeps the Domain running until
/// [`release_the_session`]; returns once it runs.
fn hold_a_session(env: &Env) -> std::process::Child {
    hold_a_session_in(env, &env.workspace)
}

/// [`hold_a_session`] for the Domain of `workspace`.
fn hold_a_session_in(env: &Env, workspace: &Path) -> std::process::Child {
    let child = env
        .command(&[
            "default",
            "--",
            "sh",
            "-c",
            "touch /workspace/up; while [ ! -e /workspace/release ]; do sleep 0.05; done",
        ])
        .current_dir(workspace)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !workspace.join("up").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the session never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// Ends the session [`hold_a_session`] started.
fn release_the_session(env: &Env, session: std::process::Child) {
    release_the_session_in(&env.workspace, session);
}

/// Ends the session [`hold_a_session_in`] started.
fn release_the_session_in(workspace: &Path, mut session: std::process::Child) {
    std::fs::write(workspace.join("release"), b"").unwrap();
    assert!(session.wait().unwrap().success());
    let _ = std::fs::remove_file(workspace.join("release"));
    let _ = std::fs::remove_file(workspace.join("up"));
}

/// The host files under the scenario's storage root whose path ends with
/// `tail`.
fn stored(env: &Env, tail: &str) -> Vec<PathBuf> {
    runtime_files(&env.home.join(".local/share/lazaret"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(tail))
        .collect()
}

/// Spec 3.6, FR-4: a tool copied into `/usr/local/bin`, a package installed
/// with `dpkg -i` from a local `.deb`, a file in `/root` and an edited
/// `/etc` file are there after the Domain stopped and started again; a file
/// outside the persistent paths is not. The upper on the host holds the
/// writes, owned by the developer; the prepared lower does not.
#[test]
fn what_an_agent_installs_survives_the_next_launch() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-survive", &default_image());
    let install = format!(
        r#"{RESULT}
printf '#!/bin/sh\necho lz-tool-ran\n' > /usr/local/bin/lz-tool
r tool chmod 0755 /usr/local/bin/lz-tool
{PROBE_PACKAGE}r note sh -c 'echo kept > /root/lz-note'
r etc sh -c 'echo "lz-edited" >> /etc/debian_version'
r deleted rm /etc/issue
r outside sh -c 'echo gone > /srv/lz-outside'
"#
    );
    let out = env.run(&["default", "--", "sh", "-c", &install]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(
        &results,
        &[
            "tool", "build", "install", "note", "etc", "deleted", "outside",
        ],
    );
    // The Domain tore down with its last session: the next run is a new
    // generation with new anchors over the same uppers.
    let check = r#"
r() { name=$1; shift; "$@" > /tmp/out.$name 2>&1; echo "$name=$?"; }
r tool sh -c '[ "$(lz-tool)" = lz-tool-ran ]'
r listed sh -c 'dpkg -s lz-probe | grep -q "Status: install ok installed"'
r marker grep -qx installed /usr/share/lz-probe/marker
r note grep -qx kept /root/lz-note
r etc grep -qx lz-edited /etc/debian_version
r outside test -e /srv/lz-outside
r tmp test -e /tmp/probe.deb
"#;
    let out = env.run(&["default", "--", "sh", "-c", check]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(&results, &["tool", "listed", "marker", "note", "etc"]);
    assert_failed(&results, &["outside", "tmp"]);

    // On the host: the tool is in the Domain's upper, owned by the
    // developer (sandbox root is the developer); the prepared lower has
    // neither it nor the edit.
    let uppers = stored(&env, "anchors/upper/usr/local/bin/lz-tool");
    assert_eq!(uppers.len(), 1, "{uppers:?}");
    let owner = std::fs::metadata(&uppers[0]).unwrap().uid();
    let test_uid = std::fs::metadata(env.home.join("run")).unwrap().uid();
    assert_eq!(owner, test_uid);
    assert!(stored(&env, "rootfs/usr/local/bin/lz-tool").is_empty());
    for lower in stored(&env, "rootfs/etc/debian_version") {
        let text = std::fs::read_to_string(&lower).unwrap();
        assert!(!text.contains("lz-edited"), "{}", lower.display());
    }
    assert!(stored(&env, "lz-outside").is_empty());
    env.assert_nothing_left();
    let traces = env.traces();
    assert_eq!(traces.len(), 2, "two generations: {traces:?}");
    // FR-11, DX-6: `lazaret state` counts what each anchor holds, in
    // sizes only: the tool and the marker are files of /usr.
    let usr = anchor_figures(&env, "/usr");
    assert!(usr["files"].as_u64().unwrap() >= 2, "{usr}");
    assert!(usr["bytes"].as_u64().unwrap() >= 20, "{usr}");
    assert_eq!(usr["complete"], true, "{usr}");
    let root = anchor_figures(&env, "/root");
    assert!(root["files"].as_u64().unwrap() >= 1, "{root}");
    // FR-11, DX-6: `lazaret state inspect` names each path against the
    // image the anchors were mounted over, with sizes, never contents.
    let out = env.run(&["state", "inspect", "default", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        json["lower"].as_str().unwrap().ends_with("/rootfs"),
        "{json}"
    );
    let change = |anchor: &str, path: &str| {
        json["anchors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["path"] == anchor)
            .and_then(|a| {
                a["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["path"] == path)
                    .cloned()
            })
            .unwrap_or_else(|| panic!("{path} not in {anchor}: {json}"))
    };
    let tool = change("/usr", "/usr/local/bin/lz-tool");
    assert_eq!(
        (&tool["change"], &tool["kind"]),
        (&"added".into(), &"file".into())
    );
    assert_eq!(
        tool["bytes"],
        "#!/bin/sh\necho lz-tool-ran\n".len(),
        "{tool}"
    );
    assert_eq!(change("/usr", "/usr/share/lz-probe")["change"], "added");
    assert_eq!(change("/etc", "/etc/debian_version")["change"], "changed");
    assert_eq!(change("/etc", "/etc/issue")["change"], "deleted");
    assert_eq!(change("/root", "/root/lz-note")["change"], "added");
    assert!(!text(&out.stdout).contains("lz-tool-ran"), "contents shown");
    let out = env.run(&["state", "inspect", "default", "/etc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("/etc: ") && shown.contains("deleted") && !shown.contains("/usr/local"),
        "{shown}"
    );
}

/// `lazaret state default --json`'s figures for the anchor of `path`.
fn anchor_figures(env: &Env, path: &str) -> serde_json::Value {
    let out = env.run(&["state", "default", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    state["state_anchors"]
        .as_array()
        .unwrap_or_else(|| panic!("no state_anchors: {state}"))
        .iter()
        .find(|a| a["path"] == path)
        .unwrap_or_else(|| panic!("no anchor {path}: {state}"))
        .clone()
}

/// FR-4: a profile whose `persistent_dirs` is empty mounts no anchor: the
/// same install is gone in the next generation.
#[test]
fn without_persistent_paths_nothing_outside_the_workspace_is_kept() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-none", &default_image());
    env.write_config("config.toml", &default_image(), "persistent_dirs = []");
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "echo x > /usr/local/bin/lz-gone && echo y > /root/lz-gone",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "test -e /usr/local/bin/lz-gone || test -e /root/lz-gone; echo present=$?",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "present=1");
    assert!(stored(&env, "anchors/upper/usr").is_empty());
    env.assert_nothing_left();
}

/// `base` (an `oci:LAYOUT:TAG` reference) with one more layer holding
/// `files` (path relative to `/`, content), built with umoci in `dir`.
fn derived_image(base: &str, dir: &std::path::Path, files: &[(&str, &str)]) -> String {
    let (layout, tag) = base
        .strip_prefix("oci:")
        .and_then(|r| r.rsplit_once(':'))
        .unwrap_or_else(|| panic!("not an oci: reference: {base}"));
    let _ = std::fs::remove_dir_all(dir);
    let layer = dir.join("layer");
    for (path, content) in files {
        let at = layer.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, content).unwrap();
    }
    let names: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
    let script = format!(
        "cp -a {layout} layout \
         && tar --owner=0 --group=0 --numeric-owner -C layer -cf layer.tar {} \
         && umoci raw add-layer --image layout:{tag} layer.tar \
         && umoci gc --layout layout && rm -rf layer layer.tar && chmod -R a+rX .",
        names.join(" ")
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the derived image: {}",
        text(&out.stderr)
    );
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!("oci:{}/layout:{tag}", dir.display())
}

/// Spec 3.6: upper entries stay authoritative across an image change and
/// untouched paths follow the new image. The agent rewrites one `/etc`
/// file and deletes another; the profile then names an image whose extra
/// layer changes both and a third one the agent never touched. In the
/// next generation the rewrite and the deletion stand, and the untouched
/// file is the new image's.
#[test]
fn an_image_update_keeps_what_the_agent_changed_and_follows_the_rest() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-image-update", &default_image());
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "echo agent-version > /etc/debian_version && rm /etc/issue.net \
         && test -e /etc/issue && ! grep -q image-b /etc/issue",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = PathBuf::from("/tmp/lazaret-e2e-image-update");
    let updated = derived_image(
        &default_image(),
        &dir,
        &[
            ("etc/debian_version", "image-b-version\n"),
            ("etc/issue.net", "image-b-issue-net\n"),
            ("etc/issue", "image-b-issue\n"),
        ],
    );
    env.write_config("config.toml", &updated, "");
    let check = r#"
r() { name=$1; shift; "$@" > /tmp/out.$name 2>&1; echo "$name=$?"; }
r rewritten grep -qx agent-version /etc/debian_version
r deleted test -e /etc/issue.net
r followed grep -qx image-b-issue /etc/issue
"#;
    let out = env.run(&["default", "--", "sh", "-c", check]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(&results, &["rewritten", "followed"]);
    assert_failed(&results, &["deleted"]);
    env.assert_nothing_left();
    // The deletion is an overlayfs whiteout in the upper, counted as such.
    let etc = anchor_figures(&env, "/etc");
    assert_eq!(etc["deleted"], 1, "{etc}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent's dependency install creates tens of thousands of files. Each
/// file runsc caches holds host descriptors, so the dentry cache is kept
/// within the descriptor budget (docs/resources.md "Descriptors"): 20,000
/// files are created, counted and removed both in the workspace and in a
/// State Anchor (with the default cache of 50,000 and this host's hard
/// limit of 20,000 descriptors this failed with EMFILE after about 8,000).
#[test]
fn twenty_thousand_files_fit_in_the_workspace_and_in_an_anchor() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-many-files", &default_image());
    let script = r#"
for dir in /workspace/many /root/many; do
  mkdir -p "$dir"
  perl -e 'my $d = shift; for my $i (1..20000) { open(my $f, ">", "$d/$i") or die "create $d/$i: $!"; print $f "x"; close $f }' "$dir" || exit 1
  echo "$dir=$(ls "$dir" | wc -l)"
  rm -rf "$dir"
done
"#;
    let out = env.run(&["default", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["/workspace/many=20000", "/root/many=20000"]
    );
    env.assert_nothing_left();
}

/// Spec 3.2, 3.7: `/etc/resolv.conf` and `/etc/lazaret` stay the product's
/// mounts even when the `/etc` anchor's upper holds something else there
/// (a symlink as systemd-resolved makes, a file for the directory): the
/// launch puts them back before runsc sees them, so runsc neither follows
/// the symlink nor creates its target in the shared prepared lower.
#[test]
fn a_planted_symlink_at_a_protected_destination_is_put_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-destinations", &default_image());
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
    // What the Domain's /etc upper holds while the Domain is down.
    let etc = support::domain_root(&env.home).join("anchors/upper/etc");
    assert!(etc.is_dir(), "{}", etc.display());
    std::os::unix::fs::symlink("/srv/lz-planted", etc.join("resolv.conf")).unwrap();
    std::fs::write(etc.join("lazaret"), b"not a directory").unwrap();
    support::chown_tree(&etc);
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "grep -q nameserver /etc/resolv.conf && test -f /etc/lazaret/network && echo ok",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "ok");
    assert!(
        stored(&env, "rootfs/srv/lz-planted").is_empty(),
        "runsc created the symlink's target in the prepared lower"
    );
    assert!(std::fs::symlink_metadata(etc.join("resolv.conf"))
        .unwrap()
        .is_file());
    env.assert_nothing_left();
}

/// Schemas "volume", spec 3.2: a read-only directory volume gives EROFS
/// inside and leaves its host source untouched; a read-write directory
/// volume created beneath `{profile_dir}` and a read-write file volume are
/// written through to the host, and what the sandbox re-owned there is
/// given back to the developer. Each mount point is made in its State
/// Anchor, and an agent's entry of the wrong kind at one refuses the launch
/// and stays as it was.
#[test]
fn volumes_are_mounted_read_only_and_read_write_inside_their_anchors() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("volumes", &default_image());
    let datasets = env.home.join("datasets");
    std::fs::create_dir_all(&datasets).unwrap();
    std::fs::write(datasets.join("input.txt"), b"lz-input\n").unwrap();
    let token = env.home.join("token");
    std::fs::write(&token, b"old\n").unwrap();
    let busy_source = env.home.join("busy-source");
    std::fs::create_dir_all(&busy_source).unwrap();
    support::chown_tree(&busy_source);
    support::chown_tree(&datasets);
    support::chown_tree(&token);

    // The agent owns /root/busy as a file before any volume is there.
    let out = env.run(&["default", "--", "sh", "-c", "echo agent > /root/busy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let volume = |host: &str, container: &str, kind: &str, extra: &str| {
        format!("[[profiles.default.volumes]]\nhost = \"{host}\"\ncontainer = \"{container}\"\nkind = \"{kind}\"\n{extra}\n")
    };
    let volumes = [
        volume(
            &datasets.display().to_string(),
            "/root/datasets",
            "directory",
            "access = \"read-only\"",
        ),
        volume(
            "{profile_dir}/cache",
            "/var/cache/agent",
            "directory",
            "create = true",
        ),
        volume(&token.display().to_string(), "/etc/agent/token", "file", ""),
    ]
    .concat();
    let busy = volume(
        &busy_source.display().to_string(),
        "/root/busy",
        "directory",
        "",
    );
    env.write_config("config.toml", &default_image(), &format!("{volumes}{busy}"));
    let out = env.run(&["default", "--", "true"]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("/root/busy") && stderr.contains("nothing was removed"),
        "{stderr}"
    );
    env.assert_nothing_left();

    env.write_config("config.toml", &default_image(), &volumes);
    let work = r#"
r() { name=$1; shift; "$@" > /tmp/out.$name 2>&1; echo "$name=$?"; }
r read grep -qx lz-input /root/datasets/input.txt
r ro-write sh -c 'echo x > /root/datasets/new'
r ro-erofs sh -c '(echo x > /root/datasets/new) 2>&1 | grep -q "Read-only file system"'
r ro-remove rm /root/datasets/input.txt
r rw-write sh -c 'echo lz-out > /var/cache/agent/out'
r rw-chown chown 1234:1234 /var/cache/agent/out
r file-write sh -c 'echo new > /etc/agent/token'
r file-chown chown 1234:1234 /etc/agent/token
r busy grep -qx agent /root/busy
"#;
    let out = env.run(&["default", "--", "sh", "-c", work]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(
        &results,
        &[
            "read",
            "ro-erofs",
            "rw-write",
            "rw-chown",
            "file-write",
            "file-chown",
            "busy",
        ],
    );
    assert_failed(&results, &["ro-write", "ro-remove"]);
    env.assert_nothing_left();

    // On the host, after the Domain stopped.
    let names: Vec<_> = std::fs::read_dir(&datasets)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["input.txt"]);
    let out_file = env
        .home
        .join(".local/share/lazaret/profiles/default/cache/out");
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "lz-out\n");
    let test_uid = std::fs::metadata(env.home.join("run")).unwrap().uid();
    assert_eq!(
        std::fs::metadata(&out_file).unwrap().uid(),
        test_uid,
        "the sandbox's chown was not given back"
    );
    assert_eq!(std::fs::read_to_string(&token).unwrap(), "new\n");
    assert_eq!(
        std::fs::metadata(&token).unwrap().uid(),
        test_uid,
        "the sandbox's chown of the file volume was not given back"
    );
    // The mount points were made in the anchors' uppers, not the lower.
    let domain = support::domain_root(&env.home);
    assert!(domain.join("anchors/upper/root/datasets").is_dir());
    assert!(domain.join("anchors/upper/etc/agent/token").is_file());
    assert!(stored(&env, "rootfs/etc/agent").is_empty());
}

/// Spec 3.9, FR-11, SR-14, DX-6: `lazaret state reset default /usr`
/// discards what the agent installed under `/usr` (a tool and a `dpkg -i`
/// package) and leaves `/root` alone; `--all` then discards `/root` too.
/// It is refused while the Domain runs, without `--yes` when stdin is not a
/// terminal, and for a path that is not persistent; each refusal changes
/// nothing.
#[test]
fn reset_discards_one_anchor_or_all_and_is_refused_while_active() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-reset", &default_image());
    let install = format!(
        r#"{RESULT}
printf '#!/bin/sh\necho lz-tool-ran\n' > /usr/local/bin/lz-tool && chmod 0755 /usr/local/bin/lz-tool
{PROBE_PACKAGE}r note sh -c 'echo kept > /root/lz-note'
"#
    );
    let out = env.run(&["default", "--", "sh", "-c", &install]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_succeeded(
        &guest_results(&text(&out.stdout)),
        &["build", "install", "note"],
    );
    let upper = support::domain_root(&env.home).join("anchors/upper");
    let tool = upper.join("usr/local/bin/lz-tool");
    assert!(tool.is_file());

    // Refusals, each leaving everything as it was.
    let out = env.run(&["state", "reset", "default", "/usr"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--yes"), "{stderr}");
    // DX-6: the Domain and the scope were shown first.
    let shown = text(&out.stdout);
    assert!(
        shown.contains("Domain ") && shown.contains("/usr: discard"),
        "{shown}"
    );
    let out = env.run(&["state", "reset", "default", "/srv", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not a persistent path"),
        "{}",
        text(&out.stderr)
    );
    let running = hold_a_session(&env);
    let out = env.run(&["state", "reset", "default", "/usr", "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is running"),
        "{}",
        text(&out.stderr)
    );
    release_the_session(&env, running);
    env.assert_nothing_running();
    assert!(tool.is_file(), "a refused reset changed the anchor");

    let out = env.run(&["state", "reset", "default", "/usr", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("Reset /usr"),
        "{}",
        text(&out.stdout)
    );
    assert!(!upper.join("usr").exists());
    assert!(!support::domain_root(&env.home)
        .join("anchors/discard")
        .exists());
    let check = r#"
r() { name=$1; shift; "$@" > /tmp/out.$name 2>&1; echo "$name=$?"; }
r tool test -e /usr/local/bin/lz-tool
r listed sh -c 'dpkg -s lz-probe 2>/dev/null | grep -q "Status: install ok installed"'
r marker test -e /usr/share/lz-probe/marker
r note grep -qx kept /root/lz-note
r image test -x /usr/bin/dpkg
"#;
    let out = env.run(&["default", "--", "sh", "-c", check]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(&results, &["note", "image"]);
    assert_failed(&results, &["tool", "marker"]);
    // dpkg's database is under /var, which was not reset: the package is
    // still listed though its files are gone (docs/persistent-state.md).
    assert_succeeded(&results, &["listed"]);

    let out = env.run(&["state", "reset", "default", "--all", "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["scope"], "all", "{json}");
    assert_eq!(json["reset"], true, "{json}");
    let out = env.run(&["default", "--", "sh", "-c", check]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(&results, &["image"]);
    assert_failed(&results, &["tool", "marker", "note", "listed"]);
    env.assert_nothing_left();
}

/// FR-11, DX-6: a directory another sandbox user made private (owned by a
/// subordinate ID, mode 0700) is beyond the developer on the host: the
/// figures count it as unreadable instead of failing, `inspect` names it
/// without its content, and `reset` still discards it whole (the removal
/// worker runs in the Domain's user namespace, where that user is known).
#[test]
fn a_private_directory_of_another_sandbox_user_is_counted_named_and_reset() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-private", &default_image());
    let private = format!(
        r#"{RESULT}
r mkdir mkdir -p /root/lz-private/inner
r secret sh -c 'echo lz-secret > /root/lz-private/inner/f'
r chown chown -R 65534:65534 /root/lz-private
r chmod chmod 0700 /root/lz-private
"#
    );
    let out = env.run(&["default", "--", "sh", "-c", &private]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_succeeded(
        &guest_results(&text(&out.stdout)),
        &["mkdir", "secret", "chown", "chmod"],
    );
    // The Domain tears down after its last session; the figures are read
    // from an inactive Domain's store.
    env.assert_nothing_running();
    let dir = support::domain_root(&env.home).join("anchors/upper/root/lz-private");
    // The harness itself may run as root: the developer's view is the
    // owner and the mode.
    let meta = std::fs::metadata(&dir).unwrap();
    let test_uid = std::fs::metadata(env.home.join("run")).unwrap().uid();
    assert_ne!(meta.uid(), test_uid, "not another user's directory");
    assert_eq!(meta.mode() & 0o077, 0, "{:o}", meta.mode());

    let root = anchor_figures(&env, "/root");
    assert!(
        root["unreadable_directories"].as_u64().unwrap() >= 1,
        "{root}"
    );
    let out = env.run(&["state", "inspect", "default", "/root", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let unread: Vec<&str> = json["anchors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["path"] == "/root")
        .flat_map(|a| a["unread"].as_array().unwrap())
        .filter_map(|u| u.as_str())
        .collect();
    assert_eq!(unread, ["/root/lz-private"], "{json}");
    assert!(!text(&out.stdout).contains("lz-secret"), "contents shown");

    let out = env.run(&["state", "reset", "default", "/root", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.exists(), "the private directory outlived the reset");
    let check =
        format!("{RESULT}\nr private test -e /root/lz-private\nr image test -x /usr/bin/dpkg\n");
    let out = env.run(&["default", "--", "sh", "-c", &check]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let results = guest_results(&text(&out.stdout));
    assert_succeeded(&results, &["image"]);
    assert_failed(&results, &["private"]);
    env.assert_nothing_left();
}

/// Spec 3.6: "A Domain record claiming a held lease whose exact catalog
/// lease is absent is inconsistent and fails closed; recovery neither
/// recreates the lease nor mounts the State Anchor." The Storage Catalog is
/// restored from a copy taken before the launch while a session runs: the
/// release stops before the lease's release intent, the record is kept,
/// the next launch refuses with the reason, and no lease is recreated.
#[test]
fn a_held_lease_missing_from_the_catalog_fails_the_release_closed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-lease-lost", &default_image());
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    let catalog = env
        .home
        .join(".local/share/lazaret/catalog")
        .join(lazaret_effects::storage_catalog::CATALOG_FILE);
    let before = std::fs::read(&catalog).unwrap();

    let running = hold_a_session(&env);
    assert_eq!(env.catalog_leases().len(), 1, "the launch holds its lease");
    std::fs::write(&catalog, &before).unwrap();
    assert!(env.catalog_leases().is_empty());
    release_the_session(&env, running);
    // The runtime is gone (RS stopped the sandbox and unmounted), but the
    // generation is not released: the lease is held in the Domain Store.
    nothing_runs(&env);
    let out = env.run(&["state", "default", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("\"TearingDown\"") && shown.contains("\"LeaseHeld\""),
        "{shown}"
    );

    let out = env.run(&["default", "--", "true"]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a launch over the inconsistent record"
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("has no such lease"), "{stderr}");
    assert!(env.catalog_leases().is_empty(), "a lease was recreated");
    nothing_runs(&env);
    // The refusing recovery recorded its decision and kept the lease held.
    let out = env.run(&["state", "default", "--json"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("\"Recovering\"") && shown.contains("\"LeaseHeld\""),
        "{shown}"
    );
}

/// No process and no mount of the scenario is left (the record itself is
/// kept: the caller reads it).
fn nothing_runs(env: &Env) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let procs = env.processes();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&*env.home.to_string_lossy()))
            .count();
        if procs.is_empty() && mounts == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {procs:?}, {mounts} mounts"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Spec 3.9, FR-11, DX-6: `lazaret state list` shows the Domain with its
/// profile, workspace and what its anchors hold: inactive from its store,
/// running (with the same profile and workspace) while a session runs,
/// without opening the store the Host Coordinator holds.
#[test]
fn state_list_shows_each_domain_running_or_inactive() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-list", &default_image());
    let list = || {
        let out = env.run(&["state", "list", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let domains = json["domains"].as_array().unwrap().clone();
        assert_eq!(domains.len(), 1, "{json}");
        domains[0].clone()
    };
    let out = env.run(&["state", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("0 Domains under "),
        "{}",
        text(&out.stdout)
    );
    let out = env.run(&["default", "--", "sh", "-c", "echo listed > /root/lz-listed"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    let workspace = std::fs::canonicalize(&env.workspace)
        .unwrap()
        .display()
        .to_string();
    let inactive = list();
    assert_eq!(inactive["state"], "inactive", "{inactive}");
    assert_eq!(inactive["profile"], "default", "{inactive}");
    assert_eq!(inactive["workspace"], workspace.as_str(), "{inactive}");
    assert!(
        inactive["anchor_files"].as_u64().unwrap() >= 1,
        "{inactive}"
    );
    assert!(inactive["last_used_unix"].as_u64().is_some(), "{inactive}");
    let domain = support::domain_root(&env.home);
    assert_eq!(
        inactive["domain_id"],
        domain.file_name().unwrap().to_str().unwrap(),
        "{inactive}"
    );

    let running = hold_a_session(&env);
    let live = list();
    release_the_session(&env, running);
    assert_eq!(live["state"], "running", "{live}");
    assert_eq!(live["profile"], "default", "{live}");
    assert_eq!(live["workspace"], workspace.as_str(), "{live}");
    env.assert_nothing_left();
}

/// Spec 3.9, FR-11: `lazaret state verify` judges an inactive Domain under
/// its lock: sound after a launch, a device node planted in an upper is a
/// finding (exit 5) that verification leaves in place, and a running
/// Domain is refused (exit 3).
#[test]
fn state_verify_finds_a_planted_device_and_refuses_a_running_domain() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-verify", &default_image());
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "mkdir -p /usr/local/lz && echo x > /usr/local/lz/f",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    let out = env.run(&["state", "verify", "default"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("sound"), "{}", text(&out.stdout));

    let device = support::domain_root(&env.home).join("anchors/upper/usr/local/lz/null");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &device,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    )
    .unwrap();
    let out = env.run(&["state", "verify", "default", "--json"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["sound"], false, "{json}");
    let findings = json["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{json}");
    assert!(
        findings[0].as_str().unwrap().contains("local/lz/null"),
        "{json}"
    );
    assert!(
        device.symlink_metadata().is_ok(),
        "verify removed the device"
    );
    std::fs::remove_file(&device).unwrap();

    let running = hold_a_session(&env);
    let out = env.run(&["state", "verify", "default"]);
    release_the_session(&env, running);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is running"),
        "{}",
        text(&out.stderr)
    );
    env.assert_nothing_left();
}

/// Spec 3.9, OR-7: `lazaret state gc` reclaims a prepared lower only after
/// the last lease of every Domain sharing it is gone. Two Domains (two
/// workspaces, one image) share one artifact; while either runs it is
/// kept, a dry run changes nothing, and once both stopped it is reclaimed
/// through the catalog (row and exact tree). A Domain's persistent state
/// is not touched: its next launch prepares the image again and finds
/// what it kept.
#[test]
fn gc_reclaims_a_shared_prepared_lower_only_after_its_last_lease() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("anchors-gc", &default_image());
    let second = env.home.join("ws2");
    std::fs::create_dir_all(&second).unwrap();
    support::chown_tree(&second);
    let gc = |args: &[&str]| -> serde_json::Value {
        let mut argv = vec!["state", "gc", "--json"];
        argv.extend_from_slice(args);
        let out = env.run(&argv);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let artifacts = |json: &serde_json::Value| json["artifacts"].as_array().unwrap().clone();
    assert!(artifacts(&gc(&[])).is_empty());

    let first = hold_a_session(&env);
    let out = env
        .command(&["default", "--", "sh", "-c", "echo kept > /root/lz-gc"])
        .current_dir(&second)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let held = hold_a_session_in(&env, &second);
    let shared = gc(&[]);
    let rows = artifacts(&shared);
    assert_eq!(rows.len(), 1, "one artifact for both Domains: {shared}");
    assert_eq!(rows[0]["action"], "in-use", "{shared}");
    assert_eq!(rows[0]["leases"], 2, "{shared}");
    let tree = PathBuf::from(rows[0]["path"].as_str().unwrap());
    assert!(tree.join("rootfs/usr").is_dir());
    release_the_session(&env, first);
    // The first Domain's teardown ends after its last client: its lease
    // goes then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while env.catalog_leases().len() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            env.catalog_leases()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let one_left = gc(&[]);
    assert_eq!(artifacts(&one_left)[0]["action"], "in-use", "{one_left}");
    assert_eq!(artifacts(&one_left)[0]["leases"], 1, "{one_left}");
    release_the_session_in(&second, held);
    env.assert_nothing_running();

    let dry = gc(&["--dry-run"]);
    assert_eq!(artifacts(&dry)[0]["action"], "would-reclaim", "{dry}");
    // The keep policy: the most recently used one, or one used within the
    // age, is kept; its last use is the Domains' last launch over it.
    let newest = gc(&["--keep-newest", "1"]);
    assert_eq!(artifacts(&newest)[0]["action"], "kept", "{newest}");
    assert_eq!(artifacts(&newest)[0]["detail"], "keep-newest", "{newest}");
    let recent = gc(&["--older-than", "1h"]);
    assert_eq!(artifacts(&recent)[0]["action"], "kept", "{recent}");
    assert_eq!(artifacts(&recent)[0]["detail"], "older-than", "{recent}");
    let used = artifacts(&recent)[0]["last_used_unix"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(used) < 600, "last use {used}, now {now}");
    let bad = env.run(&["state", "gc", "--older-than", "1y"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(
        text(&bad.stderr).contains("`1y` is not an age"),
        "{}",
        text(&bad.stderr)
    );
    assert!(tree.join("rootfs/usr").is_dir());
    let done = gc(&[]);
    assert_eq!(artifacts(&done)[0]["action"], "reclaimed", "{done}");
    assert!(!tree.exists(), "{} is still there", tree.display());
    assert!(artifacts(&gc(&[])).is_empty());
    let prepared = env.home.join(".local/share/lazaret/prepared");
    let left: Vec<_> = std::fs::read_dir(&prepared)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // The next launch prepares the image again; the Domain kept its state.
    let out = env
        .command(&["default", "--", "cat", "/root/lz-gc"])
        .current_dir(&second)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "kept");
    assert_eq!(artifacts(&gc(&["--dry-run"])).len(), 1);
    env.assert_nothing_left();
    // Every catalog decision above was a step of the PreparedLower model,
    // traced per operation; `assert_nothing_left` replayed every trace.
    let mut taken = std::collections::BTreeSet::new();
    for t in env.catalog_traces() {
        taken.extend(actions_of(&std::fs::read_to_string(&t).unwrap()));
    }
    for step in [
        "RecordPrepareIntent",
        "CreateStage",
        "RecordStageOwned",
        "PublishArtifact",
        "InsertCatalogLease",
        "RemoveCatalogLease",
        "BeginReclaim",
        "RemoveArtifact",
    ] {
        assert!(
            taken.contains(step),
            "no catalog trace took {step}: {taken:?}"
        );
    }
}
