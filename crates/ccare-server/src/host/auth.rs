//! Authentication (host.md H-HTTP-2): the bearer token, or the session cookie that
//! `POST /api/auth/session {token}` sets for browsers (`EventSource` cannot send
//! headers).
//!
//! The cookie carries a random per-login secret, never the token itself: the token
//! does not sit in the browser's cookie jar, a logout (`DELETE /api/auth/session`)
//! revokes exactly that login, and a restart of the server ends every login. Every
//! comparison of a secret runs in constant time (`subtle`); the cookie check compares
//! against every live login rather than looking one up, so its timing says nothing
//! about which bytes matched.

use std::collections::VecDeque;
use std::fmt;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use parking_lot::Mutex;
use subtle::ConstantTimeEq;

/// The name of the session cookie.
pub const SESSION_COOKIE: &str = "ccare_session";

/// How many browser logins are kept; the oldest is forgotten beyond that.
const MAX_LOGINS: usize = 64;

/// The bearer token of the server (H-HTTP-2). Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    secret: String,
}

impl fmt::Debug for Token {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Token(..)")
    }
}

impl Token {
    /// A token of this text (from `[http] token_env`, the token file, or a test).
    pub fn new(secret: impl Into<String>) -> Self {
        Self {
            secret: secret.into(),
        }
    }

    /// The secret, to print once or to send.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

/// 32 random bytes from the OS, hex: a token or a login secret.
pub(crate) fn random_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// `Authorization: Bearer TOKEN`.
    Bearer,
    /// The session cookie of a live login.
    Cookie,
}

/// The token of an `Authorization: Bearer TOKEN` header, trimmed, when there is a
/// non-empty one (whatever it is: [`Auth::check`] says whether it is the server's).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The token and the live browser logins.
#[derive(Debug)]
pub(crate) struct Auth {
    token: Token,
    logins: Mutex<VecDeque<String>>,
}

/// Constant-time equality of two secrets (the length is not secret).
fn same(left: &str, right: &str) -> bool {
    bool::from(left.as_bytes().ct_eq(right.as_bytes()))
}

/// The values of cookie `name` in the request's `Cookie` headers.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

impl Auth {
    /// Authentication by `token`, with no logins yet.
    pub(crate) fn new(token: Token) -> Self {
        Self {
            token,
            logins: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether `candidate` is the token (constant time).
    pub(crate) fn is_token(&self, candidate: &str) -> bool {
        same(candidate, &self.token.secret)
    }

    /// How the request authenticated, if it did. A bearer header that is wrong fails
    /// even when a good cookie is also sent (the client said who it is).
    pub(crate) fn check(&self, headers: &HeaderMap) -> Option<Credential> {
        if let Some(value) = headers.get(AUTHORIZATION) {
            let value = value.to_str().ok()?;
            let (scheme, token) = value.split_once(' ')?;
            return (scheme.eq_ignore_ascii_case("bearer") && self.is_token(token.trim()))
                .then_some(Credential::Bearer);
        }
        let logins = self.logins.lock();
        let mut found = false;
        for candidate in cookies(headers, SESSION_COOKIE) {
            for login in logins.iter() {
                found |= same(candidate, login);
            }
        }
        found.then_some(Credential::Cookie)
    }

    /// Starts a browser login: its secret, for the cookie.
    pub(crate) fn login(&self) -> Result<String, getrandom::Error> {
        let secret = random_secret()?;
        let mut logins = self.logins.lock();
        if logins.len() >= MAX_LOGINS {
            logins.pop_front();
        }
        logins.push_back(secret.clone());
        Ok(secret)
    }

    /// Ends the logins whose cookies the request carries; returns how many.
    pub(crate) fn logout(&self, headers: &HeaderMap) -> usize {
        let sent: Vec<&str> = cookies(headers, SESSION_COOKIE).collect();
        let mut logins = self.logins.lock();
        let before = logins.len();
        logins.retain(|login| !sent.iter().any(|candidate| same(candidate, login)));
        before - logins.len()
    }
}

/// The `Set-Cookie` value of a login.
pub(crate) fn login_cookie(secret: &str) -> String {
    format!("{SESSION_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/")
}

/// The `Set-Cookie` value that clears the cookie.
pub(crate) fn logout_cookie() -> String {
    format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(value) = value.parse() {
                map.append(*name, value);
            }
        }
        map
    }

    #[test]
    fn h_http_2_bearer_and_cookie() {
        let auth = Auth::new(Token::new("t0k"));
        assert_eq!(
            auth.check(&headers(&[("authorization", "Bearer t0k".into())])),
            Some(Credential::Bearer)
        );
        assert_eq!(
            auth.check(&headers(&[("authorization", "bearer t0k".into())])),
            Some(Credential::Bearer)
        );
        assert_eq!(
            auth.check(&headers(&[("authorization", "Bearer t0K".into())])),
            None
        );
        assert_eq!(
            auth.check(&headers(&[("authorization", "Basic t0k".into())])),
            None
        );
        assert_eq!(auth.check(&headers(&[])), None);
        let Ok(secret) = auth.login() else {
            panic!("no randomness");
        };
        assert_eq!(secret.len(), 64);
        let cookie = headers(&[("cookie", format!("a=b; {SESSION_COOKIE}={secret}"))]);
        assert_eq!(auth.check(&cookie), Some(Credential::Cookie));
        assert_eq!(
            auth.check(&headers(&[("cookie", format!("{SESSION_COOKIE}=t0k"))])),
            None
        );
        assert_eq!(auth.logout(&cookie), 1);
        assert_eq!(auth.check(&cookie), None);
    }
}
