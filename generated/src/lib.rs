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
//! model it must be read against; `IF r = "A" THEN x ELSE IF r = "B" THEN x
//! ...` tables legitimately repeat a value (`if_same_then_else`).

pub mod support;

/// `protocol/Lazaret.tla`: the application protocol.
#[allow(
    clippy::int_plus_one,
    clippy::nonminimal_bool,
    clippy::if_same_then_else
)]
pub mod lazaret {
    include!("lazaret.rs");
}

/// `protocol/PreparedLower.tla`: prepared artifacts, leases, mounts, reclamation.
#[allow(
    clippy::int_plus_one,
    clippy::nonminimal_bool,
    clippy::if_same_then_else
)]
pub mod prepared_lower {
    include!("prepared_lower.rs");
}

/// `protocol/SessionRelease.tla`: one Session Terminal's release order.
#[allow(
    clippy::int_plus_one,
    clippy::nonminimal_bool,
    clippy::if_same_then_else
)]
pub mod session_release {
    include!("session_release.rs");
}

/// Dialect fixtures of `codegen/tests/fixtures/`, generated like the models.
pub mod fixtures {
    /// `codegen/tests/fixtures/TwoPhase.tla`
    #[allow(
        clippy::int_plus_one,
        clippy::nonminimal_bool,
        clippy::if_same_then_else
    )]
    pub mod two_phase {
        include!("fixtures/two_phase.rs");
    }
    /// `codegen/tests/fixtures/Constructs.tla`
    #[allow(
        clippy::int_plus_one,
        clippy::nonminimal_bool,
        clippy::if_same_then_else
    )]
    pub mod constructs {
        include!("fixtures/constructs.rs");
    }
}

use support::Protocol;

/// A generated model with the configuration it is checked with.
#[derive(Clone, Copy, Debug)]
pub struct ModelEntry {
    /// The TLA+ module name (what `--model` and trace files use).
    pub name: &'static str,
    /// The `.tla` file, relative to the workspace root.
    pub tla: &'static str,
    /// The `.cfg` file, relative to the workspace root.
    pub cfg_file: &'static str,
    /// The text of the `.cfg` file, compiled in.
    pub cfg_text: &'static str,
}

/// Something to do with one model, whichever it is.
pub trait ModelVisitor {
    type Output;
    fn visit<P: Protocol>(self, entry: &ModelEntry) -> Self::Output;
}

/// Every model this crate holds, protocol models first.
pub const MODELS: &[ModelEntry] = &[
    ModelEntry {
        name: "Lazaret",
        tla: "protocol/Lazaret.tla",
        cfg_file: "protocol/Lazaret.cfg",
        cfg_text: include_str!("../../protocol/Lazaret.cfg"),
    },
    ModelEntry {
        name: "PreparedLower",
        tla: "protocol/PreparedLower.tla",
        cfg_file: "protocol/PreparedLower.cfg",
        cfg_text: include_str!("../../protocol/PreparedLower.cfg"),
    },
    ModelEntry {
        name: "SessionRelease",
        tla: "protocol/SessionRelease.tla",
        cfg_file: "protocol/SessionRelease.cfg",
        cfg_text: include_str!("../../protocol/SessionRelease.cfg"),
    },
    ModelEntry {
        name: "TwoPhase",
        tla: "codegen/tests/fixtures/TwoPhase.tla",
        cfg_file: "codegen/tests/fixtures/TwoPhase.cfg",
        cfg_text: include_str!("../../codegen/tests/fixtures/TwoPhase.cfg"),
    },
    ModelEntry {
        name: "Constructs",
        tla: "codegen/tests/fixtures/Constructs.tla",
        cfg_file: "codegen/tests/fixtures/Constructs.cfg",
        cfg_text: include_str!("../../codegen/tests/fixtures/Constructs.cfg"),
    },
];

/// The Lazaret protocol with the roles this build acquires
/// (`protocol/LazaretUnrouted.cfg`): checked like the specification's
/// configuration, and the source of the product's `RequiredRoles`.
pub const LAZARET_UNROUTED: ModelEntry = ModelEntry {
    name: "Lazaret",
    tla: "protocol/Lazaret.tla",
    cfg_file: "protocol/LazaretUnrouted.cfg",
    cfg_text: include_str!("../../protocol/LazaretUnrouted.cfg"),
};

/// Configurations a model is checked in besides its own `.cfg` (by TLC and
/// stateright alike, `conformance/tests/protocol.rs`).
pub const FURTHER_CONFIGURATIONS: &[ModelEntry] = &[LAZARET_UNROUTED];

/// Runs `v` on the model called `name`; `None` if there is no such model.
pub fn visit_model<V: ModelVisitor>(name: &str, v: V) -> Option<V::Output> {
    let entry = MODELS.iter().find(|m| m.name == name)?;
    Some(match entry.name {
        "Lazaret" => v.visit::<lazaret::Model>(entry),
        "PreparedLower" => v.visit::<prepared_lower::Model>(entry),
        "SessionRelease" => v.visit::<session_release::Model>(entry),
        "TwoPhase" => v.visit::<fixtures::two_phase::Model>(entry),
        "Constructs" => v.visit::<fixtures::constructs::Model>(entry),
        _ => return None,
    })
}
