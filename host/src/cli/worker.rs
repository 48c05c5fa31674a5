//! `sandloop worker`: the flags, then [`crate::distributed::run_worker`]
//! until the process is stopped; Ctrl-C or `SIGTERM` removes the worker's
//! scratch directory and exits 130 (units it had not acked are delivered
//! again once their ack wait passes).

use super::CliError;
use super::args::WorkerArgs;
use crate::distributed::default_name;
use crate::distributed::{NatsTarget, Scratch, WorkerConfig, run_worker};
use crate::sandbox::DirGrant;

/// Run the `worker` command (exit 2 on bad flags, 1 when the cache or the
/// server cannot be used).
pub fn worker(args: WorkerArgs) -> Result<(), CliError> {
    WorkerConfig::check_lanes(args.lanes).map_err(CliError::Input)?;
    let offers = DirGrant::parse_all(&args.dirs).map_err(CliError::Input)?;
    let env = super::run::checked_env_names(&args.env, |name| {
        tracing::warn!(
            "--env {name}: not set in this worker's environment, so the units it runs will \
             not see it"
        );
    })?;
    crate::distributed::transport::check_url(&args.nats).map_err(CliError::Input)?;
    let mut config = WorkerConfig {
        target: NatsTarget {
            url: args.nats,
            creds: args.nats_creds,
        },
        name: args.name.unwrap_or_else(default_name),
        lanes: args.lanes,
        offers,
        env,
        cache_dir: args
            .cache_dir
            .or_else(crate::sandbox::config::default_cache_dir)
            .unwrap_or_else(|| std::env::temp_dir().join("sandloop-worker")),
        scratch_dir: std::path::PathBuf::new(),
        connect_timeout: std::time::Duration::from_secs(args.connect_timeout),
    };
    config.check_cache().map_err(CliError::Failed)?;
    config.check().map_err(CliError::Input)?;
    let scratch = Scratch::create().map_err(|error| {
        CliError::Failed(format!(
            "a scratch directory in {} cannot be made ({error}); set TMPDIR to a writable \
             directory",
            std::env::temp_dir().display()
        ))
    })?;
    config.scratch_dir = scratch.path().to_owned();
    stop_on_signal(scratch.path().to_owned());
    run_worker(config).map_err(CliError::Failed)
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
