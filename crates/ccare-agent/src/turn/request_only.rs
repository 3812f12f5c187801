//! MP-3: the request-only messages of every segment go out as one user message, after
//! every surface message, on the conversation request and on side requests alike.

use ccare_core::{Message, Source};
use serde_json::Value;

/// Joins the request-only messages of every segment into one user message (MP-3): the
/// text of each, in order, separated by a blank line; other blocks kept in place; the
/// first message's source, with `extra.segments` listing every part's source kind. A
/// single message is left as it is.
pub(crate) fn join_request_only(parts: Vec<(String, Vec<Message>)>) -> Vec<(String, Vec<Message>)> {
    let count: usize = parts.iter().map(|(_, messages)| messages.len()).sum();
    if count <= 1 {
        return parts;
    }
    let owners: Vec<String> = parts.iter().map(|(owner, _)| owner.clone()).collect();
    let messages: Vec<Message> = parts
        .into_iter()
        .flat_map(|(_, messages)| messages)
        .collect();
    let kinds: Vec<Value> = messages
        .iter()
        .map(|message| match &message.source {
            Some(Source::Plugin(plugin)) if plugin.kind == "plugin" => Value::String(format!(
                "plugin:{}",
                plugin.plugin.as_deref().unwrap_or_default()
            )),
            Some(source) => Value::String(source.kind().to_owned()),
            None => Value::Null,
        })
        .collect();
    let mut blocks: Vec<ccare_core::ContentBlock> = Vec::new();
    let mut text = String::new();
    for message in &messages {
        for block in &message.content {
            match block {
                ccare_core::ContentBlock::Text(part) => {
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(&part.text);
                }
                other => {
                    if !text.is_empty() {
                        blocks.push(ccare_core::ContentBlock::text(std::mem::take(&mut text)));
                    }
                    blocks.push(other.clone());
                }
            }
        }
    }
    if !text.is_empty() {
        blocks.push(ccare_core::ContentBlock::text(text));
    }
    let mut joined = Message::from_blocks(blocks);
    joined.source = messages.first().and_then(|message| message.source.clone());
    if let Some(Source::Plugin(plugin)) = &mut joined.source {
        plugin
            .extra
            .insert("segments".to_owned(), Value::Array(kinds));
    }
    vec![(owners.join("+"), vec![joined])]
}
