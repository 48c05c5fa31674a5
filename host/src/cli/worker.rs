//! `sandloop worker`: the flags, then [`crate::distributed::run_worker`]
//! until the process is stopped.

use super::CliError;
use super::args::WorkerArgs;
use crate::distributed::{NatsTarget, WorkerConfig, run_worker};
use crate::sandbox::DirGrant;

/// Run the `worker` command (exit 2 on bad flags, 1 when the server cannot
/// be used).
pub fn worker(args: WorkerArgs) -> Result<(), CliError> {
    if args.lanes == 0 {
        return Err(CliError::Input("--lanes must be at least 1".into()));
    }
    let offers = DirGrant::parse_all(&args.dirs).map_err(CliError::Input)?;
    super::run::check_env_names(&args.env)?;
    let cache_dir = args
        .cache_dir
        .or_else(crate::sandbox::config::default_cache_dir)
        .unwrap_or_else(|| std::env::temp_dir().join("sandloop-worker"));
    let name = args.name.unwrap_or_else(default_name);
    if name.is_empty() {
        return Err(CliError::Input("--name must not be empty".into()));
    }
    run_worker(WorkerConfig {
        target: NatsTarget {
            url: args.nats,
            creds: args.nats_creds,
        },
        name,
        lanes: args.lanes,
        offers,
        env: args.env,
        cache_dir,
    })
    .map_err(CliError::Failed)
}

/// `HOST-PID`: the machine's host name and this process's id.
fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}
