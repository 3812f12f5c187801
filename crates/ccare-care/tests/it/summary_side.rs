//! Summary calls are side requests of the host (watch-rules-ui.md MP-3, issue 18 item
//! 5): the request hooks edit them and a request segment serving purpose `compaction`
//! appends its request-only message after the transcript, priced in the summary's
//! budget check (its journal record) and recorded on `compaction/summary`; a
//! conversation-only segment never reaches a summary.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_agent::{HookContext, HookError, Plugin, PluginScope, RequestHook, RequestSegment};
use ccare_core::{ContentBlock, Message, SessionId};
use ccare_llm::{CallConfig, Purpose};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::rest::{SUMMARY, lorem, note, rest_call};
use crate::rig::{Rig, rig_with_compaction_route};

/// The text the compaction segment adds.
const COMPACTION_TEXT: &str = "Write the summary in English, keep file paths verbatim.";
/// The text the conversation-only segment adds.
const CONVERSATION_TEXT: &str = "Keep answers short.";
/// The system prompt the request hook puts on compaction calls.
const SUMMARY_SYSTEM: &str = "You summarize coding sessions.";

/// What the test plugin saw.
#[derive(Default)]
struct Seen {
    /// Per session, the purpose of the call being prepared (a segment is told only
    /// the call id, so it learns the purpose from its own request hook).
    preparing: Mutex<HashMap<SessionId, Purpose>>,
    /// `(call id, "dispatched" | "released")`, in order.
    outcomes: Mutex<Vec<(String, &'static str)>>,
}

/// Notes each call's purpose and gives compaction calls a system prompt.
struct NotePurpose(Arc<Seen>);

impl RequestHook for NotePurpose {
    fn edit(&self, context: &HookContext, config: &mut CallConfig) -> Result<(), HookError> {
        self.0
            .preparing
            .lock()
            .insert(context.session.id().clone(), config.purpose);
        if config.purpose == Purpose::Compaction {
            config.system = Some(SUMMARY_SYSTEM.to_owned());
        }
        Ok(())
    }
}

/// A segment for compaction calls only (like a scoped prompt with purpose
/// `compaction`).
struct CompactionSegment(Arc<Seen>);

impl RequestSegment for CompactionSegment {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        Vec::new()
    }
    fn reserve(&self, context: &HookContext, _call_id: &str) -> Vec<Message> {
        let purpose = self.0.preparing.lock().get(context.session.id()).copied();
        if purpose == Some(Purpose::Compaction) {
            vec![Message::from_blocks(vec![ContentBlock::text(
                COMPACTION_TEXT,
            )])]
        } else {
            Vec::new()
        }
    }
    fn dispatched(&self, _context: &HookContext, call_id: &str) {
        self.0
            .outcomes
            .lock()
            .push((call_id.to_owned(), "dispatched"));
    }
    fn release(&self, _context: &HookContext, call_id: &str) {
        self.0
            .outcomes
            .lock()
            .push((call_id.to_owned(), "released"));
    }
    fn serves_side(&self, purpose: Purpose) -> bool {
        purpose == Purpose::Compaction
    }
}

/// A segment that declares no side purpose: conversation requests only.
struct ConversationSegment;

impl RequestSegment for ConversationSegment {
    fn preview(&self, _context: &HookContext) -> Vec<Message> {
        vec![Message::from_blocks(vec![ContentBlock::text(
            CONVERSATION_TEXT,
        )])]
    }
    fn reserve(&self, context: &HookContext, _call_id: &str) -> Vec<Message> {
        self.preview(context)
    }
    fn dispatched(&self, _context: &HookContext, _call_id: &str) {}
    fn release(&self, _context: &HookContext, _call_id: &str) {}
}

struct Prompter(Arc<Seen>);

impl Plugin for Prompter {
    fn name(&self) -> &str {
        "prompter"
    }
    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.request(Arc::new(NotePurpose(Arc::clone(&self.0))));
        scope.request_segment(Arc::new(CompactionSegment(Arc::clone(&self.0))));
        scope.request_segment(Arc::new(ConversationSegment));
        Ok(())
    }
}

fn script() -> String {
    [
        r#"{"text": "read it"}"#.to_owned(),
        rest_call(json!({"note": note(1200)})),
        json!({"expect": {"purpose": "compaction"}, "text": SUMMARY}).to_string(),
        r#"{"text": "continuing"}"#.to_owned(),
    ]
    .join("\n")
}

async fn rested(with_prompter: Option<Arc<Seen>>) -> Rig {
    let rig = rig_with_compaction_route(&script(), json!({"retain_tokens": 100}), None, true)
        .await
        .unwrap();
    if let Some(seen) = with_prompter {
        rig.host.mount(&Prompter(seen), &json!({})).unwrap();
    }
    rig.turn(&lorem(400)).await;
    rig.turn("now rest").await;
    assert_eq!(
        rig.compaction_kinds(),
        ["compaction/start", "compaction/summary", "compaction/end"],
        "the summary committed"
    );
    rig
}

fn texts(message: &ccare_llm::RequestMessage) -> Vec<String> {
    message
        .message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}

/// The journal's `inputTokens` of the session's (one) summary call.
async fn summary_input_tokens(rig: &Rig) -> u64 {
    let priced: Vec<u64> = rig
        .journal()
        .await
        .into_iter()
        .filter(|(_, record)| record["data"]["purpose"] == "compaction")
        .filter_map(|(_, record)| record["data"]["inputTokens"].as_u64())
        .collect();
    assert_eq!(priced.len(), 1, "one priced summary call: {priced:?}");
    priced[0]
}

#[tokio::test]
async fn mp_3_a_compaction_segment_reaches_the_summary_request_priced_and_recorded() {
    let seen = Arc::new(Seen::default());
    let rig = rested(Some(Arc::clone(&seen))).await;
    let requests = rig.script.requests();
    let summary = requests
        .iter()
        .find(|request| request.config.purpose == Purpose::Compaction)
        .expect("a summary request");
    // The hooks ran on it: the system prompt is the hook's.
    assert_eq!(summary.config.system.as_deref(), Some(SUMMARY_SYSTEM));
    // The transcript, then the segment's ONE request-only message, last.
    assert_eq!(summary.config.messages.len(), 2);
    assert!(texts(&summary.config.messages[0])[0].starts_with("<transcript>\n"));
    assert_eq!(texts(&summary.config.messages[1]), [COMPACTION_TEXT]);
    // A conversation-only segment never reaches a summary, but every conversation
    // request, where the compaction segment adds nothing.
    let all_texts: Vec<String> = summary.config.messages.iter().flat_map(texts).collect();
    assert!(!all_texts.iter().any(|text| text == CONVERSATION_TEXT));
    for request in requests
        .iter()
        .filter(|request| request.config.purpose == Purpose::Conversation)
    {
        let last = request.config.messages.last().unwrap();
        assert_eq!(texts(last), [CONVERSATION_TEXT]);
        assert!(
            !request
                .config
                .messages
                .iter()
                .flat_map(texts)
                .any(|text| text.contains(COMPACTION_TEXT))
        );
    }
    // Delivered exactly once, on the summary call.
    let summary_outcomes: Vec<&'static str> = seen
        .outcomes
        .lock()
        .iter()
        .filter(|(id, _)| *id == summary.call_id)
        .map(|(_, outcome)| *outcome)
        .collect();
    assert_eq!(summary_outcomes, ["dispatched"]);
    // Recorded with the summary it produced.
    let (_, event) = rig.events("compaction/summary").pop().unwrap();
    assert_eq!(
        event["request_delta"],
        json!({"append_request_only": [{
            "plugin": "prompter",
            "messages": [{"content": [{"type": "text", "text": COMPACTION_TEXT}]}],
        }]})
    );
    // Priced in the summary's budget check (its journal record): the same rest
    // without the plugin is cheaper by exactly the hook's system prompt and the
    // segment's message (H-TOK-2 heuristic, no calibration yet for this header).
    let plain = rested(None).await;
    let with_segment = summary_input_tokens(&rig).await;
    let without = summary_input_tokens(&plain).await;
    let segment = Message::from_blocks(vec![ContentBlock::text(COMPACTION_TEXT)]);
    assert_eq!(
        with_segment,
        without
            + ccare_meter::estimate_system(SUMMARY_SYSTEM)
            + ccare_meter::estimate_message(&segment),
        "{with_segment} tokens with the plugin, {without} without"
    );
}
