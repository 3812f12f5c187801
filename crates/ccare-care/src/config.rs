//! The `[plugins.context-care]` table (CC-CFG-1), validated once at load.
//!
//! The host hands the table over as JSON with the `ccare.toml` spelling of every key:
//! snake_case (`budget_ratio`, `summary.max_tokens`, `route_budgets[i].purpose`), as the
//! spec's naming note says; the spec's camelCase names (`budgetRatio`) are the original's
//! and are unknown keys here. Enum values stay as the spec writes them (`basic-prefix`,
//! `session-title`).
//!
//! The table is read by the shared strict reader ([`ccare_core::strict`]) into the
//! private `Table` struct: unknown keys first, then each value by its type or check;
//! the rules between keys (a whole summary route, `retain_ratio < budget_ratio`, ...)
//! come after.
//!
//! Errors carry the key path and the value found. They do **not** carry the
//! `context-care: ` prefix: the host adds the plugin name to every load error it reports
//! (H-CFG-3), so `unknown config foo` reaches the user as
//! `context-care: unknown config foo`.

use std::fmt;

use ccare_core::json::safe_integer;
use ccare_core::strict::{self, Problem, StrictError};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The validated context-care configuration (CC-CFG-1, CC-BUD-4).
///
/// `CareConfig::default()` is what an empty table gives.
#[derive(Debug, Clone, PartialEq)]
pub struct CareConfig {
    /// `budget_ratio` (default 0.8, in (0,1)): the fatigue denominator's share of C
    /// (CC-MET-1) and the soft input `floor(budgetRatio·C)` (CC-BUD-1).
    pub budget_ratio: f64,
    /// `wakefulness_ratio` (default 1/3, in (0,1)): the retained text at which
    /// wakefulness saturates, as a share of C (CC-MET-1).
    pub wakefulness_ratio: f64,
    /// `retain_ratio` (default 0.16, in (0,1), below `budget_ratio`): the tail kept by
    /// compaction, as a share of `C − R`, when `retain_tokens` is unset (CC-BUD-1).
    pub retain_ratio: f64,
    /// `fatigue_exponent` (default 1.5, > 0): the fatigue curve's exponent (CC-MET-1).
    pub fatigue_exponent: f64,
    /// `min_fresh_tokens` (default 1024, positive): the fresh text a range needs before a
    /// summary is worth it (CC-MNT-2, CC-MNT-4).
    pub min_fresh_tokens: u64,
    /// `min_note_chars` (default 1000, positive, below `max_note_chars`): the shortest
    /// `context_rest` note, in UTF-16 units (CC-TOOL-2/3).
    pub min_note_chars: u64,
    /// `max_note_chars` (default 10000, positive): the longest accepted note; never shown
    /// to the model (CC-TOOL-2).
    pub max_note_chars: u64,
    /// `range_strategy` (default `basic-prefix`): how candidates are ranked (CC-MNT-4).
    pub range_strategy: RangeStrategy,
    /// `expected_checkpoint_tokens` (unset; >= 0, required by `target-prefix`): the
    /// predicted price of a checkpoint (CC-MNT-4).
    pub expected_checkpoint_tokens: Option<u64>,
    /// `safety_tokens` (default 0, >= 0): subtracted once from the hard input (CC-BUD-1).
    pub safety_tokens: u64,
    /// `burst_tokens` (default 0, >= 0): room kept between soft and hard input (CC-BUD-1).
    pub burst_tokens: u64,
    /// `release_margin_tokens` (default 0, >= 0): the release target is `S − margin`
    /// (CC-BUD-1, CC-HYS-1).
    pub release_margin_tokens: u64,
    /// `summary_safety_tokens` (unset = `safety_tokens`, >= 0): the safety of compaction
    /// requests (CC-BUD-5). Read it through [`CareConfig::effective_summary_safety_tokens`].
    pub summary_safety_tokens: Option<u64>,
    /// `retain_tokens` (unset; >= 0, and 0 is legal): the tail in tokens, overriding
    /// `retain_ratio` (CC-BUD-1).
    pub retain_tokens: Option<u64>,
    /// `context_budget_tokens` (unset; > 0): the policy capacity (CC-MET-4, CC-BUD-1).
    pub context_budget_tokens: Option<u64>,
    /// `billing_input_ceiling_tokens` (unset; > 0): the billed-input ceiling (CC-BUD-1).
    pub billing_input_ceiling_tokens: Option<u64>,
    /// `route_budgets`: exact per-route overrides of the two values above (CC-BUD-4).
    pub route_budgets: Vec<RouteBudget>,
    /// `max_overflow_retries` (default 1, >= 0): overflow recoveries per request series
    /// (CC-OVF-1).
    pub max_overflow_retries: u64,
    /// `max_passes` (unset; >= 1): automatic summary passes per boundary (CC-MNT-6). Read
    /// it through [`CareConfig::pass_limit`].
    pub max_passes: Option<u64>,
    /// `max_summary_repair_retries` (unset; >= 0): repair hooks tried per action
    /// (CC-SUM-4); unset means no explicit limit.
    pub max_summary_repair_retries: Option<u64>,
    /// `max_summary_calls_per_action` (unset; >= 1): real summary dispatches per action
    /// (CC-SUM-4); unset means no explicit limit.
    pub max_summary_calls_per_action: Option<u64>,
    /// `summary`: explicit summary route and limits (CC-CFG-1, CC-SUM-1).
    pub summary: SummaryConfig,
    /// `quiet_start` (default `true`): no status notice while the session is at its
    /// calm start (both levels at level 0 or unknown, no notice given yet, nothing
    /// compacted or refused; see `quiet.rs`). `false` is the seed's behaviour: a notice
    /// at the first boundary and whenever its text changes (CC-NTC-2).
    pub quiet_start: bool,
    /// `journal_keep` (default [`DEFAULT_JOURNAL_KEEP`]; >= 1): how many records each
    /// session keeps in each journal, the request journal and the maintenance journal;
    /// the oldest (by `at`, then key) beyond it are deleted when a session writes a new
    /// record and when the journal opens. Calibration reads the newest eligible request
    /// and the hysteresis replay the latest conversation requests, the UI the latest
    /// actions, so a session's cost per boundary stays bounded however long it runs.
    pub journal_keep: u64,
    /// Load warnings for the operator, e.g. the ignored `provider_usage_ratio` (CC-CFG-1).
    /// They do not fail the load.
    pub warnings: Vec<String>,
}

/// How automatic maintenance ranks candidate ranges (CC-CFG-1, CC-MNT-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RangeStrategy {
    /// `basic-prefix`: the largest balanced prefix.
    #[serde(rename = "basic-prefix")]
    BasicPrefix,
    /// `target-prefix`: the smallest prefix predicted to cover the release deficit
    /// (needs `expected_checkpoint_tokens`).
    #[serde(rename = "target-prefix")]
    TargetPrefix,
}

impl RangeStrategy {
    /// The config value, e.g. `basic-prefix`.
    pub fn as_str(self) -> &'static str {
        match self {
            RangeStrategy::BasicPrefix => "basic-prefix",
            RangeStrategy::TargetPrefix => "target-prefix",
        }
    }
}

/// What a provider request is for; route budgets match on it (CC-BUD-4, CC-BUD-5).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum RoutePurpose {
    /// `conversation`: a turn of the agent.
    #[serde(rename = "conversation")]
    Conversation,
    /// `compaction`: a summary request (CC-BUD-5 applies).
    #[serde(rename = "compaction")]
    Compaction,
    /// `session-title`: a title request.
    #[serde(rename = "session-title")]
    SessionTitle,
}

impl RoutePurpose {
    /// The config value, e.g. `session-title`.
    pub fn as_str(self) -> &'static str {
        match self {
            RoutePurpose::Conversation => "conversation",
            RoutePurpose::Compaction => "compaction",
            RoutePurpose::SessionTitle => "session-title",
        }
    }
}

impl fmt::Display for RoutePurpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[plugins.context-care.route_budgets]]` entry (CC-BUD-4): an exact
/// `(provider, model, purpose)` match whose values override the global ones per field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteBudget {
    /// The provider's config name; non-blank.
    pub provider: String,
    /// The model name; non-blank.
    pub model: String,
    /// The request purpose; required.
    pub purpose: RoutePurpose,
    /// Overrides `context_budget_tokens` on this route when set (> 0).
    pub context_budget_tokens: Option<u64>,
    /// Overrides `billing_input_ceiling_tokens` on this route when set (> 0).
    pub billing_input_ceiling_tokens: Option<u64>,
}

impl RouteBudget {
    /// Whether this entry applies to the route: exact equality of all three fields, no
    /// model-family guessing (CC-BUD-4).
    pub fn matches(&self, provider: &str, model: &str, purpose: RoutePurpose) -> bool {
        self.provider == provider && self.model == model && self.purpose == purpose
    }
}

/// The strict `summary` table (CC-CFG-1); every field is an explicit override of the
/// summary route's resolution (CC-SUM-1). `provider` and `model` are set together or
/// not at all ([`ConfigError::HalfSummaryRoute`]); when set they win over `[agent]
/// compaction_model` and the conversation route (the plugin's `route.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SummaryConfig {
    /// `summary.provider`: non-blank.
    pub provider: Option<String>,
    /// `summary.model`: non-blank.
    pub model: Option<String>,
    /// `summary.max_tokens`: > 0.
    pub max_tokens: Option<u64>,
    /// `summary.max_retries`: >= 0; unset reads as 0 (CC-SUM-1).
    pub max_retries: Option<u64>,
}

/// A load error of the config table (CC-CFG-1, CC-BUD-4). Its `Display` is the message
/// without the plugin-name prefix, which the host adds (H-CFG-3).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The table is not a JSON object.
    #[error("the config must be a table, got {found}")]
    NotATable {
        /// The value found, as JSON.
        found: String,
    },
    /// A key the spec does not define, anywhere in the table (`summary.x`,
    /// `route_budgets[0].x` included).
    #[error("unknown config {key}")]
    UnknownKey {
        /// The key path.
        key: String,
    },
    /// A value outside its constraint.
    #[error("{key} must be {expected}, got {found}")]
    InvalidValue {
        /// The key path, e.g. `summary.max_tokens`.
        key: String,
        /// The constraint, e.g. `a positive integer`.
        expected: String,
        /// The value found, as JSON.
        found: String,
    },
    /// A `summary` table that names only one half of the summary route (CC-SUM-1): a
    /// model without its provider, or a provider without its model. Refused rather than
    /// completed from another route, so a half-written route is never silently ignored
    /// or paired with a provider it was not meant for.
    #[error(
        "summary.{set} is set without summary.{missing}; set both (the summary route is \"<provider>/<model>\") or neither"
    )]
    HalfSummaryRoute {
        /// The key that is set (`provider` or `model`).
        set: &'static str,
        /// The key that is missing.
        missing: &'static str,
    },
    /// `retain_ratio` is not below `budget_ratio`.
    #[error("retain_ratio must be below budget_ratio ({budget_ratio}), got {retain_ratio}")]
    RetainRatioNotBelowBudgetRatio {
        /// The retain ratio found.
        retain_ratio: f64,
        /// The budget ratio in force.
        budget_ratio: f64,
    },
    /// `min_note_chars` is not below `max_note_chars`.
    #[error("min_note_chars must be below max_note_chars ({max_note_chars}), got {min_note_chars}")]
    MinNoteCharsNotBelowMax {
        /// The minimum found.
        min_note_chars: u64,
        /// The maximum in force.
        max_note_chars: u64,
    },
    /// `range_strategy = "target-prefix"` without `expected_checkpoint_tokens`.
    #[error(
        "range_strategy \"target-prefix\" needs expected_checkpoint_tokens (an integer >= 0), got none"
    )]
    TargetPrefixWithoutExpectedCheckpoint,
    /// A route budget without `purpose`.
    #[error(
        "route_budgets[{index}].purpose is required (conversation, compaction or session-title)"
    )]
    MissingRoutePurpose {
        /// The entry's index.
        index: usize,
    },
    /// A route budget without `provider` or `model`.
    #[error("route_budgets[{index}].{field} is required (a non-blank string)")]
    MissingRouteField {
        /// The entry's index.
        index: usize,
        /// `provider` or `model`.
        field: &'static str,
    },
    /// Any other refusal of the table's shape, as the strict reader words it.
    #[error(transparent)]
    Table(StrictError),
    /// Two route budgets with the same `(provider, model, purpose)` (CC-BUD-4).
    #[error(
        "duplicate route budget route_budgets[{index}]: provider {provider:?}, model {model:?}, purpose {purpose} (as route_budgets[{first_index}])"
    )]
    DuplicateRouteBudget {
        /// The later entry's index.
        index: usize,
        /// The earlier entry's index.
        first_index: usize,
        /// The provider.
        provider: String,
        /// The model.
        model: String,
        /// The purpose.
        purpose: RoutePurpose,
    },
}

impl Default for CareConfig {
    fn default() -> Self {
        Self {
            budget_ratio: 0.8,
            wakefulness_ratio: 1.0 / 3.0,
            retain_ratio: 0.16,
            fatigue_exponent: 1.5,
            min_fresh_tokens: 1024,
            min_note_chars: 1000,
            max_note_chars: 10_000,
            range_strategy: RangeStrategy::BasicPrefix,
            expected_checkpoint_tokens: None,
            safety_tokens: 0,
            burst_tokens: 0,
            release_margin_tokens: 0,
            summary_safety_tokens: None,
            retain_tokens: None,
            context_budget_tokens: None,
            billing_input_ceiling_tokens: None,
            route_budgets: Vec::new(),
            max_overflow_retries: 1,
            max_passes: None,
            max_summary_repair_retries: None,
            max_summary_calls_per_action: None,
            summary: SummaryConfig::default(),
            quiet_start: true,
            journal_keep: DEFAULT_JOURNAL_KEEP,
            warnings: Vec::new(),
        }
    }
}

/// The default `journal_keep`: 1,024 records per session and journal. Calibration
/// needs the newest settled conversation request of the current header (CC-PRC-3),
/// which a header change makes older, and the hysteresis replay (CC-HYS-1) the
/// conversation requests since the last arming; the UI lists a session's actions and
/// audits its requests. A long working session (a few hundred requests, its summary
/// calls included) keeps its whole journal; only sessions far longer are trimmed.
pub const DEFAULT_JOURNAL_KEEP: u64 = 1024;

/// The warning `provider_usage_ratio` produces (CC-CFG-1).
pub const PROVIDER_USAGE_RATIO_WARNING: &str = "provider_usage_ratio is ignored: input prices \
     are calibrated from the request journal (CC-PRC-3); remove the key";

/// The table as written: every key optional, each value checked by its type or its
/// `deserialize_with` (the `strict` reader checks unknown keys first, then the values
/// in this declaration order). Cross-key rules are [`CareConfig::parse`]'s.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default, deserialize_with = "strict::ratio")]
    budget_ratio: Option<f64>,
    #[serde(default, deserialize_with = "strict::ratio")]
    wakefulness_ratio: Option<f64>,
    #[serde(default, deserialize_with = "strict::ratio")]
    retain_ratio: Option<f64>,
    #[serde(default, deserialize_with = "strict::positive_number")]
    fatigue_exponent: Option<f64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    min_fresh_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    min_note_chars: Option<u64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    max_note_chars: Option<u64>,
    #[serde(default)]
    range_strategy: Option<RangeStrategy>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    expected_checkpoint_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    safety_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    burst_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    release_margin_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    summary_safety_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    retain_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    context_budget_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    billing_input_ceiling_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::tables")]
    route_budgets: Option<Vec<RouteBudgetTable>>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    max_overflow_retries: Option<u64>,
    #[serde(default, deserialize_with = "at_least_one")]
    max_passes: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    max_summary_repair_retries: Option<u64>,
    #[serde(default, deserialize_with = "at_least_one")]
    max_summary_calls_per_action: Option<u64>,
    #[serde(default)]
    summary: Option<SummaryTable>,
    #[serde(default, deserialize_with = "strict::boolean")]
    quiet_start: Option<bool>,
    #[serde(default, deserialize_with = "at_least_one")]
    journal_keep: Option<u64>,
    /// Any value: accepted with a warning (CC-CFG-1).
    #[serde(default)]
    provider_usage_ratio: Option<IgnoredAny>,
    // Legacy ratios: validated, then ignored (CC-CFG-1 "drive nothing").
    #[serde(
        default,
        rename = "soft_budget_ratio",
        deserialize_with = "strict::ratio"
    )]
    _soft_budget_ratio: Option<f64>,
    #[serde(
        default,
        rename = "hard_budget_ratio",
        deserialize_with = "strict::ratio"
    )]
    _hard_budget_ratio: Option<f64>,
    #[serde(
        default,
        rename = "hysteresis_ratio",
        deserialize_with = "strict::ratio"
    )]
    _hysteresis_ratio: Option<f64>,
    #[serde(
        default,
        rename = "auxiliary_budget_ratio",
        deserialize_with = "strict::ratio"
    )]
    _auxiliary_budget_ratio: Option<f64>,
}

/// The `summary` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryTable {
    #[serde(default, deserialize_with = "strict::non_blank_string")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "strict::non_blank_string")]
    model: Option<String>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    max_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::non_negative_integer")]
    max_retries: Option<u64>,
}

/// One `route_budgets` entry as written; the required keys are checked after.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteBudgetTable {
    #[serde(default, deserialize_with = "strict::non_blank_string")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "strict::non_blank_string")]
    model: Option<String>,
    #[serde(default)]
    purpose: Option<RoutePurpose>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    context_budget_tokens: Option<u64>,
    #[serde(default, deserialize_with = "strict::positive_integer")]
    billing_input_ceiling_tokens: Option<u64>,
}

/// `max_passes` and `max_summary_calls_per_action`: `an integer >= 1`.
fn at_least_one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    strict::check(deserializer, "an integer >= 1", |value| {
        safe_integer(value).filter(|count| *count >= 1)
    })
    .map(Some)
}

impl From<StrictError> for ConfigError {
    fn from(error: StrictError) -> Self {
        match error.problem {
            Problem::UnknownKey => ConfigError::UnknownKey { key: error.path },
            Problem::Invalid { found, .. } if error.path.is_empty() => {
                ConfigError::NotATable { found }
            }
            Problem::Invalid { expected, found } => ConfigError::InvalidValue {
                key: error.path,
                expected,
                found,
            },
            problem @ (Problem::Missing | Problem::Duplicate | Problem::Other(_)) => {
                ConfigError::Table(StrictError {
                    path: error.path,
                    problem,
                })
            }
        }
    }
}

impl CareConfig {
    /// Validates the table (as JSON; `{}` when empty) per CC-CFG-1 and CC-BUD-4.
    ///
    /// The error is [`ConfigError`]'s message, e.g. `unknown config budgetRatio` or
    /// `safety_tokens must be a non-negative integer, got -1`; the host prefixes it with
    /// `context-care: ` (H-CFG-3).
    pub fn from_json(config: &Value) -> Result<Self, String> {
        Self::parse(config).map_err(|error| error.to_string())
    }

    /// As [`CareConfig::from_json`], with the typed error.
    pub fn parse(config: &Value) -> Result<Self, ConfigError> {
        let table: Table = strict::from_value(config)?;
        let defaults = Self::default();
        let budget_ratio = table.budget_ratio.unwrap_or(defaults.budget_ratio);
        let retain_ratio = table.retain_ratio.unwrap_or(defaults.retain_ratio);
        let min_note_chars = table.min_note_chars.unwrap_or(defaults.min_note_chars);
        let max_note_chars = table.max_note_chars.unwrap_or(defaults.max_note_chars);
        let range_strategy = table.range_strategy.unwrap_or(defaults.range_strategy);
        let route_budgets = route_budgets(table.route_budgets.unwrap_or_default())?;
        let summary = match table.summary {
            None => SummaryConfig::default(),
            Some(summary) => summary_config(summary)?,
        };
        if retain_ratio >= budget_ratio {
            return Err(ConfigError::RetainRatioNotBelowBudgetRatio {
                retain_ratio,
                budget_ratio,
            });
        }
        if min_note_chars >= max_note_chars {
            return Err(ConfigError::MinNoteCharsNotBelowMax {
                min_note_chars,
                max_note_chars,
            });
        }
        if range_strategy == RangeStrategy::TargetPrefix
            && table.expected_checkpoint_tokens.is_none()
        {
            return Err(ConfigError::TargetPrefixWithoutExpectedCheckpoint);
        }
        let mut warnings = Vec::new();
        if table.provider_usage_ratio.is_some() {
            warnings.push(PROVIDER_USAGE_RATIO_WARNING.to_owned());
        }
        Ok(Self {
            budget_ratio,
            wakefulness_ratio: table
                .wakefulness_ratio
                .unwrap_or(defaults.wakefulness_ratio),
            retain_ratio,
            fatigue_exponent: table.fatigue_exponent.unwrap_or(defaults.fatigue_exponent),
            min_fresh_tokens: table.min_fresh_tokens.unwrap_or(defaults.min_fresh_tokens),
            min_note_chars,
            max_note_chars,
            range_strategy,
            expected_checkpoint_tokens: table.expected_checkpoint_tokens,
            safety_tokens: table.safety_tokens.unwrap_or(defaults.safety_tokens),
            burst_tokens: table.burst_tokens.unwrap_or(defaults.burst_tokens),
            release_margin_tokens: table
                .release_margin_tokens
                .unwrap_or(defaults.release_margin_tokens),
            summary_safety_tokens: table.summary_safety_tokens,
            retain_tokens: table.retain_tokens,
            context_budget_tokens: table.context_budget_tokens,
            billing_input_ceiling_tokens: table.billing_input_ceiling_tokens,
            route_budgets,
            max_overflow_retries: table
                .max_overflow_retries
                .unwrap_or(defaults.max_overflow_retries),
            max_passes: table.max_passes,
            max_summary_repair_retries: table.max_summary_repair_retries,
            max_summary_calls_per_action: table.max_summary_calls_per_action,
            summary,
            quiet_start: table.quiet_start.unwrap_or(defaults.quiet_start),
            journal_keep: table.journal_keep.unwrap_or(defaults.journal_keep),
            warnings,
        })
    }

    /// `summarySafetyTokens ?? safetyTokens`: the safety of compaction requests (CC-BUD-5).
    pub fn effective_summary_safety_tokens(&self) -> u64 {
        self.summary_safety_tokens.unwrap_or(self.safety_tokens)
    }

    /// The automatic pass limit, `maxPasses ?? 2`: ccare has no provider
    /// `compactionRetries`, so CC-MNT-6's inherited value is always absent (CC-SUM-1).
    pub fn pass_limit(&self) -> u64 {
        self.max_passes.unwrap_or(2)
    }

    /// The advertised note maximum `P = min(maxNoteChars, max(8000, minNoteChars))`
    /// (CC-TOOL-2): 8000 by default.
    pub fn advertised_max_note_chars(&self) -> u64 {
        self.max_note_chars.min(self.min_note_chars.max(8000))
    }

    /// The route budget that matches exactly, if any (CC-BUD-4). Duplicates were refused
    /// at load, so there is at most one.
    pub fn route_budget(
        &self,
        provider: &str,
        model: &str,
        purpose: RoutePurpose,
    ) -> Option<&RouteBudget> {
        self.route_budgets
            .iter()
            .find(|entry| entry.matches(provider, model, purpose))
    }
}

/// The summary route is both halves or neither (CC-SUM-1).
fn summary_config(table: SummaryTable) -> Result<SummaryConfig, ConfigError> {
    match (&table.provider, &table.model) {
        (Some(_), None) => Err(ConfigError::HalfSummaryRoute {
            set: "provider",
            missing: "model",
        }),
        (None, Some(_)) => Err(ConfigError::HalfSummaryRoute {
            set: "model",
            missing: "provider",
        }),
        (Some(_), Some(_)) | (None, None) => Ok(SummaryConfig {
            provider: table.provider,
            model: table.model,
            max_tokens: table.max_tokens,
            max_retries: table.max_retries,
        }),
    }
}

/// Each entry names its whole route, and no route twice (CC-BUD-4).
fn route_budgets(entries: Vec<RouteBudgetTable>) -> Result<Vec<RouteBudget>, ConfigError> {
    let mut route_budgets: Vec<RouteBudget> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.into_iter().enumerate() {
        let provider = entry.provider.ok_or(ConfigError::MissingRouteField {
            index,
            field: "provider",
        })?;
        let model = entry.model.ok_or(ConfigError::MissingRouteField {
            index,
            field: "model",
        })?;
        let purpose = entry
            .purpose
            .ok_or(ConfigError::MissingRoutePurpose { index })?;
        if let Some(first_index) = route_budgets
            .iter()
            .position(|earlier| earlier.matches(&provider, &model, purpose))
        {
            return Err(ConfigError::DuplicateRouteBudget {
                index,
                first_index,
                provider,
                model,
                purpose,
            });
        }
        route_budgets.push(RouteBudget {
            provider,
            model,
            purpose,
            context_budget_tokens: entry.context_budget_tokens,
            billing_input_ceiling_tokens: entry.billing_input_ceiling_tokens,
        });
    }
    Ok(route_budgets)
}
