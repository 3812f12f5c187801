//! The booted host (ACT-5, ACT-6, H-VAL-3): which plugins and tools a profile gets,
//! the store `[store]` names, and the validator policy checked against the validators
//! that exist.

use std::path::Path;

use ccare_app::config::load_text;
use ccare_app::{Booted, Home, Overrides, boot};

use crate::config::no_env;

/// Boots `text` as `dir/ccare.toml` with `dir/home` as the data directory.
fn booted(dir: &Path, text: &str, profile: Option<&str>) -> Result<Booted, String> {
    let home = Home {
        dir: dir.join("home"),
    };
    let settings = load_text(
        text,
        &dir.join("ccare.toml"),
        &home,
        &Overrides::default(),
        &no_env,
    )
    .map_err(|error| error.to_string())?;
    boot(&settings, profile, &no_env).map_err(|error| error.to_string())
}

const BASE: &str = "[agent]\nmodel = \"s/m\"\n[providers.s]\nkind = \"script\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_6_with_no_plugin_table_care_and_stream_watch_are_mounted() {
    let dir = tempfile::tempdir().unwrap();
    let host = booted(dir.path(), BASE, None).unwrap();
    assert_eq!(host.host.mounted(), ["context-care", "stream-watch"]);
    assert!(host.care.is_some());
    let tools = host.host.tool_names();
    for tool in [
        "read_file",
        "write_file",
        "list_files",
        "session_search",
        "context_status",
        "context_rest",
    ] {
        assert!(tools.iter().any(|name| name == tool), "{tool} in {tools:?}");
    }
    // The store is the home's default database, created with its folder.
    assert!(dir.path().join("home/ccare.db").is_file());
    let session = host
        .host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    assert_eq!(session.head(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_false_turns_either_plugin_off_and_time_context_is_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let bare = booted(
        dir.path(),
        &format!("{BASE}[plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\n"),
        None,
    )
    .unwrap();
    assert!(bare.host.mounted().is_empty());
    assert!(bare.care.is_none());
    let watch_only = booted(
        dir.path(),
        &format!("{BASE}[plugins.context-care]\nenabled = false\n"),
        None,
    )
    .unwrap();
    assert_eq!(watch_only.host.mounted(), ["stream-watch"]);
    let timed = booted(
        dir.path(),
        &format!("{BASE}[host]\ntime_zone = \"Asia/Shanghai\"\n[plugins.time-context]\n"),
        None,
    )
    .unwrap();
    assert_eq!(
        timed.host.mounted(),
        ["context-care", "stream-watch", "time-context"]
    );
    // `enabled` never reaches the plugin's strict table; the plugin's own keys do.
    let refused = booted(
        dir.path(),
        &format!("{BASE}[plugins.context-care]\nenabled = true\nbudget_ratio = 7\n"),
        None,
    )
    .unwrap_err();
    assert!(refused.starts_with("context-care: "), "{refused}");
    assert!(refused.contains("budget_ratio"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_boots_its_own_model_tools_and_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{BASE}[profiles.reader]\ntools = [\"read_file\"]\n[profiles.reader.agent]\nmodel = \"s/reader\"\n[profiles.reader.plugins.stream-watch]\nenabled = false\n"
    );
    let reader = booted(dir.path(), &text, Some("reader")).unwrap();
    assert_eq!(reader.profile.id, "reader");
    assert_eq!(reader.options.model, "s/reader");
    assert_eq!(reader.host.mounted(), ["context-care"]);
    let tools = reader.host.tool_names();
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    for absent in ["write_file", "list_files", "session_search"] {
        assert!(
            !tools.iter().any(|name| name == absent),
            "{absent} in {tools:?}"
        );
    }
    let default = booted(dir.path(), &text, None).unwrap();
    assert_eq!(default.options.model, "s/m");
    let unknown = booted(dir.path(), &text, Some("writer")).unwrap_err();
    assert_eq!(
        unknown,
        "--profile: no profile \"writer\" in the config (profiles: default, reader)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_val_3_allow_and_deny_name_validators_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ccare.toml");
    let error = booted(
        dir.path(),
        &format!("{BASE}[validators]\ndeny = [\"tool-pairng\"]\n"),
        None,
    )
    .unwrap_err();
    assert_eq!(
        error,
        format!(
            "{}: validators.deny: unknown validator \"tool-pairng\" (known: turn-step-nesting, tool-pairing, single-open-compaction, time-context-invariant)",
            config.display()
        )
    );
    let error = booted(
        dir.path(),
        &format!("{BASE}[validators]\nallow = [\"turn-step-nesting\", \"nope\"]\n"),
        None,
    )
    .unwrap_err();
    assert!(error.ends_with(": validators.allow: unknown validator \"nope\" (known: turn-step-nesting, tool-pairing, single-open-compaction, time-context-invariant)"), "{error}");
    assert!(
        booted(
            dir.path(),
            &format!("{BASE}[validators]\nallow = [\"time-context-invariant\"]\ndeny = [\"tool-pairing\"]\n"),
            None,
        )
        .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_path_names_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let host = booted(
        dir.path(),
        &format!("{BASE}[store]\npath = \"data/elsewhere.db\"\n"),
        None,
    )
    .unwrap();
    let session = host
        .host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    session.flush().await.unwrap();
    assert!(dir.path().join("data/elsewhere.db").is_file());
    assert!(!dir.path().join("home/ccare.db").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_are_installed_after_the_tools_per_profile() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.md"), "Ops rules.").unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "Agents file.").unwrap();
    let text = "[agent]\nmodel = \"s/m\"\ninstructions = \"Inline rules.\"\n[providers.s]\nkind = \"script\"\n\
        [profiles.ops.agent]\ninstructions_file = \"ops.md\"\n\
        [profiles.bare]\ntools = []\n[profiles.bare.agent]\nbase_prompt = false\n\
        [profiles.bare.plugins.context-care]\nenabled = false\n[profiles.bare.plugins.stream-watch]\nenabled = false\n";
    let names = |booted: &Booted| -> Vec<(String, String)> {
        booted
            .instructions
            .sections
            .iter()
            .map(|installed| {
                (
                    installed.section.name.clone(),
                    installed.section.text.clone(),
                )
            })
            .collect()
    };
    let default = booted(dir.path(), text, None).unwrap();
    let sections = names(&default);
    assert_eq!(sections[0].0, "instructions:base");
    assert!(
        sections[0].1.ends_with("Your tools: read_file, write_file, list_files, session_search, context_status, context_rest, ledger."),
        "the base prompt names the plugins' tools too: {}",
        sections[0].1
    );
    assert_eq!(
        sections[1..],
        [
            ("instructions:file".to_owned(), "Inline rules.".to_owned()),
            (
                "instructions:agents-md".to_owned(),
                "Agents file.".to_owned()
            ),
        ]
    );
    let ops = booted(dir.path(), text, Some("ops")).unwrap();
    assert_eq!(
        names(&ops)[1],
        ("instructions:file".to_owned(), "Ops rules.".to_owned())
    );
    let bare = booted(dir.path(), text, Some("bare")).unwrap();
    assert_eq!(
        names(&bare),
        [
            ("instructions:file".to_owned(), "Inline rules.".to_owned()),
            (
                "instructions:agents-md".to_owned(),
                "Agents file.".to_owned()
            ),
        ],
        "the inherited instructions, no base prompt"
    );
    assert_eq!(
        bare.host.system_prompt().as_deref(),
        Some("Inline rules.\n\nAgents file.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_booted_host_releases_its_store() {
    // Nothing a plugin keeps may hold the host alive in a cycle: once the last handle
    // is dropped, the store goes too (its writer thread ends and its files close), so
    // a process that boots again over the same database holds one store, not two.
    let dir = tempfile::tempdir().unwrap();
    let host = booted(dir.path(), &format!("{BASE}[plugins.time-context]\n"), None).unwrap();
    assert_eq!(
        host.host.mounted(),
        ["context-care", "stream-watch", "time-context"]
    );
    let store = std::sync::Arc::downgrade(host.host.sessions().store());
    host.host
        .sessions()
        .create(None, Default::default())
        .await
        .unwrap();
    drop(host);
    assert_eq!(store.strong_count(), 0, "the store outlived its host");
}
