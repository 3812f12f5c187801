//! What the gate derives from a request's tools, kept while they stay the same.
//!
//! Every request of a host offers the same tools (the host's, the care tools, a
//! gateway client's), and the gate needs them three ways: as the JSON the journal
//! records, in canonical form for the calibration header key and the input hash, and
//! priced. The last tools seen and their JSON and canonical form are kept, so a request
//! with the same tools (compared field by field, which costs less than writing them
//! out) reuses them instead of writing them out again.

use std::sync::Arc;

use ccare_llm::ToolSpec;
use parking_lot::Mutex;
use serde_json::Value;

use crate::pricing::canonical_json;

/// A request's tools, written out.
#[derive(Debug)]
pub(crate) struct ToolsForm {
    specs: Vec<ToolSpec>,
    /// The tools as the journal records them (`{name, description, input_schema}`
    /// each), `null` when there are none.
    pub(crate) value: Value,
    /// [`ToolsForm::value`] in canonical form.
    pub(crate) canonical: Vec<u8>,
}

impl ToolsForm {
    fn of(specs: &[ToolSpec]) -> Self {
        let value = if specs.is_empty() {
            Value::Null
        } else {
            // A list of strings and JSON values always serializes.
            serde_json::to_value(specs).unwrap_or(Value::Null)
        };
        let canonical = canonical_json(&value);
        Self {
            specs: specs.to_vec(),
            value,
            canonical,
        }
    }
}

/// The latest tools the gate wrote out; one per mounted plugin.
#[derive(Debug, Default)]
pub(crate) struct ToolsMemo {
    latest: Mutex<Option<Arc<ToolsForm>>>,
}

impl ToolsMemo {
    /// `specs` written out: the kept form when they are the tools it was made of,
    /// otherwise a new one, kept in its place.
    pub(crate) fn form(&self, specs: &[ToolSpec]) -> Arc<ToolsForm> {
        if let Some(form) = self
            .latest
            .lock()
            .as_ref()
            .filter(|form| form.specs == specs)
        {
            return Arc::clone(form);
        }
        let form = Arc::new(ToolsForm::of(specs));
        *self.latest.lock() = Some(Arc::clone(&form));
        form
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: "d".to_owned(),
            input_schema: json!({"type": "object", "properties": {"b": {}, "a": {}}}),
        }
    }

    #[test]
    fn the_form_is_the_tools_written_out_and_is_kept_while_they_stay_the_same() {
        let memo = ToolsMemo::default();
        let tools = vec![spec("one"), spec("two")];
        let form = memo.form(&tools);
        assert_eq!(form.value, serde_json::to_value(&tools).unwrap());
        assert_eq!(form.canonical, canonical_json(&form.value));
        assert!(Arc::ptr_eq(&form, &memo.form(&tools.clone())));
        // Other tools: a new form, which is then the one kept.
        let changed = vec![spec("one")];
        let other = memo.form(&changed);
        assert!(!Arc::ptr_eq(&form, &other));
        assert_eq!(other.value, serde_json::to_value(&changed).unwrap());
        assert!(Arc::ptr_eq(&other, &memo.form(&changed)));
        // No tools: `null`, as the journal records it.
        assert_eq!(memo.form(&[]).value, Value::Null);
        assert_eq!(memo.form(&[]).canonical, b"null");
    }
}
