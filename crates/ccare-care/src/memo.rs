//! The no-useful-range memo key (CC-MNT-5): what a summary's outcome depends on, so a
//! selection found not reducible is skipped until one of those changes.
//!
//! The key is a SHA-256 over the policy (the scale to two decimals, the conversation
//! header, the route, the summary config) and, for each selected message (own messages
//! left out), its seq, its unscaled price and its JSON. Log growth and status notices
//! change none of these; a change of content, scale, route, header or summary policy
//! changes the key.
//!
//! Why unscaled prices and a rounded scale: each settled request recalibrates the scale,
//! and a provider's count moves by a fraction of a percent from one request to the next.
//! Keyed exactly, the memo would never hold with a real provider; a real change of scale
//! still re-runs.
//!
//! The spec also keys on the scoped-prompt config because its summary request carries
//! the conversation's scoped prompts. ccare's summary request is a transcript of the
//! selection alone (`summary.rs`), so scoped prompts cannot change its outcome and are
//! left out: a prompt change alone does not re-run a futile summary.
//!
//! A message at a seq never changes (the log is append-only; a replacement is a new
//! seq), so each selected message contributes its own digest ([`message_digest`]) and
//! price, which the plugin computes once per seq and keeps: the key is computed at
//! every armed boundary over selections of thousands of messages. Keys are only ever
//! compared with keys this module wrote.

use std::io::Write;

use ccare_core::Message;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::SummaryConfig;
use crate::pricing::Price;

/// What a summary's outcome depends on besides the selected messages.
#[derive(Debug, Clone, Copy)]
pub struct MemoPolicy<'a> {
    /// The frozen text scale.
    pub scale: f64,
    /// The calibration header key of the latest conversation request, if any.
    pub header: Option<&'a str>,
    /// The conversation route, `provider/model`.
    pub route: Option<&'a str>,
    /// The explicit summary route and limits.
    pub summary: &'a SummaryConfig,
}

/// A [`Sha256`] as an `io::Write`, so serde can serialize straight into it.
struct HashWriter(Sha256);

impl Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What one selected message contributes to the key: the SHA-256 of its JSON and its
/// unscaled price (`None` when it could not be priced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoPart {
    /// SHA-256 of the message as it serializes.
    pub digest: [u8; 32],
    /// Its unscaled price on the plugin's meter.
    pub price: Option<Price>,
}

/// The digest of one message: SHA-256 of its JSON, hashed as it serializes (no JSON
/// tree is built).
pub fn message_digest(message: &Message) -> [u8; 32] {
    let mut hasher = HashWriter(Sha256::new());
    // Serializing into a hasher cannot fail: its writes never do, and a message is
    // plain data. A failure would only weaken the key, never panic.
    let _ = serde_json::to_writer(&mut hasher, message);
    hasher.0.finalize().into()
}

/// The memo key of a selection: `selected` yields each non-own selected message's seq
/// and [`MemoPart`], in surface order.
pub fn proposal_key(
    selected: impl IntoIterator<Item = (u64, MemoPart)>,
    policy: &MemoPolicy<'_>,
) -> String {
    let mut hasher = HashWriter(Sha256::new());
    let head = json!({
        "scale": (policy.scale * 100.0).round() / 100.0,
        "header": policy.header,
        "route": policy.route,
        "summary": {
            "provider": policy.summary.provider,
            "model": policy.summary.model,
            "maxTokens": policy.summary.max_tokens,
        },
    });
    let _ = serde_json::to_writer(&mut hasher, &head);
    for (seq, part) in selected {
        let price = part.price.map(|price| [price.text, price.visual]);
        let _ = write!(hasher, "\n{seq}:{price:?}:");
        hasher.0.update(part.digest);
    }
    hasher
        .0
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use ccare_core::ContentBlock;

    use super::*;

    fn message(text: &str) -> Message {
        Message::from_blocks(vec![ContentBlock::text(text)])
    }

    fn key(
        selected: &[(u64, &Message, Option<Price>)],
        scale: f64,
        header: Option<&str>,
    ) -> String {
        proposal_key(
            selected.iter().map(|(seq, message, price)| {
                (
                    *seq,
                    MemoPart {
                        digest: message_digest(message),
                        price: *price,
                    },
                )
            }),
            &MemoPolicy {
                scale,
                header,
                route: Some("s/small"),
                summary: &SummaryConfig::default(),
            },
        )
    }

    #[test]
    fn cc_mnt_5_the_key_follows_content_scale_and_header_only() {
        let task = message("fix the parser");
        let edited = message("fix the lexer");
        let price = Some(Price { text: 5, visual: 0 });
        let base = key(&[(1, &task, price)], 1.0, Some("h"));
        assert_eq!(base, key(&[(1, &task, price)], 1.0, Some("h")), "stable");
        assert_eq!(base.len(), 64);
        assert_eq!(
            base,
            key(&[(1, &task, price)], 1.004, Some("h")),
            "jitter below half a percent is no change of scale"
        );
        assert_ne!(base, key(&[(1, &task, price)], 1.03, Some("h")), "scale");
        assert_ne!(base, key(&[(1, &edited, price)], 1.0, Some("h")), "content");
        assert_ne!(base, key(&[(1, &task, price)], 1.0, Some("g")), "header");
        assert_ne!(
            base,
            key(&[(2, &task, price)], 1.0, Some("h")),
            "another node"
        );
        assert_ne!(
            base,
            key(
                &[(1, &task, Some(Price { text: 6, visual: 0 }))],
                1.0,
                Some("h")
            ),
            "price"
        );
    }
}
