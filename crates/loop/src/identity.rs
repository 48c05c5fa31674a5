//! Who a worker is and whether it still runs (loopy-loop 0.3+
//! `worker_identity`), and the attempt ids that fence a task's reports
//! (loopy-loop 0.4+ `_new_attempt_id`).
//!
//! A worker sends its [`WorkerIdentity`] on every `/register` and
//! `/finished`; the coordinator keeps it with the task it hands out. When a
//! task's worker runs on the coordinator's own host and its process is gone
//! (the pid is dead or was reused: its start time differs), the task is
//! taken back at the next `/register` without waiting for its lease.

use super::models::WorkerIdentity;

/// Hex digits of an attempt id (loopy-loop's `uuid4().hex[:12]`).
pub const ATTEMPT_ID_HEX_DIGITS: usize = 12;

/// A new attempt id: 12 lowercase hex digits from the OS's random source.
pub fn new_attempt_id() -> String {
    let mut bytes = [0u8; ATTEMPT_ID_HEX_DIGITS / 2];
    if getrandom::getrandom(&mut bytes).is_err() {
        // No OS randomness: time and a counter still tell attempts apart
        // within this process, which is all an attempt id must do.
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mixed = nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(40);
        bytes.copy_from_slice(&mixed.to_le_bytes()[..ATTEMPT_ID_HEX_DIGITS / 2]);
    }
    hex::encode(bytes)
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else
/// `$HOSTNAME`, else `"localhost"`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "localhost".into())
}

/// What `/proc/PID/stat` says of process `pid`: its state letter (`Z`
/// for a zombie) and its start time in loopy-loop's form,
/// `linux:<boot_id>:<start ticks>`. `Err(())` when `/proc` cannot tell
/// (no boot id), `Ok(None)` when there is no such process.
fn proc_stat(pid: u32) -> Result<Option<(String, String)>, ()> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(|_| ())?;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Ok(None);
    };
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after its closing parenthesis. Field 3 is the state,
    // field 22 the start time (the 20th after the parenthesis).
    let mut fields = stat[stat.rfind(')').ok_or(())? + 1..].split_whitespace();
    let state = fields.next().ok_or(())?.to_string();
    let ticks = fields.nth(18).ok_or(())?;
    Ok(Some((state, format!("linux:{}:{ticks}", boot_id.trim()))))
}

/// The start time of process `pid` in loopy-loop's form,
/// `linux:<boot_id>:<start ticks>`; `None` where `/proc` cannot tell.
pub fn process_starttime(pid: u32) -> Option<String> {
    proc_stat(pid).ok().flatten().map(|(_, started)| started)
}

/// This process's identity.
pub fn current() -> WorkerIdentity {
    let pid = std::process::id();
    WorkerIdentity {
        hostname: hostname(),
        pid,
        starttime: process_starttime(pid),
    }
}

/// Whether the process `worker` names is known to be gone: it ran on this
/// host, said when it started, and no process with that pid and start time
/// exists now (a zombie counts as gone). `false` when that cannot be told
/// (another host, no start time), as loopy-loop's `is_worker_alive`
/// answers "unknown".
pub fn is_gone(worker: &WorkerIdentity) -> bool {
    let Some(started) = &worker.starttime else {
        return false;
    };
    if worker.hostname != hostname() || !started.starts_with("linux:") {
        return false;
    }
    match proc_stat(worker.pid) {
        // This host cannot tell.
        Err(()) => false,
        Ok(None) => true,
        // Another process now has the pid, or ours is a zombie.
        Ok(Some((state, now))) => now != *started || state == "Z",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_ids_are_twelve_hex_digits_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_attempt_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| {
            id.len() == 12
                && id
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        }));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_live_process_is_not_gone_and_an_ended_or_reused_one_is() {
        let me = current();
        assert!(
            me.starttime
                .as_deref()
                .is_some_and(|s| s.starts_with("linux:"))
        );
        assert!(!is_gone(&me));

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = process_starttime(pid);
        child.wait().unwrap();
        let ended = WorkerIdentity {
            hostname: hostname(),
            pid,
            starttime: started,
        };
        assert!(is_gone(&ended));

        // Same pid, another start time: a reused pid.
        let reused = WorkerIdentity {
            starttime: Some("linux:other-boot:1".into()),
            ..me.clone()
        };
        assert!(is_gone(&reused));
        // What cannot be told is not gone.
        for unknown in [
            WorkerIdentity {
                starttime: None,
                ..ended.clone()
            },
            WorkerIdentity {
                hostname: "elsewhere.example".into(),
                ..ended.clone()
            },
        ] {
            assert!(!is_gone(&unknown), "{unknown:?}");
        }
    }
}
