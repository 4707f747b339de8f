//! Test images and services built from real tools.
//!
//! [`layered_layout`] builds a two-layer OCI layout with umoci whose second
//! layer exercises what an OCI-aware preparer must get right: a whiteout
//! (`.wh.gone.txt`), an opaque directory (`olddir/.wh..wh..opq`), a hard link
//! (`data/two` -> `data/one`) and files owned by uid/gid 1000.
//! [`Registry`] runs Debian's `docker-registry` on a free loopback port,
//! optionally over TLS with a certificate from a [`TestCa`] the test makes
//! and with htpasswd basic auth. [`multi_platform_layout`] writes an image
//! index over the layered image for several platforms.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of building fixtures.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A tool could not be started.
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        source: std::io::Error,
    },
    /// A tool failed.
    #[error("{tool} failed ({status}): {stderr}")]
    Failed {
        tool: String,
        status: String,
        stderr: String,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A certificate could not be made.
    #[error("cannot make a test certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A password could not be hashed.
    #[error("cannot hash the test password: {0}")]
    Password(#[from] bcrypt::BcryptError),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A layout document is not what umoci writes.
    #[error("{path} is not the layout document expected: {detail}")]
    Layout { path: PathBuf, detail: String },
    /// The registry did not come up.
    #[error("docker-registry on {addr} did not answer /v2/ within {secs} s")]
    RegistryTimeout { addr: String, secs: u64 },
}

/// Runs `bash -c script` with `dir` as working directory.
pub fn sh(dir: &Path, script: &str) -> Result<String, FixtureError> {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .map_err(|source| FixtureError::Spawn {
            tool: "bash".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(FixtureError::Failed {
            tool: format!("bash -c {script:?}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds the layered test layout under `dir` and returns its `oci:` reference.
pub fn layered_layout(dir: &Path) -> Result<String, FixtureError> {
    sh(
        dir,
        r#"
        rm -rf l1 l2 layout
        mkdir -p l1/etc l1/olddir l1/keepdir l1/data
        echo base > l1/etc/base.txt
        echo gone > l1/gone.txt
        echo a > l1/olddir/a; echo b > l1/olddir/b
        echo keep > l1/keepdir/x
        mkdir -p l2/olddir l2/data l2/home/user
        : > l2/.wh.gone.txt
        : > l2/olddir/.wh..wh..opq
        echo new > l2/olddir/new
        echo shared > l2/data/one
        ln l2/data/one l2/data/two
        echo mine > l2/home/user/owned
        chmod 0640 l2/home/user/owned
        tar --sort=name --owner=0 --group=0 --numeric-owner -C l1 -cf l1.tar .
        tar --sort=name --owner=1000 --group=1000 --numeric-owner -C l2 -cf l2.tar .
        umoci init --layout layout
        umoci new --image layout:test
        umoci raw add-layer --image layout:test l1.tar
        umoci raw add-layer --image layout:test l2.tar
        umoci config --image layout:test --config.cmd=/bin/true
        umoci gc --layout layout
        rm -rf l1 l2 l1.tar l2.tar
        "#,
    )?;
    Ok(format!("oci:{}/layout:test", dir.display()))
}

/// A certificate authority made for one test.
pub struct TestCa {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA.
    pub fn new() -> Result<TestCa, FixtureError> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Lazaret test CA");
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa {
            cert_pem: cert.pem(),
            cert,
            key,
        })
    }

    /// A server certificate and key (PEM) for `127.0.0.1` and `localhost`.
    pub fn issue_loopback(&self) -> Result<(String, String), FixtureError> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?;
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(std::net::IpAddr::V4(
                std::net::Ipv4Addr::LOCALHOST,
            )));
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// How a test [`Registry`] serves.
#[derive(Debug, Default)]
pub struct RegistryOptions<'a> {
    /// Serve HTTPS with a certificate this CA issues for 127.0.0.1.
    pub tls: Option<&'a TestCa>,
    /// Require HTTP basic auth (htpasswd) for this user and password.
    pub basic_auth: Option<(&'a str, &'a str)>,
    /// Require bearer tokens from this token server.
    pub token: Option<&'a TokenServer>,
}

/// The service and issuer names a [`TokenServer`]'s tokens carry.
const TOKEN_SERVICE: &str = "lazaret-test-registry";
const TOKEN_ISSUER: &str = "lazaret-test-issuer";

/// A small bearer-token server for the distribution token flow, on a
/// loopback port over plain HTTP: it signs ES256 JWTs whose `x5c` header
/// carries its self-signed certificate (the registry's `rootcertbundle`).
/// Authenticated with its one user and password, a client gets every
/// action it asks for; anonymously, it gets `pull` on repositories under
/// `public/` and nothing elsewhere (as Docker Hub answers for a private
/// repository); a wrong password gets 401.
#[derive(Debug)]
pub struct TokenServer {
    /// `http://127.0.0.1:<port>/token`.
    pub realm: String,
    /// The signing certificate, PEM, for the registry to trust.
    bundle: PathBuf,
    /// How many tokens it has issued (anonymous, authenticated).
    issued: std::sync::Arc<std::sync::Mutex<(u32, u32)>>,
    /// `user:password`, for pushing.
    credentials: String,
}

/// What a [`TokenServer`] needs to answer one request.
struct TokenSigner {
    key: ring::signature::EcdsaKeyPair,
    cert_b64: String,
    user: String,
    password: String,
}

impl TokenServer {
    /// Starts a token server for `user`/`password`, writing its
    /// certificate under `dir`.
    pub fn start(dir: &Path, user: &str, password: &str) -> Result<TokenServer, FixtureError> {
        use base64::Engine as _;
        std::fs::create_dir_all(dir).map_err(|source| FixtureError::Write {
            path: dir.to_owned(),
            source,
        })?;
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng)
            .map_err(|_| rcgen::Error::RingUnspecified)?;
        let key = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
            .map_err(|_| rcgen::Error::RingUnspecified)?;
        let cert_key = rcgen::KeyPair::try_from(pkcs8.as_ref())?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Lazaret test token signer");
        let cert = params.self_signed(&cert_key)?;
        let bundle = dir.join("token-signer.crt");
        std::fs::write(&bundle, cert.pem()).map_err(|source| FixtureError::Write {
            path: bundle.clone(),
            source,
        })?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| FixtureError::Spawn {
            tool: "bind 127.0.0.1:0".into(),
            source,
        })?;
        let port = listener
            .local_addr()
            .map_err(|source| FixtureError::Spawn {
                tool: "token server address".into(),
                source,
            })?
            .port();
        let signer = std::sync::Arc::new(TokenSigner {
            key,
            cert_b64: base64::engine::general_purpose::STANDARD.encode(cert.der()),
            user: user.to_owned(),
            password: password.to_owned(),
        });
        let issued = std::sync::Arc::new(std::sync::Mutex::new((0, 0)));
        let counts = issued.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let signer = signer.clone();
                let counts = counts.clone();
                std::thread::spawn(move || {
                    let _ = answer_token_request(stream, &signer, &counts);
                });
            }
        });
        Ok(TokenServer {
            realm: format!("http://127.0.0.1:{port}/token"),
            bundle,
            issued,
            credentials: format!("{user}:{password}"),
        })
    }

    /// Tokens issued so far: (anonymous, authenticated).
    pub fn issued(&self) -> (u32, u32) {
        *self.issued.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads one HTTP request from `stream` and answers it with a token.
fn answer_token_request(
    mut stream: std::net::TcpStream,
    signer: &TokenSigner,
    counts: &std::sync::Mutex<(u32, u32)>,
) -> std::io::Result<()> {
    use base64::Engine as _;
    use std::io::{Read, Write};
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 64 << 10 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&request).into_owned();
    let target = text.split(' ').nth(1).unwrap_or_default();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let authorization = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("authorization")
            .then(|| v.trim().to_owned())
    });
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", signer.user, signer.password))
    );
    let authenticated = match &authorization {
        None => false,
        Some(a) if *a == expected => true,
        Some(_) => {
            stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            return Ok(());
        }
    };
    let mut access = Vec::new();
    for pair in query.split('&') {
        let Some(scope) = pair.strip_prefix("scope=") else {
            continue;
        };
        let scope = percent_decode(scope);
        let mut parts = scope.splitn(3, ':');
        let (Some(kind), Some(name), Some(actions)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let actions: Vec<&str> = actions
            .split(',')
            .filter(|a| authenticated || (*a == "pull" && name.starts_with("public/")))
            .collect();
        access.push(serde_json::json!({ "type": kind, "name": name, "actions": actions }));
    }
    {
        let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
        if authenticated {
            c.1 += 1;
        } else {
            c.0 += 1;
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = serde_json::json!({ "typ": "JWT", "alg": "ES256", "x5c": [signer.cert_b64] });
    let claims = serde_json::json!({
        "iss": TOKEN_ISSUER,
        "sub": if authenticated { signer.user.as_str() } else { "" },
        "aud": TOKEN_SERVICE,
        "exp": now + 300,
        "nbf": now.saturating_sub(10),
        "iat": now,
        "jti": format!("{now}-{}", access.len()),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let rng = ring::rand::SystemRandom::new();
    let signature = signer
        .key
        .sign(&rng, signing_input.as_bytes())
        .map_err(|_| std::io::Error::other("signing failed"))?;
    let token = format!("{signing_input}.{}", b64(signature.as_ref()));
    let body = serde_json::json!({ "token": token, "expires_in": 300 }).to_string();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Decodes `%XX` escapes (`+` stays itself, as in a scope).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `docker-registry` on a free loopback port, stopped on drop.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Where it stores (`<dir>/data`).
    pub data: PathBuf,
    /// skopeo's arguments for pushing here (CA directory, credentials).
    push_args: Vec<String>,
}

impl Registry {
    /// Starts a plain-HTTP registry storing under `dir`.
    pub fn start(dir: &Path) -> Result<Registry, FixtureError> {
        Registry::start_with(dir, &RegistryOptions::default())
    }

    /// Starts a registry storing under `dir`, served as `options` say.
    pub fn start_with(dir: &Path, options: &RegistryOptions<'_>) -> Result<Registry, FixtureError> {
        std::fs::create_dir_all(dir).map_err(|source| FixtureError::Write {
            path: dir.to_owned(),
            source,
        })?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|source| FixtureError::Spawn {
                tool: "bind 127.0.0.1:0".into(),
                source,
            })?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).map_err(|source| FixtureError::Write { path, source })
        };
        let mut push_args = Vec::new();
        let mut http = format!("http:\n  addr: {addr}\n");
        if let Some(ca) = options.tls {
            let (cert, key) = ca.issue_loopback()?;
            write(dir.join("server.crt"), &cert)?;
            write(dir.join("server.key"), &key)?;
            let certs = dir.join("skopeo-certs");
            std::fs::create_dir_all(&certs).map_err(|source| FixtureError::Write {
                path: certs.clone(),
                source,
            })?;
            write(certs.join("ca.crt"), &ca.cert_pem)?;
            http.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("server.crt").display(),
                dir.join("server.key").display()
            ));
            push_args.push(format!("--dest-cert-dir={}", certs.display()));
        } else {
            push_args.push("--dest-tls-verify=false".to_owned());
        }
        let mut auth = String::new();
        if let Some(token) = options.token {
            auth = format!(
                "auth:\n  token:\n    realm: {}\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                token.realm,
                token.bundle.display()
            );
            push_args.push(format!("--dest-creds={}", token.credentials));
        }
        if let Some((user, password)) = options.basic_auth {
            let hash = bcrypt::hash(password, 5)?;
            write(dir.join("htpasswd"), &format!("{user}:{hash}\n"))?;
            auth = format!(
                "auth:\n  htpasswd:\n    realm: lazaret-test\n    path: {}\n",
                dir.join("htpasswd").display()
            );
            push_args.push(format!("--dest-creds={user}:{password}"));
        }
        let data = dir.join("data");
        let config = dir.join("registry.yml");
        write(
            config.clone(),
            &format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\n{http}{auth}log:\n  level: error\n",
                data.display()
            ),
        )?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| FixtureError::Spawn {
                tool: "docker-registry".into(),
                source,
            })?;
        let registry = Registry {
            child,
            addr,
            data,
            push_args,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&registry.addr).is_ok() {
                return Ok(registry);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(FixtureError::RegistryTimeout {
            addr: registry.addr.clone(),
            secs: 20,
        })
    }

    /// Where the registry keeps blob `digest` (`sha256:<hex>`).
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.data
            .join("docker/registry/v2/blobs/sha256")
            .join(hex.get(..2).unwrap_or_default())
            .join(hex)
            .join("data")
    }

    /// Copies an `oci:` image into this registry as `repo:tag` with skopeo.
    pub fn push(&self, oci_ref: &str, repo_tag: &str) -> Result<(), FixtureError> {
        self.skopeo_copy(&[], oci_ref, repo_tag)
    }

    /// Copies an `oci:` image index and every image it lists into this
    /// registry as `repo:tag`.
    pub fn push_all(&self, oci_ref: &str, repo_tag: &str) -> Result<(), FixtureError> {
        self.skopeo_copy(&["--all"], oci_ref, repo_tag)
    }

    fn skopeo_copy(
        &self,
        extra: &[&str],
        oci_ref: &str,
        repo_tag: &str,
    ) -> Result<(), FixtureError> {
        let out = Command::new("skopeo")
            .args(["copy", "--quiet"])
            .args(extra)
            .args(&self.push_args)
            .arg(oci_ref)
            .arg(format!("docker://{}/{repo_tag}", self.addr))
            .output()
            .map_err(|source| FixtureError::Spawn {
                tool: "skopeo".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(FixtureError::Failed {
                tool: "skopeo copy".into(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(())
    }

    /// Stops the registry and waits for it.
    pub fn stop(&mut self) {
        // Signal through a pidfd of our own unreaped child (the repository
        // never signals a numeric PID; spec 3.3).
        if let Ok(pid) = i32::try_from(self.child.id()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                if let Ok(pidfd) =
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                {
                    let _ =
                        rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
                }
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes an OCI layout under `dir` whose tag `multi` names an image index
/// over the [`layered_layout`] image at `image_dir`: one manifest per
/// `(architecture, variant)` in `platforms`, each with that platform in its
/// config. Returns the `oci:` reference and each manifest's digest, in the
/// order of `platforms`.
pub fn multi_platform_layout(
    image_dir: &Path,
    dir: &Path,
    platforms: &[(&str, Option<&str>)],
) -> Result<(String, Vec<String>), FixtureError> {
    use sha2::Digest as _;
    let layout = dir.join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(|source| FixtureError::Write {
        path: blobs.clone(),
        source,
    })?;
    let read_json = |path: PathBuf| -> Result<serde_json::Value, FixtureError> {
        let bytes = std::fs::read(&path).map_err(|source| FixtureError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| FixtureError::Layout {
            path,
            detail: e.to_string(),
        })
    };
    let blob_of = |digest: &str| {
        image_dir
            .join("layout/blobs/sha256")
            .join(digest.strip_prefix("sha256:").unwrap_or(digest))
    };
    let put = |bytes: &[u8]| -> Result<(String, u64), FixtureError> {
        let hex = hex::encode(sha2::Sha256::digest(bytes));
        let path = blobs.join(&hex);
        std::fs::write(&path, bytes).map_err(|source| FixtureError::Write { path, source })?;
        Ok((format!("sha256:{hex}"), bytes.len() as u64))
    };
    let field = |v: &serde_json::Value, path: &Path, what: &str| -> Result<String, FixtureError> {
        v.pointer(what)
            .and_then(|d| d.as_str())
            .map(str::to_owned)
            .ok_or_else(|| FixtureError::Layout {
                path: path.to_owned(),
                detail: format!("no {what}"),
            })
    };
    let index_path = image_dir.join("layout/index.json");
    let index = read_json(index_path.clone())?;
    let manifest_digest = field(&index, &index_path, "/manifests/0/digest")?;
    let manifest_path = blob_of(&manifest_digest);
    let manifest = read_json(manifest_path.clone())?;
    let config_path = blob_of(&field(&manifest, &manifest_path, "/config/digest")?);
    let config = read_json(config_path)?;
    // Copy the layers so the new layout is complete on its own.
    for layer in manifest["layers"].as_array().into_iter().flatten() {
        let digest = field(layer, &manifest_path, "/digest")?;
        let from = blob_of(&digest);
        let bytes = std::fs::read(&from).map_err(|source| FixtureError::Read {
            path: from.clone(),
            source,
        })?;
        put(&bytes)?;
    }
    let mut entries = Vec::new();
    let mut digests = Vec::new();
    for (arch, variant) in platforms {
        let mut c = config.clone();
        c["architecture"] = serde_json::json!(arch);
        if let Some(v) = variant {
            c["variant"] = serde_json::json!(v);
        }
        let (config_digest, config_size) = put(c.to_string().as_bytes())?;
        let mut m = manifest.clone();
        m["config"]["digest"] = serde_json::json!(config_digest);
        m["config"]["size"] = serde_json::json!(config_size);
        let (digest, size) = put(m.to_string().as_bytes())?;
        let mut platform = serde_json::json!({ "os": "linux", "architecture": arch });
        if let Some(v) = variant {
            platform["variant"] = serde_json::json!(v);
        }
        entries.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": size,
            "platform": platform,
        }));
        digests.push(digest);
    }
    let image_index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    });
    let (index_digest, index_size) = put(image_index.to_string().as_bytes())?;
    let top = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": index_digest,
            "size": index_size,
            "annotations": { "org.opencontainers.image.ref.name": "multi" },
        }],
    });
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|source| FixtureError::Write { path, source })
    };
    write(layout.join("index.json"), top.to_string())?;
    write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#.to_owned(),
    )?;
    Ok((format!("oci:{}:multi", layout.display()), digests))
}
