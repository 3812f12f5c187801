//! Crash children for the tests that need a real `kill -9`: this test binary re-executed
//! to run one `*_child_entry` test (a no-op unless its environment variable is set),
//! read until it prints a marker line, then killed with SIGKILL — no destructor, no
//! flush, no drain of the store's writer.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the test `entry` (`module::name`) of this binary with `envs`, waits up to 60 s
/// for a stdout line containing `marker`, waits `delay` more, SIGKILLs the child and
/// returns what followed the marker on its line (trimmed). Panics with the child's
/// output when it never printed the marker.
pub(crate) fn kill_at_marker(
    entry: &str,
    envs: &[(&str, &OsStr)],
    marker: &str,
    delay: Duration,
) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in envs {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let found = loop {
        match received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            // The harness may have printed "test <entry> ... " before it on the line.
            Ok(line) => match line.split_once(marker) {
                Some((_, rest)) => break Some(rest.trim().to_owned()),
                None => seen.push(line),
            },
            Err(_) => break None,
        }
    };
    if found.is_some() {
        std::thread::sleep(delay);
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let Some(found) = found else {
        panic!(
            "the child {entry} never printed {marker} ({status}); stdout:\n{}\nstderr:\n{}",
            seen.join("\n"),
            errors.join().unwrap_or_default()
        );
    };
    assert!(!status.success(), "the child was killed, not finished");
    found
}
