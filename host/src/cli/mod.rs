//! The `sandloop` command line: argument parsing and dispatch. Each command
//! lives in its own file and only wires library pieces together.

pub mod args;
pub mod counterfactual;
pub mod diagnostics;
pub mod finished_run;
pub mod inspect;
pub mod loop_cmd;
pub mod loop_templates;
pub mod manual;
pub mod new_cmd;
pub mod plan;
pub mod replay;
pub mod report;
pub mod run;
mod run_distributed;
pub mod worker;

use std::sync::Arc;

use clap::Parser;
use sandloop_core::terminal::for_terminal;

use crate::sandbox::{LoadError, SandboxConfig, SandboxEngine};

/// A command's failure, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or bad input: exit code 2.
    #[error("{0}")]
    Input(String),
    /// The run itself failed (fatal policy, I/O while running): exit code 1.
    #[error("{0}")]
    Failed(String),
}

impl From<crate::coordinator::state_store::StateStoreError> for CliError {
    fn from(error: crate::coordinator::state_store::StateStoreError) -> Self {
        CliError::Failed(error.to_string())
    }
}

impl From<LoadError> for CliError {
    fn from(error: LoadError) -> Self {
        match error {
            LoadError::Engine(message) => CliError::Failed(message),
            other => CliError::Input(other.to_string()),
        }
    }
}

/// Write `text` and a newline to stdout, with control characters escaped
/// ([`sandloop_core::terminal::for_terminal`]: what the CLI prints may
/// hold adapter, plugin, model or coordinator text); a closed pipe
/// (`| head`) ends the process quietly instead of panicking.
pub(crate) fn say(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{}", for_terminal(text)).is_err() {
        std::process::exit(0);
    }
}

/// Write `error: MESSAGE` (or another `prefix`) to stderr, with control
/// characters escaped as [`say`] escapes them.
pub(crate) fn complain(prefix: &str, message: &str) {
    eprintln!("{prefix}{}", for_terminal(message));
}

/// Start the engine for `config`.
pub(crate) fn open_sandbox(
    config: SandboxConfig,
) -> Result<(Arc<SandboxEngine>, Arc<SandboxConfig>), CliError> {
    let engine = SandboxEngine::new(&config).map_err(|error| {
        CliError::Input(format!(
            "could not start the wasmtime engine with these limits (try a smaller \
             --max-memory or fewer --workers): {error:#}"
        ))
    })?;
    Ok((Arc::new(engine), Arc::new(config)))
}

/// Raise this process's soft limit of open files to its hard limit, as
/// servers do: every instance may hold `--max-open-files` descriptors of
/// its own, on top of the run's files. Nothing changes where the limit
/// cannot be raised.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the `rlimit` passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Parse the process arguments, run the command, and return the exit code:
/// 0 success, 1 the run failed, 2 bad usage or bad input.
pub fn main() -> i32 {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { 2 } else { 0 };
            let _ = error.print();
            return code;
        }
    };
    diagnostics::init();
    raise_open_file_limit();
    let result = match cli.command {
        args::Command::Run(args) => run::run(*args),
        args::Command::Inspect(args) => inspect::inspect(args),
        args::Command::Replay(args) => replay::replay(args),
        args::Command::Counterfactual(args) => counterfactual::counterfactual(args),
        args::Command::Plan(args) => plan::plan(args),
        args::Command::Report(args) => report::report(args),
        args::Command::Loop(command) => loop_cmd::run(command),
        args::Command::New(command) => new_cmd::run(command),
        args::Command::Completions(args) => manual::completions(&args),
        args::Command::Man(args) => manual::man(&args),
        args::Command::Worker(args) => worker::worker(args),
    };
    match result {
        Ok(()) => 0,
        Err(CliError::Input(message)) => {
            complain("error: ", &message);
            2
        }
        Err(CliError::Failed(message)) => {
            complain("error: ", &message);
            1
        }
    }
}
