//! The agent's own instructions (issue 19 item 4): the base prompt, the configured
//! instructions and the workspace's `AGENTS.md` reach the request first, in that order,
//! byte for byte, and stay byte-identical across requests; bad files are typed errors
//! naming the path. A real host over SQLite and the scripted provider; the requests the
//! provider received and the logged `request/header` read back.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use ccare_agent::instructions::{self, InstructionsOrigin};
use ccare_agent::testing::{TestHost, events_of};
use ccare_agent::{
    Agent, BoxFuture, Concurrency, Host, InstructionsConfig, InstructionsError, Plugin,
    PluginScope, SystemSection, Tool, ToolContext, ToolDef, ToolOutcome,
};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{ContentBlock, Locale};
use ccare_llm::ToolSpec;
use ccare_llm::script::ScriptProvider;
use ccare_session::{Registry, Session};
use serde_json::{Value, json};

struct Kit {
    test: TestHost,
    host: Arc<Host>,
    script: ScriptProvider,
    session: Session,
}

impl Kit {
    fn workspace(&self) -> std::path::PathBuf {
        self.test.dir().unwrap().join("ws")
    }

    fn config(&self) -> InstructionsConfig {
        InstructionsConfig::new(self.workspace())
    }
}

/// A host with the tools `read_notes` and `echo` (in that order) and the plugin
/// `rules` (a section at order 0) mounted.
async fn kit(script: &str) -> Kit {
    let test = TestHost::builder(script).build().unwrap();
    std::fs::create_dir(test.dir().unwrap().join("ws")).unwrap();
    let host = Arc::clone(test.host());
    host.add_tool(Arc::new(Named::new("read_notes"))).unwrap();
    host.mount(&Rules, &json!({})).unwrap();
    let session = test.session().await.unwrap();
    Kit {
        script: test.script().clone(),
        test,
        host,
        session,
    }
}

/// A plugin with one tool (`echo`) and one system section (`rules`, order 0).
struct Rules;

impl Plugin for Rules {
    fn name(&self) -> &str {
        "rules"
    }

    fn mount(
        &self,
        _config: &Value,
        scope: &mut PluginScope<'_>,
    ) -> Result<(), ccare_agent::MountError> {
        scope.tool(Arc::new(Named::new("echo")))?;
        scope.system_section(SystemSection {
            name: "rules".into(),
            order: 0,
            text: "Be kind.".into(),
        });
        Ok(())
    }
}

/// A tool that answers `ok`.
struct Named {
    def: ToolDef,
}

impl Named {
    fn new(name: &str) -> Self {
        Self {
            def: ToolDef {
                spec: ToolSpec {
                    name: name.into(),
                    description: "answers ok".into(),
                    input_schema: json!({"type": "object"}).into(),
                },
                concurrency: Concurrency::ParallelSafe,
                timeout_ms: None,
                validates_own_arguments: false,
            },
        }
    }
}

impl Tool for Named {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, _arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(async { Ok(vec![ContentBlock::text("ok")]) })
    }
}

fn agent(kit: &Kit) -> Agent {
    kit.test.agent(&kit.session, "s/scripted")
}

fn headers(session: &Session) -> Vec<Value> {
    events_of(session, "request/header")
}

const BASE_EN: &str = "You are an agent working with the user in this session. Answer the user's \
                       latest request; use your tools when they help, and say plainly what you \
                       did.\nYour tools: read_notes, echo.";

/// Two turns; the system prompt of each request the provider received.
async fn two_turns(kit: &Kit) -> Vec<Option<String>> {
    let agent = agent(kit);
    agent.prompt("first");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    agent.prompt("second");
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
    kit.script
        .requests()
        .into_iter()
        .map(|request| request.config.system.clone())
        .collect()
}

#[tokio::test]
async fn base_file_and_agents_md_reach_the_request_first_in_order_byte_exact_and_stable() {
    let kit = kit("{\"text\": \"one\"}\n{\"text\": \"two\"}").await;
    // Bytes kept as they are: CRLF, a trailing newline, CJK, leading spaces.
    let file_text = "  Prefer small diffs.\r\nRun the tests.\n";
    let agents_text = "# 项目约定\n\nUse `cargo nextest`.\n\n";
    std::fs::write(kit.workspace().join("team.md"), file_text).unwrap();
    std::fs::write(kit.workspace().join("AGENTS.md"), agents_text).unwrap();
    let config = InstructionsConfig {
        instructions_file: Some("team.md".into()),
        ..kit.config()
    };
    let installed = instructions::install(&kit.host, &config, Locale::En).unwrap();
    let names: Vec<&str> = installed
        .sections
        .iter()
        .map(|installed| installed.section.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "instructions:base",
            "instructions:file",
            "instructions:agents-md"
        ]
    );
    assert_eq!(
        installed.section("instructions:file").unwrap().origin,
        InstructionsOrigin::File(kit.workspace().join("team.md"))
    );
    assert_eq!(
        installed.section("instructions:agents-md").unwrap().origin,
        InstructionsOrigin::File(kit.workspace().join("AGENTS.md"))
    );

    let expected = format!("{BASE_EN}\n\n{file_text}\n\n{agents_text}\n\nBe kind.");
    let systems = two_turns(&kit).await;
    assert_eq!(systems, [Some(expected.clone()), Some(expected.clone())]);
    // One header: the second request's envelope is byte-identical, so none is logged.
    let headers = headers(&kit.session);
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0]["reason"], "initial");
    assert_eq!(headers[0]["header"]["system"], expected);
}

#[tokio::test]
async fn inline_instructions_and_the_chinese_base_prompt() {
    let kit = kit("{\"text\": \"one\"}\n{\"text\": \"two\"}").await;
    let config = InstructionsConfig {
        instructions: Some("回答要简短。".into()),
        ..kit.config()
    };
    let installed = instructions::install(&kit.host, &config, Locale::Zh).unwrap();
    assert_eq!(
        installed.section("instructions:file").unwrap().origin,
        InstructionsOrigin::Inline
    );
    assert!(installed.section("instructions:agents-md").is_none());
    let expected = "你是在本会话中与用户一起工作的智能体。回答用户最新的请求；需要时使用你的工具，并如实说明你做了什么。\n\
                    你的工具：read_notes、echo。\n\n回答要简短。\n\nBe kind.";
    assert_eq!(
        two_turns(&kit).await,
        [Some(expected.to_owned()), Some(expected.to_owned())]
    );
}

#[tokio::test]
async fn without_tools_or_files_only_the_base_prompt_is_installed() {
    let kit = kit("{\"text\": \"one\"}").await;
    let bare = Host::new(
        Arc::clone(kit.host.llm()),
        Arc::clone(kit.host.sessions()),
        Arc::new(Registry::with_host_defaults()),
    );
    let installed = instructions::install(&bare, &kit.config(), Locale::En).unwrap();
    assert_eq!(installed.sections.len(), 1);
    assert_eq!(
        bare.system_prompt().as_deref(),
        Some(
            "You are an agent working with the user in this session. Answer the user's latest \
             request; use your tools when they help, and say plainly what you did.\n\
             You have no tools in this session."
        )
    );
}

#[tokio::test]
async fn a_host_without_tools_does_not_say_so_when_the_caller_declared_some() {
    // ACT-3: a turn whose only tools are the caller's gets no tool line, in either
    // language, rather than "no tools"; without caller tools the line stays.
    let kit = kit("{\"text\": \"one\"}").await;
    let bare = Host::new(
        Arc::clone(kit.host.llm()),
        Arc::clone(kit.host.sessions()),
        Arc::new(Registry::with_host_defaults()),
    );
    let none = std::collections::BTreeSet::new();
    instructions::install(&bare, &kit.config(), Locale::En).unwrap();
    assert_eq!(
        bare.system_prompt_hiding(&none, true).as_deref(),
        Some(
            "You are an agent working with the user in this session. Answer the user's latest \
             request; use your tools when they help, and say plainly what you did."
        )
    );
    assert_eq!(
        bare.system_prompt_hiding(&none, false),
        bare.system_prompt()
    );
    instructions::install(&bare, &kit.config(), Locale::Zh).unwrap();
    assert_eq!(
        bare.system_prompt_hiding(&none, true).as_deref(),
        Some(
            "你是在本会话中与用户一起工作的智能体。回答用户最新的请求；需要时使用你的工具，并如实说明你做了什么。"
        )
    );
    // A host with tools keeps its line whether or not the caller declared more.
    instructions::install(&kit.host, &kit.config(), Locale::En).unwrap();
    assert_eq!(
        kit.host.system_prompt_hiding(&none, true),
        kit.host.system_prompt()
    );
}

#[tokio::test]
async fn agents_md_off_or_empty_files_add_no_section() {
    let kit = kit("{\"text\": \"one\"}").await;
    std::fs::write(kit.workspace().join("AGENTS.md"), "Never read me.").unwrap();
    std::fs::write(kit.workspace().join("empty.md"), "").unwrap();
    let config = InstructionsConfig {
        instructions_file: Some("empty.md".into()),
        agents_md: false,
        ..kit.config()
    };
    instructions::install(&kit.host, &config, Locale::En).unwrap();
    assert_eq!(
        kit.host.system_prompt().as_deref(),
        Some(format!("{BASE_EN}\n\nBe kind.").as_str())
    );
}

#[tokio::test]
async fn base_off_installs_only_the_configured_and_agents_md_sections() {
    let kit = kit("{\"text\": \"one\"}").await;
    std::fs::write(kit.workspace().join("AGENTS.md"), "Workspace rules.").unwrap();
    let config = InstructionsConfig {
        instructions: Some("Only mine.".into()),
        base: false,
        ..kit.config()
    };
    let installed = instructions::install(&kit.host, &config, Locale::En).unwrap();
    let names: Vec<&str> = installed
        .sections
        .iter()
        .map(|installed| installed.section.name.as_str())
        .collect();
    assert_eq!(names, ["instructions:file", "instructions:agents-md"]);
    assert_eq!(
        kit.host.system_prompt().as_deref(),
        Some("Only mine.\n\nWorkspace rules.\n\nBe kind.")
    );
}

#[tokio::test]
async fn installing_again_replaces_the_previous_sections() {
    let kit = kit("{\"text\": \"one\"}").await;
    std::fs::write(kit.workspace().join("AGENTS.md"), "Old rules.").unwrap();
    instructions::install(&kit.host, &kit.config(), Locale::En).unwrap();
    std::fs::write(kit.workspace().join("AGENTS.md"), "New rules.").unwrap();
    let config = InstructionsConfig {
        instructions: Some("Inline.".into()),
        ..kit.config()
    };
    instructions::install(&kit.host, &config, Locale::En).unwrap();
    assert_eq!(
        kit.host.system_prompt().as_deref(),
        Some(format!("{BASE_EN}\n\nInline.\n\nNew rules.\n\nBe kind.").as_str())
    );
}

#[tokio::test]
async fn bad_instruction_sources_are_typed_errors_naming_the_path_and_install_nothing() {
    let kit = kit("{\"text\": \"one\"}").await;
    let workspace = kit.workspace();
    let before = kit.host.system_prompt();

    let both = InstructionsConfig {
        instructions: Some("Inline.".into()),
        instructions_file: Some("team.md".into()),
        ..kit.config()
    };
    let error = instructions::install(&kit.host, &both, Locale::En).unwrap_err();
    assert!(matches!(error, InstructionsError::Both { .. }));
    assert_eq!(
        error.to_string(),
        "agent.instructions and agent.instructions_file are both set: set one of them (the \
         file is team.md)"
    );

    let missing = InstructionsConfig {
        instructions_file: Some("team.md".into()),
        ..kit.config()
    };
    let error = instructions::install(&kit.host, &missing, Locale::En).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "agent.instructions_file: {} does not exist",
            workspace.join("team.md").display()
        )
    );

    std::fs::write(workspace.join("team.md"), b"ok \xff\xfe").unwrap();
    let error = instructions::install(&kit.host, &missing, Locale::En).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "agent.instructions_file: {} is not UTF-8 (invalid byte at offset 3)",
            workspace.join("team.md").display()
        )
    );

    // A folder where a file should be: unreadable, the path named.
    std::fs::create_dir(workspace.join("AGENTS.md")).unwrap();
    let error = instructions::install(&kit.host, &kit.config(), Locale::En).unwrap_err();
    let InstructionsError::Unreadable { key, path, .. } = &error else {
        panic!("expected Unreadable, got {error:?}");
    };
    assert_eq!((*key, path), ("AGENTS.md", &workspace.join("AGENTS.md")));
    assert!(
        error
            .to_string()
            .starts_with(&format!("AGENTS.md: cannot read {}: ", path.display())),
        "{error}"
    );
    std::fs::remove_dir(workspace.join("AGENTS.md")).unwrap();

    std::fs::write(workspace.join("AGENTS.md"), b"\xc3(").unwrap();
    let error = instructions::install(&kit.host, &kit.config(), Locale::En).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "AGENTS.md: {} is not UTF-8 (invalid byte at offset 0)",
            workspace.join("AGENTS.md").display()
        )
    );

    assert_eq!(kit.host.system_prompt(), before);
}
