//! The `Agents` registry (spec server.md ACT-1): one running agent per session in a
//! process, the lease held while it runs and released when it stops, an idle actor
//! stopped after `[host] actor_idle_ms` and started again from the store, and a
//! session another process drives refused with `SESSION_BUSY` naming the holder.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccare_agent::Agent;
use ccare_app::config::load_text;
use ccare_app::{AgentHandle, Agents, AppError, Home, Overrides, WhenBusy, boot};
use ccare_core::kinds::TurnEndReason;
use ccare_core::{Clock, SessionId, SystemClock};
use ccare_store::{Lease, LeaseClaim, LeaseHolder, Store};

use crate::config::no_env;

/// A registry over a SQLite store in `dir` whose actors stop after `idle_ms` unused;
/// the scripted provider echoes.
fn agents(dir: &Path, idle_ms: u64) -> Agents {
    let text = format!(
        "[host]\nactor_idle_ms = {idle_ms}\n[store]\npath = \"state.db\"\n\
         [agent]\nmodel = \"s/m\"\nbase_prompt = false\n[providers.s]\nkind = \"script\"\n\
         [plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\n"
    );
    let home = Home {
        dir: dir.join("home"),
    };
    let settings = load_text(
        &text,
        &dir.join("ccare.toml"),
        &home,
        &Overrides::default(),
        &no_env,
    )
    .unwrap();
    assert_eq!(settings.host.actor_idle_ms, idle_ms);
    Agents::of(&boot(&settings, None, &no_env).unwrap())
}

fn store(agents: &Agents) -> Arc<dyn Store> {
    Arc::clone(agents.host().sessions().store())
}

async fn lease_of(agents: &Agents, id: &SessionId) -> Option<Lease> {
    store(agents).lease(id).await.unwrap()
}

/// Runs one prompt to the end of its turn.
async fn answer(agent: &Agent, prompt: &str) {
    agent.prompt(prompt);
    assert_eq!(agent.when_idle().await, Some(TurnEndReason::Completed));
}

/// The `type` of every stored event of `id`, in seq order.
async fn stored_types(agents: &Agents, id: &SessionId) -> Vec<String> {
    store(agents)
        .read(id, ccare_store::ReadRange::all())
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            serde_json::from_str::<serde_json::Value>(&row.json).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// Waits (at most 5 s) until no actor of `id` runs here.
async fn stopped(agents: &Agents, id: &SessionId) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while agents.is_running(id).await {
        assert!(Instant::now() < deadline, "the idle actor never stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn new_session(agents: &Agents) -> (AgentHandle, SessionId) {
    let handle = agents.create(Default::default()).await.unwrap();
    let id = handle.session().id().clone();
    (handle, id)
}

/// ACT-1: a second `get_or_start` of a running session is the same actor (one
/// agent: a prompt through one handle is the other's turn), under the one lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_running_session_hands_out_the_same_agent() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 300_000);
    let (first, id) = new_session(&agents).await;
    let lease = lease_of(&agents, &id).await.unwrap();
    assert_eq!(lease.holder.pid, std::process::id());

    let second = agents.get_or_start(&id, WhenBusy::Fail).await.unwrap();
    assert!(second.same_actor(&first));
    assert_eq!(second.restored(), 0);
    assert_eq!(
        lease_of(&agents, &id).await.unwrap().holder.owner,
        lease.holder.owner
    );
    second.agent().prompt("hello");
    assert_eq!(
        first.agent().when_idle().await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(first.session().head(), second.session().head());
}

/// ACT-1: `stop` ends the actor only with its last handle; then the session is
/// flushed and its lease released at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_stop_with_the_last_handle_flushes_and_releases_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 300_000);
    let (first, id) = new_session(&agents).await;
    let second = agents.get_or_start(&id, WhenBusy::Fail).await.unwrap();
    answer(first.agent(), "hello").await;
    let head = first.session().head();

    agents.stop(first).await.unwrap();
    assert!(agents.is_running(&id).await);
    assert!(lease_of(&agents, &id).await.is_some());

    assert!(agents.host().controls().is_loaded(&id));
    agents.stop(second).await.unwrap();
    assert!(!agents.is_running(&id).await);
    assert_eq!(lease_of(&agents, &id).await, None);
    assert_eq!(stored_types(&agents, &id).await.len() as u64, head);
    assert!(
        !agents.host().controls().is_loaded(&id),
        "a stopped actor's controls leave memory"
    );
}

/// ACT-1: an actor nobody uses stops after `actor_idle_ms` (lease released) and
/// the next command starts it again from the store, where the earlier turn is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_an_idle_actor_stops_and_the_next_command_restarts_it_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 150);
    let (handle, id) = new_session(&agents).await;
    answer(handle.agent(), "first").await;
    let head = handle.session().head();
    let old_session = handle.session().clone();
    drop(handle);

    stopped(&agents, &id).await;
    assert_eq!(lease_of(&agents, &id).await, None);
    assert_eq!(stored_types(&agents, &id).await.len() as u64, head);

    let restarted = agents.get_or_start(&id, WhenBusy::Fail).await.unwrap();
    assert_eq!(restarted.session().head(), head);
    assert_eq!(
        lease_of(&agents, &id).await.unwrap().holder.pid,
        std::process::id()
    );
    answer(restarted.agent(), "second").await;
    let types = stored_types(&agents, &id).await;
    assert_eq!(
        types.iter().filter(|kind| *kind == "turn/end").count(),
        2,
        "{types:?}"
    );
    // The stopped actor's session is not the one the restarted actor appends to.
    assert_eq!(old_session.head(), head);
    assert_eq!(restarted.session().head(), types.len() as u64);
}

/// ACT-1: a handle held (a chat waiting for its user) keeps the actor and its lease
/// past the idle time; dropping it lets the timer stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_held_handle_keeps_the_actor_running_past_the_idle_time() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 100);
    let (handle, id) = new_session(&agents).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(agents.is_running(&id).await);
    assert!(lease_of(&agents, &id).await.is_some());
    drop(handle);
    stopped(&agents, &id).await;
    assert_eq!(lease_of(&agents, &id).await, None);
}

/// ACT-1: a session another process drives is not started: `SESSION_BUSY` with the
/// holder passes through, and nothing runs here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_session_busy_from_another_process_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 300_000);
    let (handle, id) = new_session(&agents).await;
    agents.stop(handle).await.unwrap();
    let now_ms = SystemClock.now_ms();
    store(&agents)
        .lease_acquire(LeaseClaim {
            session: id.clone(),
            holder: LeaseHolder {
                owner: "elsewhere-owner".into(),
                host: "elsewhere".into(),
                pid: 4242,
                process_start: None,
            },
            now_ms,
            expires_ms: now_ms + 60_000,
            replacing: None,
        })
        .await
        .unwrap();

    let refused = agents.get_or_start(&id, WhenBusy::Fail).await.unwrap_err();
    let AppError::SessionBusy { lease, .. } = &refused else {
        panic!("expected SESSION_BUSY, got {refused:?}");
    };
    assert_eq!(
        (lease.holder.host.as_str(), lease.holder.pid),
        ("elsewhere", 4242)
    );
    assert!(refused.is_bad_input());
    assert!(!agents.is_running(&id).await);
    assert_eq!(
        lease_of(&agents, &id).await.unwrap().holder.owner,
        "elsewhere-owner"
    );
}

/// An unknown session is the session engine's bad-input error, and the lease taken
/// to open it is released again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_session_is_refused_and_leaves_no_lease() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 300_000);
    let id = SessionId::new("no-such-session").unwrap();
    let refused = agents.get_or_start(&id, WhenBusy::Fail).await.unwrap_err();
    assert!(matches!(refused, AppError::Session(_)), "{refused:?}");
    assert!(refused.is_bad_input());
    assert!(!agents.is_running(&id).await);
    let deadline = Instant::now() + Duration::from_secs(5);
    while lease_of(&agents, &id).await.is_some() {
        assert!(Instant::now() < deadline, "the lease was never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ACT-1: two commands arriving at once for a stopped session start one actor (one
/// `Agent::new`, one lease), and a start right after a stop finds the lease released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_concurrent_starts_of_one_session_start_one_actor() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents(dir.path(), 300_000);
    let (handle, id) = new_session(&agents).await;
    agents.stop(handle).await.unwrap();
    let (first, second) = tokio::join!(
        agents.get_or_start(&id, WhenBusy::Fail),
        agents.get_or_start(&id, WhenBusy::Fail)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert!(first.same_actor(&second));
    assert_eq!(
        lease_of(&agents, &id).await.unwrap().holder.pid,
        std::process::id()
    );
}

/// A registry over the test kit's host (a store whose writes fail or are held on
/// demand) whose agents answer with the kit's scripted replies.
fn agents_over_kit(
    script: &str,
) -> (
    ccare_agent::testing::TestHost,
    Arc<ccare_agent::testing::FailingStore>,
    Agents,
) {
    let store = Arc::new(ccare_agent::testing::FailingStore::default());
    let kit = ccare_agent::testing::TestHost::builder(script)
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .build()
        .unwrap();
    let agents = Agents::new(
        Arc::clone(kit.host()),
        ccare_agent::AgentOptions::new("s/scripted"),
        60_000,
        60_000,
    );
    (kit, store, agents)
}

/// ACT-1 with H-LOOP-5: a session created for a prompt sent at once (the gateway's new
/// conversation) is not awaited on its own (its creation held, the handle is still
/// returned), yet nothing of its turn reaches the model before its row is durable (the
/// turn's opening flush waits for it, so both commit together), and its lease is held
/// and released as an awaited creation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_queued_creation_is_durable_before_the_first_request_leaves() {
    let (kit, store, agents) = agents_over_kit(r#"{"text": "hello"}"#);
    store.hold_creations();
    let handle = tokio::time::timeout(
        Duration::from_secs(5),
        agents.create_queued(ccare_core::JsonObject::new()),
    )
    .await
    .expect("the creation was awaited")
    .unwrap();
    let id = handle.session().id().clone();
    handle.agent().prompt("hi");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        kit.script().requests().is_empty(),
        "a request left before the session was durable"
    );
    store.release_kv_writes();
    assert_eq!(
        handle.agent().when_idle().await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(kit.script().requests().len(), 1);
    let stored = store.inner().session(&id).await.unwrap().unwrap();
    assert_eq!(stored.incarnation, handle.session().header().incarnation);
    let lease = store.inner().lease(&id).await.unwrap().unwrap();
    assert_eq!(lease.holder.pid, std::process::id());
    agents.stop(handle).await.unwrap();
    assert_eq!(store.inner().lease(&id).await.unwrap(), None);
}

/// A queued creation that fails ends the first turn naming the store before any request
/// leaves; nothing of the session is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_failed_queued_creation_fails_the_first_turn_naming_the_store() {
    let (kit, store, agents) = agents_over_kit(r#"{"text": "hello"}"#);
    store.fail(ccare_agent::testing::Fault::creates("disk unplugged"));
    let handle = agents
        .create_queued(ccare_core::JsonObject::new())
        .await
        .unwrap();
    let id = handle.session().id().clone();
    handle.agent().prompt("hi");
    let ended = handle.agent().when_idle().await;
    let Some(TurnEndReason::Error { failure }) = ended else {
        panic!("the turn did not fail: {ended:?}");
    };
    assert_eq!(
        serde_json::to_value(&failure).unwrap(),
        serde_json::json!({
            "code": "SESSION_FENCED",
            "message": format!("session {id} is fenced after a store error: store create_session failed: disk unplugged"),
        })
    );
    assert!(kit.script().requests().is_empty());
    let fence = handle.session().fence().unwrap();
    assert_eq!(
        fence.to_string(),
        "store create_session failed: disk unplugged"
    );
    assert_eq!(store.inner().session(&id).await.unwrap(), None);
}

/// ACT-2: a prompt's inbox row is durable before the prompt is acknowledged, and it is
/// queued so that the store may keep its group open for the turn the prompt opens
/// (its events and the flush before the model request): the row and the turn's opening
/// commit together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_2_a_prompt_s_inbox_row_commits_with_the_turn_it_opens() {
    let (kit, store, agents) = agents_over_kit(r#"{"text": "hello"}"#);
    let handle = agents
        .create_queued(ccare_core::JsonObject::new())
        .await
        .unwrap();
    assert_eq!(store.lingering_kv_writes(), 0);
    handle.agent().prompt("hi");
    assert_eq!(
        handle.agent().when_idle().await,
        Some(TurnEndReason::Completed)
    );
    assert_eq!(store.lingering_kv_writes(), 1, "the inbox row");
    assert_eq!(kit.script().requests().len(), 1);
}
