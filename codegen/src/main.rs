//! `lazaret-codegen`: prints or writes the Rust generated from `protocol/*.tla`.
//!
//! ```text
//! lazaret-codegen                  print every model's Rust to stdout
//! lazaret-codegen --write          write generated/src/<model>.rs
//! lazaret-codegen --check          exit 1 if a checked-in file is stale
//! lazaret-codegen FILE.tla         print the Rust for one file (FILE.cfg next to it)
//! ```
//! `--root DIR` selects the workspace root (default: the one this binary was built from).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lazaret_codegen::{emit::REGENERATE, generate, generate_target, CodegenError, TARGETS};

enum Mode {
    Print,
    Write,
    Check,
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lazaret-codegen: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode, CodegenError> {
    let mut mode = Mode::Print;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut root = manifest.parent().unwrap_or(manifest).to_path_buf();
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--write" => mode = Mode::Write,
            "--check" => mode = Mode::Check,
            "--root" => match args.next() {
                Some(r) => root = PathBuf::from(r),
                None => return Err(usage("--root needs a directory")),
            },
            "-h" | "--help" => {
                println!("usage: lazaret-codegen [--root DIR] [--write | --check] [FILE.tla ...]");
                return Ok(ExitCode::SUCCESS);
            }
            f if f.ends_with(".tla") => files.push(PathBuf::from(f)),
            other => return Err(usage(&format!("unknown argument `{other}`"))),
        }
    }
    if !files.is_empty() {
        for f in files {
            print!("{}", generate_file(&f)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut stale = Vec::new();
    for t in TARGETS {
        if !root.join(t.tla).exists() {
            eprintln!("skipping {}: not present", t.tla);
            continue;
        }
        let code = generate_target(&root, t)?;
        let out = root.join(t.rust);
        match mode {
            Mode::Print => print!("{code}"),
            Mode::Write => {
                std::fs::write(&out, code).map_err(|source| CodegenError::Write {
                    path: out.display().to_string(),
                    source,
                })?;
                eprintln!("wrote {}", out.display());
            }
            Mode::Check => {
                if std::fs::read_to_string(&out).ok().as_deref() != Some(code.as_str()) {
                    stale.push(out.display().to_string());
                }
            }
        }
    }
    if !stale.is_empty() {
        eprintln!("stale: {}; run `{REGENERATE}`", stale.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn generate_file(tla: &Path) -> Result<String, CodegenError> {
    let cfg = tla.with_extension("cfg");
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| CodegenError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    generate(
        &tla.display().to_string(),
        &read(tla)?,
        &cfg.display().to_string(),
        &read(&cfg)?,
    )
}

fn usage(msg: &str) -> CodegenError {
    CodegenError::Read {
        path: "command line".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.to_string()),
    }
}
