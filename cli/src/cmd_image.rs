//! `lazaret image pull|ls|rm`: the images of the Storage Root's blob store.
//!
//! - `pull REF [--quiet]` brings an image in exactly as a launch resolves
//!   it (spec 3.6 "Prepared lower": preparation resolves the selected base
//!   image), so a later launch finds every blob verified in place. On a
//!   terminal it shows its progress on stderr (the manifest, then each
//!   layer's bytes); otherwise, or with `--quiet`, only the result: the
//!   normalised reference and its manifest digest on stdout.
//! - `ls [--json]` lists the named images of the Storage Catalog: reference,
//!   manifest digest, size, pull time, last use, and the Domains whose
//!   generations hold a prepared lower made from it.
//! - `rm REF` removes a named image and every blob no remaining named
//!   image needs (its own, and what a moved tag left), refusing an image a
//!   Domain currently uses. Prepared lowers made from it are left to
//!   `lazaret state gc`.
//!
//! `--config FILE` selects the configuration whose `storage.data_root` is
//! the Storage Root.

use std::path::PathBuf;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use lazaret_effects::image::reference::{ImageRef, ReferenceError};
use lazaret_effects::image::store::{BlobStore, Sha256, StoreError};
use lazaret_effects::image::{image_blobs, ImageError, Progress};
use lazaret_effects::prepare::obtain::{obtain_lower, ObtainError, Obtained, Stage};
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::storage_catalog::{CatalogError, StorageCatalog};
use lazaret_runtime::display::escape_line;

use crate::cmd_state::list::{ago, storage_root, ListError};
use crate::report::{
    eprint_progress, outln, print_json, print_text, stderr_is_terminal, ProgressLine,
};

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
    /// List the named images of the Storage Root.
    Ls {
        /// Configuration file (as for `pull`).
        #[arg(long, value_name = "FILE")]
        config: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove a named image and the blobs no other named image needs;
    /// refused while a Domain uses it.
    Rm {
        /// The image, written as for `pull`.
        reference: String,
        /// Configuration file (as for `pull`).
        #[arg(long, value_name = "FILE")]
        config: Option<String>,
    },
}

/// Blobs `image rm` looks at in one store.
const MAX_BLOBS: usize = 1 << 20;

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
        source: Box<ObtainError>,
    },
    #[error("the Storage Catalog: {0}")]
    Catalog(#[from] CatalogError),
    #[error("no image {reference} in the Storage Root; `lazaret image ls` lists them")]
    NotFound { reference: String },
    #[error("image {reference} is in use by {count} Domain{plural} ({domains}); end their sessions first")]
    InUse {
        reference: String,
        count: usize,
        plural: &'static str,
        domains: String,
    },
    #[error("the blob store {path} is in use by a pull or launch; try again when it ends")]
    StoreBusy { path: PathBuf },
    #[error("reading the blobs of {reference}: {source}")]
    Blobs {
        reference: String,
        source: Box<ImageError>,
    },
    #[error("writing the listing: {0}")]
    Output(#[source] std::io::Error),
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
        ImageCommand::Ls { config, json } => list(config.as_deref(), *json),
        ImageCommand::Rm { reference, config } => remove(reference, config.as_deref()),
    }
}

/// The Storage Root and its opened blob store.
fn open_store(config: Option<&str>) -> Result<(PathBuf, BlobStore), ImageCommandError> {
    let root = storage_root(config, &ProcessEnvironment)?;
    let blobs_dir = root.join("blobs");
    let blobs = BlobStore::open(&blobs_dir).map_err(|source| ImageCommandError::BlobStore {
        path: blobs_dir.clone(),
        source,
    })?;
    Ok((root, blobs))
}

/// The Domains whose leases hold a prepared lower made from each manifest
/// digest: digest -> Domain IDs (hex), sorted, without repeats.
fn users_by_digest(
    catalog: &StorageCatalog,
) -> Result<BTreeMap<String, Vec<String>>, ImageCommandError> {
    let artifacts = catalog.artifacts()?;
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for lease in catalog.leases()? {
        let Some(artifact) = artifacts
            .iter()
            .find(|a| a.prepared_artifact_id == lease.artifact)
        else {
            continue;
        };
        let domains = users
            .entry(artifact.selected_manifest_digest.as_str().to_owned())
            .or_default();
        let id = lease.domain.to_string();
        if !domains.contains(&id) {
            domains.push(id);
        }
    }
    for domains in users.values_mut() {
        domains.sort();
    }
    Ok(users)
}

fn list(config: Option<&str>, json: bool) -> Result<(), ImageCommandError> {
    let root = storage_root(config, &ProcessEnvironment)?;
    let catalog = StorageCatalog::at(&root);
    let images = catalog.images()?;
    let users = users_by_digest(&catalog)?;
    let none = Vec::new();
    if json {
        let rows: Vec<serde_json::Value> = images
            .iter()
            .map(|i| {
                serde_json::json!({
                    "reference": i.reference,
                    "manifest_digest": i.manifest_digest.as_str(),
                    "bytes": i.bytes,
                    "pulled_at": i.pulled_at,
                    "last_used_at": i.used_at,
                    "domains": users.get(i.manifest_digest.as_str()).unwrap_or(&none),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&serde_json::json!({ "images": rows }))
            .map_err(|e| ImageCommandError::Output(e.into()))?;
        return print_json(&format!("{text}\n")).map_err(ImageCommandError::Output);
    }
    let now = SystemTime::now();
    let at = |secs: u64| Some(UNIX_EPOCH + Duration::from_secs(secs));
    let mut text = format!(
        "{} image{} in {}\n",
        images.len(),
        if images.len() == 1 { "" } else { "s" },
        escape_line(&root.join("blobs").display().to_string())
    );
    for i in &images {
        let domains = users.get(i.manifest_digest.as_str()).unwrap_or(&none);
        text.push_str(&format!(
            "\n{}\n  digest     {}\n  size       {}\n  pulled     {}\n  last used  {}\n  domains    {}\n",
            escape_line(&i.reference),
            escape_line(i.manifest_digest.as_str()),
            human(i.bytes),
            ago(now, at(i.pulled_at)),
            ago(now, at(i.used_at)),
            if domains.is_empty() {
                "none".to_owned()
            } else {
                domains.iter().map(|d| short(d).to_owned()).collect::<Vec<_>>().join(", ")
            }
        ));
    }
    print_text(&text).map_err(ImageCommandError::Output)
}

fn remove(text: &str, config: Option<&str>) -> Result<(), ImageCommandError> {
    let reference = ImageRef::parse(text)?.to_string();
    let (root, blobs) = open_store(config)?;
    let catalog = StorageCatalog::at(&root);
    let Some(hold) = blobs
        .try_hold_exclusive()
        .map_err(|source| ImageCommandError::BlobStore {
            path: blobs.root().to_owned(),
            source,
        })?
    else {
        return Err(ImageCommandError::StoreBusy {
            path: blobs.root().to_owned(),
        });
    };
    let images = catalog.images()?;
    let Some(image) = images.iter().find(|i| i.reference == reference) else {
        return Err(ImageCommandError::NotFound { reference });
    };
    let users = users_by_digest(&catalog)?;
    if let Some(domains) = users.get(image.manifest_digest.as_str()) {
        return Err(ImageCommandError::InUse {
            reference,
            count: domains.len(),
            plural: if domains.len() == 1 { "" } else { "s" },
            domains: domains
                .iter()
                .map(|d| short(d))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    // What every other named image needs; an unreadable manifest of one
    // of them stops the removal before anything is deleted.
    let mut kept = BTreeSet::new();
    for other in images.iter().filter(|i| i.reference != reference) {
        let blobs_err = |source| ImageCommandError::Blobs {
            reference: other.reference.clone(),
            source: Box::new(source),
        };
        let d = Sha256::parse(other.manifest_digest.as_str())
            .map_err(|e| blobs_err(ImageError::Store(e)))?;
        kept.extend(image_blobs(&blobs, &d).map_err(blobs_err)?);
    }
    let stored = blobs
        .blobs(MAX_BLOBS)
        .map_err(|source| ImageCommandError::BlobStore {
            path: blobs.root().to_owned(),
            source,
        })?;
    catalog.forget_image(&reference)?;
    // The image's blobs, and any a moved tag or an older version left
    // that no named image reaches: nothing else can be reading them under
    // the exclusive hold.
    let mut freed = 0;
    let mut removed = 0;
    for blob in stored.iter().filter(|b| !kept.contains(*b)) {
        let bytes = blobs
            .remove(blob, &hold)
            .map_err(|source| ImageCommandError::BlobStore {
                path: blobs.path(blob),
                source,
            })?;
        if bytes > 0 {
            removed += 1;
            freed += bytes;
        }
    }
    drop(hold);
    outln!(
        "removed {reference}: {removed} blob{} ({}) freed; prepared lowers made from it are reclaimed by `lazaret state gc`",
        if removed == 1 { "" } else { "s" },
        human(freed)
    );
    Ok(())
}

fn pull(text: &str, config: Option<&str>, quiet: bool) -> Result<(), ImageCommandError> {
    let reference = ImageRef::parse(text)?;
    let root = storage_root(config, &ProcessEnvironment)?;
    let obtained = obtain_with_progress(&root, &reference, !quiet && stderr_is_terminal())
        .map_err(|source| ImageCommandError::Pull {
            reference: reference.to_string(),
            source: Box::new(source),
        })?;
    outln!("{reference} {}", obtained.image.manifest_digest);
    Ok(())
}

/// Resolves `reference` and prepares its lower under `root`, showing the
/// progress on stderr when `show` (a terminal that did not ask for quiet).
/// `image pull` and a launch that starts its Domain both go through here.
pub(crate) fn obtain_with_progress(
    root: &Path,
    reference: &ImageRef,
    show: bool,
) -> Result<Obtained, ObtainError> {
    let mut meter = show.then(Meter::default);
    let obtained = obtain_lower(root, reference, &mut |stage| {
        if let Some(m) = meter.as_mut() {
            m.show(&stage);
        }
    });
    if let Some(m) = meter.as_mut() {
        m.finish();
    }
    obtained
}

/// Progress on a terminal: one line per layer, rewritten in place.
#[derive(Debug, Default)]
struct Meter {
    /// `layer i/n digest` of the line being rewritten.
    current: Option<String>,
}

impl Meter {
    fn show(&mut self, stage: &Stage) {
        let p = match stage {
            Stage::Fetch(p) => p,
            Stage::Unpack { layers, bytes } => {
                self.finish();
                eprint_progress(
                    &format!(
                        "unpacking {layers} layer{} ({}) ...",
                        if *layers == 1 { "" } else { "s" },
                        human(*bytes)
                    ),
                    ProgressLine::Open,
                );
                self.current = Some(String::new());
                return;
            }
            Stage::Prepared { cache_hit, micros } => {
                let done = if *cache_hit {
                    "root file system already prepared".to_owned()
                } else {
                    format!("root file system ready in {:.1} s", *micros as f64 / 1e6)
                };
                eprint_progress(&done, ProgressLine::Rewrite);
                self.finish();
                return;
            }
        };
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
