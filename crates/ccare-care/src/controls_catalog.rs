//! The `context-care` control source (spec CC-CTL-1): the rules and actions of this
//! plugin the user can switch per session. The plugin registers it at mount, marking
//! the actions it cannot execute unavailable.

use ccare_agent::controls::{ControlAction, ControlRule, ControlSource};

/// The `context-care` source of spec CC-CTL-1, every action available and on by default.
/// The care plugin marks `maintenance.prune` / `maintenance.summary` unavailable (with
/// [`ControlSource::action_mut`]) when it has no pruner or no summary provider.
pub fn context_care_catalog() -> ControlSource {
    let rule = |id: &str, actions: &[&str]| {
        ControlRule::new(
            id,
            actions.iter().copied().map(ControlAction::new).collect(),
        )
    };
    let mut rules = vec![rule("state", &["report", "advice"])];
    for topic in [
        "meaning",
        "capacity",
        "continuity",
        "handoff",
        "automatic",
        "labels",
        "pressure",
        "hesitation",
    ] {
        rules.push(rule(&format!("guidance-{topic}"), &["notice"]));
    }
    rules.push(rule("maintenance", &["prune", "summary"]));
    rules.push(rule("overflow", &["prune", "summary", "retry"]));
    ControlSource {
        plugin: Some("context-care".to_owned()),
        ..ControlSource::new("context-care", rules)
    }
}
