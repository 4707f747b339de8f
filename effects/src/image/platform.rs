//! The platform images are selected for: this host's (Linux, its
//! architecture in OCI's names, and the architecture's variant).

use std::fmt;

/// An OCI platform: `os/architecture[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// This host: Linux on the architecture this binary was built for, named
    /// as OCI names it (`x86_64` is `amd64`, `aarch64` is `arm64`).
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            "loongarch64" => "loong64",
            other => other,
        };
        Platform {
            os: "linux".to_owned(),
            architecture: architecture.to_owned(),
            variant: None,
        }
    }

    /// The variant an entry without one means for this architecture
    /// (`arm64` is `v8`, `amd64` is `v1`, as containerd normalises them).
    fn default_variant(architecture: &str) -> Option<&'static str> {
        match architecture {
            "arm64" => Some("v8"),
            "amd64" => Some("v1"),
            _ => None,
        }
    }

    /// Whether an index entry for `os/architecture/variant` runs here.
    pub fn accepts(&self, os: &str, architecture: &str, variant: Option<&str>) -> bool {
        let default = Self::default_variant(&self.architecture);
        os == self.os
            && architecture == self.architecture
            && variant.or(default) == self.variant.as_deref().or(default)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_default_as_containerd_does() {
        let arm = Platform {
            os: "linux".into(),
            architecture: "arm64".into(),
            variant: None,
        };
        assert!(arm.accepts("linux", "arm64", None));
        assert!(arm.accepts("linux", "arm64", Some("v8")));
        assert!(!arm.accepts("linux", "arm64", Some("v9")));
        assert!(!arm.accepts("linux", "amd64", None));
        assert!(!arm.accepts("windows", "arm64", None));
        let host = Platform::host();
        assert_eq!(host.os, "linux");
        assert!(host.accepts("linux", &host.architecture, None));
        assert!(!host.accepts("unknown", "unknown", None));
    }
}
