//! Why a request is made (spec H-LLM-2): conversation, compaction or session title.
//!
//! The purpose picks the route and travels on every request as the header
//! [`PURPOSE_HEADER`], so providers, proxies and logs can tell summaries from turns.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The header every provider request carries: `x-ccare-purpose: <purpose>`.
pub const PURPOSE_HEADER: &str = "x-ccare-purpose";

/// Why a request is made.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// A step of the user's conversation.
    #[default]
    Conversation,
    /// A summary written for a compaction.
    Compaction,
    /// A short title for a session.
    SessionTitle,
}

impl Purpose {
    /// The name used in headers, config and route budgets.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Conversation => "conversation",
            Purpose::Compaction => "compaction",
            Purpose::SessionTitle => "session-title",
        }
    }
}

impl fmt::Display for Purpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A purpose name that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown request purpose {0:?}; expected conversation, compaction or session-title")]
pub struct UnknownPurpose(pub String);

impl FromStr for Purpose {
    type Err = UnknownPurpose;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "conversation" => Ok(Purpose::Conversation),
            "compaction" => Ok(Purpose::Compaction),
            "session-title" => Ok(Purpose::SessionTitle),
            other => Err(UnknownPurpose(other.to_owned())),
        }
    }
}
