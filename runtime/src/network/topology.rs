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
