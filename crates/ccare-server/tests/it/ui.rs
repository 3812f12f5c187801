//! The web UI (issue 16; watch-rules-ui.md UI-1..UI-5, UI-7, KD-2, items 1 and 8): the
//! pages and assets over plain HTTP, then scenarios in a real headless chromium driven
//! through chromedriver (`fantoccini`) against the rig's real server.
//!
//! The browser tests need Debian's `chromium` and `chromium-driver` (`scripts/test.sh`
//! installs them). Without them they fail when `CI` is set and are skipped with a note
//! otherwise. Their screenshots go to `target/ui-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccare_fake_openai::{Reply, Script};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::events::{Sse, create_session, prompt};
use crate::rig::{Rig, error_of};

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_the_app_sends_a_browser_without_a_login_to_the_login_page_and_serves_its_assets() {
    let rig = Rig::start().await;
    let client = no_redirects();

    let app = client.get(rig.url("/")).send().await.unwrap();
    assert_eq!(app.status().as_u16(), 303);
    assert_eq!(header(&app, "location").as_deref(), Some("/login"));

    let login = client.get(rig.url("/login")).send().await.unwrap();
    assert_eq!(login.status().as_u16(), 200);
    assert_eq!(
        header(&login, "content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(
        header(&login, "content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    assert!(login.text().await.unwrap().contains("id=\"login-form\""));
    for (path, content_type) in [
        ("/login/login.js", "text/javascript; charset=utf-8"),
        ("/login/style.css", "text/css; charset=utf-8"),
    ] {
        let asset = client.get(rig.url(path)).send().await.unwrap();
        assert_eq!(asset.status().as_u16(), 200, "{path}");
        assert_eq!(
            header(&asset, "content-type").as_deref(),
            Some(content_type)
        );
    }
    // The login page's route serves its own two files, not the app's.
    let (status, code, _) =
        error_of(client.get(rig.url("/login/app.js")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not-found"));

    // The app's assets need a login.
    let (status, code, _) = error_of(client.get(rig.url("/ui/app.js")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    for (path, content_type) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/chat.js", "text/javascript; charset=utf-8"),
        ("/ui/indicator.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
    ] {
        let asset = rig.get(path).await;
        assert_eq!(asset.status().as_u16(), 200, "{path}");
        assert_eq!(
            header(&asset, "content-type").as_deref(),
            Some(content_type)
        );
        assert_eq!(
            header(&asset, "x-content-type-options").as_deref(),
            Some("nosniff")
        );
    }
    let (status, code, message) = error_of(rig.get("/ui/nope.js").await).await;
    assert_eq!(
        (status, code.as_str(), message.as_str()),
        (404, "not-found", "no UI file nope.js")
    );

    // A logged-in browser gets the app at `/`, and `/login` sends it there.
    let cookie = rig
        .client
        .post(rig.url("/api/auth/session"))
        .json(&json!({"token": rig.token}))
        .send()
        .await
        .unwrap();
    assert_eq!(cookie.status().as_u16(), 200);
    let cookie = header(&cookie, "set-cookie").unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let app = client
        .get(rig.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(app.status().as_u16(), 200);
    assert_eq!(
        header(&app, "content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(app.text().await.unwrap().contains("src=\"/ui/app.js\""));
    let login = client
        .get(rig.url("/login"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303);
    assert_eq!(header(&login, "location").as_deref(), Some("/"));
}

/// The first of `names` found on `PATH` or as an absolute path.
pub(crate) fn program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        let direct = Path::new(name);
        if direct.is_absolute() {
            return direct.is_file().then(|| direct.to_path_buf());
        }
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// chromedriver, killed when dropped.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver on a free loopback port and waits until it listens.
pub(crate) async fn start_driver(chromedriver: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not start listening"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver
}

/// Headless chromium at 1280×800 through `driver`.
pub(crate) async fn browser(driver: &Driver, chromium: &Path) -> Client {
    browser_with(driver, chromium, &[], None).await
}

/// Headless chromium through `driver` with `extra` command-line switches, at 1280×800,
/// or as a phone of `phone` = (width, height) CSS pixels (chromedriver's mobile
/// emulation: that viewport, touch, a phone's user agent).
pub(crate) async fn browser_with(
    driver: &Driver,
    chromium: &Path,
    extra: &[&str],
    phone: Option<(u32, u32)>,
) -> Client {
    let mut args = vec![
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1280,800",
    ];
    args.extend_from_slice(extra);
    let mut options = json!({ "binary": chromium, "args": args });
    if let Some((width, height)) = phone {
        options["mobileEmulation"] = json!({
            "deviceMetrics": { "width": width, "height": height, "pixelRatio": 2.0, "touch": true },
        });
    }
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".to_owned(), options);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .unwrap()
}

/// Polls `probe` until it returns `Some`, or fails naming `what`.
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the first element matching `css`, if there is one.
pub(crate) async fn text_of(client: &Client, css: &str) -> Option<String> {
    let element = client.find(Locator::Css(css)).await.ok()?;
    element.text().await.ok()
}

/// The class attribute of the element matching `css`.
pub(crate) async fn class_of(client: &Client, css: &str) -> String {
    let element = client.find(Locator::Css(css)).await.unwrap();
    element.attr("class").await.unwrap().unwrap_or_default()
}

/// What the indicator must show for one metric of `GET …/context`: its text and colour
/// class (UI-1).
pub(crate) fn expected_metric(
    label: &str,
    value: &Value,
    level: &str,
    colours: &[(&str, &str)],
) -> (String, String) {
    match (
        value.as_f64(),
        colours.iter().find(|(name, _)| *name == level),
    ) {
        (Some(value), Some((_, colour))) => (
            format!("{label} {value:.1}% · {level}"),
            format!("metric {colour}"),
        ),
        _ => (format!("{label} uncalibrated"), "metric c-grey".to_owned()),
    }
}

/// Where the screenshots go: `target/ui-screenshots/`.
pub(crate) fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("ui-screenshots")
}

/// chromium and chromedriver, or `None` (with a note; a failure when `CI` is set).
pub(crate) fn browser_programs() -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(chromedriver)) = (
        program(&["chromium", "chromium-browser", "/usr/lib/chromium/chromium"]),
        program(&["chromedriver", "/usr/lib/chromium/chromedriver"]),
    ) else {
        let note = "the browser test needs chromium and chromedriver: apt-get install -y --no-install-recommends chromium chromium-driver (scripts/test.sh does)";
        assert!(std::env::var_os("CI").is_none(), "{note}");
        eprintln!("skipped: {note}");
        return None;
    };
    Some((chromium, chromedriver))
}

/// Opens `/` without a login (the login page shows), logs in with the rig's token and
/// waits for the app.
pub(crate) async fn log_in(client: &Client, rig: &Rig) {
    client.goto(&rig.url("/")).await.unwrap();
    assert_eq!(client.current_url().await.unwrap().path(), "/login");
    client
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(&rig.token)
        .await
        .unwrap();
    client
        .find(Locator::Id("login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_element(client, Locator::Id("new-session")).await;
    assert_eq!(client.current_url().await.unwrap().path(), "/");
}

/// Waits up to 20 s for the element `locator` finds. A lookup that the page's own
/// navigation aborts (chromedriver's "aborted by navigation", as after the login's
/// redirect or a reload) is retried like one that found nothing yet.
pub(crate) async fn wait_for_element(
    client: &Client,
    locator: Locator<'_>,
) -> fantoccini::elements::Element {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.find(locator).await {
            Ok(element) => return element,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("no element {locator:?} within 20 s: {error}"),
        }
    }
}

/// Saves a PNG of the page as `target/ui-screenshots/{name}`.
pub(crate) async fn screenshot(client: &Client, name: &str) {
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(dir.join(name), png).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_1_in_a_browser_log_in_start_a_session_see_the_answer_stream_and_the_indicator_match_the_context()
 {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    // The answer streams in two parts with a pause between, so the page is seen
    // showing the first part before the committed message replaces it.
    rig.fake.push(Reply::Chunks(
        Script::new()
            .text("Streaming ")
            .delay_ms(1500)
            .text("answer from the fake")
            .finish("stop"),
    ));
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;

    // Not logged in: `/` shows the login page; the token logs in.
    log_in(&client, &rig).await;

    // A new session opens, and is listed.
    client
        .find(Locator::Id("new-session"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let id = eventually("the session to open", || async {
        let fragment = client.current_url().await.ok()?.fragment()?.to_owned();
        fragment.strip_prefix("/s/").map(str::to_owned)
    })
    .await;
    let listed_css = format!("button.session[data-id=\"{id}\"] .session-id");
    let listed = eventually("the session in the list", || text_of(&client, &listed_css)).await;
    assert_eq!(listed, id);
    assert_eq!(
        text_of(&client, "#session-title").await.as_deref(),
        Some(id.as_str())
    );

    // A prompt: the user's message, then the answer streaming, then committed.
    send_message(&client, "Say something").await;
    let user = eventually("the user message", || {
        text_of(&client, ".message.user .text")
    })
    .await;
    assert_eq!(user, "Say something");
    let partial = eventually("the streamed first part", || {
        text_of(&client, ".message.assistant.streaming .text")
    })
    .await;
    assert_eq!(partial, "Streaming ");
    let steer = text_of(&client, "#send").await;
    assert_eq!(
        steer.as_deref(),
        Some("Steer"),
        "a running turn's input steers"
    );
    let answer = eventually("the committed answer", || async {
        let text = text_of(&client, ".message.assistant:not(.streaming) .text").await?;
        Some(text)
    })
    .await;
    assert_eq!(answer, "Streaming answer from the fake");
    eventually("the session to go idle", || async {
        let state = text_of(&client, "#session-state").await?;
        (state == "idle").then_some(())
    })
    .await;
    assert_eq!(text_of(&client, "#send").await.as_deref(), Some("Send"));

    // UI-1: the indicator says what GET …/context says, text and colour.
    let context: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    let metrics = &context["metrics"];
    let fatigue = expected_metric(
        "Fatigue",
        &metrics["fatigueValue"],
        metrics["fatigue"].as_str().unwrap(),
        &[
            ("normal", "c-green"),
            ("elevated", "c-blue"),
            ("high", "c-orange"),
            ("very-high", "c-red"),
        ],
    );
    let wakefulness = expected_metric(
        "Wakefulness",
        &metrics["wakefulnessValue"],
        metrics["wakefulness"].as_str().unwrap(),
        &[
            ("low", "c-orange"),
            ("normal", "c-blue"),
            ("elevated", "c-teal"),
            ("high", "c-green"),
        ],
    );
    assert!(
        metrics["fatigueValue"].is_number(),
        "the rig's model has a context window: the sample is calibrated ({context})"
    );
    let shown = eventually("the indicator to show the sample", || async {
        let shown = (
            text_of(&client, "#fatigue").await?,
            text_of(&client, "#wakefulness").await?,
        );
        (shown == (fatigue.0.clone(), wakefulness.0.clone())).then_some(shown)
    })
    .await;
    assert_eq!(shown, (fatigue.0.clone(), wakefulness.0.clone()));
    assert_eq!(class_of(&client, "#fatigue").await, fatigue.1);
    assert_eq!(class_of(&client, "#wakefulness").await, wakefulness.1);

    screenshot(&client, "ui_1_chat_and_indicator.png").await;
    client.close().await.unwrap();
    drop(driver);
}

/// A token count as the panel writes it: `12,345 tokens`.
pub(crate) fn tokens(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    format!("{out} tokens")
}

/// How many elements match `css`.
pub(crate) async fn count_of(client: &Client, css: &str) -> usize {
    client.find_all(Locator::Css(css)).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_2_ui_7_ui_8_the_panel_matches_the_context_the_chart_has_one_marker_per_point_and_zh_renders()
 {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.respond_with(|_| Reply::text("noted"));
    // Two turns over the API: two request boundaries, so two points.
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    for text in ["First question", "Second question"] {
        prompt(&rig, &id, text).await;
        sse.until_idle().await;
    }
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    // English, whatever the browser's language.
    client.goto(&rig.url("/login")).await.unwrap();
    client
        .execute("window.localStorage.setItem('ccare.locale', 'en')", vec![])
        .await
        .unwrap();
    log_in(&client, &rig).await;
    client.goto(&rig.url(&format!("/#/s/{id}"))).await.unwrap();

    // UI-2: the overview says what GET …/context says.
    let context: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    let input = context["inputTokens"].as_u64().unwrap();
    let hard = context["budget"]["hardInput"].as_u64().unwrap();
    let soft = context["budget"]["softInput"].as_u64().unwrap();
    let expected = (tokens(input), tokens(hard));
    let shown = eventually("the panel to show the context", || async {
        let shown = (
            text_of(&client, "#budget-input").await?,
            text_of(&client, "#budget-hard").await?,
        );
        (shown == expected).then_some(shown)
    })
    .await;
    assert_eq!(shown, expected);
    // The replayed session's last turn ended: it is idle, not "running".
    let state = eventually("the replayed session to read idle", || async {
        let state = text_of(&client, "#session-state").await?;
        (state == "idle").then_some(state)
    })
    .await;
    assert_eq!(state, "idle");
    assert_eq!(text_of(&client, "#send").await.as_deref(), Some("Send"));
    assert_eq!(
        text_of(&client, "#budget-use").await.as_deref(),
        Some(format!("{:.1}%", input as f64 / hard as f64 * 100.0).as_str())
    );
    assert_eq!(
        text_of(&client, "#panel-title").await.as_deref(),
        Some("Budget & maintenance")
    );
    // The details (soft threshold among them) open on request.
    assert_eq!(text_of(&client, "#budget-soft").await.as_deref(), Some(""));
    client
        .find(Locator::Css("#budget-details > summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(
        text_of(&client, "#budget-soft").await.as_deref(),
        Some(tokens(soft).as_str())
    );
    // The maintenance list: nothing ran, and the page says so.
    let actions: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={id}&limit=20"))
        .await;
    assert_eq!(actions["total"], json!(0));
    let empty = eventually("the maintenance list", || {
        text_of(&client, "#actions .empty")
    })
    .await;
    assert_eq!(empty, "No maintenance yet");
    assert_eq!(
        text_of(&client, "#actions-range").await.as_deref(),
        Some("0–0 of 0")
    );
    screenshot(&client, "ui_2_panel.png").await;

    // UI-7: one input marker per series point, one % marker per known value, and the
    // hard limit and soft threshold drawn.
    let series: Value = rig
        .get_json(&format!("/api/sessions/{id}/context/series"))
        .await;
    let points = series["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{series}");
    let markers = eventually("the chart's markers", || async {
        let markers = count_of(&client, "#chart svg circle.pt-input").await;
        (markers == points.len()).then_some(markers)
    })
    .await;
    assert_eq!(markers, points.len());
    let known = |field: &str| {
        points
            .iter()
            .filter(|point| point[field].is_number())
            .count()
    };
    assert_eq!(
        count_of(&client, "#chart svg circle.pt-fatigue").await,
        known("fatiguePct")
    );
    assert_eq!(
        count_of(&client, "#chart svg circle.pt-wakefulness").await,
        known("wakefulnessPct")
    );
    let uncalibrated = points
        .iter()
        .filter(|point| !point["fatiguePct"].is_number() || !point["wakefulnessPct"].is_number())
        .count();
    assert_eq!(count_of(&client, "#chart svg rect.gap").await, uncalibrated);
    assert_eq!(count_of(&client, "#chart svg polyline.line-hard").await, 1);
    assert_eq!(count_of(&client, "#chart svg polyline.line-soft").await, 1);
    assert_eq!(count_of(&client, "#chart svg polyline.line-input").await, 1);
    client
        .execute(
            "document.getElementById('chart-title').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_7_chart.png").await;

    // Item 8: the switch turns the page Chinese, and a reload keeps it.
    client
        .find(Locator::Id("locale"))
        .await
        .unwrap()
        .select_by_value("zh")
        .await
        .unwrap();
    let title = eventually("the Chinese panel title", || async {
        let title = text_of(&client, "#panel-title").await?;
        (title == "预算与维护").then_some(title)
    })
    .await;
    assert_eq!(title, "预算与维护");
    client.refresh().await.unwrap();
    let title = eventually("the Chinese title after a reload", || async {
        let title = text_of(&client, "#panel-title").await?;
        (title == "预算与维护").then_some(title)
    })
    .await;
    assert_eq!(title, "预算与维护");
    assert_eq!(
        text_of(&client, "#new-session").await.as_deref(),
        Some("新建会话")
    );
    let label = eventually("the Chinese overview", || async {
        let label = text_of(&client, "#budget-input").await?;
        label.ends_with(" 个令牌").then_some(label)
    })
    .await;
    assert_eq!(
        label,
        format!("{} 个令牌", tokens(input).trim_end_matches(" tokens"))
    );
    screenshot(&client, "ui_8_zh.png").await;
    client.close().await.unwrap();
    drop(driver);
}

/// A browser at `/` logged in, in English, with session `id` open.
pub(crate) async fn open_in_english(client: &Client, rig: &Rig, id: &str) {
    client.goto(&rig.url("/login")).await.unwrap();
    client
        .execute("window.localStorage.setItem('ccare.locale', 'en')", vec![])
        .await
        .unwrap();
    log_in(client, rig).await;
    client.goto(&rig.url(&format!("/#/s/{id}"))).await.unwrap();
    eventually("the session to open", || async {
        let title = text_of(client, "#session-title").await?;
        (title == id).then_some(())
    })
    .await;
}

/// Clicks the element matching `css`.
pub(crate) async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Types `text` into the chat's input and presses Send.
pub(crate) async fn send_message(client: &Client, text: &str) {
    let input = client.find(Locator::Id("input")).await.unwrap();
    input.send_keys(text).await.unwrap();
    click(client, "#send").await;
}

/// Waits until the element matching `css` reads `expected`.
pub(crate) async fn until_text(client: &Client, css: &str, expected: &str) {
    let what = format!("{css} to read {expected:?}");
    let shown = eventually(&what, || async {
        let text = text_of(client, css).await?;
        (text == expected).then_some(text)
    })
    .await;
    assert_eq!(shown, expected);
}

/// The stream watch's `abort` of a repeated line in a rules snapshot.
fn line_repeat_abort(snapshot: &Value) -> &Value {
    snapshot["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|source| source["sourceId"] == "stream-watch")
        .and_then(|source| {
            source["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|rule| rule["id"] == "stream-line-repeat")
        })
        .and_then(|rule| {
            rule["actions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|action| action["id"] == "abort")
        })
        .unwrap_or_else(|| panic!("no stream-line-repeat.abort in {snapshot}"))
}

/// The rule row of the stream watch's repeated-line rule.
const LINE_REPEAT: &str = "li.rule[data-rule=\"stream-watch/stream-line-repeat\"]";

#[tokio::test(flavor = "multi_thread")]
async fn ui_4_a_rule_toggle_is_saved_after_the_ack_survives_a_reload_and_a_concurrent_change_shows_409()
 {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    let id = create_session(&rig).await;
    let path = format!("/context-care/rules?sessionId={id}");
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;

    click(&client, "#tab-rules").await;
    until_text(&client, "#panel-title", "Session rules").await;
    let abort = format!("{LINE_REPEAT} li.rule-action[data-action=\"abort\"] input");
    let checkbox = wait_for_element(&client, Locator::Css(&abort)).await;
    assert!(
        checkbox.is_selected().await.unwrap(),
        "abort is on by default"
    );
    assert_eq!(
        text_of(
            &client,
            &format!("{LINE_REPEAT} li.rule-action[data-action=\"abort\"] .action-reason")
        )
        .await
        .as_deref(),
        Some("enabled")
    );
    // Search: a needle no rule has empties the list; the rule's id finds it again.
    let search = client.find(Locator::Id("rules-search")).await.unwrap();
    search.send_keys("no-such-rule-anywhere").await.unwrap();
    until_text(&client, "#rules .empty", "No rule matches the search").await;
    search.clear().await.unwrap();
    search.send_keys("line-repeat").await.unwrap();
    let rows = eventually("the searched rule", || async {
        let rows = count_of(&client, "#rules li.rule").await;
        (rows > 0 && count_of(&client, LINE_REPEAT).await == 1).then_some(rows)
    })
    .await;
    assert_eq!(
        rows,
        count_of(&client, "#rules li.rule[data-rule*=\"line-repeat\"]").await
    );

    // The toggle: "Saved" once the PATCH answered, and the store has it.
    click(&client, &abort).await;
    until_text(&client, "#rules-status", "Saved").await;
    let after: Value = rig.get_json(&path).await;
    assert_eq!(after["revision"], 1);
    assert_eq!(line_repeat_abort(&after)["selected"], false);
    assert!(
        text_of(&client, "#rules-error")
            .await
            .unwrap_or_default()
            .is_empty()
    );

    // A reload shows it off.
    client.refresh().await.unwrap();
    click(&client, "#tab-rules").await;
    let checkbox = wait_for_element(&client, Locator::Css(&abort)).await;
    assert!(
        !checkbox.is_selected().await.unwrap(),
        "the toggle survived the reload"
    );
    until_text(&client, "#rules-meta", "revision 1").await;
    screenshot(&client, "ui_4_rules_saved.png").await;

    // A concurrent change: the page is hidden (its polling pauses), the rule is paused
    // from elsewhere against revision 1, and the page, still at revision 1, toggles.
    client
        .execute(
            "Object.defineProperty(document, 'hidden', {value: true, configurable: true})",
            vec![],
        )
        .await
        .unwrap();
    let paused = rig
        .patch_json(
            &path,
            &json!({"revision": 1, "sourceId": "stream-watch",
                    "ruleId": "stream-line-repeat", "paused": true}),
        )
        .await;
    assert_eq!(paused.status().as_u16(), 200);
    // Longer than one poll: a hidden page does not reload.
    tokio::time::sleep(Duration::from_millis(5600)).await;
    assert_eq!(
        text_of(&client, "#rules-meta").await.as_deref(),
        Some("revision 1")
    );
    click(&client, &abort).await;
    until_text(&client, "#rules-error", "Changed elsewhere, reloaded").await;
    until_text(&client, "#rules-meta", "revision 2").await;
    until_text(&client, &format!("{LINE_REPEAT} .rule-state"), "paused").await;
    let checkbox = client.find(Locator::Css(&abort)).await.unwrap();
    assert!(
        !checkbox.is_selected().await.unwrap(),
        "the reloaded snapshot: still off"
    );
    let reread: Value = rig.get_json(&path).await;
    assert_eq!(reread["revision"], 2, "the stale toggle changed nothing");
    assert_eq!(line_repeat_abort(&reread)["selected"], false);
    screenshot(&client, "ui_4_rules_409.png").await;

    // Visible again: a poll reloads, and the save error stays until a save succeeds.
    client
        .execute(
            "Object.defineProperty(document, 'hidden', {value: false, configurable: true}); document.dispatchEvent(new Event('visibilitychange'))",
            vec![],
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5600)).await;
    assert_eq!(
        text_of(&client, "#rules-error").await.as_deref(),
        Some("Changed elsewhere, reloaded")
    );
    click(&client, &format!("{LINE_REPEAT} .rule-reset")).await;
    until_text(&client, "#rules-status", "Saved").await;
    assert!(
        text_of(&client, "#rules-error")
            .await
            .unwrap_or_default()
            .is_empty()
    );
    let reset: Value = rig.get_json(&path).await;
    assert_eq!(reset["revision"], 3);
    assert_eq!(line_repeat_abort(&reset)["selected"], true);
    until_text(&client, &format!("{LINE_REPEAT} .rule-state"), "active").await;
    client.close().await.unwrap();
    drop(driver);
}

/// A looping answer: one line 1000 times, in small deltas (as `management.rs` scripts it).
fn looping() -> Script {
    let text = "same line again\n".repeat(1000);
    let chars: Vec<char> = text.chars().collect();
    let mut script = Script::new();
    for chunk in chars.chunks(4) {
        script = script.text(chunk.iter().collect::<String>());
    }
    script.finish("stop")
}

/// The length of `GET …/export` in bytes and the events it holds.
async fn exported(rig: &Rig, id: &str) -> (usize, Vec<Value>) {
    let response = rig.get(&format!("/api/sessions/{id}/export")).await;
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let events = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        // The first line is the session's header; the events carry a seq.
        .filter(|line| line.get("seq").is_some())
        .collect();
    (text.len(), events)
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_2_ui_3_a_loop_is_stopped_by_stream_watch_its_notice_is_located_and_the_session_forks_and_exports()
 {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    rig.fake.push(looping());
    rig.fake.respond_with(|_| Reply::text("Back on track."));
    let id = create_session(&rig).await;
    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;

    // KD-2: the looping answer is cut, and the chat says the stream watch stopped it.
    send_message(&client, "Write it").await;
    let stop = eventually("the stop note", || {
        text_of(&client, ".message.assistant.stopped .stop")
    })
    .await;
    let (_, events) = exported(&rig, &id).await;
    let end = events
        .iter()
        .find(|event| event["type"] == "turn/end" && event["data"]["reason"]["kind"] == "aborted")
        .unwrap_or_else(|| panic!("no aborted turn in {events:?}"));
    let cause = &end["data"]["reason"]["cause"];
    assert_eq!(cause["plugin"], "stream-watch", "{end}");
    assert_eq!(
        stop,
        format!(
            "stopped by stream watch: {}",
            cause["reason"].as_str().unwrap()
        )
    );
    let cut = text_of(&client, ".message.assistant.stopped .text")
        .await
        .unwrap();
    assert!(cut.starts_with("same line again"), "{cut}");
    eventually("the session to go idle", || async {
        let state = text_of(&client, "#session-state").await?;
        (state == "idle" && rig.fake.remaining() == 0).then_some(())
    })
    .await;
    screenshot(&client, "kd_2_stopped_by_stream_watch.png").await;

    // UI-3: the stream watch's notice in the prompts tab, with its source and exact body.
    let page: Value = rig
        .get_json(&format!("/context-care/prompts?sessionId={id}&limit=20"))
        .await;
    let notice = page["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["publisher"] == "stream-watch" && entry["placement"] == "surface")
        .unwrap_or_else(|| panic!("no stream-watch notice in {page}"))
        .clone();
    let seq = notice["seq"].as_u64().unwrap();
    click(&client, "#tab-prompts").await;
    until_text(&client, "#panel-title", "Prompts").await;
    let row = format!("#prompts li.prompt[data-seq=\"{seq}\"]");
    until_text(&client, &format!("{row} .prompt-publisher"), "stream-watch").await;
    assert_eq!(
        text_of(&client, &format!("{row} .prompt-kind"))
            .await
            .as_deref(),
        notice["kind"].as_str()
    );
    assert_eq!(
        text_of(&client, &format!("{row} .prompt-label"))
            .await
            .as_deref(),
        Some(
            notice["label"]
                .as_str()
                .unwrap_or(notice["kind"].as_str().unwrap())
        )
    );
    assert_eq!(
        text_of(&client, &format!("{row} .prompt-trigger"))
            .await
            .as_deref(),
        Some(notice["trigger"].as_str().unwrap_or("–"))
    );
    let body: String = client
        .execute(
            &format!("return document.querySelector('{row} .prompt-body').textContent"),
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(body, notice["body"].as_str().unwrap(), "the exact body");
    assert_eq!(
        text_of(&client, "#prompts-range").await,
        Some(format!(
            "1–{} of {}",
            page["prompts"].as_array().unwrap().len(),
            page["total"]
        ))
    );

    // Locate: the chat scrolls to that exact message (not a neighbour) and marks it.
    client
        .execute(
            "document.getElementById('conversation').scrollTop = 0",
            vec![],
        )
        .await
        .unwrap();
    click(&client, &format!("{row} .prompt-locate")).await;
    until_text(
        &client,
        "#prompts-status",
        &format!("Shown in the chat: seq {seq}"),
    )
    .await;
    let located: Value = client
        .execute(
            "const nodes = [...document.querySelectorAll('#conversation .located')];
             const list = document.getElementById('conversation').getBoundingClientRect();
             return nodes.map((node) => {
               const box = node.getBoundingClientRect();
               return [node.dataset.seq, box.bottom > list.top && box.top < list.bottom];
             });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(located, json!([[seq.to_string(), true]]));
    screenshot(&client, "ui_3_prompt_located.png").await;

    // The notice's *details* link opens the prompts tab at the page holding it.
    click(&client, "#tab-budget").await;
    click(
        &client,
        &format!("#conversation > [data-seq=\"{seq}\"] .notice-details"),
    )
    .await;
    until_text(&client, "#panel-title", "Prompts").await;
    let selected = eventually("the selected entry", || async {
        let element = client
            .find(Locator::Css("#prompts li.prompt.selected"))
            .await
            .ok()?;
        element.attr("data-seq").await.ok()?
    })
    .await;
    assert_eq!(selected, seq.to_string());

    // Export: the JSONL downloads through a Blob, as many bytes as the API sends.
    click(&client, "#export").await;
    let (bytes, events) = exported(&rig, &id).await;
    until_text(
        &client,
        "#chat-status",
        &format!("Exported {id}.jsonl ({bytes} bytes)"),
    )
    .await;

    // Fork here: at the end of the first turn; the new session opens with that history.
    let first_end = events
        .iter()
        .find(|event| event["type"] == "turn/end")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    click(&client, &format!(".fork[data-seq=\"{first_end}\"]")).await;
    let forked = eventually("the fork to open", || async {
        let fragment = client.current_url().await.ok()?.fragment()?.to_owned();
        let forked = fragment.strip_prefix("/s/")?.to_owned();
        (forked != id).then_some(forked)
    })
    .await;
    until_text(
        &client,
        "#chat-status",
        &format!("Forked from {id} after seq {first_end}"),
    )
    .await;
    let summary: Value = rig.get_json(&format!("/api/sessions/{forked}")).await;
    assert_eq!(summary["parent"], id.as_str(), "{summary}");
    let (_, seeded) = exported(&rig, &forked).await;
    // The fork holds the source's events 0..=seq, then its `session/end-seed`.
    let inherited = usize::try_from(first_end + 1).unwrap();
    let kinds = |events: &[Value]| -> Vec<(Value, Value)> {
        events
            .iter()
            .map(|event| (event["seq"].clone(), event["type"].clone()))
            .collect()
    };
    assert_eq!(
        kinds(&seeded[..inherited]),
        kinds(&events[..inherited]),
        "{seeded:?}"
    );
    assert_eq!(seeded[inherited]["type"], "session/end-seed", "{seeded:?}");
    eventually("the forked chat to show the cut answer", || async {
        let text = text_of(&client, ".message.assistant .text").await?;
        text.starts_with("same line again").then_some(())
    })
    .await;
    screenshot(&client, "ui_fork_and_export.png").await;
    client.close().await.unwrap();
    drop(driver);
}

/// CC-EXT-3 in a browser: a deep rest the model asks for (the scripting of
/// `undo::cc_ext_3_a_deep_rest_is_shown_then_undone_once_over_http`) shadows the first
/// prompt; the chat's checkpoint row opens what it replaced beside its text, Undo makes
/// the prompt live again and the next request grows back; a second Undo is refused.
#[tokio::test(flavor = "multi_thread")]
async fn cc_ext_3_ui_a_checkpoint_row_opens_its_diff_and_undo_restores_the_history_once() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let rig = Rig::start().await;
    let recovery = format!("search the log for 'fox'. {}", "r".repeat(1000));
    let arguments = json!({"note": "n".repeat(1200), "deep": true, "recovery": recovery});
    rig.fake.push(Reply::text("read it"));
    rig.fake.push(Reply::Chunks(
        Script::new()
            .tool_call(
                0,
                Some("call_rest"),
                Some("context_rest"),
                arguments.to_string(),
            )
            .finish("tool_calls"),
    ));
    rig.fake.push(Reply::text("continuing"));
    let id = create_session(&rig).await;
    let mut sse = Sse::open(&rig, &format!("/api/sessions/{id}/events"), None).await;
    let first = format!(
        "Turn 0: please read this. {}",
        "The quick brown fox jumps over the lazy dog while the parser reads its input. "
            .repeat(100)
    );
    prompt(&rig, &id, &first).await;
    sse.until_idle().await;
    prompt(&rig, &id, "now rest deeply").await;
    sse.until_idle().await;
    let page: Value = rig
        .get_json(&format!("/context-care/actions?sessionId={id}&limit=200"))
        .await;
    let deep = page["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|record| record["data"]["action"] == "deep-rest")
        .unwrap()
        .clone();
    let op = deep["data"]["operationId"].as_str().unwrap().to_owned();
    let seq = deep["data"]["replacements"][0]["newSeq"].as_u64().unwrap();
    let before: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    let before_input = before["inputTokens"].as_u64().unwrap();

    let driver = start_driver(&chromedriver).await;
    let client = browser(&driver, &chromium).await;
    open_in_english(&client, &rig, &id).await;
    let row = format!("li.checkpoint[data-seq=\"{seq}\"]");
    eventually("the checkpoint row", || async {
        text_of(&client, &row).await.map(|_| ())
    })
    .await;
    // The shadowed prompt is marked in the chat, not hidden.
    let shadowed = format!(
        "li.message.user[data-seq=\"{}\"]",
        deep["data"]["replacements"][0]["oldStartSeq"]
            .as_u64()
            .unwrap()
    );
    assert!(
        text_of(&client, &shadowed)
            .await
            .unwrap()
            .contains("Turn 0: please read this.")
    );
    assert_eq!(class_of(&client, &shadowed).await, "message user shadowed");
    click(&client, &format!("{row} summary")).await;
    let old = eventually("the replaced text", || async {
        let text = text_of(&client, &format!("{row} .diff-old")).await?;
        text.contains("Turn 0: please read this.").then_some(text)
    })
    .await;
    assert!(old.starts_with("Replaced (seq "), "{old}");
    let new = text_of(&client, &format!("{row} .diff-new")).await.unwrap();
    assert!(new.starts_with("Checkpoint text"), "{new}");
    assert!(new.contains("search the log for 'fox'."), "{new}");
    // The checkpoint text shows once in the open row: in the detail's column, not
    // again above it.
    let shown = client
        .execute(
            "return document.querySelector(arguments[0]).innerText.split(arguments[1]).length - 1",
            vec![json!(row), json!("search the log for 'fox'.")],
        )
        .await
        .unwrap();
    assert_eq!(shown, json!(1), "the checkpoint text appears once");
    let input = text_of(&client, &format!("{row} dd.detail-input"))
        .await
        .unwrap();
    assert_eq!(
        input,
        format!(
            "{} → {}",
            tokens(deep["data"]["beforeInput"].as_u64().unwrap()),
            tokens(deep["data"]["afterInput"].as_u64().unwrap())
        )
    );
    assert_eq!(
        text_of(&client, &format!("{row} dd.detail-undone")).await,
        Some("no".to_owned())
    );
    client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView()",
            vec![json!(format!("{row} .diff"))],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_checkpoint_diff.png").await;

    // Issue 16 item 7: the next request by part, one segment per category of the API,
    // in its order and with its tokens; the hard limit as a marker.
    let categories = before["categories"].as_array().unwrap();
    assert!(categories.len() >= 2, "{before}");
    let expected: Vec<Value> = categories
        .iter()
        .map(|category| json!([category["name"], category["tokens"]]))
        .collect();
    let drawn = eventually("the breakdown's segments", || async {
        let drawn = client
            .execute(
                "return [...document.querySelectorAll('#budget-breakdown rect.seg')].map((r) => [r.dataset.category, Number(r.dataset.tokens)])",
                vec![],
            )
            .await
            .unwrap();
        (drawn.as_array().is_some_and(|drawn| !drawn.is_empty())).then_some(drawn)
    })
    .await;
    assert_eq!(drawn, Value::Array(expected));
    for category in categories {
        let name = category["name"].as_str().unwrap();
        let item = format!("#budget-breakdown li.breakdown-item[data-category=\"{name}\"]");
        until_text(
            &client,
            &format!("{item} .breakdown-tokens"),
            &tokens(category["tokens"].as_u64().unwrap()),
        )
        .await;
    }
    assert_eq!(
        text_of(
            &client,
            "#budget-breakdown li[data-category=\"messages\"] .breakdown-label"
        )
        .await,
        Some("history (incl. checkpoints)".to_owned())
    );
    let hard = before["budget"]["hardInput"].as_u64().unwrap();
    let marker = client
        .execute(
            "return document.querySelector('#budget-breakdown line.hard-marker').dataset.tokens",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(marker, json!(hard.to_string()));
    assert_eq!(
        text_of(
            &client,
            "#budget-breakdown li.breakdown-hard .breakdown-tokens"
        )
        .await,
        Some(tokens(hard))
    );
    client
        .execute(
            "document.getElementById('budget-breakdown').scrollIntoView({ block: 'center' })",
            vec![],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_breakdown.png").await;

    // Issue 16 item 2: a seq no action covers says so; a shadowed seq opens the
    // compaction's row in the maintenance list, with its detail.
    let seq_box = client.find(Locator::Id("actions-seq")).await.unwrap();
    seq_box.send_keys("99999").await.unwrap();
    click(&client, "#actions-seek button[type=submit]").await;
    until_text(&client, "#actions-status", "No action covers seq 99999").await;
    let shadowed_seq = deep["data"]["replacements"][0]["oldStartSeq"]
        .as_u64()
        .unwrap();
    seq_box.clear().await.unwrap();
    seq_box.send_keys(&shadowed_seq.to_string()).await.unwrap();
    click(&client, "#actions-seek button[type=submit]").await;
    until_text(
        &client,
        "#actions-status",
        &format!("Seq {shadowed_seq} is covered by {op}"),
    )
    .await;
    let action_row = format!("li.action-row[data-operation=\"{op}\"]");
    assert_eq!(
        count_of(&client, &format!("{action_row}.found > details[open]")).await,
        1
    );
    eventually("the found row's detail", || async {
        let text = text_of(&client, &format!("{action_row} .diff-old")).await?;
        text.contains("Turn 0: please read this.").then_some(())
    })
    .await;
    let focused = client
        .execute(
            "return document.activeElement.closest('li.action-row')?.dataset.operation ?? null",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(focused, json!(op));
    // Closed again, so the chat's row is what the undo below acts on.
    click(&client, &format!("{action_row} > details > summary")).await;

    click(&client, &format!("{row} button.undo")).await;
    // The session reloads: the checkpoint row is marked undone, the prompt live again.
    let detail_path = format!("/context-care/actions/{op}?sessionId={id}");
    let undo_seq = eventually("the undo to be durable", || async {
        let detail: Value = rig.get_json(&detail_path).await;
        detail["undoneAtSeq"].as_u64()
    })
    .await;
    until_text(
        &client,
        &format!("{row} .checkpoint-state"),
        &format!("· undone (seq {undo_seq})"),
    )
    .await;
    assert!(class_of(&client, &row).await.contains("undone"));
    assert_eq!(count_of(&client, ".shadowed:not(.checkpoint)").await, 0);
    assert_eq!(class_of(&client, &shadowed).await, "message user");
    assert_eq!(count_of(&client, "li.message.user").await, 2);
    until_text(
        &client,
        "#chat-status",
        &format!("Undid {op}: the replaced messages are live again"),
    )
    .await;
    // The focus is on the line saying so (the row it came from was redrawn).
    let focused = client
        .execute("return document.activeElement.id", vec![])
        .await
        .unwrap();
    assert_eq!(focused, json!("chat-status"));
    client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView()",
            vec![json!(row)],
        )
        .await
        .unwrap();
    screenshot(&client, "ui_checkpoint_undone.png").await;
    // The next request grows back.
    let after: Value = rig.get_json(&format!("/api/sessions/{id}/context")).await;
    assert!(
        after["inputTokens"].as_u64().unwrap() > before_input,
        "{after} after {before_input}"
    );

    // A second Undo is refused with its reason.
    click(&client, &format!("{row} summary")).await;
    until_text(
        &client,
        &format!("{row} dd.detail-undone"),
        &format!("#{undo_seq}"),
    )
    .await;
    click(&client, &format!("{row} button.undo")).await;
    until_text(
        &client,
        &format!("{row} .undo-error"),
        &format!(
            "Undo refused: it was already undone — action {op} was already undone (seq {undo_seq})"
        ),
    )
    .await;
    client.close().await.unwrap();
    drop(driver);
}
