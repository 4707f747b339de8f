//! A registry as an image source: the OCI distribution API over plain HTTP,
//! to loopback registries only (network safety; no TLS support yet).

use super::reference::RegistryRef;
use super::store::Sha256;
use super::{
    ImageError, Source, MAX_DOCUMENT, MT_DOCKER_LIST, MT_DOCKER_MANIFEST, MT_OCI_INDEX,
    MT_OCI_MANIFEST,
};
use std::io::Read;
use std::net::IpAddr;
use std::time::Duration;

pub(super) struct RegistrySource {
    host: String,
    repository: String,
    reference: RegistryRef,
    agent: ureq::Agent,
}

/// Whether `host` (`name[:port]`, `[v6]:port`) names a loopback address.
pub(super) fn is_loopback(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl RegistrySource {
    pub(super) fn new(
        host: &str,
        repository: &str,
        reference: &RegistryRef,
    ) -> Result<RegistrySource, ImageError> {
        if !is_loopback(host) {
            return Err(ImageError::NotLoopback {
                host: host.to_owned(),
            });
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Never through a proxy, never redirected away from loopback.
            .proxy(None)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_recv_response(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(Duration::from_secs(30)))
            .build()
            .into();
        Ok(RegistrySource {
            host: host.to_owned(),
            repository: repository.to_owned(),
            reference: reference.clone(),
            agent,
        })
    }

    fn url(&self, kind: &str, reference: &str) -> String {
        format!(
            "http://{}/v2/{}/{kind}/{reference}",
            self.host, self.repository
        )
    }

    fn get(&self, url: &str, accept: &str) -> Result<ureq::http::Response<ureq::Body>, ImageError> {
        let resp = self
            .agent
            .get(url)
            .header("Accept", accept)
            .call()
            .map_err(|e| ImageError::Unreachable {
                host: self.host.clone(),
                url: url.to_owned(),
                detail: e.to_string(),
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(ImageError::RegistryStatus {
                host: self.host.clone(),
                url: url.to_owned(),
                status,
                hint: match status {
                    401 | 403 => " (registry authentication is not supported yet)",
                    404 => " (no such repository, tag or blob)",
                    301..=308 => " (redirects are not followed: only the loopback registry itself is trusted)",
                    _ => "",
                },
            });
        }
        Ok(resp)
    }

    fn get_manifest(&self, reference: &str) -> Result<(Vec<u8>, Option<String>), ImageError> {
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
            .map_err(|e| ImageError::Unreachable {
                host: self.host.clone(),
                url: url.clone(),
                detail: e.to_string(),
            })?;
        let actual = Sha256::of(&bytes).to_string();
        if let Some(d) = &declared {
            if d != &actual {
                return Err(ImageError::DigestHeaderMismatch {
                    host: self.host.clone(),
                    url,
                    declared: d.clone(),
                    actual,
                });
            }
        }
        Ok((bytes, declared))
    }
}

impl Source for RegistrySource {
    fn describe(&self) -> String {
        format!("registry {}/{}", self.host, self.repository)
    }

    fn root(&mut self) -> Result<(Vec<u8>, Sha256), ImageError> {
        let (bytes, _) = self.get_manifest(self.reference.as_str())?;
        let digest = Sha256::of(&bytes);
        if let RegistryRef::Digest(d) = &self.reference {
            super::verify("manifest", &self.describe(), &Sha256::parse(d)?, &bytes)?;
        }
        Ok((bytes, digest))
    }

    fn manifest(&mut self, digest: &Sha256) -> Result<Vec<u8>, ImageError> {
        Ok(self.get_manifest(&digest.to_string())?.0)
    }

    fn blob(&mut self, digest: &Sha256) -> Result<Box<dyn Read + '_>, ImageError> {
        let url = self.url("blobs", &digest.to_string());
        let resp = self.get(&url, "*/*")?;
        Ok(Box::new(resp.into_body().into_reader()))
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
    fn non_loopback_is_refused_before_any_traffic() {
        let e =
            RegistrySource::new("192.0.2.1:5000", "x", &RegistryRef::Tag("t".into())).map(|_| ());
        let msg = e.map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(msg.contains("not a loopback address"), "{msg}");
        assert!(
            msg.contains("skopeo copy docker://192.0.2.1:5000/"),
            "{msg}"
        );
    }
}
