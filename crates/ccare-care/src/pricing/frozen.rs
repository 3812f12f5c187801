//! Frozen pricing (CC-PRC-4): everything one maintenance action prices with, captured
//! once as a serializable value, and the meter fingerprint that refuses another meter.

use ccare_meter::{HeuristicWeights, Meter};
use serde::{Deserialize, Serialize};

use super::PricingError;
use super::calibration::{MeterKind, PricingBasis};
use super::inputs::{FileTexts, ImagePricing};
use super::price::TextScale;
use super::request::Pricer;

/// The meter a pricing was frozen with: enough to refuse a different one (CC-PRC-4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeterFingerprint {
    /// Heuristic or exact.
    pub basis: MeterKind,
    /// What an image costs in the meter's estimate.
    pub image_tokens: u64,
    /// The heuristic weights.
    pub weights: HeuristicWeights,
    /// The tokenizer file, when exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
}

impl MeterFingerprint {
    /// The fingerprint of `meter`.
    pub fn of(meter: &Meter) -> MeterFingerprint {
        MeterFingerprint {
            basis: meter.basis().into(),
            image_tokens: meter.image_tokens(),
            weights: meter.weights(),
            tokenizer: meter
                .tokenizer_path()
                .map(|path| path.to_string_lossy().into_owned()),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} meter, image {} tokens{}",
            self.basis.as_str(),
            self.image_tokens,
            self.tokenizer
                .as_deref()
                .map(|path| format!(", tokenizer {path}"))
                .unwrap_or_default()
        )
    }
}

/// CC-PRC-4: the pricing one maintenance action captures once, after flushing the
/// journal, and uses for every measurement it makes (after prune, after summary, before
/// and after deep rest). A later calibration affects only later actions.
///
/// A plain serializable value: the basis (scale), the meter it was taken with, the
/// image prices and the file texts. [`FrozenPricing::pricer`] re-prices with it,
/// identically, as long as it is given the same meter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrozenPricing {
    pricing_basis: PricingBasis,
    meter: MeterFingerprint,
    images: ImagePricing,
    files: FileTexts,
}

impl FrozenPricing {
    /// Freezes a pricing: `basis` from [`calibrate`](super::calibrate) (or
    /// [`PricingBasis::meter_estimate`]), the images as the route priced them in one
    /// batch, the file texts.
    pub fn capture(
        meter: &Meter,
        basis: PricingBasis,
        images: ImagePricing,
        files: FileTexts,
    ) -> FrozenPricing {
        FrozenPricing {
            pricing_basis: basis,
            meter: MeterFingerprint::of(meter),
            images,
            files,
        }
    }

    /// The pricing basis (CC-PRC-3), as the journal records it.
    pub fn basis(&self) -> &PricingBasis {
        &self.pricing_basis
    }

    /// The frozen text scale.
    pub fn text_scale(&self) -> TextScale {
        self.pricing_basis.text_scale()
    }

    /// The meter it was frozen with.
    pub fn meter(&self) -> &MeterFingerprint {
        &self.meter
    }

    /// The image pricing.
    pub fn images(&self) -> &ImagePricing {
        &self.images
    }

    /// The file texts.
    pub fn files(&self) -> &FileTexts {
        &self.files
    }

    /// A pricer over `meter`, which must be the meter the pricing was frozen with
    /// ([`PricingError::MeterMismatch`] otherwise).
    pub fn pricer<'a>(&'a self, meter: &'a Meter) -> Result<Pricer<'a>, PricingError> {
        let actual = MeterFingerprint::of(meter);
        if actual != self.meter {
            return Err(PricingError::MeterMismatch {
                frozen: self.meter.describe(),
                actual: actual.describe(),
            });
        }
        Ok(Pricer::new(meter, self))
    }
}
