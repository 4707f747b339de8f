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

/// Writes `identity` at `path`, readable by its owner only: a new file
/// beside it, synced, then renamed over any file a dead coordinator left
/// (the caller holds the Domain lock), so a reader sees either no file, the
/// old one or the whole new one.
pub fn publish(
    path: &Path,
    identity: &ProtocolPublicationIdentity,
) -> Result<(), PublicationError> {
    let bytes = identity
        .encode()
        .map_err(|source| PublicationError::Codec {
            path: path.to_owned(),
            source,
        })?;
    let staged = path.with_extension("new");
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| PublicationError::Io { path, source }
    };
    match std::fs::remove_file(&staged) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&staged)(e)),
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staged)
        .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_data()))
        .map_err(io_err(&staged))
        .and_then(|()| std::fs::rename(&staged, path).map_err(io_err(path)));
    if written.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    written
}

/// Publication that is withdrawn when dropped: the early exits of a
/// coordinator leave no socket or identity file behind. Dropped before the
/// Domain lock is released, so it never removes a successor's files.
#[derive(Debug)]
pub struct Publication {
    socket: PathBuf,
    identity: PathBuf,
}

impl Publication {
    /// Writes the identity file for `socket` (which the caller binds next).
    pub fn publish(
        socket: PathBuf,
        identity_path: PathBuf,
        identity: &ProtocolPublicationIdentity,
    ) -> Result<Self, PublicationError> {
        publish(&identity_path, identity)?;
        Ok(Self {
            socket,
            identity: identity_path,
        })
    }

    /// Withdraws it now (socket, then identity file).
    pub fn withdraw(&self) {
        withdraw(&self.socket, &self.identity);
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.withdraw();
    }
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
