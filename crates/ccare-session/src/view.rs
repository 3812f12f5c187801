//! The derived model view: the messages a request would carry, folded from live events
//! (spec H-SURF-3, H-SURF-4).

use std::sync::Arc;

use ccare_core::{Message, Role};

/// One message of the derived view, with the seq of the event it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedMessage {
    /// The live event it derives from.
    pub seq: u64,
    /// `user` for user messages and tool results, `assistant` for model output.
    pub role: Role,
    /// The message.
    pub message: Arc<Message>,
}

/// The derived view at one point of the log, with the keys it is cached by.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedView {
    /// The log head (number of events) it reflects.
    pub head: u64,
    /// How many replaces the surface had seen.
    pub replace_generation: u64,
    /// How many content projections had run.
    pub content_generation: u64,
    /// The messages, in surface order.
    pub messages: Arc<[DerivedMessage]>,
}
