//! Loading the selected profile into one move-owned, non-serializable
//! [`ResolvedDomainConfiguration`] (spec 3.2; schemas.md
//! ResolvedDomainConfiguration). Order: source safety, strict decoding,
//! selection (layout, network, readiness), workspace, path plans, overlap
//! rules on labels, root creation, overlap rules on identities, revalidation
//! of every plan, digests, and only then environment references.
use std::path::{Path, PathBuf};

use lazaret_runtime::config::{
    check_overlaps, config_source_path, decode_document, expand_host_path, home_dir,
    resolve_environment, runtime_root_path, storage_root_path, ConfigError,
    ConfigurationFingerprintRecordV1, ConfigurationFingerprintV1, DomainIdV1, HostEnvironment,
    HostPathDecl, KeyPath, PolicyDigest, ResolvedAutoApprovalRule, ResolvedEnvironment,
    ResolvedVolume, SandboxLayoutV1, SelectedProfileV1, TreeEntry, TreeRole, VolumeDecl,
};

use crate::config_objects::{bytes, label_key, opened_entry, sys_is_dir, Loader};
use crate::config_source::{read_config_source, SourceError};
use crate::confined::{ConfinedError, ConfinedSys, OpenedObject, RootHandle};

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
    #[error("configuration source: {source}")]
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
    source: OpenedObject,
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

/// The five Lazaret-owned roots of one load.
struct Roots {
    storage: RootHandle,
    runtime: RootHandle,
    profile_dir: RootHandle,
    storage_domain: RootHandle,
    runtime_domain: RootHandle,
}

/// Where the roots will be, before anything is created.
struct RootPlan {
    storage_key: KeyPath,
    runtime_key: KeyPath,
    storage_path: PathBuf,
    runtime_path: PathBuf,
    storage_label: PathBuf,
    runtime_label: PathBuf,
    profile_rel: PathBuf,
    domain_rel: PathBuf,
}

impl RootPlan {
    fn new(
        loader: &Loader<'_>,
        selected: &SelectedProfileV1,
        env: &dyn HostEnvironment,
        domain_id: DomainIdV1,
    ) -> Result<Self, LoadError> {
        let cfg = loader.config_err();
        let storage_key = selected
            .data_root()
            .map_or_else(|| label_key("(storage root)"), |(k, _)| k.clone());
        let runtime_key = label_key("(runtime root $XDG_RUNTIME_DIR/lazaret)");
        let storage_path =
            storage_root_path(selected.data_root().map(|(_, d)| d), env).map_err(&cfg)?;
        let runtime_path = runtime_root_path(env).map_err(&cfg)?;
        // $XDG_RUNTIME_DIR itself belongs to the login session: it must
        // exist; only its `lazaret` child is Lazaret's to create.
        let runtime_base = runtime_path.parent().unwrap_or(Path::new("/"));
        if !sys_is_dir(loader.sys, runtime_base) {
            return Err(LoadError::Path {
                file: loader.file.clone(),
                key: runtime_key,
                source: ConfinedError::Open {
                    path: runtime_base.to_owned(),
                    problem: "$XDG_RUNTIME_DIR does not exist; expected the session's existing runtime directory".to_owned(),
                },
            });
        }
        Ok(Self {
            storage_label: loader.planned_label(&storage_key, &storage_path)?,
            runtime_label: loader.planned_label(&runtime_key, &runtime_path)?,
            storage_key,
            runtime_key,
            storage_path,
            runtime_path,
            profile_rel: PathBuf::from("profiles").join(selected.name().as_str()),
            domain_rel: PathBuf::from("domains").join(domain_id.to_string()),
        })
    }

    fn profile_label(&self) -> PathBuf {
        self.storage_label.join(&self.profile_rel)
    }

    fn storage_domain_label(&self) -> PathBuf {
        self.storage_label.join(&self.domain_rel)
    }

    fn runtime_domain_label(&self) -> PathBuf {
        self.runtime_label.join(&self.domain_rel)
    }

    /// Tree entries for the planned roots (no identities yet).
    fn entries(&self) -> [TreeEntry; 5] {
        let entry = |role, key: KeyPath, label: PathBuf| TreeEntry {
            role,
            key,
            label,
            identity: None,
            ancestors: Vec::new(),
        };
        [
            entry(
                TreeRole::StorageRoot,
                self.storage_key.clone(),
                self.storage_label.clone(),
            ),
            entry(
                TreeRole::RuntimeRoot,
                self.runtime_key.clone(),
                self.runtime_label.clone(),
            ),
            entry(
                TreeRole::ProfileDir,
                label_key("(profile directory)"),
                self.profile_label(),
            ),
            entry(
                TreeRole::StorageDomain,
                label_key("(persistent Domain root)"),
                self.storage_domain_label(),
            ),
            entry(
                TreeRole::RuntimeDomain,
                label_key("(runtime Domain root)"),
                self.runtime_domain_label(),
            ),
        ]
    }

    /// Creates or validates every root, one component at a time.
    fn create(&self, loader: &Loader<'_>) -> Result<Roots, LoadError> {
        let (sys, uid) = (loader.sys, loader.user.uid);
        let storage = RootHandle::ensure(sys, &self.storage_path, uid)
            .map_err(loader.path_err(&self.storage_key))?;
        let runtime = RootHandle::ensure(sys, &self.runtime_path, uid)
            .map_err(loader.path_err(&self.runtime_key))?;
        let profile_dir = storage
            .ensure_child(sys, &self.profile_rel, uid)
            .map_err(loader.path_err(&label_key("(profile directory)")))?;
        let storage_domain = storage
            .ensure_child(sys, &self.domain_rel, uid)
            .map_err(loader.path_err(&label_key("(persistent Domain root)")))?;
        let runtime_domain = runtime
            .ensure_child(sys, &self.domain_rel, uid)
            .map_err(loader.path_err(&label_key("(runtime Domain root)")))?;
        Ok(Roots {
            storage,
            runtime,
            profile_dir,
            storage_domain,
            runtime_domain,
        })
    }
}

impl Roots {
    /// Tree entries with the opened roots' labels, identities and
    /// containing identities, keyed as in `plan`.
    fn entries(&self, loader: &Loader<'_>, plan: &RootPlan) -> Result<Vec<TreeEntry>, LoadError> {
        let handles = [
            &self.storage,
            &self.runtime,
            &self.profile_dir,
            &self.storage_domain,
            &self.runtime_domain,
        ];
        plan.entries()
            .into_iter()
            .zip(handles)
            .map(|(entry, root)| opened_entry(loader, entry.role, entry.key, root.object()))
            .collect()
    }

    fn revalidate(&self, loader: &Loader<'_>, plan: &RootPlan) -> Result<(), LoadError> {
        let handles = [
            &self.storage,
            &self.runtime,
            &self.profile_dir,
            &self.storage_domain,
            &self.runtime_domain,
        ];
        for (entry, root) in plan.entries().iter().zip(handles) {
            root.revalidate(loader.sys)
                .map_err(loader.path_err(&entry.key))?;
        }
        Ok(())
    }
}

/// Expands a declared host path (`~/` against `$HOME`, `{profile_dir}/`
/// against the planned profile directory).
fn expand(
    decl: &HostPathDecl,
    env: &dyn HostEnvironment,
    profile_dir: &Path,
) -> Result<PathBuf, ConfigError> {
    let home = match decl {
        HostPathDecl::Home(_) => home_dir(env)?,
        HostPathDecl::Absolute(_) | HostPathDecl::ProfileDir(_) => PathBuf::from("/"),
    };
    Ok(expand_host_path(decl, &home, profile_dir))
}

/// Steps 1 and 2 of a load: the source read and decoded, the profile
/// selected, the workspace opened, the Domain ID derived and the roots
/// planned. Nothing is created.
struct Planned<'a> {
    loader: Loader<'a>,
    source: OpenedObject,
    selected: SelectedProfileV1,
    workspace: OpenedObject,
    domain_id: DomainIdV1,
    roots_plan: RootPlan,
}

fn plan<'a>(sys: &'a dyn ConfinedSys, request: &LoadRequest<'_>) -> Result<Planned<'a>, LoadError> {
    let user = sys
        .user_ids()
        .map_err(|source| LoadError::User(ConfinedError::UserIds { source }))?;
    let env = request.env;

    // 1. Source safety, strict decoding, selection (pure validation).
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
    let source = source.into_object();
    let selected = document
        .select(request.profile, request.layout)
        .map_err(&cfg)?;

    // 2. Workspace, Domain ID and the planned roots.
    let workspace = loader.workspace(request.workspace)?;
    let domain_id =
        DomainIdV1::compute(selected.name(), &bytes(&workspace.label())).map_err(&cfg)?;
    let roots_plan = RootPlan::new(&loader, &selected, env, domain_id)?;
    drop(cfg);
    Ok(Planned {
        loader,
        source,
        selected,
        workspace,
        domain_id,
        roots_plan,
    })
}

/// Where a profile's Domain for a workspace lives, found exactly as a load
/// finds it (same source, selection, canonical workspace, Domain ID and
/// root plan) but without creating, resolving or opening anything beyond
/// the configuration source and the workspace. For read-only tools such as
/// `lazaret state` (spec 3.9: a Domain is resolved through trusted host
/// metadata, never an arbitrary path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainLocation {
    /// The selected profile's name.
    pub profile: String,
    /// The configuration source's canonical label.
    pub config_file: PathBuf,
    /// The canonical Agent Workspace label.
    pub workspace: PathBuf,
    pub domain_id: DomainIdV1,
    /// The Storage Root (its catalog, blobs and prepared lowers), as
    /// planned.
    pub storage_root: PathBuf,
    /// The persistent Domain root (lock and Domain Store), as planned.
    pub storage_domain_root: PathBuf,
    /// The runtime Domain root (socket, generation directories), as planned.
    pub runtime_domain_root: PathBuf,
    /// The selected profile's persistent paths (one State Anchor each).
    pub persistent_dirs: Vec<String>,
}

/// Locates the selected profile's Domain for the requested workspace.
pub fn locate_domain(
    sys: &dyn ConfinedSys,
    request: &LoadRequest<'_>,
) -> Result<DomainLocation, LoadError> {
    let _span = tracing::info_span!("LocateDomain", profile = request.profile).entered();
    let planned = plan(sys, request)?;
    let roots = &planned.roots_plan;
    Ok(DomainLocation {
        profile: planned.selected.name().as_str().to_owned(),
        config_file: planned.loader.file.clone(),
        workspace: planned.workspace.label(),
        domain_id: planned.domain_id,
        storage_root: roots.storage_label.clone(),
        storage_domain_root: roots.storage_domain_label(),
        runtime_domain_root: roots.runtime_domain_label(),
        persistent_dirs: planned
            .selected
            .persistent_dirs()
            .map(|p| p.as_str().to_owned())
            .collect(),
    })
}

/// Loads and resolves the selected profile.
pub fn load_configuration(
    sys: &dyn ConfinedSys,
    request: &LoadRequest<'_>,
) -> Result<ResolvedDomainConfiguration, LoadError> {
    let _span = tracing::info_span!("ResolveConfiguration", profile = request.profile).entered();
    let env = request.env;
    let Planned {
        loader,
        source,
        selected,
        workspace,
        domain_id,
        roots_plan,
    } = plan(sys, request)?;
    let cfg = loader.config_err();
    let profile_label = roots_plan.profile_label();

    // 3. Overlap rules on canonical labels, before anything is created.
    let fixed = [
        opened_entry(
            &loader,
            TreeRole::ConfigSource,
            label_key("(configuration source)"),
            &source,
        )?,
        opened_entry(
            &loader,
            TreeRole::Workspace,
            label_key("(agent workspace)"),
            &workspace,
        )?,
    ];
    let mut volume_paths = Vec::with_capacity(selected.volumes().len());
    let mut planned_volumes = Vec::with_capacity(selected.volumes().len());
    for v in selected.volumes() {
        let path = expand(&v.host, env, &profile_label).map_err(&cfg)?;
        let key = v.key.key("host");
        planned_volumes.push(TreeEntry {
            role: TreeRole::Volume,
            label: loader.planned_label(&key, &path)?,
            key,
            identity: None,
            ancestors: Vec::new(),
        });
        volume_paths.push(path);
    }
    let mut executables = Vec::with_capacity(selected.escalation().auto_approve.len());
    let mut executable_entries = Vec::with_capacity(executables.capacity());
    for r in &selected.escalation().auto_approve {
        let key = r.key.key("executable");
        let path = expand(&r.executable, env, Path::new("/")).map_err(&cfg)?;
        let object = loader.executable(&key, &path)?;
        executable_entries.push(opened_entry(&loader, TreeRole::Executable, key, &object)?);
        executables.push(object);
    }
    let planned: Vec<TreeEntry> = fixed
        .iter()
        .cloned()
        .chain(roots_plan.entries())
        .chain(planned_volumes)
        .chain(executable_entries.iter().cloned())
        .collect();
    check_overlaps(&planned).map_err(&cfg)?;

    // 4. Roots and volume sources.
    let roots = roots_plan.create(&loader)?;
    let mut volumes = Vec::with_capacity(volume_paths.len());
    for (v, path) in selected.volumes().iter().zip(&volume_paths) {
        let source = loader.volume(v, path, &roots.profile_dir)?;
        volumes.push(ResolvedVolumeSource {
            decl: v.clone(),
            source,
        });
    }

    // 5. Overlap rules again on the opened objects' labels, identities and
    //    containing identities.
    let mut opened: Vec<TreeEntry> = fixed.into_iter().collect();
    opened.extend(roots.entries(&loader, &roots_plan)?);
    for v in &volumes {
        opened.push(opened_entry(
            &loader,
            TreeRole::Volume,
            v.decl.key.key("host"),
            &v.source,
        )?);
    }
    opened.extend(executable_entries);
    check_overlaps(&opened).map_err(&cfg)?;

    // 6. Reopen every path through its plan after the comparisons.
    source
        .revalidate(sys)
        .map_err(loader.path_err(&label_key("(configuration source)")))?;
    workspace
        .revalidate(sys)
        .map_err(loader.path_err(&label_key("(agent workspace)")))?;
    roots.revalidate(&loader, &roots_plan)?;
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

    // 7. Digests, then environment references last.
    let record = ConfigurationFingerprintRecordV1::new(
        &selected,
        bytes(&roots.storage.label()),
        bytes(&roots.runtime.label()),
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
        storage_root: roots.storage,
        runtime_root: roots.runtime,
        profile_dir: roots.profile_dir,
        storage_domain: roots.storage_domain,
        runtime_domain: roots.runtime_domain,
        volumes,
        rules,
        environment,
        domain_id,
        fingerprint,
        fingerprint_record: record,
        policy_digest,
    })
}
