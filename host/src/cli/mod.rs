//! The `sandloop` command line: argument parsing and dispatch. Each command
//! lives in its own file and only wires library pieces together.

pub mod args;
mod compile_notice;
pub mod counterfactual;
pub mod diagnostics;
pub mod finished_run;
pub mod inspect;
mod interrupt;
pub mod loop_cmd;
pub mod manual;
pub mod nats_cmd;
pub mod new_cmd;
pub mod plan;
pub mod replay;
pub mod report;
pub mod run;
mod run_distributed;
pub mod try_cmd;
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

impl From<crate::finished_run::OfflineError> for CliError {
    /// Bad input exits 2; a failed read or write of the run's files, or a
    /// failure to run what was planned, 1.
    fn from(error: crate::finished_run::OfflineError) -> Self {
        match error {
            crate::finished_run::OfflineError::Input(message) => CliError::Input(message),
            crate::finished_run::OfflineError::Io(message)
            | crate::finished_run::OfflineError::Failed(message) => CliError::Failed(message),
        }
    }
}

impl From<LoadError> for CliError {
    fn from(error: LoadError) -> Self {
        crate::launch::LaunchError::from(error).into()
    }
}

impl From<crate::launch::LaunchError> for CliError {
    /// Refused before anything was written: exit 2; else 1.
    fn from(error: crate::launch::LaunchError) -> Self {
        match error {
            crate::launch::LaunchError::Refused(message) => CliError::Input(message),
            other => CliError::Failed(other.to_string()),
        }
    }
}

impl From<sandloop_core::atomic::OutputFileError> for CliError {
    /// A path refused for what it is (a link, a FIFO) is bad input; a file
    /// that could not be written fails the command.
    fn from(error: sandloop_core::atomic::OutputFileError) -> Self {
        if error.is_refusal() {
            CliError::Input(error.to_string())
        } else {
            CliError::Failed(error.to_string())
        }
    }
}

/// Write `text` and a newline to stdout through [`write_stdout`], with
/// control characters escaped ([`sandloop_core::terminal::for_terminal`]:
/// what the CLI prints may hold adapter, plugin, model or coordinator text).
pub(crate) fn say(text: &str) {
    write_stdout(format!("{}\n", for_terminal(text)).as_bytes());
}

/// Write `bytes` to stdout and flush: every write of the CLI to stdout
/// goes through here. A closed pipe (`EPIPE`: `| head`) ends the process
/// quietly with exit code 0; any other failure (`> /dev/full`) ends it with
/// exit code 1 and `error: cannot write to stdout: …` on stderr, so output
/// is never lost silently.
pub(crate) fn write_stdout(bytes: &[u8]) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        stdout_failed(&error);
    }
}

/// End the process after a failed write to stdout, as [`write_stdout`]
/// says: quietly with 0 on a closed pipe, else 1 with the error on stderr.
fn stdout_failed(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    complain("error: ", &format!("cannot write to stdout: {error}"));
    std::process::exit(1);
}

/// Write `error: MESSAGE` (or another `prefix`) to stderr, with control
/// characters escaped as [`say`] escapes them. A stderr that cannot be
/// written (a closed pipe) is ignored: there is nowhere left to say so.
pub(crate) fn complain(prefix: &str, message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{prefix}{}", for_terminal(message));
}

/// `text` as one POSIX shell word: as it is when it holds only characters
/// no shell treats specially, else single-quoted.
pub(crate) fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Refuse a `--cache-dir` that exists as anything but a directory: the
/// cache would be skipped without a word (a cache that cannot be written
/// otherwise never fails a command).
///
/// # Errors
/// [`CliError::Input`] naming the flag and the path.
pub(crate) fn check_cache_flag(dir: Option<&std::path::Path>) -> Result<(), CliError> {
    match dir {
        Some(dir) if std::fs::metadata(dir).is_ok_and(|meta| !meta.is_dir()) => {
            Err(CliError::Input(format!(
                "--cache-dir {}: not a directory (compiled components are kept in one)",
                dir.display()
            )))
        }
        _ => Ok(()),
    }
}

/// Start the engine for `config` ([`crate::launch::inputs::open_engine`]).
pub(crate) fn open_sandbox(
    config: SandboxConfig,
) -> Result<(Arc<SandboxEngine>, Arc<SandboxConfig>), CliError> {
    crate::launch::inputs::open_engine(config).map_err(CliError::Input)
}

/// Raise this process's soft limit of open files to its hard limit, as
/// servers do: every instance may hold `--max-open-files` descriptors of
/// its own, on top of the run's files. Nothing changes where the limit
/// cannot be raised.
fn raise_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// Parse the process arguments, run the command, and return the exit code:
/// 0 success, 1 the run failed, 2 bad usage or bad input.
pub fn main() -> i32 {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if error.use_stderr() => {
            let _ = error.print();
            return 2;
        }
        // --help, --version: to stdout, checked as every other write.
        Err(error) => {
            if let Err(failure) = error.print() {
                stdout_failed(&failure);
            }
            write_stdout(&[]);
            return 0;
        }
    };
    diagnostics::init();
    raise_open_file_limit();
    let result = match cli.command {
        args::Command::Run(args) => run::run(*args),
        args::Command::Try(args) => try_cmd::try_items(args),
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
        args::Command::Nats(command) => nats_cmd::run(command),
    };
    // The final flush: what is still buffered is checked too.
    write_stdout(&[]);
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

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("/tmp/x/demo-adapter"), "/tmp/x/demo-adapter");
        assert_eq!(shell_word("/tmp/my dir"), "'/tmp/my dir'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
