//! SandboxLayoutV1 and the sandbox layout rules (spec 3.2; schemas.md
//! "Trusted host configuration": persistent, volume and protected paths).
use std::collections::BTreeMap;

use super::error::{ConfigError, KeyPath};
use super::grammar::SandboxPath;

/// How bundle construction mounts a protected destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationClass {
    /// May not overlap any persistent or volume path in either direction.
    Protected,
    /// An exact transient mount that may replace a child of a persistent
    /// parent; it stays protected and may not itself be persistent state.
    TransientChild,
}

/// The closed set of product-owned sandbox mount destinations. There is no
/// unchecked constructor and no way to build one without `/workspace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLayoutV1 {
    destinations: BTreeMap<SandboxPath, DestinationClass>,
}

/// The specification-fixed Agent Workspace destination.
const WORKSPACE: &str = "/workspace";

impl SandboxLayoutV1 {
    /// A layout of `/workspace` plus `others`. Each member must satisfy the
    /// sandbox-path grammar and appear once; `/workspace` is always present
    /// and always `Protected`. Private: a caller cannot build a layout
    /// without the product's destinations (schemas.md: "no public unchecked
    /// constructor").
    fn new(others: &[(&str, DestinationClass)]) -> Result<Self, ConfigError> {
        let key = KeyPath::label("sandbox layout".to_owned());
        let mut destinations = BTreeMap::new();
        destinations.insert(
            SandboxPath::parse(&key, WORKSPACE)?,
            DestinationClass::Protected,
        );
        for (i, (path, class)) in others.iter().enumerate() {
            let member = key.index(i);
            let parsed = SandboxPath::parse(&member, path)?;
            if destinations.insert(parsed, *class).is_some() {
                return Err(ConfigError::Invalid {
                    key: member,
                    found: format!("{path:?} twice"),
                    expected: "each protected destination once",
                });
            }
        }
        Ok(Self { destinations })
    }

    /// The production layout. Bundle construction owns the list
    /// ([`crate::bundle::PROTECTED_DESTINATIONS`], spec 3.2); the
    /// configuration loader only consumes it.
    pub fn production() -> Result<Self, ConfigError> {
        Self::new(&crate::bundle::PROTECTED_DESTINATIONS)
    }

    /// The protected destinations in sorted order.
    pub fn destinations(&self) -> impl Iterator<Item = (&SandboxPath, DestinationClass)> {
        self.destinations.iter().map(|(p, c)| (p, *c))
    }

    fn destination_key(path: &SandboxPath) -> KeyPath {
        KeyPath::label(format!("(protected sandbox destination {path})"))
    }

    /// Persistent paths: pairwise neither equal nor ancestral, and clear of
    /// every protected destination except a transient child beneath them.
    pub(crate) fn check_persistent(
        &self,
        persistent: &[(KeyPath, SandboxPath)],
    ) -> Result<(), ConfigError> {
        for (i, (key, path)) in persistent.iter().enumerate() {
            if let Some((other_key, _)) = persistent[..i].iter().find(|(_, p)| p.overlaps(path)) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: other_key.clone(),
                    problem: format!("{path} equals or nests with another persistent path; expected pairwise disjoint persistent paths"),
                });
            }
            for (dest, class) in self.destinations() {
                let transient_child =
                    class == DestinationClass::TransientChild && path.strictly_contains(dest);
                if path.overlaps(dest) && !transient_child {
                    return Err(ConfigError::Conflict {
                        key: key.clone(),
                        other: Self::destination_key(dest),
                        problem: format!("{path} overlaps the protected destination {dest}; expected persistent paths disjoint from protected destinations"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Volume container paths: strictly beneath exactly one persistent path,
    /// pairwise disjoint, and disjoint from every protected destination.
    pub(crate) fn check_volumes(
        &self,
        persistent: &[(KeyPath, SandboxPath)],
        volumes: &[(KeyPath, SandboxPath)],
    ) -> Result<(), ConfigError> {
        for (i, (key, path)) in volumes.iter().enumerate() {
            if let Some((pkey, _)) = persistent.iter().find(|(_, p)| p == path) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: pkey.clone(),
                    problem: format!("{path} equals a persistent path; expected a path strictly beneath one persistent path"),
                });
            }
            let parents = persistent
                .iter()
                .filter(|(_, p)| p.strictly_contains(path))
                .count();
            if parents != 1 {
                return Err(ConfigError::Invalid {
                    key: key.clone(),
                    found: format!("{path:?} beneath {parents} persistent paths"),
                    expected: "a container path strictly beneath exactly one persistent_dirs entry",
                });
            }
            if let Some((other_key, _)) = volumes[..i].iter().find(|(_, p)| p.overlaps(path)) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: other_key.clone(),
                    problem: format!("{path} equals or nests with another volume container path; expected pairwise disjoint volume paths"),
                });
            }
            if let Some((dest, _)) = self.destinations().find(|(d, _)| d.overlaps(path)) {
                return Err(ConfigError::Conflict {
                    key: key.clone(),
                    other: Self::destination_key(dest),
                    problem: format!("{path} overlaps the protected destination {dest}; expected volume paths disjoint from protected destinations"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_layout_always_contains_workspace() {
        let layout = SandboxLayoutV1::new(&[]).expect("empty");
        let all: Vec<&str> = layout.destinations().map(|(p, _)| p.as_str()).collect();
        assert_eq!(all, ["/workspace"]);
        let m = SandboxLayoutV1::new(&[("/workspace", DestinationClass::TransientChild)])
            .expect_err("dup")
            .to_string();
        assert!(m.contains("once"), "{m}");
        let m = SandboxLayoutV1::new(&[
            ("/proc", DestinationClass::Protected),
            ("/proc", DestinationClass::Protected),
        ])
        .expect_err("dup")
        .to_string();
        assert!(m.contains("once"), "{m}");
        assert!(SandboxLayoutV1::new(&[("/", DestinationClass::Protected)]).is_err());
        assert!(SandboxLayoutV1::new(&[("proc", DestinationClass::Protected)]).is_err());
        let prod = SandboxLayoutV1::production().expect("production");
        assert!(prod
            .destinations()
            .any(|(p, c)| p.as_str() == "/workspace" && c == DestinationClass::Protected));
    }
}
