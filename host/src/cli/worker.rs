//! `sandloop worker`: the flags, then [`crate::distributed::run_worker`]
//! until the process is stopped; Ctrl-C or `SIGTERM` removes the worker's
//! scratch directory and exits 130 (units it had not acked are delivered
//! again once their ack wait passes).

use super::CliError;
use super::args::WorkerArgs;
use crate::distributed::{NatsTarget, Scratch, WorkerConfig, run_worker};
use crate::sandbox::DirGrant;

/// Most lanes one worker runs.
const MAX_LANES: usize = 256;

/// Run the `worker` command (exit 2 on bad flags, 1 when the server cannot
/// be used).
pub fn worker(args: WorkerArgs) -> Result<(), CliError> {
    if !(1..=MAX_LANES).contains(&args.lanes) {
        return Err(CliError::Input(format!(
            "--lanes must be from 1 to {MAX_LANES} (the lanes of all workers together wait on one \
             JetStream consumer, which takes 512 waiting pulls by default)"
        )));
    }
    let offers = DirGrant::parse_all(&args.dirs).map_err(CliError::Input)?;
    let env = super::run::checked_env_names(&args.env, |name| {
        tracing::warn!(
            "--env {name}: not set in this worker's environment, so the units it runs will \
             not see it"
        );
    })?;
    let cache_dir = args
        .cache_dir
        .or_else(crate::sandbox::config::default_cache_dir)
        .unwrap_or_else(|| std::env::temp_dir().join("sandloop-worker"));
    crate::distributed::transport::check_url(&args.nats).map_err(CliError::Input)?;
    check_cache_dir(&cache_dir)?;
    let name = args.name.unwrap_or_else(default_name);
    if name.is_empty() {
        return Err(CliError::Input("--name must not be empty".into()));
    }
    let scratch = Scratch::create().map_err(|error| {
        CliError::Failed(format!(
            "a scratch directory in {} cannot be made ({error}); set TMPDIR to a writable \
             directory",
            std::env::temp_dir().display()
        ))
    })?;
    stop_on_signal(scratch.path().to_owned());
    run_worker(WorkerConfig {
        target: NatsTarget {
            url: args.nats,
            creds: args.nats_creds,
        },
        name,
        lanes: args.lanes,
        offers,
        env,
        cache_dir,
        scratch_dir: scratch.path().to_owned(),
        connect_timeout: std::time::Duration::from_secs(args.connect_timeout),
    })
    .map_err(CliError::Failed)
}

/// On Ctrl-C or `SIGTERM`: remove `scratch` (the replay points not yet
/// shipped go with it; their units are delivered again) and exit 130.
fn stop_on_signal(scratch: std::path::PathBuf) {
    super::interrupt::on_interrupt(move || {
        let _ = std::fs::remove_dir_all(&scratch);
        super::complain(
            "\n",
            "worker stopped: the units it had not finished are delivered again",
        );
        std::process::exit(130);
    });
}

/// Refuses (exit 1) a cache directory this worker cannot write: every unit
/// would be handed back for ever.
fn check_cache_dir(cache_dir: &std::path::Path) -> Result<(), CliError> {
    let components = cache_dir.join("components");
    let probe = components.join(format!(".write-check-{}", std::process::id()));
    std::fs::create_dir_all(&components)
        .and_then(|()| std::fs::File::create(&probe))
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|error| {
            CliError::Failed(format!(
                "the cache directory {} cannot be written ({error}); give --cache-dir a \
                 writable directory",
                cache_dir.display()
            ))
        })
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
