//! Source location, environment references, the sandbox layout constructor
//! and the overlap rules (spec 3.2).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::config::{
    check_overlaps, config_source_path, decode_document, resolve_environment, runtime_root_path,
    storage_root_path, HostPathDecl, KeyPath, SandboxLayoutV1, TreeEntry, TreeRole,
};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, OsString> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect()
}

#[test]
fn config_source_selection() {
    let home = env(&[("HOME", "/home/u")]);
    assert_eq!(
        config_source_path(None, &home).expect("home"),
        Path::new("/home/u/.config/lazaret/config.toml")
    );
    for xdg in ["", "relative/dir"] {
        let e = env(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", xdg)]);
        assert_eq!(
            config_source_path(None, &e).expect("fallback"),
            Path::new("/home/u/.config/lazaret/config.toml"),
            "{xdg:?}"
        );
    }
    let e = env(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "/cfg//x/")]);
    assert_eq!(
        config_source_path(None, &e).expect("xdg"),
        Path::new("/cfg/x/lazaret/config.toml")
    );
    let e = env(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "/cfg/../x")]);
    assert!(config_source_path(None, &e)
        .expect_err("dotdot")
        .to_string()
        .contains("XDG_CONFIG_HOME"));
    // Explicit: strict host-path grammar.
    assert_eq!(
        config_source_path(Some("/etc/l.toml"), &home).expect("abs"),
        Path::new("/etc/l.toml")
    );
    assert_eq!(
        config_source_path(Some("~/l.toml"), &home).expect("tilde"),
        Path::new("/home/u/l.toml")
    );
    for bad in [
        "l.toml",
        "./l.toml",
        "/a//l.toml",
        "/a/../l.toml",
        "{profile_dir}/l.toml",
        "~//l.toml",
    ] {
        let m = config_source_path(Some(bad), &home)
            .expect_err(bad)
            .to_string();
        assert!(
            m.contains("--config") && m.contains("expected"),
            "{bad}: {m}"
        );
    }
    // HOME required when used.
    let none = env(&[]);
    assert!(config_source_path(None, &none)
        .expect_err("no home")
        .to_string()
        .contains("HOME"));
    let rel = env(&[("HOME", "home")]);
    assert!(config_source_path(None, &rel)
        .expect_err("relative home")
        .to_string()
        .contains("HOME"));
    // XDG set: HOME is not needed.
    assert!(config_source_path(None, &env(&[("XDG_CONFIG_HOME", "/c")])).is_ok());
}

#[test]
fn storage_and_runtime_roots() {
    let e = env(&[("HOME", "/home/u")]);
    assert_eq!(
        storage_root_path(None, &e).expect("home"),
        Path::new("/home/u/.local/share/lazaret")
    );
    let e = env(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "/data")]);
    assert_eq!(
        storage_root_path(None, &e).expect("xdg"),
        Path::new("/data/lazaret")
    );
    let e = env(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "rel")]);
    assert_eq!(
        storage_root_path(None, &e).expect("rel"),
        Path::new("/home/u/.local/share/lazaret")
    );
    let decl = HostPathDecl::parse(&KeyPath::root(), "~/store").expect("decl");
    assert_eq!(
        storage_root_path(Some(&decl), &e).expect("decl"),
        Path::new("/home/u/store")
    );
    let e = env(&[("XDG_RUNTIME_DIR", "/run/user/1000")]);
    assert_eq!(
        runtime_root_path(&e).expect("run"),
        Path::new("/run/user/1000/lazaret")
    );
    for bad in [
        env(&[]),
        env(&[("XDG_RUNTIME_DIR", "")]),
        env(&[("XDG_RUNTIME_DIR", "run")]),
    ] {
        assert!(runtime_root_path(&bad)
            .expect_err("runtime")
            .to_string()
            .contains("XDG_RUNTIME_DIR"));
    }
}

const DOC: &str = r#"schema = "lazaret-trusted-host-config-v1"
[profiles.dev]
image = "a"
env = { TOKEN = "env:HOST_TOKEN", OTHER = "env:HOST_OTHER" }
[profiles.x]
image = "b"
env = { UNUSED = "env:NOT_SET_ANYWHERE" }
"#;

#[test]
fn environment_references_resolve_only_for_the_selected_profile_and_are_redacted() {
    let layout = SandboxLayoutV1::production().expect("layout");
    let selected = decode_document(DOC.as_bytes())
        .expect("decode")
        .select("dev", &layout)
        .expect("select");
    let host = env(&[("HOST_TOKEN", "s3cr3t-value"), ("HOST_OTHER", "o")]);
    let resolved = resolve_environment(&selected, &host).expect("resolve");
    let names: Vec<(String, String, String)> = resolved
        .entries()
        .map(|(s, h, v)| (s.to_string(), h.to_string(), v.expose().to_owned()))
        .collect();
    assert_eq!(
        names,
        [
            ("OTHER".to_owned(), "HOST_OTHER".to_owned(), "o".to_owned()),
            (
                "TOKEN".to_owned(),
                "HOST_TOKEN".to_owned(),
                "s3cr3t-value".to_owned()
            )
        ]
    );
    let debug = format!("{resolved:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(debug.contains("<redacted>"));
    // The non-selected profile's unset reference does not matter.
    // Missing, non-UTF-8 and NUL values refuse, naming key and variable.
    let missing = env(&[("HOST_TOKEN", "t")]);
    let m = resolve_environment(&selected, &missing)
        .expect_err("missing")
        .to_string();
    assert!(
        m.contains("profiles.dev.env.OTHER") && m.contains("HOST_OTHER") && m.contains("not set"),
        "{m}"
    );
    let mut bad = env(&[("HOST_TOKEN", "t")]);
    bad.insert("HOST_OTHER".to_owned(), OsString::from_vec(vec![0xff]));
    let m = resolve_environment(&selected, &bad)
        .expect_err("utf8")
        .to_string();
    assert!(m.contains("not UTF-8"), "{m}");
    let mut nul = env(&[("HOST_TOKEN", "t")]);
    nul.insert("HOST_OTHER".to_owned(), OsString::from("a\0b"));
    assert!(resolve_environment(&selected, &nul)
        .expect_err("nul")
        .to_string()
        .contains("NUL"));
    // Error messages never contain the values.
    let m = resolve_environment(&selected, &env(&[("HOST_OTHER", "s3cr3t-value")]))
        .expect_err("x")
        .to_string();
    assert!(!m.contains("s3cr3t"));
}

fn entry(role: TreeRole, key: &str, label: &str, ino: Option<u64>) -> TreeEntry {
    TreeEntry {
        role,
        key: KeyPath::label(key.to_owned()),
        label: PathBuf::from(label),
        identity: ino.map(|i| (8, 1, i)),
        ancestors: Vec::new(),
    }
}

fn base() -> Vec<TreeEntry> {
    vec![
        entry(
            TreeRole::ConfigSource,
            "config",
            "/home/u/.config/lazaret/config.toml",
            Some(1),
        ),
        entry(TreeRole::Workspace, "workspace", "/home/u/src/p", Some(2)),
        entry(
            TreeRole::StorageRoot,
            "storage",
            "/home/u/.local/share/lazaret",
            Some(3),
        ),
        entry(
            TreeRole::ProfileDir,
            "profile",
            "/home/u/.local/share/lazaret/profiles/dev",
            Some(4),
        ),
        entry(
            TreeRole::StorageDomain,
            "sdomain",
            "/home/u/.local/share/lazaret/domains/ab",
            Some(5),
        ),
        entry(
            TreeRole::RuntimeRoot,
            "runtime",
            "/run/user/1/lazaret",
            Some(6),
        ),
        entry(
            TreeRole::RuntimeDomain,
            "rdomain",
            "/run/user/1/lazaret/domains/ab",
            Some(7),
        ),
    ]
}

fn with(extra: TreeEntry) -> Vec<TreeEntry> {
    let mut v = base();
    v.push(extra);
    v
}

#[test]
fn overlap_rules() {
    assert!(check_overlaps(&base()).is_ok());
    let refused = |entries: Vec<TreeEntry>, fragment: &str| {
        let m = check_overlaps(&entries).expect_err(fragment).to_string();
        assert!(
            m.contains(fragment) && m.contains("expected"),
            "{fragment}: {m}"
        );
    };
    // Config source, workspace, storage and runtime roots: both directions.
    let mut v = base();
    v[1].label = PathBuf::from("/home/u");
    refused(v, "workspace");
    let mut v = base();
    v[1].label = PathBuf::from("/home/u/.local/share/lazaret/x");
    refused(v, "workspace");
    let mut v = base();
    v[0].label = PathBuf::from("/home/u/src/p/config.toml");
    refused(v, "config");
    let mut v = base();
    v[5].label = PathBuf::from("/home/u/.local/share/lazaret/run");
    v[6].label = PathBuf::from("/home/u/.local/share/lazaret/run/domains/ab");
    refused(v, "runtime");
    // Same identity under a different name (bind mount) is an overlap.
    let mut v = base();
    v[1].identity = Some((8, 1, 3));
    refused(v, "workspace");
    // A sibling with a common string prefix is not an overlap.
    let mut v = base();
    v[1].label = PathBuf::from("/home/u/.local/share/lazaret-other");
    assert!(check_overlaps(&v).is_ok());
    // Volumes: strictly beneath the profile dir is fine...
    assert!(check_overlaps(&with(entry(
        TreeRole::Volume,
        "vol",
        "/home/u/.local/share/lazaret/profiles/dev/cache",
        Some(9)
    )))
    .is_ok());
    // ...the profile dir itself, the storage root, the Domain trees are not.
    refused(
        with(entry(
            TreeRole::Volume,
            "vol",
            "/home/u/.local/share/lazaret/profiles/dev",
            None,
        )),
        "vol",
    );
    refused(
        with(entry(
            TreeRole::Volume,
            "vol",
            "/home/u/.local/share/lazaret/domains/ab/x",
            None,
        )),
        "vol",
    );
    refused(
        with(entry(TreeRole::Volume, "vol", "/home/u/.local/share", None)),
        "vol",
    );
    refused(
        with(entry(
            TreeRole::Volume,
            "vol",
            "/run/user/1/lazaret/x",
            None,
        )),
        "vol",
    );
    refused(
        with(entry(TreeRole::Volume, "vol", "/home/u/src/p/sub", None)),
        "vol",
    );
    refused(
        with(entry(
            TreeRole::Volume,
            "vol",
            "/home/u/.config/lazaret",
            None,
        )),
        "vol",
    );
    assert!(check_overlaps(&with(entry(TreeRole::Volume, "vol", "/srv/data", None))).is_ok());
    // Volumes are pairwise disjoint.
    let mut v = with(entry(TreeRole::Volume, "vol0", "/srv/data", None));
    v.push(entry(TreeRole::Volume, "vol1", "/srv/data/sub", None));
    refused(v, "vol1");
    // Executables: outside workspace, volumes, profile dir and Lazaret trees.
    assert!(check_overlaps(&with(entry(
        TreeRole::Executable,
        "exe",
        "/usr/bin/git",
        Some(10)
    )))
    .is_ok());
    refused(
        with(entry(
            TreeRole::Executable,
            "exe",
            "/home/u/src/p/run.sh",
            None,
        )),
        "exe",
    );
    refused(
        with(entry(
            TreeRole::Executable,
            "exe",
            "/home/u/.local/share/lazaret/profiles/dev/x",
            None,
        )),
        "exe",
    );
    refused(
        with(entry(
            TreeRole::Executable,
            "exe",
            "/run/user/1/lazaret/x",
            None,
        )),
        "exe",
    );
    let mut v = with(entry(TreeRole::Volume, "vol", "/srv/tools", None));
    v.push(entry(TreeRole::Executable, "exe", "/srv/tools/bin/x", None));
    refused(v, "exe");
    // Two rules may share an executable.
    let mut v = with(entry(
        TreeRole::Executable,
        "exe0",
        "/usr/bin/git",
        Some(10),
    ));
    v.push(entry(
        TreeRole::Executable,
        "exe1",
        "/usr/bin/git",
        Some(10),
    ));
    assert!(check_overlaps(&v).is_ok());
}

/// `entry` with the identities of its containing directories.
fn inside(mut e: TreeEntry, ancestors: &[u64]) -> TreeEntry {
    e.ancestors = ancestors.iter().map(|i| (8, 1, *i)).collect();
    e
}

#[test]
fn an_alias_of_a_containing_directory_overlaps_whatever_it_contains() {
    // /home/u has identity 20; the workspace, config and storage root lie
    // beneath it. /mnt/h is a bind mount of /home/u: disjoint labels, but
    // its identity is an ancestor identity of every one of them.
    let home_alias = || entry(TreeRole::Volume, "vol", "/mnt/h", Some(20));
    let mut v = base();
    v[1] = inside(v[1].clone(), &[21, 20, 1000]);
    v.push(home_alias());
    let m = check_overlaps(&v).expect_err("alias").to_string();
    assert!(
        m.contains("vol") && m.contains("workspace") && m.contains("expected"),
        "{m}"
    );
    // The same alias of an unrelated directory is accepted.
    let mut v = base();
    v[1] = inside(v[1].clone(), &[21, 22, 1000]);
    v.push(home_alias());
    assert!(check_overlaps(&v).is_ok());
    // The containment is refused in the other direction too: a volume
    // whose containing directories include the workspace's identity.
    let mut v = base();
    v.push(inside(
        entry(TreeRole::Volume, "vol", "/mnt/ws/sub", Some(30)),
        &[2, 1000],
    ));
    assert!(check_overlaps(&v).is_err());
    // An executable reached through an alias of a volume's directory.
    let mut v = with(entry(TreeRole::Volume, "vol", "/srv/tools", Some(40)));
    v.push(inside(
        entry(TreeRole::Executable, "exe", "/opt/t/bin/x", Some(41)),
        &[42, 40, 1000],
    ));
    let m = check_overlaps(&v).expect_err("exe").to_string();
    assert!(m.contains("exe") && m.contains("vol"), "{m}");
    // Storage Root and Runtime Root aliased into each other.
    let mut v = base();
    v[6] = inside(v[6].clone(), &[50, 3, 1000]);
    assert!(check_overlaps(&v).is_err());
    // A volume strictly beneath the profile directory still may sit inside
    // the Storage Root and profile directory by identity.
    let mut v = base();
    v.push(inside(
        entry(
            TreeRole::Volume,
            "vol",
            "/home/u/.local/share/lazaret/profiles/dev/cache",
            Some(60),
        ),
        &[4, 61, 3, 1000],
    ));
    assert!(check_overlaps(&v).is_ok());
}

/// Spec 3.2 overlap rules, pair by pair: every compared role against every
/// other, with the first inside the second, the second inside the first, the
/// same label, and the same identity under disjoint labels. Each case holds
/// only the two entries (plus the profile directory where its exemption is
/// at stake), so the refusal must name exactly that pair.
#[test]
fn every_role_pair_is_compared_in_both_directions() {
    use TreeRole::{
        ConfigSource, Executable, ProfileDir, RuntimeDomain, RuntimeRoot, StorageDomain,
        StorageRoot, Volume, Workspace,
    };
    let roles = [
        (ConfigSource, "config"),
        (Workspace, "workspace"),
        (StorageRoot, "storage"),
        (ProfileDir, "profile"),
        (StorageDomain, "sdomain"),
        (RuntimeRoot, "runtime"),
        (RuntimeDomain, "rdomain"),
        (Volume, "vol"),
        (Executable, "exe"),
    ];
    // The Lazaret trees of one Storage or Runtime Root nest by construction.
    let group = |r: TreeRole| match r {
        StorageRoot | ProfileDir | StorageDomain => Some(2),
        RuntimeRoot | RuntimeDomain => Some(3),
        _ => None,
    };
    let exempt = |a: TreeRole, b: TreeRole| {
        let same_tree = group(a).is_some() && group(a) == group(b);
        // Rules may share an executable; the configuration source is not a
        // directory an executable could lie in or contain.
        let executable_exempt = matches!(
            (a, b),
            (Executable, Executable | ConfigSource) | (ConfigSource, Executable)
        );
        same_tree || executable_exempt
    };
    let mut checked = 0;
    for (i, &(ra, ka)) in roles.iter().enumerate() {
        for &(rb, kb) in &roles[i..] {
            // A load has one configuration source and one workspace.
            if ra == rb && matches!(ra, ConfigSource | Workspace) {
                continue;
            }
            // Two distinct entries even for a role against itself.
            let kb = if ra == rb { "other" } else { kb };
            let a = |label: &str, ino: u64| entry(ra, ka, label, Some(ino));
            let b = |label: &str, ino: u64| entry(rb, kb, label, Some(ino));
            let cases = [
                ("a inside b", a("/t/b/a", 1), b("/t/b", 2)),
                ("b inside a", a("/t/a", 1), b("/t/a/b", 2)),
                ("same label", a("/t/x", 1), b("/t/x", 2)),
                ("same identity", a("/t/a", 7), b("/t/b", 7)),
                (
                    "a inside b by identity",
                    inside(a("/t/a/x", 1), &[3, 2, 100]),
                    b("/t/b", 2),
                ),
                (
                    "b inside a by identity",
                    a("/t/a", 1),
                    inside(b("/t/b/x", 2), &[3, 1, 100]),
                ),
            ];
            for (what, ea, eb) in cases {
                for entries in [vec![ea.clone(), eb.clone()], vec![eb, ea]] {
                    let verdict = check_overlaps(&entries);
                    // The one exemption: a volume strictly beneath the
                    // profile directory (see the test below).
                    let beneath_profile = (ra, rb) == (ProfileDir, Volume) && what == "b inside a";
                    if exempt(ra, rb) || beneath_profile {
                        assert!(verdict.is_ok(), "{ka}/{kb} {what}: {verdict:?}");
                    } else {
                        let m = verdict.expect_err(&format!("{ka}/{kb} {what}")).to_string();
                        assert!(
                            m.contains(&format!("`{ka}`"))
                                && m.contains(&format!("`{kb}`"))
                                && m.contains("overlap; expected"),
                            "{ka}/{kb} {what}: {m}"
                        );
                    }
                    checked += 1;
                }
            }
            // A sibling sharing a string prefix never overlaps.
            let siblings = [a("/t/x", 1), b("/t/x-y", 2)];
            assert!(check_overlaps(&siblings).is_ok(), "{ka}/{kb} siblings");
        }
    }
    // 9 roles: 36 unordered pairs of distinct roles plus 7 roles that can
    // occur more than once in a load, each in 6 placements and 2 orders.
    assert_eq!(checked, (36 + 7) * 6 * 2);
}

/// The one volume exemption (spec 3.2: "Volume sources may be strict
/// descendants of the profile directory"): only strictly beneath it, and
/// only towards the Storage Root and profile directory; the Domain trees,
/// the runtime trees and other volumes are still refused there.
#[test]
fn the_profile_directory_exemption_is_exact() {
    let profile = entry(
        TreeRole::ProfileDir,
        "profile",
        "/s/lazaret/profiles/dev",
        Some(4),
    );
    let storage = entry(TreeRole::StorageRoot, "storage", "/s/lazaret", Some(3));
    let under = |key: &str, rel: &str, ino: u64| {
        inside(
            entry(
                TreeRole::Volume,
                key,
                &format!("/s/lazaret/profiles/dev/{rel}"),
                Some(ino),
            ),
            &[4, 50, 3, 1000],
        )
    };
    assert!(check_overlaps(&[storage.clone(), profile.clone(), under("vol", "cache", 9)]).is_ok());
    // The profile directory itself, or a volume containing it.
    for label in ["/s/lazaret/profiles/dev", "/s/lazaret/profiles", "/s"] {
        let vol = entry(TreeRole::Volume, "vol", label, None);
        let m = check_overlaps(&[storage.clone(), profile.clone(), vol])
            .expect_err(label)
            .to_string();
        assert!(
            m.contains("`vol`") && m.contains("expected"),
            "{label}: {m}"
        );
    }
    // Two volumes beneath the profile directory still may not nest.
    let m = check_overlaps(&[
        storage.clone(),
        profile.clone(),
        under("vol0", "cache", 9),
        under("vol1", "cache/pip", 10),
    ])
    .expect_err("nested volumes")
    .to_string();
    assert!(m.contains("`vol1`") && m.contains("`vol0`"), "{m}");
    // A Domain tree placed beneath the profile directory is not exempt.
    let sdomain = entry(
        TreeRole::StorageDomain,
        "sdomain",
        "/s/lazaret/profiles/dev/cache/d",
        Some(5),
    );
    let m = check_overlaps(&[storage, profile, under("vol", "cache", 9), sdomain])
        .expect_err("domain")
        .to_string();
    assert!(m.contains("`sdomain`") && m.contains("`vol`"), "{m}");
}
