//! The token meter of context-care (spec §9, H-TOK-1..3): how many tokens a text, a
//! message, the system prompt and the tool list will cost a model.
//!
//! The host prices every node of a session's surface to decide when to compact, so the
//! meter must be cheap and must never fail at counting time. It has two bases:
//!
//! - **Heuristic** (H-TOK-1, [`estimate_text`], [`HeuristicWeights`]): characters are
//!   sorted into CJK, ASCII letters and digits, and other non-whitespace, and weighed
//!   `0.7 / 0.3 / 0.8` by default. It needs no model files, scans most text at close to
//!   1 GB/s, and by design tends to overestimate (target 0.9–1.5× the DeepSeek count;
//!   8–23% mean error per corpus category). [`HeuristicWeights::deepseek_v4`] is an
//!   opt-in preset fitted to the bundled corpus that also weighs numbers, words,
//!   punctuation runs and line breaks ([`StructureWeights`]): within 5% per category,
//!   8% on held-out samples, but with no safety margin. It departs from the spec
//!   formula; its docs say why and give the figures.
//! - **Exact** (H-TOK-3, feature `exact`, on by default): a model's `tokenizer.json`
//!   counts text through the pure-Rust `tokenizers` crate. Each file is loaded once per
//!   process and shared; a file that fails to load is a startup error
//!   ([`MeterError::TokenizerLoad`]). It is some 300 times slower than the heuristic
//!   (about 3.5 MB/s for DeepSeek-V4, mostly its `fancy-regex` pre-tokenizer), so a
//!   caller pricing the same nodes repeatedly should keep their counts.
//!
//! Either way, messages are priced by the same H-TOK-2 formula ([`mod@message`] gives it
//! in full): 4 per message, 4 per block, plus the block's text, 1024 per image.
//! [`Meter`] bundles one configuration; the free functions use the heuristic at default
//! weights.
//!
//! ```
//! use ccare_core::{ContentBlock, Message};
//! use ccare_meter::{estimate_message, estimate_text, Basis, Meter};
//!
//! assert_eq!(estimate_text("Hello, 世界!"), 5); // ceil(0.3·5 + 0.7·2 + 0.8·2) = ceil(4.5)
//! let message = Message::from_blocks(vec![ContentBlock::text("Hello, 世界!")]);
//! assert_eq!(estimate_message(&message), 4 + 4 + 5);
//!
//! let meter = Meter::default();
//! assert_eq!(meter.basis(), Basis::Heuristic);
//! assert_eq!(meter.message(&message), 13);
//! ```
//!
//! The bundled corpus (`corpus/`, four categories: Chinese prose, English prose, Rust
//! code, JSON tool output) and `tests/it/accuracy.rs` measure the heuristic against the
//! DeepSeek-V4 tokenizer; `scripts/fetch-tokenizer.sh` installs that tokenizer.

#![deny(missing_docs)]

mod error;
#[cfg(feature = "exact")]
mod exact;
mod heuristic;
pub mod message;
mod meter;

pub use error::MeterError;
pub use heuristic::{
    CharCounts, HeuristicWeights, MAX_WEIGHT, StructureWeights, estimate_text, is_cjk,
};
pub use message::{
    BLOCK_OVERHEAD, DEFAULT_IMAGE_TOKENS, MESSAGE_OVERHEAD, SECTION_OVERHEAD, estimate_message,
    estimate_system, estimate_tools,
};
pub use meter::{Basis, Meter, MeterConfig};
