//! External tools (spec ACT-3): tools a turn declares that the host does not run.
//!
//! A user input may carry its own tools ([`Agent::prompt_with_tools`]); they are kept in
//! the logged `user/message` (its `tools` field, which no provider encoder reads), so the
//! turn's tool set is durable and every request of the turn carries it beside the host's
//! tools. When a step calls one of them, the local calls run as usual, the caller's are
//! logged as `tool/call{executor: "caller"}` and the step waits, open, in the durable
//! **awaiting-tools** state ([`ccare_session::LogState::awaiting_calls`]): repair,
//! validators and reload leave it alone. [`Agent::tool_results`] with exactly the open
//! ids logs the results and resumes the turn; [`Agent::cancel`] of an awaiting turn
//! answers the calls with `ABORTED_BEFORE_DISPATCH` and ends the turn `aborted`.

use std::collections::{BTreeSet, HashSet};

use ccare_core::kinds::{
    ASSISTANT_MESSAGE, AssistantReply, StepEnd, ToolError, ToolResult, TurnEnd, TurnEndReason,
    USER_MESSAGE, UserMessage,
};
use ccare_core::{ContentBlock, EventDraft, Message, Source, SurfaceOp, ToolCallBlock};
use ccare_llm::{CancellationToken, ToolSpec};
use serde::{Deserialize, Serialize};

use crate::agent::{ActiveTurn, Agent, CancelCause};
use crate::turn::ABORTED_BEFORE_DISPATCH;

/// The `user/message` field that holds the tools its turn declares.
pub const TURN_TOOLS_FIELD: &str = "tools";

/// The error code of a result set that does not answer exactly the open calls.
pub const TOOL_RESULTS_MISMATCH: &str = "TOOL_RESULTS_MISMATCH";

/// The caller's answer to one caller-executed call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallerResult {
    /// The id of the call it answers.
    pub call_id: String,
    /// The result's content, as the model will read it.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
}

impl CallerResult {
    /// A result whose content is one text block.
    pub fn text(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }
    }
}

/// Why a turn's tools or a set of tool results was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalToolsError {
    /// The results do not answer exactly the open caller-executed calls (unknown,
    /// missing or duplicate ids, or nothing awaits); nothing was logged.
    #[error(
        "TOOL_RESULTS_MISMATCH: the session awaits results for {expected:?}, the results answer {got:?}"
    )]
    Mismatch {
        /// The open caller-executed call ids, in call order.
        expected: Vec<String>,
        /// The ids the results named, in their order.
        got: Vec<String>,
    },
    /// A declared tool has the name of a host tool or of another declared tool.
    #[error("TOOL_NAME_TAKEN: a tool named {0:?} is already declared")]
    NameTaken(String),
    /// The session refused an append or a flush.
    #[error("the tool results could not be logged: {0}")]
    Log(String),
}

impl ExternalToolsError {
    /// The stable code of the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Mismatch { .. } => TOOL_RESULTS_MISMATCH,
            Self::NameTaken(_) => "TOOL_NAME_TAKEN",
            Self::Log(_) => "TOOL_RESULTS_NOT_LOGGED",
        }
    }
}

/// The tools the open turn declared (every `user/message` of the turn, first name wins),
/// read from the log so a restarted process sees the same set.
pub(crate) fn turn_tools(agent: &Agent) -> Vec<ToolSpec> {
    agent.inner.session.with_log(|log| {
        let Some(start) = log.state().open_turn_seq else {
            return Vec::new();
        };
        let mut tools: Vec<ToolSpec> = Vec::new();
        let events = log.events();
        let first = events.partition_point(|event| event.seq() < start);
        for event in &events[first..] {
            if event.kind() != USER_MESSAGE || !event.data_json().contains(TURN_TOOLS_FIELD) {
                continue;
            }
            let Ok(user) = event.decode::<UserMessage>() else {
                continue;
            };
            for tool in declared(&user.message) {
                if tools.iter().all(|known| known.name != tool.name) {
                    tools.push(tool);
                }
            }
        }
        tools
    })
}

/// The tools `message` declares in its `tools` field (none when absent or unreadable).
fn declared(message: &Message) -> Vec<ToolSpec> {
    message
        .extra
        .get(TURN_TOOLS_FIELD)
        .and_then(|value| serde_json::from_value::<Vec<ToolSpec>>(value.clone()).ok())
        .unwrap_or_default()
}

impl Agent {
    /// Queues the user's text as a followup whose turn declares `tools`, run by the
    /// caller (ACT-3). Refused when a name is a host tool's or repeats.
    pub fn prompt_with_tools(
        &self,
        text: impl Into<String>,
        tools: Vec<ToolSpec>,
    ) -> Result<u64, ExternalToolsError> {
        let message = self.user_message_with_tools(text, tools)?;
        Ok(self.followup(message))
    }

    /// The user's message declaring `tools` for its turn (ACT-3), for a `UserInput`
    /// command. Refused when a name is that of a host tool the agent offers (its
    /// current options' [`crate::AgentOptions::hidden_tools`] are free) or repeats.
    pub fn user_message_with_tools(
        &self,
        text: impl Into<String>,
        tools: Vec<ToolSpec>,
    ) -> Result<Message, ExternalToolsError> {
        let hidden = self.inner.options.lock().hidden_tools.clone();
        self.user_message_with_tools_hiding(text, tools, &hidden)
    }

    /// [`Agent::user_message_with_tools`] for a turn whose options will hide `hidden`
    /// (a `UserInput` that carries new options): those host tools' names are free.
    pub fn user_message_with_tools_hiding(
        &self,
        text: impl Into<String>,
        tools: Vec<ToolSpec>,
        hidden: &BTreeSet<String>,
    ) -> Result<Message, ExternalToolsError> {
        let host_tools = self.inner.host.tool_names();
        let mut seen = HashSet::new();
        for tool in &tools {
            let taken = host_tools.contains(&tool.name) && !hidden.contains(&tool.name);
            if taken || !seen.insert(tool.name.clone()) {
                return Err(ExternalToolsError::NameTaken(tool.name.clone()));
            }
        }
        let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
        message.id = Some(uuid::Uuid::now_v7().to_string());
        message.source = Some(Source::user());
        if !tools.is_empty() {
            let value = serde_json::to_value(&tools)
                .map_err(|error| ExternalToolsError::Log(error.to_string()))?;
            message.extra.insert(TURN_TOOLS_FIELD.to_owned(), value);
        }
        Ok(message)
    }

    /// The caller-executed calls the session awaits, in call order; empty when no step
    /// awaits tools (ACT-3). Derived from the log, so a new process sees it too.
    pub fn awaiting_tools(&self) -> Vec<String> {
        self.inner
            .session
            .with_log(|log| log.state().awaiting_calls())
    }

    /// Whether a step awaits caller-executed results (cheaper than [`Agent::awaiting_tools`]).
    pub(crate) fn is_awaiting_tools(&self) -> bool {
        self.inner
            .session
            .with_log(|log| !log.state().awaiting_calls().is_empty())
    }

    /// Answers the awaiting caller-executed calls and resumes the turn (ACT-3). The
    /// results must name exactly the open ids, each once; otherwise the refusal is
    /// [`ExternalToolsError::Mismatch`] and nothing is logged. Returns once the results
    /// and the step's end are durable; the turn goes on in the background.
    pub async fn tool_results(&self, results: Vec<CallerResult>) -> Result<(), ExternalToolsError> {
        let got: Vec<String> = results
            .iter()
            .map(|result| result.call_id.clone())
            .collect();
        let mut changes = self.inner.idle.subscribe();
        let (expected, turn, step, calls) = loop {
            let expected = self.awaiting_tools();
            let mismatch = || ExternalToolsError::Mismatch {
                expected: expected.clone(),
                got: got.clone(),
            };
            let unique: HashSet<&String> = got.iter().collect();
            if expected.is_empty()
                || unique.len() != got.len()
                || unique != expected.iter().collect::<HashSet<_>>()
            {
                return Err(mismatch());
            }
            let (turn, step, calls) = self.open_step_calls().ok_or_else(mismatch)?;
            {
                let mut state = self.inner.state.lock();
                if !state.running {
                    state.running = true;
                    state.active = Some(ActiveTurn {
                        token: CancellationToken::new(),
                        cause: None,
                        keep_inbox: false,
                        cancelled_at: None,
                    });
                    break (expected, turn, step, calls);
                }
            }
            // The driver has not let go yet of the step that just began to await (its
            // `awaiting-tools` item may be out already), or other results or a cancel
            // are being applied: check again once it lets go.
            if changes.changed().await.is_err() {
                return Err(mismatch());
            }
        };
        // Another `tool_results` may have answered them between the check and the claim.
        if self.awaiting_tools() != expected {
            self.release_driver(None);
            return Err(ExternalToolsError::Mismatch { expected, got });
        }
        self.bump_idle();
        let logged = self.log_caller_results(turn, step, &calls, &expected, results, None);
        let logged = match logged {
            Ok(()) => self
                .inner
                .session
                .flush()
                .await
                .map_err(|error| ExternalToolsError::Log(error.to_string())),
            Err(error) => Err(error),
        };
        if let Err(error) = logged {
            self.release_driver(None);
            return Err(error);
        }
        let agent = self.clone();
        tokio::spawn(async move {
            let reason = crate::turn::resume_turn(&agent, turn, step).await;
            crate::turn::after_turn(&agent, reason).await;
            agent.drive().await;
        });
        Ok(())
    }

    /// Ends an awaiting turn on cancel (ACT-3): `ABORTED_BEFORE_DISPATCH` for each open
    /// call, `step/end{interrupted}`, `turn/end{aborted}`. Returns whether a turn
    /// awaited (and so was ended here).
    pub(crate) async fn cancel_awaiting(&self, cause: &CancelCause, keep_inbox: bool) -> bool {
        let expected = self.awaiting_tools();
        if expected.is_empty() {
            return false;
        }
        let Some((turn, step, calls)) = self.open_step_calls() else {
            return false;
        };
        let mut changes = self.inner.idle.subscribe();
        loop {
            {
                let mut state = self.inner.state.lock();
                if !state.running {
                    state.running = true;
                    break;
                }
                // A turn runs (results being applied, or the driver before it recorded
                // the await): the caller's cancel path cancels it and comes back here.
                if state.active.is_some() {
                    return false;
                }
            }
            // The driver recorded the await and has not let go yet (it makes the inbox
            // durable first), or another cancel is ending the turn: once it lets go,
            // end the turn here unless that cancel did.
            if changes.changed().await.is_err() || self.awaiting_tools() != expected {
                return false;
            }
        }
        if self.awaiting_tools() != expected {
            self.release_driver(None);
            return false;
        }
        let error = ToolError {
            code: ABORTED_BEFORE_DISPATCH.to_owned(),
            message: "the turn was cancelled before this call ran".to_owned(),
        };
        let results = expected
            .iter()
            .map(|id| CallerResult {
                call_id: id.clone(),
                content: vec![ContentBlock::text(format!(
                    "{}: {}",
                    error.code, error.message
                ))],
                is_error: true,
            })
            .collect();
        let reason = TurnEndReason::Aborted {
            cause: cause.clone(),
        };
        let logged = self
            .log_caller_results(turn, step, &calls, &expected, results, Some(&error))
            .and_then(|()| {
                let end = TurnEnd {
                    turn,
                    reason: reason.clone(),
                    repair: false,
                };
                let draft = EventDraft::typed(&end)
                    .map_err(|error| ExternalToolsError::Log(error.to_string()))?;
                self.inner
                    .session
                    .append(draft)
                    .map_err(|error| ExternalToolsError::Log(error.to_string()))?;
                Ok(())
            });
        if let Err(error) = &logged {
            tracing::error!(session = %self.inner.session.id(), %error, "cancel of an awaiting turn");
        }
        let _ = self.inner.session.flush().await;
        {
            let mut state = self.inner.state.lock();
            if !keep_inbox {
                let position = state.inbox.next_id();
                let dropped = state.inbox.drop_before(position);
                self.forget(&dropped);
            }
        }
        self.release_driver(logged.ok().map(|()| reason));
        true
    }

    /// `(turn, step, calls)` of the open step's latest assistant message.
    fn open_step_calls(&self) -> Option<(u32, u32, Vec<ToolCallBlock>)> {
        self.inner.session.with_log(|log| {
            let (turn, step) = log.state().open_step?;
            let event = log.last_of_kind(ASSISTANT_MESSAGE)?;
            let message = event.decode_part::<AssistantReply>().ok()?;
            Some((turn, step, message.message.tool_calls().cloned().collect()))
        })
    }

    /// Appends one `tool/result` per awaited call (in call order, each with the result
    /// for its id, and `error` when the host answers for the caller) and the step's
    /// `step/end` (interrupted when the host answered).
    fn log_caller_results(
        &self,
        turn: u32,
        step: u32,
        calls: &[ToolCallBlock],
        expected: &[String],
        mut results: Vec<CallerResult>,
        error: Option<&ToolError>,
    ) -> Result<(), ExternalToolsError> {
        // A cancel's answers end the step interrupted, as in a running step.
        let interrupted = error.is_some();
        let log = |error: &dyn std::fmt::Display| ExternalToolsError::Log(error.to_string());
        for id in expected {
            let Some(at) = results.iter().position(|result| &result.call_id == id) else {
                continue;
            };
            let result = results.swap_remove(at);
            let name = calls
                .iter()
                .find(|call| &call.id == id)
                .map(|call| call.name.clone())
                .unwrap_or_default();
            let block = ccare_core::ToolResultBlock {
                call_id: result.call_id,
                name,
                content: result.content,
                is_error: result.is_error,
                extra: ccare_core::Extra::new(),
            };
            let event = ToolResult {
                turn,
                step,
                message: Message::from_blocks(vec![ContentBlock::ToolResult(block)]),
                error: error.cloned(),
                meta: None,
                repair: false,
            };
            let draft = EventDraft::typed(&event)
                .map_err(|error| log(&error))?
                .with_surface(SurfaceOp::Append);
            self.inner
                .session
                .append(draft)
                .map_err(|error| log(&error))?;
        }
        let end = StepEnd {
            turn,
            step,
            interrupted,
            repair: false,
        };
        let draft = EventDraft::typed(&end).map_err(|error| log(&error))?;
        self.inner
            .session
            .append(draft)
            .map_err(|error| log(&error))?;
        Ok(())
    }

    /// Gives the driver back after this module held it without a driver task: records
    /// `reason` (when a turn ended) and starts the driver if waking work is queued.
    fn release_driver(&self, reason: Option<TurnEndReason>) {
        let start = {
            let mut state = self.inner.state.lock();
            state.active = None;
            if reason.is_some() {
                state.last_end = reason;
                state.turns_ended += 1;
            }
            let start = state.inbox.has_waking();
            state.running = start;
            start
        };
        self.bump_idle();
        if start {
            let agent = self.clone();
            tokio::spawn(async move { agent.drive().await });
        }
    }
}
