//! The `[plugins.time-context]` table (TC-2), validated once at load.

use ccare_core::json::safe_integer;
use ccare_core::strict;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::zone::Zone;

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeContextConfig {
    /// The zone readings are rendered in: the explicit `time_zone`, or the process zone
    /// resolved at load.
    pub zone: Zone,
    /// 0: a reading on every eligible attempt; else at most one per this many ms.
    pub refresh_interval_ms: u64,
}

impl TimeContextConfig {
    /// Validates the table (as JSON; `{}` when empty). An omitted `time_zone` resolves
    /// the process zone now (`TZ`, else the system zone). Errors are the load errors of
    /// TC-2, without the plugin-name prefix the host adds.
    pub fn from_json(config: &Value) -> Result<Self, String> {
        Self::parse(config, Zone::process)
    }

    /// As [`TimeContextConfig::from_json`], with the value of `TZ` given (`None`: unset),
    /// so the process-zone rule can be tested without touching the environment.
    pub fn from_json_with_tz(config: &Value, tz: Option<&str>) -> Result<Self, String> {
        Self::parse(config, || Zone::from_tz_env(tz))
    }

    fn parse(
        config: &Value,
        process_zone: impl FnOnce() -> Result<Zone, String>,
    ) -> Result<Self, String> {
        let table: Table = strict::from_value(config).map_err(|error| error.to_string())?;
        let zone = match table.time_zone {
            None => process_zone()?,
            Some(name) => Zone::named(&name)?,
        };
        Ok(Self {
            zone,
            refresh_interval_ms: table.refresh_interval_ms.unwrap_or(0),
        })
    }
}

/// The table as written, read by the shared strict reader: unknown keys first, then
/// `refresh_interval_ms`, then `time_zone` (resolved into a [`Zone`] after).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default, deserialize_with = "refresh_interval")]
    refresh_interval_ms: Option<u64>,
    #[serde(default, deserialize_with = "zone_name")]
    time_zone: Option<String>,
}

/// TC-2.3: `a non-negative safe integer`.
fn refresh_interval<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    strict::check(deserializer, "a non-negative safe integer", safe_integer).map(Some)
}

/// A string; whether it names a zone is [`Zone::named`]'s to say.
fn zone_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    strict::check(deserializer, "a valid IANA time zone identifier", |value| {
        value.as_str().map(str::to_owned)
    })
    .map(Some)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use ccare_core::json::MAX_SAFE_INTEGER;
    use serde_json::json;

    use super::*;

    fn error(config: Value) -> String {
        TimeContextConfig::from_json_with_tz(&config, Some("UTC")).unwrap_err()
    }

    #[test]
    fn tc_2_3_interval_errors_name_the_value() {
        assert_eq!(
            error(json!({"refresh_interval_ms": -1})),
            "refresh_interval_ms must be a non-negative safe integer, got -1"
        );
        assert_eq!(
            error(json!({"refresh_interval_ms": 1.5})),
            "refresh_interval_ms must be a non-negative safe integer, got 1.5"
        );
        assert_eq!(
            error(json!({"refresh_interval_ms": "60000"})),
            "refresh_interval_ms must be a non-negative safe integer, got \"60000\""
        );
        assert_eq!(
            error(json!({"refresh_interval_ms": 9_007_199_254_740_992_u64})),
            "refresh_interval_ms must be a non-negative safe integer, got 9007199254740992"
        );
        let max = json!({"refresh_interval_ms": 9_007_199_254_740_991_u64});
        let config = TimeContextConfig::from_json_with_tz(&max, Some("UTC")).unwrap();
        assert_eq!(config.refresh_interval_ms, MAX_SAFE_INTEGER);
        let float = json!({"refresh_interval_ms": 60000.0});
        let config = TimeContextConfig::from_json_with_tz(&float, Some("UTC")).unwrap();
        assert_eq!(config.refresh_interval_ms, 60_000);
    }

    #[test]
    fn tc_2_zone_and_key_errors() {
        assert_eq!(
            error(json!({"time_zone": "Mars/Olympus_Mons"})),
            "time_zone must be a valid IANA time zone identifier, got \"Mars/Olympus_Mons\""
        );
        assert_eq!(
            error(json!({"time_zone": 8})),
            "time_zone must be a valid IANA time zone identifier, got 8"
        );
        assert_eq!(error(json!({"timeZone": "UTC"})), "unknown config timeZone");
        assert_eq!(error(json!([])), "the config must be a table, got []");
    }

    #[test]
    fn tc_2_1_omitted_zone_uses_tz() {
        let config =
            TimeContextConfig::from_json_with_tz(&json!({}), Some("Asia/Kolkata")).unwrap();
        assert_eq!(config.zone.name(), "Asia/Kolkata");
        assert_eq!(config.refresh_interval_ms, 0);
        for tz in [":Asia/Kolkata", "/usr/share/zoneinfo/Asia/Kolkata"] {
            let config = TimeContextConfig::from_json_with_tz(&json!({}), Some(tz)).unwrap();
            assert_eq!(config.zone.name(), "Asia/Kolkata");
        }
        let utc = TimeContextConfig::from_json_with_tz(&json!({}), Some("")).unwrap();
        assert_eq!(utc.zone.name(), "UTC");
        assert_eq!(
            TimeContextConfig::from_json_with_tz(&json!({}), Some("EST5EDT,M3.2.0,M11.1.0"))
                .unwrap_err(),
            "time_zone is omitted and TZ=\"EST5EDT,M3.2.0,M11.1.0\" is not an IANA time zone identifier; set time_zone"
        );
        // An explicit zone wins over TZ.
        let explicit = json!({"time_zone": "Asia/Kathmandu"});
        let config = TimeContextConfig::from_json_with_tz(&explicit, Some("Asia/Kolkata")).unwrap();
        assert_eq!(config.zone.name(), "Asia/Kathmandu");
    }
}
