//! Session ids.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A session id: 1 to 128 characters from `[A-Za-z0-9_.-]`, not starting with `.` or
/// `-`, so it is safe in file names, URLs and SQL keys alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

/// A string that is not a valid [`SessionId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id '{id}': {why}")]
pub struct InvalidSessionId {
    /// The rejected text.
    pub id: String,
    /// What rule it broke.
    pub why: &'static str,
}

impl SessionId {
    /// The largest id length accepted.
    pub const MAX_LEN: usize = 128;

    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidSessionId> {
        let id = id.into();
        let why = if id.is_empty() {
            Some("it is empty")
        } else if id.len() > Self::MAX_LEN {
            Some("it is longer than 128 characters")
        } else if id.starts_with(['.', '-']) {
            Some("it starts with '.' or '-'")
        } else if !id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
        {
            Some("only letters, digits, '_', '.' and '-' are allowed")
        } else {
            None
        };
        match why {
            Some(why) => Err(InvalidSessionId { id, why }),
            None => Ok(Self(id)),
        }
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::str::FromStr for SessionId {
    type Err = InvalidSessionId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::new(text)
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert!(SessionId::new("0193f2a1-7c2b-7def-8000-1234abcd").is_ok());
        assert!(SessionId::new("a.b_c").is_ok());
        assert!(SessionId::new("").is_err());
        assert!(SessionId::new("../etc").is_err());
        assert!(SessionId::new("a/b").is_err());
        assert!(SessionId::new("x".repeat(129)).is_err());
    }
}
