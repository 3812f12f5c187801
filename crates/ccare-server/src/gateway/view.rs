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

/// An answer's text as the hash sees it: without the whitespace around it. Clients
/// keep the answers they are sent, but many strip them (`.strip()`, `.trim()`, a
/// reasoning model's leading blank lines dropped), and a stripped answer must still
/// extend the view it came from, or every request would start a new session.
pub(crate) fn answer_text(text: &str) -> &str {
    text.trim()
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
        let mut text = super::parts::hashed_parts(message).unwrap_or_else(|| message.text());
        if message.role == "assistant" {
            text = answer_text(&text).to_owned();
        }
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

    async fn session_row(&self, row: &str) -> Result<Option<Indexed>, StoreError> {
        let entry = self.store.kv_get(DOMAIN, row).await?;
        Ok(entry.and_then(|entry| {
            let session = SessionId::new(String::from_utf8(entry.value).ok()?).ok()?;
            Some(Indexed {
                session,
                version: entry.version,
            })
        }))
    }

    /// The session a client key is bound to.
    pub(crate) async fn session_for_key(&self, key: &str) -> Result<Option<SessionId>, StoreError> {
        Ok(self
            .session_row(&self.key_row(key))
            .await?
            .map(|row| row.session))
    }

    /// The session whose client view ends with `hash`, with the version of the row
    /// that names it.
    pub(crate) async fn session_for_chain(
        &self,
        hash: &str,
    ) -> Result<Option<Indexed>, StoreError> {
        self.session_row(&self.chain_row(hash)).await
    }

    /// The session whose client view has a turn mark at `hash` (a fork point).
    pub(crate) async fn session_for_mark(
        &self,
        hash: &str,
    ) -> Result<Option<SessionId>, StoreError> {
        Ok(self
            .session_row(&self.mark_row(hash))
            .await?
            .map(|row| row.session))
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

    /// A session's client view (empty when the gateway has not answered in it yet),
    /// with the version of its row.
    pub(crate) async fn view(&self, session: &SessionId) -> Result<StoredView, StoreError> {
        let entry = self.store.kv_get(DOMAIN, &view_row(session)).await?;
        Ok(match entry {
            Some(entry) => StoredView {
                view: serde_json::from_slice(&entry.value).unwrap_or_default(),
                version: Some(entry.version),
            },
            None => StoredView::default(),
        })
    }

    /// Records `view` as `session`'s client view and indexes its last hash; the
    /// previous last hash stops naming the session.
    ///
    /// Every write is queued at once, so the store commits them in one group (one
    /// fsync before the client's `[DONE]`, not four). What was read of the rows when
    /// the request found its session ([`Prior::Read`]) is not read again: the writes
    /// compare-and-swap against the versions read then. A session created by this
    /// request ([`Prior::Fresh`]) has no view row, and its hashes index rows that
    /// nearly always do not exist, so they are written as new. The client's `[DONE]`
    /// then waits for no read. A new index row that does exist fails its
    /// compare-and-swap and is written again on its own; a view row another writer
    /// changed since it was read is recorded again from what the rows hold now
    /// ([`Prior::Unknown`]).
    pub(crate) async fn record(
        &self,
        session: &SessionId,
        view: &ClientView,
        prior: Prior,
    ) -> Result<(), StoreError> {
        let row = view_row(session);
        let bytes = serde_json::to_vec(view).map_err(|error| StoreError::Invalid {
            what: "gateway view",
            detail: error.to_string(),
        })?;
        // The view row's version, the hash it ended with, and the version of that
        // hash's chain row when it is known to name the session.
        let reading = prior == Prior::Unknown;
        let (version, previous, previous_version) = match prior {
            Prior::Fresh => (None, None, None),
            Prior::Read {
                version,
                last,
                chain,
            } => (version, last, chain),
            Prior::Unknown => {
                let stored = self.view(session).await?;
                (stored.version, stored.view.last().map(str::to_owned), None)
            }
        };
        let previous = previous.filter(|old| Some(old.as_str()) != view.last());
        // The newest mark is indexed so a client without a key that edits or
        // regenerates a later message finds the fork point (GW-2).
        let mark = view
            .marks
            .last()
            .and_then(|mark| mark.messages.checked_sub(1))
            .and_then(|index| view.hashes.get(index));
        let mut writes = vec![(row, version, Some(bytes))];
        let value = session.as_str().as_bytes().to_vec();
        if let Some(old) = &previous {
            let key = self.chain_row(old);
            // An old chain row is dropped only while it still names the session.
            match previous_version {
                Some(version) => writes.push((key, Some(version), None)),
                None => {
                    if let Some(entry) = self.store.kv_get(DOMAIN, &key).await?
                        && entry.value == value
                    {
                        writes.push((key, Some(entry.version), None));
                    }
                }
            }
        }
        let mut new_rows = Vec::with_capacity(2);
        if let Some(last) = view.last() {
            new_rows.push(self.chain_row(last));
        }
        if let Some(hash) = mark {
            new_rows.push(self.mark_row(hash));
        }
        if reading {
            let current = futures_util::future::try_join_all(
                new_rows.iter().map(|key| self.store.kv_get(DOMAIN, key)),
            )
            .await?;
            for (key, entry) in new_rows.into_iter().zip(current) {
                match entry {
                    Some(entry) if entry.value == value => {}
                    entry => {
                        writes.push((key, entry.map(|entry| entry.version), Some(value.clone())))
                    }
                }
            }
        } else {
            writes.extend(
                new_rows
                    .into_iter()
                    .map(|key| (key, None, Some(value.clone()))),
            );
        }
        let tickets: Vec<_> = writes
            .iter()
            .map(|(key, expected, value)| self.store.kv_cas(DOMAIN, key, *expected, value.clone()))
            .collect();
        let results = futures_util::future::join_all(tickets).await;
        let mut conflicts = Vec::new();
        for (index, ((key, _, value), result)) in writes.into_iter().zip(results).enumerate() {
            match result {
                Ok(_) => {}
                // The view row changed since it was read: recorded again from what
                // the rows hold now.
                Err(StoreError::CasConflict { .. }) if index == 0 && !reading => {
                    return Box::pin(self.record(session, view, Prior::Unknown)).await;
                }
                // Someone else wrote the row meanwhile: the view and the index rows
                // are ours to set, a stale chain row is left to its new owner.
                Err(StoreError::CasConflict { .. }) => {
                    if let Some(value) = value {
                        conflicts.push((key, value));
                    }
                }
                Err(error) => return Err(error),
            }
        }
        for (key, value) in conflicts {
            self.overwrite(&key, value).await?;
        }
        Ok(())
    }
}

/// A lookup row's session and the version of the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Indexed {
    /// The session the row names.
    pub(crate) session: SessionId,
    /// The row's version.
    pub(crate) version: u64,
}

/// A session's client view as read, with its row's version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoredView {
    /// The view (empty when there is no row).
    pub(crate) view: ClientView,
    /// The version of its row; `None` when there is none.
    pub(crate) version: Option<u64>,
}

/// What a request knows of its session's rows when [`Views::record`] writes the new
/// client view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Prior {
    /// The session was created (or forked) for this request: it has no view row.
    Fresh,
    /// The rows as the request read them when it found the session.
    Read {
        /// The view row's version (`None`: it had none).
        version: Option<u64>,
        /// The hash the view ended with.
        last: Option<String>,
        /// The version of that hash's chain row, when it was read naming the
        /// session.
        chain: Option<u64>,
    },
    /// Nothing known: everything is read first.
    Unknown,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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

    /// A view of `hashes` with a turn mark after its last message.
    fn view_of(hashes: &[&str], seq: u64) -> ClientView {
        ClientView {
            hashes: hashes.iter().map(|hash| (*hash).to_owned()).collect(),
            marks: vec![TurnMark {
                messages: hashes.len(),
                seq,
            }],
            head: seq,
        }
    }

    /// The session `row` names, if any.
    async fn named(views: &Views, row: &str) -> Option<String> {
        views
            .store
            .kv_get(DOMAIN, row)
            .await
            .unwrap()
            .map(|entry| String::from_utf8(entry.value).unwrap())
    }

    /// What a request reads when it finds `session` by its chain row.
    async fn read_prior(views: &Views, session: &SessionId) -> Prior {
        let stored = views.view(session).await.unwrap();
        let last = stored.view.last().map(str::to_owned);
        let chain = match &last {
            Some(last) => views
                .session_for_chain(last)
                .await
                .unwrap()
                .map(|row| row.version),
            None => None,
        };
        Prior::Read {
            version: stored.version,
            last,
            chain,
        }
    }

    /// Rows over a fresh store, as the server token finds them.
    fn views() -> Views {
        Views::new(Arc::new(ccare_store::MemoryStore::new()), &Owner::Server)
    }

    /// Session `s1` after its first answer: view `a1, a2`, a turn mark after both.
    async fn first_answer() -> (Views, SessionId) {
        let views = views();
        let session = SessionId::new("s1".to_owned()).unwrap();
        views
            .record(&session, &view_of(&["a1", "a2"], 4), Prior::Fresh)
            .await
            .unwrap();
        (views, session)
    }

    #[tokio::test]
    async fn gw_2_a_view_recorded_from_what_was_read_moves_the_chain_row() {
        let (views, session) = first_answer().await;
        let prior = read_prior(&views, &session).await;
        let next = view_of(&["a1", "a2", "a3", "a4"], 8);
        views.record(&session, &next, prior).await.unwrap();
        assert_eq!(views.view(&session).await.unwrap().view, next);
        assert_eq!(named(&views, "chain/a4").await.as_deref(), Some("s1"));
        assert_eq!(
            named(&views, "chain/a2").await,
            None,
            "the old end is dropped"
        );
        assert_eq!(named(&views, "at/a4").await.as_deref(), Some("s1"));
        assert_eq!(named(&views, "at/a2").await.as_deref(), Some("s1"));
    }

    #[tokio::test]
    async fn gw_2_a_view_changed_since_it_was_read_is_recorded_from_the_rows() {
        let (views, session) = first_answer().await;
        let stale = read_prior(&views, &session).await;
        // Another request of the session records its view in between.
        let other = read_prior(&views, &session).await;
        views
            .record(&session, &view_of(&["a1", "a2", "b3", "b4"], 8), other)
            .await
            .unwrap();
        let ours = view_of(&["a1", "a2", "c3", "c4"], 12);
        views.record(&session, &ours, stale).await.unwrap();
        assert_eq!(
            views.view(&session).await.unwrap().view,
            ours,
            "the last writer wins"
        );
        assert_eq!(named(&views, "chain/c4").await.as_deref(), Some("s1"));
        assert_eq!(
            named(&views, "chain/b4").await,
            None,
            "the other request's end no longer names the session"
        );
        assert_eq!(named(&views, "chain/a2").await, None);
    }

    #[tokio::test]
    async fn gw_2_an_index_row_of_another_session_is_taken_over() {
        let views = views();
        let first = SessionId::new("s1".to_owned()).unwrap();
        let second = SessionId::new("s2".to_owned()).unwrap();
        views
            .record(&first, &view_of(&["a1", "a2"], 4), Prior::Fresh)
            .await
            .unwrap();
        // A fresh session whose view ends where s1's does: its rows are written as
        // new, fail their compare-and-swap and are written again.
        views
            .record(&second, &view_of(&["a1", "a2"], 6), Prior::Fresh)
            .await
            .unwrap();
        assert_eq!(named(&views, "chain/a2").await.as_deref(), Some("s2"));
        assert_eq!(named(&views, "at/a2").await.as_deref(), Some("s2"));
        assert_eq!(
            views.view(&first).await.unwrap().view,
            view_of(&["a1", "a2"], 4),
            "s1's own view is untouched"
        );
    }
}
