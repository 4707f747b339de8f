//! The fixed v1 topology (spec 3.7 "Derived policy and readiness encoding").
use std::net::Ipv4Addr;

use crate::config::Ipv4Prefix;

/// The interface slirp4netns creates in the enforcement namespace.
pub const TAP_DEVICE: &str = "tap0";
/// The slirp4netns network, passed explicitly as `--cidr`.
pub const SLIRP_NETWORK: Ipv4Prefix = Ipv4Prefix::new([10, 137, 54, 0], 24);
/// The slirp4netns gateway.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 137, 54, 2);
/// The slirp4netns synthetic DNS endpoint.
pub const SYNTHETIC_DNS: Ipv4Addr = Ipv4Addr::new(10, 137, 54, 3);
/// The sandbox's address on the slirp4netns network.
pub const SANDBOX_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 137, 54, 100);
/// The MTU slirp4netns configures on the tap device.
pub const MTU: u32 = 65520;

/// The canary link in the enforcement namespace (spec 3.7 "Known-live
/// control"): one end of a veth whose peer lives in a short-lived canary
/// namespace.
pub const CANARY_DEVICE: &str = "cnr0";
/// The canary link's peer, in the canary namespace.
pub const CANARY_PEER_DEVICE: &str = "cnr1";
/// The canary network.
pub const CANARY_NETWORK: Ipv4Prefix = Ipv4Prefix::new([10, 137, 55, 0], 29);
/// The enforcement endpoint on [`CANARY_DEVICE`], a `/32` so the kernel
/// adds no prefix route competing with the aggregate canary deny.
pub const ENFORCEMENT_ENDPOINT: Ipv4Addr = Ipv4Addr::new(10, 137, 55, 1);
/// The allowed canary endpoint.
pub const ALLOWED_CANARY: Ipv4Addr = Ipv4Addr::new(10, 137, 55, 2);
/// The denied canary endpoint.
pub const DENIED_CANARY: Ipv4Addr = Ipv4Addr::new(10, 137, 55, 3);
/// The TCP port both canary endpoints answer challenges on.
pub const CANARY_PORT: u16 = 7;
