//! This process as a lease names it (host name, pid, start time), and whether the
//! process a lease names on this machine still exists (ACT-1: a dead holder on the
//! same host is taken over at once).
//!
//! Linux answers from `/proc`: `/proc/<pid>/stat` gone, or its state a zombie, means
//! dead; its start time (field 22, clock ticks after boot) differing from the one the
//! lease recorded means the pid was reused by another process, so the holder is dead
//! too. Elsewhere liveness is unknown and the lease is only taken over when it expires.

use std::path::Path;
use std::sync::OnceLock;

/// Whether a lease's process is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It runs (or a process with its pid and start time does).
    Alive,
    /// It does not exist any more (or its pid now belongs to another process).
    Dead,
    /// This platform cannot tell.
    Unknown,
}

/// The name of this machine: the kernel's host name, else `$HOSTNAME`, else
/// `$COMPUTERNAME`, else `localhost`. Read once per process (every new session's lease
/// names it; a rename while the process runs is not followed).
pub(crate) fn host_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(read_host_name).clone()
}

fn read_host_name() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    [
        kernel,
        std::env::var("HOSTNAME").ok(),
        std::env::var("COMPUTERNAME").ok(),
    ]
    .into_iter()
    .flatten()
    .map(|name| name.trim().to_owned())
    .find(|name| !name.is_empty())
    .unwrap_or_else(|| "localhost".to_owned())
}

/// This process's start time as [`process_start`] reads it (once: it never changes).
pub(crate) fn own_start() -> Option<u64> {
    static START: OnceLock<Option<u64>> = OnceLock::new();
    *START.get_or_init(|| process_start(std::process::id()))
}

/// A process's start time (clock ticks after boot), where the platform tells.
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(stat_path(pid)).ok()?;
    parse_stat(&stat).map(|(_, start)| start)
}

/// Whether the process `pid` that started at `start` (when recorded) still runs.
pub(crate) fn liveness(pid: u32, start: Option<u64>) -> Liveness {
    if !Path::new("/proc/self/stat").exists() {
        return Liveness::Unknown;
    }
    let stat = match std::fs::read_to_string(stat_path(pid)) {
        Ok(stat) => stat,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Liveness::Dead,
        Err(_) => return Liveness::Unknown,
    };
    match parse_stat(&stat) {
        None => Liveness::Unknown,
        // A zombie (killed, not yet reaped) or a dead task runs nothing any more.
        Some((state, _)) if state == 'Z' || state == 'X' => Liveness::Dead,
        Some((_, running_since)) if start.is_some_and(|start| start != running_since) => {
            Liveness::Dead
        }
        Some(_) => Liveness::Alive,
    }
}

fn stat_path(pid: u32) -> String {
    format!("/proc/{pid}/stat")
}

/// The state letter and the start time of a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces or `)`, so fields are counted from
/// the last `)`: state is field 3, start time field 22.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_state_and_start_time_past_a_tricky_command_name() {
        let stat = "4242 (we) ird (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615";
        assert_eq!(parse_stat(stat), Some(('S', 987_654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let pid = std::process::id();
        let start = own_start();
        assert!(start.is_some());
        assert_eq!(liveness(pid, start), Liveness::Alive);
        assert_eq!(liveness(pid, None), Liveness::Alive);
        assert_eq!(liveness(pid, start.map(|start| start + 1)), Liveness::Dead);
        // Beyond any pid_max.
        assert_eq!(liveness(u32::MAX, None), Liveness::Dead);
        assert!(!host_name().is_empty());
    }
}
