//! Postcard row codec shared by every durable record.
use serde::{de::DeserializeOwned, Serialize};

/// A record could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode {record}: {source}")]
    Encode {
        record: &'static str,
        source: postcard::Error,
    },
    #[error("cannot decode {record}: {source}")]
    Decode {
        record: &'static str,
        source: postcard::Error,
    },
    #[error("cannot decode {record}: {trailing} trailing bytes after the record")]
    Trailing {
        record: &'static str,
        trailing: usize,
    },
}

/// Encodes `value` as postcard bytes.
pub fn encode<T: Serialize>(record: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_allocvec(value).map_err(|source| CodecError::Encode { record, source })
}

/// Decodes exactly one postcard record; trailing bytes are refused.
pub fn decode<T: DeserializeOwned>(record: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) =
        postcard::take_from_bytes(bytes).map_err(|source| CodecError::Decode { record, source })?;
    if !rest.is_empty() {
        return Err(CodecError::Trailing {
            record,
            trailing: rest.len(),
        });
    }
    Ok(value)
}
