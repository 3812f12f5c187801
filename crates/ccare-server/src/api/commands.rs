//! API-2: commands into a session — messages (`prompt`, `steer`, `followup`), the
//! results of caller-executed tools, cancel.
//!
//! Each goes through [`ccare_app::Agents::get_or_reopen`] (a session another process
//! drives is 409 `SESSION_BUSY` naming the holder; a session a store error fenced is
//! reopened from the store first) and [`ccare_agent::Agent::send`],
//! and answers 202 once the command is durable (ACT-2), with the seq its events will
//! follow. The turns it starts run to idle in the session's actor, with no HTTP client
//! attached: the actor's driver task runs them, and the actor stops once idle for
//! `[host] actor_idle_ms`.
//!
//! A message may declare caller-executed tools for its turn (ACT-3, the HTTP form of
//! `ccare run --external-tools`). A bad declaration is a 400 naming the field
//! (`tools[1].inputSchema: …`) and nothing is logged.

use std::collections::BTreeSet;

use ccare_agent::routes::{Method, RouteDoc, RouteError, RouteReply, RouteRequest, RouteSpec};
use ccare_agent::{CallerResult, Command, ExternalToolsError};
use ccare_app::{AgentHandle, WhenBusy};
use ccare_llm::ToolSpec;
use ccare_session::AppendError;
use serde::Deserialize;

use crate::ServerContext;
use crate::api::errors::{self, INVALID_MODE, INVALID_TOOLS};
use crate::api::sessions::session_model;
use crate::api::types::{
    Accepted, CancelBody, MessageBody, MessageMode, ToolDeclaration, ToolResultItem,
    ToolResultsBody,
};
use crate::api::{body_or_default, handler, path};

/// The routes of API-2.
pub(super) fn routes(context: &ServerContext) -> Result<Vec<RouteSpec>, RouteError> {
    Ok(vec![
        RouteSpec::new(
            path("/api/sessions/{id}/messages")?,
            handler(context, |context, request| async move {
                message(&context, &request).await
            }),
        )
        .method(
            Method::Post,
            RouteDoc::new(
                "Send a message: `prompt` or `followup` open a turn (queued after earlier ones), `steer` enters the running turn; 202 once durable",
            )
            .request::<MessageBody>()
            .response::<Accepted>(),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}/tool-results")?,
            handler(context, |context, request| async move {
                tool_results(&context, &request).await
            }),
        )
        .method(
            Method::Post,
            RouteDoc::new(
                "Answer exactly the open caller-executed tool calls; the turn resumes (409 TOOL_RESULTS_MISMATCH otherwise, nothing logged)",
            )
            .request::<ToolResultsBody>()
            .response::<Accepted>(),
        ),
        RouteSpec::new(
            path("/api/sessions/{id}/cancel")?,
            handler(context, |context, request| async move {
                cancel(&context, &request).await
            }),
        )
        .method(
            Method::Post,
            RouteDoc::new(
                "Cancel the running turn (and, unless keepInbox, what was queued before); 202 once applied",
            )
            .request::<CancelBody>()
            .response::<Accepted>(),
        ),
    ])
}

/// The running actor of the request's session, started from the store if needed. A
/// session a store error fenced (H-STORE-6) is reopened from the store first, which
/// repairs it; when that fails (the store still fails) the reopen's error is the
/// answer. A fenced actor still stopping its turn takes no command: it is 409
/// `SESSION_FENCED` naming the error, not a 202 for a command nothing can log.
async fn actor(context: &ServerContext, request: &RouteRequest) -> Result<AgentHandle, RouteReply> {
    let id = request.param("id").and_then(errors::session_id)?;
    let handle = context
        .agents
        .get_or_reopen(&id, WhenBusy::Fail)
        .await
        .map_err(|error| errors::app_error(&error))?;
    let Some(cause) = handle.session().fence() else {
        return Ok(handle);
    };
    // What an append to it fails with, named as the session names it.
    let fenced = AppendError::Fenced { session: id, cause };
    Err(RouteReply::error(
        409,
        fenced.code(),
        format!("{fenced}; its turn is still stopping: send the command again to reopen it"),
    ))
}

/// Sends `command` and answers 202 with the seq it follows.
async fn send(handle: &AgentHandle, command: Command) -> RouteReply {
    let after_seq = handle.session().head().checked_sub(1);
    match handle.agent().send(command).await {
        Ok(_) => RouteReply::json(
            202,
            &Accepted {
                accepted: true,
                after_seq,
            },
        ),
        Err(error) => errors::command_error(&error),
    }
}

/// What a message body's `tools` is, read only to say which declaration a body that
/// does not parse got wrong.
#[derive(Deserialize)]
struct ToolsProbe {
    #[serde(default)]
    tools: Option<serde_json::Value>,
}

/// 400 `INVALID_TOOLS` naming `field`.
fn invalid_tools(field: &str, problem: impl std::fmt::Display) -> RouteReply {
    RouteReply::error(400, INVALID_TOOLS, format!("{field}: {problem}"))
}

/// The message body, or a 400: naming the tool declaration when one is what does not
/// parse, else the parser's message.
fn message_body(request: &RouteRequest) -> Result<MessageBody, RouteReply> {
    let reply = match request.json::<MessageBody>() {
        Ok(body) => return Ok(body),
        Err(reply) => reply,
    };
    let probe = serde_json::from_slice::<ToolsProbe>(&request.body).ok();
    match probe.and_then(|probe| probe.tools) {
        None | Some(serde_json::Value::Null) => Err(reply),
        Some(serde_json::Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                if let Err(error) = ToolDeclaration::deserialize(item) {
                    return Err(invalid_tools(&format!("tools[{index}]"), error));
                }
            }
            Err(reply)
        }
        Some(other) => Err(invalid_tools(
            "tools",
            format!("expected an array of tool declarations, got {other}"),
        )),
    }
}

/// The declared tools as the model is told about them, or a 400 naming the first bad
/// declaration's field.
pub(crate) fn tool_specs(tools: Vec<ToolDeclaration>) -> Result<Vec<ToolSpec>, RouteReply> {
    if let Some((index, (field, problem))) = tools
        .iter()
        .enumerate()
        .find_map(|(index, tool)| tool.problem().map(|problem| (index, problem)))
    {
        return Err(invalid_tools(&format!("tools[{index}].{field}"), problem));
    }
    Ok(tools
        .into_iter()
        .map(|tool| ToolSpec {
            name: tool.name,
            description: tool.description.into(),
            input_schema: tool.input_schema.into(),
        })
        .collect())
}

/// The message of `text` declaring `tools` for its turn, refused with a 400 naming the
/// declaration when a name is that of a host tool the turn's agent offers (all but
/// `hidden`) or repeats.
pub(crate) fn message_with_tools(
    handle: &AgentHandle,
    text: String,
    tools: Vec<ToolSpec>,
    hidden: &BTreeSet<String>,
) -> Result<ccare_core::Message, RouteReply> {
    let names: Vec<String> = tools.iter().map(|tool| tool.name.clone()).collect();
    handle
        .agent()
        .user_message_with_tools_hiding(text, tools, hidden)
        .map_err(|error| match &error {
            ExternalToolsError::NameTaken(name) => {
                let mut uses = names
                    .iter()
                    .enumerate()
                    .filter(|(_, known)| *known == name)
                    .map(|(index, _)| index);
                let first = uses.next().unwrap_or(0);
                let (index, problem) = match uses.next() {
                    Some(second) => (second, format!("{name:?} is declared twice")),
                    None => (
                        first,
                        format!("{name:?} is the name of a tool the host runs"),
                    ),
                };
                RouteReply::error(400, error.code(), format!("tools[{index}].name: {problem}"))
            }
            _ => RouteReply::error(500, error.code(), error.to_string()),
        })
}

async fn message(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let body: MessageBody = match message_body(request) {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let tools = match tool_specs(body.tools) {
        Ok(tools) => tools,
        Err(reply) => return reply,
    };
    let mode = match body.mode.as_deref() {
        None => MessageMode::Prompt,
        Some(name) => match MessageMode::parse(name) {
            Some(mode) => mode,
            None => {
                return RouteReply::error(
                    400,
                    INVALID_MODE,
                    format!(
                        "mode: expected one of {}, got {name:?}",
                        MessageMode::NAMES.join(", ")
                    ),
                );
            }
        },
    };
    let handle = match actor(context, request).await {
        Ok(handle) => handle,
        Err(reply) => return reply,
    };
    // A session created with its own model keeps it, whoever started this actor.
    if let Some(model) = session_model(handle.session()) {
        let mut options = handle.agent().options();
        if options.model != model {
            options.model = model;
            if let Err(error) = handle.agent().send(Command::SetOptions(options)).await {
                return errors::command_error(&error);
            }
        }
    }
    let command = if tools.is_empty() {
        Command::prompt(body.text)
    } else {
        match message_with_tools(
            &handle,
            body.text,
            tools,
            &handle.agent().options().hidden_tools,
        ) {
            Ok(message) => Command::UserInput {
                message,
                options: None,
            },
            Err(reply) => return reply,
        }
    };
    let command = match (mode, command) {
        (MessageMode::Steer, Command::UserInput { message, .. }) => Command::Steer(message),
        (_, command) => command,
    };
    send(&handle, command).await
}

async fn tool_results(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let body: ToolResultsBody = match request.json() {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let handle = match actor(context, request).await {
        Ok(handle) => handle,
        Err(reply) => return reply,
    };
    let results = body
        .results
        .into_iter()
        .map(
            |ToolResultItem {
                 call_id,
                 text,
                 is_error,
             }| CallerResult {
                is_error,
                ..CallerResult::text(call_id, text)
            },
        )
        .collect();
    send(&handle, Command::ToolResults(results)).await
}

async fn cancel(context: &ServerContext, request: &RouteRequest) -> RouteReply {
    let body: CancelBody = match body_or_default(request) {
        Ok(body) => body,
        Err(reply) => return reply,
    };
    let handle = match actor(context, request).await {
        Ok(handle) => handle,
        Err(reply) => return reply,
    };
    send(
        &handle,
        Command::Cancel {
            keep_inbox: body.keep_inbox,
        },
    )
    .await
}
