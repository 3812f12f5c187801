//! The built-in tools against real files in a temp dir and a real SQLite session
//! (spec H-TOOL-1): confinement to the workspace, size limits, atomic writes, listing,
//! and `session_search` over the raw log, shadowed events included.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ccare_agent::testing::TestHost;
use ccare_agent::tools::{
    FileLimits, ListFiles, PathPurpose, ReadFile, SessionSearch, Workspace, WriteFile,
    builtin_tools,
};
use ccare_agent::{Concurrency, Injector, Tool, ToolContext, ToolOutcome};
use ccare_core::kinds::*;
use ccare_core::*;
use ccare_llm::CancellationToken;
use ccare_session::*;
use serde_json::{Value, json};

/// 2026-12-01T03:40:05Z.
const T0: i64 = 1_796_096_405_000;

struct Fixture {
    dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    clock: ManualClock,
    session: Session,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret.txt"), "top secret").unwrap();
        let clock = ManualClock::new(T0);
        let kit = TestHost::builder("")
            .sqlite_file(dir.path().join("ccare.db"))
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let session = kit.session().await.unwrap();
        Self {
            dir,
            root,
            outside,
            clock,
            session,
        }
    }

    fn workspace(&self) -> Workspace {
        Workspace::new(self.root.clone()).unwrap()
    }

    fn context(&self, call_id: &str) -> ToolContext {
        ToolContext {
            session: self.session.clone(),
            call_id: call_id.to_owned(),
            turn: 1,
            step: 1,
            cancel: CancellationToken::new(),
            inbox: Injector::detached(),
            clock: Arc::new(self.clock.clone()),
        }
    }

    fn read(&self) -> ReadFile {
        ReadFile::new(self.workspace(), FileLimits::default())
    }

    fn write(&self) -> WriteFile {
        WriteFile::new(self.workspace(), FileLimits::default())
    }

    fn list(&self) -> ListFiles {
        ListFiles::new(self.workspace(), FileLimits::default())
    }

    async fn call(&self, tool: &dyn Tool, arguments: Value) -> ToolOutcome {
        tool.call(self.context("call-1"), arguments).await
    }

    /// Appends an event one second after the previous one.
    fn append(&self, draft: EventDraft) -> u64 {
        let seq = self.session.append(draft).unwrap().seq();
        self.clock.advance(1_000);
        seq
    }

    /// Every file and folder under the temp dir, as relative paths (for "nothing else
    /// was touched" checks).
    fn tree(&self) -> Vec<String> {
        let mut found = Vec::new();
        walk(self.dir.path(), self.dir.path(), &mut found);
        found.sort();
        found
    }
}

fn walk(base: &Path, folder: &Path, found: &mut Vec<String>) {
    for entry in fs::read_dir(folder).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let relative = path
            .strip_prefix(base)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if relative.starts_with("ccare.db") {
            continue;
        }
        let kind = entry.file_type().unwrap();
        found.push(relative);
        if kind.is_dir() {
            walk(base, &path, found);
        }
    }
}

fn text(outcome: ToolOutcome) -> String {
    match outcome {
        Ok(blocks) => match blocks.as_slice() {
            [ContentBlock::Text(block)] => block.text.clone(),
            other => panic!("expected one text block, got {other:?}"),
        },
        Err(failure) => panic!("expected success, got {failure}"),
    }
}

fn failure(outcome: ToolOutcome) -> (String, String) {
    match outcome {
        Ok(blocks) => panic!("expected a failure, got {blocks:?}"),
        Err(failure) => (failure.code, failure.message),
    }
}

fn code(outcome: ToolOutcome) -> String {
    failure(outcome).0
}

// ---------------------------------------------------------------------------------
// Confinement

#[tokio::test]
async fn h_tool_1_lexical_escapes_are_refused_by_every_file_tool() {
    let fixture = Fixture::new().await;
    let before = fixture.tree();
    let absolute = fixture.outside.join("secret.txt");
    let absolute = absolute.to_str().unwrap();
    for path in [
        "../outside/secret.txt",
        absolute,
        "a/../../outside/x",
        "..",
        "",
        "C:\\x",
    ] {
        let read = fixture.call(&fixture.read(), json!({"path": path})).await;
        assert_eq!(code(read), "PATH_OUTSIDE_WORKSPACE", "read {path:?}");
        let write = fixture
            .call(&fixture.write(), json!({"path": path, "content": "pwned"}))
            .await;
        assert_eq!(code(write), "PATH_OUTSIDE_WORKSPACE", "write {path:?}");
        let list = fixture.call(&fixture.list(), json!({"path": path})).await;
        assert_eq!(code(list), "PATH_OUTSIDE_WORKSPACE", "list {path:?}");
    }
    assert_eq!(fixture.tree(), before, "nothing was created anywhere");
    assert_eq!(
        fs::read_to_string(fixture.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    let (_, message) = failure(
        fixture
            .call(
                &fixture.write(),
                json!({"path": "a/../../x", "content": ""}),
            )
            .await,
    );
    assert_eq!(
        message,
        "`a/../../x` is refused: `..` components are not allowed; use a path relative to the \
         workspace root"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn h_tool_1_symlinked_file_leading_outside_is_refused() {
    let fixture = Fixture::new().await;
    std::os::unix::fs::symlink(
        fixture.outside.join("secret.txt"),
        fixture.root.join("link.txt"),
    )
    .unwrap();
    let before = fixture.tree();
    let read = fixture
        .call(&fixture.read(), json!({"path": "link.txt"}))
        .await;
    let (read_code, read_message) = failure(read);
    assert_eq!(read_code, "PATH_OUTSIDE_WORKSPACE");
    assert_eq!(
        read_message,
        "`link.txt` is outside the workspace: `link.txt` is a symbolic link that leads out of it"
    );
    let write = fixture
        .call(
            &fixture.write(),
            json!({"path": "link.txt", "content": "pwned"}),
        )
        .await;
    assert_eq!(code(write), "PATH_OUTSIDE_WORKSPACE");
    assert_eq!(fixture.tree(), before);
    assert_eq!(
        fs::read_to_string(fixture.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(
        fs::symlink_metadata(fixture.root.join("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link itself was not replaced"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn h_tool_1_symlinked_folder_leading_outside_is_refused() {
    let fixture = Fixture::new().await;
    std::os::unix::fs::symlink(&fixture.outside, fixture.root.join("out")).unwrap();
    let before = fixture.tree();
    for path in ["out/secret.txt", "out/missing.txt", "out"] {
        let read = fixture.call(&fixture.read(), json!({"path": path})).await;
        assert_eq!(code(read), "PATH_OUTSIDE_WORKSPACE", "read {path}");
    }
    for path in ["out/new.txt", "out/deep/er/new.txt", "out/secret.txt"] {
        let write = fixture
            .call(&fixture.write(), json!({"path": path, "content": "pwned"}))
            .await;
        assert_eq!(code(write), "PATH_OUTSIDE_WORKSPACE", "write {path}");
    }
    for path in ["out", "out/deeper"] {
        let list = fixture.call(&fixture.list(), json!({"path": path})).await;
        assert_eq!(code(list), "PATH_OUTSIDE_WORKSPACE", "list {path}");
    }
    assert_eq!(
        fixture.tree(),
        before,
        "nothing was created outside (or inside)"
    );
    assert!(!fixture.outside.join("new.txt").exists());
    assert!(!fixture.outside.join("deep").exists());
    assert_eq!(
        fs::read_to_string(fixture.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn h_tool_1_dangling_symlink_is_not_followed() {
    let fixture = Fixture::new().await;
    let target = fixture.outside.join("not-yet.txt");
    std::os::unix::fs::symlink(&target, fixture.root.join("dangling")).unwrap();
    let write = fixture
        .call(
            &fixture.write(),
            json!({"path": "dangling", "content": "pwned"}),
        )
        .await;
    assert_eq!(code(write), "PATH_OUTSIDE_WORKSPACE");
    let write_below = fixture
        .call(
            &fixture.write(),
            json!({"path": "dangling/x.txt", "content": "pwned"}),
        )
        .await;
    assert_eq!(code(write_below), "PATH_OUTSIDE_WORKSPACE");
    let read = fixture
        .call(&fixture.read(), json!({"path": "dangling"}))
        .await;
    assert_eq!(code(read), "NOT_FOUND");
    assert!(!target.exists());
}

#[cfg(unix)]
#[tokio::test]
async fn h_tool_1_symlinks_that_stay_inside_are_followed() {
    let fixture = Fixture::new().await;
    fs::create_dir(fixture.root.join("docs")).unwrap();
    fs::write(fixture.root.join("docs/a.md"), "alpha").unwrap();
    std::os::unix::fs::symlink(fixture.root.join("docs"), fixture.root.join("alias")).unwrap();
    std::os::unix::fs::symlink("docs/a.md", fixture.root.join("a-link.md")).unwrap();
    let read = fixture
        .call(&fixture.read(), json!({"path": "alias/a.md"}))
        .await;
    assert_eq!(text(read), "alpha");
    let write = fixture
        .call(
            &fixture.write(),
            json!({"path": "a-link.md", "content": "beta"}),
        )
        .await;
    assert_eq!(text(write), "wrote 4 bytes to a-link.md");
    assert_eq!(
        fs::read_to_string(fixture.root.join("docs/a.md")).unwrap(),
        "beta",
        "the write went to the link's target"
    );
    assert!(
        fs::symlink_metadata(fixture.root.join("a-link.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let list = fixture
        .call(&fixture.list(), json!({"path": "alias"}))
        .await;
    assert_eq!(text(list), "a.md");
}

#[tokio::test]
async fn workspace_resolve_answers_canonical_paths() {
    let fixture = Fixture::new().await;
    let workspace = fixture.workspace();
    let root = fs::canonicalize(&fixture.root).unwrap();
    assert_eq!(workspace.root(), root);
    assert_eq!(
        workspace
            .resolve("./new/dir/f.txt", PathPurpose::Write)
            .unwrap(),
        root.join("new/dir/f.txt")
    );
    assert_eq!(
        workspace
            .resolve("new/f.txt", PathPurpose::Read)
            .unwrap_err()
            .code,
        "NOT_FOUND"
    );
    assert_eq!(workspace.resolve(".", PathPurpose::Read).unwrap(), root);
    fs::write(fixture.root.join("file"), "x").unwrap();
    assert_eq!(
        workspace
            .resolve("file/x", PathPurpose::Write)
            .unwrap_err()
            .code,
        "NOT_A_DIRECTORY"
    );
    assert!(Workspace::new(fixture.root.join("file")).is_err());
    assert!(Workspace::new(fixture.root.join("missing")).is_err());
}

// ---------------------------------------------------------------------------------
// write_file

#[tokio::test]
async fn h_tool_1_write_creates_parent_folders() {
    let fixture = Fixture::new().await;
    let write = fixture
        .call(
            &fixture.write(),
            json!({"path": "notes/deep/a.md", "content": "hello world!"}),
        )
        .await;
    assert_eq!(text(write), "wrote 12 bytes to notes/deep/a.md");
    assert_eq!(
        fs::read_to_string(fixture.root.join("notes/deep/a.md")).unwrap(),
        "hello world!"
    );
    let again = fixture
        .call(
            &fixture.write(),
            json!({"path": "./notes//b.md", "content": "é"}),
        )
        .await;
    assert_eq!(
        text(again),
        "wrote 2 bytes to notes/b.md",
        "bytes, normalized path"
    );
    let read = fixture
        .call(&fixture.read(), json!({"path": "notes/b.md"}))
        .await;
    assert_eq!(text(read), "é");
}

#[tokio::test]
async fn h_tool_1_write_is_atomic_and_leaves_no_temporary_files() {
    let fixture = Fixture::new().await;
    for content in ["first version", "second, longer version", ""] {
        let write = fixture
            .call(
                &fixture.write(),
                json!({"path": "n/a.md", "content": content}),
            )
            .await;
        assert_eq!(
            text(write),
            format!("wrote {} bytes to n/a.md", content.len())
        );
        assert_eq!(
            fs::read_to_string(fixture.root.join("n/a.md")).unwrap(),
            content
        );
    }
    // A refused write cleans up after itself too.
    fs::create_dir(fixture.root.join("n/folder")).unwrap();
    let refused = fixture
        .call(
            &fixture.write(),
            json!({"path": "n/folder", "content": "x"}),
        )
        .await;
    assert_eq!(code(refused), "IS_A_DIRECTORY");
    assert_eq!(
        fixture.tree(),
        [
            "outside",
            "outside/secret.txt",
            "root",
            "root/n",
            "root/n/a.md",
            "root/n/folder"
        ]
    );
}

#[cfg(unix)]
#[tokio::test]
async fn write_keeps_the_permissions_of_a_replaced_file() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = Fixture::new().await;
    let script = fixture.root.join("run.sh");
    fs::write(&script, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o750)).unwrap();
    let write = fixture
        .call(
            &fixture.write(),
            json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
        )
        .await;
    assert_eq!(text(write), "wrote 18 bytes to run.sh");
    let mode = fs::metadata(&script).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
}

#[tokio::test]
async fn h_tool_1_write_limits_and_errors() {
    let fixture = Fixture::new().await;
    let limits = FileLimits {
        max_write_bytes: 10,
        ..FileLimits::default()
    };
    let small = WriteFile::new(fixture.workspace(), limits);
    let (too_large, message) = failure(
        fixture
            .call(&small, json!({"path": "big.txt", "content": "01234567890"}))
            .await,
    );
    assert_eq!(too_large, "TOO_LARGE");
    assert_eq!(
        message,
        "content is 11 bytes; write_file writes at most 10 bytes"
    );
    assert!(!fixture.root.join("big.txt").exists());
    let exact = fixture
        .call(&small, json!({"path": "ok.txt", "content": "0123456789"}))
        .await;
    assert_eq!(text(exact), "wrote 10 bytes to ok.txt");

    fs::write(fixture.root.join("file"), "x").unwrap();
    let under_file = fixture
        .call(
            &fixture.write(),
            json!({"path": "file/child.txt", "content": "x"}),
        )
        .await;
    assert_eq!(code(under_file), "NOT_A_DIRECTORY");
    let root = fixture
        .call(&fixture.write(), json!({"path": ".", "content": "x"}))
        .await;
    assert_eq!(code(root), "IS_A_DIRECTORY");

    for bad in [
        json!({"path": "a.txt"}),
        json!({"path": 3, "content": "x"}),
        json!({"content": "x"}),
        json!("a.txt"),
        Value::Null,
    ] {
        let outcome = fixture.call(&fixture.write(), bad.clone()).await;
        assert_eq!(code(outcome), "INVALID_ARGUMENTS", "{bad}");
    }
    assert!(!fixture.root.join("a.txt").exists());
}

// ---------------------------------------------------------------------------------
// read_file

#[tokio::test]
async fn h_tool_1_read_limits_and_errors() {
    let fixture = Fixture::new().await;
    let limits = FileLimits {
        max_read_bytes: 8,
        ..FileLimits::default()
    };
    let small = ReadFile::new(fixture.workspace(), limits);
    fs::write(fixture.root.join("eight.txt"), "12345678").unwrap();
    fs::write(fixture.root.join("nine.txt"), "123456789").unwrap();
    fs::write(fixture.root.join("empty.txt"), "").unwrap();
    fs::write(fixture.root.join("binary.bin"), [b'o', b'k', 0xff, 0xfe]).unwrap();
    fs::create_dir(fixture.root.join("folder")).unwrap();

    assert_eq!(
        text(fixture.call(&small, json!({"path": "eight.txt"})).await),
        "12345678"
    );
    assert_eq!(
        text(fixture.call(&small, json!({"path": "empty.txt"})).await),
        ""
    );
    assert_eq!(
        failure(fixture.call(&small, json!({"path": "nine.txt"})).await),
        (
            "TOO_LARGE".to_owned(),
            "`nine.txt` is 9 bytes; read_file reads files up to 8 bytes".to_owned()
        )
    );
    assert_eq!(
        failure(fixture.call(&small, json!({"path": "binary.bin"})).await),
        (
            "NOT_TEXT".to_owned(),
            "`binary.bin` is not UTF-8 text (invalid byte at offset 2); read_file reads text \
             files only"
                .to_owned()
        )
    );
    assert_eq!(
        failure(
            fixture
                .call(&small, json!({"path": "nope/missing.txt"}))
                .await
        ),
        (
            "NOT_FOUND".to_owned(),
            "`nope/missing.txt` does not exist in the workspace".to_owned()
        )
    );
    assert_eq!(
        code(fixture.call(&small, json!({"path": "folder"})).await),
        "IS_A_DIRECTORY"
    );
    assert_eq!(
        code(fixture.call(&small, json!({"path": "eight.txt/x"})).await),
        "NOT_A_DIRECTORY"
    );
    assert_eq!(
        code(fixture.call(&small, json!({"path": ["eight.txt"]})).await),
        "INVALID_ARGUMENTS"
    );

    // The default limit is 256 KiB.
    let big = "a".repeat(256 * 1024 + 1);
    fs::write(fixture.root.join("big.txt"), &big).unwrap();
    assert_eq!(
        failure(
            fixture
                .call(&fixture.read(), json!({"path": "big.txt"}))
                .await
        )
        .1,
        "`big.txt` is 262145 bytes; read_file reads files up to 256 KiB (262144 bytes)"
    );
    fs::write(fixture.root.join("big.txt"), &big[1..]).unwrap();
    assert_eq!(
        text(
            fixture
                .call(&fixture.read(), json!({"path": "big.txt"}))
                .await
        )
        .len(),
        256 * 1024
    );
}

// ---------------------------------------------------------------------------------
// list_files

#[tokio::test]
async fn h_tool_1_list_sorts_marks_folders_and_caps() {
    let fixture = Fixture::new().await;
    fs::write(fixture.root.join("b.txt"), "").unwrap();
    fs::write(fixture.root.join("A.txt"), "").unwrap();
    fs::create_dir(fixture.root.join("src")).unwrap();
    fs::write(fixture.root.join("src/main.rs"), "").unwrap();
    fs::write(fixture.root.join(".hidden"), "").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("b.txt", fixture.root.join("c-link")).unwrap();

    let all = text(fixture.call(&fixture.list(), json!({})).await);
    #[cfg(unix)]
    assert_eq!(all, ".hidden\nA.txt\nb.txt\nc-link@\nsrc/");
    let explicit = text(fixture.call(&fixture.list(), json!({"path": "."})).await);
    assert_eq!(explicit, all);
    assert_eq!(
        text(fixture.call(&fixture.list(), json!({"path": "src/"})).await),
        "main.rs"
    );

    let capped = ListFiles::new(
        fixture.workspace(),
        FileLimits {
            max_list_entries: 2,
            ..FileLimits::default()
        },
    );
    #[cfg(unix)]
    assert_eq!(
        text(fixture.call(&capped, json!({})).await),
        ".hidden\nA.txt\n(3 more entries not shown; list_files shows at most 2)"
    );

    fs::create_dir(fixture.root.join("empty")).unwrap();
    assert_eq!(
        text(
            fixture
                .call(&fixture.list(), json!({"path": "empty"}))
                .await
        ),
        "(empty folder)"
    );
    assert_eq!(
        code(
            fixture
                .call(&fixture.list(), json!({"path": "b.txt"}))
                .await
        ),
        "NOT_A_DIRECTORY"
    );
    assert_eq!(
        code(
            fixture
                .call(&fixture.list(), json!({"path": "nowhere"}))
                .await
        ),
        "NOT_FOUND"
    );
    assert_eq!(
        code(fixture.call(&fixture.list(), json!({"path": 1})).await),
        "INVALID_ARGUMENTS"
    );
}

#[tokio::test]
async fn h_tool_1_list_caps_at_1000_by_default() {
    let fixture = Fixture::new().await;
    fs::create_dir(fixture.root.join("many")).unwrap();
    for index in 0..1003 {
        fs::write(fixture.root.join(format!("many/f{index:04}")), "").unwrap();
    }
    let listing = text(fixture.call(&fixture.list(), json!({"path": "many"})).await);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 1001);
    assert_eq!(lines[0], "f0000");
    assert_eq!(lines[999], "f0999");
    assert_eq!(
        lines[1000],
        "(3 more entries not shown; list_files shows at most 1000)"
    );
}

// ---------------------------------------------------------------------------------
// Definitions

#[tokio::test]
async fn h_tool_1_builtin_definitions() {
    let fixture = Fixture::new().await;
    let tools = builtin_tools(fixture.workspace(), FileLimits::default());
    let summary: Vec<(String, Concurrency, Value)> = tools
        .iter()
        .map(|tool| {
            let def = tool.def();
            (
                def.spec.name.clone(),
                def.concurrency,
                def.spec.input_schema["required"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "read_file".to_owned(),
                Concurrency::ParallelSafe,
                json!(["path"])
            ),
            (
                "write_file".to_owned(),
                Concurrency::Exclusive,
                json!(["path", "content"])
            ),
            (
                "list_files".to_owned(),
                Concurrency::ParallelSafe,
                json!([])
            ),
            (
                "session_search".to_owned(),
                Concurrency::ParallelSafe,
                json!(["query"])
            ),
        ]
    );
    for tool in &tools {
        let def = tool.def();
        assert_eq!(def.spec.input_schema["type"], "object");
        assert_eq!(def.spec.input_schema["additionalProperties"], false);
        assert!(!def.validates_own_arguments);
        assert!(def.spec.description.len() > 80, "{}", def.spec.name);
    }
    assert!(tools[0].def().spec.description.contains("256 KiB"));
    assert!(tools[1].def().spec.description.contains("1 MiB"));
    assert!(tools[2].def().spec.description.contains("1000 entries"));
    assert!(
        tools[0]
            .def()
            .spec
            .description
            .contains("relative to the workspace root")
    );
}

// ---------------------------------------------------------------------------------
// session_search

fn typed<T: EventData>(data: &T) -> EventDraft {
    EventDraft::typed(data).unwrap()
}

fn user(text: &str) -> EventDraft {
    let mut message = Message::from_blocks(vec![ContentBlock::text(text)]);
    message.source = Some(Source::user());
    typed(&UserMessage { message }).with_surface(SurfaceOp::Append)
}

fn assistant(turn: u32, blocks: Vec<ContentBlock>) -> EventDraft {
    typed(&AssistantMessage {
        turn,
        step: 1,
        call_id: format!("llm-{turn}"),
        provider: "p".into(),
        model: "m".into(),
        message: Message::from_blocks(blocks),
        usage: None,
        finish: "tool-calls".into(),
        interrupted: false,
        stream: vec![],
    })
    .with_surface(SurfaceOp::Append)
}

fn tool_call(id: &str, name: &str, arguments: Value) -> ContentBlock {
    ContentBlock::ToolCall(ToolCallBlock {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: None,
        extra: ccare_core::Extra::new(),
    })
}

fn marker(turn: u32, id: &str, name: &str, arguments: Value) -> EventDraft {
    typed(&ToolCall {
        turn,
        step: 1,
        call_id: id.into(),
        name: name.into(),
        arguments,
        executor: None,
    })
}

fn result(turn: u32, id: &str, text: &str) -> EventDraft {
    let block = ContentBlock::ToolResult(ToolResultBlock {
        call_id: id.into(),
        name: "write_file".into(),
        content: vec![ContentBlock::text(text)],
        is_error: false,
        extra: ccare_core::Extra::new(),
    });
    typed(&ToolResult {
        turn,
        step: 1,
        message: Message::from_blocks(vec![block]),
        error: None,
        meta: None,
        repair: false,
    })
    .with_surface(SurfaceOp::Append)
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// A session with a compacted first turn and a second turn whose step is running
/// `session_search` (call `s1`, query "alpha"). Event times are T0 + seq seconds.
fn compacted_session(fixture: &Fixture) {
    let write_args = json!({"path": "notes/keys.md", "content": "alpha: ALPHA-7731"});
    fixture.append(typed(&TurnStart { turn: 1 })); // 0
    fixture.append(user("Remember: the deploy key for staging is ALPHA-7731.")); // 1
    fixture.append(typed(&StepStart { turn: 1, step: 1 })); // 2
    fixture.append(assistant(
        1,
        vec![
            ContentBlock::text("Noted the Alpha key."),
            tool_call("t1", "write_file", write_args.clone()),
        ],
    )); // 3
    fixture.append(marker(1, "t1", "write_file", write_args)); // 4
    fixture.append(result(1, "t1", "wrote 17 bytes to notes/keys.md")); // 5
    fixture.append(typed(&StepEnd {
        turn: 1,
        step: 1,
        interrupted: false,
        repair: false,
    })); // 6
    fixture.append(typed(&TurnEnd {
        turn: 1,
        reason: TurnEndReason::Completed,
        repair: false,
    })); // 7
    fixture.append(typed(&CompactionStart {
        compaction_id: "k1".into(),
        turn: None,
        trigger: "manual".into(),
    })); // 8
    fixture.append(
        user("Summary: the user shared a staging deploy key.")
            .with_surface(SurfaceOp::Replace {
                start_seq: 1,
                end_seq: 5,
            })
            .with_sources(vec![1, 3, 5]),
    ); // 9
    fixture.append(EventDraft::new(
        kinds::COMPACTION_SUMMARY,
        object(json!({
            "compaction_id": "k1",
            "summary": "The user gave the staging deploy key (see ALPHA in the log).",
            "shadowed_range": [1, 5],
            "shadowed_seqs": [1, 3, 5],
            "shadowed_tokens": 40,
            "provider": "p",
            "model": "m"
        })),
    )); // 10
    fixture.append(typed(&CompactionEnd {
        compaction_id: "k1".into(),
        error: None,
        repair: false,
    })); // 11
    fixture.append(typed(&TurnStart { turn: 2 })); // 12
    fixture.append(user("What was the alpha key?")); // 13
    fixture.append(typed(&StepStart { turn: 2, step: 1 })); // 14
    let search_args = json!({"query": "alpha"});
    fixture.append(assistant(
        2,
        vec![tool_call("s1", "session_search", search_args.clone())],
    )); // 15
    fixture.append(marker(2, "s1", "session_search", search_args)); // 16
}

async fn search(fixture: &Fixture, call_id: &str, arguments: Value) -> ToolOutcome {
    SessionSearch::new()
        .call(fixture.context(call_id), arguments)
        .await
}

#[tokio::test]
async fn h_tool_1_session_search_finds_shadowed_events_newest_first() {
    let fixture = Fixture::new().await;
    compacted_session(&fixture);
    assert_eq!(
        fixture.session.with_log(|log| log.live_seqs()),
        [9, 13, 15],
        "seqs 1, 3 and 5 are shadowed"
    );
    let found = text(search(&fixture, "s1", json!({"query": "alpha"})).await);
    assert_eq!(
        found,
        [
            "seq=13 kind=user/message time=2026-12-01T03:40:18Z What was the alpha key?",
            "seq=10 kind=compaction/summary time=2026-12-01T03:40:15Z The user gave the \
             staging deploy key (see ALPHA in the log).",
            r#"seq=4 kind=tool/call time=2026-12-01T03:40:09Z {"turn":1,"step":1,"call_id":"t1","name":"write_file","arguments":{"path":"notes/keys.md","content":"alpha: ALPHA-7731"}}"#,
            r#"seq=3 kind=assistant/message time=2026-12-01T03:40:08Z [shadowed] Noted the Alpha key. write_file {"path":"notes/keys.md","content":"alpha: ALPHA-7731"}"#,
            "seq=1 kind=user/message time=2026-12-01T03:40:06Z [shadowed] Remember: the deploy \
             key for staging is ALPHA-7731.",
        ]
        .join("\n")
    );
}

#[tokio::test]
async fn h_tool_1_session_search_excludes_the_running_call() {
    let fixture = Fixture::new().await;
    compacted_session(&fixture);
    // The current call (s1): its assistant message (15) and marker (16) are skipped.
    let own = text(search(&fixture, "s1", json!({"query": "session_search"})).await);
    assert_eq!(own, "no events match \"session_search\"");
    // A call id that no assistant message carries skips nothing.
    let stranger = text(search(&fixture, "unknown", json!({"query": "alpha"})).await);
    let first_seqs: Vec<&str> = stranger
        .lines()
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        first_seqs,
        [
            "seq=16", "seq=15", "seq=13", "seq=10", "seq=4", "seq=3", "seq=1"
        ]
    );
}

#[tokio::test]
async fn h_tool_1_session_search_honours_limit() {
    let fixture = Fixture::new().await;
    compacted_session(&fixture);
    let two = text(search(&fixture, "s1", json!({"query": "ALPHA", "limit": 2})).await);
    assert_eq!(
        two.lines().collect::<Vec<_>>(),
        [
            "seq=13 kind=user/message time=2026-12-01T03:40:18Z What was the alpha key?",
            "seq=10 kind=compaction/summary time=2026-12-01T03:40:15Z The user gave the \
             staging deploy key (see ALPHA in the log).",
            "(3 older matching events not shown; raise `limit` (at most 100) to see more)",
        ]
    );
    // Over 100 is clamped, not refused.
    let many = text(search(&fixture, "s1", json!({"query": "alpha", "limit": 5000})).await);
    assert_eq!(many.lines().count(), 5);
    for bad in [
        json!({"query": ""}),
        json!({"query": "   "}),
        json!({"query": "alpha", "limit": 0}),
        json!({"query": "alpha", "limit": "3"}),
        json!({"limit": 3}),
    ] {
        assert_eq!(
            code(search(&fixture, "s1", bad.clone()).await),
            "INVALID_ARGUMENTS",
            "{bad}"
        );
    }
}

#[tokio::test]
async fn h_tool_1_session_search_excerpt_is_centred_and_flattened() {
    let fixture = Fixture::new().await;
    let long = format!(
        "{}\nThe magic word is Xylophone.\n{}",
        "lorem ipsum ".repeat(20),
        "dolor sit amet ".repeat(20)
    );
    fixture.append(typed(&TurnStart { turn: 1 }));
    fixture.append(user(&long));
    let found = text(search(&fixture, "none", json!({"query": "XYLOPHONE"})).await);
    assert_eq!(
        found,
        "seq=1 kind=user/message time=2026-12-01T03:40:06Z …m ipsum lorem ipsum lorem ipsum \
         lorem ipsum lorem ipsum The magic word is Xylophone. dolor sit amet dolor sit amet \
         dolor sit amet dolor sit amet dolor sit amet…"
    );
    // Other event kinds are searched by their raw data JSON.
    let turn = text(search(&fixture, "none", json!({"query": "\"turn\":1"})).await);
    assert_eq!(
        turn,
        r#"seq=0 kind=turn/start time=2026-12-01T03:40:05Z {"turn":1}"#
    );
    assert_eq!(
        text(search(&fixture, "none", json!({"query": "zebra"})).await),
        "no events match \"zebra\""
    );
}
