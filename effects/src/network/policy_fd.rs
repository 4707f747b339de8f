//! Policy transport (spec 3.7 "Derived policy and readiness encoding"): the
//! Host Coordinator writes the derived policy's canonical bytes into a
//! memfd and seals it against every change; the Runtime Supervisor
//! inherits the descriptor, verifies the seals and the digest, and decodes
//! only canonical v1 bytes. Nothing the sandbox supplies becomes policy.
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};

use lazaret_runtime::config::{DerivedNetworkPolicy, PolicyDecodeError};
use rustix::fs::SealFlags;

/// The seals a policy memfd must carry: no write, no size change, no
/// further seal change.
const REQUIRED_SEALS: SealFlags = SealFlags::WRITE
    .union(SealFlags::GROW)
    .union(SealFlags::SHRINK)
    .union(SealFlags::SEAL);

/// The largest policy the supervisor reads (a v1 policy of every
/// configurable prefix is far smaller).
const POLICY_MAX_BYTES: u64 = 1 << 20;

/// Why the policy descriptor cannot be made or trusted.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFdError {
    #[error("creating the policy memfd: {0}")]
    Create(#[source] io::Error),
    #[error("writing the policy memfd: {0}")]
    Write(#[source] io::Error),
    #[error("sealing the policy memfd: {0}")]
    Seal(#[source] io::Error),
    #[error("reading the seals of the policy descriptor: {0}")]
    ReadSeals(#[source] io::Error),
    #[error("the policy descriptor carries seals {found:?}; expected at least {expected:?} (write, grow, shrink and seal)")]
    NotSealed {
        found: SealFlags,
        expected: SealFlags,
    },
    #[error("the policy descriptor holds {size} bytes; expected at most {POLICY_MAX_BYTES}")]
    TooLarge { size: u64 },
    #[error("reading the policy descriptor: {0}")]
    Read(#[source] io::Error),
    #[error("the policy's digest is {found}; expected {expected} (the digest in the plan)")]
    Digest { found: String, expected: String },
    #[error(transparent)]
    Decode(#[from] PolicyDecodeError),
}

/// HC: a sealed memfd holding `policy`'s canonical bytes, positioned at 0.
pub fn seal_policy(policy: &DerivedNetworkPolicy) -> Result<OwnedFd, PolicyFdError> {
    use rustix::fs::MemfdFlags as M;
    let fd = rustix::fs::memfd_create("lazaret-network-policy", M::CLOEXEC | M::ALLOW_SEALING)
        .map_err(|e| PolicyFdError::Create(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&policy.canonical_bytes())
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
        .map_err(PolicyFdError::Write)?;
    rustix::fs::fcntl_add_seals(&file, REQUIRED_SEALS)
        .map_err(|e| PolicyFdError::Seal(e.into()))?;
    Ok(file.into())
}

/// RS: the policy in `fd`, trusted only when the descriptor is sealed
/// against change and its bytes are canonical v1 with digest `expected`.
pub fn read_sealed_policy(
    fd: OwnedFd,
    expected: &[u8; 32],
) -> Result<DerivedNetworkPolicy, PolicyFdError> {
    let seals =
        rustix::fs::fcntl_get_seals(fd.as_fd()).map_err(|e| PolicyFdError::ReadSeals(e.into()))?;
    if !seals.contains(REQUIRED_SEALS) {
        return Err(PolicyFdError::NotSealed {
            found: seals,
            expected: REQUIRED_SEALS,
        });
    }
    let size = rustix::fs::fstat(&fd)
        .map_err(|e| PolicyFdError::Read(e.into()))?
        .st_size;
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    if size > POLICY_MAX_BYTES {
        return Err(PolicyFdError::TooLarge { size });
    }
    // pread from 0: the offset is shared with HC's copy of the descriptor.
    let mut file = std::fs::File::from(fd);
    file.seek(SeekFrom::Start(0)).map_err(PolicyFdError::Read)?;
    let mut bytes = Vec::new();
    file.take(POLICY_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(PolicyFdError::Read)?;
    let policy = DerivedNetworkPolicy::from_canonical_bytes(&bytes)?;
    let digest = policy.digest();
    if &digest.0 != expected {
        return Err(PolicyFdError::Digest {
            found: digest.to_string(),
            expected: hex::encode(expected),
        });
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_runtime::config::EffectivePolicy;

    fn policy() -> DerivedNetworkPolicy {
        let allow = [lazaret_runtime::config::Ipv4Prefix::new([10, 99, 0, 5], 32)];
        let deny = [lazaret_runtime::config::Ipv4Prefix::new([8, 8, 8, 0], 24)];
        match EffectivePolicy::from_lists(&allow, &deny) {
            Ok(p) => p.derived_policy(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_sealed_policy_reads_back_only_with_its_digest() -> Result<(), PolicyFdError> {
        let p = policy();
        let fd = seal_policy(&p)?;
        let again = fd.try_clone().map_err(PolicyFdError::Read)?;
        assert_eq!(read_sealed_policy(fd, &p.digest().0)?, p);
        let wrong = [0u8; 32];
        assert!(matches!(
            read_sealed_policy(again, &wrong),
            Err(PolicyFdError::Digest { .. })
        ));
        Ok(())
    }

    #[test]
    fn an_unsealed_descriptor_is_refused_before_it_is_read(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let p = policy();
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::ALLOW_SEALING)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&p.canonical_bytes())?;
        // Every seal but WRITE: a writer could still change the bytes.
        rustix::fs::fcntl_add_seals(&file, SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL)?;
        match read_sealed_policy(file.into(), &p.digest().0) {
            Err(PolicyFdError::NotSealed { found, .. }) => {
                assert!(!found.contains(SealFlags::WRITE))
            }
            other => panic!("expected NotSealed, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn a_sealed_descriptor_cannot_be_written() -> Result<(), PolicyFdError> {
        let fd = seal_policy(&policy())?;
        let mut file = std::fs::File::from(fd);
        assert!(file.write_all(b"x").is_err());
        Ok(())
    }
}
