//! The enforcement namespace's network state as data (spec 3.7): what the
//! Runtime Supervisor installs from the derived policy, what it must
//! observe afterwards, and the files the sandbox reads. No syscalls here;
//! `lazaret_effects::network` performs and observes.
pub mod attestation;
pub mod plan;
pub mod projection;
pub mod topology;

pub use plan::{
    canary_probe_route, canary_route, egress_ruleset, expected_filter, expected_projection,
    install_routes, network_summary, resolv_conf, PlanError, CANARY_ALLOWED,
};
pub use projection::{
    FilterProjection, FilterRule, LinkRecord, PolicyProjection, ProjectedRoute, RouteNextHop,
    FILTER_PROJECTION_VERSION, LINK_RECORD_VERSION, PROJECTION_VERSION,
};
