//! `ccare context status`: a fresh context-care sample of a session, for people.

use std::io::Write as _;

use crate::Failure;
use crate::boot::Booted;

/// The note printed after the report: the sample changed nothing.
pub(crate) const NOTHING_APPENDED: &str = "(sampled now; nothing was appended to the session)";

/// Prints the report of `session` (exit 2 when context-care is not configured or the
/// session does not exist).
pub(crate) async fn status(booted: &Booted, session: &str, json: bool) -> Result<(), Failure> {
    let Some(care) = &booted.care else {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "context-care is not mounted: add a [plugins.context-care] table to ccare.toml"
        )));
    };
    let session = booted.session(Some(session)).await?;
    let report = match care.report(&session).await {
        Some(report) => report.map_err(Failure::failed)?,
        None => {
            return Err(Failure::failed(anyhow::anyhow!(
                "context-care was configured but not mounted"
            )));
        }
    };
    let mut stdout = std::io::stdout().lock();
    if json {
        let value = serde_json::to_string(&report).map_err(Failure::failed)?;
        writeln!(stdout, "{value}").map_err(Failure::failed)?;
    } else {
        writeln!(stdout, "session      {}", session.id()).map_err(Failure::failed)?;
        for line in ccare_care::report::render_report(&report) {
            writeln!(stdout, "{line}").map_err(Failure::failed)?;
        }
        writeln!(stdout, "{NOTHING_APPENDED}").map_err(Failure::failed)?;
    }
    stdout.flush().map_err(Failure::failed)
}
