//! Where data lives: `--home`, else `$CCARE_HOME`, else `./.ccare`.

use std::path::{Path, PathBuf};

/// The resolved data directory: the default database, the installed tokenizer, the
/// demo's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    /// The directory (it may not exist yet; the store creates it).
    pub dir: PathBuf,
}

impl Home {
    /// `flag`, else `$CCARE_HOME` (when set and not empty), else `./.ccare`.
    pub fn resolve(flag: Option<&Path>) -> Self {
        let dir = match (flag, std::env::var_os("CCARE_HOME")) {
            (Some(dir), _) => dir.to_path_buf(),
            (None, Some(dir)) if !dir.is_empty() => PathBuf::from(dir),
            (None, _) => PathBuf::from(".ccare"),
        };
        Self { dir }
    }

    /// As [`Home::resolve`], reading the environment through `env`.
    pub fn resolve_with(flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let dir = match flag {
            Some(dir) => dir.to_path_buf(),
            None => match env("CCARE_HOME") {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => PathBuf::from(".ccare"),
            },
        };
        Self { dir }
    }

    /// The default SQLite file, `ccare.db` in the directory (`[store] path` overrides).
    pub fn database(&self) -> PathBuf {
        self.dir.join("ccare.db")
    }
}
