//! The enforcement namespace's network effects (spec 3.7): what the Runtime
//! Supervisor installs in, and observes of, the Domain enforcement network
//! namespace. The data these effects take and return lives in
//! `lazaret_runtime::network`.
pub mod authority;
pub mod canary;
pub mod nft;
pub mod policy_fd;
pub mod rtnl;
