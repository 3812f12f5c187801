//! A per-call API key (server.md GW-1, `[gateway] pass_through_keys`): the key a
//! gateway client sent, used for that client's requests instead of the provider's
//! configured key. It lives in memory only: it is never serialized, and its `Debug`
//! never shows the secret.

use std::fmt;
use std::sync::Arc;

/// An API key for one caller's requests. Cheap to clone (the secret is shared).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiCredential {
    secret: Arc<str>,
}

impl fmt::Debug for ApiCredential {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("ApiCredential(..)")
    }
}

impl ApiCredential {
    /// A credential of this key (as the client sent it, trimmed by the caller).
    pub fn new(secret: impl Into<Arc<str>>) -> Self {
        Self {
            secret: secret.into(),
        }
    }

    /// The key, to put in an `Authorization` header. Never log or store it.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gw_1_debug_never_shows_the_key() {
        let credential = ApiCredential::new("sk-client-secret");
        assert_eq!(format!("{credential:?}"), "ApiCredential(..)");
        assert_eq!(
            format!("{:?}", Some(credential.clone())),
            "Some(ApiCredential(..))"
        );
        assert_eq!(credential.secret(), "sk-client-secret");
    }
}
