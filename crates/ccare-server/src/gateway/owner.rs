//! Whose a gateway session is (GW-1 with `[gateway] pass_through_keys`): a request
//! authenticated with the server token acts for the server; one authenticated with a
//! client's own API key acts for that key. A session the gateway creates for a client
//! key records a hash of the key in its metadata ([`META_OWNER`], never the key), and
//! the gateway continues a session only for its owner: another key, or the server
//! token, never finds it (its lookup rows are kept apart as well, `view::Views`).

use ccare_agent::routes::Caller;
use ccare_llm::ApiCredential;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The session metadata key holding the owner's key hash (hex sha256).
pub const META_OWNER: &str = "gateway_owner";

/// What the hash of a key is domain-separated by, so it matches no other hash of the
/// same key.
const OWNER_DOMAIN: &[u8] = b"context-care gateway owner\0";

/// Who a gateway request acts for. `Debug` never shows the key.
#[derive(Debug, Clone)]
pub(crate) enum Owner {
    /// The server token: today's sessions, the configured provider keys.
    Server,
    /// A client's own API key, sent upstream for its requests.
    Client {
        /// The hex sha256 of the key (domain-separated), as stored.
        hash: String,
        /// The key, memory only.
        credential: ApiCredential,
    },
}

/// The owner field of a session's metadata.
#[derive(Debug, Default, Deserialize)]
struct OwnerMeta {
    #[serde(default)]
    gateway_owner: Option<String>,
}

impl Owner {
    /// The owner a request authenticated as.
    pub(crate) fn of(caller: &Caller) -> Self {
        match caller {
            Caller::Server => Owner::Server,
            Caller::ClientKey(credential) => {
                let mut digest = Sha256::new();
                digest.update(OWNER_DOMAIN);
                digest.update(credential.secret().as_bytes());
                let hash = digest
                    .finalize()
                    .iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect();
                Owner::Client {
                    hash,
                    credential: credential.clone(),
                }
            }
        }
    }

    /// The stored hash of a client owner; `None` for the server.
    pub(crate) fn hash(&self) -> Option<&str> {
        match self {
            Owner::Server => None,
            Owner::Client { hash, .. } => Some(hash),
        }
    }

    /// The key the owner's requests are sent with; `None`: the configured key.
    pub(crate) fn credential(&self) -> Option<&ApiCredential> {
        match self {
            Owner::Server => None,
            Owner::Client { credential, .. } => Some(credential),
        }
    }

    /// Whether the session with metadata `meta_json` is this owner's: a server
    /// session has no owner hash, a client's has exactly its hash. Unreadable
    /// metadata is nobody's.
    pub(crate) fn owns(&self, meta_json: &str) -> bool {
        let Ok(meta) = serde_json::from_str::<OwnerMeta>(meta_json) else {
            return false;
        };
        meta.gateway_owner.as_deref() == self.hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(key: &str) -> Owner {
        Owner::of(&Caller::ClientKey(ApiCredential::new(key)))
    }

    #[test]
    fn gw_1_an_owner_owns_only_its_sessions_and_never_shows_its_key() {
        let alice = client("sk-alice");
        let hash = alice.hash().unwrap_or_default().to_owned();
        assert_eq!(hash.len(), 64);
        assert!(!format!("{alice:?}").contains("sk-alice"), "{alice:?}");
        let alices = format!(r#"{{"model":"fake/model","gateway_owner":"{hash}"}}"#);
        assert!(alice.owns(&alices));
        assert!(!client("sk-bob").owns(&alices));
        assert!(!Owner::Server.owns(&alices));
        assert!(Owner::Server.owns(r#"{"model":"fake/model"}"#));
        assert!(!alice.owns(r#"{"model":"fake/model"}"#));
        assert!(!Owner::Server.owns("not json"));
    }
}
