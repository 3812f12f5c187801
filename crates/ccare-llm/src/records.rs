//! Stream records (spec H-EVT-4): an attempt's chunks stored losslessly and compactly
//! in `assistant/message.stream` / `assistant/attempt.stream`.
//!
//! Runs of text, reasoning and tool-argument deltas to one block become one record
//! with the first chunk's time and the gaps after it:
//! `text-chunks` / `reasoning-chunks {index, t0_ms, dt_ms[], texts[]}` and
//! `tool-call-chunks {index, id, name, t0_ms, dt_ms[], args[]}`. Every other chunk is a
//! `chunk {time_ms, chunk}` record. [`expand`] gives back exactly the chunks and their
//! times, so an answer's stream can be replayed and re-assembled.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chunk::Chunk;

/// One stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamRecord {
    /// Consecutive text deltas to one block.
    TextChunks(DeltaRun),
    /// Consecutive reasoning deltas (without signatures) to one block.
    ReasoningChunks(DeltaRun),
    /// Consecutive argument deltas to one tool-call block.
    ToolCallChunks(ToolRun),
    /// Any other chunk, whole.
    Chunk {
        /// When it arrived (epoch ms).
        time_ms: i64,
        /// The chunk.
        chunk: Chunk,
    },
}

/// A run of text or reasoning deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeltaRun {
    /// The block.
    pub index: u32,
    /// When the first delta arrived.
    pub t0_ms: i64,
    /// For each later delta, the gap after the one before (may be negative: the clock
    /// is never clamped, H-GEN-1).
    pub dt_ms: Vec<i64>,
    /// The delta texts.
    pub texts: Vec<String>,
}

/// A run of tool-call argument deltas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    /// The block.
    pub index: u32,
    /// The call id (from the block start).
    pub id: String,
    /// The tool name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When the first delta arrived.
    pub t0_ms: i64,
    /// Gaps after the first delta.
    pub dt_ms: Vec<i64>,
    /// The argument fragments.
    pub args: Vec<String>,
}

/// Collects an attempt's chunks into records as they stream.
#[derive(Debug, Default)]
pub struct StreamRecorder {
    records: Vec<StreamRecord>,
    last_ms: i64,
    /// Tool-call ids and names by block, from block starts.
    tools: Vec<(u32, String, Option<String>)>,
}

impl StreamRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one chunk that arrived at `time_ms`.
    pub fn push(&mut self, chunk: &Chunk, time_ms: i64) {
        let gap = time_ms.wrapping_sub(self.last_ms);
        match chunk {
            Chunk::TextDelta { index, text } => {
                if let Some(StreamRecord::TextChunks(run)) = self.records.last_mut()
                    && run.index == *index
                {
                    run.dt_ms.push(gap);
                    run.texts.push(text.clone());
                } else {
                    self.records.push(StreamRecord::TextChunks(DeltaRun {
                        index: *index,
                        t0_ms: time_ms,
                        dt_ms: Vec::new(),
                        texts: vec![text.clone()],
                    }));
                }
            }
            Chunk::ReasoningDelta {
                index,
                text,
                signature: None,
            } => {
                if let Some(StreamRecord::ReasoningChunks(run)) = self.records.last_mut()
                    && run.index == *index
                {
                    run.dt_ms.push(gap);
                    run.texts.push(text.clone());
                } else {
                    self.records.push(StreamRecord::ReasoningChunks(DeltaRun {
                        index: *index,
                        t0_ms: time_ms,
                        dt_ms: Vec::new(),
                        texts: vec![text.clone()],
                    }));
                }
            }
            Chunk::ToolCallDelta { index, arguments } => {
                let known = self
                    .tools
                    .iter()
                    .find(|(block, _, _)| block == index)
                    .map(|(_, id, name)| (id.clone(), name.clone()));
                match (self.records.last_mut(), known) {
                    (Some(StreamRecord::ToolCallChunks(run)), _) if run.index == *index => {
                        run.dt_ms.push(gap);
                        run.args.push(arguments.clone());
                    }
                    (_, Some((id, name))) => {
                        self.records.push(StreamRecord::ToolCallChunks(ToolRun {
                            index: *index,
                            id,
                            name,
                            t0_ms: time_ms,
                            dt_ms: Vec::new(),
                            args: vec![arguments.clone()],
                        }));
                    }
                    (_, None) => self.whole(chunk, time_ms),
                }
            }
            Chunk::BlockStart {
                index,
                id: Some(id),
                name,
                ..
            } => {
                self.tools.push((*index, id.clone(), name.clone()));
                self.whole(chunk, time_ms);
            }
            Chunk::ReasoningDelta { .. }
            | Chunk::BlockStart { .. }
            | Chunk::BlockEnd { .. }
            | Chunk::MessageExtra { .. }
            | Chunk::Usage(_)
            | Chunk::Retry(_)
            | Chunk::Finish(_) => self.whole(chunk, time_ms),
        }
        self.last_ms = time_ms;
    }

    fn whole(&mut self, chunk: &Chunk, time_ms: i64) {
        self.records.push(StreamRecord::Chunk {
            time_ms,
            chunk: chunk.clone(),
        });
    }

    /// The records so far.
    pub fn records(&self) -> &[StreamRecord] {
        &self.records
    }

    /// The records as JSON values, for an event's `stream` field.
    pub fn to_json(&self) -> Vec<Value> {
        self.records
            .iter()
            .map(|record| serde_json::to_value(record).unwrap_or(Value::Null))
            .collect()
    }
}

/// A stream record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stream record {position}: {message}")]
pub struct RecordError {
    /// Its position in the list.
    pub position: usize,
    /// What is wrong.
    pub message: String,
}

/// The chunks and arrival times the records stand for, in order.
pub fn expand(records: &[Value]) -> Result<Vec<(i64, Chunk)>, RecordError> {
    let mut chunks = Vec::new();
    for (position, value) in records.iter().enumerate() {
        let record: StreamRecord =
            serde_json::from_value(value.clone()).map_err(|error| RecordError {
                position,
                message: error.to_string(),
            })?;
        let times = |t0: i64, dt: &[i64], count: usize| -> Result<Vec<i64>, RecordError> {
            if dt.len() + 1 != count {
                return Err(RecordError {
                    position,
                    message: format!("{} gaps for {count} deltas", dt.len()),
                });
            }
            let mut at = t0;
            let mut out = vec![t0];
            for gap in dt {
                at = at.wrapping_add(*gap);
                out.push(at);
            }
            Ok(out)
        };
        match record {
            StreamRecord::TextChunks(run) => {
                for (time, text) in times(run.t0_ms, &run.dt_ms, run.texts.len())?
                    .into_iter()
                    .zip(run.texts)
                {
                    chunks.push((
                        time,
                        Chunk::TextDelta {
                            index: run.index,
                            text,
                        },
                    ));
                }
            }
            StreamRecord::ReasoningChunks(run) => {
                for (time, text) in times(run.t0_ms, &run.dt_ms, run.texts.len())?
                    .into_iter()
                    .zip(run.texts)
                {
                    chunks.push((
                        time,
                        Chunk::ReasoningDelta {
                            index: run.index,
                            text,
                            signature: None,
                        },
                    ));
                }
            }
            StreamRecord::ToolCallChunks(run) => {
                for (time, arguments) in times(run.t0_ms, &run.dt_ms, run.args.len())?
                    .into_iter()
                    .zip(run.args)
                {
                    chunks.push((
                        time,
                        Chunk::ToolCallDelta {
                            index: run.index,
                            arguments,
                        },
                    ));
                }
            }
            StreamRecord::Chunk { time_ms, chunk } => chunks.push((time_ms, chunk)),
        }
    }
    Ok(chunks)
}
