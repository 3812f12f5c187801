//! Why a test composition could not be built.

use ccare_llm::ConfigError;
use ccare_llm::script::ScriptError;
use ccare_session::SessionError;
use ccare_store::StoreError;

/// Why [`super::TestHostBuilder::build`] or a [`super::TestHost`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// The temporary directory could not be created.
    #[error("test kit: temporary directory: {0}")]
    TempDir(#[from] std::io::Error),
    /// The SQLite file could not be opened.
    #[error("test kit: store: {0}")]
    Store(#[from] StoreError),
    /// The script is not valid JSONL replies.
    #[error("test kit: script {0}")]
    Script(#[from] ScriptError),
    /// The LLM configuration was refused.
    #[error("test kit: llm config: {0}")]
    Config(#[from] ConfigError),
    /// A session could not be created or opened.
    #[error("test kit: session: {0}")]
    Session(#[from] SessionError),
    /// The host was built over a store of its own, not a SQLite file to reopen.
    #[error("test kit: the host's store is not a SQLite file")]
    NoFile,
}
