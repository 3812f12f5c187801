//! Path confinement for the file tools: every path the model names is relative to the
//! workspace root (`[agent] workspace`) and must stay inside it (spec H-TOOL-1).
//!
//! [`Workspace::resolve`] checks a path in two stages:
//!
//! 1. **Lexically**, with no I/O: the path must be non-empty, free of NUL, relative (no
//!    leading `/` or `\`, no Windows drive or UNC prefix) and contain no `..` component
//!    (split on `/` and on `\`, so a path means the same on every platform). `.`
//!    components are dropped.
//! 2. **On disk**: the deepest part of the path that exists is canonicalized (every
//!    symbolic link in it followed) and must still lie under the canonical root. So a
//!    symlinked folder or file that points outside is refused, whether the tool reads
//!    through it or creates something below it. A symbolic link whose target does not
//!    exist cannot be proven to stay inside and is refused too.
//!
//! # What this is not
//!
//! This is confinement for a cooperative model, not a sandbox. Between the check and the
//! use of a path another process could swap a folder for a symbolic link (a TOCTOU
//! race). The tools narrow that window: they never create links themselves; a read
//! verifies, on Linux, where the opened file really is (`/proc/self/fd`) before reading
//! it; a write creates its temporary file with `create_new` (`O_CREAT|O_EXCL`, which
//! never follows a link), verifies that file's real location the same way, checks right
//! before the rename that the destination is not a link, and `rename` replaces a link
//! at the destination rather than following it. What remains is a folder swapped after
//! that last check and before the rename or the listing of a folder; closing it needs
//! `openat`/`renameat` with `O_NOFOLLOW` on directory handles, which std does not offer
//! without `unsafe` or another dependency. Run the agent in a container or under a
//! separate user when the workspace is shared with untrusted processes.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::tool::ToolFailure;
use crate::tools::codes;

/// What a resolved path is for; it decides how a path that does not exist is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathPurpose {
    /// Reading or listing: the path must exist (else `NOT_FOUND`).
    Read,
    /// Writing: the path may be created, with any missing parent folders.
    Write,
}

/// The root folder the file tools are confined to; cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: Arc<PathBuf>,
}

/// A path checked on disk: the deepest existing part, canonical and inside the root,
/// and the components below it that do not exist yet.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The canonical path of the deepest existing part.
    pub(crate) existing: PathBuf,
    /// The components below `existing` that do not exist (empty when the whole path does).
    pub(crate) missing: Vec<OsString>,
    /// The path as the model should read it back: normalized, `/`-separated.
    pub(crate) shown: String,
}

impl Resolved {
    /// The full path: `existing` joined with every missing component.
    pub(crate) fn full(&self) -> PathBuf {
        let mut path = self.existing.clone();
        path.extend(&self.missing);
        path
    }
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing folder; it is
    /// canonicalized once, here.
    pub fn new(root: PathBuf) -> Result<Workspace, io::Error> {
        let root = fs::canonicalize(&root).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("workspace root {}: {error}", root.display()),
            )
        })?;
        if !fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace root {} is not a folder", root.display()),
            ));
        }
        Ok(Workspace {
            root: Arc::new(root),
        })
    }

    /// The canonical root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a model-supplied relative path to an absolute path inside the root, or
    /// refuses it with `PATH_OUTSIDE_WORKSPACE` (see the module docs for the rules).
    ///
    /// An existing path comes back canonical (links inside the workspace followed).
    /// A path that does not exist fails with `NOT_FOUND` for [`PathPurpose::Read`]; for
    /// [`PathPurpose::Write`] it comes back as the canonical deepest existing folder
    /// joined with the missing components. A component that is a file where a folder
    /// is needed fails with `NOT_A_DIRECTORY`.
    pub fn resolve(&self, path: &str, purpose: PathPurpose) -> Result<PathBuf, ToolFailure> {
        self.resolve_detailed(path, purpose)
            .map(|resolved| resolved.full())
    }

    pub(crate) fn resolve_detailed(
        &self,
        path: &str,
        purpose: PathPurpose,
    ) -> Result<Resolved, ToolFailure> {
        let parts = lexical_parts(path)?;
        let shown = if parts.is_empty() {
            ".".to_owned()
        } else {
            parts.join("/")
        };
        // Find the deepest prefix that exists (as an entry: a dangling link exists).
        let mut found = None;
        for depth in (0..=parts.len()).rev() {
            let mut candidate = self.root.to_path_buf();
            candidate.extend(&parts[..depth]);
            match fs::symlink_metadata(&candidate) {
                Ok(metadata) => {
                    found = Some((depth, candidate, metadata));
                    break;
                }
                Err(error) if is_absent(&error) && depth > 0 => continue,
                Err(error) => return Err(io_failure(&shown, &error)),
            }
        }
        let Some((depth, candidate, metadata)) = found else {
            return Err(ToolFailure::new(
                codes::IO_ERROR,
                format!("the workspace root {} is gone", self.root.display()),
            ));
        };
        let existing_shown = if depth == 0 {
            ".".to_owned()
        } else {
            parts[..depth].join("/")
        };
        let existing = match fs::canonicalize(&candidate) {
            Ok(existing) => existing,
            Err(error) if metadata.file_type().is_symlink() => {
                return Err(dangling_link(&shown, &existing_shown, purpose, &error));
            }
            Err(error) => return Err(io_failure(&shown, &error)),
        };
        if !existing.starts_with(self.root.as_path()) {
            return Err(ToolFailure::new(
                codes::PATH_OUTSIDE_WORKSPACE,
                format!(
                    "`{shown}` is outside the workspace: `{existing_shown}` is a symbolic link \
                     that leads out of it"
                ),
            ));
        }
        let missing: Vec<OsString> = parts[depth..].iter().map(OsString::from).collect();
        if !missing.is_empty() {
            let is_dir = fs::metadata(&existing)
                .map(|metadata| metadata.is_dir())
                .map_err(|error| io_failure(&shown, &error))?;
            if !is_dir {
                return Err(ToolFailure::new(
                    codes::NOT_A_DIRECTORY,
                    format!(
                        "`{existing_shown}` is a file, not a folder, so `{shown}` cannot exist"
                    ),
                ));
            }
            if purpose == PathPurpose::Read {
                return Err(ToolFailure::new(
                    codes::NOT_FOUND,
                    format!("`{shown}` does not exist in the workspace"),
                ));
            }
        }
        Ok(Resolved {
            existing,
            missing,
            shown,
        })
    }

    /// Checks that `path` (canonical or not) is inside the root right now.
    pub(crate) fn check_inside(&self, path: &Path, shown: &str) -> Result<PathBuf, ToolFailure> {
        let canonical = fs::canonicalize(path).map_err(|error| io_failure(shown, &error))?;
        if canonical.starts_with(self.root.as_path()) {
            Ok(canonical)
        } else {
            Err(moved_outside(shown))
        }
    }

    /// Verifies where an opened file really is, closing the race between
    /// [`Workspace::resolve`] and the open. On Linux this reads `/proc/self/fd`; where
    /// that is unavailable the check is skipped (see the module docs).
    pub(crate) fn verify_open(&self, file: &File, shown: &str) -> Result<(), ToolFailure> {
        match opened_path(file) {
            Some(real) if !real.starts_with(self.root.as_path()) => Err(moved_outside(shown)),
            Some(_) | None => Ok(()),
        }
    }
}

#[cfg(target_os = "linux")]
fn opened_path(file: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

#[cfg(not(target_os = "linux"))]
fn opened_path(_file: &File) -> Option<PathBuf> {
    None
}

/// Splits a path into its normal components, refusing anything that is not a plain
/// relative path.
fn lexical_parts(path: &str) -> Result<Vec<&str>, ToolFailure> {
    let refuse = |reason: &str| {
        Err(ToolFailure::new(
            codes::PATH_OUTSIDE_WORKSPACE,
            format!("`{path}` is refused: {reason}; use a path relative to the workspace root"),
        ))
    };
    if path.is_empty() {
        return refuse("the path is empty");
    }
    if path.contains('\0') {
        return refuse("the path contains a NUL character");
    }
    if path.starts_with('/') || path.starts_with('\\') {
        return refuse("absolute paths are not allowed");
    }
    let bytes = path.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return refuse("Windows drive prefixes are not allowed");
    }
    let mut parts = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return refuse("`..` components are not allowed"),
            part => parts.push(part),
        }
    }
    Ok(parts)
}

fn is_absent(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn dangling_link(shown: &str, link: &str, purpose: PathPurpose, error: &io::Error) -> ToolFailure {
    match purpose {
        PathPurpose::Read => ToolFailure::new(
            codes::NOT_FOUND,
            format!(
                "`{shown}` does not exist: `{link}` is a symbolic link that cannot be followed ({error})"
            ),
        ),
        PathPurpose::Write => ToolFailure::new(
            codes::PATH_OUTSIDE_WORKSPACE,
            format!(
                "`{shown}` is refused: `{link}` is a symbolic link that cannot be followed \
                 ({error}), so the write cannot be proven to stay inside the workspace"
            ),
        ),
    }
}

fn moved_outside(shown: &str) -> ToolFailure {
    ToolFailure::new(
        codes::PATH_OUTSIDE_WORKSPACE,
        format!("`{shown}` now leads outside the workspace (it changed while the tool ran)"),
    )
}

/// An I/O error as a tool failure, with the codes the model can act on.
pub(crate) fn io_failure(shown: &str, error: &io::Error) -> ToolFailure {
    match error.kind() {
        io::ErrorKind::NotFound => ToolFailure::new(
            codes::NOT_FOUND,
            format!("`{shown}` does not exist in the workspace"),
        ),
        io::ErrorKind::NotADirectory => ToolFailure::new(
            codes::NOT_A_DIRECTORY,
            format!("a part of `{shown}` is a file, not a folder"),
        ),
        io::ErrorKind::IsADirectory => ToolFailure::new(
            codes::IS_A_DIRECTORY,
            format!("`{shown}` is a folder, not a file"),
        ),
        io::ErrorKind::PermissionDenied => ToolFailure::new(
            codes::PERMISSION_DENIED,
            format!("`{shown}`: permission denied"),
        ),
        _ => ToolFailure::new(codes::IO_ERROR, format!("`{shown}`: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(path: &str) -> Option<String> {
        lexical_parts(path).err().map(|failure| failure.code)
    }

    #[test]
    fn lexical_rules() {
        for bad in [
            "",
            "/etc/passwd",
            "\\x",
            "..",
            "../x",
            "a/../../x",
            "a/..",
            "C:x",
            "c:\\x",
            "a\\..\\b",
            "a\0b",
        ] {
            assert_eq!(
                code_of(bad).as_deref(),
                Some("PATH_OUTSIDE_WORKSPACE"),
                "{bad:?}"
            );
        }
        assert_eq!(
            lexical_parts("./a//b/./c.txt").ok(),
            Some(vec!["a", "b", "c.txt"])
        );
        assert_eq!(lexical_parts(".").ok(), Some(vec![]));
        assert_eq!(lexical_parts("a..b/...").ok(), Some(vec!["a..b", "..."]));
    }

    #[test]
    fn messages_name_the_path_and_reason() {
        let failure = lexical_parts("a/../../x").err();
        assert_eq!(
            failure.map(|failure| failure.message).as_deref(),
            Some(
                "`a/../../x` is refused: `..` components are not allowed; use a path relative \
                 to the workspace root"
            )
        );
    }
}
