//! What a freeze reads of a session's journal (CC-PRC-3, CC-PRC-4, the quiet start),
//! each record decoded once per version of it (issue 14 target 2).
//!
//! A session's journal changes at every step (the call's `ready`, `dispatched` and
//! `settled` writes), and each change makes the next boundary freeze again, over up
//! to `journal_keep` records. A record changes only by a new write, which stores a new
//! value: [`JournalEntry`]s share the stored value, so a record whose value is the
//! very one decoded before (the same allocation, kept alive by the cache) is not
//! decoded again. The cache holds only the records of the latest listing, so it
//! never outgrows the session's kept journal.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::{JournalEntry, calibration_record};
use crate::pricing::{CalibrationRecord, JournalRecordKind, RequestOutcome};

/// What a freeze reads of one record.
#[derive(Debug)]
struct Decoded {
    calibration: CalibrationRecord,
    /// A request's unscaled tool tokens (`toolsTokens`).
    tools_tokens: Option<u64>,
}

/// What a freeze reads of a session's journal, from its records in journal order.
#[derive(Debug, Clone)]
pub(crate) struct JournalDigest {
    decoded: Vec<Arc<Decoded>>,
    /// The calibration header key of the latest conversation request (`None` before
    /// the first).
    pub(crate) header_key: Option<String>,
    /// The unscaled tool tokens of that request (0 before the first).
    pub(crate) tools_raw: u64,
    /// Whether anything was ever compacted or refused: a maintenance record, or a
    /// request refused before dispatch (`quiet.rs`).
    pub(crate) eventful: bool,
}

impl JournalDigest {
    /// What calibration reads of each record, in journal order.
    pub(crate) fn records(&self) -> impl ExactSizeIterator<Item = &CalibrationRecord> {
        self.decoded.iter().map(|record| &record.calibration)
    }
}

/// The decoded records of one session's journal, by record key.
#[derive(Debug, Default)]
pub(crate) struct DigestCache {
    records: HashMap<String, (Arc<Value>, Arc<Decoded>)>,
}

impl DigestCache {
    /// The digest of `entries` (a session's journal as [`super::RequestJournal::list`]
    /// gives it), decoding only the records not decoded at their current value.
    pub(crate) fn digest(&mut self, entries: &[JournalEntry]) -> JournalDigest {
        let mut kept = HashMap::with_capacity(entries.len());
        let decoded: Vec<Arc<Decoded>> = entries
            .iter()
            .map(|entry| {
                let decoded = match self.records.remove(&entry.key) {
                    Some((record, decoded)) if Arc::ptr_eq(&record, &entry.record) => decoded,
                    Some(_) | None => Arc::new(Decoded {
                        calibration: calibration_record(entry),
                        tools_tokens: entry.request().tools_tokens,
                    }),
                };
                kept.insert(
                    entry.key.clone(),
                    (Arc::clone(&entry.record), Arc::clone(&decoded)),
                );
                decoded
            })
            .collect();
        self.records = kept;
        digest(decoded)
    }
}

fn digest(decoded: Vec<Arc<Decoded>>) -> JournalDigest {
    let (header_key, tools_raw) = decoded
        .iter()
        .rev()
        .filter(|record| {
            record.calibration.kind == JournalRecordKind::Request
                && record.calibration.purpose.as_deref() == Some("conversation")
        })
        .find_map(|record| {
            let key = record.calibration.header_key.clone()?;
            Some((Some(key), record.tools_tokens.unwrap_or(0)))
        })
        .unwrap_or((None, 0));
    let eventful = decoded.iter().any(|record| {
        record.calibration.kind == JournalRecordKind::Maintenance
            || record.calibration.outcome == Some(RequestOutcome::NotDispatched)
    });
    JournalDigest {
        decoded,
        header_key,
        tools_raw,
        eventful,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pricing::{MeterKind, PricingBasis, calibrate, calibrate_each};

    fn entry(key: &str, kind: JournalRecordKind, data: Value) -> JournalEntry {
        let kind_name = match kind {
            JournalRecordKind::Request => "request",
            JournalRecordKind::Maintenance => "maintenance",
        };
        JournalEntry {
            key: key.to_owned(),
            at: 1,
            kind,
            record: Arc::new(json!({
                "version": 1, "sessionId": "s", "kind": kind_name, "at": 1, "data": data,
            })),
        }
    }

    fn settled(call: &str, seq: u64, header: &str, tools: u64, prompt: u64) -> JournalEntry {
        entry(
            &format!("call_{call}"),
            JournalRecordKind::Request,
            json!({
                "callId": call, "purpose": "conversation", "calibrationHeaderKey": header,
                "toolsTokens": tools, "rawInput": {"textTokens": 1_000, "visualTokens": 0},
                "phase": "settled", "dispatched": true, "outcome": "completed",
                "eventSeq": seq, "eventType": "assistant/message",
                "usage": {"inputTokens": prompt},
            }),
        )
    }

    /// What the digest must agree with: every record decoded afresh.
    fn fresh(entries: &[JournalEntry]) -> (Vec<CalibrationRecord>, Option<String>, u64, bool) {
        let records: Vec<CalibrationRecord> = entries.iter().map(calibration_record).collect();
        let (header, tools) = entries
            .iter()
            .rev()
            .map(JournalEntry::request)
            .filter(|request| request.purpose == Some("conversation"))
            .find_map(|request| {
                Some((
                    Some(request.calibration_header_key?.to_owned()),
                    request.tools_tokens.unwrap_or(0),
                ))
            })
            .unwrap_or((None, 0));
        let eventful = entries.iter().any(|entry| {
            entry.kind == JournalRecordKind::Maintenance
                || calibration_record(entry).outcome == Some(RequestOutcome::NotDispatched)
        });
        (records, header, tools, eventful)
    }

    fn agree(cache: &mut DigestCache, entries: &[JournalEntry]) -> JournalDigest {
        let digest = cache.digest(entries);
        let (records, header, tools, eventful) = fresh(entries);
        assert_eq!(digest.records().cloned().collect::<Vec<_>>(), records);
        assert_eq!(digest.header_key, header);
        assert_eq!(digest.tools_raw, tools);
        assert_eq!(digest.eventful, eventful);
        if let Some(header) = &header {
            let basis: PricingBasis =
                calibrate_each(digest.records(), header, MeterKind::Heuristic);
            assert_eq!(basis, calibrate(&records, header, MeterKind::Heuristic));
        }
        digest
    }

    #[test]
    fn cc_prc_3_a_digest_agrees_with_a_fresh_decode_as_records_are_patched_added_and_trimmed() {
        let mut cache = DigestCache::default();
        let mut entries = vec![
            settled("c1", 3, "h1", 40, 1_100),
            settled("c2", 7, "h1", 40, 1_200),
        ];
        agree(&mut cache, &entries);
        // A new request at `ready`, then patched (a new stored value at the same key).
        entries.push(entry(
            "call_c3",
            JournalRecordKind::Request,
            json!({"callId": "c3", "purpose": "conversation", "calibrationHeaderKey": "h2",
                   "toolsTokens": 90, "phase": "ready"}),
        ));
        let digest = agree(&mut cache, &entries);
        assert_eq!(
            (digest.header_key.as_deref(), digest.tools_raw),
            (Some("h2"), 90)
        );
        entries[2] = settled("c3", 11, "h2", 90, 1_300);
        agree(&mut cache, &entries);
        // A refusal, then a maintenance record: eventful.
        entries.push(entry(
            "call_c4",
            JournalRecordKind::Request,
            json!({"callId": "c4", "purpose": "conversation", "phase": "failed",
                   "outcome": "not-dispatched"}),
        ));
        assert!(agree(&mut cache, &entries).eventful);
        entries.remove(3);
        assert!(!agree(&mut cache, &entries).eventful);
        entries.push(entry(
            "action_a1",
            JournalRecordKind::Maintenance,
            json!({"operationId": "a1", "action": "prune"}),
        ));
        assert!(agree(&mut cache, &entries).eventful);
        // The oldest trimmed: the cache keeps only what was listed.
        entries.remove(0);
        agree(&mut cache, &entries);
        assert_eq!(cache.records.len(), entries.len());
        assert!(agree(&mut cache, &[]).records().next().is_none());
        assert!(cache.records.is_empty());
    }
}
