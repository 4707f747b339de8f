//! The Client CLI's side of a developer prompt (spec 3.8, DX-4, FR-5): while
//! the Host Coordinator has this session's terminal on the prompt route,
//! the keys typed go to the prompt's answer line, never to the sandbox, and
//! the answer leaves as a `DeveloperDecision` signed by this session's
//! Session Anchor, which never leaves this process. What the prompt shows
//! and which answers approve is `lazaret_runtime::escalation::prompt`.
use std::io::Write;
use std::sync::Mutex;

use ed25519_dalek::SigningKey;
use lazaret_runtime::escalation::answer::{code_of, Answer, AnswerLine};
use lazaret_runtime::protocol::mailbox::{
    DeveloperDecision, DeveloperDecisionKind, SignedPayload, SignedProtocolRecord,
};
use lazaret_runtime::protocol::records::{ProtocolRecord, SessionBinding};
use lazaret_runtime::protocol::signing::sign_payload;
use lazaret_runtime::protocol::PROTOCOL_VERSION;
use lazaret_runtime::records::ids::EscalationRequestId;
use lazaret_runtime::terminal::protocol::{
    EscalationPrompt, SessionDecision, SessionTerminalEvent,
};

/// The open prompt and its answer so far.
#[derive(Debug)]
struct Open {
    prompt: EscalationPrompt,
    line: AnswerLine,
}

/// This session's prompt state, shared by the CLI's message loop (which
/// opens and closes prompts) and its input thread (which types into it).
pub(super) struct ClientPrompt {
    anchor: SigningKey,
    binding: SessionBinding,
    open: Mutex<Option<Open>>,
}

impl std::fmt::Debug for ClientPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPrompt")
            .field("session", &self.binding.session_id)
            .finish_non_exhaustive()
    }
}

/// What the input thread does with a read of typed bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Typed {
    /// No prompt is open: the bytes are the sandbox's.
    Sandbox,
    /// The prompt took them; no answer yet.
    Prompt,
    /// The prompt's answer, to send.
    Answered(SessionTerminalEvent),
}

impl ClientPrompt {
    /// The prompt state of the session `binding` names, answering with
    /// `anchor`, its Session Anchor.
    pub fn new(anchor: SigningKey, binding: SessionBinding) -> Self {
        Self {
            anchor,
            binding,
            open: Mutex::new(None),
        }
    }

    /// The coordinator routed the terminal to `prompt`; returns the code
    /// that approves it. Codes are drawn from the kernel's random source,
    /// this one now and one for each showing of an edit (empty, so nothing
    /// approves, if it cannot be read).
    pub fn open(&self, prompt: &EscalationPrompt) -> String {
        fn draw() -> String {
            super::session::random_bytes::<4>()
                .map(code_of)
                .unwrap_or_default()
        }
        let approve = draw();
        if let Ok(mut open) = self.open.lock() {
            *open = Some(Open {
                prompt: prompt.clone(),
                line: AnswerLine::new(prompt.command_argv.clone(), approve.clone(), Box::new(draw)),
            });
        }
        approve
    }

    /// The coordinator closed the prompt of `request_id` (answered,
    /// timed out or withdrawn).
    pub fn close(&self, request_id: EscalationRequestId) {
        if let Ok(mut open) = self.open.lock() {
            if open
                .as_ref()
                .is_some_and(|o| o.prompt.request_id == request_id)
            {
                *open = None;
            }
        }
    }

    /// Typed `bytes`: the sandbox's when no prompt is open; otherwise the
    /// prompt's, echoed on `echo` (with the edit's and the confirmation's
    /// text), and once they make an answer, its signed decision. Bytes
    /// after the answer are dropped: they were typed at the prompt.
    pub fn typed(&self, bytes: &[u8], echo: &mut dyn Write) -> Typed {
        let Ok(mut guard) = self.open.lock() else {
            return Typed::Sandbox;
        };
        let Some(open) = guard.as_mut() else {
            return Typed::Sandbox;
        };
        let (echoed, answer) = open.line.feed(bytes);
        let _ = echo.write_all(&echoed).and_then(|()| echo.flush());
        let Some(answer) = answer else {
            return Typed::Prompt;
        };
        let prompt = &open.prompt;
        let (decision, approved_command_argv) = match answer {
            Answer::Approve(argv) => (DeveloperDecisionKind::Approve, argv),
            Answer::Deny => (DeveloperDecisionKind::Deny, Vec::new()),
        };
        let decision = DeveloperDecision {
            protocol_version: PROTOCOL_VERSION,
            session_binding: self.binding.clone(),
            request_id: prompt.request_id,
            request_sha256: prompt.request_sha256,
            decision,
            approved_command_argv,
        };
        let session_id = prompt.session_id;
        *guard = None;
        match self.sign(&decision) {
            Some(record) => Typed::Answered(SessionTerminalEvent::Decision(SessionDecision {
                session_id,
                record,
            })),
            // Unencodable (cannot happen for a vector that came encoded):
            // no answer is sent; the prompt times out as denied.
            None => Typed::Prompt,
        }
    }

    fn sign(&self, decision: &DeveloperDecision) -> Option<SignedProtocolRecord> {
        let payload_bytes = decision.encode().ok()?;
        let signature = sign_payload(&self.anchor, DeveloperDecision::NAME, &payload_bytes);
        Some(SignedProtocolRecord::DeveloperDecision(SignedPayload {
            payload_bytes,
            signature,
        }))
    }
}
