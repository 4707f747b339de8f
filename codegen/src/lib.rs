//! Parser for the state-table dialect of `protocol/*.tla` (see
//! `protocol/README.md`), its typed IR, and the Rust emitter that produces
//! `generated/src/*.rs`.

pub mod ast;
pub mod emit;
pub mod error;
pub mod ir;
pub mod lexer;
pub mod lower;
pub mod names;
pub mod parser;

use std::path::Path;

use sha2::{Digest, Sha256};

pub use error::CodegenError;

/// A model the workspace generates Rust for.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The `.tla` file relative to the workspace root (its `.cfg` sits next to it).
    pub tla: &'static str,
    /// The generated file relative to the workspace root.
    pub rust: &'static str,
}

/// Every generated model: the protocol models, then the dialect
/// fixtures (checked by the same conformance suite).
pub const TARGETS: &[Target] = &[
    Target {
        tla: "protocol/Lazaret.tla",
        rust: "generated/src/lazaret.rs",
    },
    Target {
        tla: "protocol/PreparedLower.tla",
        rust: "generated/src/prepared_lower.rs",
    },
    Target {
        tla: "protocol/SessionRelease.tla",
        rust: "generated/src/session_release.rs",
    },
    Target {
        tla: "codegen/tests/fixtures/TwoPhase.tla",
        rust: "generated/src/fixtures/two_phase.rs",
    },
    Target {
        tla: "codegen/tests/fixtures/Constructs.tla",
        rust: "generated/src/fixtures/constructs.rs",
    },
];

/// Parses and lowers one model. `file` is the name errors and the header use.
pub fn model(file: &str, src: &str, cfg_file: &str, cfg: &str) -> Result<ir::Model, CodegenError> {
    let parsed = parser::parse_module(file, src)?;
    let kinds = lower::cfg_kinds(cfg_file, cfg)?;
    let sha = hex::encode(Sha256::digest(src.as_bytes()));
    lower::lower(&parsed, &sha, &kinds)
}

/// The generated Rust for one model.
pub fn generate(file: &str, src: &str, cfg_file: &str, cfg: &str) -> Result<String, CodegenError> {
    emit::emit(&model(file, src, cfg_file, cfg)?)
}

/// Reads a target's `.tla` and `.cfg` under `root` and generates its Rust.
/// Paths in the header and errors are relative to `root`.
pub fn generate_target(root: &Path, t: &Target) -> Result<String, CodegenError> {
    let cfg = t.tla.replace(".tla", ".cfg");
    let read = |rel: &str| {
        std::fs::read_to_string(root.join(rel)).map_err(|source| CodegenError::Read {
            path: root.join(rel).display().to_string(),
            source,
        })
    };
    generate(t.tla, &read(t.tla)?, &cfg, &read(&cfg)?)
}

/// The targets under `root` whose checked-in Rust differs from what the
/// generator produces now (a missing generated file counts as stale; a
/// target whose `.tla` is absent is skipped).
pub fn stale_targets(root: &Path) -> Result<Vec<&'static Target>, CodegenError> {
    let mut stale = Vec::new();
    for t in TARGETS {
        if !root.join(t.tla).exists() {
            continue;
        }
        let code = generate_target(root, t)?;
        if std::fs::read_to_string(root.join(t.rust)).ok().as_deref() != Some(code.as_str()) {
            stale.push(t);
        }
    }
    Ok(stale)
}
