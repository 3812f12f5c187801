//! The JSONL exchange format (spec H-STORE-8).
//!
//! Line 1 is the header `{"format":"context-care.session","version":1,"id",
//! "created_ms","parent"?,"seed_length"?,"meta"}`; then one envelope per line, each
//! line ending in `\n`. Envelopes are written exactly as stored, so a file the host
//! wrote round-trips byte for byte (export → import → export is identical).

use ccare_core::SessionId;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::LoadError;
use crate::session::SessionHeader;

/// The `format` value of a session file.
pub const FORMAT: &str = "context-care.session";
/// The only version this build reads and writes.
pub const VERSION: u64 = 1;

/// Why an import file was refused. Names the line (1-based) at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The file has no header line.
    #[error("import file is empty")]
    Empty,
    /// The file is not UTF-8.
    #[error("import file is not UTF-8 (byte {offset})")]
    NotUtf8 {
        /// Where decoding failed.
        offset: usize,
    },
    /// The header line is malformed.
    #[error("line 1: invalid session header: {message}")]
    Header {
        /// What is wrong.
        message: String,
    },
    /// The last line lacks its newline: the file was cut short.
    #[error("line {line}: truncated (the file does not end with a newline)")]
    Truncated {
        /// The incomplete line.
        line: usize,
    },
    /// A blank line between events.
    #[error("line {line}: empty line")]
    BlankLine {
        /// The blank line.
        line: usize,
    },
    /// An event line is refused by the same checks a load makes.
    #[error("line {line}: {error}")]
    Event {
        /// The line.
        line: usize,
        /// The refusal.
        error: LoadError,
    },
}

impl ImportError {
    /// The error code.
    pub fn code(&self) -> &'static str {
        match self {
            ImportError::Event { error, .. } => error.code(),
            ImportError::Empty
            | ImportError::NotUtf8 { .. }
            | ImportError::Header { .. }
            | ImportError::Truncated { .. }
            | ImportError::BlankLine { .. } => "MALFORMED_IMPORT",
        }
    }
}

/// Writes the header line (with its newline).
pub fn header_line(header: &SessionHeader) -> String {
    let mut line = String::with_capacity(128 + header.meta_json.len());
    line.push_str("{\"format\":\"");
    line.push_str(FORMAT);
    line.push_str("\",\"version\":");
    line.push_str(&VERSION.to_string());
    line.push_str(",\"id\":\"");
    // Session ids are [A-Za-z0-9_.-]: no escaping needed.
    line.push_str(header.id.as_str());
    line.push_str("\",\"created_ms\":");
    line.push_str(&header.created_ms.to_string());
    if let Some(parent) = &header.parent {
        line.push_str(",\"parent\":\"");
        line.push_str(parent.as_str());
        line.push('"');
    }
    if let Some(seed_length) = header.seed_length {
        line.push_str(",\"seed_length\":");
        line.push_str(&seed_length.to_string());
    }
    line.push_str(",\"meta\":");
    line.push_str(&header.meta_json);
    line.push_str("}\n");
    line
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderLine<'a> {
    format: String,
    version: u64,
    id: SessionId,
    created_ms: i64,
    #[serde(default)]
    parent: Option<SessionId>,
    #[serde(default)]
    seed_length: Option<u64>,
    #[serde(borrow)]
    meta: &'a RawValue,
}

/// A parsed import file: its header (without incarnation) and its event lines.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportFile<'a> {
    /// The session header from line 1.
    pub id: SessionId,
    /// `created_ms` from line 1.
    pub created_ms: i64,
    /// `parent` from line 1.
    pub parent: Option<SessionId>,
    /// `seed_length` from line 1.
    pub seed_length: Option<u64>,
    /// `meta` from line 1, verbatim.
    pub meta_json: &'a str,
    /// The event lines, without their newlines.
    pub lines: Vec<&'a str>,
}

/// Splits and checks the framing of an import file; the events themselves are checked
/// by the replay that follows.
pub fn parse_file(bytes: &[u8]) -> Result<ImportFile<'_>, ImportError> {
    let text = std::str::from_utf8(bytes).map_err(|error| ImportError::NotUtf8 {
        offset: error.valid_up_to(),
    })?;
    if text.is_empty() {
        return Err(ImportError::Empty);
    }
    let mut lines: Vec<&str> = text.split('\n').collect();
    // `split` yields a final "" after the last newline; anything else there was cut short.
    match lines.pop() {
        Some("") => {}
        _ => {
            return Err(ImportError::Truncated {
                line: lines.len() + 1,
            });
        }
    }
    let mut lines = lines
        .into_iter()
        .map(|line| line.strip_suffix('\r').unwrap_or(line));
    let header_text = lines.next().ok_or(ImportError::Empty)?;
    let header: HeaderLine<'_> =
        serde_json::from_str(header_text).map_err(|error| ImportError::Header {
            message: error.to_string(),
        })?;
    if header.format != FORMAT {
        return Err(ImportError::Header {
            message: format!("format must be \"{FORMAT}\", got \"{}\"", header.format),
        });
    }
    if header.version != VERSION {
        return Err(ImportError::Header {
            message: format!(
                "version {} is not supported (this build reads version {VERSION})",
                header.version
            ),
        });
    }
    if !header.meta.get().starts_with('{') {
        return Err(ImportError::Header {
            message: "meta must be an object".to_owned(),
        });
    }
    if let Err(error) = ccare_core::json::check_text(header.meta.get()) {
        return Err(ImportError::Header {
            message: format!("meta: {error}"),
        });
    }
    let lines: Vec<&str> = lines.collect();
    if let Some(blank) = lines.iter().position(|line| line.is_empty()) {
        return Err(ImportError::BlankLine { line: blank + 2 });
    }
    Ok(ImportFile {
        id: header.id,
        created_ms: header.created_ms,
        parent: header.parent,
        seed_length: header.seed_length,
        meta_json: header.meta.get(),
        lines,
    })
}

/// The file line of the event at `seq`.
pub fn line_of_seq(seq: u64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX).saturating_add(2)
}
