//! The language of model-visible texts (`[agent] locale`).

use serde::{Deserialize, Serialize};

/// A language every model-visible text exists in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Locale {
    /// English (the default).
    #[default]
    En,
    /// Simplified Chinese.
    Zh,
}

impl std::str::FromStr for Locale {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "en" => Ok(Locale::En),
            "zh" => Ok(Locale::Zh),
            other => Err(format!("locale must be \"en\" or \"zh\", got \"{other}\"")),
        }
    }
}
