//! `lazaret image pull REF [--config FILE] [--quiet]`: brings an image into
//! the Storage Root's blob store, exactly as a launch resolves it (spec 3.6
//! "Prepared lower": preparation resolves the selected base image), so a
//! later launch finds every blob verified in place.
//!
//! On a terminal the pull shows its progress on stderr (the manifest, then
//! each layer's bytes); on anything else, or with `--quiet`, it prints only
//! the result: the normalised reference and its manifest digest on stdout.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use lazaret_effects::image::reference::{ImageRef, ReferenceError};
use lazaret_effects::image::store::{BlobStore, StoreError};
use lazaret_effects::image::{resolve, ImageError, Progress};
use lazaret_effects::process_env::ProcessEnvironment;

use crate::cmd_state::list::{storage_root, ListError};
use crate::report::{eprint_progress, outln, stderr_is_terminal, ProgressLine};

#[derive(Debug, Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Pull REF into the blob store (verified by digest while streaming).
    Pull {
        /// The image, as docker and podman take it (`debian:bookworm`,
        /// `ghcr.io/org/agent@sha256:...`, `oci:/abs/layout:tag`).
        reference: String,
        /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
        /// else ~/.config/lazaret/config.toml); only its storage.data_root
        /// is used.
        #[arg(long, value_name = "FILE")]
        config: Option<String>,
        /// Show no progress, even on a terminal.
        #[arg(long, short)]
        quiet: bool,
    },
}

/// The one reporting layer of `lazaret image`.
#[derive(Debug, thiserror::Error)]
pub enum ImageCommandError {
    #[error("lazaret refuses to run as root (uid 0); run it as the user it acts for (spec SR-1)")]
    Root,
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("locating the Storage Root: {0}")]
    StorageRoot(#[from] ListError),
    #[error("opening the blob store {path}: {source}")]
    BlobStore { path: PathBuf, source: StoreError },
    #[error("pulling {reference}: {source}")]
    Pull {
        reference: String,
        source: Box<ImageError>,
    },
}

/// Runs `lazaret image ...`.
pub fn run(args: &ImageArgs) -> Result<(), ImageCommandError> {
    // SR-1: commands that act for a user refuse uid 0.
    if rustix::process::geteuid().is_root() {
        return Err(ImageCommandError::Root);
    }
    match &args.command {
        ImageCommand::Pull {
            reference,
            config,
            quiet,
        } => pull(reference, config.as_deref(), *quiet),
    }
}

fn pull(text: &str, config: Option<&str>, quiet: bool) -> Result<(), ImageCommandError> {
    let reference = ImageRef::parse(text)?;
    let root = storage_root(config, &ProcessEnvironment)?;
    let blobs_dir = root.join("blobs");
    let blobs = BlobStore::open(&blobs_dir).map_err(|source| ImageCommandError::BlobStore {
        path: blobs_dir.clone(),
        source,
    })?;
    let mut meter = (!quiet && stderr_is_terminal()).then(Meter::default);
    let image = resolve(&reference, &blobs, &mut |p| {
        if let Some(m) = meter.as_mut() {
            m.show(&p);
        }
    })
    .map_err(|source| ImageCommandError::Pull {
        reference: reference.to_string(),
        source: Box::new(source),
    })?;
    if let Some(m) = meter.as_mut() {
        m.finish();
    }
    outln!("{reference} {}", image.manifest_digest);
    Ok(())
}

/// Progress on a terminal: one line per layer, rewritten in place.
#[derive(Debug, Default)]
struct Meter {
    /// `layer i/n digest` of the line being rewritten.
    current: Option<String>,
}

impl Meter {
    fn show(&mut self, p: &Progress) {
        match p {
            Progress::Manifest {
                digest,
                layers,
                bytes,
            } => eprint_progress(
                &format!(
                    "manifest {} · {layers} layers · {}",
                    short(digest),
                    human(*bytes)
                ),
                ProgressLine::Whole,
            ),
            Progress::Layer {
                index,
                count,
                digest,
                size,
                cached,
            } => {
                self.finish();
                let label = format!("layer {index}/{count} {}", short(digest));
                if *cached {
                    eprint_progress(
                        &format!("{label} · {} · already present", human(*size)),
                        ProgressLine::Whole,
                    );
                } else {
                    eprint_progress(
                        &format!("{label} · 0 B / {}", human(*size)),
                        ProgressLine::Open,
                    );
                    self.current = Some(label);
                }
            }
            Progress::Bytes { done, size, .. } => {
                if let Some(label) = &self.current {
                    eprint_progress(
                        &format!("{label} · {} / {}", human(*done), human(*size)),
                        ProgressLine::Rewrite,
                    );
                }
            }
        }
    }

    fn finish(&mut self) {
        if self.current.take().is_some() {
            eprint_progress("", ProgressLine::Close);
        }
    }
}

/// The first 12 hex digits of a digest.
fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.get(..12).unwrap_or(hex)
}

/// Bytes in B, KiB, MiB or GiB with one decimal.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_digests_read_short() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(50 << 20), "50.0 MiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
        assert_eq!(
            short(&format!("sha256:{}", "ab".repeat(32))),
            "abababababab"
        );
    }
}
