//! The `model_scoped_prompts` rules (MP-1): their types and their strict parsing.
//!
//! [`parse_prompt_rules`] reads the array with the shared strict reader
//! ([`ccare_core::strict`]), one rule table at a time, then checks what a type cannot
//! say (the control id's length, a provider without `/`, the trigger's detector).
//! [`PromptRule::applies`] is the pure MP-2 match of a `static` or `model-switch` rule
//! on a call's route, purpose and the previous dispatched route.

use std::collections::HashSet;

use ccare_core::strict::{self, Problem, StrictError};
use ccare_llm::{Purpose, split_model_ref};
use serde::de::{self, Unexpected};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{CONFIG_KEY, control_rule_id};
use crate::pattern::OutputPatternConfig;

/// When a rule applies (MP-1 `trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptTrigger {
    /// On every matching call.
    Static,
    /// On the first call after the route changed (or on the first call at all, with
    /// `initialBind`).
    ModelSwitch,
    /// Feedback about the model's own outputs on the route (OP-*); needs a detector.
    OutputPattern,
}

impl PromptTrigger {
    /// `static`, `model-switch` or `output-pattern`.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptTrigger::Static => "static",
            PromptTrigger::ModelSwitch => "model-switch",
            PromptTrigger::OutputPattern => "output-pattern",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "static" => Some(PromptTrigger::Static),
            "model-switch" => Some(PromptTrigger::ModelSwitch),
            "output-pattern" => Some(PromptTrigger::OutputPattern),
            _ => None,
        }
    }
}

/// An exact route: a provider's config name and a model as the provider knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteRef {
    /// The provider's config name.
    pub provider: String,
    /// The model name.
    pub model: String,
}

impl RouteRef {
    /// A route from its parts.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        RouteRef {
            provider: provider.into(),
            model: model.into(),
        }
    }

    /// The route of a `"<provider>/<model>"` reference, as the LLM layer splits it.
    pub fn from_model_ref(model_ref: &str) -> Option<Self> {
        split_model_ref(model_ref).map(|(provider, model)| RouteRef::new(provider, model))
    }

    /// `provider/model`: what `{boundModelLabel}` becomes (MP-2).
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// One configured model-scoped prompt rule (MP-1), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRule {
    /// Unique among the rules; its control is `prompt:<ruleId>`.
    pub rule_id: String,
    /// The rule's version; a change resets its feedback episodes (OP-5).
    pub version: String,
    /// The exact route the rule is bound to.
    pub route: RouteRef,
    /// The purposes it applies to; `[conversation]` by default.
    pub purposes: Vec<Purpose>,
    /// When it applies.
    pub trigger: PromptTrigger,
    /// `model-switch` only: also apply when there is no previous route.
    pub initial_bind: bool,
    /// The model-visible text, the user's own; `{boundModelLabel}` (and, for
    /// feedback, `{sourceModel} {H} {K} {N} {examples}`) are filled in.
    pub text: String,
    /// The detector, present exactly for `output-pattern` rules.
    pub detector: Option<OutputPatternConfig>,
    /// `output-pattern` only: a request on this route also carries the pending
    /// feedback of the session's other routes (OP-6).
    pub carry_from_other_route: bool,
}

impl PromptRule {
    /// The rule's control rule id, `prompt:<ruleId>`.
    pub fn control_rule_id(&self) -> String {
        control_rule_id(&self.rule_id)
    }

    /// Whether a `static` or `model-switch` rule applies to a call on `route` for
    /// `purpose`, given the last dispatched route of that purpose (MP-2). Matching is
    /// exact; `output-pattern` rules never apply as prompts (their feedback is
    /// delivered separately). Controls are the caller's concern.
    pub fn applies(&self, route: &RouteRef, purpose: Purpose, previous: Option<&RouteRef>) -> bool {
        if self.route != *route || !self.purposes.contains(&purpose) {
            return false;
        }
        match self.trigger {
            PromptTrigger::Static => true,
            PromptTrigger::ModelSwitch => {
                previous.map_or(self.initial_bind, |previous| previous != route)
            }
            PromptTrigger::OutputPattern => false,
        }
    }

    /// The prompt text for a call on `route`: `{boundModelLabel}` becomes
    /// `provider/model` (MP-2); nothing else is touched.
    pub fn prompt_text(&self, route: &RouteRef) -> String {
        self.text.replace("{boundModelLabel}", &route.label())
    }
}

/// Why the `model_scoped_prompts` config was refused (MP-1). Its message names the
/// rule (by index, and by id once known) and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct PromptConfigError {
    /// The rule's index in the array, if the error is about one rule.
    pub index: Option<usize>,
    /// The rule's id, if it was readable.
    pub rule_id: Option<String>,
    /// The field (snake_case, as in `ccare.toml`), if the error is about one.
    pub field: Option<String>,
    /// What is wrong.
    pub problem: String,
}

impl PromptConfigError {
    fn describe(&self) -> String {
        let mut text = CONFIG_KEY.to_owned();
        if let Some(index) = self.index {
            text.push_str(&format!("[{index}]"));
        }
        if let Some(rule_id) = &self.rule_id {
            text.push_str(&format!(" (rule {rule_id:?})"));
        }
        if let Some(field) = &self.field {
            text.push_str(": ");
            text.push_str(field);
        }
        text.push_str(": ");
        text.push_str(&self.problem);
        text
    }
}

/// The longest control id (RC-1), in UTF-16 code units.
const MAX_CONTROL_ID_LEN: usize = 256;

/// One rule as written, read by the shared strict reader: unknown keys first, then
/// each value by its check in this order, then the required keys. camelCase
/// spellings are aliases; both spellings of one key are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTable {
    #[serde(alias = "ruleId", deserialize_with = "non_empty")]
    rule_id: String,
    #[serde(deserialize_with = "version")]
    version: String,
    #[serde(deserialize_with = "non_empty")]
    provider: String,
    #[serde(deserialize_with = "non_empty")]
    model: String,
    #[serde(default, deserialize_with = "purposes")]
    purposes: Option<Vec<Purpose>>,
    #[serde(deserialize_with = "non_empty")]
    trigger: String,
    #[serde(default, alias = "initialBind", deserialize_with = "flag")]
    initial_bind: Option<bool>,
    #[serde(deserialize_with = "non_empty")]
    text: String,
    /// Checked after the trigger is known, by [`OutputPatternConfig::from_json`].
    #[serde(default)]
    detector: Option<Value>,
    #[serde(default, alias = "carryFromOtherRoute", deserialize_with = "flag")]
    carry_from_other_route: Option<bool>,
}

/// `a non-empty string` (not blank either).
fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    strict::check(deserializer, "a non-empty string", |value| {
        value
            .as_str()
            .filter(|text| !text.trim().is_empty())
            .map(str::to_owned)
    })
}

/// `a non-empty string or a non-negative integer`, kept as its text.
fn version<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    strict::check(
        deserializer,
        "a non-empty string or a non-negative integer",
        |value| match value {
            Value::String(text) if !text.trim().is_empty() => Some(text.clone()),
            Value::Number(number) if number.is_u64() => Some(number.to_string()),
            _ => None,
        },
    )
}

/// `true or false`.
fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    strict::check(deserializer, "true or false", Value::as_bool).map(Some)
}

/// A non-empty array of distinct purposes.
fn purposes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<Purpose>>, D::Error> {
    let value = Value::deserialize(deserializer)?;
    let items = match &value {
        Value::Array(items) if !items.is_empty() => items,
        _ => {
            return Err(de::Error::invalid_value(
                Unexpected::Other("value"),
                &"a non-empty array of purposes",
            ));
        }
    };
    let mut purposes = Vec::with_capacity(items.len());
    for item in items {
        let purpose = item
            .as_str()
            .and_then(|text| text.parse::<Purpose>().ok())
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "each must be one of conversation, compaction, session-title, got {item}"
                ))
            })?;
        if purposes.contains(&purpose) {
            return Err(de::Error::custom(format!("{purpose} is listed twice")));
        }
        purposes.push(purpose);
    }
    Ok(Some(purposes))
}

/// Parses `model_scoped_prompts` strictly (MP-1): an array of rule tables with the
/// fields `rule_id, version, provider, model, purposes, trigger, initial_bind, text,
/// detector, carry_from_other_route` (camelCase accepted too, not both forms of one
/// field; the detector's keys likewise). `detector` is present exactly when the
/// trigger is `output-pattern`, and then purposes must be `[conversation]`; the
/// detector is a validated [`OutputPatternConfig`]. Duplicate rule ids are errors.
/// `None` (the key is absent) is no rules.
pub fn parse_prompt_rules(value: Option<&Value>) -> Result<Vec<PromptRule>, PromptConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let Value::Array(entries) = value else {
        return Err(PromptConfigError {
            index: None,
            rule_id: None,
            field: None,
            problem: format!("must be an array of rule tables, got {value}"),
        });
    };
    let mut rules: Vec<PromptRule> = Vec::with_capacity(entries.len());
    let mut seen = HashSet::new();
    for (index, entry) in entries.iter().enumerate() {
        let rule = parse_rule(index, entry)?;
        if !seen.insert(rule.rule_id.clone()) {
            return Err(PromptConfigError {
                index: Some(index),
                rule_id: Some(rule.rule_id),
                field: Some("rule_id".to_owned()),
                problem: "duplicate rule id".to_owned(),
            });
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// The rule's id as written, if it is a string, so that every error names the rule
/// (read before the rule itself, which may be refused).
fn written_rule_id(entry: &Value) -> Option<String> {
    let table = entry.as_object()?;
    table
        .get("rule_id")
        .or_else(|| table.get("ruleId"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The strict reader's refusal, in this module's words.
fn table_error(index: usize, rule_id: Option<String>, error: StrictError) -> PromptConfigError {
    let problem = match error.problem {
        Problem::UnknownKey => "unknown field".to_owned(),
        Problem::Missing => "is required".to_owned(),
        Problem::Duplicate => "given twice (snake_case and camelCase)".to_owned(),
        Problem::Invalid { expected, found } => format!("must be {expected}, got {found}"),
        Problem::Other(message) => message,
    };
    PromptConfigError {
        index: Some(index),
        rule_id,
        field: (!error.path.is_empty()).then_some(error.path),
        problem,
    }
}

fn parse_rule(index: usize, entry: &Value) -> Result<PromptRule, PromptConfigError> {
    let rule_id = written_rule_id(entry);
    let table: RuleTable =
        strict::from_value(entry).map_err(|error| table_error(index, rule_id.clone(), error))?;
    let error = |field: &str, problem: String| PromptConfigError {
        index: Some(index),
        rule_id: rule_id.clone(),
        field: Some(field.to_owned()),
        problem,
    };
    let control_len = control_rule_id(&table.rule_id).encode_utf16().count();
    if control_len > MAX_CONTROL_ID_LEN {
        return Err(error(
            "rule_id",
            format!(
                "is too long: its control id prompt:<rule_id> has {control_len} chars, at most {MAX_CONTROL_ID_LEN}"
            ),
        ));
    }
    if table.provider.contains('/') {
        return Err(error(
            "provider",
            format!(
                "must be a provider's config name, without '/', got {:?}",
                table.provider
            ),
        ));
    }
    let purposes = table
        .purposes
        .unwrap_or_else(|| vec![Purpose::Conversation]);
    let trigger = PromptTrigger::parse(&table.trigger).ok_or_else(|| {
        error(
            "trigger",
            format!(
                "must be static, model-switch or output-pattern, got {:?}",
                table.trigger
            ),
        )
    })?;
    let detector = match (trigger, &table.detector) {
        (PromptTrigger::OutputPattern, None) => {
            return Err(error(
                "detector",
                "is required when the trigger is output-pattern".to_owned(),
            ));
        }
        (PromptTrigger::OutputPattern, Some(detector)) => {
            if purposes != [Purpose::Conversation] {
                return Err(error(
                    "purposes",
                    "must be [conversation] when the trigger is output-pattern".to_owned(),
                ));
            }
            let camel = camel_keys(detector).map_err(|problem| error("detector", problem))?;
            let config = OutputPatternConfig::from_json(camel)
                .map_err(|problem| error("detector", problem.to_string()))?;
            Some(config)
        }
        (_, Some(_)) => {
            return Err(error(
                "detector",
                format!(
                    "is allowed only when the trigger is output-pattern, not {}",
                    trigger.as_str()
                ),
            ));
        }
        (_, None) => None,
    };
    Ok(PromptRule {
        rule_id: table.rule_id,
        version: table.version,
        route: RouteRef::new(table.provider, table.model),
        purposes,
        trigger,
        initial_bind: table.initial_bind.unwrap_or(false),
        text: table.text,
        detector,
        carry_from_other_route: table.carry_from_other_route.unwrap_or(false),
    })
}

/// The detector with every object key in camelCase (`max_text_chars` →
/// `maxTextChars`); a key given in both forms is an error.
fn camel_keys(value: &Value) -> Result<Value, String> {
    match value {
        Value::Object(object) => {
            let mut out = Map::with_capacity(object.len());
            for (key, item) in object {
                let camel = snake_to_camel(key);
                if out.contains_key(&camel) {
                    return Err(format!("{camel} is given twice (snake_case and camelCase)"));
                }
                out.insert(camel, camel_keys(item)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .iter()
            .map(camel_keys)
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

fn snake_to_camel(key: &str) -> String {
    let mut camel = String::with_capacity(key.len());
    for (part_idx, part) in key.split('_').enumerate() {
        let mut chars = part.chars();
        match chars.next() {
            Some(first) if part_idx > 0 => {
                camel.extend(first.to_uppercase());
                camel.push_str(chars.as_str());
            }
            _ => camel.push_str(part),
        }
    }
    camel
}
