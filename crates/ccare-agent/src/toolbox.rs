//! The registered tools with their compiled argument schemas (spec H-TOOL-1).

use std::sync::Arc;

use ccare_llm::ToolSpec;
use serde_json::Value;

use crate::tool::Tool;

/// A tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolboxError {
    /// Another tool has the name.
    #[error("a tool named {0:?} is already registered")]
    Duplicate(String),
    /// The argument schema does not compile.
    #[error("the input schema of tool {name:?} is not valid JSON Schema 2020-12: {message}")]
    BadSchema {
        /// The tool.
        name: String,
        /// The compiler's message.
        message: String,
    },
}

/// A compiled argument schema, shared by every call of its tool.
pub(crate) type SharedValidator = Arc<jsonschema::Validator>;

pub(crate) struct Entry {
    pub(crate) owner: String,
    pub(crate) tool: Arc<dyn Tool>,
    validator: Option<SharedValidator>,
}

/// Tools by name, in registration order.
#[derive(Default)]
pub(crate) struct Toolbox {
    entries: Vec<Entry>,
}

impl Toolbox {
    pub(crate) fn insert(&mut self, owner: &str, tool: Arc<dyn Tool>) -> Result<(), ToolboxError> {
        let def = tool.def();
        let name = def.spec.name.clone();
        if self
            .entries
            .iter()
            .any(|entry| entry.tool.def().spec.name == name)
        {
            return Err(ToolboxError::Duplicate(name));
        }
        let validator = if def.validates_own_arguments {
            None
        } else {
            let compiled = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .build(&def.spec.input_schema)
                .map_err(|error| ToolboxError::BadSchema {
                    name: name.clone(),
                    message: error.to_string(),
                })?;
            Some(Arc::new(compiled))
        };
        self.entries.push(Entry {
            owner: owner.to_owned(),
            tool,
            validator,
        });
        Ok(())
    }

    pub(crate) fn remove_owner(&mut self, owner: &str) {
        self.entries.retain(|entry| entry.owner != owner);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|entry| entry.tool.def().spec.name.clone())
            .collect()
    }

    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .map(|entry| entry.tool.def().spec.clone())
            .collect()
    }

    /// The tool and its validator.
    pub(crate) fn get(&self, name: &str) -> Option<(Arc<dyn Tool>, Option<SharedValidator>)> {
        self.entries
            .iter()
            .find(|entry| entry.tool.def().spec.name == name)
            .map(|entry| (Arc::clone(&entry.tool), entry.validator.clone()))
    }
}

/// Checks `arguments` against a compiled schema; the error lists each failing path.
pub(crate) fn check_arguments(
    validator: &jsonschema::Validator,
    arguments: &Value,
) -> Result<(), String> {
    let problems: Vec<String> = validator
        .iter_errors(arguments)
        .take(8)
        .map(|error| {
            let path = error.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            format!("{path}: {error}")
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
