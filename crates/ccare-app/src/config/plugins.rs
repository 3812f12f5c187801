//! Which plugins a profile mounts, with which tables (H-CFG-3, ACT-6).
//!
//! - A profile's `[profiles.<id>.plugins.<name>]` table is merged over the top-level
//!   `[plugins.<name>]` one: its keys win, nested tables merge key by key, arrays and
//!   other values are replaced whole.
//! - `enabled` is the host's key, not the plugin's: it must be a boolean, and it is
//!   stripped before the plugin's strict config sees the table.
//! - Context care and stream watch are on by default: with no table they mount with
//!   their defaults, and `enabled = false` turns them off. Time-context and its
//!   invariant stay opt-in: a table mounts them (unless `enabled = false`).
//! - Time-context without a `time_zone` of its own renders in `[host] time_zone`.

use std::collections::BTreeMap;

use crate::config::settings::PluginMount;

/// A plugin this build can mount.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KnownPlugin {
    /// Its `[plugins.<name>]` table name.
    pub(crate) name: &'static str,
    /// Mounted when no table names it (ACT-6).
    pub(crate) default_on: bool,
}

/// The plugins of this build, in mount order.
pub(crate) const KNOWN_PLUGINS: [KnownPlugin; 4] = [
    KnownPlugin {
        name: "context-care",
        default_on: true,
    },
    KnownPlugin {
        name: "stream-watch",
        default_on: true,
    },
    KnownPlugin {
        name: "time-context",
        default_on: false,
    },
    KnownPlugin {
        name: "time-context-invariant",
        default_on: false,
    },
];

/// The host key every plugin table may carry.
const ENABLED: &str = "enabled";

/// The plugins a profile mounts. `top` are the `[plugins.*]` tables; `profile` the
/// profile's id and its `plugins` tables (`None` for the default profile). Errors name
/// the key path.
pub(crate) fn resolve(
    top: &BTreeMap<String, toml::Table>,
    profile: Option<(&str, &BTreeMap<String, toml::Table>)>,
    host_zone: Option<&str>,
) -> Result<Vec<PluginMount>, String> {
    let prefix = |name: &str, in_profile: bool| match profile {
        Some((id, _)) if in_profile => format!("profiles.{id}.plugins.{name}"),
        _ => format!("plugins.{name}"),
    };
    let names: Vec<String> = KNOWN_PLUGINS
        .iter()
        .map(|plugin| plugin.name.to_owned())
        .collect();
    let unknown = |key: String| {
        format!(
            "{key}: no such plugin in this build (known: {})",
            names.join(", ")
        )
    };
    if let Some(name) = top.keys().find(|name| !names.contains(name)) {
        return Err(unknown(prefix(name, false)));
    }
    let empty = BTreeMap::new();
    let overrides = profile.map_or(&empty, |(_, tables)| tables);
    if let Some(name) = overrides.keys().find(|name| !names.contains(name)) {
        return Err(unknown(prefix(name, true)));
    }
    let mut mounts = Vec::new();
    for known in KNOWN_PLUGINS {
        let base = top.get(known.name);
        let over = overrides.get(known.name);
        let key = match (over, base) {
            (Some(_), _) => prefix(known.name, true),
            (None, Some(_)) => prefix(known.name, false),
            (None, None) => {
                if known.default_on {
                    mounts.push(PluginMount {
                        name: known.name.to_owned(),
                        config: serde_json::Value::Object(serde_json::Map::new()),
                        key: "default".to_owned(),
                    });
                }
                continue;
            }
        };
        let mut table = base.cloned().unwrap_or_default();
        if let Some(over) = over {
            merge(&mut table, over);
        }
        let enabled = match table.remove(ENABLED) {
            None => true,
            Some(toml::Value::Boolean(enabled)) => enabled,
            Some(other) => {
                return Err(format!(
                    "{key}.{ENABLED}: expected a boolean, found {}",
                    shown(&other)
                ));
            }
        };
        if !enabled {
            continue;
        }
        if known.name == "time-context"
            && let Some(zone) = host_zone
        {
            table
                .entry("time_zone")
                .or_insert_with(|| toml::Value::String(zone.to_owned()));
        }
        let config = serde_json::to_value(&table).map_err(|error| format!("{key}: {error}"))?;
        mounts.push(PluginMount {
            name: known.name.to_owned(),
            config,
            key,
        });
    }
    Ok(mounts)
}

/// Merges `over` into `base`: tables key by key, everything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => merge(inner, over),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A TOML value as the user wrote it (`"no"`, `1`, `[1, 2]`).
pub(crate) fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::Table(table) => {
            format!("{{{}}}", table.to_string().trim().replace('\n', ", "))
        }
        other => other.to_string(),
    }
}
