//! `Plugin::mount` and the `PluginScope` registrations fail with typed errors
//! (`MountError`, `ScopeError`) whose text, prefixed with the plugin's name, is what the
//! user reads (H-CFG-3); a failed mount leaves nothing registered.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_agent::testing::TestHost;
use ccare_agent::{
    BoxFuture, Concurrency, HostError, MountError, Plugin, PluginScope, ScopeError, Tool,
    ToolContext, ToolDef, ToolOutcome, ToolboxError,
};
use ccare_core::kinds::EventTypeSpec;
use ccare_llm::ToolSpec;
use ccare_session::RegistryError;
use serde_json::{Value, json};

/// The kernel's test host: nothing mounted, no tools.
fn kit() -> TestHost {
    TestHost::builder("").build().unwrap()
}

struct Named(ToolDef);

impl Named {
    fn new(name: &str) -> Self {
        Self(ToolDef {
            spec: ToolSpec {
                name: name.into(),
                description: "does nothing".into(),
                input_schema: json!({"type": "object"}).into(),
            },
            concurrency: Concurrency::ParallelSafe,
            timeout_ms: None,
            validates_own_arguments: false,
        })
    }
}

impl Tool for Named {
    fn def(&self) -> &ToolDef {
        &self.0
    }
    fn call(&self, _context: ToolContext, _arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Registers a tool `tool`, the event type `typed/note` and, with `{"twice": true}`,
/// that type again; any other key is a config error.
struct Registering {
    name: &'static str,
    tool: &'static str,
}

impl Plugin for Registering {
    fn name(&self) -> &str {
        self.name
    }
    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError> {
        if let Some(key) = config
            .as_object()
            .and_then(|table| table.keys().find(|key| *key != "twice"))
        {
            return Err(MountError::Config(format!("unknown config {key}")));
        }
        scope.tool(Arc::new(Named::new(self.tool)))?;
        scope.event_type(EventTypeSpec::ignorable("typed/note"))?;
        if config.get("twice") == Some(&Value::Bool(true)) {
            scope.event_type(EventTypeSpec::ignorable("typed/note"))?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn h_cfg_3_a_config_error_is_typed_and_prefixed_with_the_plugin() {
    let kit = kit();
    let host = kit.host();
    let plugin = Registering {
        name: "typed",
        tool: "typed_tool",
    };
    let error = host.mount(&plugin, &json!({"colour": "red"})).unwrap_err();
    assert_eq!(error.to_string(), "typed: unknown config colour");
    assert_eq!(
        error,
        HostError::Plugin {
            plugin: "typed".into(),
            error: MountError::Config("unknown config colour".into()),
        }
    );
    assert!(host.mounted().is_empty());
}

#[tokio::test]
async fn a_duplicate_registration_is_a_typed_scope_error_and_undoes_the_mount() {
    let kit = kit();
    let host = kit.host();
    host.mount(
        &Registering {
            name: "first",
            tool: "shared_tool",
        },
        &json!({}),
    )
    .unwrap();
    let second = Registering {
        name: "second",
        tool: "shared_tool",
    };
    let error = host.mount(&second, &json!({})).unwrap_err();
    assert_eq!(
        error.to_string(),
        "second: a tool named \"shared_tool\" is already registered"
    );
    assert_eq!(
        error,
        HostError::Plugin {
            plugin: "second".into(),
            error: MountError::Scope(ScopeError::Tool(ToolboxError::Duplicate(
                "shared_tool".into()
            ))),
        }
    );
    assert_eq!(host.mounted(), ["first"]);

    assert!(host.unmount("first"));
    let twice = Registering {
        name: "twice",
        tool: "own_tool",
    };
    let error = host.mount(&twice, &json!({"twice": true})).unwrap_err();
    assert_eq!(
        error.to_string(),
        "twice: event type 'typed/note' is already registered"
    );
    assert_eq!(
        error,
        HostError::Plugin {
            plugin: "twice".into(),
            error: MountError::Scope(ScopeError::Registry(RegistryError::DuplicateEventType(
                "typed/note".into()
            ))),
        }
    );
    assert!(
        host.tool_names().is_empty(),
        "the failed mount left no tool"
    );
    host.mount(&twice, &json!({})).unwrap();
    assert_eq!(host.tool_names(), ["own_tool"]);
}
