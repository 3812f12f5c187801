//! Calibration (CC-PRC-3): the header key requests are compared by, the pricing basis
//! (where the text scale comes from) with its serialized form, and [`calibrate`], which
//! picks the newest usable sample of the journal.

use ccare_meter::{Basis, Meter};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::canonical::{sha256_hex, write_canonical};
use super::price::{RawInput, TextScale};
use super::records::CalibrationRecord;

/// Where a usage-calibrated scale comes from (CC-PRC-3: `source`).
pub const CALIBRATION_SOURCE: &str = "actual-request-journal";

/// The purpose whose requests calibrate (CC-PRC-3).
pub const CALIBRATION_PURPOSE: &str = "conversation";

/// The settled event type whose requests calibrate (CC-PRC-3); `assistant/attempt` and
/// others do not.
pub const CALIBRATION_EVENT_TYPE: &str = "assistant/message";

/// CC-PRC-3 header key: lowercase hex SHA-256 of the canonical JSON of
/// `{config, tools}` (keys sorted at every depth, no whitespace). `config` is the
/// header's `{provider, model, reasoningEffort, temperature, maxTokens}`.
pub fn calibration_header_key(config: &Value, tools: &Value) -> String {
    let mut canonical_tools = Vec::new();
    write_canonical(tools, &mut canonical_tools);
    header_key_of_canonical_tools(config, &canonical_tools)
}

/// [`calibration_header_key`] of tools already in canonical form (the gate keeps
/// that of the latest tools).
pub(crate) fn header_key_of_canonical_tools(config: &Value, tools: &[u8]) -> String {
    // The canonical form of `{config, tools}`, its two keys already in order, written
    // without copying either value.
    let mut out = Vec::with_capacity(tools.len() + 160);
    out.extend_from_slice(br#"{"config":"#);
    write_canonical(config, &mut out);
    out.extend_from_slice(br#","tools":"#);
    out.extend_from_slice(tools);
    out.push(b'}');
    sha256_hex(&out)
}

/// CC-PRC-3: what the usage calibration was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageCalibration {
    /// The sample's `eventSeq` (`sampleSeq`).
    pub sample_seq: u64,
    /// The sample's `callId` (`sampleCallId`).
    pub sample_call_id: String,
    /// The sample's reported prompt, `inputTokens + cacheReadTokens + cacheWriteTokens`.
    pub prompt_tokens: u64,
    /// The sample's `rawInput`.
    pub raw_input: RawInput,
}

impl UsageCalibration {
    /// `(prompt − raw.visual) / raw.text`; `None` if the sample is not usable (its prompt
    /// is below `raw.text + raw.visual`, or its raw text is 0).
    pub fn text_scale(&self) -> Option<TextScale> {
        let raw_total = self
            .raw_input
            .text_tokens
            .checked_add(self.raw_input.visual_tokens)?;
        if self.prompt_tokens < raw_total {
            return None;
        }
        TextScale::new(
            self.prompt_tokens - self.raw_input.visual_tokens,
            self.raw_input.text_tokens,
        )
    }
}

/// The meter basis of a [`PricingBasis::Meter`] and a
/// [`MeterFingerprint`](super::MeterFingerprint): whether the meter's text counts are
/// heuristic or exact (H-TOK-3). Mirrors [`ccare_meter::Basis`] in serializable form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeterKind {
    /// The H-TOK-1 heuristic.
    Heuristic,
    /// A model tokenizer.
    Exact,
}

impl From<Basis> for MeterKind {
    fn from(basis: Basis) -> Self {
        match basis {
            Basis::Heuristic => MeterKind::Heuristic,
            Basis::Exact => MeterKind::Exact,
        }
    }
}

impl MeterKind {
    /// `"heuristic"` or `"exact"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MeterKind::Heuristic => "heuristic",
            MeterKind::Exact => "exact",
        }
    }
}

/// CC-PRC-3 pricing basis: where the text scale comes from. This is what the request
/// journal's and the measurement's `pricingBasis` hold.
///
/// Serialized as the spec's object, `{kind, textScale, …}`:
/// - `{kind:'usage-calibrated', textScale, sampleSeq, sampleCallId,
///   source:'actual-request-journal'}` plus \[EXT\] `samplePromptTokens` and
///   `sampleRawInput`, from which the exact scale is re-derived on reading;
/// - `{kind:'uncalibrated-estimate', textScale:1}` (records exist, none usable);
/// - `{kind:'heuristic'|'exact', textScale:1}`, the meter's basis (no records at all).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "BasisWire", try_from = "BasisWire")]
pub enum PricingBasis {
    /// Calibrated on a real request's usage.
    UsageCalibrated(UsageCalibration),
    /// The journal has records, none usable: scale 1, and not calibrated.
    UncalibratedEstimate,
    /// The journal is empty: the meter's own basis, scale 1.
    Meter(MeterKind),
}

impl PricingBasis {
    /// The basis of a session with no journal records: the meter's, scale 1.
    pub fn meter_estimate(meter: &Meter) -> PricingBasis {
        PricingBasis::Meter(meter.basis().into())
    }

    /// The `kind` the spec names: `usage-calibrated`, `uncalibrated-estimate`,
    /// `heuristic` or `exact`.
    pub fn kind(&self) -> &'static str {
        match self {
            PricingBasis::UsageCalibrated(_) => "usage-calibrated",
            PricingBasis::UncalibratedEstimate => "uncalibrated-estimate",
            PricingBasis::Meter(kind) => kind.as_str(),
        }
    }

    /// Whether the scale comes from real usage.
    pub fn is_calibrated(&self) -> bool {
        matches!(self, PricingBasis::UsageCalibrated(_))
    }

    /// The text scale: from the sample, or 1.
    pub fn text_scale(&self) -> TextScale {
        match self {
            // A constructed usage calibration is always usable (see `calibrate` and
            // the deserializer); 1 is the fallback should one be built by hand badly.
            PricingBasis::UsageCalibrated(sample) => sample.text_scale().unwrap_or(TextScale::ONE),
            PricingBasis::UncalibratedEstimate | PricingBasis::Meter(_) => TextScale::ONE,
        }
    }
}

/// CC-PRC-3 calibration over a session's journal (every record, request or
/// maintenance, in any order).
///
/// Walks the eligible records ([`CalibrationRecord::is_eligible`]) newest first by
/// `eventSeq`, skips each whose `prompt < raw.text + raw.visual`, and takes the first
/// other: `textScale = (prompt − raw.visual)/raw.text`, with no cap and no smoothing.
/// With no usable record the basis is [`PricingBasis::UncalibratedEstimate`] if the
/// journal has any record at all, else the meter's basis.
pub fn calibrate(
    records: &[CalibrationRecord],
    header_key: &str,
    meter: MeterKind,
) -> PricingBasis {
    calibrate_each(records, header_key, meter)
}

/// [`calibrate`] over borrowed records, for a caller that keeps them decoded.
pub fn calibrate_each<'r>(
    records: impl IntoIterator<Item = &'r CalibrationRecord>,
    header_key: &str,
    meter: MeterKind,
) -> PricingBasis {
    let mut any = false;
    let sample = records
        .into_iter()
        .inspect(|_| any = true)
        .filter(|record| record.is_eligible(header_key))
        .filter_map(|record| {
            let calibration = UsageCalibration {
                sample_seq: record.event_seq?,
                sample_call_id: record.call_id.clone(),
                prompt_tokens: record.usage?.prompt_tokens()?,
                raw_input: record.raw_input?,
            };
            calibration.text_scale().map(|_| calibration)
        })
        .max_by_key(|calibration| calibration.sample_seq);
    match sample {
        Some(sample) => PricingBasis::UsageCalibrated(sample),
        None if !any => PricingBasis::Meter(meter),
        None => PricingBasis::UncalibratedEstimate,
    }
}

// ---------------------------------------------------------------------------------------
// Serialized form of `PricingBasis`

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BasisWire {
    kind: String,
    text_scale: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sample_raw_input: Option<RawInput>,
}

impl From<PricingBasis> for BasisWire {
    fn from(basis: PricingBasis) -> Self {
        let text_scale = basis.text_scale().as_f64();
        let kind = basis.kind().to_owned();
        match basis {
            PricingBasis::UsageCalibrated(sample) => BasisWire {
                kind,
                text_scale,
                sample_seq: Some(sample.sample_seq),
                sample_call_id: Some(sample.sample_call_id),
                source: Some(CALIBRATION_SOURCE.to_owned()),
                sample_prompt_tokens: Some(sample.prompt_tokens),
                sample_raw_input: Some(sample.raw_input),
            },
            PricingBasis::UncalibratedEstimate | PricingBasis::Meter(_) => BasisWire {
                kind,
                text_scale,
                sample_seq: None,
                sample_call_id: None,
                source: None,
                sample_prompt_tokens: None,
                sample_raw_input: None,
            },
        }
    }
}

impl TryFrom<BasisWire> for PricingBasis {
    type Error = String;

    fn try_from(wire: BasisWire) -> Result<Self, Self::Error> {
        let basis = match wire.kind.as_str() {
            "usage-calibrated" => {
                let (Some(sample_seq), Some(sample_call_id), Some(prompt_tokens), Some(raw_input)) = (
                    wire.sample_seq,
                    wire.sample_call_id,
                    wire.sample_prompt_tokens,
                    wire.sample_raw_input,
                ) else {
                    return Err(
                        "a usage-calibrated pricing basis needs sampleSeq, sampleCallId, \
                                samplePromptTokens and sampleRawInput"
                            .to_owned(),
                    );
                };
                let sample = UsageCalibration {
                    sample_seq,
                    sample_call_id,
                    prompt_tokens,
                    raw_input,
                };
                if sample.text_scale().is_none() {
                    return Err(
                        "the sample of a usage-calibrated pricing basis is not usable".to_owned(),
                    );
                }
                PricingBasis::UsageCalibrated(sample)
            }
            "uncalibrated-estimate" => PricingBasis::UncalibratedEstimate,
            "heuristic" => PricingBasis::Meter(MeterKind::Heuristic),
            "exact" => PricingBasis::Meter(MeterKind::Exact),
            other => return Err(format!("unknown pricing basis kind '{other}'")),
        };
        let scale = basis.text_scale().as_f64();
        if wire.text_scale != scale {
            return Err(format!(
                "textScale {} does not match the basis ({scale})",
                wire.text_scale
            ));
        }
        Ok(basis)
    }
}
