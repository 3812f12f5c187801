//! `GET /context-care/prompts?sessionId&limit&offset&seq` (watch-rules-ui.md §9, UI-3,
//! HR-3): every prompt plugins put in front of the model in a session, with its
//! provenance, oldest first, paged; `seq` selects the page holding the entry logged at
//! that seq (`offset = floor(index / limit) · limit`) and `selectedFound` says whether
//! one was.
//!
//! The provenance is in the session log, not the request journal: a notice, a time
//! reading or a rest request is a `user/message` whose source names its plugin, kind
//! and trigger (surface entries); a model-scoped prompt (MP-3) is a request-only
//! message logged in its request's `request/header{reason: series}` delta, its
//! provenance under `contextCarePrompt` (request-only entries); a compaction
//! checkpoint names its compaction and producer. Bodies are never cut (HR-3). The
//! request envelope (system prompt, tool schemas) and a summary call's raw output are
//! never read here (HR-2).

use std::collections::HashSet;
use std::sync::Arc;

use ccare_agent::routes::{
    Method, RouteDoc, RouteHandler, RoutePath, RoutePathError, RouteReply, RouteRequest, RouteSpec,
};
use ccare_core::kinds::{RequestHeader, TurnStart, UserMessage};
use ccare_core::{ContentBlock, Event, JsonObject, Message, Source, kinds};
use ccare_session::SessionLog;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::actions::Admission;
use super::query::{self, INVALID_QUERY, Page};
use super::{LiveSample, Management};

/// The route's path.
pub const PATH: &str = "/context-care/prompts";

/// One page of a session's prompts.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptsPage {
    /// What admits automatic maintenance now (as `/context-care/actions`).
    pub admission: Admission,
    /// The live sample.
    pub current_state: LiveSample,
    /// The page's entries, oldest first.
    pub prompts: Vec<PromptEntry>,
    /// How many entries the session has.
    pub total: u64,
    /// The index of the page's first entry (the page holding `seq` when it was found).
    pub offset: u64,
    /// The offset of the next page; `null` on the last.
    pub next_offset: Option<u64>,
    /// Whether `seq` was given and an entry was logged at it.
    pub selected_found: bool,
}

/// Where an entry reached the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Entered into the history (`user/message`): every later request carries it
    /// while it is live.
    Surface,
    /// On one request's copy only (MP-3), logged in its `request/header` delta.
    RequestOnly,
    /// A compaction checkpoint standing for the history it replaced.
    Checkpoint,
}

/// One prompt, notice, reading or checkpoint and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptEntry {
    /// The seq of the event that carries it: its `user/message`, or the
    /// `request/header` whose delta carried it.
    pub seq: u64,
    /// When it was logged (ms since the epoch).
    pub at: i64,
    /// The turn it was logged in (`null` before the first).
    pub turn: Option<u32>,
    /// Where it reached the model.
    pub placement: Placement,
    /// Whether it is on the surface now (a compaction may have replaced it;
    /// request-only entries never are).
    pub live: bool,
    /// The plugin that published it (a checkpoint: its producer); `null` when the
    /// source names none.
    pub publisher: Option<String>,
    /// The source kind, e.g. `plugin:context-care:state`, `plugin`.
    pub kind: String,
    /// `notice` or `snapshot`, as the source says.
    pub form: Option<String>,
    /// The source's one-line label, e.g. `Context state`.
    pub label: Option<String>,
    /// What triggered it, where the source records it (`contextCareTrace.trigger`, a
    /// model-scoped prompt's trigger).
    pub trigger: Option<String>,
    /// The rules it came from (model-scoped prompt rule ids, MP-1).
    pub rules: Vec<String>,
    /// The provider call it was sent with (request-only entries).
    pub call_id: Option<String>,
    /// The exact text the model read, never cut (HR-3).
    pub body: String,
    /// The producer's own fields of the source as logged (`contextCare`,
    /// `contextCareTrace`, `contextCarePrompt`, `compactionId`, …).
    pub provenance: JsonObject,
}

/// The route, answering `GET`.
pub(crate) fn route(management: Management) -> Result<RouteSpec, RoutePathError> {
    let handler: Arc<dyn RouteHandler> = Arc::new(move |request: RouteRequest| {
        let management = management.clone();
        async move {
            match page(&management, &request).await {
                Ok(page) => RouteReply::json(200, &page),
                Err(reply) => reply,
            }
        }
    });
    Ok(RouteSpec::new(RoutePath::exact(PATH)?, handler).method(
        Method::Get,
        RouteDoc::new("A session's prompts, notices and readings with their provenance, paged")
            .response::<PromptsPage>()
            .query("sessionId", "The session (required)")
            .query("limit", "Entries per page, 1..200 (required)")
            .query("offset", "The index of the first entry, ≥ 0 (default 0)")
            .query(
                "seq",
                "Select the page holding the entry logged at this seq (digits only)",
            ),
    ))
}

async fn page(management: &Management, request: &RouteRequest) -> Result<PromptsPage, RouteReply> {
    let pairs = query::pairs(request, INVALID_QUERY)?;
    query::only(
        &pairs,
        &["sessionId", "limit", "offset", "seq"],
        INVALID_QUERY,
    )?;
    let id = query::session_id(&pairs, INVALID_QUERY)?;
    let mut page = Page::of(&pairs)?;
    let seq = query::seq(&pairs)?;
    let loaded = management.load(&id).await?;
    let entries = entries(&loaded.log);
    let selected = seq.and_then(|seq| entries.iter().position(|entry| entry.seq == seq));
    if let Some(index) = selected {
        page = page.holding(index as u64);
    }
    let (slice, next_offset) = page.slice(&entries);
    management.ensure_controls(&id).await;
    Ok(PromptsPage {
        admission: super::actions::admission_of(management, &id).await?,
        current_state: management.sample(&loaded),
        prompts: slice.to_vec(),
        total: entries.len() as u64,
        offset: page.offset,
        next_offset,
        selected_found: selected.is_some(),
    })
}

/// Every entry of the log, in log order (request-only messages of one request in
/// their order).
pub fn entries(log: &SessionLog) -> Vec<PromptEntry> {
    let live: HashSet<u64> = log.live_seqs().into_iter().collect();
    let mut turn = None;
    let mut entries = Vec::new();
    for event in log.events() {
        match event.kind() {
            kinds::TURN_START => {
                if let Ok(start) = event.decode::<TurnStart>() {
                    turn = Some(start.turn);
                }
            }
            kinds::USER_MESSAGE => {
                if let Ok(user) = event.decode::<UserMessage>()
                    && let Some(entry) = surface_entry(event, turn, &user.message)
                {
                    entries.push(PromptEntry {
                        live: live.contains(&event.seq()),
                        ..entry
                    });
                }
            }
            kinds::REQUEST_HEADER => {
                if let Ok(header) = event.decode::<RequestHeader>() {
                    request_only(event, turn, &header, &mut entries);
                }
            }
            _ => {}
        }
    }
    entries
}

/// A plugin message or a checkpoint on the surface; `None` for the user's own words.
fn surface_entry(event: &Event, turn: Option<u32>, message: &Message) -> Option<PromptEntry> {
    let base = |placement, publisher, kind: String| PromptEntry {
        seq: event.seq(),
        at: event.time_ms(),
        turn,
        placement,
        live: false,
        publisher,
        kind,
        form: None,
        label: None,
        trigger: None,
        rules: Vec::new(),
        call_id: None,
        body: text_of(message),
        provenance: JsonObject::new(),
    };
    match message.source.as_ref()? {
        Source::Plugin(source) => Some(PromptEntry {
            form: source.form.clone(),
            label: source.summary.clone(),
            ..with_provenance(
                base(
                    Placement::Surface,
                    source.plugin.clone(),
                    source.kind.clone(),
                ),
                &source.extra,
            )
        }),
        Source::CompactCheckpoint {
            compaction_id,
            producer,
            ..
        } => {
            let mut entry = base(
                Placement::Checkpoint,
                Some(producer.clone()),
                "compact-checkpoint".to_owned(),
            );
            entry.provenance.insert(
                "compactionId".to_owned(),
                Value::String(compaction_id.clone()),
            );
            Some(entry)
        }
        Source::User { .. } | Source::Unknown(_) => None,
    }
}

/// The request-only messages a `request/header` delta logged (MP-3).
fn request_only(
    event: &Event,
    turn: Option<u32>,
    header: &RequestHeader,
    entries: &mut Vec<PromptEntry>,
) {
    let Some(groups) = header
        .ext
        .as_ref()
        .and_then(|ext| ext.request_delta.as_ref())
        .and_then(|delta| delta.append_request_only.as_ref())
    else {
        return;
    };
    let call_id = match &header.header {
        ccare_core::kinds::HeaderBody::Series(series) => Some(series.config.call_id.clone()),
        ccare_core::kinds::HeaderBody::Envelope(_) => None,
    };
    for group in groups {
        for message in &group.messages {
            let (kind, form, label, extra) = match &message.source {
                Some(Source::Plugin(source)) => (
                    source.kind.clone(),
                    source.form.clone(),
                    source.summary.clone(),
                    Some(&source.extra),
                ),
                _ => ("plugin".to_owned(), None, None, None),
            };
            let entry = PromptEntry {
                seq: event.seq(),
                at: event.time_ms(),
                turn,
                placement: Placement::RequestOnly,
                live: false,
                publisher: Some(group.plugin.clone()),
                kind,
                form,
                label,
                trigger: None,
                rules: Vec::new(),
                call_id: call_id.clone(),
                body: text_of(message),
                provenance: JsonObject::new(),
            };
            entries.push(match extra {
                Some(extra) => with_provenance(entry, extra),
                None => entry,
            });
        }
    }
}

/// What an entry reads of `contextCareTrace` (context care's notices and rests).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Trace {
    trigger: Option<String>,
}

/// What an entry reads of `contextCarePrompt{callId, segments, message}` (MP-3).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PromptProvenance {
    call_id: Option<String>,
    segments: Vec<Segment>,
}

/// One segment of a model-scoped prompt message: a prompt rule or its feedback.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Segment {
    rule_id: Option<String>,
    trigger: Option<String>,
}

/// The typed reading of the field `key` of `extra`; absent or malformed reads as
/// the default (the raw fields stay in `provenance`).
fn field<T: DeserializeOwned + Default>(extra: &ccare_core::Extra, key: &str) -> T {
    extra
        .get(key)
        .and_then(|value| T::deserialize(value).ok())
        .unwrap_or_default()
}

/// `entry` with the source's own fields, and the trigger, rules and call they name.
fn with_provenance(mut entry: PromptEntry, extra: &ccare_core::Extra) -> PromptEntry {
    for (key, value) in extra.iter() {
        entry.provenance.insert(key.clone(), value.clone());
    }
    let trace: Trace = field(extra, "contextCareTrace");
    let prompt: PromptProvenance = field(extra, "contextCarePrompt");
    entry.trigger = trace.trigger.or_else(|| {
        prompt
            .segments
            .iter()
            .find_map(|segment| segment.trigger.clone())
    });
    entry.rules = prompt
        .segments
        .iter()
        .filter_map(|segment| segment.rule_id.clone())
        .collect();
    entry.call_id = entry.call_id.or(prompt.call_id);
    entry
}

/// The message's text blocks, joined by a newline, whole.
fn text_of(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
