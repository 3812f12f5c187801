//! The `[plugins.context-care]` table (CC-CFG-1), validated once at load.
//!
//! The host hands the table over as JSON with the `ccare.toml` spelling of every key:
//! snake_case (`budget_ratio`, `summary.max_tokens`, `route_budgets[i].purpose`), as the
//! spec's naming note says; the spec's camelCase names (`budgetRatio`) are the original's
//! and are unknown keys here. Enum values stay as the spec writes them (`basic-prefix`,
//! `session-title`).
//!
//! Errors carry the key path and the value found. They do **not** carry the
//! `context-care: ` prefix: the host adds the plugin name to every load error it reports
//! (H-CFG-3), so `unknown config foo` reaches the user as
//! `context-care: unknown config foo`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The largest integer accepted for a count, 2^53 - 1 (a JSON safe integer, H-LOG-2).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

    fn parse(text: &str) -> Option<Self> {
        match text {
            "conversation" => Some(RoutePurpose::Conversation),
            "compaction" => Some(RoutePurpose::Compaction),
            "session-title" => Some(RoutePurpose::SessionTitle),
            _ => None,
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
        expected: &'static str,
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
            warnings: Vec::new(),
        }
    }
}

/// The warning `provider_usage_ratio` produces (CC-CFG-1).
pub const PROVIDER_USAGE_RATIO_WARNING: &str = "provider_usage_ratio is ignored: input prices \
     are calibrated from the request journal (CC-PRC-3); remove the key";

/// The top-level keys, in the order they are validated.
const TOP_LEVEL_KEYS: [&str; 28] = [
    "budget_ratio",
    "wakefulness_ratio",
    "retain_ratio",
    "fatigue_exponent",
    "min_fresh_tokens",
    "min_note_chars",
    "max_note_chars",
    "range_strategy",
    "expected_checkpoint_tokens",
    "safety_tokens",
    "burst_tokens",
    "release_margin_tokens",
    "summary_safety_tokens",
    "retain_tokens",
    "context_budget_tokens",
    "billing_input_ceiling_tokens",
    "route_budgets",
    "max_overflow_retries",
    "max_passes",
    "max_summary_repair_retries",
    "max_summary_calls_per_action",
    "summary",
    "quiet_start",
    "provider_usage_ratio",
    // Legacy ratios: validated, then ignored (CC-CFG-1 "drive nothing").
    "soft_budget_ratio",
    "hard_budget_ratio",
    "hysteresis_ratio",
    "auxiliary_budget_ratio",
];

const SUMMARY_KEYS: [&str; 4] = ["provider", "model", "max_tokens", "max_retries"];

const ROUTE_BUDGET_KEYS: [&str; 5] = [
    "provider",
    "model",
    "purpose",
    "context_budget_tokens",
    "billing_input_ceiling_tokens",
];

const RATIO: &str = "a number in (0, 1)";
const POSITIVE_NUMBER: &str = "a finite number > 0";
const POSITIVE_INTEGER: &str = "a positive integer";
const NON_NEGATIVE_INTEGER: &str = "a non-negative integer";
const NON_BLANK_STRING: &str = "a non-blank string";
const BOOLEAN: &str = "true or false";

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
        let table = config.as_object().ok_or_else(|| ConfigError::NotATable {
            found: config.to_string(),
        })?;
        reject_unknown_keys(table, &TOP_LEVEL_KEYS, |key| key.to_owned())?;
        let defaults = Self::default();
        let fields = Fields { table, prefix: "" };

        let budget_ratio = fields
            .ratio("budget_ratio")?
            .unwrap_or(defaults.budget_ratio);
        let wakefulness_ratio = fields
            .ratio("wakefulness_ratio")?
            .unwrap_or(defaults.wakefulness_ratio);
        let retain_ratio = fields
            .ratio("retain_ratio")?
            .unwrap_or(defaults.retain_ratio);
        let fatigue_exponent = fields
            .positive_number("fatigue_exponent")?
            .unwrap_or(defaults.fatigue_exponent);
        let min_fresh_tokens = fields
            .positive_integer("min_fresh_tokens")?
            .unwrap_or(defaults.min_fresh_tokens);
        let min_note_chars = fields
            .positive_integer("min_note_chars")?
            .unwrap_or(defaults.min_note_chars);
        let max_note_chars = fields
            .positive_integer("max_note_chars")?
            .unwrap_or(defaults.max_note_chars);
        let range_strategy = match table.get("range_strategy") {
            None => defaults.range_strategy,
            Some(Value::String(text)) if text == "basic-prefix" => RangeStrategy::BasicPrefix,
            Some(Value::String(text)) if text == "target-prefix" => RangeStrategy::TargetPrefix,
            Some(other) => {
                return Err(invalid(
                    "range_strategy",
                    "basic-prefix or target-prefix",
                    other,
                ));
            }
        };
        let expected_checkpoint_tokens =
            fields.non_negative_integer("expected_checkpoint_tokens")?;
        let safety_tokens = fields.non_negative_integer("safety_tokens")?.unwrap_or(0);
        let burst_tokens = fields.non_negative_integer("burst_tokens")?.unwrap_or(0);
        let release_margin_tokens = fields
            .non_negative_integer("release_margin_tokens")?
            .unwrap_or(0);
        let summary_safety_tokens = fields.non_negative_integer("summary_safety_tokens")?;
        let retain_tokens = fields.non_negative_integer("retain_tokens")?;
        let context_budget_tokens = fields.positive_integer("context_budget_tokens")?;
        let billing_input_ceiling_tokens =
            fields.positive_integer("billing_input_ceiling_tokens")?;
        let route_budgets = match table.get("route_budgets") {
            None => Vec::new(),
            Some(value) => parse_route_budgets(value)?,
        };
        let max_overflow_retries = fields
            .non_negative_integer("max_overflow_retries")?
            .unwrap_or(defaults.max_overflow_retries);
        let max_passes = fields.integer_at_least("max_passes", 1, "an integer >= 1")?;
        let max_summary_repair_retries =
            fields.non_negative_integer("max_summary_repair_retries")?;
        let max_summary_calls_per_action =
            fields.integer_at_least("max_summary_calls_per_action", 1, "an integer >= 1")?;
        let summary = match table.get("summary") {
            None => SummaryConfig::default(),
            Some(value) => parse_summary(value)?,
        };
        let quiet_start = fields
            .boolean("quiet_start")?
            .unwrap_or(defaults.quiet_start);
        let mut warnings = Vec::new();
        if table.contains_key("provider_usage_ratio") {
            warnings.push(PROVIDER_USAGE_RATIO_WARNING.to_owned());
        }
        for legacy in [
            "soft_budget_ratio",
            "hard_budget_ratio",
            "hysteresis_ratio",
            "auxiliary_budget_ratio",
        ] {
            fields.ratio(legacy)?;
        }

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
        if range_strategy == RangeStrategy::TargetPrefix && expected_checkpoint_tokens.is_none() {
            return Err(ConfigError::TargetPrefixWithoutExpectedCheckpoint);
        }

        Ok(Self {
            budget_ratio,
            wakefulness_ratio,
            retain_ratio,
            fatigue_exponent,
            min_fresh_tokens,
            min_note_chars,
            max_note_chars,
            range_strategy,
            expected_checkpoint_tokens,
            safety_tokens,
            burst_tokens,
            release_margin_tokens,
            summary_safety_tokens,
            retain_tokens,
            context_budget_tokens,
            billing_input_ceiling_tokens,
            route_budgets,
            max_overflow_retries,
            max_passes,
            max_summary_repair_retries,
            max_summary_calls_per_action,
            summary,
            quiet_start,
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

/// Typed reads of the keys of one table; `prefix` is the key path of the table
/// (`""`, `summary.`, `route_budgets[0].`).
struct Fields<'a> {
    table: &'a Map<String, Value>,
    prefix: &'a str,
}

impl Fields<'_> {
    fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn invalid(&self, key: &str, expected: &'static str, found: &Value) -> ConfigError {
        invalid(&self.path(key), expected, found)
    }

    fn ratio(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        let Some(value) = self.table.get(key) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(ratio) if ratio > 0.0 && ratio < 1.0 => Ok(Some(ratio)),
            _ => Err(self.invalid(key, RATIO, value)),
        }
    }

    fn positive_number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        let Some(value) = self.table.get(key) else {
            return Ok(None);
        };
        match value.as_f64() {
            Some(number) if number.is_finite() && number > 0.0 => Ok(Some(number)),
            _ => Err(self.invalid(key, POSITIVE_NUMBER, value)),
        }
    }

    fn integer_at_least(
        &self,
        key: &str,
        minimum: u64,
        expected: &'static str,
    ) -> Result<Option<u64>, ConfigError> {
        let Some(value) = self.table.get(key) else {
            return Ok(None);
        };
        match safe_integer(value) {
            Some(integer) if integer >= minimum => Ok(Some(integer)),
            _ => Err(self.invalid(key, expected, value)),
        }
    }

    fn positive_integer(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        self.integer_at_least(key, 1, POSITIVE_INTEGER)
    }

    fn non_negative_integer(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        self.integer_at_least(key, 0, NON_NEGATIVE_INTEGER)
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(value) => Err(self.invalid(key, BOOLEAN, value)),
        }
    }

    fn non_blank_string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let Some(value) = self.table.get(key) else {
            return Ok(None);
        };
        match value {
            Value::String(text) if !text.trim().is_empty() => Ok(Some(text.clone())),
            _ => Err(self.invalid(key, NON_BLANK_STRING, value)),
        }
    }
}

fn invalid(key: &str, expected: &'static str, found: &Value) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_owned(),
        expected,
        found: found.to_string(),
    }
}

fn reject_unknown_keys(
    table: &Map<String, Value>,
    known: &[&str],
    path: impl Fn(&str) -> String,
) -> Result<(), ConfigError> {
    match table.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(ConfigError::UnknownKey { key: path(key) }),
        None => Ok(()),
    }
}

fn parse_summary(value: &Value) -> Result<SummaryConfig, ConfigError> {
    let table = value
        .as_object()
        .ok_or_else(|| invalid("summary", "a table", value))?;
    reject_unknown_keys(table, &SUMMARY_KEYS, |key| format!("summary.{key}"))?;
    let fields = Fields {
        table,
        prefix: "summary.",
    };
    let provider = fields.non_blank_string("provider")?;
    let model = fields.non_blank_string("model")?;
    match (&provider, &model) {
        (Some(_), None) => {
            return Err(ConfigError::HalfSummaryRoute {
                set: "provider",
                missing: "model",
            });
        }
        (None, Some(_)) => {
            return Err(ConfigError::HalfSummaryRoute {
                set: "model",
                missing: "provider",
            });
        }
        (Some(_), Some(_)) | (None, None) => {}
    }
    Ok(SummaryConfig {
        provider,
        model,
        max_tokens: fields.positive_integer("max_tokens")?,
        max_retries: fields.non_negative_integer("max_retries")?,
    })
}

fn parse_route_budgets(value: &Value) -> Result<Vec<RouteBudget>, ConfigError> {
    let entries = value
        .as_array()
        .ok_or_else(|| invalid("route_budgets", "an array of tables", value))?;
    let mut route_budgets: Vec<RouteBudget> = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let prefix = format!("route_budgets[{index}].");
        let table = entry
            .as_object()
            .ok_or_else(|| invalid(&format!("route_budgets[{index}]"), "a table", entry))?;
        reject_unknown_keys(table, &ROUTE_BUDGET_KEYS, |key| format!("{prefix}{key}"))?;
        let fields = Fields {
            table,
            prefix: &prefix,
        };
        let provider =
            fields
                .non_blank_string("provider")?
                .ok_or(ConfigError::MissingRouteField {
                    index,
                    field: "provider",
                })?;
        let model = fields
            .non_blank_string("model")?
            .ok_or(ConfigError::MissingRouteField {
                index,
                field: "model",
            })?;
        let purpose = match table.get("purpose") {
            None => return Err(ConfigError::MissingRoutePurpose { index }),
            Some(value) => value
                .as_str()
                .and_then(RoutePurpose::parse)
                .ok_or_else(|| {
                    fields.invalid(
                        "purpose",
                        "conversation, compaction or session-title",
                        value,
                    )
                })?,
        };
        let context_budget_tokens = fields.positive_integer("context_budget_tokens")?;
        let billing_input_ceiling_tokens =
            fields.positive_integer("billing_input_ceiling_tokens")?;
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
            context_budget_tokens,
            billing_input_ceiling_tokens,
        });
    }
    Ok(route_budgets)
}

/// A JSON number that is an integer in 0 ..= 2^53-1; an integral float such as `1024.0`
/// counts, as it does for JavaScript's `Number.isSafeInteger`.
fn safe_integer(value: &Value) -> Option<u64> {
    let Value::Number(number) = value else {
        return None;
    };
    if let Some(integer) = number.as_u64() {
        return (integer <= MAX_SAFE_INTEGER).then_some(integer);
    }
    if number.is_i64() {
        return None;
    }
    let float = number.as_f64()?;
    let integral = float.is_finite() && float.fract() == 0.0 && float >= 0.0;
    // Exact for every integral float up to 2^53; larger ones saturate and are refused.
    let integer = float as u64;
    (integral && integer <= MAX_SAFE_INTEGER).then_some(integer)
}
