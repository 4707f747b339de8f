//! Image references (spec 3.6, schemas.md `profile.image`).
//!
//! Two forms:
//! - `oci:/abs/path/to/layout[:tag]` — a local OCI image layout; the tag
//!   defaults to `latest`.
//! - `host[:port]/repo[:tag|@sha256:<64 hex>]` — a registry reference; the
//!   tag defaults to `latest`.

use std::fmt;
use std::path::PathBuf;

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// A local OCI image layout.
    Layout {
        /// Absolute path of the layout directory.
        path: PathBuf,
        /// The `org.opencontainers.image.ref.name` to select.
        tag: String,
    },
    /// An image in a registry speaking the OCI distribution API.
    Registry {
        /// `host` or `host:port`.
        host: String,
        /// Repository name (`a/b/c`).
        repository: String,
        /// Tag or digest.
        reference: RegistryRef,
    },
}

/// The tag-or-digest part of a registry reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryRef {
    /// A tag.
    Tag(String),
    /// A `sha256:<hex>` manifest digest.
    Digest(String),
}

impl RegistryRef {
    /// The string the distribution API takes in `/manifests/<reference>`.
    pub fn as_str(&self) -> &str {
        match self {
            RegistryRef::Tag(t) | RegistryRef::Digest(t) => t,
        }
    }
}

/// Why an image reference is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image reference {reference:?}: {problem}; expected `oci:/abs/path/to/layout[:tag]` or `host[:port]/repo[:tag|@sha256:<64 hex digits>]`")]
pub struct ReferenceError {
    /// The reference as given.
    pub reference: String,
    /// What is wrong with it.
    pub problem: String,
}

const DEFAULT_TAG: &str = "latest";

fn valid_tag(t: &str) -> bool {
    let mut chars = t.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && t.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn valid_repository(r: &str) -> bool {
    !r.is_empty()
        && r.split('/').all(|comp| {
            !comp.is_empty()
                && comp.chars().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
                })
                && comp.starts_with(|c: char| c.is_ascii_alphanumeric())
                && comp.ends_with(|c: char| c.is_ascii_alphanumeric())
        })
}

fn valid_host(h: &str) -> bool {
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) if !n.ends_with(']') || h.starts_with('[') => (n, Some(p)),
        _ => (h, None),
    };
    let name_ok = if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !name.is_empty()
            && name
                .split('.')
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    name_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

impl ImageRef {
    /// Parses a reference.
    pub fn parse(text: &str) -> Result<ImageRef, ReferenceError> {
        let err = |problem: &str| ReferenceError {
            reference: text.to_owned(),
            problem: problem.to_owned(),
        };
        if let Some(rest) = text.strip_prefix("oci:") {
            if !rest.starts_with('/') {
                return Err(err("the layout path after `oci:` must be absolute"));
            }
            // A tag never contains '/', so a ':' after the last '/' starts it.
            let last_slash = rest.rfind('/').unwrap_or(0);
            let (path, tag) = match rest[last_slash..].find(':') {
                Some(i) => (&rest[..last_slash + i], &rest[last_slash + i + 1..]),
                None => (rest, DEFAULT_TAG),
            };
            if !valid_tag(tag) {
                return Err(err("the tag must match [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
            }
            if path.split('/').any(|c| c == "..") {
                return Err(err("the layout path must not contain `..`"));
            }
            return Ok(ImageRef::Layout {
                path: PathBuf::from(path),
                tag: tag.to_owned(),
            });
        }
        let Some((host, rest)) = text.split_once('/') else {
            return Err(err(
                "a registry reference needs `host[:port]/` before the repository",
            ));
        };
        if !valid_host(host) {
            return Err(err(
                "the registry host must be a host name or IP address with an optional port",
            ));
        }
        let (repository, reference) = if let Some((repo, digest)) = rest.split_once('@') {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| err("only sha256 digests are supported"))?;
            if hex.len() != 64
                || !hex
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            {
                return Err(err("a sha256 digest has 64 lowercase hex digits"));
            }
            (repo, RegistryRef::Digest(digest.to_owned()))
        } else {
            let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
            match rest[last_slash..].find(':') {
                Some(i) => {
                    let tag = &rest[last_slash + i + 1..];
                    if !valid_tag(tag) {
                        return Err(err("the tag must match [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
                    }
                    (&rest[..last_slash + i], RegistryRef::Tag(tag.to_owned()))
                }
                None => (rest, RegistryRef::Tag(DEFAULT_TAG.to_owned())),
            }
        };
        if !valid_repository(repository) {
            return Err(err(
                "the repository must be lowercase components of [a-z0-9._-] separated by `/`",
            ));
        }
        Ok(ImageRef::Registry {
            host: host.to_owned(),
            repository: repository.to_owned(),
            reference,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::Layout { path, tag } => write!(f, "oci:{}:{tag}", path.display()),
            ImageRef::Registry {
                host,
                repository,
                reference: RegistryRef::Tag(t),
            } => {
                write!(f, "{host}/{repository}:{t}")
            }
            ImageRef::Registry {
                host,
                repository,
                reference: RegistryRef::Digest(d),
            } => {
                write!(f, "{host}/{repository}@{d}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(p: &str, t: &str) -> Result<ImageRef, String> {
        Ok(ImageRef::Layout {
            path: p.into(),
            tag: t.into(),
        })
    }
    fn parse(s: &str) -> Result<ImageRef, String> {
        ImageRef::parse(s).map_err(|e| e.problem)
    }

    #[test]
    fn layouts() {
        assert_eq!(
            parse("oci:/var/cache/x/layout:default"),
            layout("/var/cache/x/layout", "default")
        );
        assert_eq!(parse("oci:/a/b"), layout("/a/b", "latest"));
        assert_eq!(parse("oci:/a:b/c:v1.2"), layout("/a:b/c", "v1.2"));
        assert!(parse("oci:rel/path").is_err());
        assert!(parse("oci:/a/../b").is_err());
        assert!(parse("oci:/a:bad tag").is_err());
        assert_eq!(
            ImageRef::parse("oci:/a/b")
                .map(|r| r.to_string())
                .map_err(|e| e.to_string()),
            Ok("oci:/a/b:latest".to_owned())
        );
    }

    /// Any text either is refused or parses to a reference whose display
    /// form parses back to the same reference.
    #[test]
    fn parse_display_round_trip() {
        fn prop(text: String) -> bool {
            match ImageRef::parse(&text) {
                Ok(r) => ImageRef::parse(&r.to_string()).ok() == Some(r),
                Err(e) => e.reference == text,
            }
        }
        fn prop_shaped(host: u8, repo: Vec<u8>, tag: u8) -> bool {
            // Mostly-valid shapes, so the Ok branch is exercised too.
            let repo: String = repo
                .iter()
                .map(|b| (b'a' + b % 26) as char)
                .take(12)
                .collect();
            let text = format!(
                "127.0.0.{host}:5000/{}{repo}:t{tag}",
                if repo.is_empty() { "x" } else { "" }
            );
            ImageRef::parse(&text).is_ok_and(|r| ImageRef::parse(&r.to_string()).ok() == Some(r))
        }
        quickcheck::quickcheck(prop as fn(String) -> bool);
        quickcheck::quickcheck(prop_shaped as fn(u8, Vec<u8>, u8) -> bool);
    }

    #[test]
    fn registries() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            parse("127.0.0.1:5000/lazaret/debian:bookworm"),
            Ok(ImageRef::Registry {
                host: "127.0.0.1:5000".into(),
                repository: "lazaret/debian".into(),
                reference: RegistryRef::Tag("bookworm".into())
            })
        );
        assert_eq!(
            parse(&format!("localhost/debian@{d}")),
            Ok(ImageRef::Registry {
                host: "localhost".into(),
                repository: "debian".into(),
                reference: RegistryRef::Digest(d.clone())
            })
        );
        assert_eq!(
            parse("[::1]:5000/x").map(|r| r.to_string()),
            Ok("[::1]:5000/x:latest".to_owned())
        );
        assert!(parse("debian").is_err());
        assert!(parse("host/Debian").is_err());
        assert!(parse("host:99999/debian").is_err());
        assert!(parse("host/debian@sha256:abc").is_err());
        assert!(parse("host/debian@md5:abc").is_err());
        let msg = ImageRef::parse("debian")
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(
            msg.contains("expected `oci:/abs/path/to/layout[:tag]`"),
            "{msg}"
        );
    }
}
