//! The client's view of a gateway session (GW-2, GW-3): the chain hashes of the
//! messages the client has sent and been answered, kept beside the session's model
//! view in the store's KV (domain [`DOMAIN`]).
//!
//! Rows, all small:
//! - `view/<session id>` → [`ClientView`] (one hash per client message, in order);
//! - `chain/<hash>` → the session whose client view ends with that hash (a request
//!   whose messages extend it continues the session);
//! - `key/<sha256 of the client's key>` → the session a header or body key names;
//! - `at/<hash>` → the session with a turn mark (a fork point) after that message, so
//!   an edited or regenerated message finds where to fork (GW-2).
//!
//! The hash of message *i* covers message *i* and, through message *i − 1*'s hash,
//! everything before it: two conversations that share a system prompt share only the
//! first hash, and their views stay apart.
//!
//! The lookup rows (`chain/`, `key/`, `at/`) of sessions a client's own API key owns
//! (`owner`) are kept under `owner/<owner hash>/`, so a request never finds a session
//! of another owner through them; the server token's rows are as above.

use std::sync::Arc;

use ccare_core::SessionId;
use ccare_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::gateway::owner::Owner;
use crate::gateway::wire::ChatMessage;

/// The KV domain of the gateway's rows.
pub const DOMAIN: &str = "gateway";

/// What the client has seen of a session: the chain hash after each message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClientView {
    /// One hash per client message, oldest first.
    pub(crate) hashes: Vec<String>,
    /// Where the session can be forked (GW-2): after this many client messages the
    /// session's log stood at a closed turn ending at `seq`.
    #[serde(default)]
    pub(crate) marks: Vec<TurnMark>,
    /// The session's last seq when the view was recorded: maintenance after it
    /// changes the next upstream request (GW-7).
    #[serde(default)]
    pub(crate) head: u64,
}

/// A point of the client view where a turn ended (a fork boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TurnMark {
    /// How many client messages the view held then (the answer included).
    pub(crate) messages: usize,
    /// The seq of the turn's `turn/end`.
    pub(crate) seq: u64,
}

impl ClientView {
    /// The hash of the whole view (`None` when empty).
    pub(crate) fn last(&self) -> Option<&str> {
        self.hashes.last().map(String::as_str)
    }
}

/// The role as the hash sees it: `developer` is OpenAI's new name for `system`.
fn normalized_role(role: &str) -> &str {
    match role {
        "developer" => "system",
        other => other,
    }
}

/// The chain hash after a message with `role` and `text`, following `previous`.
pub(crate) fn next_hash(previous: &str, role: &str, text: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update([0]);
    hasher.update(normalized_role(role).as_bytes());
    hasher.update([0]);
    hasher.update(text.len().to_string().as_bytes());
    hasher.update([b':']);
    hasher.update(text.as_bytes());
    hex(&hasher.finalize()[..16])
}

/// The chain hash after each of `messages`.
pub(crate) fn chain(messages: &[ChatMessage]) -> Vec<String> {
    let mut hashes: Vec<String> = Vec::with_capacity(messages.len());
    for message in messages {
        let previous = hashes.last().map(String::as_str).unwrap_or("");
        let mut text = message.text();
        if let Some(call) = &message.tool_call_id {
            text.push_str("\u{0}call:");
            text.push_str(call);
        }
        if let Some(calls) = &message.tool_calls {
            text.push_str(&calls_suffix(&read_calls(calls)));
        }
        hashes.push(next_hash(previous, &message.role, &text));
    }
    hashes
}

/// The `(id, name, arguments)` of an assistant message's `tool_calls`, read
/// leniently (SDKs add fields and order keys differently; only these three count).
pub(crate) fn read_calls(calls: &serde_json::Value) -> Vec<(String, String, String)> {
    let field = |value: &serde_json::Value, key: &str| {
        value
            .get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    calls
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|call| {
                    let function = call.get("function").cloned().unwrap_or_default();
                    (
                        field(call, "id"),
                        field(&function, "name"),
                        field(&function, "arguments"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What an assistant message's tool calls add to its hashed text (nothing when none).
pub(crate) fn calls_suffix(calls: &[(String, String, String)]) -> String {
    let mut text = String::new();
    if calls.is_empty() {
        return text;
    }
    text.push_str("\u{0}calls:");
    for (id, name, arguments) in calls {
        // Arguments are compared as JSON when they are JSON (whitespace aside).
        let arguments = serde_json::from_str::<serde_json::Value>(arguments)
            .map_or_else(|_| arguments.clone(), |value| value.to_string());
        text.push_str(&format!(
            "{}:{id}{}:{name}{}:{arguments};",
            id.len(),
            name.len(),
            arguments.len()
        ));
    }
    text
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn view_row(session: &SessionId) -> String {
    format!("view/{}", session.as_str())
}

/// The gateway's rows in the store, as one owner finds them.
#[derive(Clone)]
pub(crate) struct Views {
    store: Arc<dyn Store>,
    /// The prefix of the owner's lookup rows: empty for the server token,
    /// `owner/<hash>/` for a client's own key.
    scope: String,
}

impl std::fmt::Debug for Views {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Views").finish_non_exhaustive()
    }
}

impl Views {
    /// The rows of `store` as `owner` finds them.
    pub(crate) fn new(store: Arc<dyn Store>, owner: &Owner) -> Self {
        let scope = owner
            .hash()
            .map_or_else(String::new, |hash| format!("owner/{hash}/"));
        Self { store, scope }
    }

    /// The KV key of a client's session key (hashed: keys may be user ids).
    fn key_row(&self, key: &str) -> String {
        format!("{}key/{}", self.scope, hex(&Sha256::digest(key.as_bytes())))
    }

    fn chain_row(&self, hash: &str) -> String {
        format!("{}chain/{hash}", self.scope)
    }

    fn mark_row(&self, hash: &str) -> String {
        format!("{}at/{hash}", self.scope)
    }

    async fn session_row(&self, row: &str) -> Result<Option<SessionId>, StoreError> {
        let entry = self.store.kv_get(DOMAIN, row).await?;
        Ok(entry
            .and_then(|entry| String::from_utf8(entry.value).ok())
            .and_then(|id| SessionId::new(id).ok()))
    }

    /// The session a client key is bound to.
    pub(crate) async fn session_for_key(&self, key: &str) -> Result<Option<SessionId>, StoreError> {
        self.session_row(&self.key_row(key)).await
    }

    /// The session whose client view ends with `hash`.
    pub(crate) async fn session_for_chain(
        &self,
        hash: &str,
    ) -> Result<Option<SessionId>, StoreError> {
        self.session_row(&self.chain_row(hash)).await
    }

    /// The session whose client view has a turn mark at `hash` (a fork point).
    pub(crate) async fn session_for_mark(
        &self,
        hash: &str,
    ) -> Result<Option<SessionId>, StoreError> {
        self.session_row(&self.mark_row(hash)).await
    }

    /// Binds a client key to `session`, replacing the session it named (a fork
    /// continues the key's conversation).
    pub(crate) async fn rebind_key(
        &self,
        key: &str,
        session: &SessionId,
    ) -> Result<(), StoreError> {
        self.put(&self.key_row(key), session).await
    }

    /// Writes `row` → `session`, whatever it held.
    async fn put(&self, row: &str, session: &SessionId) -> Result<(), StoreError> {
        self.overwrite(row, session.as_str().as_bytes().to_vec())
            .await
    }

    /// Writes `value` to `row`, whatever it held (three tries against concurrent
    /// writers; the last writer wins).
    async fn overwrite(&self, row: &str, value: Vec<u8>) -> Result<(), StoreError> {
        for _ in 0..3 {
            let version = self
                .store
                .kv_get(DOMAIN, row)
                .await?
                .map(|entry| entry.version);
            match self
                .store
                .kv_cas(DOMAIN, row, version, Some(value.clone()))
                .await
            {
                Ok(_) => return Ok(()),
                Err(StoreError::CasConflict { .. }) => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// A session's client view (empty when the gateway has not answered in it yet).
    pub(crate) async fn view(&self, session: &SessionId) -> Result<ClientView, StoreError> {
        let entry = self.store.kv_get(DOMAIN, &view_row(session)).await?;
        Ok(entry
            .and_then(|entry| serde_json::from_slice(&entry.value).ok())
            .unwrap_or_default())
    }

    /// Records `view` as `session`'s client view and indexes its last hash; the
    /// previous last hash stops naming the session.
    ///
    /// The rows are read first, then every write is queued at once, so the store
    /// commits them in one group (one fsync before the client's `[DONE]`, not four). A
    /// row another writer changed in between is written again on its own.
    ///
    /// For a session created by this request (`fresh`) nothing is read: it has no view
    /// row yet, and its hashes index rows that nearly always do not exist, so they are
    /// written as new; one that does exist fails its compare-and-swap and is written
    /// again on its own, as above. The client's `[DONE]` then waits for no read.
    pub(crate) async fn record(
        &self,
        session: &SessionId,
        view: &ClientView,
        fresh: bool,
    ) -> Result<(), StoreError> {
        let row = view_row(session);
        let bytes = serde_json::to_vec(view).map_err(|error| StoreError::Invalid {
            what: "gateway view",
            detail: error.to_string(),
        })?;
        let stored = if fresh {
            None
        } else {
            self.store.kv_get(DOMAIN, &row).await?
        };
        let version = stored.as_ref().map(|entry| entry.version);
        let previous = stored
            .and_then(|entry| serde_json::from_slice::<ClientView>(&entry.value).ok())
            .and_then(|old| old.last().map(str::to_owned))
            .filter(|old| Some(old.as_str()) != view.last());
        // The newest mark is indexed so a client without a key that edits or
        // regenerates a later message finds the fork point (GW-2).
        let mark = view
            .marks
            .last()
            .and_then(|mark| mark.messages.checked_sub(1))
            .and_then(|index| view.hashes.get(index));
        let mut rows: Vec<(String, Option<Vec<u8>>)> = Vec::with_capacity(3);
        if let Some(old) = &previous {
            rows.push((self.chain_row(old), None));
        }
        let value = session.as_str().as_bytes().to_vec();
        if let Some(last) = view.last() {
            rows.push((self.chain_row(last), Some(value.clone())));
        }
        if let Some(hash) = mark {
            rows.push((self.mark_row(hash), Some(value)));
        }
        let current = if fresh {
            vec![None; rows.len()]
        } else {
            futures_util::future::try_join_all(
                rows.iter().map(|(key, _)| self.store.kv_get(DOMAIN, key)),
            )
            .await?
        };
        let mut writes = vec![(row, version, Some(bytes))];
        for ((key, value), entry) in rows.into_iter().zip(current) {
            match (&value, entry) {
                // An old chain row is dropped only while it still names the session.
                (None, Some(entry)) if entry.value == session.as_str().as_bytes() => {
                    writes.push((key, Some(entry.version), None));
                }
                (None, _) => {}
                (Some(wanted), Some(entry)) if &entry.value == wanted => {}
                (Some(_), entry) => writes.push((key, entry.map(|entry| entry.version), value)),
            }
        }
        let tickets: Vec<_> = writes
            .iter()
            .map(|(key, expected, value)| self.store.kv_cas(DOMAIN, key, *expected, value.clone()))
            .collect();
        let results = futures_util::future::join_all(tickets).await;
        for ((key, _, value), result) in writes.into_iter().zip(results) {
            match result {
                Ok(_) => {}
                // Someone else wrote the row meanwhile: the view and the index rows
                // are ours to set, a stale chain row is left to its new owner.
                Err(StoreError::CasConflict { .. }) => {
                    if let Some(value) = value {
                        self.overwrite(&key, value).await?;
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, text: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_owned(),
            content: Some(crate::gateway::wire::ChatContent::Text(text.to_owned())),
            tool_calls: None,
            tool_call_id: None,
        }
    }

    #[test]
    fn gw_2_the_chain_hash_covers_everything_before() {
        let a = chain(&[message("system", "be brief"), message("user", "hi")]);
        let b = chain(&[message("system", "be brief"), message("user", "hello")]);
        let c = chain(&[message("developer", "be brief"), message("user", "hi")]);
        assert_eq!(a[0], b[0], "the shared system prompt hashes alike");
        assert_ne!(a[1], b[1]);
        assert_eq!(a, c, "developer is system");
        let extended = chain(&[
            message("system", "be brief"),
            message("user", "hi"),
            message("assistant", "hello"),
        ]);
        assert_eq!(extended[..2], a[..]);
        assert_eq!(a[1].len(), 32);
    }
}
