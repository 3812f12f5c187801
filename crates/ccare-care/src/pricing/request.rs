//! Request prices (CC-PRC-2): the [`Pricer`] of one frozen pricing, which prices
//! messages (images and files replaced by what the route sends for them), the system
//! prompt, the tools and whole requests.

use ccare_core::{ContentBlock, ImageBlock, Message};
use ccare_meter::Meter;
use serde_json::Value;

use super::PricingError;
use super::frozen::FrozenPricing;
use super::inputs::{ImagePricing, image_key, is_file_block};
use super::price::{Price, RequestPrice, TextScale};

/// Prices messages and requests with one [`FrozenPricing`] (CC-PRC-2).
#[derive(Debug, Clone, Copy)]
pub struct Pricer<'a> {
    meter: &'a Meter,
    frozen: &'a FrozenPricing,
}

impl<'a> Pricer<'a> {
    /// A pricer over `meter` with `frozen`; [`FrozenPricing::pricer`] checks that the
    /// meter is the one the pricing was frozen with.
    pub(super) fn new(meter: &'a Meter, frozen: &'a FrozenPricing) -> Pricer<'a> {
        Pricer { meter, frozen }
    }
}

impl Pricer<'_> {
    /// The frozen pricing it prices with.
    pub fn frozen(&self) -> &FrozenPricing {
        self.frozen
    }

    /// The frozen text scale.
    pub fn text_scale(&self) -> TextScale {
        self.frozen.text_scale()
    }

    /// CC-PRC-2 message price, unscaled:
    /// - `text = est(msg)`;
    /// - each priced image adds `blockTokens(text(price.text)) − blockTokens(image ref
    ///   without offload marker)` to `text` and `visualTokens` to `visual` (with
    ///   [`ImagePricing::FixedEstimate`], nothing: the meter's estimate stays);
    /// - each file block with a known request text adds
    ///   `blockTokens(text(file text)) − blockTokens(file block)`.
    ///
    /// Images and files inside tool results count too.
    pub fn message(&self, message: &Message) -> Result<Price, PricingError> {
        let estimate = self.meter.message(message);
        let mut adjust = Adjustment::default();
        self.adjust_blocks(&message.content, &mut adjust)?;
        // `est(msg)` contains every block subtracted, so this cannot go below zero.
        let text = estimate
            .saturating_add(adjust.added)
            .saturating_sub(adjust.removed);
        Ok(Price {
            text,
            visual: adjust.visual,
        })
    }

    /// The system prompt's price: `est(prompt) + 4` (H-TOK-2), all text.
    pub fn system(&self, prompt: &str) -> Price {
        Price {
            text: self.meter.system(prompt),
            visual: 0,
        }
    }

    /// The tools' unscaled text tokens: `est(compact JSON) + 4`, or 0 when `tools` is
    /// `null` or an empty array (CC-PRC-2). Scaled, it is `est(tools)·textScale`.
    pub fn tools(&self, tools: &Value) -> u64 {
        if has_tools(tools) {
            self.meter.tools(tools)
        } else {
            0
        }
    }

    /// CC-PRC-2 `priceRequest = price([system?, …messages]) + tools`.
    pub fn request<'m>(
        &self,
        system: Option<&str>,
        messages: impl IntoIterator<Item = &'m Message>,
        tools: &Value,
    ) -> Result<RequestPrice, PricingError> {
        let messages = messages
            .into_iter()
            .map(|message| self.message(message))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RequestPrice {
            system: system.map(|prompt| self.system(prompt)).unwrap_or_default(),
            messages,
            tools: self.tools(tools),
            scale: self.text_scale(),
        })
    }

    fn adjust_blocks(
        &self,
        blocks: &[ContentBlock],
        adjust: &mut Adjustment,
    ) -> Result<(), PricingError> {
        for block in blocks {
            match block {
                ContentBlock::Image(image) => self.adjust_image(image, adjust)?,
                ContentBlock::ToolResult(result) => self.adjust_blocks(&result.content, adjust)?,
                ContentBlock::Unknown(object) if is_file_block(object) => {
                    if let Some(text) = self.frozen.files().get(object) {
                        adjust.added = adjust
                            .added
                            .saturating_add(self.meter.block(&ContentBlock::text(text)));
                        adjust.removed = adjust.removed.saturating_add(self.meter.block(block));
                    }
                }
                ContentBlock::Text(_)
                | ContentBlock::Reasoning(_)
                | ContentBlock::ToolCall(_)
                | ContentBlock::Unknown(_) => {}
            }
        }
        Ok(())
    }

    fn adjust_image(
        &self,
        image: &ImageBlock,
        adjust: &mut Adjustment,
    ) -> Result<(), PricingError> {
        let prices = match self.frozen.images() {
            ImagePricing::FixedEstimate => return Ok(()),
            ImagePricing::Priced(prices) => prices,
        };
        let Some(price) = prices.get(image) else {
            return Err(PricingError::ImageNotPriced {
                key: image_key(image),
            });
        };
        adjust.added = adjust
            .added
            .saturating_add(self.meter.block(&ContentBlock::text(price.text.as_str())));
        adjust.removed = adjust
            .removed
            .saturating_add(self.meter.block(&image_ref(image)));
        adjust.visual = adjust.visual.saturating_add(price.visual_tokens);
        Ok(())
    }
}

#[derive(Default)]
struct Adjustment {
    added: u64,
    removed: u64,
    visual: u64,
}

/// The image as a reference, without its bytes and without the offload marker.
fn image_ref(image: &ImageBlock) -> ContentBlock {
    ContentBlock::Image(ImageBlock {
        media_type: image.media_type.clone(),
        data: None,
        uri: image.uri.clone(),
        offloaded: false,
        detail: image.detail.clone(),
        extra: ccare_core::Extra::new(),
    })
}

fn has_tools(tools: &Value) -> bool {
    match tools {
        Value::Null => false,
        Value::Array(list) => !list.is_empty(),
        Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_) => true,
    }
}
