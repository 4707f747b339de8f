//! Builds the sandbox's static PID 1, `lazaret-init`, with the same rustc
//! (ARCHITECTURE.md "Static in-sandbox binaries": `+crt-static`, static
//! relocation model, so no ELF interpreter and no dynamic section). The
//! `lazaret` binary embeds it and writes it into each generation's runtime
//! directory.
use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), String> {
    let source = "init/lazaret_init.rs";
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2021",
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "relocation-model=static",
            "-C",
            "strip=symbols",
            "--crate-type",
            "bin",
            "--crate-name",
            "lazaret_init",
            "-o",
        ])
        .arg(out.join("lazaret-init"))
        .arg(source)
        .status()
        .map_err(|e| format!("cannot run {rustc:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("building {source} failed: {status}"))
    }
}
