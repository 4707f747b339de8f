//! Builds the sandbox's static PID 1, `lazaret-init`, the guest tool
//! `lazaret-guest` and the network probe `lazaret-probe` with the same rustc
//! (ARCHITECTURE.md "Static in-sandbox binaries": `+crt-static`, static
//! relocation model, so no ELF interpreter and no dynamic section), and the
//! Escalation Client `lazaret-escalate` (the workspace package of that name,
//! which needs crates) with a nested cargo build under the same two flags.
//! The `lazaret` binary embeds them and writes them into each generation's
//! runtime directory.
use std::path::PathBuf;
use std::process::Command;

/// What makes an in-sandbox binary static: no ELF interpreter, no dynamic
/// section, no symbols.
const STATIC: [&str; 6] = [
    "-C",
    "target-feature=+crt-static",
    "-C",
    "relocation-model=static",
    "-C",
    "strip=symbols",
];

fn main() -> Result<(), String> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // The script itself too: with any rerun-if-changed line, cargo reruns
    // the script only for the files named, and a persistent target dir
    // would keep the outputs of an older script.
    println!("cargo:rerun-if-changed=build.rs");
    // PID 1, the guest observation and signal tool, and the network probe
    // of `lazaret doctor --network`.
    for (source, name) in [
        ("init/lazaret_init.rs", "lazaret_init"),
        ("init/lazaret_guest.rs", "lazaret_guest"),
        ("init/lazaret_probe.rs", "lazaret_probe"),
    ] {
        println!("cargo:rerun-if-changed={source}");
        let status = Command::new(&rustc)
            .args([
                "--edition",
                "2021",
                "-C",
                "opt-level=2",
                "-C",
                "panic=abort",
            ])
            .args(STATIC)
            .args(["--crate-type", "bin", "--crate-name", name, "-o"])
            .arg(out.join(name.replace('_', "-")))
            .arg(source)
            .status()
            .map_err(|e| format!("cannot run {rustc:?}: {e}"))?;
        if !status.success() {
            return Err(format!("building {source} failed: {status}"));
        }
    }
    escalation_client(&out)
}

/// Builds `lazaret-escalate` static: `cargo rustc` passes the two flags to
/// the final binary only, so its dependencies build as usual, in a target
/// directory of its own beside this build's (one for every profile and
/// feature set of the CLI; cargo's lock serialises concurrent builds). The
/// outer build's compiler wrappers and flags are not inherited.
fn escalation_client(out: &std::path::Path) -> Result<(), String> {
    let workspace =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").ok_or("no CARGO_MANIFEST_DIR")?)
            .join("..");
    for watched in ["escalate", "wire", "Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out.
    let target = out
        .ancestors()
        .nth(4)
        .ok_or("OUT_DIR is not inside a target directory")?
        .join("lazaret-escalate");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(&workspace)
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .args([
            "rustc",
            "--locked",
            "--release",
            "-p",
            "lazaret-escalate",
            "--bin",
            "lazaret-escalate",
            "--target-dir",
        ])
        .arg(&target)
        .arg("--")
        .args(STATIC)
        .status()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !status.success() {
        return Err(format!("building lazaret-escalate failed: {status}"));
    }
    std::fs::copy(
        target.join("release/lazaret-escalate"),
        out.join("lazaret-escalate"),
    )
    .map_err(|e| format!("cannot copy lazaret-escalate into {}: {e}", out.display()))?;
    Ok(())
}
