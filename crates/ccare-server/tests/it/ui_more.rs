//! The web UI, continued (issue 16; watch-rules-ui.md UI-1, UI-2, item 8; context-care.md
//! CC-MET-5, CC-EXT-3): the maintenance list's pages in a real browser against a session
//! with more than 20 real maintenance records, the configured `[agent] locale`
//! (`GET /api/info` and the first load), the indicator's history fallback when the
//! session has no live sample, and the layout at phone width and in dark mode.
//!
//! Same browser set-up as `ui.rs` (Debian's chromium and chromedriver, headless); the
//! screenshots go to `target/ui-screenshots/`.

use ccare_core::SessionId;
use ccare_fake_openai::{Reply, Script};
use ccare_store::{LeaseClaim, LeaseHolder};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::events::{Sse, create_session, export, export_events, prompt};
use crate::rig::Rig;
use crate::ui::{
    browser, browser_programs, browser_with, click, count_of, eventually, log_in, open_in_english,
    screenshot, send_message, start_driver, text_of, until_text,
};

/// WebDriver's key codes.
const TAB: &str = "\u{e004}";
const ENTER: &str = "\u{e007}";
const ESCAPE: &str = "\u{e00c}";

/// One maintenance page of the API: `[operationId, action, "#newSeq …"]` per record, as
/// the panel's rows must show them, and the page's total.
async fn api_page(rig: &Rig, id: &str, offset: u64) -> (Vec<Value>, u64) {
    let page: Value = rig
        .get_json(&format!(
            "/context-care/actions?sessionId={id}&limit=20&offset={offset}"
        ))
        .await;
    let rows = page["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| {
            let data = &record["data"];
            let seqs: Vec<String> = data["replacements"]
                .as_array()
                .map(|ranges| {
                    ranges
                        .iter()
                        .filter_map(|range| range["newSeq"].as_u64())
                        .map(|seq| format!("#{seq}"))
                        .collect()
                })
                .unwrap_or_default();
            json!([data["operationId"], data["action"], seqs.join(" ")])
        })
        .collect();
    (rows, page["total"].as_u64().unwrap())
}

/// The panel's maintenance rows as `[operation, action, seqs]`.
async fn shown_rows(client: &Client) -> Value {
    client
        .execute(
            "return [...document.querySelectorAll('#actions li.action-row')].map((row) => [row.dataset.operation, row.querySelector('.action-kind').textContent, row.querySelector('.action-seq').textContent])",
            vec![],
        )
        .await
        .unwrap()
}

/// The operation of the maintenance row whose own summary holds the focus, or null.
async fn focused_row(client: &Client) -> Value {
    client
        .execute(
            "const active = document.activeElement; return active.matches('#actions li.action-row > details > summary') ? active.closest('li.action-row').dataset.operation : null",
            vec![],
        )
        .await
        .unwrap()
}

/// Waits until the panel shows the API's page at `offset`, rows and range.
async fn until_page(client: &Client, rig: &Rig, id: &str, offset: u64) -> Vec<Value> {
    let (rows, total) = api_page(rig, id, offset).await;
    let range = format!("{}–{} of {total}", offset + 1, offset + rows.len() as u64);
    until_text(client, "#actions-range", &range).await;
    let expected = Value::Array(rows.clone());
    eventually("the page's rows", || async {
        (shown_rows(client).await == expected).then_some(())
    })
    .await;
    rows
}

/// A deep rest the fake model asks for, then its answer after the tool result.
fn push_rest(rig: &Rig, cycle: usize) {
    let arguments = json!({
        "note": format!("cycle {cycle}: {}", "n".repeat(1100)),
        "deep": true,
        "recovery": format!("cycle {cycle}: search the log for 'fox'. {}", "r".repeat(1000)),
    });
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some(&format!("call_rest_{cycle}")),
                Some("context_rest"),
                arguments.to_string(),
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("continuing"));
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_2_the_maintenance_list_pages_20_a_row_finds_a_seq_and_keeps_the_keyboard_on_its_row() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.respond_with(|_| Reply::text("noted"));
    // Real maintenance records: a prompt, then a deep rest the model asks for, until
    // the journal holds more than one page of them.
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let mut total = 0;
    for cycle in 0..40 {
        rig.fake.push(Reply::text("read it"));
        let text = format!(
            "Cycle {cycle}: please read this. {}",
            "The quick brown fox jumps over the lazy dog. ".repeat(20)
        );
        prompt(&rig, &id, &text).await;
        sse.until_idle().await;
        push_rest(&rig, cycle);
        prompt(&rig, &id, "now rest deeply").await;
        sse.until_idle().await;
        total = api_page(&rig, &id, 0).await.1;
        if total >= 23 {
            break;
        }
    }
    assert!(total >= 23, "{total} maintenance records after 40 cycles");

    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;

    // Page 1: the API's first 20, in its order; Previous is off.
    let first = until_page(&client, &rig, &id, 0).await;
    assert_eq!(first.len(), 20);
    assert_eq!(count_of(&client, "#actions li.action-row").await, 20);
    assert_eq!(
        client
            .find(Locator::Id("actions-prev"))
            .await
            .unwrap()
            .attr("disabled")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    // Page 2: the rest; Next is off, Previous goes back.
    click(&client, "#actions-next").await;
    let second = until_page(&client, &rig, &id, 20).await;
    assert_eq!(second.len() as u64, total - 20);
    assert_eq!(
        client
            .find(Locator::Id("actions-next"))
            .await
            .unwrap()
            .attr("disabled")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    // The focus was on Next, now disabled: it moved to Previous.
    let focused = client
        .execute("return document.activeElement.id", vec![])
        .await
        .unwrap();
    assert_eq!(focused, json!("actions-prev"));
    client
        .execute(
            "document.getElementById('actions-title').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_2_maintenance_page_2.png").await;
    click(&client, "#actions-prev").await;
    until_page(&client, &rig, &id, 0).await;

    // Search by seq: the last deep rest's checkpoint is on page 2; finding it opens
    // that page and its row, focused.
    let page: Value = rig
        .get_json(&format!(
            "/context-care/actions?sessionId={id}&limit=200&offset=0"
        ))
        .await;
    let last = page["actions"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|record| record["data"]["action"] == "deep-rest")
        .unwrap()
        .clone();
    let op = last["data"]["operationId"].as_str().unwrap().to_owned();
    let seq = last["data"]["replacements"][0]["newSeq"].as_u64().unwrap();
    let index = page["actions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|record| record["data"]["operationId"] == json!(op))
        .unwrap();
    assert!(index >= 20, "the last deep rest is on page 2 ({index})");
    let seq_box = client.find(Locator::Id("actions-seq")).await.unwrap();
    // Typed and submitted with Enter, as from the keyboard.
    seq_box.send_keys(&format!("{seq}{ENTER}")).await.unwrap();
    until_text(
        &client,
        "#actions-status",
        &format!("Seq {seq} is covered by {op}"),
    )
    .await;
    until_page(&client, &rig, &id, 20).await;
    let row = format!("li.action-row[data-operation=\"{op}\"]");
    assert_eq!(
        count_of(&client, &format!("{row}.found > details[open]")).await,
        1
    );
    assert_eq!(focused_row(&client).await, json!(op));
    eventually("the found row's detail", || async {
        text_of(&client, &format!("{row} .diff-new"))
            .await
            .filter(|text| text.contains("search the log for 'fox'."))
    })
    .await;

    // Keyboard: Escape from inside the open detail closes it and returns to the row.
    let summary = client
        .find(Locator::Css(&format!("{row} > details > summary")))
        .await
        .unwrap();
    summary.send_keys(TAB).await.unwrap();
    let inside = client
        .execute(
            "const row = document.activeElement.closest('li.action-row'); return row ? [row.dataset.operation, document.activeElement.tagName] : null",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        inside[0],
        json!(op),
        "Tab moved into the open row: {inside}"
    );
    assert_ne!(inside[1], json!("SUMMARY"), "{inside}");
    let active = client.active_element().await.unwrap();
    active.send_keys(ESCAPE).await.unwrap();
    assert_eq!(
        count_of(&client, &format!("{row} > details[open]")).await,
        0
    );
    assert_eq!(focused_row(&client).await, json!(op));
    // Enter on the focused row opens it again; Escape closes it again.
    let active = client.active_element().await.unwrap();
    active.send_keys(ENTER).await.unwrap();
    assert_eq!(
        count_of(&client, &format!("{row} > details[open]")).await,
        1
    );
    active.send_keys(ESCAPE).await.unwrap();
    assert_eq!(
        count_of(&client, &format!("{row} > details[open]")).await,
        0
    );

    // A redraw of the list (Refresh, or a turn going idle) keeps the focus on the row.
    client
        .execute(
            "window.__oldRow = document.querySelector(arguments[0]); document.getElementById('panel-refresh').click()",
            vec![json!(row)],
        )
        .await
        .unwrap();
    eventually("the list to be redrawn", || async {
        let gone = client
            .execute("return !window.__oldRow.isConnected", vec![])
            .await
            .ok()?;
        (gone == json!(true)).then_some(())
    })
    .await;
    assert_eq!(focused_row(&client).await, json!(op));

    // Undo from the row: the session reloads on the same page, the focus back on the
    // row, and the undo is a record of its own.
    click(&client, &format!("{row} > details > summary")).await;
    let undo = format!("{row} button.undo");
    until_text(&client, &undo, "Undo").await;
    // Scrolled clear of the sticky pager at the panel's bottom, as a user would.
    client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView({ block: 'center' })",
            vec![json!(undo)],
        )
        .await
        .unwrap();
    click(&client, &undo).await;
    let undone = format!("Undid {op}: the replaced messages are live again");
    until_text(&client, "#chat-status", &undone).await;
    let after = until_page(&client, &rig, &id, 20).await;
    assert_eq!(after.len() as u64, total - 20 + 1);
    assert_eq!(after.last().unwrap()[1], json!("undo"));
    let focused = eventually("the focus back on the row", || async {
        let focused = focused_row(&client).await;
        (focused == json!(op)).then_some(focused)
    })
    .await;
    assert_eq!(focused, json!(op));
    client
        .execute(
            "document.activeElement.scrollIntoView({ block: 'center' })",
            vec![],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_2_maintenance_undone_focus.png").await;
    client.close().await.unwrap();
    drop(driver);
}

/// Restarts `rig` with `[agent] locale = "zh"` written into its config.
async fn restart_in_zh(rig: Rig) -> Rig {
    let path = rig.dir.path().join("ccare.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\n[agent]\n"), "{text}");
    let text = text.replacen("\n[agent]\n", "\n[agent]\nlocale = \"zh\"\n", 1);
    std::fs::write(&path, text).unwrap();
    rig.restart().await
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_8_api_info_says_the_configured_locale_and_is_documented() {
    let rig = Rig::start().await;
    let info: Value = rig.get_json("/api/info").await;
    assert_eq!(info, json!({"profile": "default", "locale": "en"}));
    let (status, code, _) =
        crate::rig::error_of(rig.client.get(rig.url("/api/info")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    let document: Value = rig.get_json("/api/openapi.json").await;
    let get = &document["paths"]["/api/info"]["get"];
    assert!(get.is_object(), "{}", document["paths"]);
    let rig = restart_in_zh(rig).await;
    let info: Value = rig.get_json("/api/info").await;
    assert_eq!(info, json!({"profile": "default", "locale": "zh"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_8_a_server_configured_in_zh_starts_the_ui_in_zh_until_its_user_switches() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = restart_in_zh(Rig::start().await).await;
    rig.fake.respond_with(|_| Reply::text("好的"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    prompt(&rig, &id, "你好").await;
    sse.until_idle().await;
    let driver = start_driver(&chromedriver).await;
    // A browser whose own language is English, with nothing remembered.
    let client = browser_with(&driver, &chromium, &["--lang=en-US"], None).await;
    log_in(&client, &rig).await;
    let language = client
        .execute(
            "return [navigator.language, window.localStorage.getItem('ccare.locale')]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(language, json!(["en-US", null]));
    until_text(&client, "#new-session", "新建会话").await;
    assert_eq!(
        client
            .execute("return document.documentElement.lang", vec![])
            .await
            .unwrap(),
        json!("zh-CN")
    );
    client.goto(&rig.url(&format!("/#/s/{id}"))).await.unwrap();
    until_text(&client, "#panel-title", "预算与维护").await;
    let locale = client
        .find(Locator::Id("locale"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(locale.as_deref(), Some("zh"));
    eventually("the Chinese indicator", || async {
        text_of(&client, "#fatigue")
            .await
            .filter(|text| text.starts_with("疲劳度 "))
    })
    .await;
    screenshot(&client, "ui_8_configured_zh.png").await;

    // The switch still works, and is remembered over the server's locale.
    client
        .find(Locator::Id("locale"))
        .await
        .unwrap()
        .select_by_value("en")
        .await
        .unwrap();
    until_text(&client, "#new-session", "New session").await;
    client.refresh().await.unwrap();
    until_text(&client, "#new-session", "New session").await;
    until_text(&client, "#panel-title", "Budget & maintenance").await;
    client.close().await.unwrap();
    drop(driver);
}

/// Takes the lease of `id` for another process, as `ccare run` elsewhere would: this
/// server can then read the session but not open it.
async fn lease_elsewhere(rig: &Rig, id: &str) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    rig.store()
        .lease_acquire(LeaseClaim {
            session: SessionId::new(id).unwrap(),
            holder: LeaseHolder {
                owner: "elsewhere-owner".into(),
                host: "elsewhere".into(),
                pid: 4242,
                process_start: None,
            },
            now_ms,
            expires_ms: now_ms + 600_000,
            replacing: None,
        })
        .await
        .unwrap();
}

/// The `contextCare` numbers and seq of the latest status notice in `export`.
fn last_status_notice(export: &str) -> (u64, Value, Value) {
    let events: Vec<Value> = export_events(export)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .collect();
    events
        .iter()
        .rev()
        .find(|event| {
            event["type"] == "user/message"
                && event["data"]["message"]["source"]["kind"] == "plugin:context-care:state"
        })
        .map(|event| {
            let numbers = &event["data"]["message"]["source"]["contextCare"];
            (
                event["seq"].as_u64().unwrap(),
                numbers["fatigueValue"].clone(),
                numbers["wakefulnessValue"].clone(),
            )
        })
        .unwrap_or_else(|| panic!("a status notice in the log: {export}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn cc_met_5_without_a_live_sample_the_indicator_shows_the_recorded_numbers_never_levels() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.respond_with(|_| Reply::text("noted"));
    let id = create_session(&rig).await;
    let empty = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    // A status notice is recorded when there is something to report: here the
    // outcome of a rest the model asked for, with the numbers of that boundary.
    rig.fake.push(Reply::text("read it"));
    prompt(&rig, &id, "First question").await;
    sse.until_idle().await;
    push_rest(&rig, 0);
    prompt(&rig, &id, "now rest deeply").await;
    sse.until_idle().await;
    drop(sse);
    let (seq, fatigue, wakefulness) = last_status_notice(&export(&rig, &id).await);
    assert!(
        fatigue.is_number() && wakefulness.is_number(),
        "{fatigue} {wakefulness}"
    );

    // A restart: no boundary in this process; another process drives both sessions.
    let rig = rig.restart().await;
    lease_elsewhere(&rig, &id).await;
    lease_elsewhere(&rig, &empty).await;
    let (status, code, _) =
        crate::rig::error_of(rig.get(&format!("/api/sessions/{id}/context")).await).await;
    assert_eq!((status, code.as_str()), (409, "SESSION_BUSY"));
    // The API's recorded sample is the log's projection: the notice's own numbers.
    let page: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={id}&limit=1"))
        .await;
    let state = &page["currentState"];
    assert_eq!(state["source"], "log", "{state}");
    assert_eq!(state["sampledSeq"], json!(seq));
    assert_eq!(state["fatigueValue"], fatigue);
    assert_eq!(state["wakefulnessValue"], wakefulness);
    let page: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={empty}&limit=1"))
        .await;
    assert_eq!(page["currentState"]["source"], "none");

    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;
    let fatigue_level = state["fatigue"].as_str().unwrap();
    let wakefulness_level = state["wakefulness"].as_str().unwrap();
    let expected_fatigue = format!(
        "Fatigue {:.1}% · {fatigue_level}",
        fatigue.as_f64().unwrap()
    );
    let expected_wakefulness = format!(
        "Wakefulness {:.1}% · {wakefulness_level}",
        wakefulness.as_f64().unwrap()
    );
    until_text(&client, "#fatigue", &expected_fatigue).await;
    until_text(&client, "#wakefulness", &expected_wakefulness).await;
    until_text(
        &client,
        "#indicator-source",
        &format!("no live sample: as recorded at seq {seq}"),
    )
    .await;
    let error = text_of(&client, "#indicator-error").await.unwrap();
    assert!(
        error.starts_with(&format!(
            "http 409 SESSION_BUSY: session {id} is driven by pid 4242 on host elsewhere"
        )),
        "{error}"
    );
    let classes = client
        .execute(
            "return [document.getElementById('fatigue').className, document.getElementById('indicator').dataset.source]",
            vec![],
        )
        .await
        .unwrap();
    assert_ne!(classes[0], json!("metric c-grey"), "{classes}");
    assert_eq!(classes[1], json!("log"));
    screenshot(&client, "cc_met_5_recorded_sample.png").await;

    // Neither a live sample nor a recorded one: grey dashes, no number from a level.
    client
        .goto(&rig.url(&format!("/#/s/{empty}")))
        .await
        .unwrap();
    until_text(&client, "#session-title", &empty).await;
    until_text(&client, "#fatigue", "Fatigue —").await;
    until_text(&client, "#wakefulness", "Wakefulness —").await;
    until_text(
        &client,
        "#indicator-source",
        "no live sample and none recorded",
    )
    .await;
    let classes = client
        .execute(
            "return [document.getElementById('fatigue').className, document.getElementById('wakefulness').className]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(classes, json!(["metric c-grey", "metric c-grey"]));

    // Once this server may open the session again, the live sample is back.
    rig.store()
        .lease_release(&SessionId::new(&id).unwrap(), "elsewhere-owner")
        .await
        .unwrap();
    client.goto(&rig.url(&format!("/#/s/{id}"))).await.unwrap();
    until_text(&client, "#session-title", &id).await;
    let context: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    let live = &context["metrics"];
    let expected = match live["fatigueValue"].as_f64() {
        Some(value) => format!(
            "Fatigue {value:.1}% · {}",
            live["fatigue"].as_str().unwrap()
        ),
        None => "Fatigue uncalibrated".to_owned(),
    };
    until_text(&client, "#fatigue", &expected).await;
    eventually("the live sample's source", || async {
        let source = client
            .execute(
                "return document.getElementById('indicator').dataset.source",
                vec![],
            )
            .await
            .ok()?;
        (source == json!("live")).then_some(())
    })
    .await;
    assert_eq!(
        client
            .execute(
                "return document.getElementById('indicator-source').hidden",
                vec![],
            )
            .await
            .unwrap(),
        json!(true)
    );
    client.close().await.unwrap();
    drop(driver);
}

/// Whether the page fits its viewport: `[scrollWidth, innerWidth]`.
async fn widths(client: &Client) -> (u64, u64) {
    let widths = client
        .execute(
            "return [document.scrollingElement.scrollWidth, window.innerWidth]",
            vec![],
        )
        .await
        .unwrap();
    (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap())
}

/// The elements wider than the viewport's right edge, for a failure message.
async fn overflowing(client: &Client) -> Value {
    client
        .execute(
            "return [...document.querySelectorAll('body *')].filter((node) => node.getBoundingClientRect().right > window.innerWidth + 0.5 && node.getClientRects().length > 0).slice(0, 8).map((node) => node.tagName + '#' + node.id + '.' + node.className)",
            vec![],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_layout_at_phone_width_and_in_dark_mode_nothing_overflows() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    let answer = format!(
        "A long answer with a long word {} and more text.",
        "x".repeat(120)
    );
    rig.fake.respond_with(move |_| Reply::text(&answer));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    prompt(&rig, &id, "A question").await;
    sse.until_idle().await;
    drop(sse);
    let driver = start_driver(&chromedriver).await;

    // A phone, 390×844: one column, the panel collapsed behind its toggle.
    let client = browser_with(&driver, &chromium, &[], Some((390, 844))).await;
    open_in_english(&client, &rig, &id).await;
    eventually("the answer", || async {
        text_of(&client, ".message.assistant:not(.streaming) .text").await
    })
    .await;
    let (scroll, inner) = widths(&client).await;
    assert_eq!(inner, 390);
    assert!(
        scroll <= inner,
        "{scroll} > {inner}: {}",
        overflowing(&client).await
    );
    until_text(&client, "#panel-toggle", "Show budget & maintenance").await;
    screenshot(&client, "ui_phone_390.png").await;
    click(&client, "#panel-toggle").await;
    until_text(&client, "#panel-toggle", "Hide budget & maintenance").await;
    eventually("the panel's overview", || async {
        text_of(&client, "#budget-input")
            .await
            .filter(|text| text.ends_with(" tokens"))
    })
    .await;
    let (scroll, inner) = widths(&client).await;
    assert!(
        scroll <= inner,
        "{scroll} > {inner}: {}",
        overflowing(&client).await
    );
    client
        .execute("document.getElementById('panel').scrollIntoView()", vec![])
        .await
        .unwrap();
    screenshot(&client, "ui_phone_390_panel.png").await;
    client.close().await.unwrap();

    // Dark mode at 1280×800: the dark palette applies, and nothing overflows.
    let client = browser_with(
        &driver,
        &chromium,
        &[
            "--force-dark-mode",
            "--blink-settings=preferredColorScheme=0",
        ],
        None,
    )
    .await;
    open_in_english(&client, &rig, &id).await;
    let dark = client
        .execute(
            "return [matchMedia('(prefers-color-scheme: dark)').matches, getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        dark,
        json!([true, "rgb(21, 23, 26)", "rgb(230, 232, 235)"]),
        "the dark palette"
    );
    eventually("the answer", || async {
        text_of(&client, ".message.assistant:not(.streaming) .text").await
    })
    .await;
    let (scroll, inner) = widths(&client).await;
    assert!(
        scroll <= inner,
        "{scroll} > {inner}: {}",
        overflowing(&client).await
    );
    screenshot(&client, "ui_dark.png").await;
    client.close().await.unwrap();
    drop(driver);
}

/// A 1×1 PNG, base64.
const DOT_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[tokio::test(flavor = "multi_thread")]
async fn ui_a_users_inline_image_is_drawn_and_a_web_image_named_not_fetched() {
    // A vision client's images (through the gateway) are part of the user's message
    // in the chat: the inline one drawn, the one by address only named (the page
    // fetches nothing from elsewhere; its CSP allows data: images only).
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.push(Reply::text("A dot."));
    let response = rig
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "fake/model", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{DOT_PNG}")}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ]}]}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let id = response.headers()["x-ccare-session"]
        .to_str()
        .unwrap()
        .to_owned();
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;
    until_text(&client, ".message.user .text", "What is this?").await;
    let width = eventually("the inline image drawn", || async {
        client
            .execute(
                "const image = document.querySelector('.message.user img.attachment'); return image && image.complete ? image.naturalWidth : null",
                vec![],
            )
            .await
            .ok()?
            .as_u64()
    })
    .await;
    assert_eq!(width, 1, "the PNG decoded");
    assert_eq!(count_of(&client, ".message.user img.attachment").await, 1);
    until_text(
        &client,
        ".message.user .attachment-ref",
        "Image: https://example.com/cat.png",
    )
    .await;
    screenshot(&client, "ui_user_images.png").await;
    client.close().await.unwrap();
}

/// A client's retry of a message no turn answered (GW-3: the model reads it once) shows
/// in the chat as a note under the one bubble of the message, not as a second bubble.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_resent_message_is_one_bubble_and_a_note() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.push(Reply::rate_limited(1));
    rig.fake.push(Reply::text("Here."));
    let body = json!({"model": "fake/model", "user": "retrying-client",
                      "messages": [{"role": "user", "content": "Answer me"}]});
    let failed = rig.post_json("/v1/chat/completions", &body).await;
    assert_eq!(failed.status().as_u16(), 429);
    let retried = rig.post_json("/v1/chat/completions", &body).await;
    assert_eq!(retried.status().as_u16(), 200);
    let id = retried.headers()["x-ccare-session"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(failed.headers()["x-ccare-session"], id.as_str());
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;
    until_text(&client, ".message.assistant .text", "Here.").await;
    assert_eq!(count_of(&client, ".message.user").await, 1);
    until_text(&client, ".message.user .text", "Answer me").await;
    until_text(
        &client,
        ".row.resent",
        "You sent the message again (a retry); the model reads it once.",
    )
    .await;
    screenshot(&client, "ui_resent_message.png").await;
    client.close().await.unwrap();
}

/// H-STORE-6 in the browser: when a store error fences the open session, the chat
/// says so and how to go on; once the store works, a message sent from the page
/// reopens the session, the page follows the new actor by itself (its event stream
/// reconnects from its last event) and shows the answer, and the warning goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_fenced_session_says_so_and_a_message_from_the_page_reopens_it() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start_with(crate::rig::RigOptions {
        failing: true,
        ..crate::rig::RigOptions::default()
    })
    .await;
    let store = rig.failing.clone().expect("the rig serves a failing store");
    let id = create_session(&rig).await;
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;
    store.fail(
        ccare_store::testing::Fault::appends("disk full").containing("\"assistant/message\""),
    );
    rig.fake.push(Reply::text("Never stored"));
    send_message(&client, "First try").await;
    until_text(
        &client,
        "#chat-error",
        "This session stopped after a store error (store append failed: disk full). Sending a message reopens it from the store.",
    )
    .await;
    // The answer that streamed was never stored: it is not left on the page.
    eventually("the unstored answer gone", || async {
        (count_of(&client, ".message.assistant").await == 0).then_some(())
    })
    .await;
    screenshot(&client, "ui_fenced_session.png").await;
    store.heal();
    rig.fake.push(Reply::text("Back again"));
    send_message(&client, "Second try").await;
    until_text(
        &client,
        ".message.assistant:not(.streaming) .text",
        "Back again",
    )
    .await;
    eventually("the warning gone", || async {
        let hidden = client
            .execute(
                "return document.getElementById('chat-error').hidden",
                vec![],
            )
            .await
            .ok()?;
        (hidden == json!(true)).then_some(())
    })
    .await;
    let users: Vec<String> = client
        .execute(
            "return [...document.querySelectorAll('.message.user .text')].map((node) => node.textContent)",
            vec![],
        )
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|text| text.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users, ["First try", "Second try"]);
    // The repair's note on the fenced turn; the chart read the session all along.
    until_text(
        &client,
        ".stop-row .stop",
        "interrupted: the process ended or a store error stopped this turn",
    )
    .await;
    let chart_error = client
        .execute(
            "return document.getElementById('chart-error').hidden",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        chart_error,
        json!(true),
        "the chart could not read the session"
    );
    screenshot(&client, "ui_fenced_session_reopened.png").await;
    client.close().await.unwrap();
}
