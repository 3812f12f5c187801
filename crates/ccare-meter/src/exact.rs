//! Exact text counts from a `tokenizer.json` (spec H-TOK-3), behind the `exact` feature.
//!
//! A tokenizer is large (the DeepSeek-V4 file is 6 MiB of JSON and takes a noticeable
//! moment to parse), so each file is loaded at most once while anything uses it: a
//! process-wide cache maps the canonical path to a weak reference, and every
//! [`crate::Meter`] built for the same file shares one `Arc<Tokenizer>`. The cache lock
//! is held while a file loads, so two threads asking for the same file at once still
//! load it once.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tokenizers::Tokenizer;

use crate::MeterError;

/// A loaded tokenizer and the path it was configured with.
#[derive(Clone)]
pub(crate) struct SharedTokenizer {
    pub(crate) path: PathBuf,
    pub(crate) tokenizer: Arc<Tokenizer>,
}

impl fmt::Debug for SharedTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedTokenizer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SharedTokenizer {
    /// The tokenizer for `path`, from the cache or freshly loaded.
    pub(crate) fn load(path: &Path) -> Result<Self, MeterError> {
        let load_error = |message: String| MeterError::TokenizerLoad {
            path: path.to_owned(),
            message,
        };
        let key = std::fs::canonicalize(path).map_err(|err| load_error(err.to_string()))?;
        let cache = CACHE.get_or_init(Mutex::default);
        // Every update leaves the map valid, so a lock poisoned by a panic elsewhere is usable.
        let mut loaded = cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tokenizer) = loaded.get(&key).and_then(Weak::upgrade) {
            return Ok(Self {
                path: path.to_owned(),
                tokenizer,
            });
        }
        let tokenizer =
            Arc::new(Tokenizer::from_file(&key).map_err(|err| load_error(err.to_string()))?);
        loaded.retain(|_, weak| weak.strong_count() > 0);
        loaded.insert(key, Arc::downgrade(&tokenizer));
        Ok(Self {
            path: path.to_owned(),
            tokenizer,
        })
    }

    /// Tokens in `text`, special tokens not added; `None` when the tokenizer fails
    /// (the caller then falls back to the heuristic).
    pub(crate) fn count(&self, text: &str) -> Option<u64> {
        if text.is_empty() {
            return Some(0);
        }
        let encoding = self.tokenizer.encode_fast(text, false).ok()?;
        u64::try_from(encoding.len()).ok()
    }
}

type Cache = Mutex<HashMap<PathBuf, Weak<Tokenizer>>>;

static CACHE: OnceLock<Cache> = OnceLock::new();
