//! A session's open escalation request as both ends track it (spec 3.8):
//! cancellations, acknowledgements, chunks and the result must name it
//! exactly.
use crate::ids::EscalationRequestId;
use crate::mailbox::MailboxRequest;
use crate::records::{Digest, SessionBinding};

/// The longest justification shown on a developer prompt, in bytes.
pub const MAX_JUSTIFICATION: usize = 4096;

/// A session's open request, which its cancellations and acknowledgements
/// must name exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRequest {
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    /// SHA-256 of the request's payload bytes.
    pub request_sha256: Digest,
}

impl OpenRequest {
    /// The open request `request` (with payload digest `digest`) starts.
    pub fn of(request: &MailboxRequest, digest: Digest) -> Self {
        Self {
            session_binding: request.session_binding.clone(),
            request_id: request.request_id,
            request_sha256: digest,
        }
    }
}
