//! Builds the sandbox's static PID 1, `lazaret-init`, the guest tool
//! `lazaret-guest` and the network probe `lazaret-probe` with the same rustc
//! (ARCHITECTURE.md "Static in-sandbox binaries": `+crt-static`, static
//! relocation model, so no ELF interpreter and no dynamic section). The
//! `lazaret` binary embeds them and writes them into each generation's
//! runtime directory.
use std::path::PathBuf;
use std::process::Command;

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
                "-C",
                "target-feature=+crt-static",
                "-C",
                "relocation-model=static",
                "-C",
                "strip=symbols",
                "--crate-type",
                "bin",
                "--crate-name",
                name,
                "-o",
            ])
            .arg(out.join(name.replace('_', "-")))
            .arg(source)
            .status()
            .map_err(|e| format!("cannot run {rustc:?}: {e}"))?;
        if !status.success() {
            return Err(format!("building {source} failed: {status}"));
        }
    }
    Ok(())
}
