//! The sans-IO core of one Domain: events in, commands out, every
//! model-visible decision through the generated `step`.
//!
//! The core owns the abstract model state. Each event names the model action
//! it stands for (the effects side maps a request, an effect completion, a
//! process exit or a timer expiry to its action); the core takes the step or
//! refuses it with the failing guard, and returns the commands to carry out
//! as data: the trace line of the step, the effect that realises a
//! requested step, the reply to a request. No I/O, no clock, no randomness.

use lazaret_generated::support::{GuardInfo, Protocol, StepError};

use crate::trace::TraceLine;

/// An input to the core, with the model action it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<A> {
    /// A client or coordinator request to take `action`.
    Request { request: u64, action: A },
    /// An effect the core asked for has completed; the world moved by `action`.
    EffectCompleted { effect: u64, action: A },
    /// A supervised process exited.
    ProcessExited { process: u64, action: A },
    /// A timer the effects side armed has expired.
    TimerExpired { timer: u64, action: A },
}

impl<A> Event<A> {
    fn action(&self) -> &A {
        match self {
            Self::Request { action, .. }
            | Self::EffectCompleted { action, .. }
            | Self::ProcessExited { action, .. }
            | Self::TimerExpired { action, .. } => action,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Request { .. } => "request",
            Self::EffectCompleted { .. } => "effect completion",
            Self::ProcessExited { .. } => "process exit",
            Self::TimerExpired { .. } => "timer expiry",
        }
    }
}

/// An output of the core, to be carried out by the effects side.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Append this line to the generation's trace file.
    Trace(TraceLine),
    /// Perform the effect that realises a requested model step.
    Perform {
        effect: u64,
        action: &'static str,
        params: Vec<(&'static str, String)>,
    },
    /// Answer request `request`: the step was taken.
    Reply { request: u64 },
}

/// A refused event; the core state is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The action is not enabled: the first false guard conjunct.
    #[error("{event}: {model} action {action} is not enabled: guard {} (line {}) is false: {}", .guard.index, .guard.line, .guard.text)]
    Disabled {
        event: &'static str,
        model: &'static str,
        action: &'static str,
        guard: &'static GuardInfo,
    },
    /// The step would leave a variable's `TypeOK` range.
    #[error("{event}: {source}")]
    Domain {
        event: &'static str,
        #[source]
        source: StepError,
    },
    /// The step would break an invariant of the model: a defect of the
    /// model or of the code that chose the step; the core refuses it.
    #[error("{event}: {model} action {action} would violate invariant {invariant}")]
    Invariant {
        event: &'static str,
        model: &'static str,
        action: &'static str,
        invariant: &'static str,
    },
}

/// The core of one Domain generation.
#[derive(Debug)]
pub struct Core<P: Protocol> {
    cx: P::Constants,
    state: P::State,
    generation: u64,
    steps: u64,
    next_effect: u64,
}

impl<P: Protocol> Core<P> {
    /// A core in the model's initial state for Domain generation `generation`.
    pub fn new(cx: P::Constants, generation: u64) -> Result<Self, StepError> {
        let state = P::init(&cx)?;
        Ok(Self {
            cx,
            state,
            generation,
            steps: 0,
            next_effect: 1,
        })
    }

    /// A core starting from `state` (a recovery without the generation's
    /// earlier history); `state` must satisfy every invariant.
    pub fn from_state(
        cx: P::Constants,
        generation: u64,
        state: P::State,
    ) -> Result<Self, &'static str> {
        if let Some(inv) = P::invariants().iter().find(|i| !(i.holds)(&cx, &state)) {
            return Err(inv.name);
        }
        Ok(Self {
            cx,
            state,
            generation,
            steps: 0,
            next_effect: 1,
        })
    }

    /// The abstract model state.
    pub fn state(&self) -> &P::State {
        &self.state
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The constants the core was sized with.
    pub fn constants(&self) -> &P::Constants {
        &self.cx
    }

    /// The Domain generation the core's trace lines carry.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether `action` is enabled now (the step is not taken).
    pub fn check(&self, action: &P::Action) -> Result<(), CoreError> {
        self.next_state("check", action).map(|_| ())
    }

    /// The state after `action`, with every invariant checked on it.
    fn next_state(&self, event: &'static str, action: &P::Action) -> Result<P::State, CoreError> {
        let name = P::action_name(action);
        let next = P::step(&self.cx, &self.state, action, None).map_err(|e| match e {
            StepError::GuardFailed { model, guard } => CoreError::Disabled {
                event,
                model,
                action: name,
                guard,
            },
            source @ StepError::Domain { .. } => CoreError::Domain { event, source },
        })?;
        if let Some(inv) = P::invariants().iter().find(|i| !(i.holds)(&self.cx, &next)) {
            return Err(CoreError::Invariant {
                event,
                model: P::NAME,
                action: name,
                invariant: inv.name,
            });
        }
        Ok(next)
    }

    /// Takes the step of an effect that is already done (`event` names
    /// where it came from); returns its trace line.
    pub fn take(
        &mut self,
        event: &'static str,
        action: &P::Action,
    ) -> Result<TraceLine, CoreError> {
        let name = P::action_name(action);
        let span = tracing::info_span!("model_step", model = P::NAME, action = name);
        let _entered = span.enter();
        let next = self.next_state(event, action)?;
        self.state = next;
        self.steps += 1;
        tracing::debug!(step = self.steps, "model step taken");
        Ok(TraceLine {
            model: P::NAME.to_string(),
            step: self.steps,
            action: name.to_string(),
            params: P::action_params(&self.cx, action)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            generation: self.generation,
            state: Some(P::state_view(&self.cx, &self.state)),
            constants: None,
            observed: None,
        })
    }

    /// Takes the step `event` stands for, or refuses it.
    pub fn handle(&mut self, event: Event<P::Action>) -> Result<Vec<Command>, CoreError> {
        let action = event.action();
        let name = P::action_name(action);
        let line = self.take(event.kind(), action)?;
        let params = P::action_params(&self.cx, action);
        let mut out = vec![Command::Trace(line)];
        if let Event::Request { request, .. } = event {
            out.push(Command::Perform {
                effect: self.next_effect,
                action: name,
                params,
            });
            self.next_effect += 1;
            out.push(Command::Reply { request });
        }
        Ok(out)
    }
}
