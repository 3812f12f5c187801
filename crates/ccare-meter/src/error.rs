//! The one error type of the meter.

use std::path::PathBuf;

/// Why a meter could not be built. Every variant is a configuration or startup error
/// (H-TOK-3: a tokenizer that fails to load stops the host); counting never fails.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MeterError {
    /// A heuristic weight is NaN, infinite, negative or above [`crate::MAX_WEIGHT`].
    #[error("heuristic weight `{name}` must be a finite number from 0 to 1000, got {value}")]
    InvalidWeight {
        /// `cjk`, `ascii_alnum`, `other`, or a structure weight: `digit_group`, `word`,
        /// `other_run` or `newline`.
        name: &'static str,
        /// The value refused.
        value: f64,
    },
    /// The tokenizer file could not be read or parsed.
    #[error(
        "cannot load tokenizer {}: {message}. How to fix: point the meter at a valid \
         tokenizer.json (scripts/fetch-tokenizer.sh installs the DeepSeek-V4 one)",
        path.display()
    )]
    TokenizerLoad {
        /// The path as configured.
        path: PathBuf,
        /// What went wrong, from the file system or the tokenizer parser.
        message: String,
    },
    /// A tokenizer was configured but this build has no exact counting.
    #[error(
        "tokenizer {} configured, but ccare-meter was built without its `exact` feature",
        path.display()
    )]
    ExactUnavailable {
        /// The path as configured.
        path: PathBuf,
    },
}
