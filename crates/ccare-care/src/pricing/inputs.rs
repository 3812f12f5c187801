//! Images and files (CC-PRC-2): what the route's batch image pricing answered, the
//! request texts of file blocks, and the keys they are looked up by.

use std::collections::BTreeMap;

use ccare_core::{ContentBlock, ImageBlock, JsonObject, Message};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::PricingError;
use super::canonical::{canonical_json, sha256_hex};

/// What the route's image pricing says one image costs (CC-PRC-2): the text the request
/// carries for it, and its visual tokens.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrice {
    /// The text sent in the image's place (`price.text`), priced as a text block.
    pub text: String,
    /// Visual tokens, never scaled.
    pub visual_tokens: u64,
}

/// The image prices of one frozen pricing, keyed by [`image_key`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImagePrices {
    prices: BTreeMap<String, ImagePrice>,
}

impl ImagePrices {
    /// Keys the answer of one batch call (CC-PRC-2: "all images are priced in one batch
    /// call; a count mismatch is an error"): `prices[i]` is the price of `images[i]`.
    /// Identical images share a key; the first price given for one is kept.
    pub fn from_batch(
        images: &[&ImageBlock],
        prices: Vec<ImagePrice>,
    ) -> Result<ImagePrices, PricingError> {
        if images.len() != prices.len() {
            return Err(PricingError::ImageCountMismatch {
                images: images.len(),
                prices: prices.len(),
            });
        }
        let mut map = BTreeMap::new();
        for (image, price) in images.iter().zip(prices) {
            map.entry(image_key(image)).or_insert(price);
        }
        Ok(ImagePrices { prices: map })
    }

    /// The price of `image`, if it was priced.
    pub fn get(&self, image: &ImageBlock) -> Option<&ImagePrice> {
        self.prices.get(&image_key(image))
    }

    /// How many distinct images are priced.
    pub fn len(&self) -> usize {
        self.prices.len()
    }

    /// Whether no image is priced.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }
}

/// How a frozen pricing prices images (CC-PRC-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", content = "prices", rename_all = "kebab-case")]
pub enum ImagePricing {
    /// The route explicitly has no image projection: each image keeps the meter's fixed
    /// estimate (its `image_tokens`, H-TOK-2), as text, and adds no visual tokens.
    FixedEstimate,
    /// The route priced each image; an image without a price is an error.
    Priced(ImagePrices),
}

/// The request texts of file blocks (CC-PRC-2 "each file adds
/// `blockTokens(text(file request text)) − blockTokens(file block)`, cached"), keyed by
/// [`block_key`] of the file block.
///
/// A file block is a block this version does not model (`ContentBlock::Unknown`) whose
/// `type` is `"file"`. One without a text here keeps the meter's estimate of its JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FileTexts {
    texts: BTreeMap<String, String>,
}

impl FileTexts {
    /// Records the text the request sends for `file_block`.
    pub fn insert(&mut self, file_block: &JsonObject, request_text: impl Into<String>) {
        self.texts
            .insert(object_key(file_block), request_text.into());
    }

    /// The request text of `file_block`, if known.
    pub fn get(&self, file_block: &JsonObject) -> Option<&str> {
        self.texts.get(&object_key(file_block)).map(String::as_str)
    }
}

/// Whether an unknown block is a file block (`"type": "file"`).
pub fn is_file_block(block: &JsonObject) -> bool {
    block.get("type").and_then(Value::as_str) == Some("file")
}

/// Every image of `messages`, in order, tool results' images included: what the one
/// batch call of CC-PRC-2 prices.
pub fn collect_images(messages: &[Message]) -> Vec<&ImageBlock> {
    let mut images = Vec::new();
    for message in messages {
        collect_block_images(&message.content, &mut images);
    }
    images
}

/// The key of an image: lowercase hex SHA-256 of its canonical JSON (offload marker
/// included, so an offloaded image is priced anew).
pub fn image_key(image: &ImageBlock) -> String {
    // Serialising a struct of strings and a JSON map cannot fail.
    let value = serde_json::to_value(image).unwrap_or(Value::Null);
    sha256_hex(&canonical_json(&value))
}

/// The key of a block: lowercase hex SHA-256 of its canonical JSON.
pub fn block_key(block: &ContentBlock) -> String {
    let value = serde_json::to_value(block).unwrap_or(Value::Null);
    sha256_hex(&canonical_json(&value))
}

fn collect_block_images<'a>(blocks: &'a [ContentBlock], images: &mut Vec<&'a ImageBlock>) {
    for block in blocks {
        match block {
            ContentBlock::Image(image) => images.push(image),
            ContentBlock::ToolResult(result) => collect_block_images(&result.content, images),
            ContentBlock::Text(_)
            | ContentBlock::Reasoning(_)
            | ContentBlock::ToolCall(_)
            | ContentBlock::Unknown(_) => {}
        }
    }
}

fn object_key(object: &JsonObject) -> String {
    sha256_hex(&canonical_json(&Value::Object(object.clone())))
}
