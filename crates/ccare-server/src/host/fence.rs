//! The fence in front of every route (host.md H-HTTP-3), before authentication:
//! the `Host` must be loopback or trusted, an `Origin` must be the request's own or a
//! trusted one, and `Sec-Fetch-Site: cross-site` is refused. It stops DNS rebinding
//! (a foreign name resolving to 127.0.0.1) and cross-site requests from a browser.

use std::net::IpAddr;

use axum::http::HeaderMap;
use axum::http::header::{HOST, ORIGIN};

/// The refusal code of a `Host` outside the fence.
pub(crate) const HOST_REJECTED: &str = "host-rejected";

/// The refusal code of a cross-site request.
pub(crate) const ORIGIN_REJECTED: &str = "origin-rejected";

/// Why a request did not pass: `(code, message)` for a 403.
pub(crate) type Refusal = (&'static str, String);

/// The hosts the fence lets through besides loopback.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fence {
    trusted: Vec<String>,
}

/// A host name as compared: lower case, no brackets, no trailing dot.
fn normalize(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// The host name of an authority `host[:port]` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    if let Some(inner) = authority.strip_prefix('[') {
        return inner.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has more than one ':'; it has no port here.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The one value of header `name`, if present and text; `Err` when sent twice or not
/// text (nothing to judge it by).
fn single<'a>(
    headers: &'a HeaderMap,
    name: &axum::http::HeaderName,
) -> Result<Option<&'a str>, ()> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(());
    }
    first.to_str().map(Some).map_err(|_| ())
}

impl Fence {
    /// A fence trusting `trusted_hosts` (`[http] trusted_hosts`) besides loopback.
    pub(crate) fn new(trusted_hosts: &[String]) -> Self {
        Self {
            trusted: trusted_hosts.iter().map(|host| normalize(host)).collect(),
        }
    }

    fn allowed(&self, host: &str) -> bool {
        let host = normalize(host);
        is_loopback(&host) || self.trusted.contains(&host)
    }

    /// Passes or refuses a request by its headers.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = match single(headers, &HOST) {
            Ok(Some(host)) if !host.is_empty() => host,
            Ok(_) => return Err((HOST_REJECTED, "the request has no Host header".to_owned())),
            Err(()) => {
                return Err((
                    HOST_REJECTED,
                    "the Host header is repeated or not text".to_owned(),
                ));
            }
        };
        if !self.allowed(host_of(host)) {
            return Err((
                HOST_REJECTED,
                format!("host {host:?} is neither loopback nor in [http] trusted_hosts"),
            ));
        }
        let origin = single(headers, &ORIGIN).map_err(|()| {
            (
                ORIGIN_REJECTED,
                "the Origin header is repeated or not text".to_owned(),
            )
        })?;
        if let Some(origin) = origin {
            let own = format!("http://{host}");
            let trusted = origin
                .split_once("://")
                .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
                .is_some_and(|(_, authority)| {
                    let name = normalize(host_of(authority));
                    self.trusted.contains(&name)
                });
            if !origin.eq_ignore_ascii_case(&own) && !trusted {
                return Err((
                    ORIGIN_REJECTED,
                    format!("origin {origin:?} is not this server's ({own}) nor trusted"),
                ));
            }
        }
        if headers
            .get_all("sec-fetch-site")
            .iter()
            .any(|value| value.as_bytes().eq_ignore_ascii_case(b"cross-site"))
        {
            return Err((
                ORIGIN_REJECTED,
                "a cross-site request (Sec-Fetch-Site)".to_owned(),
            ));
        }
        Ok(())
    }

    /// Whether a cookie-authenticated unsafe request proves it comes from this site
    /// (H-HTTP-3): an `Origin` (which [`Fence::check`] already judged) or
    /// `Sec-Fetch-Site: same-origin`.
    pub(crate) fn same_site_proof(headers: &HeaderMap) -> bool {
        headers.contains_key(ORIGIN)
            || headers
                .get_all("sec-fetch-site")
                .iter()
                .any(|value| value.as_bytes().eq_ignore_ascii_case(b"same-origin"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, axum::http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn h_http_3_hosts_and_origins() {
        let fence = Fence::new(&["ccare.example".to_owned()]);
        let code = |pairs: &[(&'static str, &'static str)]| {
            fence.check(&headers(pairs)).err().map(|refusal| refusal.0)
        };
        assert_eq!(code(&[("host", "127.0.0.1:7878")]), None);
        assert_eq!(code(&[("host", "localhost:1")]), None);
        assert_eq!(code(&[("host", "[::1]:7878")]), None);
        assert_eq!(code(&[("host", "CCARE.example.")]), None);
        assert_eq!(code(&[("host", "evil.example:7878")]), Some(HOST_REJECTED));
        assert_eq!(code(&[]), Some(HOST_REJECTED));
        assert_eq!(
            code(&[("host", "127.0.0.1"), ("host", "127.0.0.1")]),
            Some(HOST_REJECTED)
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("origin", "http://127.0.0.1:7")]),
            None
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("origin", "https://ccare.example")]),
            None
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("origin", "http://127.0.0.1:8")]),
            Some(ORIGIN_REJECTED)
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("origin", "null")]),
            Some(ORIGIN_REJECTED)
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("sec-fetch-site", "cross-site")]),
            Some(ORIGIN_REJECTED)
        );
        assert_eq!(
            code(&[("host", "127.0.0.1:7"), ("sec-fetch-site", "same-site")]),
            None
        );
    }
}
