//! Rust produced from `protocol/*.tla` by `lazaret-codegen`.
//!
//! Every `*.rs` file under `src/` other than this shell and `support.rs` is
//! generated: regenerate with `cargo run -p lazaret-codegen -- --write`; the
//! `fresh` test fails when a checked-in file is stale.
//!
//! Lints allowed on generated modules, and why: the emitter keeps the shape of
//! the TLA+ text (one function per guard conjunct, `x + 1 <= y` as written,
//! `~(a /\ b)` as written), so clippy's rewrite suggestions
//! (`int_plus_one`, `nonminimal_bool`) would make the Rust diverge from the
//! model it must be read against.

pub mod support;

/// Dialect fixtures of `codegen/tests/fixtures/`, generated like the models.
pub mod fixtures {
    /// `codegen/tests/fixtures/TwoPhase.tla`
    #[allow(clippy::int_plus_one, clippy::nonminimal_bool)]
    pub mod two_phase {
        include!("fixtures/two_phase.rs");
    }
    /// `codegen/tests/fixtures/Constructs.tla`
    #[allow(clippy::int_plus_one, clippy::nonminimal_bool)]
    pub mod constructs {
        include!("fixtures/constructs.rs");
    }
}
