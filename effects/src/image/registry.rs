//! A registry as an image source: the OCI distribution API through
//! [`Transport`] (HTTPS, or plain HTTP to a loopback registry without a CA),
//! authenticated on the registry's challenge with basic auth or a bearer
//! token from its token server, with credentials from the user's auth files.

use super::auth::{self, Challenge, Credentials, Lookup};
use super::reference::RegistryRef;
use super::store::Sha256;
use super::transport::{self, Authorization, Response, Transport};
use super::{
    ImageError, Source, MAX_DOCUMENT, MT_DOCKER_LIST, MT_DOCKER_MANIFEST, MT_OCI_INDEX,
    MT_OCI_MANIFEST,
};
use std::io::Read;
use std::path::PathBuf;

/// A token server's answer larger than this is refused.
const MAX_TOKEN_RESPONSE: u64 = 64 << 10;
/// Challenges answered per pull (the first, then expired bearer tokens).
const MAX_ANSWERS: u32 = 4;
/// Times one blob download is resumed after its connection broke.
const MAX_RESUMES: u32 = 3;

pub(super) struct RegistrySource {
    /// The registry's name in the reference (`docker.io`, `host:port`).
    registry: String,
    repository: String,
    reference: RegistryRef,
    transport: Transport,
    /// What requests to the registry carry, once a challenge was answered.
    authorization: Authorization,
    /// Whether a challenge was answered (a 401 right after is a refusal).
    answered: bool,
    /// Challenges answered so far: a bearer token expires during a long
    /// pull, and a later 401 is answered again, at most [`MAX_ANSWERS`]
    /// times.
    answers: u32,
    /// Where the credentials used came from, for messages.
    credentials_from: Option<PathBuf>,
    /// The auth files consulted, for messages.
    consulted: Vec<PathBuf>,
    /// Entries for the registry Lazaret cannot use (a credential helper,
    /// an identity token), for messages.
    unusable: Vec<String>,
}

impl std::fmt::Debug for RegistrySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrySource")
            .field("registry", &self.registry)
            .field("repository", &self.repository)
            .finish_non_exhaustive()
    }
}

impl RegistrySource {
    pub(super) fn new(
        registry: &str,
        endpoint: &str,
        repository: &str,
        reference: &RegistryRef,
    ) -> Result<RegistrySource, ImageError> {
        Ok(RegistrySource {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            reference: reference.clone(),
            transport: Transport::new(registry, endpoint)?,
            authorization: Authorization::None,
            answered: false,
            answers: 0,
            credentials_from: None,
            consulted: Vec::new(),
            unusable: Vec::new(),
        })
    }

    fn url(&self, kind: &str, reference: &str) -> String {
        self.transport
            .url(&format!("/v2/{}/{kind}/{reference}", self.repository))
    }

    /// GETs `url` from the registry, answering its authentication
    /// challenge (and, later, the challenge of an expired bearer token);
    /// any status but 200 is an error naming the registry. Only the
    /// registry's own 401 is answered: one from a redirect target on
    /// another host never receives the registry's credentials.
    fn get(&mut self, url: &str, accept: &str) -> Result<Response, ImageError> {
        let headers = [("Accept", accept)];
        let mut answer = self.transport.get(url, &headers, &self.authorization)?;
        let bearer =
            matches!(&self.authorization, Authorization::Header(h) if h.starts_with("Bearer "));
        let expired = self.answered && bearer && self.answers < MAX_ANSWERS;
        if answer.response.status().as_u16() == 401
            && answer.from_origin
            && (!self.answered || expired)
        {
            let challenge = answer
                .response
                .headers()
                .get("WWW-Authenticate")
                .and_then(|v| v.to_str().ok())
                .and_then(auth::parse_challenge);
            self.answer(challenge, url)?;
            answer = self.transport.get(url, &headers, &self.authorization)?;
        }
        let status = answer.response.status().as_u16();
        match status {
            200 => Ok(answer.response),
            // Anonymous access refused after the challenge was answered
            // (a token without the pull action): credentials are missing.
            401 | 403 if answer.from_origin && self.answered && self.credentials_from.is_none() => {
                Err(self.auth_required())
            }
            401 | 403 if answer.from_origin && self.answered => Err(self.rejected(status)),
            _ => Err(ImageError::RegistryStatus {
                registry: self.registry.clone(),
                url: transport::shown(url),
                status,
                hint: match status {
                    _ if !answer.from_origin => {
                        " (answered by the host the registry redirected to, not by the registry)"
                    }
                    400 if url.starts_with("http://") => {
                        " (plain HTTP is used for a loopback registry without a CA of its own; if it serves HTTPS, put its CA in ~/.config/containers/certs.d/HOST:PORT/ca.crt)"
                    }
                    401 | 403 => " (the registry refused access without a challenge Lazaret can answer)",
                    404 => " (no such repository, tag or blob)",
                    429 => " (rate limited; log in to the registry or try later)",
                    _ => "",
                },
            }),
        }
    }

    fn auth_required(&self) -> ImageError {
        ImageError::AuthRequired {
            registry: self.registry.clone(),
            consulted: self
                .consulted
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            unusable: self
                .unusable
                .iter()
                .map(|note| format!("; {note}"))
                .collect(),
        }
    }

    fn rejected(&self, status: u16) -> ImageError {
        ImageError::AuthRejected {
            registry: self.registry.clone(),
            status,
            with: match &self.credentials_from {
                Some(p) => format!("the credentials from {}", p.display()),
                None => "anonymous access".to_owned(),
            },
        }
    }

    /// Answers a 401 challenge: sets what later requests carry.
    fn answer(&mut self, challenge: Option<Challenge>, url: &str) -> Result<(), ImageError> {
        self.answered = true;
        self.answers += 1;
        let env = |k: &str| std::env::var(k).ok();
        let Lookup {
            found,
            consulted,
            unusable,
        } = auth::lookup(&self.registry, &self.repository, &env)?;
        let (credentials, from) = match found {
            Some((c, from)) => (Some(c), Some(from)),
            None => (None, None),
        };
        self.credentials_from = from;
        self.consulted = consulted;
        self.unusable = unusable;
        match challenge {
            Some(Challenge::Basic) => {
                let c = credentials.as_ref().ok_or_else(|| self.auth_required())?;
                self.authorization = Authorization::Header(c.basic_header());
                Ok(())
            }
            Some(Challenge::Bearer { realm, service, .. }) => {
                let token = self.token(&realm, service.as_deref(), credentials.as_ref());
                match token {
                    Err(ImageError::AuthRejected { .. }) if credentials.is_none() => {
                        Err(self.auth_required())
                    }
                    other => {
                        self.authorization = Authorization::Header(format!("Bearer {}", other?));
                        Ok(())
                    }
                }
            }
            None => Err(ImageError::RegistryStatus {
                registry: self.registry.clone(),
                url: transport::shown(url),
                status: 401,
                hint: " (without a Basic or Bearer challenge Lazaret can answer)",
            }),
        }
    }

    /// A pull token for the repository from the token server `realm`.
    fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        credentials: Option<&Credentials>,
    ) -> Result<String, ImageError> {
        // A token server is reached over HTTPS, or plain HTTP on loopback,
        // and never through a `user@host` that hides its host.
        if !transport::allowed_url(realm) {
            return Err(ImageError::TokenRealm {
                registry: self.registry.clone(),
                realm: realm.to_owned(),
            });
        }
        let mut url = format!(
            "{realm}{}scope={}",
            if realm.contains('?') { '&' } else { '?' },
            query_escape(&format!("repository:{}:pull", self.repository))
        );
        if let Some(s) = service {
            url.push_str(&format!("&service={}", query_escape(s)));
        }
        let auth = match credentials {
            Some(c) => Authorization::Header(c.basic_header()),
            None => Authorization::None,
        };
        let answer = self
            .transport
            .get(&url, &[("Accept", "application/json")], &auth)?;
        let mut resp = answer.response;
        let status = resp.status().as_u16();
        if (status == 401 || status == 403) && answer.from_origin {
            return Err(self.rejected(status));
        }
        if status != 200 {
            return Err(ImageError::TokenStatus {
                registry: self.registry.clone(),
                realm: realm.to_owned(),
                status,
            });
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_TOKEN_RESPONSE)
            .read_to_vec()
            .map_err(|e| ImageError::Body {
                registry: self.registry.clone(),
                url: transport::shown(realm),
                detail: e.to_string(),
            })?;
        let doc: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| ImageError::TokenMalformed {
                registry: self.registry.clone(),
                realm: realm.to_owned(),
            })?;
        doc.get("token")
            .or_else(|| doc.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .map(str::to_owned)
            .ok_or_else(|| ImageError::TokenMalformed {
                registry: self.registry.clone(),
                realm: realm.to_owned(),
            })
    }

    fn get_manifest(&mut self, reference: &str) -> Result<Vec<u8>, ImageError> {
        let url = self.url("manifests", reference);
        let accept = [
            MT_OCI_MANIFEST,
            MT_OCI_INDEX,
            MT_DOCKER_MANIFEST,
            MT_DOCKER_LIST,
        ]
        .join(", ");
        let mut resp = self.get(&url, &accept)?;
        let declared = resp
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_DOCUMENT)
            .read_to_vec()
            .map_err(|e| ImageError::Body {
                registry: self.registry.clone(),
                url: url.clone(),
                detail: e.to_string(),
            })?;
        let actual = Sha256::of(&bytes).to_string();
        if let Some(d) = declared {
            if d != actual {
                return Err(ImageError::DigestHeaderMismatch {
                    registry: self.registry.clone(),
                    url,
                    declared: d,
                    actual,
                });
            }
        }
        Ok(bytes)
    }
}

/// A blob's bytes from the registry; when the connection breaks (an error,
/// or its end before `size` bytes), it asks for the rest with an HTTP range
/// request and goes on, at most [`MAX_RESUMES`] times. The caller hashes
/// what it reads, so a resumed blob is verified as a whole.
struct ResumingBlob<'a> {
    source: &'a RegistrySource,
    reader: Box<dyn Read + 'static>,
    url: String,
    size: u64,
    offset: u64,
    resumes: u32,
}

impl ResumingBlob<'_> {
    /// Reopens the blob at `offset`; only a `206` whose `Content-Range`
    /// starts there continues it.
    fn resume(&mut self, broke: std::io::Error) -> std::io::Result<()> {
        if self.resumes >= MAX_RESUMES || self.offset == 0 {
            return Err(broke);
        }
        self.resumes += 1;
        let range = format!("bytes={}-", self.offset);
        tracing::info!(url = %transport::shown(&self.url), offset = self.offset, "resuming a blob download");
        let answer = self
            .source
            .transport
            .get(
                &self.url,
                &[("Accept", "*/*"), ("Range", &range)],
                &self.source.authorization,
            )
            .map_err(|e| std::io::Error::other(format!("{broke}; resuming failed: {e}")))?;
        let resp = answer.response;
        let starts_here = resp
            .headers()
            .get("Content-Range")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(&format!("bytes {}-", self.offset)));
        if resp.status().as_u16() != 206 || !starts_here {
            return Err(std::io::Error::other(format!(
                "{broke}; the registry did not resume the download (HTTP {})",
                resp.status().as_u16()
            )));
        }
        self.reader = Box::new(resp.into_body().into_reader());
        Ok(())
    }
}

impl Read for ResumingBlob<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.reader.read(buf) {
                Ok(0) if self.offset < self.size && !buf.is_empty() => {
                    let early = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the connection ended after {} of {} bytes",
                            self.offset, self.size
                        ),
                    );
                    self.resume(early)?;
                }
                Ok(n) => {
                    self.offset += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => self.resume(e)?,
            }
        }
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved kept).
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Source for RegistrySource {
    fn describe(&self) -> String {
        format!("registry {}/{}", self.registry, self.repository)
    }

    fn root(&mut self) -> Result<(Vec<u8>, Sha256), ImageError> {
        let wanted = self.reference.as_str().to_owned();
        let bytes = self.get_manifest(&wanted)?;
        let digest = Sha256::of(&bytes);
        if let RegistryRef::Digest(d) = &self.reference {
            super::verify("manifest", &self.describe(), &Sha256::parse(d)?, &bytes)?;
        }
        Ok((bytes, digest))
    }

    fn manifest(&mut self, digest: &Sha256) -> Result<Vec<u8>, ImageError> {
        self.get_manifest(&digest.to_string())
    }

    fn blob(&mut self, digest: &Sha256, size: u64) -> Result<Box<dyn Read + '_>, ImageError> {
        let url = self.url("blobs", &digest.to_string());
        let resp = self.get(&url, "*/*")?;
        Ok(Box::new(ResumingBlob {
            reader: Box::new(resp.into_body().into_reader()),
            source: self,
            url,
            size,
            offset: 0,
            resumes: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(
            query_escape("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
        assert_eq!(query_escape("registry.docker.io"), "registry.docker.io");
    }
}
