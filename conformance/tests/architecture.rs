//! Architecture invariants that are easiest to state as what is absent
#![allow(clippy::panic)] // a test harness reports failure by panicking
//! (ARCHITECTURE.md "Top level"; STYLE.md "rust-analyzer").
//!
//! - Dependencies point one way: cli -> effects -> runtime -> wire ->
//!   generated -> codegen (the build-time generator), for normal, dev and
//!   build dependencies alike: not even a test may reach back up a layer.
//!   Nothing depends on cli; runtime never depends on effects. The
//!   in-sandbox Escalation Client (escalate) sits beside cli and depends
//!   only downward. conformance (the checker) may use all of them, and only
//!   the CLI uses it (`lazaret model check`, `lazaret trace replay`).
//! - runtime/, wire/ and generated/ do no I/O: no syscalls, clocks,
//!   environment or randomness.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace crates in dependency order; a crate may depend only on
/// crates to its right (conformance, the checker, may depend on all).
const LAYERS: &[&str] = &[
    "lazaret-cli",
    "lazaret-escalate",
    "lazaret-effects",
    "lazaret-runtime",
    "lazaret-wire",
    "lazaret-generated",
    "lazaret-codegen",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Internal (workspace) dependencies of every workspace package, of every
/// kind (normal, dev, build), as cargo resolves them.
fn internal_dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output();
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("cannot run cargo metadata: {e}"),
    };
    let meta: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => panic!("cargo metadata printed invalid JSON: {e}"),
    };
    let mut deps = BTreeMap::new();
    let packages = meta["packages"].as_array().cloned().unwrap_or_default();
    assert!(!packages.is_empty(), "cargo metadata listed no packages");
    for pkg in packages {
        let name = pkg["name"].as_str().unwrap_or_default().to_owned();
        let internal: Vec<String> = pkg["dependencies"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|d| d["name"].as_str())
            .filter(|n| n.starts_with("lazaret-"))
            .map(str::to_owned)
            .collect();
        deps.insert(name, internal);
    }
    deps
}

#[test]
fn dependencies_point_one_way() {
    let deps = internal_dependencies();
    for layer in LAYERS {
        assert!(deps.contains_key(*layer), "workspace lacks crate {layer}");
    }
    for (pkg, internal) in &deps {
        for dep in internal {
            assert_ne!(dep, "lazaret-cli", "{pkg} depends on lazaret-cli");
            // The CLI's `model check` and `trace replay` use the checker;
            // nothing else may depend on it.
            assert!(
                dep != "lazaret-conformance" || pkg == "lazaret-cli",
                "{pkg} depends on lazaret-conformance"
            );
            if let (Some(from), Some(to)) = (
                LAYERS.iter().position(|l| l == pkg),
                LAYERS.iter().position(|l| l == dep),
            ) {
                assert!(
                    to > from,
                    "{pkg} depends on {dep}: dependencies point cli -> effects -> runtime -> wire -> generated -> codegen"
                );
            }
        }
    }
}

/// Source tokens that mean I/O, a clock, the environment or randomness.
/// Pure data types of std (`Ipv4Addr`, `OsStrExt` byte views) are allowed.
const FORBIDDEN_IN_PURE_CORE: &[&str] = &[
    "std::fs",
    "std::net::Tcp",
    "std::net::Udp",
    "std::process",
    "std::env",
    "std::os::fd",
    "std::os::unix::fs",
    "std::os::unix::net",
    "std::os::unix::process",
    "std::os::unix::io",
    "std::thread",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "SystemTime",
    "Instant::now",
    "rustix",
    "libc",
    "tokio",
    "rand::",
    "getrandom",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            // `tests.rs` holds a `#[cfg(test)] mod tests;` (fixtures may be files).
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn runtime_and_generated_do_no_io() {
    let root = workspace_root();
    let mut files = Vec::new();
    for crate_dir in ["runtime/src", "wire/src", "generated/src"] {
        rust_files(&root.join(crate_dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "found no sources under runtime/ or generated/"
    );
    let mut offences = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for token in FORBIDDEN_IN_PURE_CORE {
                if code.contains(token) {
                    offences.push(format!("{}:{}: {token}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "the pure core must not do I/O (ARCHITECTURE.md); move this to effects/:\n{}",
        offences.join("\n")
    );
}

/// The section of docs/architecture.md's code map for the crate in `dir`
/// (from its `### \`dir/\`` heading to the next heading).
fn code_map_section<'d>(doc: &'d str, dir: &str) -> Option<&'d str> {
    let heading = format!("### `{dir}/`");
    let start = doc.find(&heading)?;
    let rest = &doc[start + heading.len()..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    Some(&rest[..end])
}

/// How a module file may be named in its crate's code-map section: a
/// `mod.rs` by its directory (`name/`), any other file by its file name
/// (`name.rs`, alone or at the end of a path). `None` for files the map
/// need not name: crate roots and test modules (`tests.rs`,
/// `*_tests.rs`), which belong to the module they test.
fn map_name(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_str()?;
    if matches!(name, "lib.rs" | "tests.rs") || name.ends_with("_tests.rs") {
        return None;
    }
    if name == "mod.rs" {
        let dir = file.parent()?.file_name()?.to_str()?;
        return Some(format!("{dir}/"));
    }
    Some(name.to_owned())
}

/// Whether `section` names `wanted` inside backquotes: `` `wanted` ``,
/// `` `path/wanted` `` or, for a directory, `` `wanted...` ``.
fn names(section: &str, wanted: &str) -> bool {
    section.split('`').skip(1).step_by(2).any(|quoted| {
        quoted.split([' ', ',', '(', ')', '{', '}']).any(|word| {
            word == wanted
                || word.ends_with(&format!("/{wanted}"))
                || (wanted.ends_with('/') && word.contains(wanted))
        })
    })
}

/// docs/architecture.md's code map is current: every module file of every
/// crate (and the static in-sandbox binaries under `cli/init/`) is named in
/// its crate's section (STYLE.md; spec-independent maintenance rule).
#[test]
fn every_module_is_on_the_code_map() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md"))
        .unwrap_or_else(|e| panic!("docs/architecture.md: {e}"));
    let mut missing = Vec::new();
    for (dir, sources) in [
        ("codegen", vec!["codegen/src"]),
        ("generated", vec!["generated/src"]),
        ("wire", vec!["wire/src"]),
        ("runtime", vec!["runtime/src"]),
        ("effects", vec!["effects/src"]),
        ("escalate", vec!["escalate/src"]),
        ("cli", vec!["cli/src", "cli/init"]),
        ("conformance", vec!["conformance/src"]),
    ] {
        let section = code_map_section(&doc, dir)
            .unwrap_or_else(|| panic!("docs/architecture.md has no section ### `{dir}/`"));
        let mut files = Vec::new();
        for source in sources {
            rust_files(&root.join(source), &mut files);
        }
        assert!(!files.is_empty(), "no Rust files under {dir}");
        for file in files {
            let Some(wanted) = map_name(&file) else {
                continue;
            };
            if !names(section, &wanted) {
                missing.push(format!(
                    "{} (as `{wanted}` in ### `{dir}/`)",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md's code map does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_code_map_check_can_fail() {
    let section = "- `network/`: x. `rtnl.rs` (links), `coordinator/host.rs`.";
    assert!(names(section, "rtnl.rs"));
    assert!(names(section, "host.rs"));
    assert!(names(section, "network/"));
    assert!(!names(section, "plan.rs"));
    assert!(!names(section, "terminal/"));
    assert_eq!(
        map_name(Path::new("a/network/mod.rs")).as_deref(),
        Some("network/")
    );
    assert_eq!(map_name(Path::new("a/network/plan_tests.rs")), None);
}
