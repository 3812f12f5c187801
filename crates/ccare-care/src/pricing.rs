//! Input pricing (spec context-care.md §2, CC-PRC-1..4): what a request will cost a
//! model in input tokens, calibrated against what providers really reported.
//!
//! The pieces, in the order the spec gives them:
//!
//! - **Block price by difference** (CC-PRC-1, [`block_tokens`]):
//!   `blockTokens(b) = est(user[b]) − est(user[])`, over the token meter (H-TOK-2).
//! - **Message and request price** (CC-PRC-2, [`Pricer`], [`Price`], [`RequestPrice`]).
//!   A message's price has a *text* part (the meter's estimate, with each image's and
//!   file's meter estimate replaced by the text the route really sends for it) and a
//!   *visual* part (each image's visual tokens). Only text is calibrated:
//!   `price = text·textScale + visual`. Tools cost `est(tools)·textScale`, 0 when there
//!   are none; `priceRequest = price([system?, …messages]) + tools`.
//! - **Calibration** (CC-PRC-3, [`calibrate`], [`PricingBasis`]): the newest eligible,
//!   completed conversation request of the same header whose reported prompt covers its
//!   raw estimate gives `textScale = (prompt − raw.visual)/raw.text`, uncapped.
//! - **Frozen pricing** (CC-PRC-4, [`FrozenPricing`]): everything one maintenance action
//!   prices with (scale, meter, image prices, file texts), captured once as a
//!   serializable value, so that every measurement of the action, and any later
//!   re-pricing, gives the same numbers whatever the live calibration does meanwhile.
//!
//! The scale is kept as the exact fraction it comes from ([`TextScale`]), so that
//! `Q = ceil(price)` (CC-GEN-1) is computed exactly in integers and a price re-computed
//! from a serialized [`FrozenPricing`] is bit-for-bit the same.
//!
//! This module is pure: no I/O, no clock. The caller flushes the journal, collects the
//! records ([`CalibrationRecord`]) and prices the images in one batch
//! ([`collect_images`], [`ImagePrices::from_batch`]).
//!
//! One module per job: `price` (block and message prices, the exact scale), `request`
//! (the [`Pricer`] of whole requests), `records` (what calibration reads of the
//! journal), `calibration` (the header key, the basis and [`calibrate`]), `inputs`
//! (image prices and file texts) and `frozen` (the frozen pricing); `canonical` gives
//! the canonical JSON hashes they key by; `cache` keeps a session's message prices
//! between boundaries ([`PriceCache`]).
//!
//! ```
//! use ccare_care::pricing::{FileTexts, FrozenPricing, ImagePricing, PricingBasis};
//! use ccare_core::{ContentBlock, Message};
//! use ccare_meter::Meter;
//!
//! let meter = Meter::default();
//! let basis = PricingBasis::meter_estimate(&meter);
//! let frozen = FrozenPricing::capture(&meter, basis, ImagePricing::FixedEstimate, FileTexts::default());
//! let pricer = frozen.pricer(&meter)?;
//! let hello = Message::from_blocks(vec![ContentBlock::text("hello")]);
//! let price = pricer.request(Some("Be brief."), &[hello], &serde_json::Value::Null)?;
//! // system: est("Be brief.") + 4 = ceil(0.3·7 + 0.8·1) + 4 = 7;
//! // message: 4 + (4 + est("hello")) = 4 + 4 + ceil(0.3·5) = 10; no tools.
//! assert_eq!(price.raw_input().text_tokens, 17);
//! assert_eq!(price.q(), 17);
//! # Ok::<(), ccare_care::pricing::PricingError>(())
//! ```

mod cache;
mod calibration;
mod canonical;
mod frozen;
mod inputs;
mod price;
mod records;
mod request;

pub use cache::PriceCache;
pub(crate) use calibration::header_key_of_canonical_tools;
pub use calibration::{
    CALIBRATION_EVENT_TYPE, CALIBRATION_PURPOSE, CALIBRATION_SOURCE, MeterKind, PricingBasis,
    UsageCalibration, calibrate, calibrate_each, calibration_header_key,
};
pub(crate) use canonical::canonical_json;
pub(crate) use canonical::{hex_of, write_canonical, write_compact};
pub use frozen::{FrozenPricing, MeterFingerprint};
pub use inputs::{
    FileTexts, ImagePrice, ImagePrices, ImagePricing, block_key, collect_images, image_key,
    is_file_block,
};
pub use price::{Price, RawInput, RequestPrice, TextScale, block_tokens};
pub use records::{CalibrationRecord, JournalRecordKind, RecordUsage, RequestOutcome};
pub use request::Pricer;

/// Why a price could not be computed (CC-PRC-2, CC-PRC-4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PricingError {
    /// The route's batch image pricing answered a different number of prices than
    /// images it was asked about (CC-PRC-2: "a count mismatch is an error").
    #[error("image pricing returned {prices} prices for {images} images")]
    ImageCountMismatch {
        /// Images asked about.
        images: usize,
        /// Prices returned.
        prices: usize,
    },
    /// An image has no price in the frozen pricing (CC-PRC-4): it was not among the
    /// images priced when the action captured its pricing.
    #[error("image {key} was not priced when the pricing was frozen")]
    ImageNotPriced {
        /// The image's key ([`image_key`]).
        key: String,
    },
    /// The meter is not the one the pricing was frozen with (CC-PRC-4), so its prices
    /// would not be comparable.
    #[error("the meter ({actual}) is not the one the pricing was frozen with ({frozen})")]
    MeterMismatch {
        /// The frozen meter, described.
        frozen: String,
        /// The meter offered, described.
        actual: String,
    },
}
