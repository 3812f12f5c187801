//! `ccare demo`: writes a small offline session and shows where to look.
//!
//! A placeholder until the agent loop lands: it appends a recorded two-step turn
//! (a question, a tool call, its result, an answer) through the real session engine.

use std::io::Write;

use ccare_core::kinds::{
    AssistantMessage, StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnEndReason, TurnStart,
    UserMessage,
};
use ccare_core::{
    ContentBlock, EventData, EventDraft, JsonObject, Message, Source, SurfaceOp, TokenUsage,
    ToolCallBlock, ToolResultBlock,
};
use ccare_session::Session;
use serde_json::json;

use crate::Failure;
use crate::home::Home;

fn draft<T: EventData>(data: &T) -> Result<EventDraft, Failure> {
    EventDraft::typed(data).map_err(Failure::failed)
}

fn append(session: &Session, draft: EventDraft) -> Result<(), Failure> {
    session.append(draft).map(|_| ()).map_err(Failure::failed)
}

fn assistant(step: u32, message: Message, finish: &str, usage: TokenUsage) -> AssistantMessage {
    AssistantMessage {
        turn: 1,
        step,
        call_id: format!("demo-call-{step}"),
        provider: "script".to_owned(),
        model: "demo".to_owned(),
        message,
        usage: Some(usage),
        finish: finish.to_owned(),
        interrupted: false,
        stream: Vec::new(),
    }
}

pub(crate) async fn run(home: &Home) -> Result<(), Failure> {
    let sessions = home.sessions().map_err(Failure::failed)?;
    let mut meta = JsonObject::new();
    meta.insert(
        "title".to_owned(),
        json!("demo: what time zone is the server in?"),
    );
    let session = sessions.create(None, meta).await?;

    let mut prompt = Message::from_blocks(vec![ContentBlock::text(
        "Which time zone does this server use?",
    )]);
    prompt.source = Some(Source::user());
    let call = ContentBlock::ToolCall(ToolCallBlock {
        id: "call-1".to_owned(),
        name: "read_file".to_owned(),
        arguments: json!({"path": "/etc/timezone"}),
        raw_arguments: None,
        extra: JsonObject::new(),
    });
    let result = ContentBlock::ToolResult(ToolResultBlock {
        call_id: "call-1".to_owned(),
        name: "read_file".to_owned(),
        content: vec![ContentBlock::text("Etc/UTC\n")],
        is_error: false,
        extra: JsonObject::new(),
    });
    let usage = |input, output| TokenUsage {
        input,
        output,
        ..TokenUsage::default()
    };

    append(&session, draft(&TurnStart { turn: 1 })?)?;
    append(
        &session,
        draft(&UserMessage { message: prompt })?.with_surface(SurfaceOp::Append),
    )?;
    append(&session, draft(&StepStart { turn: 1, step: 1 })?)?;
    let asking = Message::from_blocks(vec![
        ContentBlock::text("Let me check the system setting."),
        call,
    ]);
    append(
        &session,
        draft(&assistant(1, asking, "tool-calls", usage(42, 18)))?.with_surface(SurfaceOp::Append),
    )?;
    append(
        &session,
        draft(&ToolCall {
            turn: 1,
            step: 1,
            call_id: "call-1".to_owned(),
            name: "read_file".to_owned(),
            arguments: json!({"path": "/etc/timezone"}),
        })?,
    )?;
    let result = ToolResult {
        turn: 1,
        step: 1,
        message: Message::from_blocks(vec![result]),
        error: None,
        meta: None,
        repair: false,
    };
    append(&session, draft(&result)?.with_surface(SurfaceOp::Append))?;
    append(
        &session,
        draft(&StepEnd {
            turn: 1,
            step: 1,
            interrupted: false,
            repair: false,
        })?,
    )?;
    append(&session, draft(&StepStart { turn: 1, step: 2 })?)?;
    let answer = Message::from_blocks(vec![ContentBlock::text(
        "The server runs on UTC (Etc/UTC).",
    )]);
    append(
        &session,
        draft(&assistant(2, answer, "stop", usage(71, 11)))?.with_surface(SurfaceOp::Append),
    )?;
    append(
        &session,
        draft(&StepEnd {
            turn: 1,
            step: 2,
            interrupted: false,
            repair: false,
        })?,
    )?;
    append(
        &session,
        draft(&TurnEnd {
            turn: 1,
            reason: TurnEndReason::Completed,
            repair: false,
        })?,
    )?;
    session.flush().await.map_err(Failure::failed)?;

    let view = session.derived_view();
    let stdout = &mut std::io::stdout().lock();
    let id = session.id();
    let lines = [
        format!("Created demo session {id} with {} events in {}.", session.head(), home.database().display()),
        format!("The model would see {} messages on its next request.", view.messages.len()),
        String::new(),
        "This is an offline placeholder: the agent loop and scripted provider arrive with the next issue.".to_owned(),
        "Look at it with:".to_owned(),
        format!("  ccare sessions show {id}"),
        format!("  ccare sessions export {id}"),
        format!("  ccare sessions fork {id} --at 9"),
    ];
    for line in lines {
        writeln!(stdout, "{line}").map_err(Failure::failed)?;
    }
    Ok(())
}
