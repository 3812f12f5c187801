//! `read_file`, `write_file` and `list_files`: text files in the workspace, within size
//! limits (spec H-TOOL-1).
//!
//! Each tool resolves its path with [`Workspace::resolve`] and does its file I/O on
//! tokio's blocking pool. A write is atomic: the content goes to a fresh temporary file
//! in the destination folder, which is flushed to disk and then renamed over the
//! destination, so a reader sees the old file or the new one, never half of it. A
//! crash between the two steps can leave a `.ccare-write-*.tmp` file behind.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ccare_core::ContentBlock;
use ccare_llm::ToolSpec;
use serde_json::{Value, json};

use crate::tool::{BoxFuture, Concurrency, Tool, ToolContext, ToolDef, ToolFailure, ToolOutcome};
use crate::tools::workspace::{PathPurpose, Resolved, Workspace, io_failure};
use crate::tools::{
    codes, human_bytes, limit_text, object_arguments, optional_string, required_string,
    run_blocking,
};

/// Size limits of the file tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLimits {
    /// The largest file `read_file` returns, in bytes (default 256 KiB).
    pub max_read_bytes: u64,
    /// The largest `content` `write_file` accepts, in bytes of UTF-8 (default 1 MiB).
    pub max_write_bytes: u64,
    /// The most entries `list_files` shows (default 1000); the rest are counted.
    pub max_list_entries: usize,
}

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_read_bytes: 256 * 1024,
            max_write_bytes: 1024 * 1024,
            max_list_entries: 1000,
        }
    }
}

/// `read_file {path}`: returns a UTF-8 text file of the workspace as one text block.
///
/// Fails with `NOT_FOUND`, `IS_A_DIRECTORY`, `TOO_LARGE` (over
/// [`FileLimits::max_read_bytes`]), `NOT_TEXT` (not UTF-8, or not a regular file) or
/// `PATH_OUTSIDE_WORKSPACE`. Parallel-safe.
#[derive(Debug, Clone)]
pub struct ReadFile {
    workspace: Workspace,
    max_bytes: u64,
    def: ToolDef,
}

impl ReadFile {
    /// The tool name.
    pub const NAME: &'static str = "read_file";

    /// `read_file` over `workspace`, bounded by `limits.max_read_bytes`.
    pub fn new(workspace: Workspace, limits: FileLimits) -> Self {
        let description = format!(
            "Read a text file from the workspace and return its whole content. `path` is \
             relative to the workspace root (e.g. `src/main.rs`); absolute paths, `..` and \
             symbolic links that lead outside the workspace are refused. Files over {} and \
             files that are not UTF-8 text are refused. Use list_files to find files.",
            human_bytes(limits.max_read_bytes)
        );
        let input_schema = json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File path relative to the workspace root, e.g. `notes/todo.md`."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        });
        Self {
            workspace,
            max_bytes: limits.max_read_bytes,
            def: tool_def(
                Self::NAME,
                description,
                input_schema,
                Concurrency::ParallelSafe,
            ),
        }
    }
}

impl Tool for ReadFile {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let workspace = self.workspace.clone();
        let max_bytes = self.max_bytes;
        Box::pin(async move {
            let path = required_string(object_arguments(&arguments)?, "path")?.to_owned();
            let text = run_blocking(move || read_text(&workspace, &path, max_bytes)).await?;
            Ok(vec![ContentBlock::text(text)])
        })
    }
}

/// `write_file {path, content}`: creates or replaces a text file of the workspace,
/// creating missing parent folders; answers `wrote N bytes to PATH`.
///
/// Fails with `TOO_LARGE` (over [`FileLimits::max_write_bytes`]), `IS_A_DIRECTORY`,
/// `NOT_A_DIRECTORY` (a parent is a file) or `PATH_OUTSIDE_WORKSPACE`. Exclusive.
#[derive(Debug, Clone)]
pub struct WriteFile {
    workspace: Workspace,
    max_bytes: u64,
    def: ToolDef,
}

impl WriteFile {
    /// The tool name.
    pub const NAME: &'static str = "write_file";

    /// `write_file` over `workspace`, bounded by `limits.max_write_bytes`.
    pub fn new(workspace: Workspace, limits: FileLimits) -> Self {
        let description = format!(
            "Create or overwrite a text file in the workspace with `content` (the whole new \
             file, UTF-8). Missing parent folders are created. `path` is relative to the \
             workspace root; absolute paths, `..` and symbolic links that lead outside the \
             workspace are refused. Content over {} is refused. The write is atomic: the \
             file holds either its old content or the new content.",
            human_bytes(limits.max_write_bytes)
        );
        let input_schema = json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File path relative to the workspace root, e.g. `notes/todo.md`."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        });
        Self {
            workspace,
            max_bytes: limits.max_write_bytes,
            def: tool_def(
                Self::NAME,
                description,
                input_schema,
                Concurrency::Exclusive,
            ),
        }
    }
}

impl Tool for WriteFile {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let workspace = self.workspace.clone();
        let max_bytes = self.max_bytes;
        Box::pin(async move {
            let arguments = object_arguments(&arguments)?;
            let path = required_string(arguments, "path")?.to_owned();
            let content = required_string(arguments, "content")?.to_owned();
            let size = content.len() as u64;
            if size > max_bytes {
                return Err(ToolFailure::new(
                    codes::TOO_LARGE,
                    format!(
                        "content is {size} bytes; write_file writes at most {}",
                        limit_text(max_bytes)
                    ),
                ));
            }
            let shown =
                run_blocking(move || write_atomically(&workspace, &path, content.as_bytes()))
                    .await?;
            Ok(vec![ContentBlock::text(format!(
                "wrote {size} bytes to {shown}"
            ))])
        })
    }
}

/// `list_files {path?}`: the entries of a workspace folder (default: the root), sorted
/// by name, one per line; folders end with `/`, symbolic links with `@`.
///
/// Shows at most [`FileLimits::max_list_entries`] entries and then a line counting the
/// rest. Fails with `NOT_FOUND`, `NOT_A_DIRECTORY` or `PATH_OUTSIDE_WORKSPACE`.
/// Parallel-safe.
#[derive(Debug, Clone)]
pub struct ListFiles {
    workspace: Workspace,
    max_entries: usize,
    def: ToolDef,
}

impl ListFiles {
    /// The tool name.
    pub const NAME: &'static str = "list_files";

    /// `list_files` over `workspace`, bounded by `limits.max_list_entries`.
    pub fn new(workspace: Workspace, limits: FileLimits) -> Self {
        let description = format!(
            "List the entries of a folder in the workspace, sorted by name, one per line. \
             Folders end with `/` and symbolic links with `@`. `path` is relative to the \
             workspace root and defaults to the root itself (`.`); absolute paths, `..` and \
             symbolic links that lead outside the workspace are refused. At most {} entries \
             are shown; a last line says how many more there are.",
            limits.max_list_entries
        );
        let input_schema = json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Folder path relative to the workspace root; `.` (the default) is the root."
                }
            },
            "required": [],
            "additionalProperties": false
        });
        Self {
            workspace,
            max_entries: limits.max_list_entries,
            def: tool_def(
                Self::NAME,
                description,
                input_schema,
                Concurrency::ParallelSafe,
            ),
        }
    }
}

impl Tool for ListFiles {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn call(&self, _context: ToolContext, arguments: Value) -> BoxFuture<'static, ToolOutcome> {
        let workspace = self.workspace.clone();
        let max_entries = self.max_entries;
        Box::pin(async move {
            let path = optional_string(object_arguments(&arguments)?, "path")?
                .unwrap_or(".")
                .to_owned();
            let text = run_blocking(move || list_folder(&workspace, &path, max_entries)).await?;
            Ok(vec![ContentBlock::text(text)])
        })
    }
}

fn tool_def(
    name: &str,
    description: String,
    input_schema: Value,
    concurrency: Concurrency,
) -> ToolDef {
    ToolDef {
        spec: ToolSpec {
            name: name.to_owned(),
            description: description.into(),
            input_schema: input_schema.into(),
        },
        concurrency,
        timeout_ms: None,
        validates_own_arguments: false,
    }
}

fn read_text(workspace: &Workspace, path: &str, max_bytes: u64) -> Result<String, ToolFailure> {
    let resolved = workspace.resolve_detailed(path, PathPurpose::Read)?;
    let shown = resolved.shown.as_str();
    let full = resolved.full();
    let metadata = fs::metadata(&full).map_err(|error| io_failure(shown, &error))?;
    if metadata.is_dir() {
        return Err(ToolFailure::new(
            codes::IS_A_DIRECTORY,
            format!("`{shown}` is a folder, not a file; use list_files to see what it holds"),
        ));
    }
    if !metadata.is_file() {
        return Err(ToolFailure::new(
            codes::NOT_TEXT,
            format!("`{shown}` is not a regular file (a device, socket or pipe)"),
        ));
    }
    let too_large = |size: String| {
        ToolFailure::new(
            codes::TOO_LARGE,
            format!(
                "`{shown}` is {size}; read_file reads files up to {}",
                limit_text(max_bytes)
            ),
        )
    };
    if metadata.len() > max_bytes {
        return Err(too_large(format!("{} bytes", metadata.len())));
    }
    let file = File::open(&full).map_err(|error| io_failure(shown, &error))?;
    workspace.verify_open(&file, shown)?;
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| io_failure(shown, &error))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(format!("more than {max_bytes} bytes")));
    }
    String::from_utf8(bytes).map_err(|error| {
        ToolFailure::new(
            codes::NOT_TEXT,
            format!(
                "`{shown}` is not UTF-8 text (invalid byte at offset {}); read_file reads text \
                 files only",
                error.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Writes `content` to `path` through a temporary file and a rename; returns the
/// normalized path for the answer.
fn write_atomically(
    workspace: &Workspace,
    path: &str,
    content: &[u8],
) -> Result<String, ToolFailure> {
    let resolved = workspace.resolve_detailed(path, PathPurpose::Write)?;
    let shown = resolved.shown.clone();
    let (folder, destination, permissions) = prepare_destination(workspace, &resolved)?;
    let temporary = folder.join(format!(
        ".ccare-write-{}.tmp",
        uuid::Uuid::new_v4().simple()
    ));
    let result = write_temporary(workspace, &temporary, &shown, content, permissions)
        .and_then(|()| check_destination(&destination, &shown))
        .and_then(|()| fs::rename(&temporary, &destination).map_err(|e| io_failure(&shown, &e)));
    if result.is_err() {
        // Best effort: the temporary file may not exist, and its removal changes nothing
        // the model can act on.
        let _ = fs::remove_file(&temporary);
    }
    result.map(|()| shown)
}

/// Creates the missing folders (each checked to stay inside the root) and returns the
/// destination's folder, the destination, and the permissions to keep when replacing a
/// file.
fn prepare_destination(
    workspace: &Workspace,
    resolved: &Resolved,
) -> Result<(PathBuf, PathBuf, Option<Permissions>), ToolFailure> {
    let shown = resolved.shown.as_str();
    let Some((file_name, folders)) = resolved.missing.split_last() else {
        // The whole path exists: replace it if it is a file.
        let destination = resolved.existing.clone();
        let metadata = fs::metadata(&destination).map_err(|error| io_failure(shown, &error))?;
        if metadata.is_dir() {
            return Err(ToolFailure::new(
                codes::IS_A_DIRECTORY,
                format!("`{shown}` is a folder; write_file writes files only"),
            ));
        }
        let folder = destination.parent().map(Path::to_path_buf).ok_or_else(|| {
            ToolFailure::new(
                codes::IS_A_DIRECTORY,
                format!("`{shown}` is a folder; write_file writes files only"),
            )
        })?;
        return Ok((folder, destination, Some(metadata.permissions())));
    };
    let mut folder = resolved.existing.clone();
    for name in folders {
        let next = folder.join(name);
        match fs::create_dir(&next) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(io_failure(shown, &error)),
        }
        folder = workspace.check_inside(&next, shown)?;
        let is_dir = fs::metadata(&folder).is_ok_and(|metadata| metadata.is_dir());
        if !is_dir {
            return Err(ToolFailure::new(
                codes::NOT_A_DIRECTORY,
                format!("a part of `{shown}` is a file, not a folder"),
            ));
        }
    }
    let destination = folder.join(file_name);
    Ok((folder, destination, None))
}

fn write_temporary(
    workspace: &Workspace,
    temporary: &Path,
    shown: &str,
    content: &[u8],
    permissions: Option<Permissions>,
) -> Result<(), ToolFailure> {
    // `create_new` is O_CREAT|O_EXCL: it never follows a link at the temporary name.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temporary)
        .map_err(|error| io_failure(shown, &error))?;
    workspace.verify_open(&file, shown)?;
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|error| io_failure(shown, &error))?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)
            .map_err(|error| io_failure(shown, &error))?;
    }
    Ok(())
}

/// Right before the rename: the destination must not have become a link or a folder.
fn check_destination(destination: &Path, shown: &str) -> Result<(), ToolFailure> {
    match fs::symlink_metadata(destination) {
        Ok(metadata) if metadata.file_type().is_symlink() => Err(ToolFailure::new(
            codes::PATH_OUTSIDE_WORKSPACE,
            format!("`{shown}` became a symbolic link while the tool ran; refusing to write"),
        )),
        Ok(metadata) if metadata.is_dir() => Err(ToolFailure::new(
            codes::IS_A_DIRECTORY,
            format!("`{shown}` is a folder; write_file writes files only"),
        )),
        Ok(_) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_failure(shown, &error)),
    }
}

fn list_folder(
    workspace: &Workspace,
    path: &str,
    max_entries: usize,
) -> Result<String, ToolFailure> {
    let resolved = workspace.resolve_detailed(path, PathPurpose::Read)?;
    let shown = resolved.shown.as_str();
    let full = resolved.full();
    let metadata = fs::metadata(&full).map_err(|error| io_failure(shown, &error))?;
    if !metadata.is_dir() {
        return Err(ToolFailure::new(
            codes::NOT_A_DIRECTORY,
            format!("`{shown}` is a file, not a folder; use read_file to read it"),
        ));
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(&full).map_err(|error| io_failure(shown, &error))? {
        let entry = entry.map_err(|error| io_failure(shown, &error))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let suffix = match entry.file_type() {
            Ok(kind) if kind.is_symlink() => "@",
            Ok(kind) if kind.is_dir() => "/",
            Ok(_) | Err(_) => "",
        };
        entries.push((name, suffix));
    }
    if entries.is_empty() {
        return Ok("(empty folder)".to_owned());
    }
    entries.sort();
    let omitted = entries.len().saturating_sub(max_entries);
    let mut lines: Vec<String> = entries
        .into_iter()
        .take(max_entries)
        .map(|(name, suffix)| format!("{name}{suffix}"))
        .collect();
    if omitted > 0 {
        lines.push(format!(
            "({omitted} more entries not shown; list_files shows at most {max_entries})"
        ));
    }
    Ok(lines.join("\n"))
}
