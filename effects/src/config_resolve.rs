//! Loading the selected profile into one move-owned, non-serializable
//! [`ResolvedDomainConfiguration`] (spec 3.2; schemas.md
//! ResolvedDomainConfiguration). Order: source safety, strict decoding,
//! selection (layout, network, readiness), workspace, path plans, overlap
//! rules on labels, root creation, overlap rules on identities, revalidation
//! of every plan, digests, and only then environment references.
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::config::{
    check_overlaps, config_source_path, decode_document, expand_host_path, home_dir,
    resolve_environment, runtime_root_path, storage_root_path, ConfigError,
    ConfigurationFingerprintRecordV1, ConfigurationFingerprintV1, DomainIdV1, HostEnvironment,
    HostPathDecl, KeyPath, PolicyDigest, ResolvedAutoApprovalRule, ResolvedEnvironment,
    ResolvedVolume, SandboxLayoutV1, SelectedProfileV1, TreeEntry, TreeRole, VolumeDecl,
    VolumeKind,
};

use crate::config_source::{read_config_source, ConfigSource, SourceError};
use crate::confined::{ConfinedError, ConfinedSys, FileKind, OpenedObject, RootHandle, UserIds};

/// What the caller asks to load.
#[derive(Clone, Copy)]
pub struct LoadRequest<'a> {
    /// The explicitly selected profile name.
    pub profile: &'a str,
    /// `--config FILE`, if given.
    pub config: Option<&'a str>,
    /// The Agent Workspace as selected by the caller (often `.`).
    pub workspace: &'a Path,
    pub env: &'a dyn HostEnvironment,
    pub layout: &'a SandboxLayoutV1,
}

impl std::fmt::Debug for LoadRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadRequest")
            .field("profile", &self.profile)
            .field("config", &self.config)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// Why loading refused. Every variant names the source file; key-level
/// variants name the TOML key path.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading the invoking user's identity failed: {0}")]
    User(#[source] ConfinedError),
    #[error("locating the configuration source: {0}")]
    Locate(#[source] ConfigError),
    #[error("{}: {source}", file.display())]
    Source {
        file: PathBuf,
        #[source]
        source: SourceError,
    },
    #[error("{}: {source}", file.display())]
    Config {
        file: PathBuf,
        #[source]
        source: ConfigError,
    },
    #[error("{}: workspace: {source}", file.display())]
    Workspace {
        file: PathBuf,
        #[source]
        source: ConfinedError,
    },
    #[error("{}: key `{key}`: {source}", file.display())]
    Path {
        file: PathBuf,
        key: KeyPath,
        #[source]
        source: ConfinedError,
    },
    #[error("{}: key `{key}`: executable {}: {problem}", file.display(), path.display())]
    Executable {
        file: PathBuf,
        key: KeyPath,
        path: PathBuf,
        problem: String,
    },
}

/// A volume with its opened, revalidated host source.
#[derive(Debug)]
pub struct ResolvedVolumeSource {
    decl: VolumeDecl,
    source: OpenedObject,
}

impl ResolvedVolumeSource {
    pub fn decl(&self) -> &VolumeDecl {
        &self.decl
    }
    pub fn source(&self) -> &OpenedObject {
        &self.source
    }
}

/// An auto-approval rule with its opened canonical executable.
#[derive(Debug)]
pub struct ResolvedExecutableRule {
    executable: OpenedObject,
    rule: ResolvedAutoApprovalRule,
}

impl ResolvedExecutableRule {
    pub fn executable(&self) -> &OpenedObject {
        &self.executable
    }
    pub fn rule(&self) -> &ResolvedAutoApprovalRule {
        &self.rule
    }
}

/// The only successful output of loading a selected profile. Move-owned,
/// not Clone, not serializable; environment values are redacted in Debug.
#[derive(Debug)]
pub struct ResolvedDomainConfiguration {
    selected: SelectedProfileV1,
    source: ConfigSource,
    workspace: OpenedObject,
    storage_root: RootHandle,
    runtime_root: RootHandle,
    profile_dir: RootHandle,
    storage_domain: RootHandle,
    runtime_domain: RootHandle,
    volumes: Vec<ResolvedVolumeSource>,
    rules: Vec<ResolvedExecutableRule>,
    environment: ResolvedEnvironment,
    domain_id: DomainIdV1,
    fingerprint: ConfigurationFingerprintV1,
    fingerprint_record: ConfigurationFingerprintRecordV1,
    policy_digest: PolicyDigest,
}

impl ResolvedDomainConfiguration {
    pub fn selected(&self) -> &SelectedProfileV1 {
        &self.selected
    }
    pub fn source_label(&self) -> PathBuf {
        self.source.label()
    }
    pub fn workspace(&self) -> &OpenedObject {
        &self.workspace
    }
    pub fn storage_root(&self) -> &RootHandle {
        &self.storage_root
    }
    pub fn runtime_root(&self) -> &RootHandle {
        &self.runtime_root
    }
    pub fn profile_dir(&self) -> &RootHandle {
        &self.profile_dir
    }
    pub fn storage_domain_root(&self) -> &RootHandle {
        &self.storage_domain
    }
    pub fn runtime_domain_root(&self) -> &RootHandle {
        &self.runtime_domain
    }
    pub fn volumes(&self) -> &[ResolvedVolumeSource] {
        &self.volumes
    }
    pub fn auto_approval_rules(&self) -> &[ResolvedExecutableRule] {
        &self.rules
    }
    pub fn environment(&self) -> &ResolvedEnvironment {
        &self.environment
    }
    pub fn domain_id(&self) -> DomainIdV1 {
        self.domain_id
    }
    pub fn fingerprint(&self) -> ConfigurationFingerprintV1 {
        self.fingerprint
    }
    pub fn fingerprint_record(&self) -> &ConfigurationFingerprintRecordV1 {
        &self.fingerprint_record
    }
    pub fn policy_digest(&self) -> PolicyDigest {
        self.policy_digest
    }
    pub fn runsc_dcache(&self) -> u32 {
        self.selected.runsc_dcache()
    }
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn identity(o: &OpenedObject) -> Option<(u32, u32, u64)> {
    let id = o.stat().identity;
    Some((id.dev_major, id.dev_minor, id.ino))
}

/// Whether `path` exists as a directory (following symlinks, as the
/// ancestors of a plan are resolved once).
fn sys_is_dir(sys: &dyn ConfinedSys, path: &Path) -> bool {
    sys.open_ambient(path, true)
        .and_then(|fd| sys.stat(fd.as_fd()))
        .is_ok_and(|st| st.kind() == FileKind::Directory)
}

fn label_key(text: &str) -> KeyPath {
    KeyPath::label(text.to_owned())
}

/// The loader's context for one load.
struct Loader<'a> {
    sys: &'a dyn ConfinedSys,
    file: PathBuf,
    user: UserIds,
}

impl Loader<'_> {
    fn path_err(&self, key: &KeyPath) -> impl Fn(ConfinedError) -> LoadError + '_ {
        let key = key.clone();
        move |source| LoadError::Path {
            file: self.file.clone(),
            key: key.clone(),
            source,
        }
    }

    fn config_err(&self) -> impl Fn(ConfigError) -> LoadError + '_ {
        |source| LoadError::Config {
            file: self.file.clone(),
            source,
        }
    }

    /// The canonical label a not-yet-created path will have.
    fn planned_label(&self, key: &KeyPath, path: &Path) -> Result<PathBuf, LoadError> {
        let (ancestor, rest) =
            crate::confined::resolve_ancestors(self.sys, path).map_err(self.path_err(key))?;
        Ok(rest.iter().fold(ancestor, |acc, c| acc.join(c)))
    }

    fn workspace(&self, path: &Path) -> Result<OpenedObject, LoadError> {
        let err = |source| LoadError::Workspace {
            file: self.file.clone(),
            source,
        };
        let ambient = self.sys.open_ambient(path, true).map_err(|e| {
            err(ConfinedError::Open {
                path: path.to_owned(),
                problem: crate::confined::open_problem(&e),
            })
        })?;
        let canonical = self.sys.fd_path(ambient.as_fd()).map_err(|source| {
            err(ConfinedError::FdPath {
                path: path.to_owned(),
                source,
            })
        })?;
        let ambient_stat = self.sys.stat(ambient.as_fd()).map_err(|source| {
            err(ConfinedError::Stat {
                path: path.to_owned(),
                source,
            })
        })?;
        let object = OpenedObject::open_existing(self.sys, &canonical).map_err(err)?;
        object
            .require_kind(FileKind::Directory, "a directory")
            .map_err(err)?;
        if object.stat().identity != ambient_stat.identity {
            return Err(err(ConfinedError::Changed { path: canonical }));
        }
        Ok(object)
    }

    fn volume(
        &self,
        decl: &VolumeDecl,
        path: &Path,
        profile_dir: &RootHandle,
    ) -> Result<OpenedObject, LoadError> {
        let key = decl.key.key("host");
        if decl.create {
            let HostPathDecl::ProfileDir(rest) = &decl.host else {
                return Err(self.config_err()(ConfigError::Invalid {
                    key: decl.key.key("create"),
                    found: "true".to_owned(),
                    expected: "create = true only beneath {profile_dir}/",
                }));
            };
            let root = profile_dir
                .ensure_child(self.sys, Path::new(rest), self.user.uid)
                .map_err(self.path_err(&key))?;
            return Ok(root.into_inner());
        }
        let object = OpenedObject::open_existing(self.sys, path).map_err(self.path_err(&key))?;
        let (kind, expected) = match decl.kind {
            VolumeKind::File => (FileKind::Regular, "a regular file (kind = \"file\")"),
            VolumeKind::Directory => (FileKind::Directory, "a directory (kind = \"directory\")"),
        };
        object
            .require_kind(kind, expected)
            .map_err(self.path_err(&key))?;
        Ok(object)
    }

    /// Resolves an auto-approval executable to its canonical object and
    /// applies the load-time checks (spec 3.2).
    fn executable(&self, key: &KeyPath, path: &Path) -> Result<OpenedObject, LoadError> {
        let refuse = |path: &Path, problem: String| LoadError::Executable {
            file: self.file.clone(),
            key: key.clone(),
            path: path.to_owned(),
            problem,
        };
        let ambient = self
            .sys
            .open_ambient(path, true)
            .map_err(|e| refuse(path, crate::confined::open_problem(&e)))?;
        let canonical = self
            .sys
            .fd_path(ambient.as_fd())
            .map_err(|e| refuse(path, e.to_string()))?;
        let ambient_stat = self
            .sys
            .stat(ambient.as_fd())
            .map_err(|e| refuse(path, e.to_string()))?;
        let object =
            OpenedObject::open_existing(self.sys, &canonical).map_err(self.path_err(key))?;
        let st = object.stat();
        if st.identity != ambient_stat.identity {
            return Err(refuse(
                &canonical,
                "changed while being resolved; expected a stable object".to_owned(),
            ));
        }
        if st.kind() != FileKind::Regular {
            return Err(refuse(
                &canonical,
                format!("is {}; expected a regular file", st.kind().describe()),
            ));
        }
        if st.nlink != 1 {
            return Err(refuse(
                &canonical,
                format!("has {} hard links; expected exactly one", st.nlink),
            ));
        }
        if st.uid != 0 && st.uid != self.user.uid {
            return Err(refuse(
                &canonical,
                format!(
                    "is owned by uid {}; expected root or the invoking user (uid {})",
                    st.uid, self.user.uid
                ),
            ));
        }
        if st.permissions() & 0o022 != 0 {
            return Err(refuse(
                &canonical,
                format!(
                    "has mode {:04o}; expected no group or other write bit",
                    st.permissions()
                ),
            ));
        }
        let exec_bit = if st.uid == self.user.uid {
            0o100
        } else if st.gid == self.user.gid || self.user.groups.contains(&st.gid) {
            0o010
        } else {
            0o001
        };
        if st.permissions() & exec_bit == 0 {
            return Err(refuse(
                &canonical,
                format!(
                    "has mode {:04o}; expected it to be executable by the invoking user",
                    st.permissions()
                ),
            ));
        }
        Ok(object)
    }
}

/// Loads and resolves the selected profile.
pub fn load_configuration(
    sys: &dyn ConfinedSys,
    request: &LoadRequest<'_>,
) -> Result<ResolvedDomainConfiguration, LoadError> {
    let _span = tracing::info_span!("ResolveConfiguration", profile = request.profile).entered();
    let user = sys
        .user_ids()
        .map_err(|source| LoadError::User(ConfinedError::UserIds { source }))?;
    let env = request.env;
    let source_path = config_source_path(request.config, env).map_err(LoadError::Locate)?;
    let source =
        read_config_source(sys, &source_path, user.uid).map_err(|source| LoadError::Source {
            file: source_path.clone(),
            source,
        })?;
    let loader = Loader {
        sys,
        file: source.label(),
        user,
    };
    let cfg = loader.config_err();
    let document = decode_document(source.bytes()).map_err(&cfg)?;
    let selected = document
        .select(request.profile, request.layout)
        .map_err(&cfg)?;

    let workspace = loader.workspace(request.workspace)?;
    let domain_id =
        DomainIdV1::compute(selected.name(), &bytes(&workspace.label())).map_err(&cfg)?;
    let domain_rel = PathBuf::from("domains").join(domain_id.to_string());
    let profile_rel = PathBuf::from("profiles").join(selected.name().as_str());

    let storage_key = selected
        .data_root()
        .map_or_else(|| label_key("(storage root)"), |(k, _)| k.clone());
    let runtime_key = label_key("(runtime root $XDG_RUNTIME_DIR/lazaret)");
    let storage_path =
        storage_root_path(selected.data_root().map(|(_, d)| d), env).map_err(&cfg)?;
    let runtime_path = runtime_root_path(env).map_err(&cfg)?;
    let storage_label = loader.planned_label(&storage_key, &storage_path)?;
    let runtime_label = loader.planned_label(&runtime_key, &runtime_path)?;
    // $XDG_RUNTIME_DIR itself belongs to the login session: it must exist;
    // only its `lazaret` child is Lazaret's to create.
    let runtime_base = runtime_path.parent().unwrap_or(Path::new("/"));
    if !sys_is_dir(sys, runtime_base) {
        return Err(LoadError::Path {
            file: loader.file.clone(),
            key: runtime_key,
            source: ConfinedError::Open {
                path: runtime_base.to_owned(),
                problem: "$XDG_RUNTIME_DIR does not exist; expected the session's existing runtime directory".to_owned(),
            },
        });
    }
    let profile_label = storage_label.join(&profile_rel);
    let home = || home_dir(env).map_err(&cfg);

    // Declared volume and executable paths, expanded.
    let mut volume_paths = Vec::with_capacity(selected.volumes().len());
    for v in selected.volumes() {
        let home_path = match v.host {
            HostPathDecl::Home(_) => home()?,
            _ => PathBuf::from("/"),
        };
        volume_paths.push(expand_host_path(&v.host, &home_path, &profile_label));
    }
    let mut exe_paths = Vec::with_capacity(selected.escalation().auto_approve.len());
    for r in &selected.escalation().auto_approve {
        let home_path = match r.executable {
            HostPathDecl::Home(_) => home()?,
            _ => PathBuf::from("/"),
        };
        exe_paths.push(expand_host_path(&r.executable, &home_path, Path::new("/")));
    }

    // Overlap rules on canonical labels, before anything is created.
    let mut planned = vec![
        TreeEntry {
            role: TreeRole::ConfigSource,
            key: label_key("(configuration source)"),
            label: source.label(),
            identity: identity(source.object()),
        },
        TreeEntry {
            role: TreeRole::Workspace,
            key: label_key("(agent workspace)"),
            label: workspace.label(),
            identity: identity(&workspace),
        },
        TreeEntry {
            role: TreeRole::StorageRoot,
            key: storage_key.clone(),
            label: storage_label.clone(),
            identity: None,
        },
        TreeEntry {
            role: TreeRole::RuntimeRoot,
            key: runtime_key.clone(),
            label: runtime_label.clone(),
            identity: None,
        },
        TreeEntry {
            role: TreeRole::ProfileDir,
            key: label_key("(profile directory)"),
            label: profile_label.clone(),
            identity: None,
        },
        TreeEntry {
            role: TreeRole::StorageDomain,
            key: label_key("(persistent Domain root)"),
            label: storage_label.join(&domain_rel),
            identity: None,
        },
        TreeEntry {
            role: TreeRole::RuntimeDomain,
            key: label_key("(runtime Domain root)"),
            label: runtime_label.join(&domain_rel),
            identity: None,
        },
    ];
    for (v, path) in selected.volumes().iter().zip(&volume_paths) {
        let key = v.key.key("host");
        planned.push(TreeEntry {
            role: TreeRole::Volume,
            label: loader.planned_label(&key, path)?,
            key,
            identity: None,
        });
    }
    let mut executables = Vec::with_capacity(exe_paths.len());
    for (r, path) in selected.escalation().auto_approve.iter().zip(&exe_paths) {
        let key = r.key.key("executable");
        let object = loader.executable(&key, path)?;
        planned.push(TreeEntry {
            role: TreeRole::Executable,
            key,
            label: object.label(),
            identity: identity(&object),
        });
        executables.push(object);
    }
    check_overlaps(&planned).map_err(&cfg)?;

    // Roots, one component at a time.
    let uid = loader.user.uid;
    let storage_root =
        RootHandle::ensure(sys, &storage_path, uid).map_err(loader.path_err(&storage_key))?;
    let runtime_root =
        RootHandle::ensure(sys, &runtime_path, uid).map_err(loader.path_err(&runtime_key))?;
    let profile_dir = storage_root
        .ensure_child(sys, &profile_rel, uid)
        .map_err(loader.path_err(&label_key("(profile directory)")))?;
    let storage_domain = storage_root
        .ensure_child(sys, &domain_rel, uid)
        .map_err(loader.path_err(&label_key("(persistent Domain root)")))?;
    let runtime_domain = runtime_root
        .ensure_child(sys, &domain_rel, uid)
        .map_err(loader.path_err(&label_key("(runtime Domain root)")))?;
    let mut volumes = Vec::with_capacity(volume_paths.len());
    for (v, path) in selected.volumes().iter().zip(&volume_paths) {
        let source = loader.volume(v, path, &profile_dir)?;
        volumes.push(ResolvedVolumeSource {
            decl: v.clone(),
            source,
        });
    }

    // Overlap rules again on the opened objects' labels and identities.
    let mut opened: Vec<TreeEntry> = planned
        .into_iter()
        .filter(|e| !matches!(e.role, TreeRole::Volume))
        .collect();
    for (entry, root) in [
        (TreeRole::StorageRoot, &storage_root),
        (TreeRole::RuntimeRoot, &runtime_root),
        (TreeRole::ProfileDir, &profile_dir),
        (TreeRole::StorageDomain, &storage_domain),
        (TreeRole::RuntimeDomain, &runtime_domain),
    ] {
        if let Some(e) = opened.iter_mut().find(|e| e.role == entry) {
            e.label = root.label();
            e.identity = identity(root.object());
        }
    }
    for v in &volumes {
        opened.push(TreeEntry {
            role: TreeRole::Volume,
            key: v.decl.key.key("host"),
            label: v.source.label(),
            identity: identity(&v.source),
        });
    }
    check_overlaps(&opened).map_err(&cfg)?;

    // Reopen every path through its plan after the comparisons.
    source
        .object()
        .revalidate(sys)
        .map_err(loader.path_err(&label_key("(configuration source)")))?;
    workspace
        .revalidate(sys)
        .map_err(loader.path_err(&label_key("(agent workspace)")))?;
    for (key, root) in [
        (&storage_key, &storage_root),
        (&runtime_key, &runtime_root),
        (&label_key("(profile directory)"), &profile_dir),
        (&label_key("(persistent Domain root)"), &storage_domain),
        (&label_key("(runtime Domain root)"), &runtime_domain),
    ] {
        root.revalidate(sys).map_err(loader.path_err(key))?;
    }
    for v in &volumes {
        v.source
            .revalidate(sys)
            .map_err(loader.path_err(&v.decl.key.key("host")))?;
    }
    let mut rules: Vec<ResolvedExecutableRule> = Vec::with_capacity(executables.len());
    for (decl, executable) in selected.escalation().auto_approve.iter().zip(executables) {
        executable
            .revalidate(sys)
            .map_err(loader.path_err(&decl.key.key("executable")))?;
        let rule = ResolvedAutoApprovalRule {
            canonical_executable: bytes(&executable.label()),
            args: decl.args.clone(),
            allow_extra_args: decl.allow_extra_args,
        };
        if let Some((j, _)) = rules.iter().enumerate().find(|(_, r)| r.rule == rule) {
            return Err(cfg(ConfigError::Conflict {
                key: decl.key.clone(),
                other: selected.escalation().auto_approve[j].key.clone(),
                problem: "both rules resolve to the same canonical executable, arguments and allow_extra_args; expected distinct normalized rules".to_owned(),
            }));
        }
        rules.push(ResolvedExecutableRule { executable, rule });
    }

    let record = ConfigurationFingerprintRecordV1::new(
        &selected,
        bytes(&storage_root.label()),
        bytes(&runtime_root.label()),
        volumes
            .iter()
            .map(|v| ResolvedVolume {
                canonical_host_source: bytes(&v.source.label()),
                container_path: v.decl.container.as_str().to_owned(),
                kind: v.decl.kind,
                access: v.decl.access,
                create: v.decl.create,
            })
            .collect(),
        rules.iter().map(|r| r.rule.clone()).collect(),
    );
    let fingerprint = record.fingerprint().map_err(&cfg)?;
    let policy_digest = selected.derived_policy().digest();
    let environment = resolve_environment(&selected, env).map_err(&cfg)?;
    Ok(ResolvedDomainConfiguration {
        selected,
        source,
        workspace,
        storage_root,
        runtime_root,
        profile_dir,
        storage_domain,
        runtime_domain,
        volumes,
        rules,
        environment,
        domain_id,
        fingerprint,
        fingerprint_record: record,
        policy_digest,
    })
}
