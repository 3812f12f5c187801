//! Where the server's bearer token comes from (server.md §2, H-HTTP-2/3): the env var
//! `[http] token_env` names, else `$CCARE_HOME/http-token`, generated (mode 0600) at
//! the first start and reused after. A non-loopback address needs a configured token:
//! a generated one was never chosen by anyone, so the server would be open to whoever
//! reads the file or the terminal.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ccare_app::config::HttpSettings;

use super::auth::{Token, random_secret};
use super::error::ServerError;

/// The file name of the generated token under `$CCARE_HOME`.
pub const TOKEN_FILE: &str = "http-token";

/// Where the token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// The env var `[http] token_env` names.
    Env(String),
    /// The token file an earlier start generated.
    File(PathBuf),
    /// Generated now and stored in this file: print it once.
    Generated(PathBuf),
}

impl TokenSource {
    /// Whether someone configured the token (`[http] token_env`).
    pub fn is_configured(&self) -> bool {
        matches!(self, TokenSource::Env(_))
    }
}

/// The token for serving `http` on `addr` with data in `home`; `env` reads the
/// environment. A non-loopback `addr` without `[http] token_env` is
/// [`ServerError::NonLoopbackWithoutToken`], checked before any file is written.
pub fn resolve_token(
    http: &HttpSettings,
    addr: SocketAddr,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Token, TokenSource), ServerError> {
    if let Some(name) = &http.token_env {
        let value = env(name)
            .map(|value| value.trim().to_owned())
            .unwrap_or_default();
        if value.is_empty() {
            return Err(ServerError::TokenEnvUnset { var: name.clone() });
        }
        return Ok((Token::new(value), TokenSource::Env(name.clone())));
    }
    if !addr.ip().is_loopback() {
        return Err(ServerError::NonLoopbackWithoutToken { addr });
    }
    let path = home.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => {
            return Ok((Token::new(text.trim()), TokenSource::File(path)));
        }
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(ServerError::TokenFile { path, error }),
    }
    let secret = random_secret().map_err(|error| ServerError::Random(error.to_string()))?;
    write_private(&path, &secret).map_err(|error| ServerError::TokenFile {
        path: path.clone(),
        error,
    })?;
    Ok((Token::new(secret), TokenSource::Generated(path)))
}

/// Writes `secret` to `path`, readable by the owner only, replacing an empty file.
fn write_private(path: &Path, secret: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    {
        // An existing (empty) file keeps its mode on open: set it.
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(format!("{secret}\n").as_bytes())?;
    file.sync_all()
}
