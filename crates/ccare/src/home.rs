//! Where data lives: `--home`, else `$CCARE_HOME`, else `./.ccare`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use ccare_core::{Locale, SystemClock};
use ccare_session::{Registry, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore};

/// The resolved data directory.
pub(crate) struct Home {
    pub(crate) dir: PathBuf,
}

impl Home {
    pub(crate) fn resolve(flag: Option<&Path>) -> anyhow::Result<Self> {
        let dir = match flag {
            Some(dir) => dir.to_path_buf(),
            None => match std::env::var_os("CCARE_HOME") {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => PathBuf::from(".ccare"),
            },
        };
        Ok(Self { dir })
    }

    /// The SQLite file.
    pub(crate) fn database(&self) -> PathBuf {
        self.dir.join("ccare.db")
    }

    /// Opens the store and the session engine (creating the directory if needed).
    pub(crate) fn sessions(&self) -> anyhow::Result<Sessions> {
        self.sessions_with(Arc::new(Registry::with_host_defaults()), Locale::default())
    }

    /// Opens the store and the session engine over `registry`, so plugin event types
    /// and validators registered there apply.
    pub(crate) fn sessions_with(
        &self,
        registry: Arc<Registry>,
        locale: Locale,
    ) -> anyhow::Result<Sessions> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create data directory {}", self.dir.display()))?;
        let store = SqliteStore::open(SqliteConfig::new(self.database()))
            .with_context(|| format!("cannot open store {}", self.database().display()))?;
        Ok(Sessions::new(
            Arc::new(store),
            Arc::new(SystemClock),
            registry,
            SessionsConfig {
                locale,
                ..SessionsConfig::default()
            },
        ))
    }
}
