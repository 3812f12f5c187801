//! Whether a stream gets colour: only a terminal does, and `NO_COLOR` turns it off
//! everywhere (<https://no-color.org>), so logs written to a file or a pipe carry no
//! escape codes.

use std::ffi::OsStr;
use std::io::IsTerminal as _;

/// Colour for a stream that `is_terminal` (or not), given the value of `NO_COLOR`:
/// set to anything but the empty string, it wins.
pub(crate) fn colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Colour on stderr, for this process.
pub(crate) fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(true, Some(OsStr::new("0"))), "any value disables");
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new("1"))));
    }
}
