//! Rust produced from `protocol/*.tla`.
