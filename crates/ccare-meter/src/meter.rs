//! [`Meter`]: one configured way of counting, shared cheaply.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccare_core::{ContentBlock, Message};
use serde_json::Value;

use crate::MeterError;
#[cfg(feature = "exact")]
use crate::exact::SharedTokenizer;
use crate::heuristic::HeuristicWeights;
use crate::message::{self, DEFAULT_IMAGE_TOKENS};

/// How a [`Meter`] is set up. [`Default`] is the heuristic at the spec weights, images
/// at 1024 tokens, no tokenizer.
#[derive(Debug, Clone, PartialEq)]
pub struct MeterConfig {
    /// Weights of the heuristic, used for all text when there is no tokenizer.
    pub weights: HeuristicWeights,
    /// What one image costs (H-TOK-2).
    pub image_tokens: u64,
    /// A model's `tokenizer.json`; when set, text counts are exact (H-TOK-3).
    pub tokenizer: Option<PathBuf>,
}

impl Default for MeterConfig {
    fn default() -> Self {
        Self {
            weights: HeuristicWeights::default(),
            image_tokens: DEFAULT_IMAGE_TOKENS,
            tokenizer: None,
        }
    }
}

/// Where a [`Meter`]'s text counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Basis {
    /// The H-TOK-1 character-class estimate.
    Heuristic,
    /// A model tokenizer (H-TOK-3).
    Exact,
}

impl Basis {
    /// `"heuristic"` or `"exact"`, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Heuristic => "heuristic",
            Basis::Exact => "exact",
        }
    }
}

/// Counts the tokens of text, messages, the system prompt and the tool list.
///
/// Text is counted by the heuristic or, when the configuration names a tokenizer, by
/// that tokenizer; the overheads of H-TOK-2 are the same either way. Cloning is cheap
/// (one `Arc`), and meters built for the same tokenizer file share one loaded copy.
#[derive(Clone)]
pub struct Meter {
    inner: Arc<Inner>,
}

struct Inner {
    weights: HeuristicWeights,
    image_tokens: u64,
    counter: Counter,
}

enum Counter {
    Heuristic,
    #[cfg(feature = "exact")]
    Exact(SharedTokenizer),
}

impl Meter {
    /// Builds a meter, loading the tokenizer if one is configured.
    ///
    /// Fails with [`MeterError::TokenizerLoad`] naming the path when the file cannot be
    /// read or parsed, and with [`MeterError::ExactUnavailable`] when a tokenizer is
    /// configured but the `exact` feature is off.
    pub fn new(config: &MeterConfig) -> Result<Self, MeterError> {
        let counter = match &config.tokenizer {
            None => Counter::Heuristic,
            Some(path) => load_counter(path)?,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                weights: config.weights,
                image_tokens: config.image_tokens,
                counter,
            }),
        })
    }

    /// A heuristic meter with the given weights and default image price.
    pub fn heuristic(weights: HeuristicWeights) -> Self {
        Self {
            inner: Arc::new(Inner {
                weights,
                image_tokens: DEFAULT_IMAGE_TOKENS,
                counter: Counter::Heuristic,
            }),
        }
    }

    /// Whether text counts are estimated or exact.
    pub fn basis(&self) -> Basis {
        match &self.inner.counter {
            Counter::Heuristic => Basis::Heuristic,
            #[cfg(feature = "exact")]
            Counter::Exact(_) => Basis::Exact,
        }
    }

    /// The tokenizer file, as configured, when counts are exact.
    pub fn tokenizer_path(&self) -> Option<&Path> {
        match &self.inner.counter {
            Counter::Heuristic => None,
            #[cfg(feature = "exact")]
            Counter::Exact(shared) => Some(&shared.path),
        }
    }

    /// The heuristic weights (used for all text in heuristic mode, and as a fallback
    /// should the tokenizer ever fail on a text).
    pub fn weights(&self) -> HeuristicWeights {
        self.inner.weights
    }

    /// What one image costs.
    pub fn image_tokens(&self) -> u64 {
        self.inner.image_tokens
    }

    /// Tokens in `text`, with no overhead: exact when a tokenizer is loaded (without
    /// special tokens), else the heuristic. Should the tokenizer fail on a text (its
    /// regex engine has a backtracking limit), that text falls back to the heuristic:
    /// counting never fails.
    pub fn text(&self, text: &str) -> u64 {
        match &self.inner.counter {
            Counter::Heuristic => self.inner.weights.estimate(text),
            #[cfg(feature = "exact")]
            Counter::Exact(shared) => shared
                .count(text)
                .unwrap_or_else(|| self.inner.weights.estimate(text)),
        }
    }

    /// The heuristic estimate of `text`, whatever the basis (H-TOK-5 prices the surface
    /// change since the anchor this way).
    pub fn estimate(&self, text: &str) -> u64 {
        self.inner.weights.estimate(text)
    }

    /// The H-TOK-2 price of a message: 4 plus each block's price.
    pub fn message(&self, message: &Message) -> u64 {
        message::message_tokens(message, &|text| self.text(text), self.inner.image_tokens)
    }

    /// The price of one block (4 plus its content): what adding it to a message adds.
    pub fn block(&self, block: &ContentBlock) -> u64 {
        message::block_tokens(block, &|text| self.text(text), self.inner.image_tokens)
    }

    /// The price of the system prompt: its text plus 4.
    pub fn system(&self, prompt: &str) -> u64 {
        message::system_tokens(prompt, &|text| self.text(text))
    }

    /// The price of the tool list: its compact JSON plus 4.
    pub fn tools(&self, tools: &Value) -> u64 {
        message::tools_tokens(tools, &|text| self.text(text))
    }
}

impl Default for Meter {
    /// The heuristic at the spec weights.
    fn default() -> Self {
        Self::heuristic(HeuristicWeights::default())
    }
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter")
            .field("basis", &self.basis())
            .field("tokenizer", &self.tokenizer_path())
            .field("weights", &self.inner.weights)
            .field("image_tokens", &self.inner.image_tokens)
            .finish()
    }
}

#[cfg(feature = "exact")]
fn load_counter(path: &Path) -> Result<Counter, MeterError> {
    SharedTokenizer::load(path).map(Counter::Exact)
}

#[cfg(not(feature = "exact"))]
fn load_counter(path: &Path) -> Result<Counter, MeterError> {
    Err(MeterError::ExactUnavailable {
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_meter_is_the_heuristic() {
        let meter = Meter::default();
        assert_eq!(meter.basis(), Basis::Heuristic);
        assert_eq!(meter.tokenizer_path(), None);
        assert_eq!(meter.text("hello 世界"), crate::estimate_text("hello 世界"));
        assert_eq!(
            meter.message(&Message::from_blocks(vec![ContentBlock::text("hi")])),
            crate::estimate_message(&Message::from_blocks(vec![ContentBlock::text("hi")]))
        );
    }

    #[test]
    fn image_price_is_configurable() {
        let config = MeterConfig {
            image_tokens: 85,
            ..MeterConfig::default()
        };
        let meter = Meter::new(&config);
        let image: Option<ContentBlock> = serde_json::from_str(
            r#"{"type":"image","media_type":"image/png","uri":"file:///a.png"}"#,
        )
        .ok();
        let price = meter
            .ok()
            .zip(image)
            .map(|(meter, image)| meter.block(&image));
        assert_eq!(price, Some(4 + 85));
    }

    #[test]
    fn missing_tokenizer_is_a_typed_error_naming_the_path() {
        let config = MeterConfig {
            tokenizer: Some(PathBuf::from("/nonexistent/tokenizer.json")),
            ..MeterConfig::default()
        };
        let error = Meter::new(&config).err();
        let Some(error) = error else {
            panic!("a missing tokenizer must fail");
        };
        #[cfg(feature = "exact")]
        assert!(matches!(&error, MeterError::TokenizerLoad { path, .. }
            if path == Path::new("/nonexistent/tokenizer.json")));
        #[cfg(not(feature = "exact"))]
        assert!(matches!(&error, MeterError::ExactUnavailable { .. }));
        assert!(error.to_string().contains("/nonexistent/tokenizer.json"));
    }
}

#[cfg(all(test, feature = "exact"))]
mod exact_tests {
    use super::*;

    /// A word-level tokenizer small enough to write by hand: one token per known word
    /// or punctuation mark, whitespace dropped.
    const TINY_TOKENIZER: &str = r#"{
      "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
      "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
      "post_processor": null, "decoder": null,
      "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "!": 3},
                "unk_token": "[UNK]"}
    }"#;

    fn tiny_tokenizer_file(dir: &tempfile::TempDir) -> PathBuf {
        let path = dir.path().join("tokenizer.json");
        if let Err(err) = std::fs::write(&path, TINY_TOKENIZER) {
            panic!("cannot write {}: {err}", path.display());
        }
        path
    }

    fn exact_meter(path: &Path) -> Meter {
        let config = MeterConfig {
            tokenizer: Some(path.to_owned()),
            ..MeterConfig::default()
        };
        match Meter::new(&config) {
            Ok(meter) => meter,
            Err(err) => panic!("{err}"),
        }
    }

    fn shared(meter: &Meter) -> Option<&Arc<tokenizers::Tokenizer>> {
        match &meter.inner.counter {
            Counter::Exact(shared) => Some(&shared.tokenizer),
            Counter::Heuristic => None,
        }
    }

    #[test]
    fn exact_counts_text_and_keeps_overheads() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir");
        };
        let meter = exact_meter(&tiny_tokenizer_file(&dir));
        assert_eq!(meter.basis(), Basis::Exact);
        assert_eq!(meter.text(""), 0);
        assert_eq!(meter.text("hello world !"), 3);
        assert_eq!(meter.text("hello  unknownword"), 2);
        let message = Message::from_blocks(vec![ContentBlock::text("hello world")]);
        assert_eq!(meter.message(&message), 4 + 4 + 2);
        assert_eq!(meter.system("hello"), 1 + 4);
        // The heuristic stays available whatever the basis.
        assert_eq!(meter.estimate("hello"), crate::estimate_text("hello"));
    }

    #[test]
    fn meters_for_one_file_share_one_tokenizer() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir");
        };
        let path = tiny_tokenizer_file(&dir);
        let first = exact_meter(&path);
        // A different spelling of the same file hits the same cache entry.
        let second = exact_meter(&dir.path().join(".").join("tokenizer.json"));
        let (Some(a), Some(b)) = (shared(&first), shared(&second)) else {
            panic!("both meters must be exact");
        };
        assert!(Arc::ptr_eq(a, b));
        assert_eq!(
            second.tokenizer_path(),
            Some(dir.path().join(".").join("tokenizer.json").as_path())
        );
    }

    #[test]
    fn unparsable_tokenizer_is_a_load_error() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir");
        };
        let path = dir.path().join("broken.json");
        if let Err(err) = std::fs::write(&path, "{\"model\": 3}") {
            panic!("{err}");
        }
        let config = MeterConfig {
            tokenizer: Some(path.clone()),
            ..MeterConfig::default()
        };
        assert!(matches!(
            Meter::new(&config),
            Err(MeterError::TokenizerLoad { path: error_path, .. }) if error_path == path
        ));
    }
}
