//! The per-session price cache (CC-PRC-2, CC-PRC-4; issue 14 target 1): the unscaled
//! price of each surface message, kept between boundaries so that a boundary prices
//! only the messages that changed.
//!
//! A message's unscaled [`Price`] depends only on the message and on what the pricing
//! prices *with*: the meter, the image prices and the file texts. The text scale is
//! applied to sums afterwards (`Q = ceil(total·scale)`), so a new calibration never
//! invalidates an entry; another meter, image pricing or file text does, and so does a
//! new content generation of the view.
//!
//! An entry is the message's seq together with the message itself (`Arc` identity, the
//! `Arc` kept alive by the entry so its address cannot be reused): a session reopened
//! from the store, or a log that reused a seq after a failed write, gives new messages
//! and is priced afresh. The entries follow the surface order of the latest surface
//! priced, with their running total; the common case (the same surface with a few
//! messages appended) compares pointers and prices the new tail only. After a replace
//! (a compaction or an edit shadowing a range) the entries after the change are found
//! by seq.
//!
//! A caller that reads the session's live surface passes its replace generation too
//! ([`PriceCache::surface_total_grown`]): between two replaces a log's surface only
//! grows, so while the generation is the one of the latest surface priced and that
//! surface's last message is still in its place, the entries are its prefix and only
//! the new tail is looked at (a boundary after one new message does not compare
//! 10,000 pointers, twice).
//!
//! Totals are folded in surface order with the same saturating sum as
//! [`RequestPrice::messages_total`](super::RequestPrice::messages_total), so a cached
//! total is bit-for-bit the uncached one.

use std::collections::HashMap;
use std::sync::Arc;

use ccare_core::Message;
use ccare_session::DerivedMessage;

use super::PricingError;
use super::frozen::{FrozenPricing, MeterFingerprint};
use super::inputs::{FileTexts, ImagePricing};
use super::price::Price;
use super::request::Pricer;

/// What a message's unscaled price depends on besides the message.
#[derive(Debug, Clone, PartialEq)]
struct PriceKey {
    meter: MeterFingerprint,
    images: ImagePricing,
    files: FileTexts,
}

impl PriceKey {
    fn of(frozen: &FrozenPricing) -> PriceKey {
        PriceKey {
            meter: frozen.meter().clone(),
            images: frozen.images().clone(),
            files: frozen.files().clone(),
        }
    }

    fn matches(&self, frozen: &FrozenPricing) -> bool {
        self.meter == *frozen.meter()
            && self.images == *frozen.images()
            && self.files == *frozen.files()
    }
}

#[derive(Clone)]
struct Entry {
    seq: u64,
    message: Arc<Message>,
    price: Price,
}

impl Entry {
    fn is(&self, derived: &DerivedMessage) -> bool {
        self.seq == derived.seq && Arc::ptr_eq(&self.message, &derived.message)
    }
}

/// The unscaled prices of one session's surface, as of the latest surface priced.
#[derive(Default)]
pub struct PriceCache {
    key: Option<PriceKey>,
    content_generation: u64,
    /// The replace generation of the latest surface priced, when its caller gave it.
    replace_generation: Option<u64>,
    entries: Vec<Entry>,
    total: Price,
}

impl std::fmt::Debug for PriceCache {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PriceCache")
            .field("key", &self.key)
            .field("content_generation", &self.content_generation)
            .field("entries", &self.entries.len())
            .field("total", &self.total)
            .finish()
    }
}

impl PriceCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The unscaled price of `surface` (a derived view's messages at
    /// `content_generation`) on `pricer`'s pricing: `price([…messages])`, as
    /// [`Pricer::request`] without system prompt and tools would total it.
    pub fn surface_total(
        &mut self,
        pricer: &Pricer<'_>,
        content_generation: u64,
        surface: &[DerivedMessage],
    ) -> Result<Price, PricingError> {
        self.sync(pricer, content_generation, None, surface)?;
        Ok(self.total)
    }

    /// [`PriceCache::surface_total`] of a log's live surface at `replace_generation`:
    /// the same total, found without comparing the unchanged entries when the surface
    /// only grew since the latest one priced (see the module documentation).
    pub fn surface_total_grown(
        &mut self,
        pricer: &Pricer<'_>,
        content_generation: u64,
        replace_generation: u64,
        surface: &[DerivedMessage],
    ) -> Result<Price, PricingError> {
        self.sync(
            pricer,
            content_generation,
            Some(replace_generation),
            surface,
        )?;
        Ok(self.total)
    }

    /// The unscaled price of each message of `surface`, in order ([`Pricer::message`]
    /// of each).
    pub fn surface_prices(
        &mut self,
        pricer: &Pricer<'_>,
        content_generation: u64,
        surface: &[DerivedMessage],
    ) -> Result<Vec<Price>, PricingError> {
        self.sync(pricer, content_generation, None, surface)?;
        Ok(self.entries.iter().map(|entry| entry.price).collect())
    }

    /// The cached price of `message` when the latest surface priced holds this very
    /// message (by identity) at `position`, for a request built from that surface.
    pub fn at(
        &self,
        pricer: &Pricer<'_>,
        position: usize,
        message: &Arc<Message>,
    ) -> Option<Price> {
        let entry = self.entries.get(position)?;
        (self.key.as_ref()?.matches(pricer.frozen()) && Arc::ptr_eq(&entry.message, message))
            .then_some(entry.price)
    }

    /// How many message prices are cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Makes the entries the prices of `surface`, in order, pricing only what is not
    /// cached. On an error the entries stay a valid prefix of `surface`.
    /// `replace_generation`: the surface's, when it is a log's live surface.
    fn sync(
        &mut self,
        pricer: &Pricer<'_>,
        content_generation: u64,
        replace_generation: Option<u64>,
        surface: &[DerivedMessage],
    ) -> Result<(), PricingError> {
        let frozen = pricer.frozen();
        if !self.key.as_ref().is_some_and(|key| key.matches(frozen))
            || self.content_generation != content_generation
        {
            self.key = Some(PriceKey::of(frozen));
            self.content_generation = content_generation;
            self.entries.clear();
            self.total = Price::default();
        }
        let grown = replace_generation.is_some()
            && self.replace_generation == replace_generation
            && self.entries.len().checked_sub(1).is_none_or(|last| {
                surface
                    .get(last)
                    .zip(self.entries.get(last))
                    .is_some_and(|(derived, entry)| entry.is(derived))
            });
        self.replace_generation = replace_generation;
        let common = if grown && self.entries.len() <= surface.len() {
            self.entries.len()
        } else {
            self.entries
                .iter()
                .zip(surface)
                .take_while(|(entry, derived)| entry.is(derived))
                .count()
        };
        let mut stale: HashMap<u64, Entry> = HashMap::new();
        if common < self.entries.len() {
            stale = self
                .entries
                .drain(common..)
                .map(|entry| (entry.seq, entry))
                .collect();
            self.total = self
                .entries
                .iter()
                .fold(Price::default(), |sum, entry| sum.plus(entry.price));
        }
        for derived in surface.get(common..).unwrap_or_default() {
            let price = match stale.remove(&derived.seq) {
                Some(entry) if entry.is(derived) => entry.price,
                Some(_) | None => pricer.message(&derived.message)?,
            };
            self.total = self.total.plus(price);
            self.entries.push(Entry {
                seq: derived.seq,
                message: Arc::clone(&derived.message),
                price,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use ccare_core::{ContentBlock, ImageBlock, Role};
    use ccare_meter::{Meter, MeterConfig};
    use serde_json::Value;

    use super::*;
    use crate::pricing::{
        CalibrationRecord, FileTexts, JournalRecordKind, PricingBasis, RawInput, RecordUsage,
        RequestOutcome, calibrate,
    };

    fn derived(seq: u64, text: &str) -> DerivedMessage {
        let mut blocks = vec![ContentBlock::text(text)];
        if seq.is_multiple_of(7) {
            blocks.push(ContentBlock::Image(ImageBlock {
                media_type: "image/png".to_owned(),
                data: None,
                uri: Some(format!("file:///{seq}.png")),
                offloaded: false,
                detail: None,
                extra: ccare_core::Extra::new(),
            }));
        }
        DerivedMessage {
            seq,
            role: Role::User,
            message: Arc::new(Message::from_blocks(blocks)),
        }
    }

    fn body(seq: u64) -> String {
        format!(
            "message {seq}: {}",
            "some words of the step ".repeat(1 + (seq % 5) as usize)
        )
    }

    fn meter(image_tokens: u64) -> Meter {
        Meter::new(&MeterConfig {
            image_tokens,
            ..MeterConfig::default()
        })
        .unwrap()
    }

    fn frozen(meter: &Meter, basis: PricingBasis) -> FrozenPricing {
        FrozenPricing::capture(
            meter,
            basis,
            ImagePricing::FixedEstimate,
            FileTexts::default(),
        )
    }

    /// A basis calibrated to `prompt / 200` on a sample of raw text 200.
    fn calibrated(prompt: u64) -> PricingBasis {
        let record = CalibrationRecord {
            kind: JournalRecordKind::Request,
            call_id: "c1".to_owned(),
            dispatched: true,
            outcome: Some(RequestOutcome::Completed),
            purpose: Some("conversation".to_owned()),
            event_type: Some("assistant/message".to_owned()),
            event_seq: Some(3),
            header_key: Some("h".to_owned()),
            raw_input: Some(RawInput {
                text_tokens: 200,
                visual_tokens: 0,
            }),
            usage: Some(RecordUsage {
                input_tokens: Some(prompt),
                ..RecordUsage::default()
            }),
        };
        let basis = calibrate(&[record], "h", crate::pricing::MeterKind::Heuristic);
        assert!(basis.is_calibrated(), "{basis:?}");
        basis
    }

    /// The cached and the uncached prices of `surface` agree: the total (scaled too)
    /// and each message's.
    fn agree(
        cache: &mut PriceCache,
        frozen: &FrozenPricing,
        meter: &Meter,
        generation: u64,
        surface: &[DerivedMessage],
    ) {
        let pricer = frozen.pricer(meter).unwrap();
        let uncached = pricer
            .request(
                None,
                surface.iter().map(|derived| &*derived.message),
                &Value::Null,
            )
            .unwrap();
        let total = cache.surface_total(&pricer, generation, surface).unwrap();
        assert_eq!(total, uncached.messages_total());
        assert_eq!(
            total.ceil(pricer.text_scale()),
            uncached.q(),
            "Q on the frozen scale"
        );
        assert_eq!(
            cache.surface_prices(&pricer, generation, surface).unwrap(),
            uncached.messages
        );
        assert_eq!(cache.len(), surface.len());
    }

    /// The uncached total of `surface` on `basis`.
    fn fresh_total(basis: &FrozenPricing, meter: &Meter, surface: &[DerivedMessage]) -> Price {
        basis
            .pricer(meter)
            .unwrap()
            .request(
                None,
                surface.iter().map(|derived| &*derived.message),
                &Value::Null,
            )
            .unwrap()
            .messages_total()
    }

    #[test]
    fn cc_prc_4_a_grown_live_surface_totals_as_fresh_through_appends_replaces_and_reopens() {
        let meter = meter(85);
        let basis = frozen(&meter, PricingBasis::meter_estimate(&meter));
        let pricer = basis.pricer(&meter).unwrap();
        let mut cache = PriceCache::new();
        let mut surface: Vec<DerivedMessage> =
            (0..40).map(|seq| derived(seq, &body(seq))).collect();
        let grown = |cache: &mut PriceCache, replace: u64, surface: &[DerivedMessage]| {
            let total = cache
                .surface_total_grown(&pricer, 0, replace, surface)
                .unwrap();
            assert_eq!(total, fresh_total(&basis, &meter, surface));
            assert_eq!(cache.len(), surface.len());
        };
        grown(&mut cache, 0, &surface);
        // Appends at the same replace generation: the tail only.
        for seq in 40..43 {
            surface.push(derived(seq, &body(seq)));
            grown(&mut cache, 0, &surface);
        }
        // A replace in the middle (one message for one, same length) bumps the
        // generation: every entry is compared again.
        surface[10] = derived(43, "a checkpoint of one message");
        grown(&mut cache, 1, &surface);
        surface.push(derived(44, &body(44)));
        grown(&mut cache, 1, &surface);
        // The same generation from another log (reopened: other messages at the same
        // seqs): its last message is another one, so nothing is trusted.
        let reopened: Vec<DerivedMessage> = surface
            .iter()
            .map(|old| DerivedMessage {
                seq: old.seq,
                role: old.role,
                message: Arc::new(ccare_core::Message::from_blocks(vec![ContentBlock::text(
                    format!("reopened {}", old.seq),
                )])),
            })
            .collect();
        grown(&mut cache, 1, &reopened);
        // A plain call in between (a snapshot of unknown generation), then a grown one.
        let total = cache.surface_total(&pricer, 0, &surface).unwrap();
        assert_eq!(total, fresh_total(&basis, &meter, &surface));
        surface.push(derived(45, &body(45)));
        grown(&mut cache, 1, &surface);
    }

    #[test]
    fn cc_prc_4_cached_prices_agree_with_fresh_ones_through_edits_compactions_and_basis_changes() {
        let image_85 = meter(85);
        let mut cache = PriceCache::new();
        let mut basis = frozen(&image_85, PricingBasis::meter_estimate(&image_85));
        let mut surface: Vec<DerivedMessage> =
            (0..60).map(|seq| derived(seq, &body(seq))).collect();
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // Steps append: only the tail is new.
        for seq in 60..64 {
            surface.push(derived(seq, &body(seq)));
            agree(&mut cache, &basis, &image_85, 0, &surface);
        }
        // A compaction: a checkpoint (a newer seq) shadows seqs 5..=20 in their place.
        surface.splice(5..=20, [derived(64, "a checkpoint of the early steps")]);
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // An edit: one message replaced by a newer one at its place.
        let at = surface
            .iter()
            .position(|derived| derived.seq == 30)
            .unwrap();
        surface[at] = derived(
            65,
            "the corrected result, much longer than before "
                .repeat(9)
                .as_str(),
        );
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // A replace of the tail, then new steps after it.
        let tail = surface.len() - 3;
        surface.splice(tail.., [derived(66, "the tail, summarized")]);
        surface.push(derived(67, &body(67)));
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // A log reopened after a failed write: the same seqs, one of them another
        // message (priced by seq alone, this would be stale).
        let last = surface.len() - 1;
        surface = surface
            .iter()
            .map(|old| DerivedMessage {
                seq: old.seq,
                role: old.role,
                message: Arc::new((*old.message).clone()),
            })
            .collect();
        surface[last] = derived(
            67,
            "another message at a reused seq, longer than the first one",
        );
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // A new calibration changes the scale, not the unscaled prices.
        basis = frozen(&image_85, calibrated(300));
        agree(&mut cache, &basis, &image_85, 0, &surface);
        basis = frozen(&image_85, calibrated(1_000));
        surface.push(derived(68, &body(68)));
        agree(&mut cache, &basis, &image_85, 0, &surface);
        // Another meter (an image costs more): every price is new.
        let image_1000 = meter(1_000);
        let before = frozen(&image_85, calibrated(1_000))
            .pricer(&image_85)
            .unwrap()
            .request(
                None,
                surface.iter().map(|derived| &*derived.message),
                &Value::Null,
            )
            .unwrap()
            .messages_total();
        basis = frozen(&image_1000, calibrated(1_000));
        agree(&mut cache, &basis, &image_1000, 0, &surface);
        let after = cache
            .surface_total(&basis.pricer(&image_1000).unwrap(), 0, &surface)
            .unwrap();
        assert!(after.text > before.text, "{after:?} vs {before:?}");
        // A new content generation of the view, and back to the first meter.
        agree(&mut cache, &basis, &image_1000, 1, &surface);
        basis = frozen(&image_85, PricingBasis::meter_estimate(&image_85));
        agree(&mut cache, &basis, &image_85, 1, &surface);
    }

    #[test]
    fn cc_prc_2_a_request_built_from_the_surface_finds_its_messages_by_identity() {
        let meter = meter(85);
        let frozen = frozen(&meter, PricingBasis::meter_estimate(&meter));
        let pricer = frozen.pricer(&meter).unwrap();
        let surface: Vec<DerivedMessage> = (0..10).map(|seq| derived(seq, &body(seq))).collect();
        let mut cache = PriceCache::new();
        cache.surface_total(&pricer, 0, &surface).unwrap();
        assert_eq!(
            cache.at(&pricer, 3, &surface[3].message),
            Some(pricer.message(&surface[3].message).unwrap())
        );
        // An equal message that is not the surface's is not taken for it.
        let copy = Arc::new((*surface[3].message).clone());
        assert_eq!(cache.at(&pricer, 3, &copy), None);
        assert_eq!(cache.at(&pricer, 4, &surface[3].message), None);
        // Nor on another meter.
        let other = super::tests::meter(1_000);
        let other_frozen = super::tests::frozen(&other, PricingBasis::meter_estimate(&other));
        assert_eq!(
            cache.at(
                &other_frozen.pricer(&other).unwrap(),
                3,
                &surface[3].message
            ),
            None
        );
    }
}
