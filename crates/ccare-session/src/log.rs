//! The in-memory log of one session: events, surface, derived view and state.
//!
//! [`SessionLog`] is pure: it does no I/O and takes no locks. [`SessionLog::prepare`]
//! checks a candidate event against the rules every append obeys (registered type,
//! payload shape, surface op), and [`SessionLog::apply`] commits it. Opening a stored
//! session and importing a file replay the same two steps, so a log that loads is a
//! log that could have been appended.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ccare_core::{Event, EventError, JsonObject, SessionId, SurfaceOp};

use crate::decode::{Decoded, decode, decode_object};
use crate::error::AppendError;
use crate::registry::Registry;
use crate::state::LogState;
use crate::view::{DerivedMessage, DerivedView};

/// A live node of the surface.
#[derive(Debug, Clone)]
pub struct LiveNode {
    /// The event's seq.
    pub seq: u64,
    facts: NodeFacts,
    message: Option<DerivedMessage>,
}

#[derive(Debug, Clone)]
enum NodeFacts {
    Plain,
    ToolCalls(Box<[String]>),
    ToolResult(String),
}

/// A checked candidate: the event plus its decoded payload, ready to apply.
#[derive(Debug)]
pub struct Candidate {
    event: Event,
    decoded: Decoded,
    known: bool,
}

impl Candidate {
    /// The event that would be committed.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Its decoded payload.
    pub fn decoded(&self) -> &Decoded {
        &self.decoded
    }

    /// Whether its type is registered (unknown ignorable events are kept, never derived).
    pub fn is_known(&self) -> bool {
        self.known
    }
}

/// The in-memory log of one session.
#[derive(Debug, Clone)]
pub struct SessionLog {
    id: SessionId,
    events: Vec<Arc<Event>>,
    surface: Vec<LiveNode>,
    view: Vec<DerivedMessage>,
    replace_generation: u64,
    content_generation: u64,
    state: LogState,
    view_cache: Option<DerivedView>,
    /// The nodes each replace node shadowed, by the replace node's seq, so a
    /// `Restore` (CC-EXT-3) can put them back.
    shadowed: HashMap<u64, Vec<LiveNode>>,
}

impl SessionLog {
    /// An empty log.
    pub fn new(id: SessionId) -> Self {
        Self {
            id,
            events: Vec::new(),
            surface: Vec::new(),
            view: Vec::new(),
            replace_generation: 0,
            content_generation: 0,
            state: LogState::default(),
            view_cache: None,
            shadowed: HashMap::new(),
        }
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The number of events (the next seq).
    pub fn head(&self) -> u64 {
        self.events.len() as u64
    }

    /// Every event, shadowed ones included (H-LOG-3).
    pub fn events(&self) -> &[Arc<Event>] {
        &self.events
    }

    /// The event at `seq`.
    pub fn event_at(&self, seq: u64) -> Option<&Arc<Event>> {
        usize::try_from(seq)
            .ok()
            .and_then(|index| self.events.get(index))
    }

    /// The newest event of `kind`, searching backwards.
    pub fn last_of_kind(&self, kind: &str) -> Option<&Arc<Event>> {
        self.events.iter().rev().find(|event| event.kind() == kind)
    }

    /// The live nodes, in surface order.
    pub fn surface(&self) -> &[LiveNode] {
        &self.surface
    }

    /// The live seqs, in surface order.
    pub fn live_seqs(&self) -> Vec<u64> {
        self.surface.iter().map(|node| node.seq).collect()
    }

    /// How many replaces the surface has seen.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// How many content projections have run (what a [`DerivedView`] of the log now
    /// would carry as its `content_generation`), for readers of
    /// [`SessionLog::derived_messages`].
    pub fn content_generation(&self) -> u64 {
        self.content_generation
    }

    /// The open turn/step/call/compaction state.
    pub fn state(&self) -> &LogState {
        &self.state
    }

    /// The derived model view, cached by `(head, replace_generation, content_generation)`.
    pub fn derived_view(&mut self) -> DerivedView {
        let head = self.head();
        if let Some(cached) = &self.view_cache
            && cached.head == head
            && cached.replace_generation == self.replace_generation
            && cached.content_generation == self.content_generation
        {
            return cached.clone();
        }
        let view = DerivedView {
            head,
            replace_generation: self.replace_generation,
            content_generation: self.content_generation,
            messages: self.view.iter().cloned().collect(),
        };
        self.view_cache = Some(view.clone());
        view
    }

    /// The derived messages without building a snapshot.
    pub fn derived_messages(&self) -> &[DerivedMessage] {
        &self.view
    }

    /// Checks `event` (already encoded at `seq = head`) against the type registry, its
    /// payload shape and the surface rules.
    pub fn prepare(&self, event: Event, registry: &Registry) -> Result<Candidate, AppendError> {
        self.prepare_decoded(event, None, registry)
    }

    /// [`SessionLog::prepare`] for an event just encoded from a draft whose `data` was
    /// handed back ([`Event::encode_keeping_data`]): a message is decoded from that
    /// object instead of the text, with the same result and the same errors. `None`
    /// (a typed draft, which held its payload as text) decodes the text.
    pub(crate) fn prepare_encoded(
        &self,
        event: Event,
        data: Option<JsonObject>,
        registry: &Registry,
    ) -> Result<Candidate, AppendError> {
        let decoded = data
            .filter(|_| registry.knows(event.kind()))
            .and_then(|data| decode_object(event.kind(), data))
            .map(Ok);
        self.prepare_decoded(event, decoded, registry)
    }

    /// [`SessionLog::prepare`] with the payload perhaps decoded already (a replay
    /// decodes on another thread; `None` decodes here): the same checks in the same
    /// order, so the same outcome.
    pub(crate) fn prepare_decoded(
        &self,
        event: Event,
        decoded: Option<Result<Decoded, EventError>>,
        registry: &Registry,
    ) -> Result<Candidate, AppendError> {
        let seq = event.seq();
        let Some(spec) = registry.event_type(event.kind()) else {
            if event.is_ignorable() {
                return Ok(Candidate {
                    event,
                    decoded: Decoded::Other,
                    known: false,
                });
            }
            return Err(AppendError::UnregisteredType {
                session: self.id.clone(),
                kind: event.kind().to_owned(),
            });
        };
        let decoded = decoded.unwrap_or_else(|| decode(&event));
        let decoded = decoded.map_err(|error| AppendError::InvalidData {
            session: self.id.clone(),
            kind: event.kind().to_owned(),
            message: error.to_string(),
        })?;
        if let Err(reason) = self.check_surface(&event, &decoded, spec.surface_capable) {
            return Err(AppendError::InvalidSurface {
                session: self.id.clone(),
                seq,
                reason,
            });
        }
        Ok(Candidate {
            event,
            decoded,
            known: true,
        })
    }

    fn check_surface(
        &self,
        event: &Event,
        decoded: &Decoded,
        surface_capable: bool,
    ) -> Result<(), String> {
        let seq = event.seq();
        if let Some(cited) = event
            .source_event_seqs()
            .iter()
            .find(|cited| **cited >= seq)
        {
            return Err(format!(
                "source_event_seqs cites seq {cited}, which is not earlier"
            ));
        }
        let Some(op) = event.surface() else {
            return Ok(());
        };
        if !surface_capable {
            return Err(format!("type '{}' cannot carry a surface op", event.kind()));
        }
        match op {
            SurfaceOp::Append => {
                if let Decoded::ToolResult { call_id, .. } = decoded {
                    let open = self
                        .state
                        .calls
                        .iter()
                        .any(|call| &call.id == call_id && !call.answered);
                    if self.state.open_step.is_none() || !open {
                        return Err(format!(
                            "tool result for '{call_id}' answers no open call of the latest assistant message in its step"
                        ));
                    }
                }
                Ok(())
            }
            SurfaceOp::Replace { start_seq, end_seq } => {
                self.check_replace(event, decoded, start_seq, end_seq)
            }
            SurfaceOp::Restore { replace_seq } => self.check_restore(event, replace_seq),
        }
    }

    /// Whether the live node at `seq` is a replace node that a `Restore` could undo.
    pub fn is_restorable(&self, seq: u64) -> bool {
        self.position(seq).is_some() && self.shadowed.contains_key(&seq)
    }

    /// The seqs of the nodes the replace node `seq` shadowed, in surface order (empty
    /// when `seq` is no replace node).
    pub fn shadowed_by(&self, seq: u64) -> Vec<u64> {
        self.shadowed
            .get(&seq)
            .map(|nodes| nodes.iter().map(|node| node.seq).collect())
            .unwrap_or_default()
    }

    /// The derived messages the surface would hold after restoring each of
    /// `replace_seqs` in order (CC-EXT-3: what an undo would send, priced before it is
    /// appended); `None` when one is not a live replace node by its turn.
    pub fn messages_after_restore(&self, replace_seqs: &[u64]) -> Option<Vec<DerivedMessage>> {
        let mut surface: Vec<&LiveNode> = self.surface.iter().collect();
        for seq in replace_seqs {
            let position = surface.iter().position(|node| node.seq == *seq)?;
            let nodes = self.shadowed.get(seq)?;
            surface.splice(position..=position, nodes.iter());
        }
        Some(
            surface
                .into_iter()
                .filter_map(|node| node.message.clone())
                .collect(),
        )
    }

    /// A `Restore{replace_seq}` undoes a live replace node and cites it.
    fn check_restore(&self, event: &Event, replace_seq: u64) -> Result<(), String> {
        if self.position(replace_seq).is_none() {
            return Err(format!("restore target {replace_seq} is not a live node"));
        }
        if !self.shadowed.contains_key(&replace_seq) {
            return Err(format!(
                "restore target {replace_seq} is not a replace node"
            ));
        }
        if !event.source_event_seqs().contains(&replace_seq) {
            return Err(format!(
                "source_event_seqs does not cite the restored replace seq {replace_seq}"
            ));
        }
        Ok(())
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.surface.iter().position(|node| node.seq == seq)
    }

    fn check_replace(
        &self,
        event: &Event,
        decoded: &Decoded,
        start_seq: u64,
        end_seq: u64,
    ) -> Result<(), String> {
        let start = self
            .position(start_seq)
            .ok_or_else(|| format!("replace start {start_seq} is not a live node"))?;
        let end = self
            .position(end_seq)
            .ok_or_else(|| format!("replace end {end_seq} is not a live node"))?;
        if start > end {
            return Err(format!(
                "replace start {start_seq} comes after end {end_seq} on the surface"
            ));
        }
        let span = &self.surface[start..=end];
        let cited: HashSet<u64> = event.source_event_seqs().iter().copied().collect();
        if let Some(missing) = span.iter().find(|node| !cited.contains(&node.seq)) {
            return Err(format!(
                "source_event_seqs does not cite shadowed seq {}",
                missing.seq
            ));
        }
        if let Decoded::ToolResult { call_id, .. } = decoded {
            // A replacing tool result (pruning) stands for exactly the one result it shadows.
            return match span {
                [
                    LiveNode {
                        facts: NodeFacts::ToolResult(shadowed),
                        ..
                    },
                ] if shadowed == call_id => Ok(()),
                _ => Err(format!(
                    "a replacing tool result must shadow exactly the one result of call '{call_id}'"
                )),
            };
        }
        self.check_batches_whole(start, end)
    }

    /// H-SURF-2: every tool batch (an assistant message with calls plus the live results
    /// answering them) lies wholly inside or wholly outside `start..=end`.
    fn check_batches_whole(&self, start: usize, end: usize) -> Result<(), String> {
        let mut owner_of_call: HashMap<&str, usize> = HashMap::new();
        for (position, node) in self.surface.iter().enumerate() {
            if let NodeFacts::ToolCalls(ids) = &node.facts {
                for id in ids.iter() {
                    owner_of_call.insert(id.as_str(), position);
                }
            }
        }
        let inside = |position: usize| (start..=end).contains(&position);
        for (position, node) in self.surface.iter().enumerate() {
            if let NodeFacts::ToolResult(call_id) = &node.facts
                && let Some(&owner) = owner_of_call.get(call_id.as_str())
                && inside(owner) != inside(position)
            {
                return Err(format!(
                    "replace would split the tool batch of seq {} (result seq {} for call '{call_id}')",
                    self.surface[owner].seq, node.seq
                ));
            }
        }
        Ok(())
    }

    /// Commits a prepared candidate.
    pub fn apply(&mut self, candidate: Candidate) -> Arc<Event> {
        let Candidate {
            event,
            decoded,
            known,
        } = candidate;
        let event = Arc::new(event);
        let seq = event.seq();
        self.events.push(event.clone());
        if !known {
            return event;
        }
        self.state.apply(seq, &decoded);
        if let Some(op) = event.surface() {
            let message = decoded
                .derived_message()
                .map(|(role, message)| DerivedMessage {
                    seq,
                    role,
                    message: message.clone(),
                });
            let facts = node_facts(&decoded);
            let node = LiveNode {
                seq,
                facts,
                message,
            };
            match op {
                SurfaceOp::Append => {
                    if let Some(message) = &node.message {
                        self.view.push(message.clone());
                    }
                    self.surface.push(node);
                }
                SurfaceOp::Replace { start_seq, end_seq } => {
                    // `prepare` proved both ends live and ordered.
                    if let (Some(start), Some(end)) =
                        (self.position(start_seq), self.position(end_seq))
                    {
                        let removed: Vec<LiveNode> =
                            self.surface.splice(start..=end, [node]).collect();
                        self.shadowed.insert(seq, removed);
                    }
                    self.replace_generation += 1;
                    self.view = self
                        .surface
                        .iter()
                        .filter_map(|node| node.message.clone())
                        .collect();
                }
                SurfaceOp::Restore { replace_seq } => {
                    // `prepare` proved the target live and a replace node.
                    if let (Some(position), Some(nodes)) = (
                        self.position(replace_seq),
                        self.shadowed.remove(&replace_seq),
                    ) {
                        self.surface.splice(position..=position, nodes);
                    }
                    self.replace_generation += 1;
                    self.view = self
                        .surface
                        .iter()
                        .filter_map(|node| node.message.clone())
                        .collect();
                }
            }
        }
        event
    }
}

fn node_facts(decoded: &Decoded) -> NodeFacts {
    if let Decoded::AssistantMessage { message, .. } = decoded {
        let ids: Box<[String]> = message.tool_calls().map(|call| call.id.clone()).collect();
        if !ids.is_empty() {
            return NodeFacts::ToolCalls(ids);
        }
    }
    if let Decoded::ToolResult { call_id, .. } = decoded {
        return NodeFacts::ToolResult(call_id.clone());
    }
    NodeFacts::Plain
}
