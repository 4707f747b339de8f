//! HTTP to one registry: HTTPS through rustls with the platform's trust
//! store plus the registry's own CAs, plain HTTP only to a loopback registry
//! that has no CA configured, redirects followed only to HTTPS with the
//! `Authorization` header kept to the registry's own origin, a proxy from
//! `HTTPS_PROXY`/`NO_PROXY` for non-loopback registries, and every wait
//! bounded.
//!
//! Per-registry CAs follow the containers convention (containers-certs.d(5)):
//! every `*.crt` in `$XDG_CONFIG_HOME/containers/certs.d/HOST[:PORT]/`
//! (default `~/.config`), `/etc/containers/certs.d/HOST[:PORT]/` and
//! `/etc/docker/certs.d/HOST[:PORT]/` is added to the roots of the client
//! that pulls from that registry (so also for its token server and the
//! hosts it redirects to), and of no other.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ureq::http::Uri;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

/// Redirects followed per request (blob storage redirects once).
const MAX_REDIRECTS: usize = 5;
/// CA files read per registry directory.
const MAX_CA_FILES: usize = 64;
/// A CA file larger than this is refused.
const MAX_CA_FILE: u64 = 1 << 20;

/// Errors of reaching a registry; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The platform trust store could not be loaded at all.
    #[error("cannot load the platform's trust store (SSL_CERT_FILE, SSL_CERT_DIR or /etc/ssl/certs): {detail}")]
    TrustStore { detail: String },
    /// A registry CA file could not be read.
    #[error("cannot read registry CA file {path}: {source}")]
    CaUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A registry CA file holds no usable certificate.
    #[error("registry CA file {path} holds no PEM certificate ({detail}); expected one or more `-----BEGIN CERTIFICATE-----` blocks")]
    CaInvalid { path: PathBuf, detail: String },
    /// The request could not be made or its answer not read.
    #[error("registry {registry} is unreachable ({url}): {detail}{hint}")]
    Unreachable {
        registry: String,
        url: String,
        detail: String,
        hint: String,
    },
    /// A URL this client does not request: plain HTTP to a host that is
    /// not loopback, or a `user@host` authority.
    #[error("registry {registry}: refusing to request {url}: only https:// URLs (or plain http:// on loopback) without a user@ part are used")]
    Refused { registry: String, url: String },
    /// A redirect to a location this client does not follow.
    #[error("registry {registry} redirected {url} to {location:?}: {why}")]
    BadRedirect {
        registry: String,
        url: String,
        location: String,
        why: &'static str,
    },
}

/// How a request authenticates, applied only to the registry's own origin.
#[derive(Clone)]
pub(super) enum Authorization {
    None,
    /// A complete `Authorization` header value (`Basic …`, `Bearer …`).
    Header(String),
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Authorization::None => f.write_str("None"),
            Authorization::Header(_) => f.write_str("Header(<redacted>)"),
        }
    }
}

/// One registry's HTTP client.
#[derive(Debug)]
pub(super) struct Transport {
    /// For messages: the registry's name as the reference gives it.
    registry: String,
    /// `https` or, for a loopback registry without CA, `http`.
    scheme: &'static str,
    /// `host[:port]` serving the API.
    endpoint: String,
    agent: ureq::Agent,
    /// The CA files added for this registry (for messages).
    ca_files: Vec<PathBuf>,
}

/// The answer to a request after redirects: status, headers and body.
pub(super) type Response = ureq::http::Response<ureq::Body>;

/// An answer and whether it came from the origin first asked (not from a
/// redirect target on another host, whose 401 must never be answered
/// with the registry's credentials).
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) response: Response,
    pub(super) from_origin: bool,
}

/// Whether `url` may be requested: `https://`, or `http://` to a loopback
/// host, with no `user@` part.
pub(super) fn allowed_url(url: &str) -> bool {
    Origin::of(url).is_some_and(|o| o.scheme == "https" || o.plain_loopback())
}

/// `url` without its query and fragment, for messages: a redirect's
/// pre-signed URL carries its signature there.
pub(super) fn shown(url: &str) -> String {
    match url.find(['?', '#']) {
        Some(i) => format!("{}?…", &url[..i]),
        None => url.to_owned(),
    }
}

/// Whether `host` (`name[:port]`, `[v6]:port`) names a loopback address.
pub(super) fn is_loopback(host: &str) -> bool {
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The name part of `host[:port]` (brackets of an IPv6 literal removed).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    }
}

/// The directories whose `*.crt` files are CAs for `endpoint`, in order.
pub(super) fn ca_dirs(endpoint: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let config_home = env("XDG_CONFIG_HOME")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|h| h.starts_with('/'))
                .map(|h| Path::new(&h).join(".config"))
        });
    if let Some(home) = config_home {
        dirs.push(home.join("containers/certs.d").join(endpoint));
    }
    dirs.push(Path::new("/etc/containers/certs.d").join(endpoint));
    dirs.push(Path::new("/etc/docker/certs.d").join(endpoint));
    dirs
}

fn read_cas(dirs: &[PathBuf]) -> Result<(Vec<Certificate<'static>>, Vec<PathBuf>), TransportError> {
    let mut certs = Vec::new();
    let mut files = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "crt"))
            .take(MAX_CA_FILES)
            .collect();
        names.sort();
        for path in names {
            let unreadable = |source| TransportError::CaUnreadable {
                path: path.clone(),
                source,
            };
            let len = std::fs::metadata(&path).map_err(unreadable)?.len();
            if len > MAX_CA_FILE {
                return Err(TransportError::CaInvalid {
                    path,
                    detail: format!("{len} bytes, more than {MAX_CA_FILE}"),
                });
            }
            let pem = std::fs::read(&path).map_err(unreadable)?;
            let before = certs.len();
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(PemItem::Certificate(c)) => certs.push(c.to_owned()),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(TransportError::CaInvalid {
                            path,
                            detail: e.to_string(),
                        })
                    }
                }
            }
            if certs.len() == before {
                return Err(TransportError::CaInvalid {
                    path,
                    detail: "no certificate found".to_owned(),
                });
            }
            files.push(path);
        }
    }
    Ok((certs, files))
}

fn platform_roots() -> Result<Vec<Certificate<'static>>, TransportError> {
    let loaded = rustls_native_certs::load_native_certs();
    if loaded.certs.is_empty() && !loaded.errors.is_empty() {
        return Err(TransportError::TrustStore {
            detail: loaded
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    Ok(loaded
        .certs
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect())
}

impl Transport {
    /// A client for the registry `registry` served at `endpoint`.
    pub(super) fn new(registry: &str, endpoint: &str) -> Result<Transport, TransportError> {
        let env = |k: &str| std::env::var(k).ok();
        let (cas, ca_files) = read_cas(&ca_dirs(endpoint, &env))?;
        let loopback = is_loopback(endpoint);
        // Plain HTTP only for a loopback registry without a CA of its own.
        let scheme = if loopback && ca_files.is_empty() {
            "http"
        } else {
            "https"
        };
        let mut builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("lazaret/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .timeout_per_read(Some(Duration::from_secs(60)));
        // Always our roots, even for a plain-HTTP registry: its redirects
        // and its token server may be HTTPS.
        let mut roots = platform_roots()?;
        roots.extend(cas);
        builder = builder.tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::new_with_certs(&roots))
                .build(),
        );
        // Loopback traffic never leaves the host through a proxy.
        builder = builder.proxy(if loopback {
            None
        } else {
            ureq::Proxy::try_from_env()
        });
        Ok(Transport {
            registry: registry.to_owned(),
            scheme,
            endpoint: endpoint.to_owned(),
            agent: builder.build().into(),
            ca_files,
        })
    }

    /// `scheme://endpoint` + `path`.
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.endpoint)
    }

    /// GETs `url`, following redirects (only to HTTPS, or within a
    /// loopback registry's own origin) with `auth` sent only to the origin
    /// of `url`. Any status is returned; the caller judges it.
    pub(super) fn get(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        auth: &Authorization,
    ) -> Result<Answer, TransportError> {
        let origin = Origin::of(url)
            .filter(|o| o.scheme == "https" || o.plain_loopback())
            .ok_or_else(|| TransportError::Refused {
                registry: self.registry.clone(),
                url: shown(url),
            })?;
        let mut current = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let here = Origin::of(&current)
                .ok_or_else(|| self.unreachable(&current, "not a URL".into()))?;
            let mut request = self.agent.get(&current);
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            if let Authorization::Header(value) = auth {
                if here == origin {
                    request = request.header("Authorization", value);
                }
            }
            let response = request
                .call()
                .map_err(|e| self.unreachable(&current, e.to_string()))?;
            if !response.status().is_redirection() {
                return Ok(Answer {
                    response,
                    from_origin: here == origin,
                });
            }
            let location = response
                .headers()
                .get("Location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            current = self.follow(&current, &here, &location)?;
        }
        Err(TransportError::BadRedirect {
            registry: self.registry.clone(),
            url: shown(url),
            location: shown(&current),
            why: "more than 5 redirects",
        })
    }

    /// The absolute URL a redirect from `from` to `location` goes to, if it
    /// is one this client follows.
    fn follow(&self, from: &str, here: &Origin, location: &str) -> Result<String, TransportError> {
        let bad = |why| TransportError::BadRedirect {
            registry: self.registry.clone(),
            url: shown(from),
            location: shown(location),
            why,
        };
        if location.starts_with('/') && !location.starts_with("//") {
            return Ok(format!("{}://{}{location}", here.scheme, here.authority));
        }
        let target = Origin::of(location).ok_or_else(|| bad("not an absolute URL"))?;
        if target.scheme == "https" || &target == here {
            Ok(location.to_owned())
        } else {
            Err(bad("only redirects to https are followed"))
        }
    }

    fn unreachable(&self, url: &str, detail: String) -> TransportError {
        let hint = if detail.contains("certificate") || detail.contains("UnknownIssuer") {
            let dirs = ca_dirs(&self.endpoint, &|k| std::env::var(k).ok());
            format!(
                "; to trust a private registry's CA put it in {} (CA files used: {})",
                dirs.iter()
                    .map(|d| format!("{}/ca.crt", d.display()))
                    .collect::<Vec<_>>()
                    .join(" or "),
                if self.ca_files.is_empty() {
                    "none".to_owned()
                } else {
                    self.ca_files
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )
        } else {
            "; is the registry running and reachable?".to_owned()
        };
        TransportError::Unreachable {
            registry: self.registry.clone(),
            url: shown(url),
            detail,
            hint,
        }
    }
}

/// A URL's scheme and authority, compared to keep credentials at home.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    authority: String,
}

impl Origin {
    /// Whether this origin may be reached without TLS: plain HTTP only to
    /// a loopback host.
    fn plain_loopback(&self) -> bool {
        self.scheme == "http" && is_loopback(&self.authority)
    }

    fn of(url: &str) -> Option<Origin> {
        let uri: Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        if scheme != "https" && scheme != "http" {
            return None;
        }
        let authority = uri.authority()?.as_str().to_ascii_lowercase();
        // `user@host` is never taken: it hides the host from a reader.
        if authority.contains('@') {
            return None;
        }
        Some(Origin { scheme, authority })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in ["127.0.0.1:5000", "127.8.9.1", "localhost:80", "[::1]:5000"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "10.0.0.1:5000",
            "registry.example:5000",
            "[fe80::1]:5000",
            "localhost.evil",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }

    #[test]
    fn ca_directories_follow_the_containers_convention() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/a".to_owned()),
            _ => None,
        };
        assert_eq!(
            ca_dirs("r.example:5000", &env),
            vec![
                PathBuf::from("/home/a/.config/containers/certs.d/r.example:5000"),
                PathBuf::from("/etc/containers/certs.d/r.example:5000"),
                PathBuf::from("/etc/docker/certs.d/r.example:5000"),
            ]
        );
        let xdg = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some("/x".to_owned()),
            "HOME" => Some("/home/a".to_owned()),
            _ => None,
        };
        assert_eq!(
            ca_dirs("h", &xdg)[0],
            PathBuf::from("/x/containers/certs.d/h")
        );
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_named() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join("ca.crt"), "not pem").map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join("notes.txt"), "ignored").map_err(|e| e.to_string())?;
        let err = read_cas(&[dir.path().to_owned()]).map(|_| ());
        let msg = err.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(
            msg.contains("ca.crt") && msg.contains("holds no PEM certificate"),
            "{msg}"
        );
        Ok(())
    }

    #[test]
    fn redirects_go_only_to_https_and_relative_ones_stay_home() -> Result<(), String> {
        let t = Transport::new("127.0.0.1:5000", "127.0.0.1:5000").map_err(|e| e.to_string())?;
        let from = "http://127.0.0.1:5000/v2/x/blobs/sha256:00";
        let here = Origin::of(from).ok_or("origin")?;
        assert_eq!(
            t.follow(from, &here, "/v2/x/blobs/uploads/1")
                .map_err(|e| e.to_string())?,
            "http://127.0.0.1:5000/v2/x/blobs/uploads/1"
        );
        assert_eq!(
            t.follow(from, &here, "https://blobs.example/a?sig=1")
                .map_err(|e| e.to_string())?,
            "https://blobs.example/a?sig=1"
        );
        for refused in [
            "http://blobs.example/a",
            "ftp://x/y",
            "//blobs.example/a",
            "",
        ] {
            let msg = t
                .follow(from, &here, refused)
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default();
            assert!(msg.contains("redirected"), "{refused}: {msg}");
        }
        Ok(())
    }

    #[test]
    fn a_user_part_or_plain_http_elsewhere_is_never_requested() {
        assert!(allowed_url("https://auth.example/token"));
        assert!(allowed_url("http://127.0.0.1:5001/token"));
        assert!(allowed_url("http://[::1]:5001/token"));
        for refused in [
            "http://auth.example/token",
            "http://localhost:1@evil.example/t",
            "http://[::1]:80@evil.example/t",
            "https://user@auth.example/token",
            "ftp://127.0.0.1/x",
            "/relative",
        ] {
            assert!(!allowed_url(refused), "{refused}");
        }
        assert_eq!(
            shown("https://blobs.example/a?X-Amz-Signature=secret"),
            "https://blobs.example/a?…"
        );
        assert_eq!(shown("http://127.0.0.1/v2/"), "http://127.0.0.1/v2/");
    }

    #[test]
    fn origins_compare_scheme_and_authority() {
        assert_eq!(
            Origin::of("https://R.example:443/a"),
            Origin::of("https://r.example:443/b")
        );
        assert_ne!(
            Origin::of("https://r.example/a"),
            Origin::of("http://r.example/a")
        );
        assert_ne!(
            Origin::of("https://r.example/a"),
            Origin::of("https://blobs.r.example/a")
        );
        assert!(Origin::of("/relative").is_none());
    }
}
