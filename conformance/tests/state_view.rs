//! `state_from_view` inverts `state_view` (a trace's recorded start state
//! is read back exactly) and refuses what is not a state of the model.
use std::collections::{HashSet, VecDeque};

use lazaret_generated::support::{Cfg, Protocol};
use lazaret_generated::{
    lazaret, prepared_lower, session_release, ModelEntry, LAZARET_UNROUTED, MODELS,
};

/// Breadth-first over at most `limit` reachable states: each one's view
/// reads back as the same state.
fn round_trip<P: Protocol>(entry: &ModelEntry, limit: usize) -> Result<usize, String> {
    let cfg = Cfg::parse(entry.cfg_file, entry.cfg_text).map_err(|e| e.to_string())?;
    let cx = P::constants(&cfg).map_err(|e| e.to_string())?;
    let init = P::init(&cx).map_err(|e| e.to_string())?;
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([init]);
    let mut actions = Vec::new();
    while let Some(st) = queue.pop_front() {
        if seen.len() >= limit {
            break;
        }
        if !seen.insert(st.clone()) {
            continue;
        }
        let view = P::state_view(&cx, &st);
        match P::state_from_view(&cx, &view) {
            Some(back) if back == st => {}
            other => return Err(format!("{}: {view} read back as {other:?}", P::NAME)),
        }
        actions.clear();
        P::enabled_actions(&cx, &st, None, &mut actions);
        for a in &actions {
            if let Ok(next) = P::step(&cx, &st, a, None) {
                queue.push_back(next);
            }
        }
    }
    Ok(seen.len())
}

fn entry(name: &str) -> Result<&'static ModelEntry, String> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("no model {name}"))
}

#[test]
fn every_reachable_view_reads_back_as_its_state() -> Result<(), String> {
    assert_eq!(
        round_trip::<lazaret::Model>(entry("Lazaret")?, 400_000)?,
        151_350
    );
    assert_eq!(
        round_trip::<lazaret::Model>(&LAZARET_UNROUTED, 300_000)?,
        138_678
    );
    assert_eq!(
        round_trip::<prepared_lower::Model>(entry("PreparedLower")?, 30_000)?,
        30_000
    );
    assert_eq!(
        round_trip::<session_release::Model>(entry("SessionRelease")?, 60_000)?,
        47_952
    );
    Ok(())
}

#[test]
fn what_is_not_a_state_is_refused() -> Result<(), String> {
    let e = entry("Lazaret")?;
    let cfg = Cfg::parse(e.cfg_file, e.cfg_text).map_err(|e| e.to_string())?;
    let cx = lazaret::Constants::from_cfg(&cfg).map_err(|e| e.to_string())?;
    let init = lazaret::init(&cx).map_err(|e| e.to_string())?;
    let view = lazaret::state_view(&cx, &init);
    let edit = |f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut v = view.clone();
        if let Some(o) = v.as_object_mut() {
            f(o);
        }
        lazaret::state_from_view(&cx, &v)
    };
    assert!(edit(&|_| {}).is_some());
    assert!(edit(&|o| {
        o.remove("decision");
    })
    .is_none());
    assert!(edit(&|o| {
        o.insert("extra".into(), serde_json::json!(1));
    })
    .is_none());
    // Outside TypeOK: gen in 0..MaxGen (2), an unknown enum string, an
    // unknown model value, a function missing a key.
    assert!(edit(&|o| {
        o.insert("gen".into(), serde_json::json!(3));
    })
    .is_none());
    assert!(edit(&|o| {
        o.insert("decision".into(), serde_json::json!("Paused"));
    })
    .is_none());
    assert!(edit(&|o| {
        o.insert("lockHolder".into(), serde_json::json!("c9"));
    })
    .is_none());
    assert!(edit(&|o| {
        o.insert("lockHolder".into(), serde_json::json!("c2"));
    })
    .is_some());
    assert!(edit(&|o| {
        if let Some(hc) = o.get_mut("hc").and_then(|h| h.as_object_mut()) {
            hc.remove("c1");
        }
    })
    .is_none());
    Ok(())
}
