//! Checks of single values whose type alone says too little (a socket address, an
//! env var name, a host name). Each returns the message the load error carries after
//! the key path: what was expected and what was found.

use std::net::{IpAddr, SocketAddr};

use ccare_core::json::MAX_SAFE_INTEGER;

/// A socket address such as `127.0.0.1:7878` or `[::1]:7878`.
pub(crate) fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "expected a socket address such as \"127.0.0.1:7878\" or \"[::1]:7878\", found {text:?}"
        )
    })
}

/// An environment variable name: ASCII letters, digits and `_`, not starting with a
/// digit (what a POSIX shell can export).
pub(crate) fn env_var_name(text: &str) -> Result<(), String> {
    let mut chars = text.chars();
    let valid = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "expected the name of an environment variable (letters, digits and _, not starting with a digit), found {text:?}"
        ))
    }
}

/// A host name as a `Host` header carries it, without a port: DNS labels of letters,
/// digits and `-` (1–63 characters, not starting or ending with `-`) joined by dots,
/// at most 253 characters; or an IP address (IPv6 in brackets or bare).
pub(crate) fn host_name(text: &str) -> Result<(), String> {
    let bare = text
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(text);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let name = text.strip_suffix('.').unwrap_or(text);
    if !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!(
            "expected a host name such as \"example.com\" or an IP address, without scheme or port, found {text:?}"
        ))
    }
}

/// A positive safe integer (1 ..= 2^53 - 1).
pub(crate) fn positive_safe(value: u64) -> Result<u64, String> {
    if (1..=MAX_SAFE_INTEGER).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "expected a positive integer of at most {MAX_SAFE_INTEGER}, found {value}"
        ))
    }
}

/// A lease duration (`[host] lease_ms`, ACT-1): at least
/// [`MIN_LEASE_MS`](super::MIN_LEASE_MS), at most a safe integer.
pub(crate) fn lease_ms(value: u64) -> Result<u64, String> {
    if (super::MIN_LEASE_MS..=MAX_SAFE_INTEGER).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "expected a lease of at least {} ms (one second) and at most {MAX_SAFE_INTEGER}, found {value}",
            super::MIN_LEASE_MS
        ))
    }
}

/// An IANA time zone identifier this build knows.
pub(crate) fn time_zone(text: &str) -> Result<(), String> {
    ccare_time_context::Zone::named(text).map(|_| ()).map_err(|_| {
        format!("expected an IANA time zone identifier such as \"Asia/Shanghai\" or \"UTC\", found {text:?}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_addresses() {
        for good in [
            "example.com",
            "localhost",
            "a-b.c",
            "10.0.0.1",
            "::1",
            "[::1]",
            "x.",
        ] {
            assert_eq!(host_name(good), Ok(()), "{good}");
        }
        for bad in ["", "http://x", "x:80", "-a.com", "a..b", "a b", "ä.com"] {
            assert!(host_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_var_names() {
        assert_eq!(env_var_name("CCARE_TOKEN"), Ok(()));
        assert_eq!(env_var_name("_x1"), Ok(()));
        assert!(env_var_name("1X").is_err());
        assert!(env_var_name("A-B").is_err());
        assert!(env_var_name("").is_err());
    }
}
