//! The caller's own API key of each session whose agent runs with one (server.md
//! GW-1, `[gateway] pass_through_keys`), for the side requests made for that session
//! (context care's summaries, stream watch's resumes): they are paid by the same key
//! as the conversation. Memory only; an entry goes when the agent's options drop the
//! key or the agent itself is dropped.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_core::SessionId;
use ccare_llm::ApiCredential;
use parking_lot::Mutex;

/// Session id → the key its agent's options carry. Cheap to clone; clones share it.
#[derive(Clone, Default)]
pub(crate) struct SessionCredentials {
    keys: Arc<Mutex<HashMap<String, ApiCredential>>>,
}

impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "SessionCredentials({} sessions)",
            self.keys.lock().len()
        )
    }
}

impl SessionCredentials {
    /// Records `session`'s key, or forgets it (`None`).
    pub(crate) fn set(&self, session: &SessionId, credential: Option<&ApiCredential>) {
        let mut keys = self.keys.lock();
        match credential {
            Some(credential) => {
                keys.insert(session.as_str().to_owned(), credential.clone());
            }
            None => {
                keys.remove(session.as_str());
            }
        }
    }

    /// `session`'s key, when its agent runs with one.
    pub(crate) fn get(&self, session: &SessionId) -> Option<ApiCredential> {
        self.keys.lock().get(session.as_str()).cloned()
    }

    /// Forgets `session`'s key when it is still `credential` (a dropped agent must not
    /// take the key of a newer agent of the same session with it).
    pub(crate) fn forget(&self, session: &SessionId, credential: Option<&ApiCredential>) {
        let mut keys = self.keys.lock();
        if keys.get(session.as_str()) == credential {
            keys.remove(session.as_str());
        }
    }
}
