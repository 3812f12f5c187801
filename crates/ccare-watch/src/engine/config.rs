//! Trigger configuration (SW-1, SW-5): the serde form `{id, detector{kind, params},
//! scope, mode, everyChars, actions[]}`, its validation into [`Trigger`]s, and the
//! default triggers.
//!
//! Keys are camelCase as the spec writes them; the `ccare.toml` snake_case spelling
//! (`every_chars`, `min_lines`, …) is accepted as an alias. Unknown keys are errors.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::action::ActionId;
use super::detect::{LineRepeatParams, PhraseList};
use super::view::{LINE_WINDOW, WINDOWED_EVERY};

/// The longest trigger id, in characters (RC-1 ids are 1..256 chars).
pub const MAX_TRIGGER_ID_CHARS: usize = 256;

/// The default `time-anxiety` phrases (SW-5).
pub const TIME_ANXIETY_PHRASES: [&str; 13] = [
    "时间不够",
    "时间有限",
    "时间不多",
    "时间紧迫",
    "没时间了",
    "来不及",
    "加快速度",
    "得加快",
    "抓紧时间",
    "节省时间",
    "浪费时间",
    "太耗时",
    "时间成本",
];

/// The default `context-anxiety` phrases (SW-5).
pub const CONTEXT_ANXIETY_PHRASES: [&str; 15] = [
    "上下文不够",
    "上下文有限",
    "上下文不多",
    "上下文快满",
    "上下文紧张",
    "上下文吃紧",
    "上下文压力",
    "上下文成本",
    "节省上下文",
    "省点上下文",
    "会话太长",
    "趁还没压缩",
    "趁压缩之前",
    "趁上下文还够",
    "免得被压缩",
];

/// Which stream a trigger reads (SW-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Text deltas only.
    Text,
    /// Reasoning deltas only.
    Reasoning,
    /// Both, in arrival order, into one view.
    Combined,
}

/// When a trigger's detector is asked (SW-1, SW-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// On every delta (`marker`, `phrase`) or every line that joins the window
    /// (`line-repeat`).
    #[default]
    Incremental,
    /// Every `everyChars` new UTF-16 units, over the trigger's own view.
    Windowed,
}

/// A detector and its parameters, `{kind, params}` (SW-4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "params",
    rename_all = "kebab-case",
    deny_unknown_fields
)]
pub enum DetectorConfig {
    /// `marker`: one exact string.
    Marker(MarkerParams),
    /// `phrase`: the first listed phrase present; an empty list never hits.
    Phrase(PhraseParams),
    /// `line-repeat`: a repeated line in the line window.
    LineRepeat(LineRepeatParams),
}

/// The `marker` detector's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MarkerParams {
    /// The exact string to find; must not be empty.
    pub marker: String,
}

/// The `phrase` detector's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhraseParams {
    /// The phrases in priority order; none may be empty.
    pub phrases: Vec<String>,
}

/// One trigger as configured (SW-1): validated into a [`Trigger`] by [`Triggers::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerConfig {
    /// The trigger's id, 1..=256 characters, unique in its set (e.g. `line-repeat`).
    pub id: String,
    /// What judges the text.
    pub detector: DetectorConfig,
    /// Which stream it reads.
    pub scope: Scope,
    /// When it is judged (default `incremental`).
    #[serde(default)]
    pub mode: Mode,
    /// New UTF-16 units between checks of a windowed trigger (default 300); only for
    /// `windowed`.
    #[serde(
        default,
        alias = "every_chars",
        skip_serializing_if = "Option::is_none"
    )]
    pub every_chars: Option<usize>,
    /// The actions, in the order they run on a hit; each at most once.
    pub actions: Vec<ActionId>,
}

impl TriggerConfig {
    /// The default triggers (SW-5): `line-repeat` (combined, windowed every 300,
    /// 30/30/.35/12, notice → abort → resume), `time-anxiety` and `context-anxiety`
    /// (reasoning, incremental phrases, notice).
    pub fn defaults() -> Vec<TriggerConfig> {
        let phrases = |list: &[&str]| {
            DetectorConfig::Phrase(PhraseParams {
                phrases: list.iter().map(|phrase| (*phrase).to_owned()).collect(),
            })
        };
        vec![
            TriggerConfig {
                id: "line-repeat".to_owned(),
                detector: DetectorConfig::LineRepeat(LineRepeatParams::default()),
                scope: Scope::Combined,
                mode: Mode::Windowed,
                every_chars: Some(WINDOWED_EVERY),
                actions: vec![ActionId::Notice, ActionId::Abort, ActionId::Resume],
            },
            TriggerConfig {
                id: "time-anxiety".to_owned(),
                detector: phrases(&TIME_ANXIETY_PHRASES),
                scope: Scope::Reasoning,
                mode: Mode::Incremental,
                every_chars: None,
                actions: vec![ActionId::Notice],
            },
            TriggerConfig {
                id: "context-anxiety".to_owned(),
                detector: phrases(&CONTEXT_ANXIETY_PHRASES),
                scope: Scope::Reasoning,
                mode: Mode::Incremental,
                every_chars: None,
                actions: vec![ActionId::Notice],
            },
        ]
    }
}

/// Why a trigger configuration was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TriggerError {
    /// The JSON did not have the trigger shape (unknown key, wrong type, …).
    #[error("invalid trigger config: {0}")]
    Shape(String),
    /// The id is empty or longer than 256 characters.
    #[error("trigger id must have 1..=256 characters, got {chars}")]
    BadId {
        /// The id's length in characters.
        chars: usize,
    },
    /// Two triggers share an id.
    #[error("duplicate trigger id {0}")]
    DuplicateId(String),
    /// A `marker` detector has an empty marker.
    #[error("trigger {trigger}: marker is empty")]
    EmptyMarker {
        /// The trigger's id.
        trigger: String,
    },
    /// A `phrase` detector lists an empty phrase (it would match everything).
    #[error("trigger {trigger}: phrase {index} is empty")]
    EmptyPhrase {
        /// The trigger's id.
        trigger: String,
        /// The phrase's position in the list.
        index: usize,
    },
    /// A `line-repeat` parameter is out of range.
    #[error("trigger {trigger}: {param} must be {expected}")]
    BadLineRepeatParam {
        /// The trigger's id.
        trigger: String,
        /// The parameter's name, e.g. `minRatio`.
        param: &'static str,
        /// The accepted range.
        expected: &'static str,
    },
    /// `everyChars` is 0.
    #[error("trigger {trigger}: everyChars must be at least 1")]
    ZeroEveryChars {
        /// The trigger's id.
        trigger: String,
    },
    /// `everyChars` is set on an incremental trigger, where it means nothing.
    #[error("trigger {trigger}: everyChars needs mode windowed")]
    EveryCharsWithoutWindow {
        /// The trigger's id.
        trigger: String,
    },
    /// The trigger lists no action, so it could never be evaluated.
    #[error("trigger {trigger}: no actions")]
    NoActions {
        /// The trigger's id.
        trigger: String,
    },
    /// An action is listed twice.
    #[error("trigger {trigger}: action {action} is listed twice")]
    DuplicateAction {
        /// The trigger's id.
        trigger: String,
        /// The repeated action.
        action: String,
    },
    /// `resume` is listed without an `abort` before it, so it could never run (SW-7).
    #[error("trigger {trigger}: resume must come after abort")]
    ResumeWithoutAbort {
        /// The trigger's id.
        trigger: String,
    },
}

/// A validated detector with what its scan needs precomputed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Detector {
    /// `marker` or `phrase`: a list of phrases (a marker is a one-phrase list).
    Phrases {
        list: PhraseList,
        /// True for `marker`, so the evidence says which kind hit.
        marker: bool,
    },
    /// `line-repeat` with its thresholds.
    LineRepeat(LineRepeatParams),
}

/// One validated trigger (SW-1): immutable, shared by every agent's watch.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    id: Arc<str>,
    detector: Detector,
    scope: Scope,
    every_chars: Option<usize>,
    actions: Box<[ActionId]>,
    config: TriggerConfig,
}

impl Trigger {
    /// Validates one configuration (the id's uniqueness is checked by [`Triggers::new`]).
    pub fn new(config: TriggerConfig) -> Result<Self, TriggerError> {
        let chars = config.id.chars().count();
        if chars == 0 || chars > MAX_TRIGGER_ID_CHARS {
            return Err(TriggerError::BadId { chars });
        }
        let trigger = || config.id.clone();
        let detector = match &config.detector {
            DetectorConfig::Marker(params) => {
                if params.marker.is_empty() {
                    return Err(TriggerError::EmptyMarker { trigger: trigger() });
                }
                Detector::Phrases {
                    list: PhraseList::new(std::slice::from_ref(&params.marker)),
                    marker: true,
                }
            }
            DetectorConfig::Phrase(params) => {
                if let Some(index) = params.phrases.iter().position(String::is_empty) {
                    return Err(TriggerError::EmptyPhrase {
                        trigger: trigger(),
                        index,
                    });
                }
                Detector::Phrases {
                    list: PhraseList::new(&params.phrases),
                    marker: false,
                }
            }
            DetectorConfig::LineRepeat(params) => {
                check_line_repeat(params, &config.id)?;
                Detector::LineRepeat(*params)
            }
        };
        let every_chars = match (config.mode, config.every_chars) {
            (Mode::Incremental, None) => None,
            (Mode::Incremental, Some(_)) => {
                return Err(TriggerError::EveryCharsWithoutWindow { trigger: trigger() });
            }
            (Mode::Windowed, Some(0)) => {
                return Err(TriggerError::ZeroEveryChars { trigger: trigger() });
            }
            (Mode::Windowed, every) => Some(every.unwrap_or(WINDOWED_EVERY)),
        };
        check_actions(&config.actions, &config.id)?;
        Ok(Self {
            id: config.id.as_str().into(),
            detector,
            scope: config.scope,
            every_chars,
            actions: config.actions.clone().into(),
            config,
        })
    }

    /// The trigger's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id as shared by the firings.
    pub(crate) fn shared_id(&self) -> &Arc<str> {
        &self.id
    }

    /// Which stream it reads.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// `Some(everyChars)` for a windowed trigger, `None` for an incremental one.
    pub fn every_chars(&self) -> Option<usize> {
        self.every_chars
    }

    /// The actions in the order they run.
    pub fn actions(&self) -> &[ActionId] {
        &self.actions
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &TriggerConfig {
        &self.config
    }

    pub(crate) fn detector(&self) -> &Detector {
        &self.detector
    }
}

fn check_line_repeat(params: &LineRepeatParams, trigger: &str) -> Result<(), TriggerError> {
    let bad = |param, expected| TriggerError::BadLineRepeatParam {
        trigger: trigger.to_owned(),
        param,
        expected,
    };
    if !(1..=LINE_WINDOW).contains(&params.min_lines) {
        return Err(bad("minLines", "in 1..=80 (the line window)"));
    }
    if params.min_count == 0 {
        return Err(bad("minCount", "at least 1"));
    }
    if !(params.min_ratio.is_finite() && (0.0..=1.0).contains(&params.min_ratio)) {
        return Err(bad("minRatio", "a number in 0..=1"));
    }
    if params.min_run == 0 {
        return Err(bad("minRun", "at least 1"));
    }
    Ok(())
}

fn check_actions(actions: &[ActionId], trigger: &str) -> Result<(), TriggerError> {
    if actions.is_empty() {
        return Err(TriggerError::NoActions {
            trigger: trigger.to_owned(),
        });
    }
    let mut seen = HashSet::new();
    for action in actions {
        if !seen.insert(action) {
            return Err(TriggerError::DuplicateAction {
                trigger: trigger.to_owned(),
                action: action.to_string(),
            });
        }
        if *action == ActionId::Resume && !seen.contains(&ActionId::Abort) {
            return Err(TriggerError::ResumeWithoutAbort {
                trigger: trigger.to_owned(),
            });
        }
    }
    Ok(())
}

/// A validated trigger set with unique ids, cheap to clone and share between the
/// watches of all agents.
#[derive(Debug, Clone, PartialEq)]
pub struct Triggers(Arc<[Trigger]>);

impl Triggers {
    /// Validates every configuration and their ids' uniqueness.
    pub fn new(configs: impl IntoIterator<Item = TriggerConfig>) -> Result<Self, TriggerError> {
        let mut ids = HashSet::new();
        let mut triggers = Vec::new();
        for config in configs {
            let trigger = Trigger::new(config)?;
            if !ids.insert(Arc::clone(trigger.shared_id())) {
                return Err(TriggerError::DuplicateId(trigger.id().to_owned()));
            }
            triggers.push(trigger);
        }
        Ok(Self(triggers.into()))
    }

    /// The default triggers of SW-5.
    pub fn defaults() -> Self {
        let triggers: Vec<Trigger> = TriggerConfig::defaults()
            .into_iter()
            .filter_map(|config| Trigger::new(config).ok())
            .collect();
        Self(triggers.into())
    }

    /// The default triggers with per-trigger overrides merged in (DESIGN.md §5
    /// `[plugins.stream-watch] triggers = {}`): `{"line-repeat": {"detector":
    /// {"params": {"minCount": 40}}}}` changes one threshold; an id that is not a default
    /// trigger must be a whole trigger.
    pub fn with_overrides(
        overrides: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, TriggerError> {
        // ccare.toml writes snake_case (`min_count`); the configs are camelCase.
        fn camel(key: &str) -> String {
            let mut out = String::with_capacity(key.len());
            let mut upper = false;
            for c in key.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    out.extend(c.to_uppercase());
                    upper = false;
                } else {
                    out.push(c);
                }
            }
            out
        }
        fn merge(base: &mut serde_json::Value, patch: &serde_json::Value) {
            match (base, patch) {
                (serde_json::Value::Object(base), serde_json::Value::Object(patch)) => {
                    for (key, value) in patch {
                        merge(
                            base.entry(camel(key)).or_insert(serde_json::Value::Null),
                            value,
                        );
                    }
                }
                (base, patch) => *base = patch.clone(),
            }
        }
        let mut configs: Vec<serde_json::Value> = TriggerConfig::defaults()
            .iter()
            .filter_map(|config| serde_json::to_value(config).ok())
            .collect();
        for (id, patch) in overrides {
            match configs
                .iter_mut()
                .find(|config| config["id"] == id.as_str())
            {
                Some(config) => merge(config, patch),
                None => {
                    let mut config = patch.clone();
                    if let Some(object) = config.as_object_mut() {
                        object.insert("id".to_owned(), serde_json::Value::String(id.clone()));
                    }
                    configs.push(config);
                }
            }
        }
        Self::from_json(&serde_json::Value::Array(configs))
    }

    /// Parses and validates a JSON array of trigger configurations.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, TriggerError> {
        let configs = Vec::<TriggerConfig>::deserialize(value)
            .map_err(|error| TriggerError::Shape(error.to_string()))?;
        Self::new(configs)
    }

    /// The triggers in configuration order (the order simultaneous firings keep).
    pub fn as_slice(&self) -> &[Trigger] {
        &self.0
    }

    /// The trigger with this id.
    pub fn get(&self, id: &str) -> Option<&Trigger> {
        self.0.iter().find(|trigger| trigger.id() == id)
    }
}

impl Default for Triggers {
    fn default() -> Self {
        Self::defaults()
    }
}
