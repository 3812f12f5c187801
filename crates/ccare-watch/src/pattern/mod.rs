//! The output-pattern detector (OP-1 .. OP-7): counts telltale phrases in the prose of
//! committed model outputs and decides when the model gets feedback about them.
//!
//! Reading order, each a pure step:
//! 1. [`OutputPatternConfig`] (OP-1): the strict, validated detector of one rule.
//! 2. [`extract_statements`] (OP-2): Markdown prose split into sentences, with UTF-16
//!    offsets into the original text.
//! 3. [`measure`] (OP-3): N, K, H, F, J, D and bounded evidence, or `unavailable`.
//! 4. [`evaluate_trigger`] (OP-4): `single-output` rows and the `window`.
//! 5. [`Episode`] (OP-5, OP-6): per (session, rule) cooldown, rearm and the pending
//!    feedback's delivery bookkeeping; [`render_feedback_text`] fills its template.
//! 6. [`fixture_1`] (OP-7): the acceptance fixture.
//!
//! Not here: storage, routes, requests and the rule list (MP-1); the plugin reads
//! outputs, stores episodes and delivers the text.

mod config;
mod episode;
mod fixture;
mod metrics;
mod statements;
mod trigger;

pub use config::{
    ConfigError, Locale, OutputPatternConfig, PhraseConfig, ThresholdRow, WindowThresholds,
};
pub use episode::{
    DeliveryError, Episode, FeedbackContext, Observation, ObserveOutcome, OutputKind,
    PendingFeedback, PendingStatus, TriggerDecision, render_feedback_text,
};
pub use fixture::fixture_1;
pub use metrics::{Evidence, Hit, Measurement, Metrics, UnavailableReason, measure};
pub use statements::{Statement, extract_statements};
pub use trigger::{
    TriggerKind, WindowSample, WindowTotals, evaluate_trigger, row_holds, single_output_row,
    window_holds, window_totals,
};

/// Length of `text` in UTF-16 code units (GEN-1), as the stream watch counts it.
use crate::engine::utf16_len;
