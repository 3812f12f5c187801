//! `compaction/summary` and `compaction/prune`: what a compaction wrote just before the
//! replace node that made it live (H-EVT-2, context-care CC-SUM-5, CC-MNT-1).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::event::EventData;
use crate::json::JsonObject;
use crate::message::Message;
use crate::usage::TokenUsage;

use super::request::RequestDelta;
use super::{COMPACTION_PRUNE, COMPACTION_SUMMARY};

/// `compaction/summary`: the summary a compaction transaction committed, what it
/// shadows and, for a summary written by a model call, that call. Written in this
/// field order; the fields after `model` that a producer does not know (a deep-rest
/// handoff makes no call) are left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionSummary {
    /// The transaction (its `compaction/start` and `compaction/end`).
    pub compaction_id: String,
    /// The summary text the checkpoint carries.
    pub summary: String,
    /// The summary call's assembled answer, as the provider gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Message>,
    /// The summary call's usage: `None` when no call was made, `Some(None)` (logged as
    /// `null`) when the provider reported none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub usage: Option<Option<TokenUsage>>,
    /// The provider (config name) of the summary route; empty when there was none.
    pub provider: String,
    /// The model of the summary route; empty when there was none.
    pub model: String,
    /// The summary call's output limit: `None` when no call was made, `Some(None)`
    /// (logged as `null`) when the call set none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub max_tokens: Option<Option<u32>>,
    /// Set when the summary came from a streamed model call.
    #[serde(default, skip_serializing_if = "is_false")]
    pub llm_stream_call: bool,
    /// The summary call (the last one, for a chunked summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The first and last live seq the checkpoint replaces.
    pub shadowed_range: [u64; 2],
    /// Every live seq it replaces.
    pub shadowed_seqs: Vec<u64>,
    /// The meter's (unscaled) tokens of what it replaces.
    pub shadowed_tokens: u64,
    /// What the summary stands for, as its producer describes it (context-care's
    /// `chunks`, `dropped`, `leafSeqs`, ...; CC-SUM-5). Shown, never read by key here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<JsonObject>,
    /// The repair attempts its producer made on the way (context-care CC-SUM-4),
    /// in the producer's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repairs: Option<Vec<Value>>,
    /// The request-only messages the summary call carried (a summary call writes no
    /// `request/header`), in the shape of a series delta (MP-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_delta: Option<RequestDelta>,
}

impl EventData for CompactionSummary {
    const KIND: &'static str = COMPACTION_SUMMARY;
}

/// `compaction/prune{pruned[]}`: written just before the replace node of a pruned tool
/// result (CC-MNT-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionPrune {
    /// The results pruned, each with its price before and after.
    pub pruned: Vec<PrunedResult>,
}

impl EventData for CompactionPrune {
    const KIND: &'static str = COMPACTION_PRUNE;
}

/// One pruned tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedResult {
    /// The seq of the `tool/result` it replaces.
    pub seq: u64,
    /// Its text tokens before pruning.
    pub before_tokens: u64,
    /// Its text tokens after.
    pub after_tokens: u64,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Reads a field that is present (even as `null`) as `Some`, so an absent field and a
/// `null` one each write back as they were read.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventDraft};
    use crate::kinds::tests::round_trip;

    // Events today's context care wrote with the scripted provider: a requested
    // summary, and a pruned tool result.

    const CALLED: &str = r###"{"seq":17,"time_ms":1796152569594,"type":"compaction/summary","data":{"compaction_id":"01a23309-2eee-707a-99e4-6a7e9539f555","summary":"## Primary Request and Intent\n- read the lorem text\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- resting\n## Next Step\n- continue\n## Critical Context\n(none)","raw_output":{"content":[{"type":"text","text":"## Primary Request and Intent\n- read the lorem text\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n- resting\n## Next Step\n- continue\n## Critical Context\n(none)"}]},"usage":{"input":3037,"cache_read":0,"cache_write":0,"output":59,"reasoning":0},"provider":"s","model":"small","max_tokens":1000,"llm_stream_call":true,"call_id":"01a23309-2eef-71fc-aaf0-9a599c7feb5b","shadowed_range":[1,10],"shadowed_seqs":[1,3,6,10],"shadowed_tokens":2737,"coverage":{"chunks":[[1,10]],"dropped":[],"leafSeqs":[1,3,6,10],"parentCheckpointSeqs":[],"depth":0}}}"###;

    const PRUNE: &str = r#"{"seq":18,"time_ms":1796152569784,"type":"compaction/prune","data":{"pruned":[{"seq":7,"before_tokens":13247,"after_tokens":1551}]}}"#;

    /// A summary call whose provider reported no usage: `null`, kept as `null`.
    const NO_USAGE: &str = r#"{"seq":9,"time_ms":1796152569594,"type":"compaction/summary","data":{"compaction_id":"c-2","summary":"s","raw_output":{"content":[{"type":"text","text":"s"}]},"usage":null,"provider":"s","model":"small","max_tokens":null,"llm_stream_call":true,"call_id":"call-4","shadowed_range":[1,3],"shadowed_seqs":[1,3],"shadowed_tokens":20,"coverage":{"chunks":[[1,3]],"dropped":[],"leafSeqs":[1,3],"parentCheckpointSeqs":[],"depth":0},"repairs":[{"hook":"fix","code":"SUMMARY_NOT_SMALLER","accepted":true}],"request_delta":{"append_request_only":[{"plugin":"stream-watch","messages":[{"content":[{"type":"text","text":"be brief"}]}]}]}}}"#;

    /// A deep rest's handoff as today's code wrote it (no call; the route after the
    /// shadowed fields), with a short note.
    const DEEP_REST: &str = r#"{"seq":17,"time_ms":1796152569569,"type":"compaction/summary","data":{"compaction_id":"01a23309-2ede-764e-af40-2f1000b345fe","summary":"Handoff note (written by you):\nnnnn\n\nRecovery path for cleared history (written by you):\nsearch the log for 'lorem'. nnnn","shadowed_range":[1,14],"shadowed_seqs":[1,3,6,10,12,14],"shadowed_tokens":6127,"provider":"s","model":"small"}}"#;

    #[test]
    fn compaction_summary_round_trips_todays_bytes() {
        let called: CompactionSummary = round_trip(CALLED);
        assert_eq!(called.usage.flatten().map(|usage| usage.output), Some(59));
        assert_eq!(called.max_tokens, Some(Some(1000)));
        assert!(called.llm_stream_call);
        let no_usage: CompactionSummary = round_trip(NO_USAGE);
        assert_eq!(
            (no_usage.usage, no_usage.max_tokens),
            (Some(None), Some(None))
        );
        assert_eq!(no_usage.repairs.map(|repairs| repairs.len()), Some(1));
    }

    /// Today's deep-rest bytes decode with every field; written again they keep every
    /// key and value, the route now in the one order every summary is written in.
    #[test]
    fn a_deep_rest_summary_of_today_decodes_and_keeps_its_fields() {
        let event = Event::parse(DEEP_REST);
        let decoded = event
            .as_ref()
            .ok()
            .map(|event| event.decode::<CompactionSummary>());
        let Some(Ok(summary)) = decoded else {
            panic!("{decoded:?}");
        };
        assert_eq!(
            (
                summary.usage,
                summary.max_tokens,
                summary.llm_stream_call,
                &summary.call_id
            ),
            (None, None, false, &None)
        );
        assert_eq!(summary.shadowed_seqs, [1, 3, 6, 10, 12, 14]);
        let written = EventDraft::typed(&summary).map(|draft| Value::Object(draft.into_data()));
        let stored = event
            .ok()
            .and_then(|event| event.data().ok())
            .map(Value::Object);
        assert_eq!(written.ok(), stored, "the same object");
    }

    #[test]
    fn compaction_prune_round_trips_todays_bytes() {
        let prune: CompactionPrune = round_trip(PRUNE);
        assert_eq!(
            prune.pruned,
            [PrunedResult {
                seq: 7,
                before_tokens: 13_247,
                after_tokens: 1_551
            }]
        );
    }
}
