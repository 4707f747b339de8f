//! Identifiers and validated scalar values carried by durable rows.
use serde::{Deserialize, Serialize};
use std::fmt;

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    for byte in bytes {
        write!(f, "{byte:02x}")?;
    }
    Ok(())
}

macro_rules! byte_id {
    ($(#[$doc:meta])* $name:ident, $len:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub [u8; $len]);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                write_hex(f, &self.0)?;
                write!(f, ")")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(f, &self.0)
            }
        }
    };
}

byte_id!(
    /// DomainIdV1: SHA-256 over the profile and canonical workspace (schemas.md).
    DomainId, 32
);
byte_id!(
    /// ConfigurationFingerprintV1 (schemas.md "Domain and configuration digests").
    ConfigurationFingerprint, 32
);
byte_id!(
    /// A SHA-256 digest (derived policy, bundle, readiness fingerprint).
    Sha256Digest, 32
);
byte_id!(
    /// Prepared-artifact ID (spec glossary): unique among prepared lowers.
    PreparedArtifactId, 32
);
byte_id!(
    /// Generation-scoped Session Coordinator ID (runtime-unique, 128 random bits).
    CoordinatorId, 16
);
byte_id!(
    /// Network Sidecar ID of one generation (runtime-unique, 128 random bits).
    NetworkSidecarId, 16
);
byte_id!(
    /// Agent Sandbox ID of one generation (runtime-unique, 128 random bits).
    SandboxId, 16
);
byte_id!(
    /// Session ID: cryptographically random, 128 bits.
    SessionId, 16
);
byte_id!(
    /// Client CLI ID (runtime-unique, 128 random bits).
    CliId, 16
);
byte_id!(
    /// Session Anchor ID: digest of the anchor public key.
    SessionAnchorId, 32
);
byte_id!(
    /// Escalation Request ID (spec glossary): cryptographically random, 128
    /// bits; correlates one host escalation request with its results.
    EscalationRequestId, 16
);

/// Durable generation key: generations of one Domain are numbered upward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GenerationId(pub u64);

impl fmt::Display for GenerationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A value does not satisfy its record type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("{kind} must be 1..={max} bytes, got {len}")]
    Length {
        kind: &'static str,
        max: usize,
        len: usize,
    },
    #[error("{kind} contains the byte {byte:#04x} at offset {offset}; expected {expected}")]
    Byte {
        kind: &'static str,
        byte: u8,
        offset: usize,
        expected: &'static str,
    },
}

fn check_len(kind: &'static str, len: usize, max: usize) -> Result<(), ValueError> {
    if len == 0 || len > max {
        return Err(ValueError::Length { kind, max, len });
    }
    Ok(())
}

fn check_bytes(
    kind: &'static str,
    bytes: &[u8],
    allowed: impl Fn(u8) -> bool,
    expected: &'static str,
) -> Result<(), ValueError> {
    match bytes.iter().position(|b| !allowed(*b)) {
        Some(offset) => Err(ValueError::Byte {
            kind,
            byte: bytes[offset],
            offset,
            expected,
        }),
        None => Ok(()),
    }
}

/// A value of the application protocol model's vocabulary (for example a
/// `durable_decision` or `session_phase`). The model owns the vocabulary
/// (schemas.md "Domain Store"); the store records the TLA+ value name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelValue(String);

impl ModelValue {
    pub const MAX_LEN: usize = 64;

    pub fn new(value: impl Into<String>) -> Result<Self, ValueError> {
        let value = value.into();
        check_len("model value", value.len(), Self::MAX_LEN)?;
        check_bytes(
            "model value",
            value.as_bytes(),
            |b| b.is_ascii_alphanumeric() || b == b'_',
            "an ASCII letter, digit or '_'",
        )?;
        Ok(Self(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ModelValue {
    type Error = ValueError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<ModelValue> for String {
    fn from(value: ModelValue) -> Self {
        value.0
    }
}

impl fmt::Display for ModelValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An absolute host path as raw Linux pathname bytes (a lookup hint, never an
/// ownership proof: spec 3.6).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct HostPath(Vec<u8>);

impl HostPath {
    pub const MAX_LEN: usize = 4096;

    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ValueError> {
        let bytes = bytes.into();
        check_len("host path", bytes.len(), Self::MAX_LEN)?;
        if bytes[0] != b'/' {
            return Err(ValueError::Byte {
                kind: "host path",
                byte: bytes[0],
                offset: 0,
                expected: "'/' (an absolute path)",
            });
        }
        check_bytes("host path", &bytes, |b| b != 0, "a non-NUL byte")?;
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl TryFrom<Vec<u8>> for HostPath {
    type Error = ValueError;
    fn try_from(value: Vec<u8>) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<HostPath> for Vec<u8> {
    fn from(value: HostPath) -> Self {
        value.0
    }
}

impl fmt::Debug for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostPath({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

macro_rules! token_string {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr, $allowed:expr, $expected:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn new(value: impl Into<String>) -> Result<Self, ValueError> {
                let value = value.into();
                check_len($kind, value.len(), $max)?;
                check_bytes($kind, value.as_bytes(), $allowed, $expected)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = ValueError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

token_string!(
    /// A runsc container ID.
    ContainerId,
    "container id",
    128,
    |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.',
    "an ASCII letter, digit, '-', '_' or '.'"
);
token_string!(
    /// Source image identity of a prepared lower (for example a manifest digest).
    SourceIdentity,
    "source identity",
    512,
    |b: u8| b.is_ascii_graphic(),
    "a printable ASCII character"
);
token_string!(
    /// A profile name as stored with its Domain.
    ProfileName,
    "profile name",
    256,
    |b: u8| b.is_ascii_graphic(),
    "a printable ASCII character"
);
