//! `lazaret config check` and `lazaret config init` end to end, run as the
//! unprivileged user `lazaret-test` (the harness runs as root and stages the
//! files; ownership rules are exercised for real).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

const TEST_USER: &str = "lazaret-test";

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn test_uid() -> u32 {
    let out = Command::new("id")
        .args(["-u", TEST_USER])
        .output()
        .expect("id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("uid")
}

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Home {
    /// A HOME, XDG_RUNTIME_DIR and workspace owned by lazaret-test.
    fn new() -> Self {
        assert_eq!(
            euid(),
            0,
            "these tests stage files for {TEST_USER} and must start as root"
        );
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().to_owned();
        for d in ["home", "run", "ws"] {
            std::fs::create_dir(root.join(d)).expect("mkdir");
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let h = Self { _dir: dir, root };
        h.give(&h.root.clone());
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Hands `path` and everything beneath it to lazaret-test.
    fn give(&self, path: &Path) {
        let status = Command::new("chown")
            .args(["-R", &format!("{TEST_USER}:{TEST_USER}")])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success());
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", TEST_USER, "--", "env", "-i"])
            .arg(format!("HOME={}", self.path("home").display()))
            .arg(format!("XDG_RUNTIME_DIR={}", self.path("run").display()))
            .arg("PATH=/usr/bin:/bin")
            .arg(env!("CARGO_BIN_EXE_lazaret"))
            .args(args)
            .current_dir(self.path("ws"))
            .output()
            .expect("runuser")
    }

    /// [`Home::run`] with a tmpfs (mount options, mount point) mounted on
    /// each path first, in a private mount namespace that dies with the
    /// command.
    fn run_with_tmpfs(&self, mounts: &[(&str, &Path)], args: &[&str]) -> Output {
        let mut script = String::from("set -e; ");
        let mut argv: Vec<PathBuf> = Vec::new();
        for (i, (options, at)) in mounts.iter().enumerate() {
            script += &format!("mount -t tmpfs -o {options} lazaret-test \"${}\"; ", i + 1);
            argv.push(at.to_path_buf());
        }
        script += &format!(
            "cd \"${}\"; shift {}; exec runuser -u {TEST_USER} -- env -i \"$@\"",
            mounts.len() + 1,
            mounts.len() + 1
        );
        argv.push(self.path("ws"));
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
            .args(&argv)
            .arg(format!("HOME={}", self.path("home").display()))
            .arg(format!("XDG_RUNTIME_DIR={}", self.path("run").display()))
            .arg("PATH=/usr/bin:/bin")
            .arg(env!("CARGO_BIN_EXE_lazaret"))
            .args(args)
            .output()
            .expect("unshare")
    }

    fn config_path(&self) -> PathBuf {
        self.path("home/.config/lazaret/config.toml")
    }

    fn write_config(&self, text: &str, mode: u32) {
        std::fs::create_dir_all(self.path("home/.config/lazaret")).expect("mkdir");
        let p = self.config_path();
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        self.give(&self.path("home"));
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn framed(x: &[u8]) -> Vec<u8> {
    let mut v = u32::try_from(x.len()).expect("len").to_be_bytes().to_vec();
    v.extend_from_slice(x);
    v
}

#[test]
fn init_then_check_as_the_unprivileged_user() {
    let h = Home::new();
    let init = h.run(&["config", "init"]);
    assert!(init.status.success(), "{}", stderr(&init));
    let meta = std::fs::metadata(h.config_path()).expect("written");
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.uid(), test_uid());

    let check = h.run(&["config", "check", "default"]);
    assert!(check.status.success(), "{}", stderr(&check));
    let text = String::from_utf8_lossy(&check.stdout);
    for field in [
        "profile:",
        "image:",
        "storage root:",
        "runtime root:",
        "persistent dirs:",
        "allow:",
        "deny:",
        "domain id:",
        "configuration fingerprint:",
        "policy digest:",
    ] {
        assert!(text.contains(field), "{field} missing in\n{text}");
    }

    let json = h.run(&["config", "check", "default", "--json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let ws = h.path("ws");
    assert_eq!(v["profile"], "default");
    assert_eq!(v["workspace"], ws.display().to_string());
    assert_eq!(
        v["storage_root"],
        h.path("home/.local/share/lazaret").display().to_string()
    );
    assert_eq!(
        v["runtime_root"],
        h.path("run/lazaret").display().to_string()
    );
    assert_eq!(
        v["persistent_dirs"],
        serde_json::json!(["/root", "/usr", "/var", "/etc", "/opt"])
    );
    assert_eq!(v["allow"], serde_json::json!([]));
    assert_eq!(
        v["deny"],
        serde_json::json!(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"])
    );
    for key in ["domain_id", "configuration_fingerprint", "policy_digest"] {
        let hex = v[key].as_str().expect(key);
        assert!(
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{key}: {hex}"
        );
    }
    // The Domain ID, computed independently from spec 3.2.
    let mut pre = b"lazaret-domain-id-v1\0".to_vec();
    pre.extend(framed(b"default"));
    pre.extend(framed(ws.as_os_str().as_encoded_bytes()));
    assert_eq!(v["domain_id"], hex::encode(Sha256::digest(&pre)));
    // Created roots belong to the user and are 0700.
    let storage = std::fs::metadata(h.path("home/.local/share/lazaret")).expect("storage");
    assert_eq!(
        (storage.uid(), storage.mode() & 0o7777),
        (test_uid(), 0o700)
    );

    // init never overwrites.
    let before = std::fs::read(h.config_path()).expect("read");
    let again = h.run(&["config", "init"]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read(h.config_path()).expect("read"), before);
}

#[test]
fn modes_are_exact_whatever_the_umask() {
    // mkdir and open mask their mode with the umask: 0277 would make the
    // config 0400 and the roots 0500 (then refused as not 0700), 0000 would
    // make them unusable. Lazaret sets the exact modes (spec 3.2).
    for umask in ["0277", "0777", "0000"] {
        let h = Home::new();
        let run = |args: &[&str]| {
            Command::new("runuser")
                .args(["-u", TEST_USER, "--", "env", "-i"])
                .arg(format!("HOME={}", h.path("home").display()))
                .arg(format!("XDG_RUNTIME_DIR={}", h.path("run").display()))
                .arg("PATH=/usr/bin:/bin")
                .args(["sh", "-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
                .arg(env!("CARGO_BIN_EXE_lazaret"))
                .args(args)
                .current_dir(h.path("ws"))
                .output()
                .expect("runuser")
        };
        let init = run(&["config", "init"]);
        assert!(init.status.success(), "umask {umask}: {}", stderr(&init));
        let check = run(&["config", "check", "default"]);
        assert!(check.status.success(), "umask {umask}: {}", stderr(&check));
        let mode = |rel: &str| {
            std::fs::metadata(h.path(rel))
                .unwrap_or_else(|e| panic!("{rel}: {e}"))
                .mode()
                & 0o7777
        };
        assert_eq!(
            mode("home/.config/lazaret/config.toml"),
            0o600,
            "umask {umask}"
        );
        for dir in [
            "home/.config",
            "home/.config/lazaret",
            "home/.local",
            "home/.local/share",
            "home/.local/share/lazaret",
            "home/.local/share/lazaret/profiles/default",
            "run/lazaret",
        ] {
            assert_eq!(mode(dir), 0o700, "umask {umask}: {dir}");
        }
    }
}

#[test]
fn refusals_name_the_file_the_key_path_and_the_expectation() {
    let h = Home::new();
    h.write_config(
        r#"schema = "lazaret-trusted-host-config-v1"
[profiles.dev]
image = "a"
[[profiles.dev.volumes]]
host = "/srv/a"
container = "/root/a"
kind = "directory"
[[profiles.dev.volumes]]
host = "srv/b"
container = "/root/b"
kind = "directory"
"#,
        0o600,
    );
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains(&h.config_path().display().to_string()), "{e}");
    assert!(e.contains("profiles.dev.volumes[1].host"), "{e}");
    assert!(e.contains("expected"), "{e}");
    assert!(!e.contains("panicked"), "{e}");

    h.write_config(
        "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n",
        0o600,
    );
    let out = h.run(&["config", "check", "nope"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("\"nope\" is not defined"),
        "{}",
        stderr(&out)
    );

    let out = h.run(&["config", "check", "dev", "--config", "relative.toml"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--config") && stderr(&out).contains("expected"),
        "{}",
        stderr(&out)
    );
}

/// Spec README 'Terminal output hygiene': a name Lazaret did not choose is
/// printed with its control characters escaped, in errors (one line each)
/// and in reports; JSON keeps the exact name, escaped as JSON.
#[test]
fn names_with_control_characters_are_printed_escaped() {
    let h = Home::new();
    h.write_config(
        "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n",
        0o600,
    );
    let evil = h.path("ws/evil\x1b]0;x\x07\nlazaret: forged\u{9b}2J");
    std::fs::create_dir(&evil).expect("mkdir");
    h.give(&evil);
    let raw = |bytes: &[u8]| {
        bytes
            .iter()
            .any(|b| matches!(b, 0x1b | 0x07 | 0x9b) || (*b < 0x20 && *b != b'\n'))
    };
    let shown = "evil\\x1b]0;x\\x07\\nlazaret: forged\\u{9b}2J";

    // An error naming a missing path inside it: one escaped line.
    let missing = evil.join("missing");
    let out = h.run(&[
        "config",
        "check",
        "dev",
        "--workspace",
        missing.to_str().expect("UTF-8"),
    ]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        !raw(&out.stderr),
        "raw control bytes on stderr: {:?}",
        out.stderr
    );
    assert!(e.contains(&format!("{shown}/missing")), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("lazaret: error: "), "{e}");

    // The text report shows the workspace escaped.
    let ws = evil.to_str().expect("UTF-8");
    let out = h.run(&["config", "check", "dev", "--workspace", ws]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !raw(&out.stdout),
        "raw control bytes on stdout: {:?}",
        out.stdout
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("workspace:") && l.ends_with(shown)),
        "{text}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("lazaret: forged")),
        "{text}"
    );

    // JSON: the exact name, as JSON escapes.
    let out = h.run(&["config", "check", "dev", "--workspace", ws, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !raw(&out.stdout),
        "raw control bytes in JSON: {:?}",
        out.stdout
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["workspace"], ws);

    // `--config` with such a name is refused by the path grammar, escaped.
    let config = format!("{ws}/config.toml");
    let out = h.run(&["config", "check", "dev", "--config", &config]);
    assert!(!out.status.success());
    assert!(
        !raw(&out.stderr),
        "raw control bytes on stderr: {:?}",
        out.stderr
    );
    assert!(stderr(&out).contains("--config"), "{}", stderr(&out));
}

#[test]
fn a_workspace_and_a_volume_on_their_own_mounts_load() {
    // A project on its own filesystem (or bind mount) is a mount root: its
    // plan retains the directory itself, so nothing beneath it crosses a
    // mount (spec 3.2). The mounts live in a private mount namespace that
    // dies with the command.
    let h = Home::new();
    std::fs::create_dir(h.path("vol")).expect("mkdir");
    let vol = h.path("vol").display().to_string();
    h.write_config(
        &format!(
            "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n\
             [[profiles.dev.volumes]]\nhost = \"{vol}\"\ncontainer = \"/root/vol\"\nkind = \"directory\"\n"
        ),
        0o600,
    );
    let owned = format!("mode=0755,uid={}", test_uid());
    let out = h.run_with_tmpfs(
        &[(&owned, &h.path("ws")), (&owned, &h.path("vol"))],
        &["config", "check", "dev", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["workspace"], h.path("ws").display().to_string());
    assert_eq!(v["volumes"][0]["host"], vol, "{v}");
    // Without the mounts the same paths load too, with the same Domain ID:
    // the label is the canonical path either way.
    let plain = h.run(&["config", "check", "dev", "--json"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let p: serde_json::Value = serde_json::from_slice(&plain.stdout).expect("json");
    assert_eq!(p["domain_id"], v["domain_id"]);
    // A mount root the user does not own (like /proc, /sys or a shared
    // /tmp) stays refused as a mount crossing.
    let out = h.run_with_tmpfs(&[("mode=0777", &h.path("ws"))], &["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("crosses a mount point"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unsafe_sources_are_refused_for_the_real_user() {
    let h = Home::new();
    let ok = "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n";
    // Owned by another, unprivileged uid: refused.
    h.write_config(ok, 0o600);
    rustix::fs::chown(h.config_path(), Some(rustix::fs::Uid::from_raw(4242)), None).expect("chown");
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("owned by uid 4242; expected root or the invoking user"),
        "{}",
        stderr(&out)
    );
    // Owned by root (readable): accepted.
    rustix::fs::chown(
        h.config_path(),
        Some(rustix::fs::Uid::from_raw(0)),
        Some(rustix::fs::Gid::from_raw(0)),
    )
    .expect("chown");
    std::fs::set_permissions(h.config_path(), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let out = h.run(&["config", "check", "dev"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Group-writable: refused.
    h.write_config(ok, 0o620);
    let out = h.run(&["config", "check", "dev"]);
    assert!(
        stderr(&out).contains("group or other write"),
        "{}",
        stderr(&out)
    );
    // A symlink: refused.
    h.write_config(ok, 0o600);
    std::fs::rename(h.config_path(), h.path("home/real.toml")).expect("mv");
    std::os::unix::fs::symlink(h.path("home/real.toml"), h.config_path()).expect("symlink");
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    // A second hard link: refused.
    h.write_config(ok, 0o600);
    std::fs::hard_link(h.config_path(), h.path("home/other-name.toml")).expect("link");
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("has 2 hard links; expected exactly one"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(h.path("home/other-name.toml")).expect("rm");
    // A FIFO: refused without blocking on it.
    std::fs::remove_file(h.config_path()).expect("rm");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        h.config_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    h.give(&h.path("home"));
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is a FIFO; expected a regular file"),
        "{}",
        stderr(&out)
    );
    // One byte over 1 MiB: refused; exactly 1 MiB: read.
    let mut big = ok.as_bytes().to_vec();
    big.resize(1_048_577, b'\n');
    h.write_config(std::str::from_utf8(&big).expect("utf8"), 0o600);
    let out = h.run(&["config", "check", "dev"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is 1048577 bytes; expected at most 1048576 bytes"),
        "{}",
        stderr(&out)
    );
    big.truncate(1_048_576);
    h.write_config(std::str::from_utf8(&big).expect("utf8"), 0o600);
    let out = h.run(&["config", "check", "dev"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// schemas.md auto-approval rule, with real ownership: the executable is
/// owned by root or the invoking user, has no group or other write bit and is
/// executable by the invoking user (through the bits that apply to them).
#[test]
fn auto_approval_executables_are_checked_for_the_real_user() {
    let h = Home::new();
    std::fs::create_dir(h.path("tools")).expect("mkdir");
    let tool = h.path("tools/tool");
    std::fs::write(&tool, b"#!/bin/sh\n").expect("write");
    h.write_config(
        &format!(
            "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n\
             [profiles.dev.escalation]\nenabled = true\nauto_approve = [{{ executable = \"{}\" }}]\n",
            tool.display()
        ),
        0o600,
    );
    let set = |uid: u32, mode: u32| {
        rustix::fs::chown(
            &tool,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(uid)),
        )
        .expect("chown");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let key = "profiles.dev.escalation.auto_approve[0].executable";
    let refused = |why: &str| {
        let out = h.run(&["config", "check", "dev"]);
        let e = stderr(&out);
        assert!(!out.status.success(), "{why}: accepted");
        assert!(
            e.contains(&h.config_path().display().to_string())
                && e.contains(key)
                && e.contains(&tool.display().to_string())
                && !e.contains("panicked"),
            "{why}: {e}"
        );
        e
    };
    let me = test_uid();
    // Owned by the invoking user: accepted.
    set(me, 0o755);
    let out = h.run(&["config", "check", "dev"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Owned by a third, unprivileged uid (neither root nor the invoker),
    // even with safe bits: refused.
    let third = if me == 12_345 { 12_346 } else { 12_345 };
    set(third, 0o755);
    let e = refused("third owner");
    assert!(
        e.contains(&format!(
            "is owned by uid {third}; expected root or the invoking user (uid {me})"
        )),
        "{e}"
    );
    // Owned by root and executable by others: accepted.
    set(0, 0o755);
    let out = h.run(&["config", "check", "dev"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Owned by root, executable only by owner and group: the invoking user
    // is neither, so it is refused.
    set(0, 0o754);
    let e = refused("not executable by the invoker");
    assert!(
        e.contains("has mode 0754; expected it to be executable by the invoking user"),
        "{e}"
    );
    // Group- and other-writable, whoever owns it: refused.
    set(0, 0o775);
    assert!(refused("group writable").contains("has mode 0775; expected no group or other write"));
    set(me, 0o757);
    assert!(refused("other writable").contains("has mode 0757; expected no group or other write"));
    // Not executable by its owner, the invoking user: refused.
    set(me, 0o644);
    assert!(refused("not executable").contains("expected it to be executable by the invoking user"));
}

/// Runs `lazaret ARGS` as lazaret-test inside a private mount namespace in
/// which `source` is bind-mounted on `target` (`unshare -m` makes the new
/// namespace's mounts private, so nothing leaks to the host).
fn run_with_bind(h: &Home, source: &Path, target: &Path, args: &[&str]) -> Output {
    let script = format!(
        "mount --bind \"$1\" \"$2\" && shift 2 && exec runuser -u {TEST_USER} -- env -i \"$@\""
    );
    Command::new("unshare")
        .args(["-m", "sh", "-c", &script, "sh"])
        .arg(source)
        .arg(target)
        .arg(format!("HOME={}", h.path("home").display()))
        .arg(format!("XDG_RUNTIME_DIR={}", h.path("run").display()))
        .arg("PATH=/usr/bin:/bin")
        .arg(env!("CARGO_BIN_EXE_lazaret"))
        .args(args)
        .current_dir(h.path("ws"))
        .output()
        .expect("unshare")
}

#[test]
fn a_volume_aliasing_a_directory_that_contains_lazaret_trees_is_refused() {
    // A bind mount of the fixture root appears at <root>/alias, so
    // <root>/alias/home is the same directory as HOME — which holds the
    // configuration source and the Storage Root — under a label that nests
    // with neither. Spec 3.2: volume sources may not overlap them; the
    // comparison covers retained identities, not just pathnames.
    let h = Home::new();
    std::fs::create_dir(h.path("alias")).expect("mkdir");
    h.give(&h.path("alias"));
    let config = format!(
        "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n\
         [[profiles.dev.volumes]]\nhost = \"{}\"\ncontainer = \"/root/h\"\nkind = \"directory\"\n",
        h.path("alias/home").display()
    );
    h.write_config(&config, 0o600);
    let out = run_with_bind(&h, &h.root, &h.path("alias"), &["config", "check", "dev"]);
    let e = stderr(&out);
    assert!(
        !out.status.success(),
        "accepted:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        e.contains(&h.config_path().display().to_string())
            && e.contains("profiles.dev.volumes[0].host")
            && e.contains("overlap")
            && e.contains("expected"),
        "{e}"
    );
    // The same bind mount used for an unrelated directory is accepted, so
    // the refusal above is the containment, not the mount.
    std::fs::create_dir_all(h.path("data/sub")).expect("mkdir");
    h.give(&h.path("data"));
    let config = config.replace("alias/home", "alias/data/sub");
    h.write_config(&config, 0o600);
    let out = run_with_bind(&h, &h.root, &h.path("alias"), &["config", "check", "dev"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn root_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_lazaret"))
        .args(["config", "check", "dev"])
        .output()
        .expect("run");
    if euid() == 0 {
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("refuses to run as root"),
            "{}",
            stderr(&out)
        );
    } else {
        assert!(
            !stderr(&out).contains("refuses to run as root"),
            "{}",
            stderr(&out)
        );
    }
}
