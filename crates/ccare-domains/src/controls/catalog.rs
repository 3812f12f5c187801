//! The catalog of control sources (spec RC-1): what a plugin lets the user switch
//! ([`ControlSource`], [`ControlRule`], [`ControlAction`]) and its validation into a
//! `CompiledSource`, whose actions know their transitive requirements.

use std::sync::Arc;

use super::error::ControlsError;

/// The longest source, rule or action id, in UTF-16 code units (spec RC-1, GEN-1).
pub const MAX_CONTROL_ID_LEN: usize = 256;

/// A group of rules one plugin (or a legacy interface) lets the user switch (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSource {
    /// Unique among registered sources, 1..=256 characters.
    pub source_id: String,
    /// The plugin that declared it; `None` shows as "undeclared (legacy interface)".
    pub plugin: Option<String>,
    /// Shown but not switchable: patches to it fail with `rule-unavailable`.
    pub read_only: bool,
    /// The rules, in display order.
    pub rules: Vec<ControlRule>,
}

impl ControlSource {
    /// A switchable source without a plugin.
    pub fn new(source_id: impl Into<String>, rules: Vec<ControlRule>) -> Self {
        Self {
            source_id: source_id.into(),
            plugin: None,
            read_only: false,
            rules,
        }
    }

    /// The action `rule_id.action_id`, to adjust before registering (for example, to
    /// mark an action unavailable when its executor is missing).
    pub fn action_mut(&mut self, rule_id: &str, action_id: &str) -> Option<&mut ControlAction> {
        self.rules
            .iter_mut()
            .find(|rule| rule.id == rule_id)?
            .actions
            .iter_mut()
            .find(|action| action.id == action_id)
    }
}

/// One rule of a source: a thing that watches the session and may act (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRule {
    /// Unique within its source, 1..=256 characters.
    pub id: String,
    /// What the rule may do; at least one.
    pub actions: Vec<ControlAction>,
}

impl ControlRule {
    /// A rule with its actions.
    pub fn new(id: impl Into<String>, actions: Vec<ControlAction>) -> Self {
        Self {
            id: id.into(),
            actions,
        }
    }
}

/// One switchable action of a rule (spec RC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlAction {
    /// Unique within its rule, 1..=256 characters.
    pub id: String,
    /// Whether the action is selected when the user has not chosen.
    pub default_enabled: bool,
    /// Whether something can execute it now; when false it decides to `reason`, or
    /// `executor-unavailable`.
    pub available: bool,
    /// Why it is unavailable (a stable kebab-case code).
    pub reason: Option<String>,
    /// Ids of actions of the same rule that must be on for this one to run;
    /// transitively, and without cycles.
    pub requires: Vec<String>,
}

impl ControlAction {
    /// An action that defaults on, is available, and requires nothing.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            default_enabled: true,
            available: true,
            reason: None,
            requires: Vec::new(),
        }
    }
}

/// A validated source with each action's transitive requirements resolved.
pub(super) struct CompiledSource {
    pub(super) source: ControlSource,
    pub(super) rules: Vec<CompiledRule>,
}

pub(super) struct CompiledRule {
    pub(super) id: String,
    pub(super) actions: Vec<CompiledAction>,
}

pub(super) struct CompiledAction {
    pub(super) id: String,
    pub(super) default_enabled: bool,
    pub(super) available: bool,
    pub(super) reason: Option<Arc<str>>,
    pub(super) requires: Vec<String>,
    /// Indices of every action it requires, transitively.
    pub(super) required: Vec<usize>,
}

fn check_id(what: &'static str, id: &str) -> Result<(), ControlsError> {
    let length = id.encode_utf16().count();
    if length == 0 || length > MAX_CONTROL_ID_LEN {
        return Err(ControlsError::InvalidId {
            what,
            id: id.to_owned(),
        });
    }
    Ok(())
}

/// Validates a source (spec RC-1) and resolves its requirements.
pub(super) fn compile(source: ControlSource) -> Result<CompiledSource, ControlsError> {
    let source_id = source.source_id.as_str();
    check_id("source", source_id)?;
    let mut rules = Vec::with_capacity(source.rules.len());
    for (rule_index, rule) in source.rules.iter().enumerate() {
        check_id("rule", &rule.id)?;
        if source.rules[..rule_index]
            .iter()
            .any(|earlier| earlier.id == rule.id)
        {
            return Err(ControlsError::DuplicateRule {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
            });
        }
        if rule.actions.is_empty() {
            return Err(ControlsError::MissingActions {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
            });
        }
        let mut edges: Vec<Vec<usize>> = Vec::with_capacity(rule.actions.len());
        for (action_index, action) in rule.actions.iter().enumerate() {
            check_id("action", &action.id)?;
            if rule.actions[..action_index]
                .iter()
                .any(|earlier| earlier.id == action.id)
            {
                return Err(ControlsError::DuplicateAction {
                    source_id: source_id.to_owned(),
                    rule_id: rule.id.clone(),
                    action_id: action.id.clone(),
                });
            }
        }
        for action in &rule.actions {
            let mut targets = Vec::with_capacity(action.requires.len());
            for required in &action.requires {
                check_id("requires", required)?;
                let Some(target) = rule
                    .actions
                    .iter()
                    .position(|candidate| &candidate.id == required)
                else {
                    return Err(ControlsError::UnknownRequires {
                        source_id: source_id.to_owned(),
                        rule_id: rule.id.clone(),
                        action_id: action.id.clone(),
                        required: required.clone(),
                    });
                };
                targets.push(target);
            }
            edges.push(targets);
        }
        if let Some(cycle) = find_cycle(&edges) {
            return Err(ControlsError::CyclicRequires {
                source_id: source_id.to_owned(),
                rule_id: rule.id.clone(),
                cycle: cycle
                    .into_iter()
                    .map(|index| rule.actions[index].id.clone())
                    .collect(),
            });
        }
        let actions = rule
            .actions
            .iter()
            .enumerate()
            .map(|(index, action)| CompiledAction {
                id: action.id.clone(),
                default_enabled: action.default_enabled,
                available: action.available,
                reason: action.reason.as_deref().map(Arc::from),
                requires: action.requires.clone(),
                required: reachable(&edges, index),
            })
            .collect();
        rules.push(CompiledRule {
            id: rule.id.clone(),
            actions,
        });
    }
    Ok(CompiledSource { source, rules })
}

/// A cycle in the requires graph, as node indices with the first repeated at the end.
fn find_cycle(edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(node: usize, edges: &[Vec<usize>], marks: &mut [Mark], path: &mut Vec<usize>) -> bool {
        marks[node] = Mark::OnPath;
        path.push(node);
        for &next in &edges[node] {
            match marks[next] {
                Mark::OnPath => {
                    let start = path
                        .iter()
                        .position(|&on_path| on_path == next)
                        .unwrap_or(0);
                    path.drain(..start);
                    path.push(next);
                    return true;
                }
                Mark::New => {
                    if visit(next, edges, marks, path) {
                        return true;
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[node] = Mark::Done;
        false
    }
    let mut marks = vec![Mark::New; edges.len()];
    let mut path = Vec::new();
    for node in 0..edges.len() {
        if marks[node] == Mark::New && visit(node, edges, &mut marks, &mut path) {
            return Some(path);
        }
    }
    None
}

/// Every node reachable from `start` (not `start` itself; the graph is acyclic).
fn reachable(edges: &[Vec<usize>], start: usize) -> Vec<usize> {
    let mut seen = vec![false; edges.len()];
    let mut stack = edges[start].clone();
    let mut found = Vec::new();
    while let Some(node) = stack.pop() {
        if !seen[node] {
            seen[node] = true;
            found.push(node);
            stack.extend(edges[node].iter().copied());
        }
    }
    found.sort_unstable();
    found
}
