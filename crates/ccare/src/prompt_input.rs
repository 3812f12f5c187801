//! Where `ccare run` takes its prompt from: `--prompt TEXT`, `--prompt -` (stdin) or
//! `--prompt-file FILE`, so a prompt longer than one argument may be (Linux caps an
//! argument at 128 KiB) still gets in. The text is taken as given, final newline
//! included; anything that is not UTF-8 is refused naming the source and the offset
//! of the first bad byte.

use std::io::{IsTerminal as _, Read as _};
use std::path::Path;

use crate::Failure;

/// The prompt text, or bad input (exit 2) naming what could not be read.
pub(crate) fn resolve(prompt: Option<String>, file: Option<&Path>) -> Result<String, Failure> {
    match (prompt, file) {
        (Some(text), None) if text == "-" => from_stdin(),
        (Some(text), None) => Ok(text),
        (None, Some(path)) => from_file(path),
        // clap's argument group makes exactly one of them present.
        _ => Err(Failure::bad_input(anyhow::anyhow!(
            "give the prompt with exactly one of --prompt TEXT, --prompt - or --prompt-file FILE"
        ))),
    }
}

fn from_stdin() -> Result<String, Failure> {
    let mut stdin = std::io::stdin().lock();
    if stdin.is_terminal() {
        eprintln!("reading the prompt from stdin until end of input (Ctrl-D)");
    }
    let mut bytes = Vec::new();
    stdin.read_to_end(&mut bytes).map_err(|error| {
        Failure::bad_input(anyhow::anyhow!("--prompt -: cannot read stdin: {error}"))
    })?;
    utf8(bytes).map_err(|offset| {
        Failure::bad_input(anyhow::anyhow!(
            "--prompt -: stdin is not valid UTF-8 (invalid byte at offset {offset})"
        ))
    })
}

fn from_file(path: &Path) -> Result<String, Failure> {
    let bytes = std::fs::read(path).map_err(|error| {
        Failure::bad_input(anyhow::anyhow!(
            "--prompt-file {}: cannot read it: {error}",
            path.display()
        ))
    })?;
    utf8(bytes).map_err(|offset| {
        Failure::bad_input(anyhow::anyhow!(
            "--prompt-file {}: not valid UTF-8 (invalid byte at offset {offset})",
            path.display()
        ))
    })
}

/// The text, or the byte offset of the first byte that is not UTF-8.
fn utf8(bytes: Vec<u8>) -> Result<String, usize> {
    String::from_utf8(bytes).map_err(|error| error.utf8_error().valid_up_to())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_names_the_first_bad_byte() {
        assert_eq!(utf8(b"caf\xc3\xa9".to_vec()), Ok("café".to_owned()));
        assert_eq!(utf8(b"caf\xc3\xa9 \xff!".to_vec()), Err(6));
        assert_eq!(utf8(b"\xc3".to_vec()), Err(0), "a cut sequence at the end");
    }
}
