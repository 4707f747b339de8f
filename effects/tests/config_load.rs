//! The whole loader (spec 3.2): selected-profile resolution into one
//! ResolvedDomainConfiguration, overlap rules, volume and executable checks,
//! root creation, digests and environment references.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

mod support;

use lazaret_effects::config_resolve::{
    load_configuration, LoadRequest, ResolvedDomainConfiguration,
};
use lazaret_effects::confined::{ConfinedSys, RealSys, RecordedCall, RecordingSys};
use lazaret_runtime::config::{
    ConfigurationFingerprintRecordV1, DomainIdV1, ResolvedAutoApprovalRule, ResolvedVolume,
    SandboxLayoutV1, VolumeAccess, VolumeKind,
};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().to_owned();
        for d in ["home/.config/lazaret", "run", "ws", "tools"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let tool = root.join("tools/tool");
        std::fs::write(&tool, b"#!/bin/sh\n").expect("tool");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(root.join("home/.gitconfig"), b"[user]\n").expect("gitconfig");
        Self { _dir: dir, root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn write_config(&self, body: &str) -> PathBuf {
        let p = self.path("home/.config/lazaret/config.toml");
        let _ = std::fs::remove_file(&p);
        std::fs::write(
            &p,
            format!("schema = \"lazaret-trusted-host-config-v1\"\n{body}"),
        )
        .expect("config");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    fn env(&self, extra: &[(&str, &str)]) -> BTreeMap<String, OsString> {
        let mut e: BTreeMap<String, OsString> = BTreeMap::new();
        e.insert("HOME".to_owned(), self.path("home").into_os_string());
        e.insert(
            "XDG_RUNTIME_DIR".to_owned(),
            self.path("run").into_os_string(),
        );
        for (k, v) in extra {
            e.insert((*k).to_owned(), OsString::from(v));
        }
        e
    }

    fn load_in(
        &self,
        workspace: &Path,
        extra_env: &[(&str, &str)],
    ) -> Result<ResolvedDomainConfiguration, String> {
        self.load_through(&RealSys, workspace, extra_env)
    }

    fn load_through(
        &self,
        sys: &dyn ConfinedSys,
        workspace: &Path,
        extra_env: &[(&str, &str)],
    ) -> Result<ResolvedDomainConfiguration, String> {
        let layout = SandboxLayoutV1::production().expect("layout");
        let env = self.env(extra_env);
        let request = LoadRequest {
            profile: "dev",
            config: None,
            workspace,
            env: &env,
            layout: &layout,
        };
        load_configuration(sys, &request).map_err(|e| e.to_string())
    }

    fn load(&self) -> Result<ResolvedDomainConfiguration, String> {
        self.load_in(&self.path("ws"), &[("HOST_TOKEN", "s3cr3t")])
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("meta").mode() & 0o7777
}

#[test]
fn a_full_profile_resolves_into_one_authority() {
    let f = Fixture::new();
    let tool = f.path("tools/tool");
    f.write_config(&format!(
        r#"[profiles.dev]
image = "registry.example/dev:1"
env = {{ TOKEN = "env:HOST_TOKEN" }}
[[profiles.dev.volumes]]
host = "{{profile_dir}}/cache/pip"
container = "/root/.cache"
kind = "directory"
create = true
[[profiles.dev.volumes]]
host = "~/.gitconfig"
container = "/root/.gitconfig"
kind = "file"
access = "read-only"
[profiles.dev.escalation]
enabled = true
auto_approve = [{{ executable = "{}", args = ["x"] }}]
"#,
        tool.display()
    ));
    let r = f.load().expect("load");
    let storage = f.path("home/.local/share/lazaret");
    assert_eq!(r.storage_root().label(), storage);
    assert_eq!(r.runtime_root().label(), f.path("run/lazaret"));
    assert_eq!(r.profile_dir().label(), storage.join("profiles/dev"));
    let domain =
        DomainIdV1::compute(r.selected().name(), f.path("ws").as_os_str().as_bytes()).expect("id");
    assert_eq!(r.domain_id(), domain);
    assert_eq!(
        r.storage_domain_root().label(),
        storage.join("domains").join(domain.to_string())
    );
    assert_eq!(
        r.runtime_domain_root().label(),
        f.path("run/lazaret/domains").join(domain.to_string())
    );
    for d in [
        "home/.local",
        "home/.local/share",
        "home/.local/share/lazaret",
        "home/.local/share/lazaret/profiles/dev/cache/pip",
        "run/lazaret",
    ] {
        assert_eq!(mode(&f.path(d)), 0o700, "{d}");
    }
    assert_eq!(
        r.volumes()[0].source().label(),
        storage.join("profiles/dev/cache/pip")
    );
    assert_eq!(r.volumes()[1].source().label(), f.path("home/.gitconfig"));
    assert_eq!(r.auto_approval_rules()[0].executable().label(), tool);
    // The fingerprint is the record of the resolved canonical inputs, built
    // here from the fixture's known canonical paths (not from the loader's
    // own record): `{profile_dir}` and `~` expanded, the executable by its
    // canonical path.
    let canonical = |p: PathBuf| p.into_os_string().into_vec();
    let record = ConfigurationFingerprintRecordV1::new(
        r.selected(),
        canonical(storage.clone()),
        canonical(f.path("run/lazaret")),
        vec![
            ResolvedVolume {
                canonical_host_source: canonical(storage.join("profiles/dev/cache/pip")),
                container_path: "/root/.cache".to_owned(),
                kind: VolumeKind::Directory,
                access: VolumeAccess::ReadWrite,
                create: true,
            },
            ResolvedVolume {
                canonical_host_source: canonical(f.path("home/.gitconfig")),
                container_path: "/root/.gitconfig".to_owned(),
                kind: VolumeKind::File,
                access: VolumeAccess::ReadOnly,
                create: false,
            },
        ],
        vec![ResolvedAutoApprovalRule {
            canonical_executable: canonical(tool.clone()),
            args: vec!["x".to_owned()],
            allow_extra_args: false,
        }],
    );
    assert_eq!(&record, r.fingerprint_record());
    assert_eq!(record.fingerprint().expect("fp"), r.fingerprint());
    assert_eq!(r.policy_digest(), r.selected().derived_policy().digest());
    assert_eq!(r.runsc_dcache(), 50_000);
    // Environment: resolved, redacted, and not part of the fingerprint.
    let (_, _, value) = r.environment().entries().next().expect("env");
    assert_eq!(value.expose(), "s3cr3t");
    assert!(!format!("{r:?}").contains("s3cr3t"));
    let other = f
        .load_in(&f.path("ws"), &[("HOST_TOKEN", "different")])
        .expect("reload");
    assert_eq!(other.fingerprint(), r.fingerprint());
    assert_eq!(other.domain_id(), r.domain_id());
    // Everything still revalidates through its plan.
    r.workspace().revalidate(&RealSys).expect("workspace");
    r.storage_root().revalidate(&RealSys).expect("storage");
}

#[test]
fn a_workspace_containing_the_storage_root_is_refused_before_anything_is_created() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let m = f.load_in(&f.path("home"), &[]).expect_err("overlap");
    assert!(
        m.contains("config.toml")
            && m.contains("(agent workspace)")
            && m.contains("overlap; expected"),
        "{m}"
    );
    assert!(
        !f.path("home/.local").exists(),
        "a refused load left a partial root"
    );
    assert!(!f.path("run/lazaret").exists());
}

#[test]
fn a_workspace_inside_the_runtime_root_and_a_config_inside_the_workspace_are_refused() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    std::fs::create_dir_all(f.path("run/lazaret/ws")).expect("mkdir");
    let m = f
        .load_in(&f.path("run/lazaret/ws"), &[])
        .expect_err("overlap");
    assert!(m.contains("overlap"), "{m}");
    let m = f
        .load_in(&f.path("home/.config"), &[])
        .expect_err("config inside workspace");
    assert!(
        m.contains("(configuration source)") && m.contains("overlap"),
        "{m}"
    );
}

#[test]
fn existing_roots_must_be_lazaret_owned_0700() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    std::fs::create_dir_all(f.path("home/.local/share/lazaret")).expect("mkdir");
    std::fs::set_permissions(
        f.path("home/.local/share/lazaret"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let m = f.load().expect_err("mode");
    assert!(
        m.contains("(storage root)") && m.contains("mode 0755; expected exactly 0700"),
        "{m}"
    );
    // A symlinked root is refused, not followed.
    std::fs::remove_dir(f.path("home/.local/share/lazaret")).expect("rmdir");
    std::fs::create_dir(f.path("elsewhere")).expect("mkdir");
    symlink(f.path("elsewhere"), f.path("home/.local/share/lazaret")).expect("symlink");
    let m = f.load().expect_err("symlink");
    assert!(m.contains("symbolic link"), "{m}");
}

fn volume(host: &str, kind: &str) -> String {
    format!("[profiles.dev]\nimage = \"a\"\n[[profiles.dev.volumes]]\nhost = \"{host}\"\ncontainer = \"/root/v\"\nkind = \"{kind}\"\n")
}

#[test]
fn volume_sources_must_exist_with_their_kind_and_no_special_files() {
    let f = Fixture::new();
    let dir = f.path("tools");
    f.write_config(&volume(&dir.display().to_string(), "file"));
    let m = f.load().expect_err("kind");
    assert!(
        m.contains("profiles.dev.volumes[0].host") && m.contains("expected a regular file"),
        "{m}"
    );
    let fifo = f.path("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    f.write_config(&volume(&fifo.display().to_string(), "file"));
    let m = f.load().expect_err("fifo");
    assert!(
        m.contains("profiles.dev.volumes[0].host") && m.contains("is a FIFO"),
        "{m}"
    );
    symlink(f.path("home/.gitconfig"), f.path("link")).expect("symlink");
    f.write_config(&volume(&f.path("link").display().to_string(), "file"));
    let m = f.load().expect_err("symlink");
    assert!(
        m.contains("profiles.dev.volumes[0].host") && m.contains("symbolic link"),
        "{m}"
    );
    f.write_config(&volume(
        &f.path("absent").display().to_string(),
        "directory",
    ));
    let m = f.load().expect_err("absent");
    assert!(
        m.contains("profiles.dev.volumes[0].host") && m.contains("does not exist"),
        "{m}"
    );
    f.write_config(&volume(
        &f.path("ws/sub").display().to_string(),
        "directory",
    ));
    std::fs::create_dir(f.path("ws/sub")).expect("mkdir");
    let m = f.load().expect_err("in workspace");
    assert!(
        m.contains("profiles.dev.volumes[0].host") && m.contains("overlap"),
        "{m}"
    );
    f.write_config(&volume("~/.gitconfig", "file"));
    assert!(f.load().is_ok());
}

fn rule(exe: &Path) -> String {
    format!(
        "[profiles.dev]\nimage = \"a\"\n[profiles.dev.escalation]\nenabled = true\nauto_approve = [{{ executable = \"{}\" }}]\n",
        exe.display()
    )
}

#[test]
fn auto_approval_executables_are_checked_at_load() {
    let f = Fixture::new();
    let tool = f.path("tools/tool");
    f.write_config(&rule(&tool));
    assert!(f.load().is_ok());
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let m = f.load().expect_err("group writable");
    assert!(
        m.contains("auto_approve[0].executable") && m.contains("no group or other write"),
        "{m}"
    );
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o757)).expect("chmod");
    let m = f.load().expect_err("other writable");
    assert!(
        m.contains("auto_approve[0].executable")
            && m.contains("has mode 0757; expected no group or other write"),
        "{m}"
    );
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let m = f.load().expect_err("not executable");
    assert!(m.contains("executable by the invoking user"), "{m}");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::hard_link(&tool, f.path("tools/alias")).expect("link");
    let m = f.load().expect_err("hard link");
    assert!(m.contains("2 hard links; expected exactly one"), "{m}");
    std::fs::remove_file(f.path("tools/alias")).expect("rm");
    // In the workspace: refused by the overlap rules.
    let inside = f.path("ws/run.sh");
    std::fs::write(&inside, b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    f.write_config(&rule(&inside));
    let m = f.load().expect_err("inside workspace");
    assert!(
        m.contains("auto_approve[0].executable") && m.contains("overlap"),
        "{m}"
    );
    // A symlink resolves to its canonical target; two rules that become the
    // same after resolution are duplicates.
    symlink(&tool, f.path("tools/link")).expect("symlink");
    f.write_config(&rule(&f.path("tools/link")));
    let r = f.load().expect("symlink resolves");
    assert_eq!(r.auto_approval_rules()[0].executable().label(), tool);
    f.write_config(&format!(
        "[profiles.dev]\nimage = \"a\"\n[profiles.dev.escalation]\nenabled = true\nauto_approve = [{{ executable = \"{}\" }}, {{ executable = \"{}\" }}]\n",
        tool.display(),
        f.path("tools/link").display()
    ));
    let m = f.load().expect_err("duplicate");
    assert!(
        m.contains("auto_approve[1]")
            && m.contains("auto_approve[0]")
            && m.contains("same canonical executable"),
        "{m}"
    );
}

/// schemas.md auto-approval rule: the executable's owner is root or the
/// invoking user. The kernel reports a third uid through the fake; the same
/// file with its real owner loads, and a root-reported owner loads too.
#[test]
fn an_auto_approval_executable_owned_by_another_user_is_refused() {
    let f = Fixture::new();
    let tool = f.path("tools/tool");
    let config = f.write_config(&rule(&tool));
    let me = RealSys.user_ids().expect("ids").uid;
    let ino = std::fs::metadata(&tool).expect("meta").ino();
    let third = if me == 12_345 { 12_346 } else { 12_345 };
    let sys = RecordingSys::new(RealSys);
    sys.patch_stat(ino, move |st| st.uid = third);
    let m = f
        .load_through(&sys, &f.path("ws"), &[])
        .expect_err("third owner");
    assert!(
        m.contains(&format!(
            "{}: key `profiles.dev.escalation.auto_approve[0].executable`: executable {}: is owned by uid {third}; expected root or the invoking user (uid {me})",
            config.display(),
            tool.display()
        )),
        "{m}"
    );
    assert_eq!(mkdirs(&sys.calls()), 0, "refused before any root was made");
    let sys = RecordingSys::new(RealSys);
    sys.patch_stat(ino, |st| st.uid = 0);
    f.load_through(&sys, &f.path("ws"), &[])
        .expect("root-owned executable");
    assert!(f.load().is_ok(), "owned by the invoking user");
}

#[test]
fn environment_references_are_resolved_last_and_never_echoed() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\nenv = { TOKEN = \"env:HOST_TOKEN\" }\n");
    let m = f.load_in(&f.path("ws"), &[]).expect_err("missing");
    assert!(
        m.contains("profiles.dev.env.TOKEN") && m.contains("HOST_TOKEN") && m.contains("not set"),
        "{m}"
    );
}

#[test]
fn a_runtime_directory_that_is_missing_refuses() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    std::fs::remove_dir(f.path("run")).expect("rmdir");
    let m = f.load().expect_err("runtime");
    assert!(m.contains("runtime root"), "{m}");
}

#[test]
fn a_replaced_object_fails_revalidation_through_its_plan() {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let r = f.load().expect("load");
    r.workspace().revalidate(&RealSys).expect("unchanged");
    r.runtime_root().revalidate(&RealSys).expect("unchanged");
    // Swap the workspace for another directory of the same name.
    std::fs::rename(f.path("ws"), f.path("ws-old")).expect("mv");
    std::fs::create_dir(f.path("ws")).expect("mkdir");
    let m = r
        .workspace()
        .revalidate(&RealSys)
        .expect_err("replaced")
        .to_string();
    assert!(m.contains("changed identity"), "{m}");
    // Swap the runtime root the same way (mode and owner match).
    std::fs::rename(f.path("run/lazaret"), f.path("run/old")).expect("mv");
    std::fs::create_dir(f.path("run/lazaret")).expect("mkdir");
    std::fs::set_permissions(
        f.path("run/lazaret"),
        std::fs::Permissions::from_mode(0o700),
    )
    .expect("chmod");
    let m = r
        .runtime_root()
        .revalidate(&RealSys)
        .expect_err("replaced")
        .to_string();
    assert!(m.contains("changed identity"), "{m}");
    // A replaced ancestor is caught before the suffix is opened.
    std::fs::rename(f.path("run"), f.path("run-old")).expect("mv");
    std::fs::create_dir_all(f.path("run/lazaret")).expect("mkdir");
    assert!(r.runtime_root().revalidate(&RealSys).is_err());
}

/// `locate_domain` (for read-only tools like `lazaret state`) finds the
/// Domain where a load puts it, from a workspace given through a symlink
/// too, and creates nothing on the way.
#[test]
fn locating_a_domain_finds_the_load_roots_and_creates_nothing() {
    let f = Fixture::new();
    let config = f.write_config("[profiles.dev]\nimage = \"a\"\n");
    symlink(f.path("ws"), f.path("ws-link")).expect("symlink");
    let layout = SandboxLayoutV1::production().expect("layout");
    let env = f.env(&[]);
    let request = LoadRequest {
        profile: "dev",
        config: None,
        workspace: &f.path("ws-link"),
        env: &env,
        layout: &layout,
    };
    let located =
        lazaret_effects::config_resolve::locate_domain(&RealSys, &request).expect("locate");
    assert!(
        !f.path("home/.local").exists(),
        "locate created the storage root"
    );
    assert!(
        !f.path("run/lazaret").exists(),
        "locate created the runtime root"
    );
    assert_eq!(located.profile, "dev");
    assert_eq!(located.config_file, config);
    assert_eq!(located.workspace, f.path("ws"));
    let loaded = f.load_in(&f.path("ws-link"), &[]).expect("load");
    assert_eq!(located.domain_id, loaded.domain_id());
    assert_eq!(
        located.storage_domain_root,
        loaded.storage_domain_root().label()
    );
    assert_eq!(
        located.runtime_domain_root,
        loaded.runtime_domain_root().label()
    );
    // An unknown profile names the profile and the file.
    let other = LoadRequest {
        profile: "nope",
        ..request
    };
    let m = lazaret_effects::config_resolve::locate_domain(&RealSys, &other)
        .expect_err("unknown profile")
        .to_string();
    assert!(
        m.contains("nope") && m.contains(config.to_str().unwrap()),
        "{m}"
    );
}

fn confined_flags() -> rustix::fs::ResolveFlags {
    use rustix::fs::ResolveFlags;
    ResolveFlags::BENEATH
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_XDEV
}

/// The `openat2` calls whose relative path is `name`, with their resolve
/// flags, in call order.
fn openat2_of(calls: &[RecordedCall], name: &str) -> Vec<rustix::fs::ResolveFlags> {
    calls
        .iter()
        .filter_map(|c| match c {
            RecordedCall::Openat2 { path, resolve, .. } if path == Path::new(name) => {
                Some(*resolve)
            }
            _ => None,
        })
        .collect()
}

fn mkdirs(calls: &[RecordedCall]) -> usize {
    calls
        .iter()
        .filter(|c| matches!(c, RecordedCall::Mkdirat { .. }))
        .count()
}

/// The five roots of a load in fixture `f`, each checked to be a complete
/// Lazaret-owned 0700 directory (and the components created above them).
fn assert_roots_complete(f: &Fixture, domain: &str) {
    for d in [
        "home/.local".to_owned(),
        "home/.local/share".to_owned(),
        "home/.local/share/lazaret".to_owned(),
        "home/.local/share/lazaret/profiles/dev".to_owned(),
        format!("home/.local/share/lazaret/domains/{domain}"),
        "run/lazaret".to_owned(),
        format!("run/lazaret/domains/{domain}"),
    ] {
        assert_eq!(mode(&f.path(&d)), 0o700, "{d}");
    }
}

fn domain_of(f: &Fixture) -> String {
    let name = lazaret_runtime::config::decode_document(
        b"schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n",
    )
    .expect("doc")
    .select("dev", &SandboxLayoutV1::production().expect("layout"))
    .expect("select");
    DomainIdV1::compute(name.name(), f.path("ws").as_os_str().as_bytes())
        .expect("id")
        .to_string()
}

/// The `openat2` calls a successful load makes for the workspace `ws`
/// (resolve flags in call order), from a fresh fixture: the probe for a
/// workspace that is itself a mount root, the confined open at planning,
/// and the final reopen after the comparisons.
fn workspace_opens_of_a_load() -> Vec<rustix::fs::ResolveFlags> {
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    f.load_through(&sys, &f.path("ws"), &[])
        .expect("baseline load");
    let opens = openat2_of(&sys.calls(), "ws");
    let confined = opens.iter().filter(|r| **r == confined_flags()).count();
    assert!(
        confined >= 2 && opens.last() == Some(&confined_flags()),
        "expected a confined open and a confined final reopen: {opens:?}"
    );
    opens
}

/// Spec 3.2: every open beneath a retained ancestor refuses mount
/// crossings. A mount appearing over the workspace after it was found not
/// to be a mount root makes its confined open fail with EXDEV (what
/// RESOLVE_NO_XDEV yields); that refuses the load, names the workspace, and
/// nothing has been created yet.
#[test]
fn a_mount_crossing_at_the_workspace_refuses_the_load_before_anything_is_created() {
    let opens = workspace_opens_of_a_load();
    let first_confined = opens
        .iter()
        .position(|r| *r == confined_flags())
        .expect("confined open");
    let f = Fixture::new();
    let config = f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    sys.fail_nth_at("openat2", "ws", first_confined, rustix::io::Errno::XDEV);
    let m = f
        .load_through(&sys, &f.path("ws"), &[])
        .expect_err("mount crossing");
    assert!(
        m.contains(&format!(
            "{}: workspace: {}:",
            config.display(),
            f.path("ws").display()
        )) && m.contains("crosses a mount point"),
        "{m}"
    );
    // The load stopped at that open: no later open of the workspace, and
    // no directory made.
    let calls = sys.calls();
    assert_eq!(openat2_of(&calls, "ws"), opens[..=first_confined]);
    assert_eq!(mkdirs(&calls), 0, "a refused load created a directory");
    assert!(!f.path("home/.local").exists());
    assert!(!f.path("run/lazaret").exists());
}

/// Spec 3.2: "All paths are reopened through their plans after the
/// comparisons; any identity or mount change refuses the complete load."
/// A mount appearing over the workspace between its first open and the
/// final reopen refuses the load itself, not only a later revalidation.
#[test]
fn a_mount_crossing_at_the_final_reopen_refuses_the_whole_load() {
    let opens = workspace_opens_of_a_load();
    let f = Fixture::new();
    let config = f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    sys.fail_nth_at("openat2", "ws", opens.len() - 1, rustix::io::Errno::XDEV);
    let m = f
        .load_through(&sys, &f.path("ws"), &[])
        .expect_err("mount at final reopen");
    assert!(
        m.contains(&format!(
            "{}: key `(agent workspace)`: {}:",
            config.display(),
            f.path("ws").display()
        )) && m.contains("crosses a mount point"),
        "{m}"
    );
    // The refusal came from the last reopen, after the roots were made:
    // they are complete Lazaret-owned directories, none half-created, and
    // the load returned no authority over them.
    let calls = sys.calls();
    assert_eq!(openat2_of(&calls, "ws"), opens);
    let last_mkdir = calls
        .iter()
        .rposition(|c| matches!(c, RecordedCall::Mkdirat { .. }))
        .expect("roots were created");
    let last_ws = calls
        .iter()
        .rposition(|c| matches!(c, RecordedCall::Openat2 { path, .. } if path == Path::new("ws")))
        .expect("ws");
    assert!(
        last_ws > last_mkdir,
        "the refused open preceded root creation"
    );
    assert_roots_complete(&f, &domain_of(&f));
}

/// The workspace's mount identity changing refuses the load: at planning
/// (the confined open disagrees with the ambient resolution) and at the
/// final reopen after the comparisons.
#[test]
fn a_workspace_mount_id_change_refuses_the_whole_load() {
    let ino = |p: &Path| std::fs::metadata(p).expect("meta").ino();
    // Changed right after the ambient resolution.
    let f = Fixture::new();
    let config = f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    let seen = Rc::new(Cell::new(0usize));
    let counter = Rc::clone(&seen);
    sys.patch_stat(ino(&f.path("ws")), move |st| {
        counter.set(counter.get() + 1);
        if counter.get() > 1 {
            st.identity.mnt_id += 1;
        }
    });
    let m = f
        .load_through(&sys, &f.path("ws"), &[])
        .expect_err("mount id at planning");
    assert!(
        m.contains(&format!(
            "{}: workspace: {}:",
            config.display(),
            f.path("ws").display()
        )) && m.contains("changed identity, type or mount"),
        "{m}"
    );
    assert_eq!(
        mkdirs(&sys.calls()),
        0,
        "a refused load created a directory"
    );
    assert!(!f.path("home/.local").exists());

    // How often one successful load reads the workspace's metadata.
    let baseline = Fixture::new();
    baseline.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    let stats = Rc::new(Cell::new(0usize));
    let counter = Rc::clone(&stats);
    sys.patch_stat(ino(&baseline.path("ws")), move |_| {
        counter.set(counter.get() + 1);
    });
    baseline
        .load_through(&sys, &baseline.path("ws"), &[])
        .expect("baseline load");
    let total = stats.get();
    assert!(total >= 3, "ambient, open and final reopen: {total}");

    // Changed only for the final reopen (its reopened and held descriptors).
    let f = Fixture::new();
    let config = f.write_config("[profiles.dev]\nimage = \"a\"\n");
    let sys = RecordingSys::new(RealSys);
    let seen = Rc::new(Cell::new(0usize));
    let counter = Rc::clone(&seen);
    sys.patch_stat(ino(&f.path("ws")), move |st| {
        counter.set(counter.get() + 1);
        if counter.get() + 1 >= total {
            st.identity.mnt_id += 1;
        }
    });
    let m = f
        .load_through(&sys, &f.path("ws"), &[])
        .expect_err("mount id at final reopen");
    assert!(
        m.contains(&format!(
            "{}: key `(agent workspace)`: {}:",
            config.display(),
            f.path("ws").display()
        )) && m.contains("changed identity, type or mount"),
        "{m}"
    );
    assert_eq!(seen.get(), total, "refused at the last reads, not earlier");
    assert!(mkdirs(&sys.calls()) > 0);
    assert_roots_complete(&f, &domain_of(&f));
}

/// Spec 3.2 overlap rules on real paths, checked before anything is
/// created: the configuration file inside the Storage or Runtime Root, and
/// the workspace equal to, containing or inside either root.
#[test]
fn a_config_or_workspace_overlapping_a_lazaret_root_is_refused_before_creation() {
    const STORAGE: &str = "(storage root)";
    const RUNTIME: &str = "(runtime root $XDG_RUNTIME_DIR/lazaret)";
    let make_owned = |f: &Fixture, rel: &str| {
        std::fs::create_dir_all(f.path(rel)).expect("mkdir");
        std::fs::set_permissions(f.path(rel), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
    };
    let refused = |f: &Fixture, workspace: &str, env: &[(&str, &str)], keys: [&str; 2]| {
        let sys = RecordingSys::new(RealSys);
        let m = f
            .load_through(&sys, &f.path(workspace), env)
            .expect_err("overlap");
        assert!(
            keys.iter().all(|k| m.contains(&format!("`{k}`"))) && m.contains("overlap; expected"),
            "{keys:?}: {m}"
        );
        assert_eq!(mkdirs(&sys.calls()), 0, "{keys:?}: created a directory");
    };
    let config = "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"a\"\n";

    // The configuration file inside the Storage Root, then inside the
    // Runtime Root: $XDG_CONFIG_HOME is the root's parent, so the file is
    // <root>/config.toml. The other root is never created.
    for (config_home, root, key, other) in [
        (
            "home/.local/share",
            "home/.local/share/lazaret",
            STORAGE,
            "run/lazaret",
        ),
        ("run", "run/lazaret", RUNTIME, "home/.local"),
    ] {
        let f = Fixture::new();
        make_owned(&f, root);
        let source = f.path(root).join("config.toml");
        std::fs::write(&source, config).expect("write");
        std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let home = f.path(config_home).display().to_string();
        refused(
            &f,
            "ws",
            &[("XDG_CONFIG_HOME", &home)],
            ["(configuration source)", key],
        );
        assert!(!f.path(other).exists(), "{other}");
    }

    // The workspace is the Runtime Root, contains it, or lies inside a
    // runtime Domain tree; the same for the Storage Root.
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    make_owned(&f, "run/lazaret/domains/x");
    for ws in ["run/lazaret", "run", "run/lazaret/domains/x"] {
        refused(&f, ws, &[], ["(agent workspace)", RUNTIME]);
    }
    assert!(!f.path("home/.local").exists());
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    make_owned(&f, "home/.local/share/lazaret/profiles/dev");
    for ws in [
        "home/.local/share/lazaret",
        "home/.local/share",
        "home/.local/share/lazaret/profiles/dev",
    ] {
        refused(&f, ws, &[], ["(agent workspace)", STORAGE]);
    }
    assert!(!f.path("run/lazaret").exists());
}

fn mount_tmpfs(at: &Path) {
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=0755", "lazaret-test"])
        .arg(at)
        .status()
        .expect("mount");
    assert!(status.success(), "mount tmpfs on {}", at.display());
}

/// A workspace that is itself a mount point loads (its plan retains the
/// directory itself); a mount placed over its path afterwards makes the
/// label name another object, and revalidation, which a pathname handoff
/// requires, refuses it (spec 3.2).
#[test]
fn a_mount_root_workspace_loads_and_a_mount_over_it_fails_revalidation() {
    if std::env::var_os(support::INNER).is_none() {
        return support::outer(
            "a_mount_root_workspace_loads_and_a_mount_over_it_fails_revalidation",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let f = Fixture::new();
    f.write_config("[profiles.dev]\nimage = \"a\"\n");
    mount_tmpfs(&f.path("ws"));
    let r = f.load().expect("a mount-root workspace loads");
    assert_eq!(r.workspace().label(), f.path("ws"));
    let domain =
        DomainIdV1::compute(r.selected().name(), f.path("ws").as_os_str().as_bytes()).expect("id");
    assert_eq!(r.domain_id(), domain, "the label is the canonical path");
    r.workspace().revalidate(&RealSys).expect("unchanged");
    mount_tmpfs(&f.path("ws"));
    let m = r
        .workspace()
        .revalidate(&RealSys)
        .expect_err("another mount names the workspace now")
        .to_string();
    assert!(m.contains(&f.path("ws").display().to_string()), "{m}");
}

/// Spec 3.2, schemas "volume": a launch reopens each volume source through
/// its plan; one now behind a mount, or swapped for a symlink or another
/// object since the load, is refused.
#[test]
fn a_volume_source_swapped_after_the_load_fails_revalidation() {
    let f = Fixture::new();
    std::fs::create_dir(f.path("data")).expect("mkdir");
    f.write_config(&volume(&f.path("data").display().to_string(), "directory"));
    let r = f.load().expect("load");
    let source = r.volumes()[0].source();
    source.revalidate(&RealSys).expect("unchanged");
    let sys = RecordingSys::new(RealSys);
    sys.fail_nth_at("openat2", "data", 0, rustix::io::Errno::XDEV);
    let m = source.revalidate(&sys).expect_err("mount").to_string();
    assert!(m.contains("crosses a mount point"), "{m}");
    std::fs::rename(f.path("data"), f.path("data-old")).expect("mv");
    symlink(f.path("data-old"), f.path("data")).expect("symlink");
    let m = source
        .revalidate(&RealSys)
        .expect_err("symlink")
        .to_string();
    assert!(m.contains("symbolic link"), "{m}");
    std::fs::remove_file(f.path("data")).expect("rm");
    std::fs::create_dir(f.path("data")).expect("mkdir");
    let m = source
        .revalidate(&RealSys)
        .expect_err("replaced")
        .to_string();
    assert!(m.contains("changed identity"), "{m}");
}
