//! The closed protocol into an agent (spec ACT-2): every way a caller changes what an
//! agent does is one [`Command`] given to [`crate::Agent::send`], which checks it,
//! makes it durable in the inbox domain and only then acknowledges it ([`Ack`]). A
//! command that fails its check gets a typed [`CommandError`] and changes nothing.

use ccare_core::{ContentBlock, Message};

use crate::agent::AgentOptions;
use crate::domains::DomainError;

/// A command to an agent (ACT-2). Closed: front ends (CLI, HTTP API, gateway) speak
/// only these.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A message that opens a turn (queued after earlier turns); wakes the agent.
    /// `options`, when given, replace the agent's options from the next step on.
    UserInput {
        /// The message (its `source` says who wrote it; none means the user).
        message: Message,
        /// New options, applied before the message is queued.
        options: Option<AgentOptions>,
    },
    /// A message for the next step of the running turn (or a new turn); wakes the agent.
    Steer(Message),
    /// A message for the next step; does not wake an idle agent.
    Inject(Message),
    /// Results of caller-executed tool calls (ACT-3): exactly the open call ids of
    /// the awaiting turn, which then resumes.
    ToolResults(Vec<crate::external::CallerResult>),
    /// Cancels the running turn (H-CANCEL-1, cause `user`); without `keep_inbox`
    /// everything queued before it is dropped (H-CANCEL-3).
    Cancel {
        /// Whether queued entries survive the cancel.
        keep_inbox: bool,
    },
    /// Replaces the agent's options from the next step on.
    SetOptions(AgentOptions),
}

impl Command {
    /// `UserInput` of the user's `text` (a fresh message id, source `user`), the
    /// options unchanged: what a prompt line or a chat box sends.
    pub fn prompt(text: impl Into<String>) -> Self {
        Command::UserInput {
            message: user_message(text),
            options: None,
        }
    }

    /// The command's name as the protocol spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::UserInput { .. } => "UserInput",
            Command::Steer(_) => "Steer",
            Command::Inject(_) => "Inject",
            Command::ToolResults(_) => "ToolResults",
            Command::Cancel { .. } => "Cancel",
            Command::SetOptions(_) => "SetOptions",
        }
    }

    /// Checks the command without applying it, so a bad one changes nothing.
    pub(crate) fn check(&self) -> Result<(), CommandError> {
        let name = self.name();
        match self {
            Command::UserInput { message, options } => {
                check_message(name, message)?;
                options
                    .as_ref()
                    .map_or(Ok(()), |options| check_options(name, options))
            }
            Command::Steer(message) | Command::Inject(message) => check_message(name, message),
            Command::SetOptions(options) => check_options(name, options),
            Command::ToolResults(_) | Command::Cancel { .. } => Ok(()),
        }
    }
}

/// The user's `text` as a message with a fresh id.
pub(crate) fn user_message(text: impl Into<String>) -> Message {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.id = Some(uuid::Uuid::now_v7().to_string());
    message.source = Some(ccare_core::Source::user());
    message
}

fn check_message(command: &'static str, message: &Message) -> Result<(), CommandError> {
    let has_content = message.content.iter().any(|block| match block {
        ContentBlock::Text(text) => !text.text.trim().is_empty(),
        _ => true,
    });
    if has_content {
        Ok(())
    } else {
        Err(CommandError::EmptyMessage { command })
    }
}

fn check_options(command: &'static str, options: &AgentOptions) -> Result<(), CommandError> {
    let reason = if options.model.trim().is_empty() {
        Some("the model is empty")
    } else if options.max_steps_per_turn == 0 {
        Some("max_steps_per_turn must be at least 1")
    } else if options.tool_pool == 0 {
        Some("tool_pool must be at least 1")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CommandError::InvalidOptions { command, reason }),
        None => Ok(()),
    }
}

/// A command's acknowledgement: it is durable (or, for `Cancel` and `SetOptions`,
/// applied) and will be applied in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The inbox id of a queued message (`UserInput`, `Steer`, `Inject`).
    pub entry: Option<u64>,
}

/// Why a command was refused. Each variant has a stable code ([`CommandError::code`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommandError {
    /// The message has no content (no block, or only blank text).
    #[error("{command}: the message is empty")]
    EmptyMessage {
        /// The command.
        command: &'static str,
    },
    /// The options cannot run a step.
    #[error("{command}: invalid options: {reason}")]
    InvalidOptions {
        /// The command.
        command: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// The tool results were refused (`TOOL_RESULTS_MISMATCH`, nothing logged) or
    /// could not be logged.
    #[error("ToolResults: {0}")]
    ToolResults(#[source] crate::external::ExternalToolsError),
    /// The message resends a message that cannot be resent
    /// ([`crate::resend`]): it is not a user message on the surface, or a turn since
    /// it was answered.
    #[error("{command}: message {original} cannot be resent: {reason}")]
    NotResendable {
        /// The command.
        command: &'static str,
        /// The id the message resends.
        original: String,
        /// Why not.
        reason: &'static str,
    },
    /// The command could not be made durable; it was not applied.
    #[error("{command}: the inbox could not be written: {source}")]
    Inbox {
        /// The command.
        command: &'static str,
        /// What the storage domain said.
        #[source]
        source: DomainError,
    },
}

impl CommandError {
    /// The spec's error code.
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::EmptyMessage { .. } => "EMPTY_MESSAGE",
            CommandError::InvalidOptions { .. } => "INVALID_OPTIONS",
            CommandError::NotResendable { .. } => "NOT_RESENDABLE",
            CommandError::ToolResults(error) => error.code(),
            CommandError::Inbox { .. } => "INBOX_UNAVAILABLE",
        }
    }
}
