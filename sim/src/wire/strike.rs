//! One fault striking one request: what the refusal builders of `fault`, `billing` and
//! `rate_limit` all read, kept below them so none of them reaches into another for it.

use super::error::{ErrorObj, ErrorReply};
use crate::config::Shape;
use crate::faults::FaultSpec;
use crate::ids;

/// What an error fault needs to know about the request it strikes.
pub(crate) struct FaultCtx<'a> {
    pub key: &'a str,
    pub model: &'a str,
    pub now_ms: u64,
    pub user_text: &'a str,
    pub max_tokens: Option<u64>,
    pub shape: Shape,
}

/// One fault striking one request: the spec, the request, and what follows from both.
pub(super) struct Strike<'a> {
    pub(super) spec: &'a FaultSpec,
    pub(super) ctx: &'a FaultCtx<'a>,
    /// The fault's own shape, else the configured one.
    pub(super) shape: Shape,
    pub(super) status: u16,
}

impl Strike<'_> {
    /// The reply with the fault's status, addressed to the key's user as OpenRouter's are.
    pub(super) fn reply(&self, error: ErrorObj) -> ErrorReply {
        ErrorReply::new(self.status, error, Some(ids::user_id(self.ctx.key)))
    }
}
