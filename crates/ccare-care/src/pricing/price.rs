//! Block, message and request prices (CC-PRC-1, CC-PRC-2): the price one block adds,
//! the exact text scale, and the unscaled [`Price`] of messages and whole requests,
//! with `Q = ceil(price)` (CC-GEN-1) computed exactly in integers.

use std::fmt;

use ccare_core::ContentBlock;
use ccare_meter::Meter;
use serde::{Deserialize, Serialize};

/// CC-PRC-1: `blockTokens(b) = est(user[b]) − est(user[])`, the price one block adds to a
/// message. H-TOK-2 makes every block's term non-negative and independent of its
/// neighbours, so this is the meter's block price (4 + content).
pub fn block_tokens(meter: &Meter, block: &ContentBlock) -> u64 {
    meter.block(block)
}

/// The calibrated multiplier of text tokens (CC-PRC-3 `textScale`), kept as the exact
/// fraction `(prompt − raw.visual) / raw.text` it was computed from, reduced.
///
/// [`TextScale::ONE`] for the uncalibrated and meter bases. A usage-calibrated scale is
/// never below 1, because a sample whose prompt is below its raw estimate is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextScale {
    numerator: u64,
    denominator: u64,
}

impl TextScale {
    /// A scale of exactly 1.
    pub const ONE: TextScale = TextScale {
        numerator: 1,
        denominator: 1,
    };

    /// `numerator / denominator`, reduced; `None` when the denominator is 0.
    pub fn new(numerator: u64, denominator: u64) -> Option<TextScale> {
        if denominator == 0 {
            return None;
        }
        let divisor = gcd(numerator, denominator);
        Some(TextScale {
            numerator: numerator / divisor,
            denominator: denominator / divisor,
        })
    }

    /// The reduced numerator.
    pub fn numerator(self) -> u64 {
        self.numerator
    }

    /// The reduced denominator (never 0).
    pub fn denominator(self) -> u64 {
        self.denominator
    }

    /// The scale as a float, for display and the journal's `textScale`.
    pub fn as_f64(self) -> f64 {
        self.numerator as f64 / self.denominator as f64
    }

    /// `tokens · scale` as a float.
    pub fn apply(self, tokens: u64) -> f64 {
        scaled_f64(tokens, 0, self)
    }
}

impl fmt::Display for TextScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

/// The unscaled price of a message (or of any list of them): its text part and its
/// visual part (CC-PRC-2). Scale it with [`Price::value`]; the visual part never is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// Text tokens, meter-estimated, images and files replaced by their request text.
    pub text: u64,
    /// Visual tokens of the images, as the route priced them.
    pub visual: u64,
}

impl Price {
    /// CC-PRC-2: `price = text·textScale + visual`.
    pub fn value(self, scale: TextScale) -> f64 {
        scaled_f64(self.text, self.visual, scale)
    }

    /// `ceil(text·textScale + visual)`, computed exactly (CC-GEN-1 Q for a whole request).
    pub fn ceil(self, scale: TextScale) -> u64 {
        scaled_ceil(self.text, self.visual, scale)
    }

    /// The sum of two prices, part by part (saturating).
    pub fn plus(self, other: Price) -> Price {
        Price {
            text: self.text.saturating_add(other.text),
            visual: self.visual.saturating_add(other.visual),
        }
    }
}

/// CC-PRC-2 `rawInput{textTokens (incl. tools), visualTokens}`: a request's price before
/// scaling, as the request journal records it and calibration reads it back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawInput {
    /// Unscaled text tokens: system, messages and tools.
    pub text_tokens: u64,
    /// Visual tokens of the images.
    pub visual_tokens: u64,
}

/// The price of a whole request (CC-PRC-2 `priceRequest`), part by part, with the scale
/// it was priced at.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestPrice {
    /// The system prompt (`est + 4`, H-TOK-2), or zero when there is none.
    pub system: Price,
    /// Each message, in order.
    pub messages: Vec<Price>,
    /// Unscaled text tokens of the tool list (`est(JSON) + 4`), 0 when there are none.
    pub tools: u64,
    /// The scale of the frozen pricing used.
    pub scale: TextScale,
}

impl RequestPrice {
    /// The system prompt and the messages together: `price([system?, …messages])`
    /// before scaling.
    pub fn messages_total(&self) -> Price {
        self.messages
            .iter()
            .fold(self.system, |sum, price| sum.plus(*price))
    }

    /// CC-PRC-2 `rawInput`: unscaled text (tools included) and visual tokens.
    pub fn raw_input(&self) -> RawInput {
        let total = self.messages_total();
        RawInput {
            text_tokens: total.text.saturating_add(self.tools),
            visual_tokens: total.visual,
        }
    }

    /// The tools' price, `est(tools)·textScale`.
    pub fn tools_value(&self) -> f64 {
        self.scale.apply(self.tools)
    }

    /// The complete input price, `price([system?, …messages]) + tools`.
    pub fn value(&self) -> f64 {
        let raw = self.raw_input();
        scaled_f64(raw.text_tokens, raw.visual_tokens, self.scale)
    }

    /// CC-GEN-1 `Q = ceil(complete input price)`, exact.
    pub fn q(&self) -> u64 {
        let raw = self.raw_input();
        scaled_ceil(raw.text_tokens, raw.visual_tokens, self.scale)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

fn scaled_f64(text: u64, visual: u64, scale: TextScale) -> f64 {
    let numerator = u128::from(text) * u128::from(scale.numerator);
    numerator as f64 / scale.denominator as f64 + visual as f64
}

fn scaled_ceil(text: u64, visual: u64, scale: TextScale) -> u64 {
    let denominator = u128::from(scale.denominator);
    let total = u128::from(text) * u128::from(scale.numerator) + u128::from(visual) * denominator;
    let ceil = total.div_ceil(denominator);
    u64::try_from(ceil).unwrap_or(u64::MAX)
}
