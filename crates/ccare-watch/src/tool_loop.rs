//! Outcome-aware tool-loop detection (EX-1): the same tool called with the same
//! arguments and getting the same result again and again. Keyed on (tool, argument
//! digest, result digest), it survives compactions: a compaction followed by the same
//! call with the same result still counts as a repeat. After `notice_after` identical
//! pairs in a row the model is reminded; the call that would make `stop_after` is
//! refused before it runs, citing the earlier result, unless that result was compacted
//! away, in which case the call runs and the model gets a pointer instead.

use ccare_core::strict::{self, Problem};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `[plugins.stream-watch] tool_loop = { notice_after, stop_after, exempt_tools }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolLoopConfig {
    /// Identical pairs in a row before a reminder (default 3).
    #[serde(deserialize_with = "count")]
    pub notice_after: u32,
    /// The identical pair that is refused instead of run (default 5).
    #[serde(deserialize_with = "count")]
    pub stop_after: u32,
    /// Tool names never counted; `*` matches any run of characters (EX-3).
    pub exempt_tools: Vec<String>,
}

impl Default for ToolLoopConfig {
    fn default() -> Self {
        Self {
            notice_after: 3,
            stop_after: 5,
            exempt_tools: Vec::new(),
        }
    }
}

/// A JSON integer that fits a `u32`: `a non-negative integer of at most 4294967295`.
fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    strict::check(
        deserializer,
        "a non-negative integer of at most 4294967295",
        |value| value.as_u64().and_then(|count| u32::try_from(count).ok()),
    )
}

impl ToolLoopConfig {
    /// Reads the `tool_loop` table strictly (the shared strict reader) and checks its
    /// limits ([`ToolLoopConfig::validate`]). Errors read like the `completion` table's:
    /// `tool_loop: unknown config x`, `tool_loop.stop_after: expected a non-negative
    /// integer of at most 4294967295, got "5"`.
    pub fn from_json(table: &Value) -> Result<Self, String> {
        let config: Self = strict::from_value(table).map_err(|error| {
            let path = &error.path;
            match error.problem {
                Problem::UnknownKey => format!("tool_loop: unknown config {path}"),
                Problem::Invalid { expected, found } if path.is_empty() => {
                    format!("tool_loop must be {expected}, got {found}")
                }
                Problem::Invalid { expected, found } => {
                    format!("tool_loop.{path}: expected {expected}, got {found}")
                }
                Problem::Missing | Problem::Duplicate | Problem::Other(_) => {
                    format!("tool_loop.{error}")
                }
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the limits: both ≥ 2, the reminder before the stop.
    pub fn validate(&self) -> Result<(), String> {
        if self.notice_after < 2 || self.stop_after < 2 {
            return Err("tool_loop: notice_after and stop_after must be at least 2".to_owned());
        }
        if self.notice_after >= self.stop_after {
            return Err(format!(
                "tool_loop: notice_after ({}) must be below stop_after ({})",
                self.notice_after, self.stop_after
            ));
        }
        Ok(())
    }

    /// Whether `tool` is exempt.
    pub fn is_exempt(&self, tool: &str) -> bool {
        self.exempt_tools.iter().any(|pattern| glob(pattern, tool))
    }
}

/// `*`-only glob match.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    if parts.len() == 1 {
        return pattern == text;
    }
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A digest of a JSON value or text (lowercase hex SHA-256), for fingerprints.
pub fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// What to do with a call about to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// Run it.
    Run,
    /// Refuse it: it would be identical pair number `count`; the first of the run is
    /// at `first_seq`.
    Refuse {
        /// The pair it would be.
        count: u32,
        /// The seq of the first identical result.
        first_seq: u64,
    },
    /// Run it, but the identical result it would repeat (at `first_seq`) was compacted
    /// away: the model gets a pointer, not a block.
    Pointer {
        /// The pair it will be.
        count: u32,
        /// The seq of the first identical result, now shadowed.
        first_seq: u64,
    },
}

/// One agent's tool-loop state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolLoop {
    last: Option<(String, String, String)>,
    run: u32,
    first_seq: u64,
    noticed: bool,
}

impl ToolLoop {
    /// A fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many identical pairs in a row so far.
    pub fn run(&self) -> u32 {
        self.run
    }

    /// Decides on a call of `tool` with `args_digest`; `first_live` says whether the
    /// run's first result is still on the surface.
    pub fn before(
        &self,
        config: &ToolLoopConfig,
        tool: &str,
        args_digest: &str,
        first_live: impl FnOnce(u64) -> bool,
    ) -> Before {
        if config.is_exempt(tool) {
            return Before::Run;
        }
        let Some((last_tool, last_args, _)) = &self.last else {
            return Before::Run;
        };
        if last_tool != tool || last_args != args_digest || self.run + 1 < config.stop_after {
            return Before::Run;
        }
        if first_live(self.first_seq) {
            Before::Refuse {
                count: self.run + 1,
                first_seq: self.first_seq,
            }
        } else {
            Before::Pointer {
                count: self.run + 1,
                first_seq: self.first_seq,
            }
        }
    }

    /// Records a result logged at `seq`; returns the run length when it just reached
    /// `notice_after` (remind once per run).
    pub fn after(
        &mut self,
        config: &ToolLoopConfig,
        tool: &str,
        args_digest: &str,
        result_digest: &str,
        seq: u64,
    ) -> Option<u32> {
        if config.is_exempt(tool) {
            return None;
        }
        let pair = (
            tool.to_owned(),
            args_digest.to_owned(),
            result_digest.to_owned(),
        );
        if self.last.as_ref() == Some(&pair) {
            self.run += 1;
        } else {
            self.last = Some(pair);
            self.run = 1;
            self.first_seq = seq;
            self.noticed = false;
        }
        if self.run >= config.notice_after && !self.noticed {
            self.noticed = true;
            return Some(self.run);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pairs(state: &mut ToolLoop, config: &ToolLoopConfig, n: u64) -> Vec<Option<u32>> {
        (0..n)
            .map(|seq| state.after(config, "read_file", "a", "r", 10 + seq))
            .collect()
    }

    #[test]
    fn ex_1_three_identical_pairs_remind_once_and_the_fifth_call_is_refused() {
        let config = ToolLoopConfig::default();
        let mut state = ToolLoop::new();
        assert_eq!(pairs(&mut state, &config, 4), [None, None, Some(3), None]);
        assert_eq!(
            state.before(&config, "read_file", "a", |_| true),
            Before::Refuse {
                count: 5,
                first_seq: 10
            }
        );
        assert_eq!(
            state.before(&config, "read_file", "b", |_| true),
            Before::Run,
            "other arguments"
        );
        assert_eq!(
            state.before(&config, "write_file", "a", |_| true),
            Before::Run,
            "another tool"
        );
    }

    #[test]
    fn ex_1_a_different_result_starts_a_new_run() {
        let config = ToolLoopConfig::default();
        let mut state = ToolLoop::new();
        pairs(&mut state, &config, 3);
        assert_eq!(state.after(&config, "read_file", "a", "changed", 20), None);
        assert_eq!(state.run(), 1);
        assert_eq!(
            state.before(&config, "read_file", "a", |_| true),
            Before::Run
        );
    }

    #[test]
    fn ex_1_a_compacted_first_result_gets_a_pointer_not_a_block() {
        let config = ToolLoopConfig::default();
        let mut state = ToolLoop::new();
        pairs(&mut state, &config, 4);
        assert_eq!(
            state.before(&config, "read_file", "a", |_| false),
            Before::Pointer {
                count: 5,
                first_seq: 10
            }
        );
    }

    #[test]
    fn ex_3_exempt_tools_are_never_counted() {
        let config = ToolLoopConfig {
            exempt_tools: vec!["read_*".to_owned()],
            ..ToolLoopConfig::default()
        };
        let mut state = ToolLoop::new();
        assert_eq!(pairs(&mut state, &config, 6), [None; 6]);
        assert_eq!(
            state.before(&config, "read_file", "a", |_| true),
            Before::Run
        );
        assert!(glob("*_file", "write_file") && glob("a*b*c", "aXbYc") && !glob("a*b", "ab_c"));
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
    }

    #[test]
    fn ex_1_limits_are_validated() {
        assert!(ToolLoopConfig::default().validate().is_ok());
        let bad = ToolLoopConfig {
            notice_after: 5,
            stop_after: 5,
            exempt_tools: Vec::new(),
        };
        assert!(bad.validate().unwrap_err().contains("below stop_after"));
    }

    #[test]
    fn ex_1_the_table_is_read_strictly() {
        use serde_json::json;
        let read = |table: Value| ToolLoopConfig::from_json(&table);
        assert_eq!(read(json!({})), Ok(ToolLoopConfig::default()));
        assert_eq!(
            read(json!({"stop_after": 9, "exempt_tools": ["read_*"]})),
            Ok(ToolLoopConfig {
                notice_after: 3,
                stop_after: 9,
                exempt_tools: vec!["read_*".to_owned()],
            })
        );
        assert_eq!(
            read(json!({"stopAfter": 9})).unwrap_err(),
            "tool_loop: unknown config stopAfter"
        );
        assert_eq!(
            read(json!({"stop_after": "5"})).unwrap_err(),
            "tool_loop.stop_after: expected a non-negative integer of at most 4294967295, got \"5\""
        );
        assert_eq!(
            read(json!({"notice_after": -1})).unwrap_err(),
            "tool_loop.notice_after: expected a non-negative integer of at most 4294967295, got -1"
        );
        assert_eq!(
            read(json!({"stop_after": 4_294_967_296_u64})).unwrap_err(),
            "tool_loop.stop_after: expected a non-negative integer of at most 4294967295, got 4294967296"
        );
        assert_eq!(
            read(json!({"exempt_tools": ["a", 1]})).unwrap_err(),
            "tool_loop.exempt_tools[1]: expected a string, got 1"
        );
        assert_eq!(
            read(json!([])).unwrap_err(),
            "tool_loop must be a table, got []"
        );
        assert_eq!(
            read(json!({"notice_after": 5})).unwrap_err(),
            "tool_loop: notice_after (5) must be below stop_after (5)"
        );
    }
}
