//! A local OCI image layout as an image source (`oci:/abs/path[:tag]`).

use super::store::Sha256;
use super::{ImageError, Source, MAX_DOCUMENT};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

const REF_NAME: &str = "org.opencontainers.image.ref.name";

pub(super) struct LayoutSource {
    path: PathBuf,
    tag: String,
}

impl LayoutSource {
    pub(super) fn new(path: &Path, tag: &str) -> LayoutSource {
        LayoutSource {
            path: path.to_owned(),
            tag: tag.to_owned(),
        }
    }

    fn blob_path(&self, d: &Sha256) -> PathBuf {
        self.path.join("blobs/sha256").join(d.hex())
    }

    fn unreadable(&self, what: &'static str) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
        move |source| ImageError::LayoutUnreadable {
            path: self.path.display().to_string(),
            what,
            source,
        }
    }

    fn read_small(&self, d: &Sha256) -> Result<Vec<u8>, ImageError> {
        let mut bytes = Vec::new();
        File::open(self.blob_path(d))
            .and_then(|f| f.take(MAX_DOCUMENT + 1).read_to_end(&mut bytes))
            .map_err(self.unreadable("blob"))?;
        Ok(bytes)
    }
}

impl Source for LayoutSource {
    fn describe(&self) -> String {
        format!("OCI layout {}", self.path.display())
    }

    fn root(&mut self) -> Result<(Vec<u8>, Sha256), ImageError> {
        std::fs::metadata(self.path.join("oci-layout")).map_err(self.unreadable("oci-layout"))?;
        let index =
            std::fs::read(self.path.join("index.json")).map_err(self.unreadable("index.json"))?;
        let doc: serde_json::Value =
            serde_json::from_slice(&index).map_err(|e| ImageError::BadDocument {
                what: "index.json",
                digest: "-".into(),
                from: self.describe(),
                detail: e.to_string(),
            })?;
        let entries = doc
            .get("manifests")
            .and_then(|m| m.as_array())
            .cloned()
            .unwrap_or_default();
        let tag_of = |e: &serde_json::Value| {
            e.get("annotations")
                .and_then(|a| a.get(REF_NAME))
                .and_then(|t| t.as_str())
                .map(str::to_owned)
        };
        let Some(entry) = entries
            .iter()
            .find(|e| tag_of(e).as_deref() == Some(self.tag.as_str()))
        else {
            return Err(ImageError::TagNotFound {
                path: self.path.display().to_string(),
                tag: self.tag.clone(),
                present: entries
                    .iter()
                    .filter_map(tag_of)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let digest = Sha256::parse(
            entry
                .get("digest")
                .and_then(|d| d.as_str())
                .unwrap_or_default(),
        )?;
        let bytes = self.read_small(&digest)?;
        super::verify("manifest", &self.describe(), &digest, &bytes)?;
        Ok((bytes, digest))
    }

    fn manifest(&mut self, digest: &Sha256) -> Result<Vec<u8>, ImageError> {
        self.read_small(digest)
    }

    fn blob(&mut self, digest: &Sha256, _size: u64) -> Result<Box<dyn Read + '_>, ImageError> {
        let f = File::open(self.blob_path(digest)).map_err(self.unreadable("blob"))?;
        Ok(Box::new(f))
    }
}
