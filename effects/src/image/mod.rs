//! Image references and resolution into Lazaret's blob store (spec 3.6
//! "Prepared lower").
//!
//! [`resolve`] follows an image reference to one verified manifest — through
//! nested indexes, picking this host's platform — and brings the manifest, config and
//! every layer into the [`store::BlobStore`], verifying each digest and size on
//! the way. A local OCI layout and a registry (the OCI distribution API over
//! HTTPS, authenticated from the user's container auth files) are the two
//! sources.

mod auth;
mod layout;
pub mod platform;
pub use lazaret_runtime::image_ref as reference;
mod registry;
pub mod store;
mod transport;

pub use auth::AuthError;
pub use transport::TransportError;

use oci_spec::image::{ImageConfiguration, ImageManifest};
use platform::Platform;
use reference::ImageRef;
use std::io::Read;
use store::{BlobStore, Sha256, StoreError};

/// Manifests, indexes and configs larger than this are refused.
const MAX_DOCUMENT: u64 = 4 << 20;
/// Nested indexes deeper than this are refused.
const MAX_INDEX_DEPTH: usize = 4;

const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const MT_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const LAYER_TYPES: [&str; 4] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
];

/// What [`resolve`] reports while it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The reference resolved to this manifest with `layers` layers of
    /// `bytes` bytes in total.
    Manifest {
        digest: String,
        layers: usize,
        bytes: u64,
    },
    /// Layer `index` (1-based) of `count` starts; `cached` when it is already
    /// in the store.
    Layer {
        index: usize,
        count: usize,
        digest: String,
        size: u64,
        cached: bool,
    },
    /// Bytes of the current layer copied so far.
    Bytes {
        digest: String,
        done: u64,
        size: u64,
    },
}

/// An image resolved to one verified manifest whose blobs are all in the store.
#[derive(Debug, Clone)]
pub struct ResolvedImage {
    /// The reference as given.
    pub reference: ImageRef,
    /// The manifest digest: the source image identity (spec 3.6).
    pub manifest_digest: Sha256,
    /// The manifest's size in bytes.
    pub manifest_size: u64,
    /// The manifest's media type.
    pub manifest_media_type: String,
    /// The manifest.
    pub manifest: ImageManifest,
    /// The image configuration.
    pub config: ImageConfiguration,
}

/// Errors of resolving an image; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The layout's `oci-layout` or `index.json` is missing or unreadable.
    #[error("{path} is not a readable OCI image layout ({what}): {source}")]
    LayoutUnreadable {
        path: String,
        what: &'static str,
        source: std::io::Error,
    },
    /// The layout has no manifest with the wanted tag.
    #[error("OCI layout {path} has no image tagged {tag:?} (tags present: {present})")]
    TagNotFound {
        path: String,
        tag: String,
        present: String,
    },
    /// A JSON document failed to parse.
    #[error("{what} {digest} from {from} is not valid JSON of its kind: {detail}")]
    BadDocument {
        what: &'static str,
        digest: String,
        from: String,
        detail: String,
    },
    /// A document is too large.
    #[error("{what} {digest} from {from} is {size} bytes; documents over {max} bytes are refused")]
    DocumentTooLarge {
        what: &'static str,
        digest: String,
        from: String,
        size: u64,
        max: u64,
    },
    /// An index has no manifest for this host's platform.
    #[error(
        "image index {digest} from {from} has no manifest for this host's platform {wanted} (platforms it has: {platforms})"
    )]
    NoPlatform {
        digest: String,
        from: String,
        wanted: String,
        platforms: String,
    },
    /// Indexes nest too deep.
    #[error("image indexes from {from} nest deeper than {max} levels")]
    TooDeep { from: String, max: usize },
    /// An unsupported media type.
    #[error("{what} {digest} from {from} has unsupported media type {media_type:?}")]
    UnsupportedMediaType {
        what: &'static str,
        digest: String,
        from: String,
        media_type: String,
    },
    /// The image is not for this platform.
    #[error("image {reference} is for {os}/{arch}; this host runs {wanted} images")]
    WrongPlatform {
        reference: String,
        os: String,
        arch: String,
        wanted: String,
    },
    /// The registry could not be reached.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The user's auth files could not be used.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The registry wants credentials and the auth files have none for it.
    #[error("registry {registry} requires authentication and no credentials for it were found (auth files consulted: {consulted}){unusable}; log in with `podman login {registry}` or `docker login {registry}`")]
    AuthRequired {
        registry: String,
        consulted: String,
        /// `; ...` notes on entries that exist but cannot be used.
        unusable: String,
    },
    /// The registry or its token server refused the credentials.
    #[error("registry {registry} refused {with} (HTTP {status}); check the user name and password, and that the account may pull this repository")]
    AuthRejected {
        registry: String,
        status: u16,
        with: String,
    },
    /// A token server that is neither HTTPS nor loopback.
    #[error("registry {registry} names the token server {realm:?}; Lazaret sends credentials only to an https:// token server (or plain HTTP on loopback)")]
    TokenRealm { registry: String, realm: String },
    /// The token server answered with an error status.
    #[error("the token server {realm} of registry {registry} answered HTTP {status}")]
    TokenStatus {
        registry: String,
        realm: String,
        status: u16,
    },
    /// The token server's answer has no usable token.
    #[error("the token server {realm} of registry {registry} answered without a usable `token`")]
    TokenMalformed { registry: String, realm: String },
    /// A response body could not be read in full.
    #[error("cannot read the answer of registry {registry} to {url}: {detail}")]
    Body {
        registry: String,
        url: String,
        detail: String,
    },
    /// The registry answered with an error status.
    #[error("registry {registry} answered {status} for {url}{hint}")]
    RegistryStatus {
        registry: String,
        url: String,
        status: u16,
        hint: &'static str,
    },
    /// The registry's digest header disagrees with the content.
    #[error("registry {registry} sent manifest {actual} for {url} but declared {declared}")]
    DigestHeaderMismatch {
        registry: String,
        url: String,
        declared: String,
        actual: String,
    },
    /// The content does not match the digest it was asked for.
    #[error("{what} from {from} does not match the requested digest {expected} (got {actual})")]
    Mismatch {
        what: &'static str,
        from: String,
        expected: String,
        actual: String,
    },
    /// A blob store step failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where image documents and blobs come from.
trait Source {
    /// For messages: the layout path or registry host.
    fn describe(&self) -> String;
    /// The document the reference names, and its digest.
    fn root(&mut self) -> Result<(Vec<u8>, Sha256), ImageError>;
    /// A manifest or index by digest (verified by the caller).
    fn manifest(&mut self, digest: &Sha256) -> Result<Vec<u8>, ImageError>;
    /// The content stream of a blob of `size` bytes.
    fn blob(&mut self, digest: &Sha256, size: u64) -> Result<Box<dyn Read + '_>, ImageError>;
}

/// Resolves `reference` and brings all its blobs into `store`.
pub fn resolve(
    reference: &ImageRef,
    store: &BlobStore,
    progress: &mut dyn FnMut(Progress),
) -> Result<ResolvedImage, ImageError> {
    let _span = tracing::info_span!("ResolveImage", image = %reference).entered();
    let mut source: Box<dyn Source> = match reference {
        ImageRef::Layout { path, tag } => Box::new(layout::LayoutSource::new(path, tag)),
        ImageRef::Registry {
            host,
            repository,
            reference: tag_or_digest,
        } => Box::new(registry::RegistrySource::new(
            host,
            reference.endpoint().unwrap_or(host),
            repository,
            tag_or_digest,
        )?),
    };
    let from = source.describe();
    let (mut bytes, mut digest) = source.root()?;
    let mut depth = 0;
    let (manifest, media_type) = loop {
        check_size("manifest", &digest, &from, bytes.len() as u64)?;
        let doc: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| bad("manifest", &digest, &from, e))?;
        let mt = doc
            .get("mediaType")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let is_index = mt == MT_OCI_INDEX
            || mt == MT_DOCKER_LIST
            || (mt.is_empty() && doc.get("manifests").is_some());
        if !is_index {
            if !(mt == MT_OCI_MANIFEST || mt == MT_DOCKER_MANIFEST || mt.is_empty()) {
                return Err(ImageError::UnsupportedMediaType {
                    what: "manifest",
                    digest: digest.to_string(),
                    from,
                    media_type: mt,
                });
            }
            let m = ImageManifest::from_reader(bytes.as_slice())
                .map_err(|e| bad("manifest", &digest, &from, e))?;
            break (
                m,
                if mt.is_empty() {
                    MT_OCI_MANIFEST.to_owned()
                } else {
                    mt
                },
            );
        }
        depth += 1;
        if depth > MAX_INDEX_DEPTH {
            return Err(ImageError::TooDeep {
                from,
                max: MAX_INDEX_DEPTH,
            });
        }
        let next = pick_platform(&doc, &digest, &from)?;
        bytes = source.manifest(&next)?;
        verify("manifest", &from, &next, &bytes)?;
        digest = next;
    };
    let manifest_size = bytes.len() as u64;
    store.put(
        &digest,
        manifest_size,
        &from,
        &mut bytes.as_slice(),
        &mut |_| {},
    )?;

    let config_desc = manifest.config();
    let config_digest = Sha256::parse(config_desc.digest().as_ref())?;
    check_size("config", &config_digest, &from, config_desc.size())?;
    if !store.contains(&config_digest, config_desc.size()) {
        let mut r = source.blob(&config_digest, config_desc.size())?;
        store.put(
            &config_digest,
            config_desc.size(),
            &from,
            &mut r,
            &mut |_| {},
        )?;
    }
    let config_bytes = store.read_verified(&config_digest)?;
    let config = ImageConfiguration::from_reader(config_bytes.as_slice())
        .map_err(|e| bad("config", &config_digest, &from, e))?;
    let host = Platform::host();
    if !host.accepts(
        &config.os().to_string(),
        &config.architecture().to_string(),
        config.variant().as_deref(),
    ) {
        return Err(ImageError::WrongPlatform {
            reference: reference.to_string(),
            os: config.os().to_string(),
            arch: config.architecture().to_string(),
            wanted: host.to_string(),
        });
    }

    let layers = manifest.layers();
    progress(Progress::Manifest {
        digest: digest.to_string(),
        layers: layers.len(),
        bytes: layers.iter().map(|l| l.size()).sum(),
    });
    for (i, layer) in layers.iter().enumerate() {
        let d = Sha256::parse(layer.digest().as_ref())?;
        let mt = layer.media_type().to_string();
        if !LAYER_TYPES.contains(&mt.as_str()) {
            return Err(ImageError::UnsupportedMediaType {
                what: "layer",
                digest: d.to_string(),
                from,
                media_type: mt,
            });
        }
        let size = layer.size();
        let cached = store.contains(&d, size);
        progress(Progress::Layer {
            index: i + 1,
            count: layers.len(),
            digest: d.to_string(),
            size,
            cached,
        });
        if !cached {
            let _span = tracing::info_span!("FetchLayer", digest = %d, size).entered();
            let mut r = source.blob(&d, size)?;
            let ds = d.to_string();
            store.put(&d, size, &from, &mut r, &mut |done| {
                progress(Progress::Bytes {
                    digest: ds.clone(),
                    done,
                    size,
                })
            })?;
        }
    }
    Ok(ResolvedImage {
        reference: reference.clone(),
        manifest_digest: digest,
        manifest_size,
        manifest_media_type: media_type,
        manifest,
        config,
    })
}

impl ResolvedImage {
    /// Manifest, config and layer bytes.
    pub fn bytes(&self) -> u64 {
        self.manifest_size
            + self.manifest.config().size()
            + self.manifest.layers().iter().map(|l| l.size()).sum::<u64>()
    }
}

/// The blobs of the stored manifest `manifest`: itself, its config and its
/// layers. A manifest no longer in the store is only itself.
pub fn image_blobs(store: &BlobStore, manifest: &Sha256) -> Result<Vec<Sha256>, ImageError> {
    let mut blobs = vec![manifest.clone()];
    if !store.path(manifest).is_file() {
        return Ok(blobs);
    }
    let bytes = store.read_verified(manifest)?;
    let from = store.root().display().to_string();
    let m = ImageManifest::from_reader(bytes.as_slice())
        .map_err(|e| bad("manifest", manifest, &from, e))?;
    blobs.push(Sha256::parse(m.config().digest().as_ref())?);
    for l in m.layers() {
        blobs.push(Sha256::parse(l.digest().as_ref())?);
    }
    Ok(blobs)
}

fn bad(what: &'static str, digest: &Sha256, from: &str, e: impl std::fmt::Display) -> ImageError {
    ImageError::BadDocument {
        what,
        digest: digest.to_string(),
        from: from.to_owned(),
        detail: e.to_string(),
    }
}

fn check_size(
    what: &'static str,
    digest: &Sha256,
    from: &str,
    size: u64,
) -> Result<(), ImageError> {
    if size > MAX_DOCUMENT {
        return Err(ImageError::DocumentTooLarge {
            what,
            digest: digest.to_string(),
            from: from.to_owned(),
            size,
            max: MAX_DOCUMENT,
        });
    }
    Ok(())
}

fn verify(
    what: &'static str,
    from: &str,
    expected: &Sha256,
    bytes: &[u8],
) -> Result<(), ImageError> {
    let actual = Sha256::of(bytes);
    if &actual != expected {
        return Err(ImageError::Mismatch {
            what,
            from: from.to_owned(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// The entry of an index document for this host's platform.
fn pick_platform(
    doc: &serde_json::Value,
    digest: &Sha256,
    from: &str,
) -> Result<Sha256, ImageError> {
    let host = Platform::host();
    let entries = doc
        .get("manifests")
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    let platform = |e: &serde_json::Value, k: &str| {
        e.get("platform")
            .and_then(|p| p.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    // An entry without a platform is taken only when it is the only entry.
    let chosen = entries
        .iter()
        .find(|e| {
            host.accepts(
                platform(e, "os").as_deref().unwrap_or_default(),
                platform(e, "architecture").as_deref().unwrap_or_default(),
                platform(e, "variant").as_deref(),
            )
        })
        .or_else(|| {
            (entries.len() == 1 && entries[0].get("platform").is_none()).then(|| &entries[0])
        });
    match chosen
        .and_then(|e| e.get("digest"))
        .and_then(|d| d.as_str())
    {
        Some(d) => Ok(Sha256::parse(d)?),
        None => Err(ImageError::NoPlatform {
            digest: digest.to_string(),
            from: from.to_owned(),
            wanted: host.to_string(),
            platforms: entries
                .iter()
                .map(|e| {
                    let mut p = format!(
                        "{}/{}",
                        platform(e, "os").unwrap_or_default(),
                        platform(e, "architecture").unwrap_or_default()
                    );
                    if let Some(v) = platform(e, "variant") {
                        p.push('/');
                        p.push_str(&v);
                    }
                    p
                })
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}
