//! Errors of the generator: every one names `file:line:col`.

use std::fmt;

/// A 1-based source position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Why a model could not be turned into Rust.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// The text is not TLA+ the parser understands.
    #[error("{file}:{pos}: syntax error: {message}")]
    Syntax {
        file: String,
        pos: Pos,
        message: String,
    },
    /// Ordinary TLA+ outside the state-table dialect.
    #[error("{file}:{pos}: unsupported construct: {construct}")]
    Unsupported {
        file: String,
        pos: Pos,
        construct: String,
    },
    /// Dialect TLA+ whose meaning is inconsistent (unknown name, type clash, ...).
    #[error("{file}:{pos}: {message}")]
    Semantic {
        file: String,
        pos: Pos,
        message: String,
    },
    /// Reading a model or configuration file failed.
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing a generated file failed.
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The emitter produced text that is not valid Rust (a generator bug).
    #[error("generated Rust for {file} does not parse: {message}")]
    Emit { file: String, message: String },
}

impl CodegenError {
    pub(crate) fn syntax(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Self::Syntax {
            file: file.to_string(),
            pos,
            message: message.into(),
        }
    }

    pub(crate) fn unsupported(file: &str, pos: Pos, construct: impl Into<String>) -> Self {
        Self::Unsupported {
            file: file.to_string(),
            pos,
            construct: construct.into(),
        }
    }

    pub(crate) fn semantic(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        Self::Semantic {
            file: file.to_string(),
            pos,
            message: message.into(),
        }
    }
}
