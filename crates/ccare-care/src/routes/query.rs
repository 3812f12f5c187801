//! The query strings of the management routes (watch-rules-ui.md §9): decoded into
//! name/value pairs, each parameter checked by hand so a refusal names the parameter
//! and carries the route's own code (`invalid-query`, `invalid-sequence`, …) rather
//! than a generic `bad-request`. Unknown parameters are refused: a misspelt `ofset`
//! must not silently read as the first page.

use ccare_agent::routes::{RouteReply, RouteRequest};
use ccare_core::SessionId;

/// The code of a query the paged routes refuse (HR §9 table).
pub(crate) const INVALID_QUERY: &str = "invalid-query";
/// The code of a `seq` that is not a sequence number (HR §9 table).
pub(crate) const INVALID_SEQUENCE: &str = "invalid-sequence";

/// The most records one page holds (HR §9: `limit` 1..200).
pub(crate) const MAX_LIMIT: u64 = 200;

/// The decoded name/value pairs of a request's query.
pub(crate) type Pairs = Vec<(String, String)>;

/// The query's pairs; a query that does not decode is refused with `code`.
pub(crate) fn pairs(request: &RouteRequest, code: &str) -> Result<Pairs, RouteReply> {
    request
        .query::<Pairs>()
        .map_err(|_| RouteReply::error(400, code, "the query string does not decode"))
}

/// The last value of `name`, if given.
fn value<'a>(pairs: &'a Pairs, name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// Refuses a parameter not in `known`, naming it.
pub(crate) fn only(pairs: &Pairs, known: &[&str], code: &str) -> Result<(), RouteReply> {
    match pairs.iter().find(|(key, _)| !known.contains(&key.as_str())) {
        Some((key, _)) => Err(RouteReply::error(
            400,
            code,
            format!("unknown query parameter {key:?}"),
        )),
        None => Ok(()),
    }
}

/// The required `sessionId`.
pub(crate) fn session_id(pairs: &Pairs, code: &str) -> Result<SessionId, RouteReply> {
    let Some(text) = value(pairs, "sessionId") else {
        return Err(RouteReply::error(400, code, "sessionId is required"));
    };
    SessionId::new(text.to_owned())
        .map_err(|error| RouteReply::error(400, code, format!("sessionId: {error}")))
}

/// A decimal number: ASCII digits only (no sign, no spaces), within `u64`.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A page of a list: where it starts and how long it is at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    /// The index of its first record.
    pub(crate) offset: u64,
    /// How many records it holds at most, 1..=[`MAX_LIMIT`].
    pub(crate) limit: u64,
}

impl Page {
    /// The required `limit` (1..=200) and the optional `offset` (≥ 0, default 0).
    pub(crate) fn of(pairs: &Pairs) -> Result<Self, RouteReply> {
        let limit = match value(pairs, "limit") {
            None => {
                return Err(RouteReply::error(
                    400,
                    INVALID_QUERY,
                    "limit is required (1..200)",
                ));
            }
            Some(text) => digits(text)
                .filter(|limit| (1..=MAX_LIMIT).contains(limit))
                .ok_or_else(|| {
                    RouteReply::error(
                        400,
                        INVALID_QUERY,
                        format!("limit must be an integer in 1..200, got {text:?}"),
                    )
                })?,
        };
        let offset = match value(pairs, "offset") {
            None => 0,
            Some(text) => digits(text).ok_or_else(|| {
                RouteReply::error(
                    400,
                    INVALID_QUERY,
                    format!("offset must be an integer ≥ 0, got {text:?}"),
                )
            })?,
        };
        Ok(Self { offset, limit })
    }

    /// The page's slice of `items`, and the offset of the next page (`None` on the
    /// last).
    pub(crate) fn slice<'a, T>(&self, items: &'a [T]) -> (&'a [T], Option<u64>) {
        let total = items.len() as u64;
        let start = self.offset.min(total);
        let end = self.offset.saturating_add(self.limit).min(total);
        let page = usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(start, end)| items.get(start..end))
            .unwrap_or_default();
        (page, (end < total).then_some(end))
    }

    /// The page holding the record at `index` (HR §9: `offset` becomes
    /// `floor(index / limit) · limit`).
    pub(crate) fn holding(self, index: u64) -> Self {
        Self {
            offset: index / self.limit * self.limit,
            limit: self.limit,
        }
    }
}

/// The optional `seq`: digits only (`^\d+$`), else `invalid-sequence`.
pub(crate) fn seq(pairs: &Pairs) -> Result<Option<u64>, RouteReply> {
    match value(pairs, "seq") {
        None => Ok(None),
        Some(text) => digits(text).map(Some).ok_or_else(|| {
            RouteReply::error(
                400,
                INVALID_SEQUENCE,
                format!("seq must be a sequence number (digits only), got {text:?}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Pairs {
        list.iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    fn refusal(reply: RouteReply) -> (u16, String) {
        let body = match reply.body {
            ccare_agent::routes::ReplyBody::Json(bytes) => String::from_utf8(bytes).unwrap(),
            other => panic!("{other:?}"),
        };
        (reply.status, body)
    }

    #[test]
    fn hr_table_limit_is_required_and_within_1_to_200() {
        for (given, message) in [
            (None, "limit is required (1..200)"),
            (
                Some("0"),
                "limit must be an integer in 1..200, got \\\"0\\\"",
            ),
            (
                Some("201"),
                "limit must be an integer in 1..200, got \\\"201\\\"",
            ),
            (
                Some("-1"),
                "limit must be an integer in 1..200, got \\\"-1\\\"",
            ),
            (
                Some("+5"),
                "limit must be an integer in 1..200, got \\\"+5\\\"",
            ),
            (Some(""), "limit must be an integer in 1..200, got \\\"\\\""),
        ] {
            let list: Vec<(&str, &str)> = given.map(|limit| ("limit", limit)).into_iter().collect();
            let (status, body) = refusal(Page::of(&pairs(&list)).unwrap_err());
            assert_eq!(status, 400);
            assert_eq!(
                body,
                format!("{{\"error\":\"invalid-query\",\"message\":\"{message}\"}}")
            );
        }
        assert_eq!(
            Page::of(&pairs(&[("limit", "200"), ("offset", "7")])).unwrap(),
            Page {
                offset: 7,
                limit: 200
            }
        );
        assert_eq!(
            Page::of(&pairs(&[("limit", "1")])).unwrap(),
            Page {
                offset: 0,
                limit: 1
            }
        );
    }

    #[test]
    fn hr_table_a_page_ends_with_no_next_offset() {
        let items: Vec<u32> = (0..5).collect();
        let page = Page {
            offset: 0,
            limit: 2,
        };
        assert_eq!(page.slice(&items), (&items[0..2], Some(2)));
        let page = Page {
            offset: 4,
            limit: 2,
        };
        assert_eq!(page.slice(&items), (&items[4..5], None));
        let page = Page {
            offset: 3,
            limit: 2,
        };
        assert_eq!(page.slice(&items), (&items[3..5], None));
        let page = Page {
            offset: 99,
            limit: 2,
        };
        assert_eq!(page.slice(&items), (&items[5..5], None));
        let page = Page {
            offset: u64::MAX,
            limit: 200,
        };
        assert_eq!(page.slice(&items), (&items[5..5], None));
    }

    #[test]
    fn hr_table_seq_locates_its_page() {
        // AC-30: limit 20, the 45th entry (index 44) → offset 40.
        let page = Page {
            offset: 0,
            limit: 20,
        };
        assert_eq!(page.holding(44).offset, 40);
        assert_eq!(page.holding(39).offset, 20);
        assert_eq!(page.holding(0).offset, 0);
        assert_eq!(seq(&pairs(&[("seq", "12")])).unwrap(), Some(12));
        for bad in ["abc", "-1", "1.5", "", " 1"] {
            let (status, body) = refusal(seq(&pairs(&[("seq", bad)])).unwrap_err());
            assert_eq!(status, 400, "{bad}");
            assert!(
                body.starts_with("{\"error\":\"invalid-sequence\""),
                "{body}"
            );
        }
    }

    #[test]
    fn hr_table_unknown_parameters_are_named() {
        let (status, body) = refusal(
            only(
                &pairs(&[("sessionId", "s"), ("ofset", "1")]),
                &["sessionId", "offset"],
                INVALID_QUERY,
            )
            .unwrap_err(),
        );
        assert_eq!(status, 400);
        assert_eq!(
            body,
            "{\"error\":\"invalid-query\",\"message\":\"unknown query parameter \\\"ofset\\\"\"}"
        );
    }
}
