//! Image references (spec 3.6, schemas.md `profile.image`), written as
//! people write them for docker and podman.
//!
//! Two forms:
//! - `oci:/abs/path/to/layout[:tag]` — a local OCI image layout; the tag
//!   defaults to `latest`.
//! - `[host[:port]/]repo[:tag][@sha256:<64 hex>]` — a registry reference.
//!   The first component is a registry host only when it contains `.` or
//!   `:` or is `localhost`; otherwise the image is on Docker Hub, whose
//!   name is `docker.io` (`index.docker.io` is the same registry) and whose
//!   one-component repositories live under `library/`. So `debian:bookworm`
//!   and `library/debian:bookworm` both normalise to
//!   `docker.io/library/debian:bookworm`. The tag defaults to `latest`; when
//!   a digest is given the tag is only a comment and the digest is what is
//!   pulled, as docker does.
//!
//! The normalised form ([`ImageRef`]'s `Display`) is what the configuration
//! fingerprint hashes (schemas "ConfigurationFingerprintV1", `image_utf8`),
//! so two spellings of one reference are one configuration.

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
        /// The registry's name, `host` or `host:port` (`docker.io` for
        /// Docker Hub; see [`ImageRef::endpoint`]).
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
#[error("image reference {reference:?}: {problem}; expected `oci:/abs/path/to/layout[:tag]` or `[host[:port]/]repo[:tag][@sha256:<64 hex digits>]`")]
pub struct ReferenceError {
    /// The reference as given.
    pub reference: String,
    /// What is wrong with it.
    pub problem: String,
}

const DEFAULT_TAG: &str = "latest";
/// Docker Hub's registry name in normalised references.
const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's legacy name, normalised to [`DOCKER_HUB`].
const DOCKER_HUB_INDEX: &str = "index.docker.io";
/// The host that serves Docker Hub's distribution API.
const DOCKER_HUB_ENDPOINT: &str = "registry-1.docker.io";

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
    let (name, port) = if let Some(rest) = h.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        (None, port)
    } else {
        match h.rsplit_once(':') {
            Some((n, p)) => (Some(n), Some(p)),
            None => (Some(h), None),
        }
    };
    let name_ok = name.is_none_or(|name| {
        !name.is_empty()
            && name
                .split('.')
                .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    });
    name_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

impl ImageRef {
    /// The `host[:port]` that serves a registry reference's distribution
    /// API: the registry's name, except Docker Hub's. `None` for a layout.
    pub fn endpoint(&self) -> Option<&str> {
        match self {
            ImageRef::Layout { .. } => None,
            ImageRef::Registry { host, .. } if host == DOCKER_HUB => Some(DOCKER_HUB_ENDPOINT),
            ImageRef::Registry { host, .. } => Some(host),
        }
    }

    /// Parses and normalises a reference.
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
        let (host, rest) = match text.split_once('/') {
            // distribution's rule: a `.` or `:`, `localhost`, or an
            // uppercase letter (never in a repository) makes it a host.
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.chars().any(|c| c.is_ascii_uppercase()) =>
            {
                (first, rest)
            }
            _ => (DOCKER_HUB, text),
        };
        let host = if host == DOCKER_HUB_INDEX {
            DOCKER_HUB
        } else {
            host
        };
        if !valid_host(host) {
            return Err(err(
                "the registry host must be a host name or IP address with an optional port",
            ));
        }
        // `name:tag@digest`: the digest decides, the tag is dropped.
        let (name, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (rest, None),
        };
        let last_slash = name.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match name[last_slash..].find(':') {
            Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
            None => (name, None),
        };
        if let Some(tag) = tag {
            if !valid_tag(tag) {
                return Err(err("the tag must match [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
            }
        }
        let reference = match digest {
            Some(digest) => {
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
                RegistryRef::Digest(digest.to_owned())
            }
            None => RegistryRef::Tag(tag.unwrap_or(DEFAULT_TAG).to_owned()),
        };
        let repository = if host == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository.to_owned()
        };
        let repository = repository.as_str();
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

    /// The short names docker and podman accept, normalised as they
    /// normalise them (distribution's `ParseNormalizedNamed`).
    #[test]
    fn short_names_normalise_as_docker_does() {
        let d = format!("sha256:{}", "b".repeat(64));
        let cases = [
            ("debian", "docker.io/library/debian:latest"),
            ("debian:bookworm", "docker.io/library/debian:bookworm"),
            (
                "library/debian:bookworm",
                "docker.io/library/debian:bookworm",
            ),
            ("docker.io/debian", "docker.io/library/debian:latest"),
            (
                "index.docker.io/library/debian",
                "docker.io/library/debian:latest",
            ),
            ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
            ("a/b/c", "docker.io/a/b/c:latest"),
            ("ghcr.io/org/agent:v1", "ghcr.io/org/agent:v1"),
            ("localhost/x", "localhost/x:latest"),
            ("localhost:5000/x/y:t", "localhost:5000/x/y:t"),
            ("quay.io/podman/stable", "quay.io/podman/stable:latest"),
            ("node:22", "docker.io/library/node:22"),
        ];
        for (text, want) in cases {
            assert_eq!(
                ImageRef::parse(text).map(|r| r.to_string()),
                Ok(want.to_owned()),
                "{text}"
            );
        }
        // A digest decides; a tag beside it is dropped.
        assert_eq!(
            ImageRef::parse(&format!("node:22@{d}")).map(|r| r.to_string()),
            Ok(format!("docker.io/library/node@{d}"))
        );
        assert_eq!(
            ImageRef::parse(&format!("ghcr.io/org/agent@{d}")).map(|r| r.to_string()),
            Ok(format!("ghcr.io/org/agent@{d}"))
        );
        // Docker Hub is served by its registry host; others by themselves.
        let hub = ImageRef::parse("debian").map_err(|e| e.to_string());
        assert_eq!(
            hub.as_ref().map(|r| r.endpoint()),
            Ok(Some("registry-1.docker.io"))
        );
        let own = ImageRef::parse("127.0.0.1:5000/x").map_err(|e| e.to_string());
        assert_eq!(
            own.as_ref().map(|r| r.endpoint()),
            Ok(Some("127.0.0.1:5000"))
        );
        let oci = ImageRef::parse("oci:/a/b").map_err(|e| e.to_string());
        assert_eq!(oci.as_ref().map(|r| r.endpoint()), Ok(None));
        // A first component without `.`/`:` that is not `localhost` is a
        // Docker Hub namespace, not a host.
        assert_eq!(
            ImageRef::parse("registry/x").map(|r| r.to_string()),
            Ok("docker.io/registry/x:latest".to_owned())
        );
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
        assert_eq!(
            parse("[::1]/x").map(|r| r.to_string()),
            Ok("[::1]/x:latest".to_owned())
        );
        assert!(parse("[::1]x/y").is_err());
        assert!(parse("[nope]:5000/y").is_err());
        // An uppercase first component is a host, as docker reads it.
        assert_eq!(
            parse("MyHost/x").map(|r| r.to_string()),
            Ok("MyHost/x:latest".to_owned())
        );
        assert!(parse("host/Debian").is_err());
        assert!(parse("Debian").is_err());
        assert!(parse("").is_err());
        assert!(parse("debian:").is_err());
        assert!(parse("host:99999/debian").is_err());
        assert!(parse("host/debian@sha256:abc").is_err());
        assert!(parse("host/debian@md5:abc").is_err());
        let msg = ImageRef::parse("Debian")
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        assert!(
            msg.contains("expected `oci:/abs/path/to/layout[:tag]`"),
            "{msg}"
        );
    }
}
