//! `ccare context status` categories (issue 19 item 4): the agent's own instructions
//! (base prompt, configured instructions, the workspace's `AGENTS.md`) each show as a
//! category of their own with their token count, beside the other system sections,
//! context care's guidance, the tools and the retained messages; in the JSON report and
//! in the text lines.

use ccare_agent::instructions::{self, InstructionsConfig};
use ccare_agent::{Plugin, PluginScope, SystemSection};
use ccare_care::report::{Category, render_report};
use ccare_core::Locale;
use ccare_core::kinds::TurnEndReason;
use ccare_meter::{Meter, MeterConfig};
use serde_json::{Value, json};

use crate::rig::rig;

/// A plugin with one system section of its own.
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
        scope.system_section(SystemSection {
            name: "rules".into(),
            order: 0,
            text: "Be kind to the build.".into(),
        });
        Ok(())
    }
}

#[tokio::test]
async fn each_instruction_section_is_its_own_category_with_its_tokens() {
    let rig = rig("{\"text\": \"one\"}", json!({}), Some(16_000), true).await;
    rig.host.mount(&Rules, &json!({})).unwrap();
    let workspace = rig.dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let team = "Prefer small diffs. Run the tests before you answer.";
    let agents = "# Conventions\n\nUse cargo nextest; never commit.\n";
    std::fs::write(workspace.join("team.md"), team).unwrap();
    std::fs::write(workspace.join("AGENTS.md"), agents).unwrap();
    let installed = instructions::install(
        &rig.host,
        &InstructionsConfig {
            instructions_file: Some("team.md".into()),
            ..InstructionsConfig::new(&workspace)
        },
        Locale::En,
    )
    .unwrap();
    assert_eq!(rig.turn("hi").await, Some(TurnEndReason::Completed));

    let report = rig.care.report(&rig.session).await.unwrap().unwrap();
    assert_eq!(report.text_scale, 1.0, "no usage: the meter's own counts");
    let meter = Meter::new(&MeterConfig::default()).unwrap();
    let base = &installed.section("instructions:base").unwrap().section.text;
    let guidance = rig.script.requests()[0].config.system.clone().unwrap();
    let guidance = guidance
        .rsplit_once("\n\nBe kind to the build.\n\n")
        .unwrap()
        .1;
    let names: Vec<&str> = report
        .categories
        .iter()
        .map(|category| category.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "instructions:base",
            "instructions:file",
            "instructions:agents-md",
            "system",
            "guidance",
            "tools",
            "messages"
        ]
    );
    let tokens = |name: &str| {
        report
            .categories
            .iter()
            .find(|category| category.name == name)
            .unwrap()
            .tokens
    };
    assert_eq!(tokens("instructions:base"), meter.text(base));
    assert_eq!(tokens("instructions:file"), meter.text(team));
    assert_eq!(tokens("instructions:agents-md"), meter.text(agents));
    assert_eq!(tokens("system"), meter.text("Be kind to the build."));
    assert_eq!(tokens("guidance"), meter.text(guidance));
    assert!(tokens("tools") > 0);
    assert!(tokens("messages") > 0);

    // The JSON report carries them as `{name, tokens}`.
    let value = serde_json::to_value(&report).unwrap();
    assert_eq!(
        value["categories"][2],
        json!({"name": "instructions:agents-md", "tokens": meter.text(agents)})
    );
    // The text report: one aligned line per category, after the others.
    let lines = render_report(&report);
    let category_lines: Vec<&String> = lines
        .iter()
        .filter(|line| line.starts_with("category "))
        .collect();
    assert_eq!(category_lines.len(), 7);
    assert_eq!(
        *category_lines[0],
        format!(
            "category     instructions:base       {} tokens",
            meter.text(base)
        )
    );
    assert_eq!(
        *category_lines[6],
        format!(
            "category     messages                {} tokens",
            tokens("messages")
        )
    );
    assert_eq!(lines.last(), category_lines.last().copied());
}

#[tokio::test]
async fn without_instructions_there_are_no_instruction_categories() {
    let rig = rig("{\"text\": \"one\"}", json!({}), Some(16_000), true).await;
    assert_eq!(rig.turn("hi").await, Some(TurnEndReason::Completed));
    let report = rig.care.report(&rig.session).await.unwrap().unwrap();
    let names: Vec<String> = report
        .categories
        .into_iter()
        .map(|Category { name, .. }| name)
        .collect();
    assert_eq!(names, ["guidance", "tools", "messages"]);
}
