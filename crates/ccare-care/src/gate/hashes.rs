//! The two content hashes of a `ready` record (CC-JNL-2): `sourceMessagesHash`, the
//! SHA-256 of the canonical JSON of the surface's messages, and `inputHash`, that of
//! the request's `{messages, system, tools}`.
//!
//! Both are hashes over a list of messages that grows by a few messages per request
//! in a long session, so each session keeps a [`HashMemo`]: for each of the two lists,
//! the messages hashed last time (shared `Arc`s, kept so their identity holds) and the
//! SHA-256 state after them. A list that starts with the kept messages (the same
//! `Arc`s, in order) resumes from that state and hashes only the new messages; any
//! other (a replace, a hook's rewrite of an earlier message, the first request) is
//! hashed from the start. The closing bytes (`]`, or `],"system":…,"tools":…}`) are
//! hashed on a copy of the state, so the state stays a prefix. Each new message is put
//! in canonical form once, whether one list needs it or both.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_core::Message;
use ccare_llm::RequestMessage;
use ccare_session::DerivedMessage;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::pricing::{hex_of, write_canonical, write_compact};

/// The hashes of one request.
pub(super) struct RequestHashes {
    /// `sourceMessagesHash`.
    pub(super) source_messages: String,
    /// `inputHash`.
    pub(super) input: String,
}

/// What a session's latest request hashed (see the module doc); one per session.
#[derive(Default)]
pub(crate) struct HashMemo {
    source: Prefix,
    input: Prefix,
}

impl std::fmt::Debug for HashMemo {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HashMemo")
            .field("source", &self.source.messages.len())
            .field("input", &self.input.messages.len())
            .finish()
    }
}

/// A list's opening and `messages`, comma-separated, hashed into `state`.
#[derive(Default)]
struct Prefix {
    messages: Vec<Arc<Message>>,
    /// `None` until a list was hashed.
    state: Option<Sha256>,
}

impl Prefix {
    /// Hashes `opening` and `list` (resuming from the kept state when `list` starts
    /// with the kept messages), keeps the result, and returns a copy of the state to
    /// close.
    fn extend<'a>(
        &mut self,
        opening: &[u8],
        list: impl ExactSizeIterator<Item = &'a Arc<Message>> + Clone,
        written: &mut Written,
    ) -> Sha256 {
        let kept = self.messages.len();
        let resumes = self.state.is_some()
            && list.len() >= kept
            && list
                .clone()
                .zip(&self.messages)
                .all(|(message, kept)| Arc::ptr_eq(message, kept));
        let mut state = match (&self.state, resumes) {
            (Some(state), true) => state.clone(),
            _ => {
                self.messages.clear();
                let mut state = Sha256::new();
                state.update(opening);
                state
            }
        };
        for message in list.skip(self.messages.len()) {
            if !self.messages.is_empty() {
                state.update(b",");
            }
            state.update(written.of(message));
            self.messages.push(Arc::clone(message));
        }
        self.state = Some(state.clone());
        state
    }
}

/// The canonical form of each new message of one request, by identity.
#[derive(Default)]
struct Written(HashMap<*const Message, Vec<u8>>);

impl Written {
    fn of(&mut self, message: &Arc<Message>) -> &[u8] {
        self.0
            .entry(Arc::as_ptr(message))
            .or_insert_with(|| canonical_message(message))
    }
}

/// Hashes the surface `surface` and the request made of `system`, `messages` and
/// `tools` (the canonical form of the tools as the journal records them: `null` when
/// there are none), resuming from and updating the session's `memo`.
pub(super) fn request_hashes(
    memo: &mut HashMemo,
    surface: &[DerivedMessage],
    system: Option<&str>,
    messages: &[RequestMessage],
    tools: &[u8],
) -> RequestHashes {
    let mut written = Written::default();
    let mut source = memo.source.extend(
        b"[",
        surface.iter().map(|derived| &derived.message),
        &mut written,
    );
    source.update(b"]");
    // `{messages, system, tools}`: the keys in canonical order.
    let mut input = memo.input.extend(
        br#"{"messages":["#,
        messages.iter().map(|message| &message.message),
        &mut written,
    );
    let mut closing = Vec::with_capacity(tools.len() + 64);
    closing.extend_from_slice(br#"],"system":"#);
    write_compact(&system, &mut closing);
    closing.extend_from_slice(br#","tools":"#);
    closing.extend_from_slice(tools);
    closing.push(b'}');
    input.update(&closing);
    RequestHashes {
        source_messages: hex_of(&source.finalize()),
        input: hex_of(&input.finalize()),
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
        hex_of(&Sha256::digest(canonical_json(value)))
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
            let hashes = request_hashes(
                &mut HashMemo::default(),
                &surface,
                system,
                &messages,
                &canonical_json(&tools),
            );
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
        let none = request_hashes(&mut HashMemo::default(), &[], None, &[], b"null");
        assert_eq!(none.source_messages, hash_of(&json!([])));
        assert_eq!(
            none.input,
            hash_of(&json!({"messages": [], "system": null, "tools": null}))
        );
    }

    fn derived(messages: &[Arc<Message>]) -> Vec<DerivedMessage> {
        messages
            .iter()
            .enumerate()
            .map(|(seq, message)| DerivedMessage {
                seq: seq as u64,
                role: Role::User,
                message: Arc::clone(message),
            })
            .collect()
    }

    fn request(messages: &[Arc<Message>]) -> Vec<RequestMessage> {
        messages
            .iter()
            .map(|message| RequestMessage {
                role: Role::User,
                message: Arc::clone(message),
                origin: None,
            })
            .collect()
    }

    /// Hashes `surface` and `sent` with `memo` and with a fresh memo: the same hashes.
    fn same_as_fresh(memo: &mut HashMemo, surface: &[Arc<Message>], sent: &[Arc<Message>]) {
        let (surface, sent) = (derived(surface), request(sent));
        let kept = request_hashes(memo, &surface, Some("sys"), &sent, b"null");
        let fresh = request_hashes(
            &mut HashMemo::default(),
            &surface,
            Some("sys"),
            &sent,
            b"null",
        );
        assert_eq!(kept.source_messages, fresh.source_messages);
        assert_eq!(kept.input, fresh.input);
    }

    #[test]
    fn a_kept_memo_gives_the_hashes_of_a_fresh_one_as_the_session_changes() {
        let mut memo = HashMemo::default();
        let mut surface: Vec<Arc<Message>> = (0..4).map(|n| message(&format!("m{n}"))).collect();
        // The first request, then two that append (the memo resumes).
        same_as_fresh(&mut memo, &surface, &surface);
        for n in 4..6 {
            surface.push(message(&format!("m{n}")));
            same_as_fresh(&mut memo, &surface, &surface);
        }
        assert_eq!(memo.source.messages.len(), 6);
        // A hook rewrote the last message sent: the input list differs from the kept one
        // at its end, the source list is the surface.
        let mut sent = surface.clone();
        sent[5] = message("m5, with a reminder");
        same_as_fresh(&mut memo, &surface, &sent);
        // A replace in the middle (a compaction): the same text in a new message is a
        // new identity, and both lists are hashed from the start.
        surface.splice(1..3, [message("summary of m1 and m2")]);
        same_as_fresh(&mut memo, &surface, &surface);
        assert!(Arc::ptr_eq(&memo.source.messages[1], &surface[1]));
        // Shorter than what is kept, then empty.
        surface.truncate(2);
        same_as_fresh(&mut memo, &surface, &surface);
        same_as_fresh(&mut memo, &[], &[]);
        // And growing again after that.
        same_as_fresh(&mut memo, &surface, &surface);
    }
}
