//! Length-prefixed postcard frames: a 4-byte big-endian body length, then
//! the postcard body. Bodies are bounded so a peer cannot make the reader
//! allocate without limit.
use serde::{de::DeserializeOwned, Serialize};

/// The largest frame body either side accepts.
pub const MAX_FRAME: usize = 1 << 20;
/// The length prefix.
pub const PREFIX: usize = 4;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("a {what} frame of {len} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge { what: &'static str, len: usize },
    #[error("cannot encode a {what} frame: {detail}")]
    Encode { what: &'static str, detail: String },
    #[error("cannot decode a {what} frame: {detail}")]
    Decode { what: &'static str, detail: String },
}

/// Encodes one frame (prefix and body).
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, FrameError> {
    let body = postcard::to_allocvec(value).map_err(|e| FrameError::Encode {
        what,
        detail: e.to_string(),
    })?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            what,
            len: body.len(),
        });
    }
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge {
        what,
        len: body.len(),
    })?;
    let mut out = Vec::with_capacity(PREFIX + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The body length a prefix announces, refused above [`MAX_FRAME`].
pub fn body_len(what: &'static str, prefix: [u8; PREFIX]) -> Result<usize, FrameError> {
    let len = usize::try_from(u32::from_be_bytes(prefix)).unwrap_or(usize::MAX);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge { what, len });
    }
    Ok(len)
}

/// Decodes one body; trailing bytes are refused.
pub fn decode<T: DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T, FrameError> {
    let (value, rest) = postcard::take_from_bytes(body).map_err(|e| FrameError::Decode {
        what,
        detail: e.to_string(),
    })?;
    if !rest.is_empty() {
        return Err(FrameError::Decode {
            what,
            detail: format!("{} trailing bytes", rest.len()),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::control::ControlRequest;
    use crate::records::ids::SessionId;
    use crate::terminal::protocol::NonInteractiveSessionRequest;

    fn execute() -> ControlRequest {
        let argv = vec!["sh".into(), "-c".into(), "exit 7".into()];
        match NonInteractiveSessionRequest::new(SessionId([5; 16]), argv) {
            Ok(request) => ControlRequest::Execute(request),
            Err(e) => unreachable!("a valid argv: {e}"),
        }
    }

    #[test]
    fn a_frame_round_trips_and_announces_its_body_length() -> Result<(), FrameError> {
        let request = execute();
        let bytes = encode("execute", &request)?;
        let mut prefix = [0; PREFIX];
        prefix.copy_from_slice(&bytes[..PREFIX]);
        assert_eq!(body_len("execute", prefix)?, bytes.len() - PREFIX);
        assert_eq!(
            decode::<ControlRequest>("execute", &bytes[PREFIX..])?,
            request
        );
        Ok(())
    }

    #[test]
    fn oversized_prefixes_and_trailing_bytes_are_refused() -> Result<(), FrameError> {
        let too_big = u32::try_from(MAX_FRAME + 1)
            .unwrap_or(u32::MAX)
            .to_be_bytes();
        assert!(matches!(
            body_len("x", too_big),
            Err(FrameError::TooLarge { .. })
        ));
        let mut bytes = encode("x", &execute())?;
        bytes.push(0);
        assert!(matches!(
            decode::<ControlRequest>("x", &bytes[PREFIX..]),
            Err(FrameError::Decode { .. })
        ));
        Ok(())
    }
}
