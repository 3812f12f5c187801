//! Opening the store `[store]` names and the session engine over it (H-STORE-3..5,
//! H-VAL-3).

use std::sync::Arc;

use ccare_core::{Locale, SystemClock};
use ccare_session::{Registry, Sessions, SessionsConfig};
use ccare_store::{SqliteConfig, SqliteStore, Store};

use crate::config::{Settings, StoreKind};
use crate::error::AppError;

/// Opens the configured store (creating the database's folder if needed).
pub fn open_store(settings: &Settings) -> Result<Arc<dyn Store>, AppError> {
    let store = &settings.store;
    match store.kind {
        StoreKind::Sqlite => {
            if let Some(dir) = store
                .path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).map_err(|source| AppError::DataDir {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            }
            let mut config = SqliteConfig::new(store.path.clone());
            config.commit_window_ms = store.commit_window_ms;
            config.busy_timeout_ms = store.busy_timeout_ms;
            let opened = SqliteStore::open(config).map_err(|source| AppError::OpenStore {
                path: store.path.clone(),
                source,
            })?;
            Ok(Arc::new(opened))
        }
    }
}

/// The session engine over `store` and `registry`, with the config's load policy
/// (`[validators]`), durability (`[store] durability`) and `locale`.
pub fn sessions(
    settings: &Settings,
    store: Arc<dyn Store>,
    registry: Arc<Registry>,
    locale: Locale,
) -> Sessions {
    Sessions::new(
        store,
        Arc::new(SystemClock),
        registry,
        SessionsConfig {
            load: settings.validators.clone(),
            locale,
            durability: settings.store.durability,
        },
    )
}
