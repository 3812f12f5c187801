//! Built-in tools (spec H-TOOL-1): the file tools `read_file`, `write_file` and
//! `list_files`, confined to the [`Workspace`] root (`[agent] workspace`), and
//! `session_search`, which searches the raw session log — shadowed events included —
//! and is the recovery path that handoff notes point to.
//!
//! Every tool fails with a [`ToolFailure`] whose code is one of
//! [`codes`]; a failure becomes an error result for the model and never fails the turn.
//! [`builtin_tools`] returns all four, ready to register.
//!
//! Start reading at `workspace.rs` (how paths are confined and what that does not
//! guarantee), then `files.rs` and `search.rs`.

mod files;
mod search;
mod workspace;

use std::sync::Arc;

use serde_json::{Map, Value};

pub use files::{FileLimits, ListFiles, ReadFile, WriteFile};
pub use search::SessionSearch;
pub use workspace::{PathPurpose, Workspace};

use crate::tool::{Tool, ToolFailure};

/// The failure codes of the built-in tools; part of the contract (H-GEN-3).
pub mod codes {
    /// An argument is missing, mistyped or out of range.
    pub const INVALID_ARGUMENTS: &str = "INVALID_ARGUMENTS";
    /// The path is absolute, has `..`, or leads outside the workspace through a link.
    pub const PATH_OUTSIDE_WORKSPACE: &str = "PATH_OUTSIDE_WORKSPACE";
    /// The path does not exist.
    pub const NOT_FOUND: &str = "NOT_FOUND";
    /// A file was expected and the path is a folder.
    pub const IS_A_DIRECTORY: &str = "IS_A_DIRECTORY";
    /// A folder was expected and the path (or one of its parents) is a file.
    pub const NOT_A_DIRECTORY: &str = "NOT_A_DIRECTORY";
    /// A file or content is over the tool's size limit.
    pub const TOO_LARGE: &str = "TOO_LARGE";
    /// The file is not UTF-8 text.
    pub const NOT_TEXT: &str = "NOT_TEXT";
    /// The operating system refused access.
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    /// Any other I/O failure; the message carries the system's text.
    pub const IO_ERROR: &str = "IO_ERROR";
    /// The turn was cancelled while the tool ran.
    pub const CANCELLED: &str = "CANCELLED";
    /// The tool body failed unexpectedly (e.g. its worker thread panicked).
    pub const INTERNAL: &str = "INTERNAL";
}

/// The built-in tools that act on the host's own workspace. A session driven from
/// elsewhere (the gateway's clients, GW-4) does not get them: its files are the
/// client's, and its agent may declare tools of these names itself.
pub const WORKSPACE_TOOLS: [&str; 3] = [ReadFile::NAME, WriteFile::NAME, ListFiles::NAME];

/// The four built-in tools: `read_file`, `write_file`, `list_files` (confined to
/// `workspace`, bounded by `limits`) and `session_search`.
pub fn builtin_tools(workspace: Workspace, limits: FileLimits) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile::new(workspace.clone(), limits.clone())),
        Arc::new(WriteFile::new(workspace.clone(), limits.clone())),
        Arc::new(ListFiles::new(workspace, limits)),
        Arc::new(SessionSearch::new()),
    ]
}

/// The arguments object, or `INVALID_ARGUMENTS`.
fn object_arguments(arguments: &Value) -> Result<&Map<String, Value>, ToolFailure> {
    arguments.as_object().ok_or_else(|| {
        ToolFailure::new(
            codes::INVALID_ARGUMENTS,
            "the arguments must be a JSON object",
        )
    })
}

/// A required string field.
fn required_string<'a>(
    arguments: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a str, ToolFailure> {
    match arguments.get(field) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(ToolFailure::new(
            codes::INVALID_ARGUMENTS,
            format!("`{field}` must be a string"),
        )),
        None => Err(ToolFailure::new(
            codes::INVALID_ARGUMENTS,
            format!("`{field}` is required"),
        )),
    }
}

/// An optional string field (`null` counts as absent).
fn optional_string<'a>(
    arguments: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ToolFailure> {
    match arguments.get(field) {
        Some(Value::String(text)) => Ok(Some(text)),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(ToolFailure::new(
            codes::INVALID_ARGUMENTS,
            format!("`{field}` must be a string"),
        )),
    }
}

/// A byte count as a model reads it: `256 KiB`, `1 MiB`, or `1234 bytes`.
fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// A limit as a model reads it: `256 KiB (262144 bytes)`, or `10 bytes`.
fn limit_text(bytes: u64) -> String {
    let human = human_bytes(bytes);
    if human.ends_with(" bytes") {
        human
    } else {
        format!("{human} ({bytes} bytes)")
    }
}

/// Runs blocking work on tokio's blocking pool; a panic there becomes `INTERNAL`.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) => Err(ToolFailure::new(
            codes::INTERNAL,
            format!("the tool's worker failed: {error}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(256 * 1024), "256 KiB");
        assert_eq!(human_bytes(1024 * 1024), "1 MiB");
        assert_eq!(human_bytes(1500), "1500 bytes");
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(limit_text(256 * 1024), "256 KiB (262144 bytes)");
        assert_eq!(limit_text(10), "10 bytes");
    }
}
