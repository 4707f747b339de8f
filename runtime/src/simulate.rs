//! Seeded random walks of a model, written as traces.

use lazaret_generated::support::{Protocol, StepError};

use crate::trace::TraceLine;

/// A source of uniform choices, passed in (the core reads no randomness).
pub trait Choose {
    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize;
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small seeded generator.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Choose for SplitMix64 {
    fn below(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next_u64() % n64).unwrap_or(0)
    }
}

/// Walks up to `steps` steps from `Init`, choosing among the enabled
/// actions with `rng`; stops early where no action is enabled.
pub fn simulate<P: Protocol>(
    cx: &P::Constants,
    rng: &mut dyn Choose,
    steps: u64,
    generation: u64,
) -> Result<Vec<TraceLine>, StepError> {
    let mut state = P::init(cx)?;
    let mut out = Vec::new();
    let mut enabled = Vec::new();
    for step in 1..=steps {
        enabled.clear();
        P::enabled_actions(cx, &state, None, &mut enabled);
        if enabled.is_empty() {
            break;
        }
        let action = enabled.swap_remove(rng.below(enabled.len()));
        state = P::step(cx, &state, &action, None)?;
        out.push(TraceLine {
            model: P::NAME.to_string(),
            step,
            action: P::action_name(&action).to_string(),
            params: P::action_params(cx, &action)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            generation,
            state: Some(P::state_view(cx, &state)),
            constants: None,
            observed: None,
        });
    }
    Ok(out)
}

/// The trace of a path of actions from `Init` (e.g. a checker's
/// counterexample), each line with the state after its step. `mask` is the
/// guard the path was found with (guard mutation); `None` for the model.
pub fn trace_of_path<P: Protocol>(
    cx: &P::Constants,
    path: &[P::Action],
    mask: Option<lazaret_generated::support::GuardId>,
    generation: u64,
) -> Result<Vec<TraceLine>, StepError> {
    let mut state = P::init(cx)?;
    let mut out = Vec::with_capacity(path.len());
    for (step, action) in (1u64..).zip(path) {
        state = P::step(cx, &state, action, mask)?;
        out.push(TraceLine {
            model: P::NAME.to_string(),
            step,
            action: P::action_name(action).to_string(),
            params: P::action_params(cx, action)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            generation,
            state: Some(P::state_view(cx, &state)),
            constants: None,
            observed: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_seeded_and_bounded() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let xs: Vec<usize> = (0..100).map(|_| a.below(5)).collect();
        let ys: Vec<usize> = (0..100).map(|_| b.below(5)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 5));
        assert!((0..5).all(|k| xs.contains(&k)));
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }
}
