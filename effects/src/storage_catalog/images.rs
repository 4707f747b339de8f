//! The Storage Catalog's named images: which normalised reference resolved
//! to which manifest, how large it is, and when it was pulled and last
//! used. Written by `lazaret image pull` and by every launch that resolves
//! an image; read by `lazaret image ls`; a row is removed by
//! `lazaret image rm`. Each function is one catalog-lock section and one
//! transaction.
use super::artifacts::{bounded_len, decode, encode};
use super::{read_table, tables, CatalogError, Missing, StorageCatalog};
use lazaret_runtime::records::catalog::ImageReferenceRecord;
use redb::ReadableTable;
use std::path::Path;

/// The most named images the catalog holds.
pub const MAX_IMAGES: usize = 4096;

impl StorageCatalog {
    /// Records that `reference` resolved to `manifest_digest` (of `bytes`
    /// bytes) at `now`: its last use is now, and its pull time too unless
    /// it already resolved to the same manifest.
    pub fn record_image(
        &self,
        reference: &str,
        manifest_digest: &lazaret_runtime::records::ids::SourceIdentity,
        bytes: u64,
        now: u64,
    ) -> Result<(), CatalogError> {
        let _span = tracing::debug_span!("record_image", reference).entered();
        let path = self.path.as_path();
        self.write_section(Missing::Create, |txn| {
            let mut table = txn
                .open_table(tables::IMAGES)
                .map_err(CatalogError::redb(path, "open images table"))?;
            let before = match table
                .get(reference)
                .map_err(CatalogError::redb(path, "read image"))?
            {
                Some(row) => Some(decode_image(path, reference, row.value())?),
                None => {
                    bounded_len(&table, path, "image_references", MAX_IMAGES - 1)?;
                    None
                }
            };
            let pulled_at = match &before {
                Some(b) if &b.manifest_digest == manifest_digest => b.pulled_at,
                _ => now,
            };
            let row = ImageReferenceRecord {
                reference: reference.to_owned(),
                manifest_digest: manifest_digest.clone(),
                bytes,
                pulled_at,
                used_at: now,
            };
            let bytes = encode(path, "image reference", &row)?;
            table
                .insert(reference, bytes.as_slice())
                .map_err(CatalogError::redb(path, "write image"))?;
            Ok(((), true))
        })
    }

    /// Every named image, in reference order. A missing catalog holds none.
    pub fn images(&self) -> Result<Vec<ImageReferenceRecord>, CatalogError> {
        let path = self.path.as_path();
        let rows = self.read_section(|txn| {
            let Some(table) = read_table(txn, path, tables::IMAGES, "open images table")? else {
                return Ok(Vec::new());
            };
            bounded_len(&table, path, "image_references", MAX_IMAGES)?;
            let mut rows = Vec::new();
            for entry in table
                .iter()
                .map_err(CatalogError::redb(path, "list images"))?
            {
                let (key, value) = entry.map_err(CatalogError::redb(path, "read image"))?;
                rows.push(decode_image(path, key.value(), value.value())?);
            }
            Ok(rows)
        })?;
        Ok(rows.unwrap_or_default())
    }

    /// Removes `reference`'s row; the row it removed, if there was one.
    pub fn forget_image(
        &self,
        reference: &str,
    ) -> Result<Option<ImageReferenceRecord>, CatalogError> {
        let _span = tracing::debug_span!("forget_image", reference).entered();
        let path = self.path.as_path();
        self.write_section(Missing::Return(None), |txn| {
            let mut table = txn
                .open_table(tables::IMAGES)
                .map_err(CatalogError::redb(path, "open images table"))?;
            let removed = table
                .remove(reference)
                .map_err(CatalogError::redb(path, "remove image"))?
                .map(|row| decode_image(path, reference, row.value()))
                .transpose()?;
            let changed = removed.is_some();
            Ok((removed, changed))
        })
    }
}

/// An image row, checked against its key.
fn decode_image(
    path: &Path,
    key: &str,
    bytes: &[u8],
) -> Result<ImageReferenceRecord, CatalogError> {
    let row: ImageReferenceRecord = decode(path, "image reference", bytes)?;
    if row.reference != key {
        return Err(CatalogError::RowKeyMismatch {
            path: path.to_owned(),
            table: "image_references",
        });
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_runtime::records::ids::SourceIdentity;

    fn digest(c: char) -> SourceIdentity {
        SourceIdentity::new(format!("sha256:{}", c.to_string().repeat(64)))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_image_is_recorded_updated_listed_and_forgotten() -> Result<(), CatalogError> {
        let dir = tempfile::tempdir().map_err(|source| CatalogError::CreateDir {
            path: "tempdir".into(),
            source,
        })?;
        let catalog = StorageCatalog::at(dir.path());
        assert_eq!(catalog.images()?, Vec::new());
        assert_eq!(catalog.forget_image("docker.io/library/x:1")?, None);
        catalog.record_image("docker.io/library/x:1", &digest('a'), 10, 100)?;
        catalog.record_image("ghcr.io/o/y:2", &digest('b'), 20, 110)?;
        // Used again, same manifest: the pull time stays.
        catalog.record_image("docker.io/library/x:1", &digest('a'), 10, 200)?;
        let rows = catalog.images()?;
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].pulled_at, rows[0].used_at), (100, 200));
        // The tag moved: a new pull time.
        catalog.record_image("docker.io/library/x:1", &digest('c'), 12, 300)?;
        let rows = catalog.images()?;
        assert_eq!(rows[0].manifest_digest, digest('c'));
        assert_eq!(
            (rows[0].pulled_at, rows[0].used_at, rows[0].bytes),
            (300, 300, 12)
        );
        let gone = catalog.forget_image("ghcr.io/o/y:2")?;
        assert_eq!(gone.map(|r| r.manifest_digest), Some(digest('b')));
        assert_eq!(catalog.images()?.len(), 1);
        Ok(())
    }
}
