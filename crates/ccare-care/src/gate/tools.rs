//! What the gate derives from what every request repeats, kept while it stays the same.
//!
//! Every request of a host offers the same tools (the host's, the care tools, a
//! gateway client's), and the gate needs them three ways: as the JSON the journal
//! records, in canonical form for the calibration header key and the input hash, and
//! priced. The last tools seen are kept with their JSON, canonical form and price (on
//! the meter that priced them), so a request with the same tools (compared field by
//! field, the shared schemas by identity first, which costs less than writing them
//! out) reuses them instead of writing them out and counting them again. Their calibration header key (CC-PRC-3, a SHA-256 of
//! the route's sampling options and the tools) is kept for the latest options. The
//! system prompt's price is kept the same way ([`SystemPrices`]): it is the same text
//! on every request of a host.

use std::sync::Arc;

use ccare_llm::ToolSpec;
use parking_lot::Mutex;
use serde_json::Value;

use crate::journal::records::SourceHeader;
use crate::pricing::{MeterFingerprint, canonical_json, header_key_of_canonical_tools};

/// A request's tools, written out.
#[derive(Debug)]
pub(crate) struct ToolsForm {
    specs: Vec<ToolSpec>,
    /// The tools as the journal records them (`{name, description, input_schema}`
    /// each), `null` when there are none.
    pub(crate) value: Value,
    /// [`ToolsForm::value`] in canonical form.
    pub(crate) canonical: Vec<u8>,
    /// Their price on the latest meter that priced them.
    tokens: Mutex<Option<(MeterFingerprint, u64)>>,
    /// Their calibration header key under the latest header asked for.
    header_key: Mutex<Option<(SourceHeader, String)>>,
}

impl ToolsForm {
    fn of(specs: &[ToolSpec]) -> Self {
        let value = if specs.is_empty() {
            Value::Null
        } else {
            // A list of strings and JSON values always serializes.
            serde_json::to_value(specs).unwrap_or(Value::Null)
        };
        let canonical = canonical_json(&value);
        Self {
            specs: specs.to_vec(),
            value,
            canonical,
            tokens: Mutex::new(None),
            header_key: Mutex::new(None),
        }
    }

    /// The calibration header key (CC-PRC-3) of a request with these tools and
    /// `header`: the kept one when `header` is the one it was made for, otherwise
    /// computed and kept in its place.
    pub(crate) fn header_key(&self, header: &SourceHeader) -> String {
        if let Some((_, key)) = self
            .header_key
            .lock()
            .as_ref()
            .filter(|(kept, _)| kept == header)
        {
            return key.clone();
        }
        // A header of strings and numbers always serializes.
        let config = serde_json::to_value(header).unwrap_or(Value::Null);
        let key = header_key_of_canonical_tools(&config, &self.canonical);
        *self.header_key.lock() = Some((header.clone(), key.clone()));
        key
    }

    /// The tools' price on `meter`: the kept one when `meter` priced them last,
    /// otherwise `price` of [`ToolsForm::value`], kept in its place.
    pub(crate) fn tokens(
        &self,
        meter: &MeterFingerprint,
        price: impl FnOnce(&Value) -> u64,
    ) -> u64 {
        if let Some((_, tokens)) = self
            .tokens
            .lock()
            .as_ref()
            .filter(|(priced_on, _)| priced_on == meter)
        {
            return *tokens;
        }
        let tokens = price(&self.value);
        *self.tokens.lock() = Some((meter.clone(), tokens));
        tokens
    }
}

/// The latest tools the gate wrote out; one per mounted plugin.
#[derive(Debug, Default)]
pub(crate) struct ToolsMemo {
    latest: Mutex<Option<Arc<ToolsForm>>>,
}

impl ToolsMemo {
    /// `specs` written out: the kept form when they are the tools it was made of,
    /// otherwise a new one, kept in its place.
    pub(crate) fn form(&self, specs: &[ToolSpec]) -> Arc<ToolsForm> {
        if let Some(form) = self.latest.lock().as_ref().filter(|form| {
            form.specs.len() == specs.len()
                && form
                    .specs
                    .iter()
                    .zip(specs)
                    .all(|(kept, spec)| kept.same_as(spec))
        }) {
            return Arc::clone(form);
        }
        let form = Arc::new(ToolsForm::of(specs));
        *self.latest.lock() = Some(Arc::clone(&form));
        form
    }
}

/// The latest system prompt the gate priced, with its price and the meter it was
/// priced on; one per mounted plugin.
#[derive(Debug, Default)]
pub(crate) struct SystemPrices {
    latest: Mutex<Option<PricedPrompt>>,
}

#[derive(Debug)]
struct PricedPrompt {
    meter: MeterFingerprint,
    prompt: String,
    tokens: u64,
}

impl SystemPrices {
    /// `prompt`'s price on `meter`: the kept one when it is the prompt last priced on
    /// that meter, otherwise `price(prompt)`, kept in its place.
    pub(crate) fn tokens(
        &self,
        meter: &MeterFingerprint,
        prompt: &str,
        price: impl FnOnce(&str) -> u64,
    ) -> u64 {
        if let Some(kept) = self
            .latest
            .lock()
            .as_ref()
            .filter(|kept| kept.prompt == prompt && kept.meter == *meter)
        {
            return kept.tokens;
        }
        let tokens = price(prompt);
        *self.latest.lock() = Some(PricedPrompt {
            meter: meter.clone(),
            prompt: prompt.to_owned(),
            tokens,
        });
        tokens
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: "d".into(),
            input_schema: json!({"type": "object", "properties": {"b": {}, "a": {}}}).into(),
        }
    }

    #[test]
    fn the_form_is_the_tools_written_out_and_is_kept_while_they_stay_the_same() {
        let memo = ToolsMemo::default();
        let tools = vec![spec("one"), spec("two")];
        let form = memo.form(&tools);
        assert_eq!(form.value, serde_json::to_value(&tools).unwrap());
        assert_eq!(form.canonical, canonical_json(&form.value));
        assert!(Arc::ptr_eq(&form, &memo.form(&tools.clone())));
        // Other tools: a new form, which is then the one kept.
        let changed = vec![spec("one")];
        let other = memo.form(&changed);
        assert!(!Arc::ptr_eq(&form, &other));
        assert_eq!(other.value, serde_json::to_value(&changed).unwrap());
        assert!(Arc::ptr_eq(&other, &memo.form(&changed)));
        // No tools: `null`, as the journal records it.
        assert_eq!(memo.form(&[]).value, Value::Null);
        assert_eq!(memo.form(&[]).canonical, b"null");
    }

    fn header(model: &str) -> SourceHeader {
        SourceHeader {
            provider: "openai".to_owned(),
            model: model.to_owned(),
            reasoning_effort: None,
            temperature: Some(0.5),
            max_tokens: Some(100),
        }
    }

    #[test]
    fn the_header_key_is_the_calibration_key_and_follows_the_header() {
        let tools = vec![spec("one")];
        let form = ToolsMemo::default().form(&tools);
        let expected = |header: &SourceHeader| {
            crate::pricing::calibration_header_key(
                &serde_json::to_value(header).unwrap(),
                &serde_json::to_value(&tools).unwrap(),
            )
        };
        let (fast, slow) = (header("fast"), header("slow"));
        assert_eq!(form.header_key(&fast), expected(&fast));
        assert_eq!(form.header_key(&fast), expected(&fast));
        assert_eq!(form.header_key(&slow), expected(&slow));
        assert_ne!(expected(&fast), expected(&slow));
        assert_eq!(form.header_key(&fast), expected(&fast));
    }

    fn fingerprint(image_tokens: u64) -> MeterFingerprint {
        let meter = ccare_meter::Meter::new(&ccare_meter::MeterConfig {
            image_tokens,
            ..ccare_meter::MeterConfig::default()
        })
        .unwrap();
        MeterFingerprint::of(&meter)
    }

    #[test]
    fn a_price_is_kept_for_the_same_text_on_the_same_meter_only() {
        let (one, other) = (fingerprint(1_000), fingerprint(2_000));
        let form = ToolsMemo::default().form(&[spec("one")]);
        let counted = std::cell::Cell::new(0);
        let price = |_: &Value| {
            counted.set(counted.get() + 1);
            7
        };
        assert_eq!(form.tokens(&one, price), 7);
        assert_eq!(form.tokens(&one, price), 7);
        assert_eq!(counted.get(), 1);
        assert_eq!(form.tokens(&other, price), 7);
        assert_eq!(counted.get(), 2);

        let prompts = SystemPrices::default();
        let counted = std::cell::Cell::new(0);
        let price = |prompt: &str| {
            counted.set(counted.get() + 1);
            prompt.len() as u64
        };
        assert_eq!(prompts.tokens(&one, "be brief", price), 8);
        assert_eq!(prompts.tokens(&one, "be brief", price), 8);
        assert_eq!(counted.get(), 1);
        assert_eq!(prompts.tokens(&one, "be terse!", price), 9);
        assert_eq!(prompts.tokens(&other, "be terse!", price), 9);
        assert_eq!(counted.get(), 3);
    }
}
