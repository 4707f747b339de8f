//! The coordinator's publication identity file (spec 3.3 "Protocol
//! cryptography refinement"): the v1 `ProtocolPublicationIdentity` record
//! in the validated host-private Domain runtime directory, which pins the
//! generation's TLS CA, Trust Manifest and coordinator TLS leaf for every
//! Client CLI. It is written before the control socket is bound and
//! withdrawn with it, before the generation's keys are dropped.
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::protocol::records::{ProtocolPublicationIdentity, ProtocolRecord};
use lazaret_runtime::records::codec::CodecError;

/// The largest publication file a client reads (a CA certificate and a
/// generation identity need well under this).
const PUBLICATION_LIMIT: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PublicationError {
    #[error("the publication identity {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the publication identity {path} is larger than {PUBLICATION_LIMIT} bytes")]
    TooLarge { path: PathBuf },
    #[error("the publication identity {path}: {source}")]
    Codec { path: PathBuf, source: CodecError },
}

impl PublicationError {
    /// The file is not there (no coordinator serves, or it is stopping).
    pub fn is_absent(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Writes `identity` at `path` as a new file readable by its owner only
/// (any file left there by a dead coordinator is removed first; the caller
/// holds the Domain lock).
pub fn publish(
    path: &Path,
    identity: &ProtocolPublicationIdentity,
) -> Result<(), PublicationError> {
    let io_err = |source| PublicationError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = identity
        .encode()
        .map_err(|source| PublicationError::Codec {
            path: path.to_owned(),
            source,
        })?;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_data()))
        .map_err(io_err)
}

/// Withdraws publication: the socket first (nobody new connects), then the
/// identity file.
pub fn withdraw(socket: &Path, publication: &Path) {
    for path in [socket, publication] {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot withdraw publication")
            }
        }
    }
}

/// The publication identity a Client CLI reads before it connects.
pub fn read(path: &Path) -> Result<ProtocolPublicationIdentity, PublicationError> {
    use std::io::Read;
    let io_err = |source| PublicationError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let mut bytes = Vec::new();
    file.take(PUBLICATION_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > PUBLICATION_LIMIT {
        return Err(PublicationError::TooLarge {
            path: path.to_owned(),
        });
    }
    ProtocolPublicationIdentity::decode(&bytes).map_err(|source| PublicationError::Codec {
        path: path.to_owned(),
        source,
    })
}
