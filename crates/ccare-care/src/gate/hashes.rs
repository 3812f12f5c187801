//! The two content hashes of a `ready` record (CC-JNL-2): `sourceMessagesHash`, the
//! SHA-256 of the canonical JSON of the surface's messages, and `inputHash`, that of
//! the request's `{messages, system, tools}`.
//!
//! A request is mostly the surface it was built from, so each message is put in
//! canonical form once: a request message that is a surface message (the same shared
//! `Arc`) reuses the surface's bytes, and both hashes are composed from the pieces
//! without a copy of any value.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_core::Message;
use ccare_llm::RequestMessage;
use ccare_session::DerivedMessage;
use serde_json::Value;

use crate::pricing::{sha256_hex, write_canonical, write_compact};

/// The hashes of one request.
pub(super) struct RequestHashes {
    /// `sourceMessagesHash`.
    pub(super) source_messages: String,
    /// `inputHash`.
    pub(super) input: String,
}

/// Hashes the surface `surface` and the request made of `system`, `messages` and
/// `tools` (the canonical form of the tools as the journal records them: `null` when
/// there are none).
pub(super) fn request_hashes(
    surface: &[DerivedMessage],
    system: Option<&str>,
    messages: &[RequestMessage],
    tools: &[u8],
) -> RequestHashes {
    let written: Vec<Vec<u8>> = surface
        .iter()
        .map(|derived| canonical_message(&derived.message))
        .collect();
    let at: HashMap<*const Message, usize> = surface
        .iter()
        .enumerate()
        .map(|(index, derived)| (Arc::as_ptr(&derived.message), index))
        .collect();
    let mut source = Vec::new();
    source.push(b'[');
    for (index, bytes) in written.iter().enumerate() {
        if index > 0 {
            source.push(b',');
        }
        source.extend_from_slice(bytes);
    }
    source.push(b']');
    // `{messages, system, tools}`: the keys in canonical order.
    let mut input = Vec::with_capacity(source.len() + tools.len() + 64);
    input.extend_from_slice(br#"{"messages":["#);
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            input.push(b',');
        }
        match at.get(&Arc::as_ptr(&message.message)) {
            Some(&index) => input.extend_from_slice(&written[index]),
            None => input.extend_from_slice(&canonical_message(&message.message)),
        }
    }
    input.extend_from_slice(br#"],"system":"#);
    write_compact(&system, &mut input);
    input.extend_from_slice(br#","tools":"#);
    input.extend_from_slice(tools);
    input.push(b'}');
    RequestHashes {
        source_messages: sha256_hex(&source),
        input: sha256_hex(&input),
    }
}

fn canonical_message(message: &Message) -> Vec<u8> {
    // Serialising a message (strings and JSON maps) cannot fail.
    let value = serde_json::to_value(message).unwrap_or(Value::Null);
    let mut out = Vec::new();
    write_canonical(&value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use ccare_core::{ContentBlock, Role};
    use serde_json::json;

    use super::*;
    use crate::pricing::canonical_json;

    fn hash_of(value: &Value) -> String {
        sha256_hex(&canonical_json(value))
    }

    fn message(text: &str) -> Arc<Message> {
        Arc::new(Message::from_blocks(vec![ContentBlock::text(text)]))
    }

    #[test]
    fn the_composed_hashes_are_those_of_the_whole_values() {
        let surface: Vec<DerivedMessage> = ["hello", "中文 \"quoted\"", "bye"]
            .iter()
            .enumerate()
            .map(|(seq, text)| DerivedMessage {
                seq: seq as u64,
                role: if seq % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                },
                message: message(text),
            })
            .collect();
        // The request: two surface messages (shared), one rewritten by a hook.
        let messages: Vec<RequestMessage> = [
            Arc::clone(&surface[0].message),
            message("rewritten"),
            Arc::clone(&surface[2].message),
        ]
        .into_iter()
        .map(|message| RequestMessage {
            role: Role::User,
            message,
            origin: None,
        })
        .collect();
        let tools = json!([{"name": "t", "description": "d", "input_schema": {"type": "object"}}]);
        for system in [Some("be brief"), None] {
            let hashes = request_hashes(&surface, system, &messages, &canonical_json(&tools));
            let values = |messages: Vec<&Message>| -> Vec<Value> {
                messages
                    .into_iter()
                    .map(|message| serde_json::to_value(message).unwrap())
                    .collect()
            };
            let surface_values = values(surface.iter().map(|d| &*d.message).collect());
            assert_eq!(
                hashes.source_messages,
                hash_of(&Value::Array(surface_values))
            );
            let input_values = values(messages.iter().map(|m| &*m.message).collect());
            assert_eq!(
                hashes.input,
                hash_of(&json!({"system": system, "tools": tools, "messages": input_values}))
            );
        }
        let none = request_hashes(&[], None, &[], b"null");
        assert_eq!(none.source_messages, hash_of(&json!([])));
        assert_eq!(
            none.input,
            hash_of(&json!({"messages": [], "system": null, "tools": null}))
        );
    }
}
