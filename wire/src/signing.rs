//! Signature inputs, signatures and IDs of the v1 protocol records
//! (schemas.md "Protocol cryptography"): every signature input is the ASCII
//! `lazaret/v1/` prefix plus the lower-kebab record name, the unsigned
//! 64-bit big-endian payload length and the exact payload bytes; an ID is
//! SHA-256 over the minimally encoded claims.
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::codec::CodecError;
use crate::records::{Digest, ProtocolRecord, PublicKey, Signature};

/// The prefix of every signature input.
pub const SIGNATURE_PREFIX: &[u8] = b"lazaret/v1/";

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

/// The exact bytes signed for record `name` carrying `payload`.
pub fn signature_input(name: &str, payload: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(SIGNATURE_PREFIX.len() + name.len() + 8 + payload.len());
    input.extend_from_slice(SIGNATURE_PREFIX);
    input.extend_from_slice(name.as_bytes());
    // usize -> u64 is lossless on every supported target.
    input.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    input.extend_from_slice(payload);
    input
}

/// The claims' ID (SHA-256 of their encoding) and `key`'s signature over
/// their signature input.
pub fn sign<T: ProtocolRecord>(
    key: &SigningKey,
    claims: &T,
) -> Result<(Digest, Signature), CodecError> {
    let payload = claims.encode()?;
    let signature = sign_payload(key, T::NAME, &payload);
    Ok((sha256(&payload), signature))
}

/// Why a signature does not verify.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("cannot encode the {record} claims: {source}")]
    Claims {
        record: &'static str,
        source: CodecError,
    },
    #[error("the {record}'s signing key is not a valid Ed25519 public key")]
    Key { record: &'static str },
    #[error("the {record}'s signature does not verify")]
    Forged { record: &'static str },
}

/// Verifies `signature` over `claims` with `public` (strict Ed25519: no
/// small-order keys, canonical encodings) and returns the claims' ID.
pub fn verify<T: ProtocolRecord>(
    public: &PublicKey,
    claims: &T,
    signature: &Signature,
) -> Result<Digest, SignatureError> {
    let record = T::NAME;
    let payload = claims
        .encode()
        .map_err(|source| SignatureError::Claims { record, source })?;
    verify_payload(public, record, &payload, signature)?;
    Ok(sha256(&payload))
}

/// Verifies `signature` over the exact `payload` bytes of record `record`
/// with `public` (strict Ed25519), before anything decodes them (spec 3.8:
/// "verifies the signature over those owned bytes before parsing").
pub fn verify_payload(
    public: &PublicKey,
    record: &'static str,
    payload: &[u8],
    signature: &Signature,
) -> Result<(), SignatureError> {
    let key = VerifyingKey::from_bytes(public).map_err(|_| SignatureError::Key { record })?;
    let signature = ed25519_dalek::Signature::from_bytes(&signature.0);
    key.verify_strict(&signature_input(record, payload), &signature)
        .map_err(|_| SignatureError::Forged { record })
}

/// `key`'s signature over the exact `payload` bytes of record `record`.
pub fn sign_payload(key: &SigningKey, record: &'static str, payload: &[u8]) -> Signature {
    Signature(key.sign(&signature_input(record, payload)).to_bytes())
}
