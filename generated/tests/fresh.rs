//! The checked-in generated Rust must match what `lazaret-codegen` produces
//! from the current `.tla` files.

use std::path::Path;

use lazaret_codegen::{emit::REGENERATE, stale_targets, TARGETS};

#[test]
fn generated_rust_is_fresh() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().ok_or("generated/ has no parent")?;
    let present = TARGETS.iter().filter(|t| root.join(t.tla).exists()).count();
    assert!(
        present >= 2,
        "expected at least the dialect fixtures, found {present} models"
    );
    let stale = stale_targets(root)?;
    let names: Vec<_> = stale
        .iter()
        .map(|t| format!("{} (from {})", t.rust, t.tla))
        .collect();
    assert!(
        names.is_empty(),
        "stale generated Rust: {}\nregenerate with: {REGENERATE}",
        names.join(", ")
    );
    Ok(())
}
