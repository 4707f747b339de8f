//! The closed v1 TOML shape as serde structs (schemas.md "Trusted host
//! configuration" table). Every struct denies unknown fields; no field has an
//! alias and nothing is flattened, so no parser default can make an unknown
//! field meaningful. Every nested table is read through [`Table`], which
//! refuses serde's positional (sequence) form of a struct, and enumeration
//! values are accepted only as strings, never in serde's tagged-table form
//! (spec 3.2: no permissive form may make a field meaningful). Values here are
//! still unvalidated strings; `profile.rs` turns them into typed values.
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// A value that must be written as a TOML table. serde's derived struct
/// decoding also accepts a sequence whose elements fill the fields in
/// declaration order (`escalation = [true]`); this wrapper offers the inner
/// struct nothing but a map, so every field is named.
#[derive(Debug, Default)]
pub(crate) struct Table<T>(T);

impl<T> Deref for Table<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TableVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for TableVisitor<T> {
            type Value = Table<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TOML table")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Table<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Table)
            }
        }
        deserializer.deserialize_map(TableVisitor(PhantomData))
    }
}

/// Decodes an enumeration written as one of `names`; any other TOML type,
/// including a tagged table, is an invalid type.
fn string_enum<'de, D: Deserializer<'de>, T: Copy>(
    deserializer: D,
    names: &'static [&'static str],
    values: &'static [T],
) -> Result<T, D::Error> {
    struct NameVisitor<T: 'static> {
        names: &'static [&'static str],
        values: &'static [T],
    }
    impl<T: Copy> Visitor<'_> for NameVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("one of ")?;
            for (i, name) in self.names.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "`{name}`")?;
            }
            Ok(())
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            self.names
                .iter()
                .zip(self.values)
                .find(|(name, _)| **name == v)
                .map(|(_, value)| *value)
                .ok_or_else(|| E::unknown_variant(v, self.names))
        }
    }
    deserializer.deserialize_str(NameVisitor { names, values })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDocument {
    pub(crate) schema: String,
    #[serde(default)]
    pub(crate) storage: Table<RawStorage>,
    #[serde(default)]
    pub(crate) network: Table<RawNetwork>,
    #[serde(default)]
    pub(crate) runtime: Table<RawRuntime>,
    pub(crate) profiles: BTreeMap<String, Table<RawProfile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStorage {
    pub(crate) data_root: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    #[serde(default)]
    pub(crate) default_allow: Vec<String>,
    #[serde(default)]
    pub(crate) default_deny: Vec<String>,
}

/// `[runtime]` (spec 3.2; spec README conflict decision).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRuntime {
    pub(crate) runsc_dcache: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    pub(crate) image: String,
    pub(crate) isolate_gitignored: Option<bool>,
    pub(crate) persistent_dirs: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) allow_egress: Vec<String>,
    #[serde(default)]
    pub(crate) deny_egress: Vec<String>,
    pub(crate) readiness: Option<Table<RawReadiness>>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) volumes: Vec<Table<RawVolume>>,
    #[serde(default)]
    pub(crate) escalation: Table<RawEscalation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReadiness {
    pub(crate) denied: Vec<Table<RawSocketTarget>>,
    pub(crate) permitted: Vec<Table<RawSocketTarget>>,
    pub(crate) dns: Vec<Table<RawDnsTarget>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSocketTarget {
    pub(crate) address: String,
    pub(crate) port: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDnsTarget {
    pub(crate) resolver: String,
    pub(crate) query: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVolume {
    pub(crate) host: String,
    pub(crate) container: String,
    pub(crate) kind: VolumeKind,
    pub(crate) access: Option<VolumeAccess>,
    pub(crate) create: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEscalation {
    pub(crate) enabled: Option<bool>,
    #[serde(default)]
    pub(crate) auto_approve: Vec<Table<RawAutoApproval>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAutoApproval {
    pub(crate) executable: String,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    pub(crate) allow_extra_args: Option<bool>,
}

/// `volume.kind`. Fingerprint byte: file 0x00, directory 0x01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VolumeKind {
    File,
    Directory,
}

/// `volume.access`. Fingerprint byte: read-only 0x00, read-write 0x01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VolumeAccess {
    ReadOnly,
    ReadWrite,
}

impl VolumeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
        }
    }
}

impl VolumeAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::ReadWrite => "read-write",
        }
    }
}

impl<'de> Deserialize<'de> for VolumeKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_enum(
            deserializer,
            &["file", "directory"],
            &[Self::File, Self::Directory],
        )
    }
}

impl<'de> Deserialize<'de> for VolumeAccess {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        string_enum(
            deserializer,
            &["read-only", "read-write"],
            &[Self::ReadOnly, Self::ReadWrite],
        )
    }
}
