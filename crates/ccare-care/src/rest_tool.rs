//! The `context_rest` tool (CC-TOOL-2 .. CC-TOOL-4): the model asks for a checkpoint at
//! a task boundary, in its own words. The call only schedules: it queues a durable
//! inbox message (the handoff note, and for a deep rest the recovery path) that the
//! next boundary turns into a rest and reports on.

use std::sync::Arc;

use ccare_agent::tools::codes;
use ccare_agent::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use ccare_core::{ContentBlock, Extra, Locale, Message, PluginSource, Source};
use ccare_llm::ToolSpec;
use serde_json::{Value, json};

use crate::care::Care;
use crate::texts::{RestTexts, fill, rest_texts};

/// The tool's name.
pub const CONTEXT_REST: &str = "context_rest";

/// The source kind of the queued rest request (CC-TOOL-4).
pub const REQUEST_SOURCE: &str = "plugin:context-care:request";

/// The advertised maximum `P = min(maxNoteChars, max(8000, minNoteChars))` (CC-TOOL-2):
/// texts show `minNoteChars–P`; the tolerance up to `maxNoteChars` is never shown.
pub fn advertised_max(min_note_chars: u64, max_note_chars: u64) -> u64 {
    max_note_chars.min(min_note_chars.max(8000))
}

/// ECMAScript `String.prototype.trim`: its white space (Unicode `Zs`, tab, vertical tab,
/// form feed, no-break space, U+FEFF) and line terminators (LF, CR, U+2028, U+2029).
/// Rust's `char::is_whitespace` differs only in taking U+0085 and leaving U+FEFF.
pub fn ecmascript_trim(text: &str) -> &str {
    text.trim_matches(|c: char| (c.is_whitespace() && c != '\u{85}') || c == '\u{FEFF}')
}

/// A text's length as CC-TOOL-3 counts it: UTF-16 code units after an ECMAScript trim.
pub fn rest_length(text: &str) -> usize {
    ecmascript_trim(text).encode_utf16().count()
}

/// The tool.
pub(crate) struct RestTool {
    def: ToolDef,
    care: Arc<Care>,
}

impl RestTool {
    pub(crate) fn new(care: Arc<Care>) -> Self {
        let texts = rest_texts(care.locale);
        let min = usize_of(care.config.min_note_chars);
        let shown = usize_of(advertised_max(
            care.config.min_note_chars,
            care.config.max_note_chars,
        ));
        let def = ToolDef {
            spec: ToolSpec {
                name: CONTEXT_REST.to_owned(),
                description: texts.tool_description.into(),
                input_schema: json!({
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["note"],
                    "properties": {
                        "note": {
                            "type": "string",
                            "minLength": care.config.min_note_chars,
                            "description": fill(texts.note_description, min, shown, 0),
                        },
                        "deep": {
                            "type": "boolean",
                            "description": texts.deep_description,
                        },
                        "recovery": {
                            "type": "string",
                            "description": fill(texts.recovery_description, min, shown, 0),
                        },
                    },
                })
                .into(),
            },
            concurrency: Concurrency::Exclusive,
            timeout_ms: None,
            validates_own_arguments: true,
        };
        Self { def, care }
    }
}

fn usize_of(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// A checked `context_rest` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestRequest {
    /// The handoff note, as written.
    pub note: String,
    /// `deep === true`.
    pub deep: bool,
    /// The recovery path, when given.
    pub recovery: Option<String>,
}

fn invalid(message: String) -> ToolFailure {
    ToolFailure::new(codes::INVALID_ARGUMENTS, message)
}

/// CC-TOOL-3 checks 3 to 6, in order, on the arguments; lengths in UTF-16 units after
/// an ECMAScript trim, accepted within `[min_note_chars, max_note_chars]`, reported
/// with the advertised range.
pub fn check_rest_arguments(
    arguments: &Value,
    min_note_chars: u64,
    max_note_chars: u64,
    locale: Locale,
) -> Result<RestRequest, ToolFailure> {
    let texts: &RestTexts = rest_texts(locale);
    let (min, max) = (usize_of(min_note_chars), usize_of(max_note_chars));
    let shown = usize_of(advertised_max(min_note_chars, max_note_chars));
    let object = arguments.as_object();
    if let Some(object) = object
        && object
            .keys()
            .any(|key| !matches!(key.as_str(), "note" | "deep" | "recovery"))
    {
        return Err(invalid(texts.error_unknown_key.to_owned()));
    }
    let note = object
        .and_then(|object| object.get("note"))
        .and_then(Value::as_str);
    let note_length = note.map_or(0, rest_length);
    if !(min..=max).contains(&note_length) {
        let message = if object.is_none() {
            format!(
                "{} {}",
                texts.error_not_object,
                fill(texts.error_note_length, min, shown, note_length)
            )
        } else {
            fill(texts.error_note_length, min, shown, note_length)
        };
        return Err(invalid(message));
    }
    let recovery = match object.and_then(|object| object.get("recovery")) {
        None => None,
        Some(Value::String(recovery)) => {
            let length = rest_length(recovery);
            if !(min..=max).contains(&length) {
                return Err(invalid(fill(
                    texts.error_recovery_length,
                    min,
                    shown,
                    length,
                )));
            }
            Some(recovery.clone())
        }
        Some(_) => return Err(invalid(fill(texts.error_recovery_length, min, shown, 0))),
    };
    let deep = object.and_then(|object| object.get("deep")) == Some(&Value::Bool(true));
    if deep
        && recovery
            .as_deref()
            .is_none_or(|text| ecmascript_trim(text).is_empty())
    {
        return Err(invalid(texts.error_deep_needs_recovery.to_owned()));
    }
    Ok(RestRequest {
        note: note.unwrap_or_default().to_owned(),
        deep,
        recovery,
    })
}

/// The queued user message of a rest (CC-TOOL-4).
pub fn rest_message(request: &RestRequest, locale: Locale) -> Message {
    let texts = rest_texts(locale);
    let mut text = format!("{}\n{}", texts.note_header, request.note);
    if let Some(recovery) = &request.recovery {
        text.push_str(&format!("\n\n{}\n{}", texts.recovery_header, recovery));
    }
    let mut extra = Extra::new();
    extra.insert("contextRest".to_owned(), json!({"deep": request.deep}));
    extra.insert(
        "contextCareTrace".to_owned(),
        json!({"trigger": "context_rest", "deep": request.deep}),
    );
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::Plugin(Box::new(PluginSource {
        kind: REQUEST_SOURCE.to_owned(),
        plugin: Some("context-care".to_owned()),
        form: Some("notice".to_owned()),
        summary: Some(
            if request.deep {
                "Deep rest requested"
            } else {
                "History compaction requested"
            }
            .to_owned(),
        ),
        sections: None,
        extra,
    })));
    message
}

impl Tool for RestTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let care = Arc::clone(&self.care);
        Box::pin(async move {
            let texts = rest_texts(care.locale);
            if !context.inbox.is_attached() {
                return Err(ToolFailure::new(
                    codes::INVALID_ARGUMENTS,
                    texts.error_no_session,
                ));
            }
            if context.cancel.is_cancelled() {
                return Err(ToolFailure::new(codes::CANCELLED, texts.error_cancelled));
            }
            let request = check_rest_arguments(
                &arguments,
                care.config.min_note_chars,
                care.config.max_note_chars,
                care.locale,
            )?;
            care.ensure_session(&context.session)
                .await
                .map_err(|error| ToolFailure::new(codes::INTERNAL, error.to_string()))?;
            let session = context.session.id().clone();
            let already = care.with_session(&session, |state| {
                std::mem::replace(&mut state.rest_pending, true)
            });
            if already {
                return Err(ToolFailure::new(
                    ALREADY_SCHEDULED,
                    texts.error_already_scheduled,
                ));
            }
            if context
                .inbox
                .inject(rest_message(&request, care.locale))
                .is_none()
            {
                care.with_session(&session, |state| state.rest_pending = false);
                return Err(ToolFailure::new(
                    codes::INVALID_ARGUMENTS,
                    texts.error_no_session,
                ));
            }
            let mut result = texts.scheduled.to_owned();
            if !request.deep {
                result.push(' ');
                result.push_str(texts.scheduled_then_continue);
            }
            Ok(vec![ContentBlock::text(result)])
        })
    }
}

/// The failure code of a second `context_rest` while one is pending (CC-TOOL-3, our extension).
pub const ALREADY_SCHEDULED: &str = "ALREADY_SCHEDULED";
