//! Refusals of configuration decoding and selection. Every variant names the
//! TOML key path it concerns and what was expected (DX-5); the
//! caller adds the source file label.
use std::fmt;

/// A TOML key path such as `profiles.dev.volumes[1].host`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct KeyPath(String);

impl KeyPath {
    /// The document root.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// The path serde_path_to_error recorded, with non-bare keys quoted.
    pub(crate) fn from_serde(path: &serde_path_to_error::Path) -> Self {
        use serde_path_to_error::Segment;
        path.iter()
            .fold(Self::root(), |acc, segment| match segment {
                Segment::Seq { index } => acc.index(*index),
                Segment::Map { key } => acc.key(key),
                Segment::Enum { variant } => acc.key(variant),
                Segment::Unknown => acc.key("?"),
            })
    }

    /// A label for something that is not a document key, such as a protected
    /// sandbox destination.
    pub fn label(text: String) -> Self {
        Self(text)
    }

    /// This path extended by a table key; keys that are not bare TOML keys
    /// are quoted.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        let bare = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let segment = if bare {
            key.to_owned()
        } else {
            format!("{key:?}")
        };
        if self.0.is_empty() {
            Self(segment)
        } else {
            Self(format!("{}.{segment}", self.0))
        }
    }

    /// This path extended by an array index.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The textual key path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(document root)")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// Why a configuration document or its selected profile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the source is {size} bytes; expected at most {max} bytes")]
    TooLarge { size: u64, max: u64 },
    #[error("byte {offset} is not valid UTF-8; expected a UTF-8 TOML document")]
    NotUtf8 { offset: usize },
    #[error("TOML syntax: {message}")]
    Syntax { message: String },
    #[error("key `schema` is missing; expected schema = \"{expected}\"")]
    MissingSchema { expected: &'static str },
    #[error("key `schema` is {found}; expected \"{expected}\"")]
    WrongSchema {
        found: String,
        expected: &'static str,
    },
    #[error("key `{key}`: {message}")]
    Decode { key: KeyPath, message: String },
    #[error("key `{key}`: {source}")]
    ImageReference {
        key: KeyPath,
        source: crate::image_ref::ReferenceError,
    },
    #[error("key `{key}`: found {found}; expected {expected}")]
    Invalid {
        key: KeyPath,
        found: String,
        expected: &'static str,
    },
    #[error("key `{key}` conflicts with `{other}`: {problem}")]
    Conflict {
        key: KeyPath,
        other: KeyPath,
        problem: String,
    },
    #[error(
        "profile {name:?} is not defined; expected one of the tables under `profiles`: {available}"
    )]
    UnknownProfile { name: String, available: String },
    #[error("key `{key}` references host variable {variable}: {problem}; expected a set, UTF-8, NUL-free value")]
    Environment {
        key: KeyPath,
        variable: String,
        problem: &'static str,
    },
    #[error("host environment {variable}: {problem}; expected {expected}")]
    HostInput {
        variable: &'static str,
        problem: String,
        expected: &'static str,
    },
    #[error("key `{key}`: the encoding of {what} exceeds u32 framing; expected a shorter value")]
    Framing { key: KeyPath, what: &'static str },
}

impl ConfigError {
    /// The key path the refusal concerns, when it concerns one key.
    pub fn key(&self) -> Option<&KeyPath> {
        match self {
            Self::Decode { key, .. }
            | Self::Invalid { key, .. }
            | Self::ImageReference { key, .. }
            | Self::Conflict { key, .. }
            | Self::Environment { key, .. }
            | Self::Framing { key, .. } => Some(key),
            Self::TooLarge { .. }
            | Self::NotUtf8 { .. }
            | Self::Syntax { .. }
            | Self::MissingSchema { .. }
            | Self::WrongSchema { .. }
            | Self::UnknownProfile { .. }
            | Self::HostInput { .. } => None,
        }
    }

    pub(crate) fn invalid(key: &KeyPath, found: &str, expected: &'static str) -> Self {
        Self::Invalid {
            key: key.clone(),
            found: describe(found),
            expected,
        }
    }
}

/// A short, printable rendering of an offending value.
pub(crate) fn describe(value: &str) -> String {
    const SHOWN_CHARS_MAX: usize = 80;
    let shown: String = value.chars().take(SHOWN_CHARS_MAX).collect();
    if shown.len() < value.len() {
        format!("{shown:?}…")
    } else {
        format!("{shown:?}")
    }
}

/// `text` with every control character escaped, so a refusal never carries
/// a terminal escape sequence or line break out of the source (serde and the
/// TOML parser quote offending keys and values raw).
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .fold(String::with_capacity(text.len()), |mut out, c| {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
            out
        })
}
