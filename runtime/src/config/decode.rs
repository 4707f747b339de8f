//! Strict decoding of a configuration source (spec 3.2: "recursive strict TOML
//! decoding and v1 dispatch"). The TOML parser refuses duplicate keys and
//! duplicate or redefined tables; `schema` is dispatched before the closed v1
//! shape is decoded; serde_path_to_error supplies the key path of every shape
//! error.
use super::document::RawDocument;
use super::error::{describe, printable, ConfigError, KeyPath};
use super::profile::TrustedHostConfigV1;

/// The trusted-host configuration dispatch identifier (schemas.md).
pub const SCHEMA_ID: &str = "lazaret-trusted-host-config-v1";

/// The largest accepted configuration source (spec 3.2).
pub const SOURCE_SIZE_MAX_BYTES: u64 = 1_048_576;

/// Decodes and structurally validates a whole v1 document: every profile is
/// decoded and its grammar checked; nothing is resolved.
pub fn decode_document(bytes: &[u8]) -> Result<TrustedHostConfigV1, ConfigError> {
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > SOURCE_SIZE_MAX_BYTES {
        return Err(ConfigError::TooLarge {
            size,
            max: SOURCE_SIZE_MAX_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let table: toml::Table = toml::from_str(text).map_err(|e| syntax_error(text, &e))?;
    dispatch_schema(&table)?;
    let raw: RawDocument =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            ConfigError::Decode {
                key: KeyPath::from_serde(e.path()),
                message: printable(e.inner().message()),
            }
        })?;
    TrustedHostConfigV1::from_raw(raw)
}

fn dispatch_schema(table: &toml::Table) -> Result<(), ConfigError> {
    match table.get("schema") {
        None => Err(ConfigError::MissingSchema {
            expected: SCHEMA_ID,
        }),
        Some(toml::Value::String(s)) if s == SCHEMA_ID => Ok(()),
        Some(toml::Value::String(s)) => Err(ConfigError::WrongSchema {
            found: describe(s),
            expected: SCHEMA_ID,
        }),
        Some(other) => Err(ConfigError::WrongSchema {
            found: format!("a {}", other.type_str()),
            expected: SCHEMA_ID,
        }),
    }
}

fn syntax_error(text: &str, error: &toml::de::Error) -> ConfigError {
    let message = match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!(
                "line {line}, column {column}: {}",
                printable(error.message())
            )
        }
        None => printable(error.message()),
    };
    ConfigError::Syntax { message }
}
