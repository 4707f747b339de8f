//! Blocking frame I/O over a byte stream (unix socket or socketpair).
use lazaret_runtime::coordinator::frame::{self, FrameError, PREFIX};
use serde::{de::DeserializeOwned, Serialize};
use std::io::{self, Read, Write};

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the peer closed the {what} channel")]
    Closed { what: &'static str },
    #[error("{what} channel I/O failed: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("a {what} frame of {len} bytes exceeds its {limit}-byte limit")]
    Oversized {
        what: &'static str,
        len: usize,
        limit: usize,
    },
}

/// Writes one frame.
pub fn send<T: Serialize>(
    out: &mut impl Write,
    what: &'static str,
    value: &T,
) -> Result<(), ChannelError> {
    let bytes = frame::encode(what, value)?;
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|source| ChannelError::Io { what, source })
}

/// Reads one frame; a clean EOF before the prefix is [`ChannelError::Closed`].
pub fn receive<T: DeserializeOwned>(
    input: &mut impl Read,
    what: &'static str,
) -> Result<T, ChannelError> {
    receive_within(input, what, PREFIX + frame::MAX_FRAME)
}

/// [`receive`] of a frame of at most `limit` bytes, its prefix included;
/// a longer one is refused before its body is read.
pub fn receive_within<T: DeserializeOwned>(
    input: &mut impl Read,
    what: &'static str,
    limit: usize,
) -> Result<T, ChannelError> {
    let body = receive_body(input, what, limit)?;
    Ok(frame::decode(what, &body)?)
}

/// One frame's body, undecoded, at most `limit` bytes with its prefix; a
/// longer one is refused before its body is read.
pub fn receive_body(
    input: &mut impl Read,
    what: &'static str,
    limit: usize,
) -> Result<Vec<u8>, ChannelError> {
    let mut prefix = [0u8; PREFIX];
    let mut got = 0;
    while got < PREFIX {
        match input.read(&mut prefix[got..]) {
            Ok(0) if got == 0 => return Err(ChannelError::Closed { what }),
            Ok(0) => {
                return Err(ChannelError::Io {
                    what,
                    source: io::ErrorKind::UnexpectedEof.into(),
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ChannelError::Io { what, source }),
        }
    }
    let len = frame::body_len(what, prefix)?;
    if PREFIX + len > limit {
        return Err(ChannelError::Oversized {
            what,
            len: PREFIX + len,
            limit,
        });
    }
    let mut body = vec![0u8; len];
    input
        .read_exact(&mut body)
        .map_err(|source| ChannelError::Io { what, source })?;
    Ok(body)
}
